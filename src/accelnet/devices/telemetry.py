"""Device telemetry: one sample type and one sampler interface for every kind of device.

A :class:`DeviceSample` is what one device reported at one time: utilization, memory, power,
energy, temperature, clocks and throttle reasons, error counters (ECC, remapped rows, NVLink),
PCIe link state, Xid events, and for emulated devices their worker process's CPU and memory.
Every reading is optional: ``None`` means the device cannot report it (or could not this time;
``errors`` then says why), never zero. Units are in the field names (``_pct``, ``_bytes``,
``_w``, ``_j``, ``_c``, ``_mhz``).

A :class:`Sampler` reads a set of devices; NVML, psutil and emulated samplers live in
:mod:`accelnet.devices.samplers`. A :class:`SampleRing` keeps the last samples of every
device (O(1) append and latest, O(log n + k) time-window queries); the downsampled history
for the store is in :mod:`accelnet.devices.history`. This module is pure: no I/O, no clock
reads. The time of a sample is whatever the caller's (injected) clock said.
"""

from __future__ import annotations

import bisect
import math
from abc import ABC, abstractmethod
from collections.abc import Iterable
from dataclasses import asdict, dataclass, fields
from typing import Any, ClassVar, Final, Self

SAMPLE_SCHEMA: Final = "accelnet.device-sample/v1"


@dataclass(frozen=True, slots=True)
class DeviceSample:
    """One device's readings at ``time`` (seconds, from the caller's clock). Immutable.

    Counters (``energy_j``, ``ecc_*``, ``remapped_*``, ``nvlink_*_errors``) are cumulative
    as the device keeps them (``energy_j`` since the driver loaded or the sampler started;
    ``ecc_*`` volatile, since the last driver load or GPU reset); ``xid_events`` holds only
    the Xid codes seen since the previous sample of the same device.
    """

    device: str
    time: float
    source: str = ""  # which sampler: "nvml", "host", "emulated"
    utilization_pct: float | None = None  # compute busy, 0..100
    mem_util_pct: float | None = None  # memory controller busy (GPUs), 0..100
    mem_used_bytes: int | None = None
    mem_total_bytes: int | None = None
    power_w: float | None = None
    energy_j: float | None = None  # monotonic counter
    temperature_c: float | None = None
    sm_clock_mhz: int | None = None
    mem_clock_mhz: int | None = None
    throttle_reasons: tuple[str, ...] | None = None  # () = not throttled
    ecc_corrected: int | None = None
    ecc_uncorrected: int | None = None
    remapped_correctable: int | None = None  # rows remapped for correctable errors
    remapped_uncorrectable: int | None = None
    remap_pending: bool | None = None  # a remapping waits for a GPU reset
    remap_failed: bool | None = None  # a remapping failed: the GPU needs service
    nvlink_up: int | None = None  # links up / down among the links the device has
    nvlink_down: int | None = None
    nvlink_replay_errors: int | None = None  # summed over links
    nvlink_recovery_errors: int | None = None
    nvlink_crc_flit_errors: int | None = None
    nvlink_crc_data_errors: int | None = None
    pcie_gen: int | None = None  # current (not maximum) link generation and width
    pcie_width: int | None = None
    xid_events: tuple[int, ...] | None = None  # since the previous sample; None = not watched
    proc_cpu_pct: float | None = None  # worker process tree, 100 = one core busy
    proc_rss_bytes: int | None = None
    errors: tuple[str, ...] = ()  # readings that failed this time: "power_w: GpuIsLost"

    def to_json(self) -> dict[str, Any]:
        """The sample as JSON-ready data, schema ``accelnet.device-sample/v1``."""
        out: dict[str, Any] = {"schema": SAMPLE_SCHEMA}
        for key, value in asdict(self).items():
            out[key] = list(value) if isinstance(value, tuple) else value
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> DeviceSample:
        """Inverse of :meth:`to_json`. Raises ValueError for another schema, unknown keys, a
        missing device or time, or a value of the wrong type (naming the key)."""
        if data.get("schema") != SAMPLE_SCHEMA:
            raise ValueError(f"not a {SAMPLE_SCHEMA} sample: schema {data.get('schema')!r}")
        unknown = sorted(set(data) - set(_KINDS) - {"schema"})
        if unknown:
            raise ValueError(f"unknown keys in device sample: {unknown}")
        for key in ("device", "time"):
            if data.get(key) is None:
                raise ValueError(f"device sample lacks {key!r}")
        values = {k: _check(k, v) for k, v in data.items() if k != "schema"}
        return cls(**values)


_SPECIAL: Final[dict[str, str]] = {
    "device": "str",
    "time": "float",
    "source": "str",
    "throttle_reasons": "strs",
    "xid_events": "ints",
    "errors": "strs",
    "remap_pending": "bool",
    "remap_failed": "bool",
}


def _field_kinds() -> dict[str, str]:
    """What each field holds (for validation and for the downsampler), in field order."""
    return {
        f.name: _SPECIAL.get(f.name, "int" if str(f.type).startswith("int") else "float")
        for f in fields(DeviceSample)
    }


_KINDS: Final[dict[str, str]] = _field_kinds()
NUMERIC_FIELDS: Final[tuple[str, ...]] = tuple(
    k for k, kind in _KINDS.items() if kind in ("int", "float", "bool") and k != "time"
)
"""The fields with one number per sample (booleans count as 0/1): what history aggregates."""


def _check(key: str, value: Any) -> Any:
    kind = _KINDS[key]
    if value is None:
        if key in ("device", "time"):
            raise ValueError(f"device sample: {key!r} must not be null")
        return () if key == "errors" else None
    ok: bool
    if kind == "str":
        ok = isinstance(value, str)
    elif kind == "bool":
        ok = isinstance(value, bool)
    elif kind == "int":
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif kind == "float":
        ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    else:
        item = str if kind == "strs" else int
        ok = isinstance(value, list | tuple) and all(
            isinstance(v, item) and not isinstance(v, bool) for v in value
        )
        value = tuple(value) if ok else value
    if not ok:
        raise ValueError(f"device sample: {key!r} must be {kind}, got {value!r}")
    return float(value) if kind == "float" else value


class SamplerUnavailableError(RuntimeError):
    """A sampler cannot start here: its library, driver or devices are missing. The message
    says what to install or check (``pip install 'accelnet[nvidia]'``)."""


class Sampler(ABC):
    """Reads the telemetry of a fixed set of devices.

    ``sample(now)`` reads every device once and stamps the samples with ``now`` (the caller's
    clock; a sampler reads no clock). It does not raise for a reading a device cannot give:
    that field is ``None`` (and ``errors`` names a transient failure). It may block for the
    duration of the underlying calls (microseconds to milliseconds), never longer on purpose.
    ``close()`` releases what the sampler holds (library handles, event sets); idempotent.
    Usable as a context manager.
    """

    source: ClassVar[str] = ""

    @abstractmethod
    def devices(self) -> tuple[str, ...]:
        """The device ids this sampler reports, in a fixed order."""

    @abstractmethod
    def sample(self, now: float) -> list[DeviceSample]:
        """One sample per device, stamped ``now``."""

    def close(self) -> None:  # noqa: B027 (most samplers hold nothing)
        """Release what the sampler holds. Idempotent."""

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _Ring:
    """One device's samples: a fixed array used circularly, oldest at ``start``."""

    __slots__ = ("count", "slots", "start")

    def __init__(self, capacity: int) -> None:
        self.slots: list[DeviceSample | None] = [None] * capacity
        self.start = 0
        self.count = 0

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, i: int) -> DeviceSample:
        s = self.slots[(self.start + i) % len(self.slots)]
        assert s is not None
        return s

    def append(self, sample: DeviceSample) -> None:
        cap = len(self.slots)
        if self.count < cap:
            self.slots[(self.start + self.count) % cap] = sample
            self.count += 1
        else:
            self.slots[self.start] = sample
            self.start = (self.start + 1) % cap


def _time(s: DeviceSample) -> float:
    return s.time


class SampleRing:
    """The last ``capacity`` samples of each device, oldest first.

    Samples of one device must come in time order (equal times allowed): ``append`` raises
    ValueError for an older one. Not thread-safe.
    """

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"ring capacity must be >= 1, got {capacity}")
        self._capacity = capacity
        self._rings: dict[str, _Ring] = {}

    @property
    def capacity(self) -> int:
        """Samples kept per device."""
        return self._capacity

    def append(self, sample: DeviceSample) -> None:
        """Keep ``sample``, dropping its device's oldest if full. O(1)."""
        ring = self._rings.get(sample.device)
        if ring is None:
            ring = self._rings[sample.device] = _Ring(self._capacity)
        elif sample.time < ring[ring.count - 1].time:
            raise ValueError(
                f"sample of {sample.device} at {sample.time} is older than the latest "
                f"({ring[ring.count - 1].time})"
            )
        ring.append(sample)

    def extend(self, samples: Iterable[DeviceSample]) -> None:
        """Append each of ``samples`` in order."""
        for s in samples:
            self.append(s)

    def devices(self) -> tuple[str, ...]:
        """Devices with at least one sample, in order of their first sample."""
        return tuple(self._rings)

    def latest(self, device: str) -> DeviceSample | None:
        """The newest sample of ``device``; None if it has none."""
        ring = self._rings.get(device)
        return ring[ring.count - 1] if ring else None

    def samples(self, device: str) -> list[DeviceSample]:
        """Every kept sample of ``device``, oldest first."""
        ring = self._rings.get(device)
        return [ring[i] for i in range(len(ring))] if ring else []

    def window(self, device: str, since: float, until: float = math.inf) -> list[DeviceSample]:
        """Kept samples of ``device`` with ``since <= time <= until``, oldest first."""
        ring = self._rings.get(device)
        if not ring:
            return []
        lo = bisect.bisect_left(ring, since, key=_time)
        hi = bisect.bisect_right(ring, until, key=_time)
        return [ring[i] for i in range(lo, hi)]

    def __len__(self) -> int:
        return sum(len(r) for r in self._rings.values())
