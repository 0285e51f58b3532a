"""Downsampled history of device samples; pure (no I/O, no clock).

:class:`Downsampler` folds samples into fixed
buckets (``[k * width, (k+1) * width)``) with min/mean/max per numeric field, the Xid codes
seen, the throttle reasons and the errors: the form the store keeps for long-range history.
Buckets of one width coarsen exactly into buckets of a multiple of it (:func:`coarsen`), so
history can be thinned with age. Persisting the buckets is the runtime's job.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Final

from accelnet.devices.telemetry import NUMERIC_FIELDS, DeviceSample

HISTORY_SCHEMA: Final = "accelnet.device-history/v1"


@dataclass(frozen=True, slots=True)
class FieldStats:
    """Count, minimum, maximum and sum of one field's readings in a bucket."""

    n: int
    min: float
    max: float
    total: float

    @property
    def mean(self) -> float:
        """``total / n``."""
        return self.total / self.n

    def merge(self, other: FieldStats) -> FieldStats:
        """The stats of both sets of readings together."""
        return FieldStats(
            self.n + other.n,
            min(self.min, other.min),
            max(self.max, other.max),
            self.total + other.total,
        )


@dataclass(frozen=True, slots=True)
class HistoryBucket:
    """One device over ``[start, start + width_s)``: ``samples`` folded into ``stats`` (only
    fields that had a reading), Xid codes in order, union of throttle reasons and errors."""

    device: str
    start: float
    width_s: float
    samples: int
    stats: Mapping[str, FieldStats]
    xid_events: tuple[int, ...] = ()
    throttle_reasons: tuple[str, ...] = ()
    errors: tuple[str, ...] = ()

    @property
    def end(self) -> float:
        """``start + width_s`` (exclusive)."""
        return self.start + self.width_s

    def to_json(self) -> dict[str, Any]:
        """JSON-ready data, schema ``accelnet.device-history/v1`` (per field n/min/mean/max)."""
        return {
            "schema": HISTORY_SCHEMA,
            "device": self.device,
            "start": self.start,
            "width_s": self.width_s,
            "samples": self.samples,
            "stats": {
                k: {"n": s.n, "min": s.min, "mean": s.mean, "max": s.max}
                for k, s in self.stats.items()
            },
            "xid_events": list(self.xid_events),
            "throttle_reasons": list(self.throttle_reasons),
            "errors": list(self.errors),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> HistoryBucket:
        """Inverse of :meth:`to_json` (the sum comes back as ``mean * n``). Raises ValueError
        for another schema or a field that is not a sample field."""
        if data.get("schema") != HISTORY_SCHEMA:
            raise ValueError(f"not a {HISTORY_SCHEMA} bucket: schema {data.get('schema')!r}")
        unknown = sorted(set(data["stats"]) - set(NUMERIC_FIELDS))
        if unknown:
            raise ValueError(f"history bucket: unknown fields {unknown}")
        stats = {
            k: FieldStats(int(v["n"]), float(v["min"]), float(v["max"]), v["mean"] * v["n"])
            for k, v in data["stats"].items()
        }
        return cls(
            str(data["device"]),
            float(data["start"]),
            float(data["width_s"]),
            int(data["samples"]),
            MappingProxyType(stats),
            tuple(int(x) for x in data.get("xid_events", ())),
            tuple(str(x) for x in data.get("throttle_reasons", ())),
            tuple(str(x) for x in data.get("errors", ())),
        )


@dataclass(slots=True)
class _Acc:
    device: str
    start: float
    width_s: float
    samples: int = 0
    stats: dict[str, FieldStats] = field(default_factory=dict)
    xids: list[int] = field(default_factory=list)
    reasons: set[str] = field(default_factory=set)
    errors: set[str] = field(default_factory=set)

    def add_stats(self, name: str, st: FieldStats) -> None:
        old = self.stats.get(name)
        self.stats[name] = st if old is None else old.merge(st)

    def bucket(self) -> HistoryBucket:
        return HistoryBucket(
            self.device,
            self.start,
            self.width_s,
            self.samples,
            MappingProxyType(dict(self.stats)),
            tuple(self.xids),
            tuple(sorted(self.reasons)),
            tuple(sorted(self.errors)),
        )


def _bucket_start(t: float, width: float) -> float:
    return math.floor(t / width) * width


class Downsampler:
    """Folds samples into buckets of ``width_s`` seconds per device, incrementally.

    ``add`` returns the buckets its sample closed (a device's bucket closes when a sample of
    a later bucket arrives); ``flush(now)`` closes every bucket that ended by ``now``. A
    sample older than its device's open bucket raises ValueError (that bucket was emitted).
    """

    def __init__(self, width_s: float) -> None:
        if not width_s > 0:
            raise ValueError(f"bucket width must be > 0 s, got {width_s}")
        self._width = float(width_s)
        self._open: dict[str, _Acc] = {}

    @property
    def width_s(self) -> float:
        """The bucket width in seconds."""
        return self._width

    def add(self, sample: DeviceSample) -> list[HistoryBucket]:
        """Fold ``sample`` in; the buckets of its device that it closed (0 or 1)."""
        start = _bucket_start(sample.time, self._width)
        acc = self._open.get(sample.device)
        closed: list[HistoryBucket] = []
        if acc is not None and start != acc.start:
            if start < acc.start:
                raise ValueError(
                    f"sample of {sample.device} at {sample.time} is before its open bucket "
                    f"[{acc.start}, {acc.start + self._width})"
                )
            closed.append(acc.bucket())
            acc = None
        if acc is None:
            acc = self._open[sample.device] = _Acc(sample.device, start, self._width)
        acc.samples += 1
        for name in NUMERIC_FIELDS:
            v = getattr(sample, name)
            if v is not None:
                x = float(v)
                acc.add_stats(name, FieldStats(1, x, x, x))
        acc.xids.extend(sample.xid_events or ())
        acc.reasons.update(sample.throttle_reasons or ())
        acc.errors.update(sample.errors)
        return closed

    def extend(self, samples: Iterable[DeviceSample]) -> list[HistoryBucket]:
        """``add`` each sample; every bucket closed on the way, in order."""
        return [b for s in samples for b in self.add(s)]

    def flush(self, now: float = math.inf) -> list[HistoryBucket]:
        """Close and return the open buckets that end at or before ``now`` (all by default)."""
        done = [d for d, acc in self._open.items() if acc.start + self._width <= now]
        return [self._open.pop(d).bucket() for d in done]

    def open_buckets(self) -> list[HistoryBucket]:
        """The buckets still being filled, as they stand (for a live view)."""
        return [acc.bucket() for acc in self._open.values()]


def downsample(samples: Iterable[DeviceSample], width_s: float) -> list[HistoryBucket]:
    """Every bucket of ``samples`` (time-ordered per device), closed ones in order of
    closing, then the rest."""
    d = Downsampler(width_s)
    return d.extend(samples) + d.flush()


def coarsen(buckets: Iterable[HistoryBucket], width_s: float) -> list[HistoryBucket]:
    """Merge buckets into wider ones of ``width_s``, which must be a whole multiple of each
    bucket's width (ValueError otherwise). Ordered by device, then start."""
    acc: dict[tuple[str, float], _Acc] = {}
    for b in sorted(buckets, key=lambda b: (b.device, b.start)):
        ratio = width_s / b.width_s
        if ratio < 1 or abs(ratio - round(ratio)) > 1e-9:
            raise ValueError(f"{width_s} s is not a multiple of a bucket of {b.width_s} s")
        start = _bucket_start(b.start + b.width_s / 2, width_s)  # robust to float noise
        a = acc.get((b.device, start))
        if a is None:
            a = acc[(b.device, start)] = _Acc(b.device, start, float(width_s))
        a.samples += b.samples
        for name, st in b.stats.items():
            a.add_stats(name, st)
        a.xids.extend(b.xid_events)
        a.reasons.update(b.throttle_reasons)
        a.errors.update(b.errors)
    return [acc[k].bucket() for k in sorted(acc)]
