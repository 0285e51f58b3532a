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

# Telemetry (pure parts; the samplers are in accelnet.devices.samplers).
from accelnet.devices.history import (
    Downsampler,
    FieldStats,
    HistoryBucket,
    coarsen,
    downsample,
)
from accelnet.devices.telemetry import (
    DeviceSample,
    Sampler,
    SampleRing,
    SamplerUnavailableError,
)

__all__ += [
    "DeviceSample",
    "Downsampler",
    "FieldStats",
    "HistoryBucket",
    "SampleRing",
    "Sampler",
    "SamplerUnavailableError",
    "coarsen",
    "downsample",
]
