"""Accelerator node management: the device lifecycle (pure); samplers and health come later."""

from accelnet.devices.lifecycle import (
    DEVICE_TRANSITIONS,
    Device,
    DeviceState,
    allocate,
    drain,
    fail,
    recover,
    refreshed,
    release,
)

__all__ = [
    "DEVICE_TRANSITIONS",
    "Device",
    "DeviceState",
    "allocate",
    "drain",
    "fail",
    "recover",
    "refreshed",
    "release",
]
