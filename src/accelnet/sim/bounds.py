"""Lower bounds from fluid LPs: on the makespan (:func:`makespan_lp`) and on the average
JCT (:func:`jct_lp`).

For the jobs that arrive at or after time ``tau``, no schedule finishes before
``tau + T*``, where ``T*`` is the smallest makespan of the *fluid* problem: every job may be
split over models and time freely (time fractions ``x[j][m]``, at most all of a job's time,
no model over-committed, each gang at its best, one-host rate) and starts at ``tau``. That
is :class:`~accelnet.sched.policies.min_makespan.MinMakespan`'s LP, ``T* = 1 / theta``. The
bound is the largest ``tau - first arrival + T*`` over a few values of ``tau`` (the first
arrival and arrival-time quantiles). It ignores gang integrality and round boundaries, so
it is never above a real schedule's makespan.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from scipy.optimize import linprog
from scipy.sparse import coo_matrix

from accelnet.fabric import Fabric
from accelnet.sched import JobState, JobView
from accelnet.sched.jobinfo import JobInfo, RateFn
from accelnet.sched.policies.min_makespan import MinMakespan
from accelnet.sched.rounds import RoundContext
from accelnet.sim.workload import SimJob

MAX_JOBS = 5000  # larger traces skip the bound (one LP per point would cost too much)


def makespan_lp(
    fabric: Fabric, jobs: Sequence[SimJob], rates: RateFn, points: int = 8
) -> float | None:
    """The LP bound (seconds from the first arrival), or None for no or too many jobs."""
    if not jobs or len(jobs) > MAX_JOBS:
        return None
    capacity: dict[str, int] = {}
    for d in fabric.devices.values():
        capacity[d.model.name] = capacity.get(d.model.name, 0) + 1
    arrivals = sorted(j.arrival for j in jobs)
    first = arrivals[0]
    taus = sorted({arrivals[int(i * (len(arrivals) - 1) / max(1, points - 1))]
                   for i in range(points)})  # fmt: skip
    best = 0.0
    # each job's view made once (a spec is validated when made), read at every point
    every = [JobView(j.id, j.spec(), JobState.ADMITTED, j.arrival) for j in jobs]
    for tau in taus:
        views = [v for v in every if v.submitted_at >= tau]
        ctx = RoundContext.of(views, capacity, JobInfo(tau, rates))
        theta = MinMakespan().theta(ctx)
        if theta is not None and theta > 0:
            best = max(best, tau - first + 1.0 / theta)
    return best or None


JCT_LP_MAX_COLUMNS = 100_000  # the LP is capped at this size (~150 MB of memory)


def jct_lp(
    fabric: Fabric,
    jobs: Sequence[SimJob],
    rates: RateFn,
    step_s: float = 360.0,
    max_columns: int = JCT_LP_MAX_COLUMNS,
) -> float | None:
    """A lower bound on the average JCT from a time-indexed fluid LP, for schedules that
    do not pack jobs on shared devices (None: no jobs, a job that cannot run, or a problem
    too large even on a coarse grid); never below the run-alone bound (the average time
    each job takes alone on its fastest gang), which it is the larger of.

    Time is cut into intervals of ``step_s`` from the first arrival (the last one open to a
    horizon by which everything can be done); where that would make more than
    ``max_columns`` columns (:data:`JCT_LP_MAX_COLUMNS`: about 150 MB), into fewer, longer
    intervals over the same span (a coarser grid gives a looser bound, never a wrong one).
    ``y[j][m][k]``: the fraction of interval ``k`` job ``j`` runs on model ``m`` (at its
    gang's one-host rate, none before its arrival), at most the whole interval over all
    models, no model over-committed, every job's work done. Any real schedule gives such
    fractions. A job's *mean busy time* (the average, over its work, of the time each part
    is done) is at least the sum over its fractions of the work they do times the later of
    the interval's start and the arrival, and a job that cannot run faster than its fastest
    gang, ``alone`` seconds in all, ends at least ``alone / 2`` after its mean busy time.
    So the LP's least total
    mean busy time, plus ``alone / 2`` minus the arrival for every job, over the number of
    jobs, is never above a real schedule's average JCT (Goemans et al.'s mean-busy-time
    relaxation). It ignores gang integrality, rounds and placement; packing (two jobs
    sharing devices, both progressing) is outside it. Counting work from an interval's
    start loses up to half an interval per job, so on a light load (few jobs waiting) the
    relaxation alone can fall below the run-alone bound: the larger of the two is returned.
    """
    if not jobs or not step_s > 0:
        return None
    capacity: dict[str, int] = {}
    for d in fabric.devices.values():
        capacity[d.model.name] = capacity.get(d.model.name, 0) + 1
    models = sorted(capacity)
    table: list[tuple[SimJob, dict[str, float], float]] = []
    for j in jobs:
        spec = j.spec()
        rate = {m: rates(spec, m, j.gpus) for m in models if capacity[m] >= j.gpus}
        rate = {m: r for m, r in rate.items() if r > 0}
        if not rate or j.work <= 0:
            return None  # a job that cannot run (or has no work) has no bound
        table.append((j, rate, j.work / max(rate.values())))
    alone_avg = sum(alone for _, _, alone in table) / len(table)
    first = min(j.arrival for j in jobs)
    span = max(j.arrival for j in jobs) - first
    # everything one after the other on its fastest gang: done by then in any case
    horizon = span + sum(alone for _, _, alone in table)
    # a fine grid where the work is likely done (twice the load spread over the devices
    # after the last arrival), then one interval to the horizon
    busy = sum(alone * j.gpus for j, _, alone in table) / sum(capacity.values())
    fine = min(span + 2 * busy + max(alone for _, _, alone in table), horizon)
    pairs = sum(len(rate) for _, rate, _ in table)
    k_count = math.ceil(fine / step_s)
    most = max_columns // pairs - 1  # intervals the cap allows (one more: the tail)
    if most < 1:
        return alone_avg  # too many jobs for even one interval each: the run-alone bound
    if k_count > most:
        k_count, step_s = most, fine / most
    starts = first + np.arange(k_count + 1) * step_s
    ends = np.append(starts[1:], first + max(horizon, (k_count + 1) * step_s))
    k_count += 1
    found = _solve_mbt(table, models, capacity, starts, ends, first)
    if found is None:
        return alone_avg
    total = found + sum(alone / 2 - (j.arrival - first) for j, _, alone in table)
    return max(total / len(table), alone_avg)


def _solve_mbt(
    table: Sequence[tuple[SimJob, dict[str, float], float]],
    models: Sequence[str],
    capacity: dict[str, int],
    starts: np.ndarray,
    ends: np.ndarray,
    first: float,
) -> float | None:
    """The least total mean busy time (from ``first``) of :func:`jct_lp`'s LP over the
    intervals ``[starts[k], ends[k])``, built column block by column block in numpy; None
    if HiGHS finds no optimum."""
    k_count = len(starts)
    lengths = ends - starts
    blocks_j, blocks_m, blocks_k, blocks_cost, blocks_work, blocks_up = [], [], [], [], [], []
    for i, (j, rate, _) in enumerate(table):
        k0 = int(np.searchsorted(ends, j.arrival, side="right"))
        ks = np.arange(k0, k_count)
        begin = np.maximum(starts[ks], j.arrival)
        up = np.minimum(1.0, (ends[ks] - begin) / lengths[ks])
        for m, r in rate.items():
            done = r * lengths[ks] / j.work  # fraction of the job a whole interval does
            blocks_j.append(np.full(ks.size, i))
            blocks_m.append(np.full(ks.size, models.index(m)))
            blocks_k.append(ks)
            blocks_cost.append(done * (begin - first))
            blocks_work.append(done)
            blocks_up.append(up)
    jj, mm, kk = np.concatenate(blocks_j), np.concatenate(blocks_m), np.concatenate(blocks_k)
    work = np.concatenate(blocks_work)
    n = jj.size
    cols = np.arange(n)
    gang = np.array([float(table[i][0].gpus) for i in range(len(table))])[jj]
    rows = np.concatenate([jj * k_count + kk, len(table) * k_count + mm * k_count + kk])
    a_ub = coo_matrix((np.concatenate([np.ones(n), gang]), (rows, np.concatenate([cols, cols]))),
                      shape=(len(table) * k_count + len(models) * k_count, n)).tocsr()  # fmt: skip
    b_ub = np.concatenate([np.ones(len(table) * k_count),
                           np.repeat([float(capacity[m]) for m in models], k_count)])  # fmt: skip
    a_eq = coo_matrix((work, (jj, cols)), shape=(len(table), n)).tocsr()
    bounds = np.column_stack([np.zeros(n), np.concatenate(blocks_up)])
    res = linprog(np.concatenate(blocks_cost), A_ub=a_ub, b_ub=b_ub, A_eq=a_eq,
                  b_eq=np.ones(len(table)), bounds=bounds, method="highs")  # fmt: skip
    return float(res.fun) if res.status == 0 else None
