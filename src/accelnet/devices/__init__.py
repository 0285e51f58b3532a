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

# Power and energy (pure; NVML limits are in accelnet.devices.samplers.nvml_power). The
# governor loads numpy, so its names are imported on first use.
from accelnet.devices.energy import (  # noqa: E402 (appended after the exports above)
    IDLE,
    EnergyMeter,
    EnergyReport,
    JobEnergy,
    JobHold,
    model_job_energy,
)
from accelnet.devices.power import (  # noqa: E402
    DevicePower,
    EmulatedPowerControl,
    PowerControl,
    PowerLimitError,
    PowerLimits,
    busy_draw_w,
    cap_speed,
)

__all__ += [
    "IDLE",
    "DevicePower",
    "EmulatedPowerControl",
    "EnergyMeter",
    "EnergyReport",
    "JobEnergy",
    "JobHold",
    "JobLoad",
    "PowerControl",
    "PowerGovernor",
    "PowerLimitError",
    "PowerLimits",
    "PowerPlan",
    "busy_draw_w",
    "cap_speed",
    "latest_draw",
    "model_job_energy",
]

_GOVERNOR = ("JobLoad", "PowerGovernor", "PowerPlan", "latest_draw")

from typing import TYPE_CHECKING  # noqa: E402

if TYPE_CHECKING:
    from accelnet.devices.governor import JobLoad, PowerGovernor, PowerPlan, latest_draw


def __getattr__(name: str) -> object:
    if name in _GOVERNOR:
        from accelnet.devices import governor  # noqa: PLC0415 (numpy only when used)

        return getattr(governor, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
