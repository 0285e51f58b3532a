"""Telemetry samplers: NVIDIA GPUs through NVML, CPU devices through psutil, emulated devices
through their worker processes; and the poller that runs them on a period.

Every sampler implements :class:`accelnet.devices.telemetry.Sampler`. Names are imported on
first use, so ``accelnet.devices.samplers.nvml`` loads without psutil, and ``pynvml`` is
imported only when an :class:`NvmlSampler` is made.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from accelnet.devices.samplers.emulated import EmulatedSampler
    from accelnet.devices.samplers.host import HostSampler
    from accelnet.devices.samplers.nvml import NvmlSampler
    from accelnet.devices.samplers.nvml_support import match_gpus, throttle_names
    from accelnet.devices.samplers.poller import Poller, SamplingCost, run_polling

_WHERE = {
    "EmulatedSampler": "emulated",
    "HostSampler": "host",
    "NvmlSampler": "nvml",
    "Poller": "poller",
    "SamplingCost": "poller",
    "match_gpus": "nvml_support",
    "run_polling": "poller",
    "throttle_names": "nvml_support",
}

__all__ = [
    "EmulatedSampler",
    "HostSampler",
    "NvmlSampler",
    "Poller",
    "SamplingCost",
    "match_gpus",
    "run_polling",
    "throttle_names",
]


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)
