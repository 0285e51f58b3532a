"""Histograms without a metrics library: what the controller records and the collector reads.

:class:`DecisionTimer` measures how long scheduler decisions take; the controller owns one and
wraps each decision in :meth:`DecisionTimer.measure` (or passes a duration it measured itself
to :meth:`DecisionTimer.observe`). :func:`histogram` folds a batch of values (queue waits
computed from the jobs) into the same :class:`HistogramSnapshot`, the form
:mod:`accelnet.monitor.metrics` exports. No I/O, no imports of ``prometheus_client``: the
runtime can import this module without the exporter.
"""

from __future__ import annotations

import bisect
import itertools
import math
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Final

DECISION_BUCKETS: Final[tuple[float, ...]] = (
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
    0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
)  # fmt: skip
"""Upper bounds (s) for scheduler decision times: 100 µs (a few jobs) to 10 s (a rebuild)."""

QUEUE_WAIT_BUCKETS: Final[tuple[float, ...]] = (
    0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0,
    3600.0, 7200.0, 14400.0, 43200.0, 86400.0,
)  # fmt: skip
"""Upper bounds (s) for queue waits: a local start (100 ms) to a day."""

RUN_BUCKETS: Final[tuple[float, ...]] = (
    1.0, 5.0, 10.0, 30.0, 60.0, 300.0, 600.0, 1800.0, 3600.0, 7200.0, 14400.0, 43200.0,
    86400.0, 259200.0, 604800.0,
)  # fmt: skip
"""Upper bounds (s) for a job attempt's run time: a second to a week."""

SERVICE_BUCKETS: Final[tuple[float, ...]] = (
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
)  # fmt: skip
"""Upper bounds (s) for a service's request latencies: 1 ms to 30 s."""


def check_bounds(bounds: Sequence[float]) -> tuple[float, ...]:
    """``bounds`` as a tuple; ValueError unless non-empty, finite and strictly increasing
    (the +Inf bucket is implied, never listed)."""
    out = tuple(float(b) for b in bounds)
    if not out:
        raise ValueError("histogram needs at least one bucket bound")
    if not all(math.isfinite(b) for b in out):
        raise ValueError(f"histogram bounds must be finite (+Inf is implied): {out}")
    if any(a >= b for a, b in itertools.pairwise(out)):
        raise ValueError(f"histogram bounds must be strictly increasing: {out}")
    return out


@dataclass(frozen=True, slots=True)
class HistogramSnapshot:
    """A histogram at one moment, in Prometheus' terms.

    ``cumulative[i]`` counts the observations ``<= bounds[i]``; observations above the last
    bound are counted only in ``count`` (the ``+Inf`` bucket). ``total`` is their sum.
    """

    bounds: tuple[float, ...]
    cumulative: tuple[int, ...]
    count: int
    total: float

    def __post_init__(self) -> None:
        if len(self.bounds) != len(self.cumulative):
            raise ValueError("one cumulative count per bound")
        if any(a > b for a, b in zip(self.cumulative, (*self.cumulative[1:], self.count),
                                     strict=True)):  # fmt: skip
            raise ValueError(f"cumulative counts must not decrease: {self.cumulative}")

    @classmethod
    def empty(cls, bounds: Sequence[float]) -> HistogramSnapshot:
        """No observations."""
        b = check_bounds(bounds)
        return cls(b, (0,) * len(b), 0, 0.0)

    def buckets(self) -> list[tuple[float, int]]:
        """``(upper bound, cumulative count)`` pairs, ending with ``(inf, count)``."""
        return [*zip(self.bounds, self.cumulative, strict=True), (math.inf, self.count)]


class Counts:
    """A histogram being filled: per-bucket (not cumulative) counts, with the +Inf bucket
    last. Not thread-safe (its owner locks); :meth:`snapshot` for the collector."""

    __slots__ = ("bounds", "count", "per_bucket", "total")

    def __init__(self, bounds: Sequence[float]) -> None:
        self.bounds = check_bounds(bounds)
        self.per_bucket = [0] * (len(self.bounds) + 1)
        self.count = 0
        self.total = 0.0

    def add(self, value: float) -> None:
        """Observe ``value`` (finite and >= 0, else ValueError)."""
        if not value >= 0 or not math.isfinite(value):
            raise ValueError(f"an observed duration must be finite and >= 0, got {value}")
        self.per_bucket[bisect.bisect_left(self.bounds, value)] += 1
        self.count += 1
        self.total += value

    def snapshot(self) -> HistogramSnapshot:
        """The counts so far, cumulated."""
        cumulative: list[int] = []
        running = 0
        for n in self.per_bucket[:-1]:
            running += n
            cumulative.append(running)
        return HistogramSnapshot(self.bounds, tuple(cumulative), self.count, self.total)


def histogram(values: Iterable[float], bounds: Sequence[float]) -> HistogramSnapshot:
    """The histogram of ``values`` (each finite and >= 0, else ValueError)."""
    counts = Counts(bounds)
    for v in values:
        counts.add(v)
    return counts.snapshot()


class DecisionTimer:
    """How long scheduler decisions take: a histogram the controller fills and
    ``/metrics`` reads (as ``accelnet_scheduler_decision_seconds``).

    Thread-safe: one thread observes while another takes snapshots. ``timer`` is a monotonic
    performance counter (injected for tests); it measures work, not the scheduler's clock,
    so a simulated run records the real time its decisions cost.
    """

    def __init__(
        self,
        buckets: Sequence[float] = DECISION_BUCKETS,
        timer: Callable[[], float] = time.perf_counter,
    ) -> None:
        self._counts = Counts(buckets)
        self._timer = timer
        self._lock = threading.Lock()

    def observe(self, seconds: float) -> None:
        """Record one decision that took ``seconds``; ValueError if negative or not finite."""
        with self._lock:
            self._counts.add(seconds)

    @contextmanager
    def measure(self) -> Iterator[None]:
        """Time the ``with`` block as one decision; recorded even if the block raises."""
        start = self._timer()
        try:
            yield
        finally:
            self.observe(max(0.0, self._timer() - start))

    def snapshot(self) -> HistogramSnapshot:
        """The decisions recorded so far. O(buckets)."""
        with self._lock:
            return self._counts.snapshot()


class TenantHistograms:
    """One histogram per tenant, each observation made once, when what it measures ends
    (a queue wait when its attempt starts): counts that only grow, as Prometheus requires
    of a histogram. The controller fills one (``accelnet_queue_wait_seconds``); ``/metrics``
    reads :meth:`snapshot`. Thread-safe. Counts since the owner was made (a restarted
    server starts again from zero, which ``rate()`` and ``increase()`` handle)."""

    def __init__(self, buckets: Sequence[float]) -> None:
        self.bounds = check_bounds(buckets)
        self._counts: dict[str, Counts] = {}
        self._lock = threading.Lock()

    def observe(self, tenant: str, seconds: float) -> None:
        """Record one observation of ``tenant``; ValueError if negative or not finite."""
        with self._lock:
            counts = self._counts.get(tenant)
            if counts is None:
                counts = self._counts[tenant] = Counts(self.bounds)
            counts.add(seconds)

    def snapshot(self) -> dict[str, HistogramSnapshot]:
        """Each tenant's observations so far (tenants never observed: absent)."""
        with self._lock:
            return {tenant: c.snapshot() for tenant, c in self._counts.items()}


class AttemptTally:
    """Job attempts as they end: how many per (tenant, outcome code), and each one's run
    time per tenant (a histogram). Each attempt is counted once, when it ends, so the
    counts only grow (``accelnet_job_attempts_total``, ``accelnet_job_run_seconds``).
    Thread-safe; counts since the owner (the controller) was made."""

    def __init__(self, buckets: Sequence[float] = RUN_BUCKETS) -> None:
        self.run = TenantHistograms(buckets)
        self._ended: dict[tuple[str, str], int] = {}
        self._lock = threading.Lock()

    def ended(self, tenant: str, outcome: str, run_s: float) -> None:
        """One attempt of ``tenant`` ended with ``outcome`` after running ``run_s``."""
        self.run.observe(tenant, max(0.0, run_s))
        with self._lock:
            key = (tenant, outcome)
            self._ended[key] = self._ended.get(key, 0) + 1

    def counts(self) -> dict[tuple[str, str], int]:
        """Attempts ended so far, by (tenant, outcome)."""
        with self._lock:
            return dict(self._ended)
