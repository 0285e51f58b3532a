"""Accelerator node management: the device lifecycle (pure); samplers and health come later."""

from accelnet.devices.lifecycle import DEVICE_TRANSITIONS, DeviceState

__all__ = ["DEVICE_TRANSITIONS", "DeviceState"]
