"""Power limits of NVIDIA GPUs through NVML (``pynvml``, package ``nvidia-ml-py``, extra
``nvidia``).

Reads, per GPU, in NVML's milliwatts (reported here in W): the power management limit
(``nvmlDeviceGetPowerManagementLimit``), the enforced limit (``nvmlDeviceGetEnforcedPowerLimit``,
the lowest of every limit in force), the default (``...PowerManagementDefaultLimit``) and the
allowed range (``...PowerManagementLimitConstraints``, ``[min, max]``). Sets the limit with
``nvmlDeviceSetPowerManagementLimit`` (mW, rounded to the nearest): NVML allows it to root
only and keeps it until the driver unloads or the GPU resets. A value outside the range is
refused before NVML is asked; ``NoPermission``, ``NotSupported`` and other errors raise
:class:`~accelnet.devices.power.PowerLimitError` naming the GPU, the watts and what to do.
(``nvmlDeviceSetPowerManagementLimit_v2`` is not used: nvidia-ml-py 13 drops its return code.)

GPUs are matched to fabric devices as the sampler matches them (UUID, else PCI bus);
without devices GPU ``i`` is ``<host>/gpu<i>``. The ``pynvml`` module is injectable (the
tests drive this code with the recorded fake).
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from accelnet.devices.power import PowerControl, PowerLimitError, PowerLimits, check_limit
from accelnet.devices.samplers.nvml_support import match_gpus, nvml_text, start_nvml

if TYPE_CHECKING:
    from accelnet.fabric.model import Device

__all__ = ["NvmlPowerControl"]

_UNSUPPORTED = ("NVMLError_NotSupported", "NVMLError_FunctionNotFound", "NVMLError_NoPermission")


class NvmlPowerControl(PowerControl):
    """Power limits of this machine's NVIDIA GPUs (see the module docstring).

    Raises SamplerUnavailableError without ``pynvml`` or a driver. GPUs NVML cannot open
    are left out (:attr:`unavailable`: index -> error); with ``devices``, GPUs that match
    none are left out too (:attr:`unmatched`).
    """

    def __init__(
        self,
        devices: Iterable[Device] | None = None,
        *,
        nvml: Any | None = None,
        host: str | None = None,
    ) -> None:
        self._nvml = start_nvml(nvml)
        self._open = True
        self._error: type[Exception] = self._nvml.NVMLError
        self._gone = tuple(getattr(self._nvml, n) for n in _UNSUPPORTED)
        try:
            self._gpus, self.unmatched = self._attach(devices, host)
        except Exception:
            self.close()
            raise

    def _attach(
        self, devices: Iterable[Device] | None, host: str | None
    ) -> tuple[dict[str, tuple[int, Any]], tuple[int, ...]]:
        nvml = self._nvml
        handles: dict[int, Any] = {}
        found: dict[int, tuple[str, str]] = {}
        self.unavailable: dict[int, str] = {}
        for i in range(nvml.nvmlDeviceGetCount()):
            try:
                h = nvml.nvmlDeviceGetHandleByIndex(i)
                if devices is not None:
                    bus = nvml_text(nvml.nvmlDeviceGetPciInfo(h).busId)
                    found[i] = (nvml_text(nvml.nvmlDeviceGetUUID(h)), bus)
                handles[i] = h
            except self._error as exc:
                self.unavailable[i] = _name(exc)
        if devices is None:
            name = (host or socket.gethostname().split(".")[0] or "localhost").replace("/", "-")
            ids = {i: f"{name}/gpu{i}" for i in handles}
        else:
            order = sorted(found)
            ids = {
                order[k]: did for k, did in match_gpus([found[i] for i in order], devices).items()
            }
        gpus = {ids[i]: (i, h) for i, h in handles.items() if i in ids}
        return gpus, tuple(i for i in handles if i not in ids)

    def devices(self) -> tuple[str, ...]:
        """See :class:`PowerControl`."""
        return tuple(self._gpus)

    def index(self, device: str) -> int:
        """The NVML index of ``device`` (what ``nvidia-smi -i`` takes)."""
        return self._handle(device)[0]

    def limits(self, device: str) -> PowerLimits:
        """See :class:`PowerControl`. A reading the GPU does not support (or will not give)
        is None; another NVML error (``GpuIsLost``) raises PowerLimitError."""
        _, h = self._handle(device)
        nvml = self._nvml
        rng = self._read(device, nvml.nvmlDeviceGetPowerManagementLimitConstraints, h)
        lo, hi = (None, None) if rng is None else (_watts(rng[0]), _watts(rng[1]))
        return PowerLimits(
            device,
            limit_w=_watts(self._read(device, nvml.nvmlDeviceGetPowerManagementLimit, h)),
            enforced_w=_watts(self._read(device, nvml.nvmlDeviceGetEnforcedPowerLimit, h)),
            default_w=_watts(self._read(device, nvml.nvmlDeviceGetPowerManagementDefaultLimit, h)),
            min_w=lo,
            max_w=hi,
        )

    def set_limit(self, device: str, watts: float) -> PowerLimits:
        """See :class:`PowerControl`. Needs root; the limit lasts until the driver unloads
        or the GPU resets."""
        index, h = self._handle(device)
        check_limit(self.limits(device), watts)
        try:
            self._nvml.nvmlDeviceSetPowerManagementLimit(h, round(watts * 1000))
        except self._error as exc:
            raise PowerLimitError(device, watts, _why(exc, index, watts)) from exc
        return self.limits(device)

    def close(self) -> None:
        """Shut NVML down (once). Idempotent."""
        if self._open:
            self._open = False
            with contextlib.suppress(self._error):
                self._nvml.nvmlShutdown()

    # ----- internals ------------------------------------------------------------------------
    def _handle(self, device: str) -> tuple[int, Any]:
        if not self._open:
            raise PowerLimitError(device, None, "the power control is closed")
        found = self._gpus.get(device)
        if found is None:
            raise self._unknown(device)
        return found

    def _read(self, device: str, fn: Callable[[Any], Any], handle: Any) -> Any:
        try:
            return fn(handle)
        except self._gone:
            return None
        except self._error as exc:
            raise PowerLimitError(device, None, f"NVML {_name(exc)}") from exc


def _watts(mw: Any) -> float | None:
    return None if mw is None else float(mw) / 1000.0


def _name(exc: BaseException) -> str:
    return type(exc).__name__.removeprefix("NVMLError_")


def _why(exc: BaseException, index: int, watts: float) -> str:
    name = _name(exc)
    if name == "NoPermission":
        return (
            "NVML answered NoPermission: setting a power limit needs root; run the controller "
            f"as root, or have an administrator run: nvidia-smi -i {index} -pl {watts:g}"
        )
    if name in ("NotSupported", "FunctionNotFound"):
        return f"NVML answered {name}: this GPU (or driver) does not support power limits"
    if name == "InvalidArgument":
        return "NVML answered InvalidArgument: the value is outside what the GPU allows now"
    return f"NVML answered {name}; nothing changed"
