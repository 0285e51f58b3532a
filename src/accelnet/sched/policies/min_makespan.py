"""``min-makespan``: heterogeneity-aware makespan minimisation (Gavel's
``min_total_duration_perf``).

With remaining work ``r_j`` and allocation ``x``, job ``j`` would finish in
``r_j / sum_m rate[j][m] x[j][m]``. The makespan ``T`` is smallest when every job gets at
least ``r_j / T`` steps/s: the LP maximises ``theta = 1/T`` subject to
``sum_m rate x >= r_j theta`` (linear in ``x`` and ``theta``). A second LP keeps that
``theta`` and maximises the total progress rate ``sum_j (sum_m rate x) / r_j``, so spare
capacity shortens jobs instead of idling. Re-solved every round as jobs finish and arrive.
Jobs whose work is unknown get the median of the known remaining times. Above
:data:`~.lp.CLASSES_ABOVE` active jobs, jobs alike (rates, gang and work left) are solved
as classes, each member getting an equal share of its class's time (the same optimum).
"""

from __future__ import annotations

import statistics
from typing import cast

import numpy as np

from accelnet.sched.policies.lp import (
    CLASSES_ABOVE,
    Grouped,
    Pairs,
    SpeedRows,
    allocation,
    class_pairs,
    group,
    pairs_of,
    solve_csc,
    split,
)
from accelnet.sched.rounds import Allocation, RoundContext, RoundPolicy


def remaining_steps(ctx: RoundContext) -> dict[str, float]:
    """Each job's remaining steps; unknown ones get the median known remaining time at
    their best rate (1 step if nothing is known). Kept in ``ctx.memo`` (a policy reads it
    for its allocation and again for its order): not to be changed."""
    found = ctx.memo.get("remaining_steps")
    if found is None:
        found = ctx.memo["remaining_steps"] = _remaining_steps(ctx)
    return cast(dict[str, float], found)


def _remaining_steps(ctx: RoundContext) -> dict[str, float]:
    known = {j.id: r for j in ctx.jobs if (r := ctx.info.remaining(j)) is not None}
    if len(known) == len(ctx.jobs):  # every job's work known: no estimate to make
        return {jid: max(1e-9, r) for jid, r in known.items()}
    fastest = {j.id: max(ctx.tput[j.id].values(), default=0.0) for j in ctx.jobs}
    times = [r / fastest[jid] for jid, r in known.items() if fastest[jid] > 0]
    typical = statistics.median(times) if times else 1.0
    out = {}
    for job in ctx.jobs:
        r = known.get(job.id)
        out[job.id] = max(1e-9, r if r is not None else typical * (fastest[job.id] or 1.0))
    return out


class MinMakespan(RoundPolicy):
    """Minimise the time until every active job is done (see the module docstring)."""

    name = "min-makespan"
    rotates = True  # time-slices by time received (see RoundPolicy.rotates)

    def theta(self, ctx: RoundContext) -> float | None:
        """The best ``1 / makespan`` an allocation reaches (None if the LP fails)."""
        left = remaining_steps(ctx)
        p, size, _ = self._columns(ctx, left)
        if p.n == 0:
            return None
        v = self._stage1(p, left, size)
        return None if v is None else float(v[-1])

    @staticmethod
    def _columns(
        ctx: RoundContext, left: dict[str, float]
    ) -> tuple[Pairs, np.ndarray, Grouped | None]:
        """The LP's pairs, each row's class size (ones without classes), and the classes
        when the queue is long enough to solve over them."""
        if len(ctx.jobs) > CLASSES_ABOVE:
            grouped = group(ctx, left)
            p, _ = class_pairs(grouped)
            return p, grouped.sizes(p), grouped
        p = pairs_of(ctx)
        return p, np.ones(len(p.jobs)), None

    @staticmethod
    def _stage1(
        p: Pairs, left: dict[str, float], size: np.ndarray, rows: SpeedRows | None = None
    ) -> np.ndarray | None:
        """Stage 1: the largest ``theta`` (the last column, ``1 / makespan``) with every
        job's need met; None if HiGHS finds no optimum. ``rows``: ``p``'s, if made."""
        need = np.array([left[j] for j in p.jobs]) * size  # a class's summed need
        scale = float(np.max(need / size)) if p.jobs else 1.0  # theta * scale is O(rate):
        # HiGHS's tolerances are absolute, and 1 / makespan alone is tiny
        rows = rows or SpeedRows.of(p)
        c = np.zeros(p.n + 1)
        c[-1] = -1.0
        col = size[p.index]
        b = np.concatenate([p.b_shared, np.zeros(len(p.jobs))])
        v = solve_csc(
            c, rows.with_theta(need / scale), b, np.zeros(p.n + 1), np.append(col, np.inf)
        )
        if v is not None:
            v[-1] /= scale
        return v

    def allocate(self, ctx: RoundContext) -> Allocation:
        """See :class:`RoundPolicy`."""
        left = remaining_steps(ctx)
        p, size, grouped = self._columns(ctx, left)
        if p.n == 0:
            return {}
        work = np.array([left[j] for j in p.jobs])
        need = work * size
        rows = SpeedRows.of(p)
        # maximise theta s.t. need_j * theta - speed_j <= 0
        v = self._stage1(p, left, size, rows)
        if v is None:
            return {}
        theta = v[-1] * (1 - 1e-6)
        progress = p.rate / work[p.index]
        b2 = np.concatenate([p.b_shared, -need * theta])
        col = size[p.index]
        v2 = solve_csc(-progress, rows.csc(), b2, np.zeros(p.n), col.copy())
        best = v2 if v2 is not None else v
        if grouped is not None:  # equal shares: every member keeps the makespan's rate
            return split(grouped, p, best)
        return allocation(p, best)
