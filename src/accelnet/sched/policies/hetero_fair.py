"""``hetero-fair``: heterogeneity-aware max-min fairness (Gavel's ``max_min_fairness_perf``).

Each job's *effective throughput* under an allocation is ``sum_m rate[j][m] x[j][m]``. It is
normalised by what the job would get from an equal share of the cluster (each model's
devices split evenly among the jobs, at most all of the job's time), and divided by its
tenant's weight. The LP maximises the smallest normalised throughput; a second LP then
maximises the total, keeping every job at that level (so capacity the fairness bound does
not need is not left idle). Solved with HiGHS.

Jobs alike (the same rates on every model, gang and weight) form one *class*: the LP has
one column per class and model (``y``, the class's summed time fractions, at most its
size) and each member gets ``y / size``. By symmetry and convexity the optimum is the same
as with a column per job, and a round of thousands of jobs is an LP of a few hundred
columns.

``hetero-fair-packed`` (Gavel's ``max_min_fairness_packed``) also has a column per pair of
jobs that gain by sharing a model's devices (:func:`~.lp.pair_columns`): a pair's time
adds to each member's throughput its rate there times the fraction it keeps beside the
other. It solves one column per job (up to :data:`~.lp.CLASSES_ABOVE` active jobs; above
that, classes without pairs), and keeps its last answers for the rounds that ask the same
question (the same jobs, in the same order, on the same devices).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from scipy.sparse import coo_matrix, csr_matrix

from accelnet.sched.colocate import PackedAllocation
from accelnet.sched.policies.lp import (
    CLASSES_ABOVE,
    Kept,
    SpeedRows,
    allocation,
    extra_columns,
    job_rows,
    kept,
    pair_allocation,
    pair_columns,
    pairs_of,
    side_by_side,
    solve,
    solve_csc,
    stack,
)
from accelnet.sched.policies.memo import Memo
from accelnet.sched.rounds import Allocation, RoundContext, RoundPolicy
from accelnet.sched.snapshot import JobView


def equal_share(ctx: RoundContext, jobs: Sequence[JobView] | None = None) -> dict[str, float]:
    """Each job's throughput from an equal share of every model (time fractions scaled so
    that a job never gets more than all of its time), per device of its gang: as in
    Gavel's formulation, a job's level counts its gang size, so a gang is not held to the
    level of a single-device job. ``jobs``: only these of ``ctx``'s jobs (the share is
    still of all of them)."""
    n = max(1, len(ctx.jobs))
    share = {m: ctx.capacity[m] / n for m in ctx.models}
    out: dict[str, float] = {}
    for job in ctx.jobs if jobs is None else jobs:
        rates = ctx.tput[job.id]
        gang = max(1, ctx.gang[job.id])
        time = {m: share[m] / gang for m in rates}
        total = sum(time.values())
        scale = 1.0 / total if total > 1.0 else 1.0
        out[job.id] = sum(rates[m] * time[m] * scale for m in rates) / gang
    return out


class HeteroFair(RoundPolicy):
    """Max-min fairness over normalised effective throughput (see the module docstring)."""

    name = "hetero-fair"
    rotates = True  # time-slices by time received (see RoundPolicy.rotates)
    timeless = True  # its LPs read the jobs' rates, gangs and weights and the devices

    def __init__(self) -> None:
        self._solved: Memo[list[dict[str, float] | None]] = Memo()
        self._packs_solved: Kept[PackedAllocation | None] = Memo()

    @classmethod
    def packed(cls) -> HeteroFair:
        """The variant that also packs pairs of jobs (``hetero-fair-packed``)."""
        policy = cls()
        policy.packs = True
        policy.name = "hetero-fair-packed"
        return policy

    def allocate(self, ctx: RoundContext) -> Allocation:
        """See :class:`RoundPolicy`."""
        if self.packs and ctx.colocated is not None and len(ctx.jobs) <= CLASSES_ABOVE:
            packed = self._packed_kept(ctx)
            if packed is not None:
                return packed
        members: dict[tuple[object, ...], list[str]] = {}
        for job in ctx.jobs:
            key = (tuple(sorted(ctx.tput[job.id].items())), ctx.gang[job.id],
                   ctx.weights.get(job.id, 1.0))  # fmt: skip
            members.setdefault(key, []).append(job.id)
        # the LP is a function of these alone (a class's fair share too: its rates, its
        # gang, the number of jobs and the capacity), in this order
        lp_key = (len(ctx.jobs), tuple((m, ctx.capacity[m]) for m in ctx.models),
                  tuple((key, len(ids)) for key, ids in members.items()))  # fmt: skip
        shares = self._solved.get(lp_key)
        if shares is None:
            shares = self._solve(ctx, members)
            self._solved.put(lp_key, shares)
        out: dict[str, dict[str, float]] = {}
        for ids, share in zip(members.values(), shares, strict=True):
            if share is not None:
                for jid in ids:
                    out[jid] = dict(share)
        return out

    def _packed_kept(self, ctx: RoundContext) -> PackedAllocation | None:
        """:meth:`_packed`'s answer, kept for the rounds that ask it again (:func:`~.lp.kept`:
        its LP reads every job, the models and their devices)."""
        shape = (tuple(ctx.capacity.items()), tuple(ctx.models))
        answer = kept(self._packs_solved, ctx, ctx.jobs, shape,
                      lambda: self._packed(ctx, equal_share(ctx)))  # fmt: skip
        return None if answer is None else PackedAllocation(answer.alone, answer.pairs)

    def _solve(
        self, ctx: RoundContext, members: dict[tuple[object, ...], list[str]]
    ) -> list[dict[str, float] | None]:
        """The two stages over classes: each class's member share (None: none), in the
        order of ``members``."""
        reps = {ids[0]: ids for ids in members.values()}
        none: list[dict[str, float] | None] = [None] * len(members)
        sub = RoundContext([j for j in ctx.jobs if j.id in reps], ctx.models, ctx.capacity,
                           ctx.gang, ctx.tput, ctx.info, ctx.round_s, ctx.weights)  # fmt: skip
        fair = equal_share(ctx, sub.jobs)
        p = pairs_of(sub)
        if p.n == 0:
            return none
        size = np.array([float(len(reps[j])) for j in p.jobs])
        p.b_shared[: len(p.jobs)] = size  # a class has as much time as it has members
        norm = np.array(
            [1.0 / max(1e-12, fair[p.jobs[i]] * ctx.weights.get(p.jobs[i], 1.0) * size[i])
             for i, _ in p.pairs]
        )  # fmt: skip
        coef = p.rate * norm  # a class's columns hold its members' summed time
        jobs, n = len(p.jobs), p.n
        # per column, its class's time row (1), its model's capacity row (gang) and its
        # class's level row (-coef); stage 1 adds t's column (1 in each level row)
        rows = SpeedRows.of(p, coef)
        # stage 1: maximise t s.t. level_j >= t  <=>  t - level_j <= 0
        b = np.concatenate([p.b_shared, np.zeros(jobs)])
        c = np.zeros(n + 1)
        c[-1] = -1.0
        col_size = size[p.index]
        v = solve_csc(c, rows.with_theta(np.ones(jobs)), b, np.zeros(n + 1),
                      np.append(col_size, np.inf))  # fmt: skip
        if v is None:
            return none
        t = v[-1] * (1 - 1e-6)
        # stage 2: the most total normalised throughput with every job at level t or more
        b2 = np.concatenate([p.b_shared, -np.full(jobs, t)])
        v2 = solve_csc(-coef * col_size, rows.csc(), b2, np.zeros(n), col_size.copy())
        best = v2 if v2 is not None else v[: p.n]
        y = allocation(p, best[: p.n] / col_size)  # each member's share
        return [dict(y[ids[0]]) if ids[0] in y else None for ids in members.values()]

    def _packed(self, ctx: RoundContext, fair: dict[str, float]) -> PackedAllocation | None:
        """The two stages with a column per job and per pair that gains by sharing (None:
        no such pair, or no optimum: the caller solves without pairs)."""
        p = pairs_of(ctx)
        pc = pair_columns(ctx, p) if p.n else None
        if pc is None:
            return None
        jobs = len(p.jobs)
        norm = [1.0 / max(1e-12, fair[j] * ctx.weights.get(j, 1.0)) for j in p.jobs]
        coef = p.rate * np.array([norm[i] for i, _ in p.pairs])
        ia = np.array([i for i, _, _ in pc.cols])
        ib = np.array([k for _, k, _ in pc.cols])
        scale = np.array(norm)
        vals = np.concatenate([pc.ra * scale[ia], pc.rb * scale[ib]])
        cols = np.concatenate([np.arange(pc.n), np.arange(pc.n)])
        pair_level = coo_matrix((vals, (np.concatenate([ia, ib]), cols)),
                                shape=(jobs, pc.n)).tocsr()  # fmt: skip
        level = side_by_side(job_rows(p, coef), pair_level)  # each job's normalised level
        shared = side_by_side(p.a_shared, pc.a_shared)
        n = p.n + pc.n
        # stage 1: maximise t s.t. level_j >= t
        a = stack(extra_columns(shared, 1), side_by_side(-level, csr_matrix(np.ones((jobs, 1)))))
        b = np.concatenate([p.b_shared, np.zeros(jobs)])
        c = np.zeros(n + 1)
        c[-1] = -1.0
        v = solve(c, a, b, [(0.0, 1.0)] * n + [(0.0, None)])
        if v is None:
            return None
        t = v[-1] * (1 - 1e-6)
        # stage 2: the most total normalised throughput with every job at level t or more
        total = np.asarray(level.sum(axis=0)).ravel()
        v2 = solve(-total, stack(shared, -level), np.concatenate([p.b_shared, -np.full(jobs, t)]),
                   [(0.0, 1.0)] * n)  # fmt: skip
        best = v2 if v2 is not None else v[:n]
        return PackedAllocation(allocation(p, best[: p.n]), pair_allocation(p, pc, best[p.n :]))
