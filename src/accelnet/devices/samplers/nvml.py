"""Telemetry of NVIDIA GPUs through NVML (``pynvml``, package ``nvidia-ml-py``, extra ``nvidia``).

Per GPU and sample: utilization (GPU and memory controller), memory used/total, power draw
(NVML answers mW), the total energy counter (mJ, since the driver loaded), GPU temperature,
SM and memory clocks, clock throttle ("event") reasons, volatile ECC error counts, remapped
rows, NVLink links up/down and error counters (summed over links), current PCIe generation
and width, and the Xid errors delivered to an NVML event set since the previous sample
(drained with a 0 ms wait: sampling never blocks on events).

Every call may fail. ``NotSupported``, ``FunctionNotFound`` (an older driver) and
``NoPermission`` mean the GPU cannot give that reading: the field is ``None`` and the call is
never made again for that GPU, so unsupported features cost nothing after the first sample.
Any other NVML error (``GpuIsLost``, ``Unknown``) leaves the field ``None`` for this sample,
is named in ``DeviceSample.errors``, and the call is tried again next time.

The error counters, remapped rows, NVLink and PCIe state change rarely and cost one call per
link and counter: with ``slow_every=k`` they are read every k-th sample and repeated between.

GPUs are matched to fabric devices as discovery made them: by UUID, else by PCI bus id.
``pynvml`` is imported when a sampler is made, not before; the module is injectable (tests
drive the same code with a recorded fake).
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from accelnet.devices.samplers.nvml_support import (
    NVLINK_COUNTERS,
    match_gpus,
    nvml_text,
    start_nvml,
    throttle_names,
)
from accelnet.devices.telemetry import DeviceSample, Sampler

if TYPE_CHECKING:
    from accelnet.fabric.model import Device


@dataclass(slots=True)
class _Gpu:
    index: int
    id: str
    handle: Any
    events: Any = None  # this GPU's own NVML event set (None: Xid not watched)
    links: tuple[int, ...] | None = None  # NVLink ports that answer; None until probed
    unsupported: set[str] = field(default_factory=set)
    slow: dict[str, Any] = field(default_factory=dict)  # last slow readings, repeated between


class NvmlSampler(Sampler):
    """Samples the NVIDIA GPUs of this machine (see the module docstring).

    ``devices`` are fabric devices to report as (a discovered fabric's, matched by UUID or
    PCI bus); GPUs that match none are skipped (their NVML indices in :attr:`unmatched`), and
    so are GPUs NVML cannot open (:attr:`unavailable`: index -> error). Without ``devices``
    GPU ``i`` is ``<host>/gpu<i>``, as discovery names it (``host`` defaults to the
    hostname). Raises SamplerUnavailableError without ``pynvml`` or a driver.
    """

    source = "nvml"

    def __init__(
        self,
        devices: Iterable[Device] | None = None,
        *,
        nvml: Any | None = None,
        host: str | None = None,
        slow_every: int = 1,
        max_events: int = 64,
    ) -> None:
        if slow_every < 1 or max_events < 1:
            raise ValueError(f"slow_every and max_events must be >= 1: {slow_every}, {max_events}")
        self._nvml = start_nvml(nvml)
        self._open = True
        self._slow_every = slow_every
        self._max_events = max_events
        self._rounds = 0
        nvml = self._nvml
        self._give_up = tuple(
            getattr(nvml, n)
            for n in (
                "NVMLError_NotSupported",
                "NVMLError_FunctionNotFound",
                "NVMLError_NoPermission",
            )
        )
        self._error = nvml.NVMLError
        self._timeout = nvml.NVMLError_Timeout
        try:
            self._gpus, self.unmatched = self._attach(devices, host)
        except Exception:
            self.close()
            raise

    def _attach(
        self, devices: Iterable[Device] | None, host: str | None
    ) -> tuple[list[_Gpu], tuple[int, ...]]:
        nvml = self._nvml
        handles: dict[int, Any] = {}
        found: dict[int, tuple[str, str]] = {}
        self.unavailable: dict[int, str] = {}  # NVML index -> why it could not be opened
        for i in range(nvml.nvmlDeviceGetCount()):
            try:
                h = nvml.nvmlDeviceGetHandleByIndex(i)
                if devices is not None:
                    bus = nvml_text(nvml.nvmlDeviceGetPciInfo(h).busId)
                    found[i] = (nvml_text(nvml.nvmlDeviceGetUUID(h)), bus)
                handles[i] = h
            except self._error as exc:  # a GPU lost or hidden: sample the others
                self.unavailable[i] = type(exc).__name__.removeprefix("NVMLError_")
        if devices is None:
            name = (host or socket.gethostname().split(".")[0] or "localhost").replace("/", "-")
            ids = {i: f"{name}/gpu{i}" for i in handles}
        else:
            order = sorted(found)
            matched = match_gpus([found[i] for i in order], devices)
            ids = {order[k]: did for k, did in matched.items()}
        gpus = [_Gpu(i, ids[i], h) for i, h in handles.items() if i in ids]
        for g in gpus:
            g.events = self._watch_xid(g)
        return gpus, tuple(i for i in handles if i not in ids)

    def _watch_xid(self, g: _Gpu) -> Any:
        nvml = self._nvml
        try:
            events = nvml.nvmlEventSetCreate()
        except self._error:
            return None
        try:
            nvml.nvmlDeviceRegisterEvents(g.handle, nvml.nvmlEventTypeXidCriticalError, events)
        except self._error:
            with contextlib.suppress(self._error):
                nvml.nvmlEventSetFree(events)
            return None
        return events

    def devices(self) -> tuple[str, ...]:
        """The fabric ids of the sampled GPUs, in NVML order."""
        return tuple(g.id for g in self._gpus)

    def unsupported(self, device: str) -> frozenset[str]:
        """The readings ``device`` was found not to support (never asked again)."""
        return frozenset(next(g for g in self._gpus if g.id == device).unsupported)

    def sample(self, now: float) -> list[DeviceSample]:
        """One sample per GPU. Raises RuntimeError once closed."""
        if not self._open:
            raise RuntimeError("the NVML sampler is closed")
        slow = self._rounds % self._slow_every == 0
        self._rounds += 1
        return [self._sample(g, now, slow) for g in self._gpus]

    def _read(self, g: _Gpu, key: str, errors: list[str], fn: str, *args: Any) -> Any:
        """``nvml.<fn>(handle, *args)``, or None: unsupported (remembered) or failed (noted)."""
        if key in g.unsupported:
            return None
        call = getattr(self._nvml, fn, None)
        if call is None:  # an older pynvml without this function
            g.unsupported.add(key)
            return None
        try:
            return call(g.handle, *args)
        except self._give_up:
            g.unsupported.add(key)
        except self._error as exc:
            errors.append(f"{key}: {type(exc).__name__.removeprefix('NVMLError_')}")
        return None

    def _sample(self, g: _Gpu, now: float, slow: bool) -> DeviceSample:
        nvml = self._nvml
        errors: list[str] = []
        util = self._read(g, "utilization", errors, "nvmlDeviceGetUtilizationRates")
        mem = self._read(g, "memory", errors, "nvmlDeviceGetMemoryInfo")
        power = self._read(g, "power_w", errors, "nvmlDeviceGetPowerUsage")
        energy = self._read(g, "energy_j", errors, "nvmlDeviceGetTotalEnergyConsumption")
        temp = self._read(
            g, "temperature_c", errors, "nvmlDeviceGetTemperature", nvml.NVML_TEMPERATURE_GPU
        )
        sm = self._read(g, "sm_clock_mhz", errors, "nvmlDeviceGetClockInfo", nvml.NVML_CLOCK_SM)
        mclk = self._read(g, "mem_clock_mhz", errors, "nvmlDeviceGetClockInfo", nvml.NVML_CLOCK_MEM)
        reasons = self._read(g, "clocks_event", errors, "nvmlDeviceGetCurrentClocksEventReasons")
        if reasons is None and "clocks_event" in g.unsupported:  # drivers before 535
            reasons = self._read(
                g, "clocks_throttle", errors, "nvmlDeviceGetCurrentClocksThrottleReasons"
            )
        if slow:
            g.slow = self._read_slow(g, errors)
        return DeviceSample(
            device=g.id,
            time=now,
            source=self.source,
            utilization_pct=float(util.gpu) if util is not None else None,
            mem_util_pct=float(util.memory) if util is not None else None,
            mem_used_bytes=int(mem.used) if mem is not None else None,
            mem_total_bytes=int(mem.total) if mem is not None else None,
            power_w=power / 1000.0 if power is not None else None,
            energy_j=energy / 1000.0 if energy is not None else None,
            temperature_c=float(temp) if temp is not None else None,
            sm_clock_mhz=sm,
            mem_clock_mhz=mclk,
            throttle_reasons=throttle_names(reasons) if reasons is not None else None,
            xid_events=self._drain_xid(g, errors),
            errors=tuple(errors),
            **g.slow,
        )

    def _read_slow(self, g: _Gpu, errors: list[str]) -> dict[str, Any]:
        nvml = self._nvml
        out: dict[str, Any] = {}
        for key, kind in (
            ("ecc_corrected", nvml.NVML_MEMORY_ERROR_TYPE_CORRECTED),
            ("ecc_uncorrected", nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED),
        ):
            out[key] = self._read(
                g, key, errors, "nvmlDeviceGetTotalEccErrors", kind, nvml.NVML_VOLATILE_ECC
            )
        rows = self._read(g, "remapped_rows", errors, "nvmlDeviceGetRemappedRows")
        if rows is not None:
            corr, unc, pending, failed = rows
            out |= {
                "remapped_correctable": int(corr),
                "remapped_uncorrectable": int(unc),
                "remap_pending": bool(pending),
                "remap_failed": bool(failed),
            }
        out["pcie_gen"] = self._read(g, "pcie_gen", errors, "nvmlDeviceGetCurrPcieLinkGeneration")
        out["pcie_width"] = self._read(g, "pcie_width", errors, "nvmlDeviceGetCurrPcieLinkWidth")
        return out | self._read_nvlink(g, errors)

    def _read_nvlink(self, g: _Gpu, errors: list[str]) -> dict[str, Any]:
        nvml = self._nvml
        states: dict[int, Any] = {}
        if g.links is None:  # probe every port once; keep those that answer
            for link in range(int(nvml.NVML_NVLINK_MAX_LINKS)):
                try:
                    states[link] = nvml.nvmlDeviceGetNvLinkState(g.handle, link)
                except self._error:
                    continue
            g.links = tuple(states)
        if not g.links:
            return {}
        for link in g.links:
            if link not in states:
                states[link] = self._read(
                    g, f"nvlink_state{link}", errors, "nvmlDeviceGetNvLinkState", link
                )
        up = sum(1 for s in states.values() if s == nvml.NVML_FEATURE_ENABLED)
        out: dict[str, Any] = {"nvlink_up": up, "nvlink_down": len(g.links) - up}
        for key, const in NVLINK_COUNTERS:
            counter = getattr(nvml, const)
            values = [
                self._read(g, key, errors, "nvmlDeviceGetNvLinkErrorCounter", link, counter)
                for link in g.links
            ]
            out[key] = sum(v for v in values if v is not None) if key not in g.unsupported else None
        return out

    def _drain_xid(self, g: _Gpu, errors: list[str]) -> tuple[int, ...] | None:
        if g.events is None:
            return None
        nvml = self._nvml
        codes: list[int] = []
        for _ in range(self._max_events):
            try:
                data = nvml.nvmlEventSetWait(g.events, 0)
            except self._timeout:  # nothing (more) pending
                break
            except self._error as exc:
                errors.append(f"xid_events: {type(exc).__name__.removeprefix('NVMLError_')}")
                break
            if data.eventType & nvml.nvmlEventTypeXidCriticalError:
                codes.append(int(data.eventData))
        return tuple(codes)

    def close(self) -> None:
        """Free the event sets and shut NVML down (once). Idempotent."""
        if not getattr(self, "_open", False):
            return
        self._open = False
        for g in getattr(self, "_gpus", ()):
            if g.events is not None:
                with contextlib.suppress(self._error):
                    self._nvml.nvmlEventSetFree(g.events)
                g.events = None
        with contextlib.suppress(self._error):
            self._nvml.nvmlShutdown()
