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
- *makespan_lb* = max(sum(alone_s * gpus) / devices / pair_gain, max(arrival + alone_s) -
  first arrival, and the engine's LP bound ``result.makespan_lp_s`` when it has one: the
  fluid allocation LP's makespan for the jobs arriving from some time on, plus that time).
  ``result.pair_gain`` is 1 unless the policy packs jobs on shared devices: then it is the
  most two jobs sharing devices do together in units of one job's work alone (each keeps
  at most its rate alone, so the second term holds as it is), and the engine computes no
  LP bounds, which do not model space sharing;
  *jct_lb_avg* = mean(alone_s); *jct_lp_avg* = the engine's LP bound on the average JCT
  ``result.jct_lp_s`` (:func:`accelnet.sim.bounds.jct_lp`), when asked for and every job
  finished, or *jct_lb_avg* where that is larger (the LP runs gangs at their one-host
  rate; with the spread penalty, ``alone_s`` can be longer).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from accelnet.sim.columns import JobColumns, job_columns, sample_columns
from accelnet.sim.records import JobOutcome, SimResult

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
    jct_lp_avg_s: float | None
    makespan_ratio: float | None
    jct_ratio: float | None
    wall_s: float
    events: int
    decisions: int
    events_per_s: float | None
    peak_rss_mb: float
    rho_by_job: dict[str, float] = field(default_factory=dict, repr=False)

    @property
    def preemptions_per_job(self) -> float:
        """Stops per job of the trace (a stop costs a real job its save and warm-up)."""
        return self.preemptions / max(1, self.jobs_total)

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
            "preemptions_per_job": _r(self.preemptions_per_job),
            "failures": self.failures,
            "deadlines": {"jobs": self.deadline_jobs, "missed": self.deadline_missed},
            "bounds": {
                "makespan_lb_s": _r(self.makespan_lb_s),
                "makespan_ratio": _r(self.makespan_ratio),
                "jct_lb_avg_s": _r(self.jct_lb_avg_s),
                "jct_ratio": _r(self.jct_ratio),
                "jct_lp_avg_s": _r(self.jct_lp_avg_s),
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


def _seqsum(values: FloatArray) -> float:
    """The sum added left to right, as Python's ``sum`` of the list would (numpy's own
    sum adds pairwise and may differ in the last bits)."""
    return float(np.cumsum(values)[-1]) if values.size else 0.0


def finish_time_fairness(jobs: Sequence[JobOutcome], in_system: StepFunction) -> dict[str, float]:
    """rho per finished job with ``alone_s > 0``: JCT / (alone_s * N), N = mean of
    ``in_system`` over [arrival, end], at least 1."""
    cols = job_columns(jobs)
    ids, rho = _rho(cols, _done(cols), in_system)
    return dict(zip(ids, rho.tolist(), strict=True))


def _done(cols: JobColumns) -> npt.NDArray[np.bool_]:
    """The finished rows: succeeded, with an end."""
    return cols.is_state("succeeded") & ~np.isnan(cols.end)


def _rho(
    cols: JobColumns, done: npt.NDArray[np.bool_], in_system: StepFunction
) -> tuple[list[str], FloatArray]:
    """Ids and rho of the finished rows with ``alone_s > 0`` (in row order)."""
    chosen = np.flatnonzero(done & (cols.alone_s > 0))
    ids = [cols.ids[k] for k in chosen.tolist()]
    if not ids:
        return [], np.zeros(0, dtype=np.float64)
    arrival = cols.arrival[chosen]
    end = cols.end[chosen]
    span = end - arrival
    area = in_system.antiderivative(end) - in_system.antiderivative(arrival)
    safe = np.where(span > 0, span, 1.0)
    n = np.where(span > 0, area / safe, in_system.at(arrival))
    n = np.maximum(n, 1.0)
    rho = span / (cols.alone_s[chosen] * n)
    return ids, rho


def _deadlines_missed(cols: JobColumns, sim_end: float) -> tuple[int, int]:
    """(jobs with a deadline, those that missed it): a finished job if it ended after it,
    a failed, cancelled or rejected one always, an unfinished one if the simulation ended
    past it."""
    has = ~np.isnan(cols.deadline)
    done = _done(cols)
    gave_up = cols.is_state("failed") | cols.is_state("cancelled") | cols.is_state("rejected")
    with np.errstate(invalid="ignore"):
        missed = np.where(done, cols.end > cols.deadline,
                          np.where(gave_up, True, sim_end > cols.deadline))  # fmt: skip
    return int(has.sum()), int((has & missed).sum())


def compute(result: SimResult) -> Metrics:
    """Every figure of ``result`` (see the module's docstring for the definitions)."""
    cols = job_columns(result.jobs)
    sc = sample_columns(result.samples)
    t = sc.t
    n_jobs = len(cols)
    done = _done(cols)
    ends = cols.end[done]
    started = ~np.isnan(cols.first_start)

    first_arrival = float(cols.arrival.min()) if n_jobs else (float(t[0]) if t.size else 0.0)
    last_sample = float(t[-1]) if t.size else first_arrival
    any_end = float(np.where(np.isnan(cols.end), 0.0, cols.end).max()) if n_jobs else 0.0
    horizon = max(result.end, last_sample, max(any_end, 0.0) if n_jobs else 0.0)

    makespan_end = float(ends.max()) if ends.size else None
    makespan = None if makespan_end is None else makespan_end - first_arrival
    window_end = horizon if makespan_end is None else makespan_end

    # utilization over the window
    def step(values: FloatArray) -> StepFunction:
        return StepFunction(t, values)

    n = len(sc)
    ratio = np.divide(sc.busy, sc.devices, out=np.zeros_like(sc.busy), where=sc.devices > 0)
    has_window = window_end > first_arrival and n > 0
    utilization = step(ratio).mean(first_arrival, window_end) if has_window else None
    by_model: dict[str, float] = {}
    for model, cap in sorted(result.capacity.items()):
        if cap <= 0 or not has_window:
            continue
        by_model[model] = step(sc.busy_of(model)).mean(first_arrival, window_end) / cap

    # tenants (in the order first seen, sums added job by job)
    device_s: dict[str, float] = {}
    tenant_avg_all: dict[str, float | None] = {}
    for k, tenant in enumerate(cols.tenants):
        mine = cols.tenant == k
        device_s[tenant] = _seqsum(cols.device_total[mine])
        jcts_k = cols.end[mine & done] - cols.arrival[mine & done]
        tenant_avg_all[tenant] = _seqsum(jcts_k) / jcts_k.size if jcts_k.size else None
    total_ds = sum(device_s.values())
    share = {k: (v / total_ds if total_ds > 0 else 0.0) for k, v in sorted(device_s.items())}
    tenant_avg = dict(sorted(tenant_avg_all.items()))

    # fairness
    ids, rho_vals = _rho(cols, done, step(sc.queued + sc.running))

    # energy
    power = sc.power_w
    energy = step(power).integral(float(t[0]), horizon) if n else 0.0
    powered = horizon - float(t[0]) if n else 0.0
    avg_power = energy / powered if powered > 0 else None

    devices = sum(result.capacity.values())
    makespan_lb = None
    if ends.size:
        work = _seqsum(cols.alone_s[done] * cols.gpus[done])
        spread = float((cols.arrival[done] + cols.alone_s[done]).max()) - first_arrival
        # packed pairs do up to pair_gain jobs' work per device: the area term allows for it
        area = work / devices / result.pair_gain if devices > 0 else 0.0
        makespan_lb = max(area, spread)
    if makespan_lb is not None and result.makespan_lp_s is not None and ends.size == n_jobs:
        makespan_lb = max(makespan_lb, result.makespan_lp_s)
    jct_lb = _seqsum(cols.alone_s[done]) / ends.size if ends.size else None
    jct = Distribution.of(ends - cols.arrival[done])
    deadline_jobs, deadline_missed = _deadlines_missed(cols, horizon)

    return Metrics(
        jobs_total=n_jobs,
        jobs_finished=int(ends.size),
        jobs_failed=int(cols.is_state("failed").sum()),
        jobs_cancelled=int(cols.is_state("cancelled").sum()),
        jobs_unfinished=int(cols.is_state("unfinished").sum()),
        jobs_rejected=int(cols.is_state("rejected").sum()),
        jct=jct,
        queueing=Distribution.of(cols.first_start[started] - cols.arrival[started]),
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
        energy_jobs_j=_seqsum(cols.energy_j),
        avg_power_w=avg_power,
        peak_power_w=float(power.max()) if n else None,
        preemptions=int(cols.preemptions.sum()),
        failures=int(cols.failures.sum()),
        deadline_jobs=deadline_jobs,
        deadline_missed=deadline_missed,
        makespan_lb_s=makespan_lb,
        jct_lb_avg_s=jct_lb,
        jct_lp_avg_s=(
            max(result.jct_lp_s, jct_lb or 0.0)
            if result.jct_lp_s is not None and ends.size == n_jobs
            else None
        ),
        makespan_ratio=_ratio(makespan, makespan_lb),
        jct_ratio=_ratio(jct.avg, jct_lb),
        wall_s=result.wall_s,
        events=result.events,
        decisions=result.decisions,
        events_per_s=result.events / result.wall_s if result.wall_s > 0 else None,
        peak_rss_mb=result.peak_rss_mb,
        rho_by_job=dict(zip(ids, rho_vals.tolist(), strict=True)),
    )
