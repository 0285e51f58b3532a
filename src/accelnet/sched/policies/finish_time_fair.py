"""``finish-time-fair``: Themis's finish-time fairness (NSDI'20), as Gavel formulates it
(``finish_time_fairness_perf``): minimise the largest ratio of the time a job will have
taken in this shared cluster to the time it would take alone on its fair share.

**Definitions.** For job ``j``: ``e_j`` is its age (seconds since it was submitted),
``d_j`` the steps it has done and kept, ``r_j`` the steps it has left (jobs whose work is
unknown get :func:`~accelnet.sched.policies.min_makespan.remaining_steps`' estimate), and
``T_j(x) = sum_m rate[j][m] x[j][m]`` its gang's steps/s under allocation ``x``.

- ``G_j = gang_j * equal_share(ctx)[j]``: the steps/s of the job's *whole gang* on an equal
  share of the cluster (every model's devices split evenly among the ``n`` active jobs, at
  most all of its time). :func:`~accelnet.sched.policies.hetero_fair.equal_share` gives it
  per device of the gang; the gang rate is what ``T_j`` measures, so it is scaled back.
- ``t_iso_j = (d_j + r_j) / G_j``: the time the job's whole work would take in an isolated
  cluster of ``1/n`` of the resources.
- ``rho_j(x) = (e_j + r_j / T_j(x)) / t_iso_j``: its finish-time-fairness ratio. ``rho_j
  <= 1`` means the job does at least as well as it would on its own share.

Gavel accumulates ``t_iso`` round by round as the isolated rate changes; here the work done
is priced at the current equal share, so the policy needs no state between rounds.

**Solving.** ``min_x max_j rho_j(x)`` is not an LP, but for a fixed level ``R``,
``rho_j <= R  <=>  T_j(x) >= need_j(R) = r_j / (R t_iso_j - e_j)`` (when ``R t_iso_j >
e_j``; otherwise no throughput is enough), linear in ``x``. So ``R`` is bisected between
bounds derived from the data:

- lower: ``max_j (e_j + r_j / best_j) / t_iso_j``, ``best_j`` the job's best rate (no
  allocation runs it faster); it exceeds every ``e_j / t_iso_j``, so ``need`` is finite;
- upper: ``max_j (e_j + r_j / G_j) / t_iso_j``, the equal share's own max ratio (the equal
  share is a feasible allocation, so no search for a feasible start is needed).

Each step solves an LP that maximises ``lambda`` with ``T_j >= lambda * need_j(R)`` for
every job, under the shared time and capacity rows. ``lambda >= 1`` proves ``R`` feasible;
either way the solution is an allocation whose actual max ratio is a valid upper bound, and
``lambda < 1`` gives the lower bound ``(R - (1 - lambda) max_j e_j / t_iso_j) / lambda``
(any ``R'`` reachable would need every ``T_j / need_j(R)`` to be at least
``(R t_iso_j - e_j) / (R' t_iso_j - e_j)``). Both bounds move by more than halving, so the
gap closes in a few LPs. It stops at a relative gap of ``rel_gap`` or ``max_iter`` LPs.

A second LP then holds every job to the best level found (times ``1 + 1e-6``) and
maximises ``sum_j T_j / G_j``, the total throughput counted in equal shares (steps/s of
different job types are not comparable), so capacity the bound does not need is not left
idle. Jobs that can run nowhere now are left out (:func:`~.lp.pairs_of`). Tenant weights
are not used: the ratio is already relative to each job's own fair share.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.sparse import csr_matrix

from accelnet.sched.policies.hetero_fair import equal_share
from accelnet.sched.policies.lp import (
    Pairs,
    SpeedRows,
    allocation,
    job_rows,
    pairs_of,
    solve_csc,
)
from accelnet.sched.policies.min_makespan import remaining_steps
from accelnet.sched.rounds import Allocation, RoundContext, RoundPolicy


def solve(
    c: np.ndarray,
    csc: tuple[np.ndarray, np.ndarray, np.ndarray],
    rhs: np.ndarray,
    ub: np.ndarray,
) -> np.ndarray | None:
    """:func:`~accelnet.sched.policies.lp.solve_csc` (lower bounds 0) with HiGHS's
    interior-point method (and its crossover to a vertex): on these LPs (a dense block of
    job rows tied by a few capacity rows) it is about 4x faster than the simplex HiGHS
    picks by default (5,000 jobs on 3 models: 1.1 s -> 0.25 s per LP). None if it finds no
    optimum. The matrices are CSC arrays built once per allocation (:class:`~.lp.SpeedRows`):
    stacking ``scipy.sparse`` blocks for each of the bisection's LPs cost a quarter of its
    time."""
    return solve_csc(c, csc, rhs, np.zeros(c.size), ub, ipm=True)


@dataclass
class Ratios:
    """Per runnable job (in ``pairs.jobs`` order): what its ratio depends on."""

    pairs: Pairs
    elapsed: np.ndarray  # e_j, seconds
    left: np.ndarray  # r_j, steps
    fair: np.ndarray  # G_j, steps/s of the gang on an equal share
    iso: np.ndarray  # t_iso_j, seconds
    best: np.ndarray  # best_j, the job's highest rate

    def of_speed(self, speed: np.ndarray) -> np.ndarray:
        """``rho_j`` at gang throughputs ``speed`` (inf where a job gets none)."""
        with np.errstate(divide="ignore"):
            wait = np.where(speed > 0, self.left / np.maximum(speed, 1e-300), np.inf)
        return np.asarray((self.elapsed + wait) / self.iso, dtype=float)

    def need(self, level: float) -> np.ndarray:
        """Steps/s each job needs for ``rho_j <= level``; ``level`` must exceed every
        ``e_j / t_iso_j`` (the lower bound does)."""
        need = np.asarray(self.left / (level * self.iso - self.elapsed), dtype=float)
        # a job is never left with no time at all (its ratio would be infinite): at least
        # a millionth of its fair throughput, far below any level that matters
        return np.asarray(np.maximum(need, 1e-6 * self.fair), dtype=float)


def ratios_of(ctx: RoundContext) -> Ratios:
    """The terms of every runnable job's ratio (see the module docstring)."""
    p = pairs_of(ctx)
    views = {j.id: j for j in ctx.jobs}
    left_of = remaining_steps(ctx)
    share = equal_share(ctx)
    elapsed = np.array([ctx.info.age(views[j]) for j in p.jobs])
    left = np.array([left_of[j] for j in p.jobs])
    done = np.array([ctx.info.done(views[j]) for j in p.jobs])
    fair = np.array([share[j] * max(1, ctx.gang[j]) for j in p.jobs])
    best = np.zeros(len(p.jobs))
    np.maximum.at(best, [i for i, _ in p.pairs], p.rate)
    return Ratios(p, elapsed, left, fair, (done + left) / fair, best)


def finish_time_ratios(ctx: RoundContext, x: Allocation) -> dict[str, float]:
    """``rho_j`` of every runnable job under allocation ``x`` (inf for a job it starves)."""
    terms = ratios_of(ctx)
    speed = np.zeros(len(terms.pairs.jobs))
    for i, jid in enumerate(terms.pairs.jobs):
        speed[i] = sum(ctx.tput[jid][m] * share for m, share in x.get(jid, {}).items())
    return dict(zip(terms.pairs.jobs, terms.of_speed(speed).tolist(), strict=True))


class FinishTimeFair(RoundPolicy):
    """Minimise the largest finish-time-fairness ratio (see the module docstring).

    ``rel_gap``: the bisection stops when its bounds are this close (relative);
    ``max_iter``: at most this many LPs in the bisection.
    """

    name = "finish-time-fair"
    rotates = True  # time-slices by time received (see RoundPolicy.rotates)

    def __init__(self, rel_gap: float = 1e-6, max_iter: int = 30) -> None:
        if not rel_gap > 0:
            raise ValueError(f"rel_gap must be > 0, got {rel_gap}")
        if max_iter < 1:
            raise ValueError(f"max_iter must be >= 1, got {max_iter}")
        self.rel_gap = rel_gap
        self.max_iter = max_iter
        self.iterations = 0  # LPs the last bisection solved (for benchmarks)

    def allocate(self, ctx: RoundContext) -> Allocation:
        """See :class:`RoundPolicy`."""
        terms = ratios_of(ctx)
        p = terms.pairs
        if p.n == 0:
            return {}
        # each job's row of T_j / G_j: its throughput in equal shares (well scaled)
        per_fair = p.rate / terms.fair[p.index]
        scaled = job_rows(p, per_fair)
        rows = SpeedRows.of(p, per_fair)
        level, x_best = self._bisect(terms, scaled, rows)
        # stage 2: the most throughput (in equal shares) with every job at the level
        need = terms.need(level * (1 + 1e-6)) / terms.fair
        b = np.concatenate([p.b_shared, -need])
        v = solve(-per_fair, rows.csc(), b, np.ones(p.n))
        if v is not None:
            return allocation(p, v)
        return allocation(p, x_best) if x_best is not None else {}

    def _bisect(
        self, terms: Ratios, scaled: csr_matrix, rows: SpeedRows
    ) -> tuple[float, np.ndarray | None]:
        """The lowest level found feasible and the allocation with the lowest actual max
        ratio (None if no LP solved). ``scaled``: each job's row of ``T_j / G_j``;
        ``rows``: the LPs' rows with it (as ``-scaled``)."""
        p = terms.pairs
        floor = float(np.max(terms.elapsed / terms.iso))
        lo = float(np.max(terms.of_speed(terms.best)))
        hi = float(np.max(terms.of_speed(terms.fair)))  # the equal share's own level
        x_best: np.ndarray | None = None
        best_level = np.inf
        jobs = len(p.jobs)
        c = np.zeros(p.n + 1)
        c[-1] = -1.0
        ub = np.append(np.ones(p.n), np.inf)
        b = np.concatenate([p.b_shared, np.zeros(jobs)])
        self.iterations = 0
        while hi - lo > self.rel_gap * hi and self.iterations < self.max_iter:
            self.iterations += 1
            level = 0.5 * (lo + hi)
            need = terms.need(level) / terms.fair
            # maximise lambda s.t. lambda * need_j / G_j - T_j / G_j <= 0
            v = solve(c, rows.with_theta(need), b, ub)
            if v is None:
                break
            lam, x = float(v[-1]), v[: p.n]
            actual = float(np.max(terms.of_speed(scaled @ x * terms.fair)))
            if actual < best_level:
                x_best, best_level = x, actual
            if lam >= 1.0:
                hi = min(hi, level, actual)
            else:
                hi = min(hi, actual)
                lo = max(lo, level if lam <= 0 else (level - (1 - lam) * floor) / lam)
        return hi, x_best
