"""NVML names and matching for the NVML sampler: throttle reason bits, NVLink error counters,
loading ``pynvml`` lazily, and matching NVML GPUs to fabric devices. Pure, except
:func:`load_pynvml` (an import)."""

from __future__ import annotations

import importlib
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, Final

from accelnet.devices.telemetry import SamplerUnavailableError

if TYPE_CHECKING:
    from accelnet.fabric.model import Device

# Clock throttle / event reason bits (nvmlClocksThrottleReason* = nvmlClocksEventReason*; the
# tests check every value against pynvml) and the names a sample carries.
THROTTLE_REASONS: Final[tuple[tuple[int, str, str], ...]] = (
    (0x1, "gpu_idle", "nvmlClocksThrottleReasonGpuIdle"),
    (0x2, "applications_clocks_setting", "nvmlClocksThrottleReasonApplicationsClocksSetting"),
    (0x4, "sw_power_cap", "nvmlClocksThrottleReasonSwPowerCap"),
    (0x8, "hw_slowdown", "nvmlClocksThrottleReasonHwSlowdown"),
    (0x10, "sync_boost", "nvmlClocksThrottleReasonSyncBoost"),
    (0x20, "sw_thermal_slowdown", "nvmlClocksThrottleReasonSwThermalSlowdown"),
    (0x40, "hw_thermal_slowdown", "nvmlClocksThrottleReasonHwThermalSlowdown"),
    (0x80, "hw_power_brake_slowdown", "nvmlClocksThrottleReasonHwPowerBrakeSlowdown"),
    (0x100, "display_clock_setting", "nvmlClocksThrottleReasonDisplayClockSetting"),
    (0x200, "board_limit", "nvmlClocksThrottleReasonBoardLimit"),
    (0x400, "reliability", "nvmlClocksThrottleReasonReliability"),
)
NVLINK_COUNTERS: Final = (  # sample field, pynvml constant of nvmlNvLinkErrorCounter_t
    ("nvlink_replay_errors", "NVML_NVLINK_ERROR_DL_REPLAY"),
    ("nvlink_recovery_errors", "NVML_NVLINK_ERROR_DL_RECOVERY"),
    ("nvlink_crc_flit_errors", "NVML_NVLINK_ERROR_DL_CRC_FLIT"),
    ("nvlink_crc_data_errors", "NVML_NVLINK_ERROR_DL_CRC_DATA"),
)


def throttle_names(bits: int) -> tuple[str, ...]:
    """Readable names of the reason bits set in ``bits`` (unknown bits as hex)."""
    names = tuple(name for bit, name, _ in THROTTLE_REASONS if bits & bit)
    known = sum(bit for bit, _, _ in THROTTLE_REASONS)
    rest = bits & ~known
    return names + tuple(f"0x{1 << i:x}" for i in range(rest.bit_length()) if rest >> i & 1)


def load_pynvml() -> Any:
    """The ``pynvml`` module; SamplerUnavailableError naming the extra if it is missing."""
    try:
        return importlib.import_module("pynvml")
    except ImportError as exc:
        raise SamplerUnavailableError(
            "the NVML sampler needs nvidia-ml-py: pip install 'accelnet[nvidia]'"
        ) from exc


def start_nvml(nvml: Any | None = None) -> Any:
    """``nvml`` (default: the real ``pynvml``) after ``nvmlInit``; SamplerUnavailableError
    naming the extra when it is missing, or saying why NVML cannot start."""
    module = load_pynvml() if nvml is None else nvml
    try:
        module.nvmlInit()
    except Exception as exc:
        raise SamplerUnavailableError(
            f"NVML cannot start ({type(exc).__name__}: {exc}); is an NVIDIA driver loaded?"
        ) from exc
    return module


def pci_bus_key(bus: str) -> str:
    """``00000000:1B:00.0`` and ``0000:1b:00.0`` -> ``0000:1b:00.0`` (as discovery keys)."""
    domain, sep, rest = bus.lower().partition(":")
    if sep and rest.count(":") == 1:
        try:
            return f"{int(domain, 16):04x}:{rest}"
        except ValueError:
            pass
    return bus.lower()


def match_gpus(found: Sequence[tuple[str, str]], devices: Iterable[Device]) -> dict[int, str]:
    """NVML index -> fabric device id, for ``found[i] = (uuid, pci bus)`` of NVML GPU ``i``.

    A GPU matches the device with its UUID, else the one device with its PCI bus id (a bus id
    shared by devices of several hosts matches none). GPUs that match nothing are left out.
    """
    gpus = [d for d in devices if d.kind == "gpu"]
    by_uuid = {d.uuid.lower(): d.id for d in gpus if d.uuid}
    by_bus: dict[str, list[str]] = {}
    for d in gpus:
        if d.pci_bus:
            by_bus.setdefault(pci_bus_key(d.pci_bus), []).append(d.id)
    out: dict[int, str] = {}
    for i, (uuid, bus) in enumerate(found):
        did = by_uuid.get(uuid.lower()) if uuid else None
        if did is None:
            ids = by_bus.get(pci_bus_key(bus), []) if bus else []
            did = ids[0] if len(ids) == 1 else None
        if did is not None:
            out[i] = did
    return out


def nvml_text(value: Any) -> str:
    """An NVML string (``bytes`` from older pynvml versions, ``str`` from newer) as ``str``."""
    return value.decode() if isinstance(value, bytes) else str(value)
