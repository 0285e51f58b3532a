"""A scriptable fake of the NVML telemetry calls, built on the recorded machines of
``tests/fabric/nvml_fake.py`` (which it extends, not changes).

:class:`TelemetryNvml` is a :class:`~tests.fabric.nvml_fake.FakeNvml` that also answers the
calls :class:`accelnet.devices.samplers.NvmlSampler` makes, with the real names, parameters,
units and constants of ``pynvml`` (nvidia-ml-py 13): utilization as a real
``c_nvmlUtilization_t``, memory as ``c_nvmlMemory_t``, power in mW, the energy counter in
mJ, the temperature of ``NVML_TEMPERATURE_GPU`` in C, clocks in MHz by ``NVML_CLOCK_*``,
throttle/event reason bit masks, ECC counts by (error type, counter type), remapped rows as
pynvml's 4-tuple (correctable, uncorrectable, pending, failure), NVLink state and error
counters per port, current PCIe generation and width, and NVML event sets that deliver Xid
events as real ``c_nvmlEventData_t`` (``eventType`` ``nvmlEventTypeXidCriticalError``,
``eventData`` the Xid) and raise ``NVMLError_Timeout`` when empty. As on a real driver, an
event reaches only the sets registered for its GPU before it happened. Failures are the real
``pynvml.NVMLError`` subclasses. ``tests/devices/test_telemetry_nvml.py`` checks the surface
against the installed ``pynvml``.

One deliberate difference: ``c_nvmlEventData_t.device`` stays NULL (fake handles are Python
objects, not NVML pointers); the sampler uses one event set per GPU and never reads it.

Scripting, per GPU index: :meth:`TelemetryNvml.set` (any :class:`Live` field), :meth:`xid`,
:meth:`ecc`, :meth:`throttle`, :meth:`link_down`, :meth:`unsupport` (the named NVML function
raises ``NVMLError_NotSupported`` for that GPU), :meth:`fail` (raises another error, e.g.
``NVMLError_GpuIsLost``, until cleared) and :meth:`tick` (time passes: energy grows by power).

Power limits (for ``accelnet.devices.samplers.nvml_power``), in mW as NVML answers: the
management, enforced and default limits and the ``[min, max]`` constraints (per GPU in
``power_ranges_mw``, else :data:`POWER_RANGES_MW` by default limit);
``nvmlDeviceSetPowerManagementLimit`` raises ``NoPermission`` unless ``root`` and
``InvalidArgument`` outside the constraints, as the driver does.
"""

# ruff: noqa: N802, N803, N815, N816  (the fake mirrors pynvml's names and parameter names)

from __future__ import annotations

import inspect
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import pynvml

from tests.fabric.nvml_fake import FakeNvml, Machine

MIB = 2**20

# Values of the real pynvml constants the telemetry calls use (checked against pynvml).
NVML_TEMPERATURE_GPU = 0
NVML_CLOCK_GRAPHICS = 0
NVML_CLOCK_SM = 1
NVML_CLOCK_MEM = 2
NVML_CLOCK_VIDEO = 3
NVML_MEMORY_ERROR_TYPE_CORRECTED = 0
NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
NVML_VOLATILE_ECC = 0
NVML_AGGREGATE_ECC = 1
NVML_NVLINK_ERROR_DL_REPLAY = 0
NVML_NVLINK_ERROR_DL_RECOVERY = 1
NVML_NVLINK_ERROR_DL_CRC_FLIT = 2
NVML_NVLINK_ERROR_DL_CRC_DATA = 3
nvmlEventTypeSingleBitEccError = 0x1
nvmlEventTypeDoubleBitEccError = 0x2
nvmlEventTypeXidCriticalError = 0x8
nvmlClocksThrottleReasonGpuIdle = 0x1
nvmlClocksThrottleReasonSwPowerCap = 0x4
nvmlClocksThrottleReasonHwSlowdown = 0x8
nvmlClocksThrottleReasonSwThermalSlowdown = 0x20
nvmlClocksThrottleReasonHwThermalSlowdown = 0x40


@dataclass
class Live:
    """The readings of one GPU, as NVML would answer them now (NVML's own units)."""

    gpu_util: int = 0  # %
    mem_util: int = 0  # %
    mem_used_mib: int = 0
    power_mw: int = 70_000
    energy_mj: int = 1_000_000  # since the driver loaded
    temp_c: int = 31
    clocks_mhz: dict[int, int] = field(
        default_factory=lambda: {
            NVML_CLOCK_GRAPHICS: 345,
            NVML_CLOCK_SM: 345,
            NVML_CLOCK_MEM: 2619,
            NVML_CLOCK_VIDEO: 765,
        }
    )
    reasons: int = nvmlClocksThrottleReasonGpuIdle
    ecc: dict[tuple[int, int], int] = field(default_factory=dict)  # (error, counter) -> n
    remapped: tuple[int, int, int, int] = (0, 0, 0, 0)  # corr, unc, pending, failure
    nvlink_errors: dict[tuple[int, int], int] = field(default_factory=dict)  # (link, ctr)
    links_down: set[int] = field(default_factory=set)
    pcie_gen: int | None = None  # None: the maximum (an idle GPU may train lower)
    pcie_width: int | None = None
    unsupported: set[str] = field(default_factory=set)  # NVML function names
    failing: dict[str, pynvml.NVMLError] = field(default_factory=dict)


class _EventSet:
    """An opaque event set (the real one is a ctypes pointer)."""

    def __init__(self) -> None:
        self.masks: dict[int, int] = {}  # GPU index -> event types registered
        self.pending: deque[tuple[int, int]] = deque()  # (event type, data)
        self.freed = False


@dataclass
class TelemetryNvml(FakeNvml):
    """:class:`FakeNvml` plus the telemetry calls; ``live[i]`` is GPU ``i``'s state."""

    live: list[Live] = field(default_factory=list)
    sets: list[_EventSet] = field(default_factory=list)
    no_event_reasons_fn: bool = False  # a driver before 535: ...ClocksEventReasons missing
    lost: set[int] = field(default_factory=set)  # GPUs whose handle raises GpuIsLost
    # power limits (mW): the management limit set per GPU (default: the machine's enforced
    # limit), the allowed range per GPU (default: POWER_RANGES_MW), and whether the caller
    # is root (False: setting a limit raises NoPermission, as for any other user)
    power_limits_mw: dict[int, int] = field(default_factory=dict)
    power_ranges_mw: dict[int, tuple[int, int]] = field(default_factory=dict)
    root: bool = True

    NVML_TEMPERATURE_GPU = NVML_TEMPERATURE_GPU
    NVML_CLOCK_GRAPHICS = NVML_CLOCK_GRAPHICS
    NVML_CLOCK_SM = NVML_CLOCK_SM
    NVML_CLOCK_MEM = NVML_CLOCK_MEM
    NVML_CLOCK_VIDEO = NVML_CLOCK_VIDEO
    NVML_MEMORY_ERROR_TYPE_CORRECTED = NVML_MEMORY_ERROR_TYPE_CORRECTED
    NVML_MEMORY_ERROR_TYPE_UNCORRECTED = NVML_MEMORY_ERROR_TYPE_UNCORRECTED
    NVML_VOLATILE_ECC = NVML_VOLATILE_ECC
    NVML_AGGREGATE_ECC = NVML_AGGREGATE_ECC
    NVML_NVLINK_ERROR_DL_REPLAY = NVML_NVLINK_ERROR_DL_REPLAY
    NVML_NVLINK_ERROR_DL_RECOVERY = NVML_NVLINK_ERROR_DL_RECOVERY
    NVML_NVLINK_ERROR_DL_CRC_FLIT = NVML_NVLINK_ERROR_DL_CRC_FLIT
    NVML_NVLINK_ERROR_DL_CRC_DATA = NVML_NVLINK_ERROR_DL_CRC_DATA
    nvmlEventTypeSingleBitEccError = nvmlEventTypeSingleBitEccError
    nvmlEventTypeDoubleBitEccError = nvmlEventTypeDoubleBitEccError
    nvmlEventTypeXidCriticalError = nvmlEventTypeXidCriticalError
    nvmlClocksThrottleReasonGpuIdle = nvmlClocksThrottleReasonGpuIdle
    nvmlClocksThrottleReasonSwPowerCap = nvmlClocksThrottleReasonSwPowerCap
    nvmlClocksThrottleReasonHwSlowdown = nvmlClocksThrottleReasonHwSlowdown
    nvmlClocksThrottleReasonSwThermalSlowdown = nvmlClocksThrottleReasonSwThermalSlowdown
    nvmlClocksThrottleReasonHwThermalSlowdown = nvmlClocksThrottleReasonHwThermalSlowdown
    # the error classes, as module attributes of pynvml
    NVMLError = pynvml.NVMLError
    NVMLError_NotSupported = pynvml.NVMLError_NotSupported
    NVMLError_FunctionNotFound = pynvml.NVMLError_FunctionNotFound
    NVMLError_NoPermission = pynvml.NVMLError_NoPermission
    NVMLError_Timeout = pynvml.NVMLError_Timeout
    NVMLError_GpuIsLost = pynvml.NVMLError_GpuIsLost
    NVMLError_InvalidArgument = pynvml.NVMLError_InvalidArgument

    def __post_init__(self) -> None:
        if not self.live:
            self.live = [Live() for _ in self.machine.gpus]

    # ----- scripting --------------------------------------------------------------------
    def set(self, gpu: int, **readings: Any) -> None:
        """Set fields of :class:`Live` for GPU ``gpu`` (``power_mw=350_000``, ...)."""
        for key, value in readings.items():
            if not hasattr(self.live[gpu], key):
                raise AttributeError(f"Live has no field {key!r}")
            setattr(self.live[gpu], key, value)

    def tick(self, seconds: float) -> None:
        """Let ``seconds`` pass: every GPU's energy counter grows by its power draw."""
        for live in self.live:
            live.energy_mj += round(live.power_mw * seconds)

    def xid(self, gpu: int, *codes: int) -> None:
        """Xid errors on ``gpu``: delivered to every event set registered for them."""
        for code in codes:
            for es in self.sets:
                if not es.freed and es.masks.get(gpu, 0) & nvmlEventTypeXidCriticalError:
                    es.pending.append((nvmlEventTypeXidCriticalError, code))

    def ecc(self, gpu: int, corrected: int = 0, uncorrected: int = 0) -> None:
        """ECC errors on ``gpu``: the volatile and aggregate counters both grow."""
        for kind, n in (
            (NVML_MEMORY_ERROR_TYPE_CORRECTED, corrected),
            (NVML_MEMORY_ERROR_TYPE_UNCORRECTED, uncorrected),
        ):
            for counter in (NVML_VOLATILE_ECC, NVML_AGGREGATE_ECC):
                key = (kind, counter)
                self.live[gpu].ecc[key] = self.live[gpu].ecc.get(key, 0) + n

    def throttle(self, gpu: int, *bits: int) -> None:
        """Set the current clock throttle/event reasons of ``gpu`` (none: not throttled)."""
        mask = 0
        for bit in bits:
            mask |= bit
        self.live[gpu].reasons = mask

    def link_down(self, gpu: int, link: int) -> None:
        """NVLink port ``link`` of ``gpu`` goes down."""
        self.live[gpu].links_down.add(link)

    def unsupport(self, gpu: int, *functions: str) -> None:
        """The NVML ``functions`` raise ``NVMLError_NotSupported`` for ``gpu`` from now on."""
        self.live[gpu].unsupported.update(functions)

    def fail(self, gpu: int, function: str, error: pynvml.NVMLError | None) -> None:
        """``function`` raises ``error`` for ``gpu`` until called again with None."""
        if error is None:
            self.live[gpu].failing.pop(function, None)
        else:
            self.live[gpu].failing[function] = error

    # ----- bookkeeping ------------------------------------------------------------------
    def _live(self, name: str, handle: Any) -> Live:
        self._enter(name)
        self._gpu(handle)
        live = self.live[handle.index]
        if name in live.unsupported:
            raise pynvml.NVMLError_NotSupported()
        if name in live.failing:
            raise live.failing[name]
        return live

    def nvmlDeviceGetHandleByIndex(self, index: int) -> Any:
        handle = super().nvmlDeviceGetHandleByIndex(index)
        if index in self.lost:
            raise pynvml.NVMLError_GpuIsLost()
        return handle

    # ----- readings ---------------------------------------------------------------------
    def nvmlDeviceGetUtilizationRates(self, handle: Any) -> pynvml.c_nvmlUtilization_t:
        live = self._live("nvmlDeviceGetUtilizationRates", handle)
        util = pynvml.c_nvmlUtilization_t()
        util.gpu = live.gpu_util
        util.memory = live.mem_util
        return util

    def nvmlDeviceGetMemoryInfo(self, handle: Any, version: Any = None) -> Any:
        live = self._live("nvmlDeviceGetMemoryInfo", handle)
        self.calls.pop()  # counted once, here
        mem = super().nvmlDeviceGetMemoryInfo(handle, version)
        mem.used += live.mem_used_mib * MIB
        mem.free -= live.mem_used_mib * MIB
        return mem

    def nvmlDeviceGetPowerUsage(self, handle: Any) -> int:
        return self._live("nvmlDeviceGetPowerUsage", handle).power_mw

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: Any) -> int:
        return self._live("nvmlDeviceGetTotalEnergyConsumption", handle).energy_mj

    def nvmlDeviceGetTemperature(self, handle: Any, sensor: int) -> int:
        live = self._live("nvmlDeviceGetTemperature", handle)
        if sensor != NVML_TEMPERATURE_GPU:
            raise pynvml.NVMLError_InvalidArgument()
        return live.temp_c

    def nvmlDeviceGetClockInfo(self, handle: Any, type: int) -> int:
        live = self._live("nvmlDeviceGetClockInfo", handle)
        if type not in live.clocks_mhz:
            raise pynvml.NVMLError_InvalidArgument()
        return live.clocks_mhz[type]

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: Any) -> int:
        if self.no_event_reasons_fn:
            self._enter("nvmlDeviceGetCurrentClocksEventReasons")
            raise pynvml.NVMLError_FunctionNotFound()
        return self._live("nvmlDeviceGetCurrentClocksEventReasons", handle).reasons

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle: Any) -> int:
        return self._live("nvmlDeviceGetCurrentClocksThrottleReasons", handle).reasons

    def nvmlDeviceGetTotalEccErrors(self, handle: Any, errorType: int, counterType: int) -> int:
        live = self._live("nvmlDeviceGetTotalEccErrors", handle)
        if errorType not in (0, 1) or counterType not in (0, 1):
            raise pynvml.NVMLError_InvalidArgument()
        return live.ecc.get((errorType, counterType), 0)

    def nvmlDeviceGetRemappedRows(self, device: Any) -> tuple[int, int, int, int]:
        return self._live("nvmlDeviceGetRemappedRows", device).remapped

    def nvmlDeviceGetCurrPcieLinkGeneration(self, handle: Any) -> int:
        live = self._live("nvmlDeviceGetCurrPcieLinkGeneration", handle)
        return live.pcie_gen or self.machine.gpus[handle.index].pcie_gen

    def nvmlDeviceGetCurrPcieLinkWidth(self, handle: Any) -> int:
        live = self._live("nvmlDeviceGetCurrPcieLinkWidth", handle)
        return live.pcie_width or self.machine.gpus[handle.index].pcie_width

    # ----- NVLink -------------------------------------------------------------------------
    def nvmlDeviceGetNvLinkState(self, device: Any, link: int) -> int:
        live = self._live("nvmlDeviceGetNvLinkState", device)
        self.calls.pop()
        state = super().nvmlDeviceGetNvLinkState(device, link)
        return self.NVML_FEATURE_DISABLED if link in live.links_down else state

    def nvmlDeviceGetNvLinkErrorCounter(self, device: Any, link: int, counter: int) -> int:
        live = self._live("nvmlDeviceGetNvLinkErrorCounter", device)
        self._port(device, link)
        if not 0 <= counter <= NVML_NVLINK_ERROR_DL_CRC_DATA:
            raise pynvml.NVMLError_InvalidArgument()
        return live.nvlink_errors.get((link, counter), 0)

    # ----- events -------------------------------------------------------------------------
    def nvmlEventSetCreate(self) -> _EventSet:
        self._enter("nvmlEventSetCreate")
        es = _EventSet()
        self.sets.append(es)
        return es

    def nvmlDeviceRegisterEvents(self, handle: Any, eventTypes: int, eventSet: Any) -> None:
        self._live("nvmlDeviceRegisterEvents", handle)
        if not isinstance(eventSet, _EventSet) or eventSet.freed:
            raise pynvml.NVMLError_InvalidArgument()
        eventSet.masks[handle.index] = eventSet.masks.get(handle.index, 0) | eventTypes

    def _wait(self, name: str, eventSet: Any) -> pynvml.c_nvmlEventData_t:
        self._enter(name)
        if not isinstance(eventSet, _EventSet) or eventSet.freed:
            raise pynvml.NVMLError_InvalidArgument()
        if not eventSet.pending:
            raise pynvml.NVMLError_Timeout()  # the fake never blocks, whatever the timeout
        kind, value = eventSet.pending.popleft()
        data = pynvml.c_nvmlEventData_t()
        data.eventType = kind
        data.eventData = value
        data.gpuInstanceId = data.computeInstanceId = 0xFFFFFFFF  # not a MIG instance
        return data

    def nvmlEventSetWait_v2(self, eventSet: Any, timeoutms: int) -> pynvml.c_nvmlEventData_t:
        return self._wait("nvmlEventSetWait_v2", eventSet)

    def nvmlEventSetWait(self, eventSet: Any, timeoutms: int) -> pynvml.c_nvmlEventData_t:
        return self._wait("nvmlEventSetWait", eventSet)

    def nvmlEventSetFree(self, eventSet: Any) -> None:
        self._enter("nvmlEventSetFree")
        if not isinstance(eventSet, _EventSet) or eventSet.freed:
            raise pynvml.NVMLError_InvalidArgument()
        eventSet.freed = True

    # ----- power limits (mW) ------------------------------------------------------------
    def _power_range(self, index: int) -> tuple[int, int]:
        default = self.machine.gpus[index].power_limit_mw
        return self.power_ranges_mw.get(index) or POWER_RANGES_MW.get(
            default, (default // 2, default)
        )

    def nvmlDeviceGetPowerManagementLimit(self, handle: Any) -> int:
        self._live("nvmlDeviceGetPowerManagementLimit", handle)
        default = self.machine.gpus[handle.index].power_limit_mw
        return self.power_limits_mw.get(handle.index, default)

    def nvmlDeviceGetPowerManagementDefaultLimit(self, handle: Any) -> int:
        self._live("nvmlDeviceGetPowerManagementDefaultLimit", handle)
        return self.machine.gpus[handle.index].power_limit_mw

    def nvmlDeviceGetPowerManagementLimitConstraints(self, handle: Any) -> list[int]:
        self._live("nvmlDeviceGetPowerManagementLimitConstraints", handle)
        return list(self._power_range(handle.index))  # pynvml answers [min, max]

    def nvmlDeviceGetEnforcedPowerLimit(self, handle: Any) -> int:
        self._live("nvmlDeviceGetEnforcedPowerLimit", handle)
        default = self.machine.gpus[handle.index].power_limit_mw
        return self.power_limits_mw.get(handle.index, default)  # no other limit in force

    def nvmlDeviceSetPowerManagementLimit(self, handle: Any, limit: int) -> None:
        self._live("nvmlDeviceSetPowerManagementLimit", handle)
        if not self.root:
            raise pynvml.NVMLError_NoPermission()
        lo, hi = self._power_range(handle.index)
        if not isinstance(limit, int) or not lo <= limit <= hi:
            raise pynvml.NVMLError_InvalidArgument()
        self.power_limits_mw[handle.index] = limit


# Allowed power limit ranges (mW) by default limit, as nvidia-smi -q reports them: H100 SXM
# 200-700 W, A100 SXM 100-400 W, V100 SXM2 and A100 PCIe 80GB 150-300 W, 250 W boards 150-250 W.
POWER_RANGES_MW: dict[int, tuple[int, int]] = {
    700_000: (200_000, 700_000),
    400_000: (100_000, 400_000),
    300_000: (150_000, 300_000),
    250_000: (150_000, 250_000),
}


def telemetry_functions() -> dict[str, Any]:
    """Every NVML function :class:`TelemetryNvml` implements (inherited ones too)."""
    return {
        name: fn
        for name, fn in inspect.getmembers(TelemetryNvml, inspect.isfunction)
        if name.startswith("nvml")
    }


def telemetry_constants() -> dict[str, Any]:
    """Every pynvml constant and error class :class:`TelemetryNvml` exposes, by name."""
    return {
        name: getattr(TelemetryNvml, name)
        for name in dir(TelemetryNvml)
        if name.startswith(("NVML_", "NVMLError", "nvmlEventType", "nvmlClocks"))
    }


def fake(machine: Machine, **kwargs: Any) -> TelemetryNvml:
    """A :class:`TelemetryNvml` for ``machine``."""
    return TelemetryNvml(machine, **kwargs)
