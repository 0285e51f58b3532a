"""Figures of one simulation: completion times, utilization, fairness, energy, bounds.

:func:`compute` reads a :class:`~accelnet.sim.records.SimResult` and returns
:class:`Metrics`. Samples are a step function: a sample's values hold from its time until
the next sample's (the last one until the end of the window asked for; before the first
sample every value is 0). Integrals over it use a cumulative sum and binary search, so
``compute`` is O(samples + jobs log jobs) however many jobs ask for their own window.

Definitions:

- *finished* jobs are those that succeeded (``state == "succeeded"`` with an end); JCT,
  makespan, rho, the JCT lower bound and the makespan lower bound are over them.
- *makespan* = last end of a finished job - first arrival of any job.
- *utilization* = time-weighted mean of ``busy / devices`` over the window
  [first arrival, makespan end] (the simulation's end if nothing finished); per model,
  ``busy_by_model[m] / capacity[m]`` over the same window.
- *rho* (finish-time fairness, Themis as Gavel computes it) =
  ``JCT / (alone_s * N)``, N = time-averaged jobs in the system (queued + running) over
  [arrival, end], at least 1; jobs with ``alone_s == 0`` have none.
- *energy* = integral of ``power_w`` from the first sample to the simulation's end.
- *deadlines*: a finished job misses its deadline if it ended after it, a failed or
  cancelled one always, an unfinished one if the simulation ended past it.
- *makespan_lb* = max(sum(alone_s * gpus) / devices, max(arrival + alone_s) - first
  arrival, and the engine's LP bound ``result.makespan_lp_s`` when it has one: the fluid
  allocation LP's makespan for the jobs arriving from some time on, plus that time);
  *jct_lb_avg* = mean(alone_s).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from accelnet.sim.records import JobOutcome, Sample, SimResult

SCHEMA = "accelnet.sim.metrics/v1"

FloatArray = npt.NDArray[np.float64]


class StepFunction:
    """A right-continuous step function given by samples: ``values[i]`` holds on
    [``times[i]``, ``times[i+1]``), the last value for ever after, 0 before the first.

    Times must not decrease (equal times are allowed: the last value at a time wins).
    """

    def __init__(self, times: npt.ArrayLike, values: npt.ArrayLike) -> None:
        t = np.asarray(times, dtype=np.float64)
        v = np.asarray(values, dtype=np.float64)
        if t.shape != v.shape or t.ndim != 1:
            raise ValueError("times and values must be 1-D arrays of the same length")
        if t.size > 1 and bool(np.any(np.diff(t) < 0)):
            raise ValueError("times must not decrease")
        self.times: FloatArray = t
        self.values: FloatArray = v
        cum = np.zeros_like(t)
        if t.size > 1:
            np.cumsum(v[:-1] * np.diff(t), out=cum[1:])
        self._cum: FloatArray = cum

    def __len__(self) -> int:
        return int(self.times.size)

    def antiderivative(self, x: npt.ArrayLike) -> FloatArray:
        """The integral from the first sample's time to each ``x`` (0 at or before it)."""
        xs = np.asarray(x, dtype=np.float64)
        if self.times.size == 0:
            return np.zeros_like(xs)
        k = np.searchsorted(self.times, xs, side="right") - 1
        kc = np.clip(k, 0, None)
        inside = self._cum[kc] + self.values[kc] * (xs - self.times[kc])
        return np.where(k >= 0, inside, 0.0)

    def at(self, x: npt.ArrayLike) -> FloatArray:
        """The value at each ``x``."""
        xs = np.asarray(x, dtype=np.float64)
        if self.times.size == 0:
            return np.zeros_like(xs)
        k = np.searchsorted(self.times, xs, side="right") - 1
        return np.where(k >= 0, self.values[np.clip(k, 0, None)], 0.0)

    def integral(self, start: float, end: float) -> float:
        """The integral over [start, end] (0 if ``end <= start``)."""
        if end <= start:
            return 0.0
        a, b = self.antiderivative(np.array([start, end]))
        return float(b - a)

    def mean(self, start: float, end: float) -> float:
        """The time-weighted mean over [start, end]; the value at ``start`` if they meet."""
        if end <= start:
            return float(self.at(start))
        return self.integral(start, end) / (end - start)


@dataclass(frozen=True, slots=True)
class Distribution:
    """Count, mean and percentiles (numpy, linear interpolation) of some durations."""

    count: int
    avg: float | None
    median: float | None
    p95: float | None
    p99: float | None

    @classmethod
    def of(cls, values: Sequence[float] | FloatArray) -> Distribution:
        """The figures of ``values`` (None when there are none)."""
        arr = np.asarray(values, dtype=np.float64)
        if arr.size == 0:
            return cls(0, None, None, None, None)
        p50, p95, p99 = np.percentile(arr, [50.0, 95.0, 99.0])
        return cls(int(arr.size), float(arr.mean()), float(p50), float(p95), float(p99))

    def to_json(self) -> dict[str, Any]:
        """Stable keys, rounded floats."""
        return {
            "count": self.count,
            "avg": _r(self.avg),
            "median": _r(self.median),
            "p95": _r(self.p95),
            "p99": _r(self.p99),
        }


@dataclass(frozen=True)
class Metrics:
    """The figures of one simulation (times in seconds, energy in J, power in W)."""

    jobs_total: int
    jobs_finished: int
    jobs_failed: int
    jobs_cancelled: int
    jobs_unfinished: int
    jobs_rejected: int
    jct: Distribution
    queueing: Distribution
    makespan_s: float | None
    window_start: float
    window_end: float
    utilization: float | None
    utilization_by_model: dict[str, float]
    tenant_share: dict[str, float]
    tenant_avg_jct: dict[str, float | None]
    rho_avg: float | None
    rho_max: float | None
    rho_over_1: float | None
    energy_j: float
    energy_jobs_j: float
    avg_power_w: float | None
    peak_power_w: float | None
    preemptions: int
    failures: int
    deadline_jobs: int
    deadline_missed: int
    makespan_lb_s: float | None
    jct_lb_avg_s: float | None
    makespan_ratio: float | None
    jct_ratio: float | None
    wall_s: float
    events: int
    decisions: int
    events_per_s: float | None
    peak_rss_mb: float
    rho_by_job: dict[str, float] = field(default_factory=dict, repr=False)

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict with stable key names (per-job rho left out: see the CSV)."""
        return {
            "schema": SCHEMA,
            "jobs": {
                "total": self.jobs_total,
                "finished": self.jobs_finished,
                "failed": self.jobs_failed,
                "cancelled": self.jobs_cancelled,
                "unfinished": self.jobs_unfinished,
                "rejected": self.jobs_rejected,
            },
            "jct_s": self.jct.to_json(),
            "queueing_s": self.queueing.to_json(),
            "makespan_s": _r(self.makespan_s),
            "window_s": [_r(self.window_start), _r(self.window_end)],
            "utilization": _r(self.utilization),
            "utilization_by_model": {
                k: _r(v) for k, v in sorted(self.utilization_by_model.items())
            },
            "tenants": {
                t: {"share": _r(self.tenant_share[t]), "avg_jct_s": _r(self.tenant_avg_jct.get(t))}
                for t in sorted(self.tenant_share)
            },
            "fairness": {
                "rho_avg": _r(self.rho_avg),
                "rho_max": _r(self.rho_max),
                "rho_over_1": _r(self.rho_over_1),
            },
            "energy": {
                "total_j": _r(self.energy_j),
                "jobs_j": _r(self.energy_jobs_j),
                "avg_power_w": _r(self.avg_power_w),
                "peak_power_w": _r(self.peak_power_w),
            },
            "preemptions": self.preemptions,
            "failures": self.failures,
            "deadlines": {"jobs": self.deadline_jobs, "missed": self.deadline_missed},
            "bounds": {
                "makespan_lb_s": _r(self.makespan_lb_s),
                "makespan_ratio": _r(self.makespan_ratio),
                "jct_lb_avg_s": _r(self.jct_lb_avg_s),
                "jct_ratio": _r(self.jct_ratio),
            },
            "cost": {
                "wall_s": _r(self.wall_s),
                "events": self.events,
                "decisions": self.decisions,
                "events_per_s": _r(self.events_per_s),
                "peak_rss_mb": _r(self.peak_rss_mb),
            },
        }


def _r(x: float | None) -> float | None:
    """Round to 7 significant digits (sub-second over months of simulated time)."""
    return None if x is None else float(f"{x:.7g}")


def _ratio(num: float | None, den: float | None) -> float | None:
    return None if num is None or den is None or den <= 0 else num / den


def _finished(job: JobOutcome) -> bool:
    return job.state == "succeeded" and job.end is not None


def _series(result: SimResult) -> tuple[FloatArray, list[Sample]]:
    """Sample times (non-decreasing) and the samples in that order."""
    samples = result.samples
    t = np.fromiter((s.t for s in samples), dtype=np.float64, count=len(samples))
    if t.size > 1 and bool(np.any(np.diff(t) < 0)):
        order = np.argsort(t, kind="stable")
        samples = [samples[i] for i in order]
        t = t[order]
    return t, samples


def finish_time_fairness(jobs: Sequence[JobOutcome], in_system: StepFunction) -> dict[str, float]:
    """rho per finished job with ``alone_s > 0``: JCT / (alone_s * N), N = mean of
    ``in_system`` over [arrival, end], at least 1."""
    chosen = [j for j in jobs if _finished(j) and j.alone_s > 0]
    if not chosen:
        return {}
    arrival = np.array([j.arrival for j in chosen], dtype=np.float64)
    end = np.array([j.end for j in chosen], dtype=np.float64)
    span = end - arrival
    area = in_system.antiderivative(end) - in_system.antiderivative(arrival)
    safe = np.where(span > 0, span, 1.0)
    n = np.where(span > 0, area / safe, in_system.at(arrival))
    n = np.maximum(n, 1.0)
    alone = np.array([j.alone_s for j in chosen], dtype=np.float64)
    rho = span / (alone * n)
    return {j.id: float(r) for j, r in zip(chosen, rho, strict=True)}


def _deadline_missed(job: JobOutcome, sim_end: float) -> bool:
    assert job.deadline is not None
    if _finished(job):
        return job.end is not None and job.end > job.deadline
    if job.state in ("failed", "cancelled", "rejected"):
        return True
    return sim_end > job.deadline


def _bounds(finished: Sequence[JobOutcome], devices: int, first: float) -> float | None:
    if not finished:
        return None
    work = sum(j.alone_s * j.gpus for j in finished)
    spread = max(j.arrival + j.alone_s for j in finished) - first
    by_work = work / devices if devices > 0 else 0.0
    return max(by_work, spread)


def compute(result: SimResult) -> Metrics:
    """Every figure of ``result`` (see the module's docstring for the definitions)."""
    jobs = result.jobs
    finished = [j for j in jobs if _finished(j)]
    started = [j for j in jobs if j.first_start is not None]
    t, samples = _series(result)

    first_arrival = min((j.arrival for j in jobs), default=float(t[0]) if t.size else 0.0)
    last_sample = float(t[-1]) if t.size else first_arrival
    horizon = max(result.end, last_sample, max((j.end or 0.0 for j in jobs), default=0.0))

    jcts = [j.end - j.arrival for j in finished if j.end is not None]
    makespan_end = max((j.end for j in finished if j.end is not None), default=None)
    makespan = None if makespan_end is None else makespan_end - first_arrival
    window_end = horizon if makespan_end is None else makespan_end

    # utilization over the window
    def step(values: FloatArray) -> StepFunction:
        return StepFunction(t, values)

    n = len(samples)
    busy = np.fromiter((s.busy for s in samples), dtype=np.float64, count=n)
    devs = np.fromiter((s.devices for s in samples), dtype=np.float64, count=n)
    ratio = np.divide(busy, devs, out=np.zeros_like(busy), where=devs > 0)
    has_window = window_end > first_arrival and n > 0
    utilization = step(ratio).mean(first_arrival, window_end) if has_window else None
    by_model: dict[str, float] = {}
    for model, cap in sorted(result.capacity.items()):
        if cap <= 0 or not has_window:
            continue
        counts = np.fromiter((s.busy_by_model.get(model, 0) for s in samples), np.float64, n)
        by_model[model] = step(counts).mean(first_arrival, window_end) / cap

    # tenants
    device_s: dict[str, float] = {}
    tenant_jcts: dict[str, list[float]] = {}
    for j in jobs:
        device_s[j.tenant] = device_s.get(j.tenant, 0.0) + sum(j.device_s.values())
        tenant_jcts.setdefault(j.tenant, [])
    for j in finished:
        assert j.end is not None
        tenant_jcts[j.tenant].append(j.end - j.arrival)
    total_ds = sum(device_s.values())
    share = {k: (v / total_ds if total_ds > 0 else 0.0) for k, v in sorted(device_s.items())}
    tenant_avg = {k: (sum(v) / len(v) if v else None) for k, v in sorted(tenant_jcts.items())}

    # fairness
    in_system = np.fromiter((s.queued + s.running for s in samples), np.float64, n)
    rho = finish_time_fairness(jobs, step(in_system))
    rho_vals = np.fromiter(rho.values(), dtype=np.float64, count=len(rho))

    # energy
    power = np.fromiter((s.power_w for s in samples), dtype=np.float64, count=n)
    energy = step(power).integral(float(t[0]), horizon) if n else 0.0
    powered = horizon - float(t[0]) if n else 0.0
    avg_power = energy / powered if powered > 0 else None

    with_deadline = [j for j in jobs if j.deadline is not None]
    devices = sum(result.capacity.values())
    makespan_lb = _bounds(finished, devices, first_arrival)
    if makespan_lb is not None and result.makespan_lp_s is not None and len(finished) == len(jobs):
        makespan_lb = max(makespan_lb, result.makespan_lp_s)
    jct_lb = sum(j.alone_s for j in finished) / len(finished) if finished else None
    jct = Distribution.of(jcts)

    return Metrics(
        jobs_total=len(jobs),
        jobs_finished=len(finished),
        jobs_failed=sum(1 for j in jobs if j.state == "failed"),
        jobs_cancelled=sum(1 for j in jobs if j.state == "cancelled"),
        jobs_unfinished=sum(1 for j in jobs if j.state == "unfinished"),
        jobs_rejected=sum(1 for j in jobs if j.state == "rejected"),
        jct=jct,
        queueing=Distribution.of(
            [j.first_start - j.arrival for j in started if j.first_start is not None]
        ),
        makespan_s=makespan,
        window_start=first_arrival,
        window_end=window_end,
        utilization=utilization,
        utilization_by_model=by_model,
        tenant_share=share,
        tenant_avg_jct=tenant_avg,
        rho_avg=float(rho_vals.mean()) if rho_vals.size else None,
        rho_max=float(rho_vals.max()) if rho_vals.size else None,
        rho_over_1=float(np.mean(rho_vals > 1.0)) if rho_vals.size else None,
        energy_j=energy,
        energy_jobs_j=sum(j.energy_j for j in jobs),
        avg_power_w=avg_power,
        peak_power_w=float(power.max()) if n else None,
        preemptions=sum(j.preemptions for j in jobs),
        failures=sum(j.failures for j in jobs),
        deadline_jobs=len(with_deadline),
        deadline_missed=sum(1 for j in with_deadline if _deadline_missed(j, horizon)),
        makespan_lb_s=makespan_lb,
        jct_lb_avg_s=jct_lb,
        makespan_ratio=_ratio(makespan, makespan_lb),
        jct_ratio=_ratio(jct.avg, jct_lb),
        wall_s=result.wall_s,
        events=result.events,
        decisions=result.decisions,
        events_per_s=result.events / result.wall_s if result.wall_s > 0 else None,
        peak_rss_mb=result.peak_rss_mb,
        rho_by_job=rho,
    )
