"""``hetero-fair``: heterogeneity-aware max-min fairness (Gavel's ``max_min_fairness_perf``).

Each job's *effective throughput* under an allocation is ``sum_m rate[j][m] x[j][m]``. It is
normalised by what the job would get from an equal share of the cluster (each model's
devices split evenly among the jobs, at most all of the job's time), and divided by its
tenant's weight. The LP maximises the smallest normalised throughput; a second LP then
maximises the total, keeping every job at that level (so capacity the fairness bound does
not need is not left idle). Solved with HiGHS.
"""

from __future__ import annotations

import numpy as np
from scipy.sparse import csr_matrix, hstack

from accelnet.sched.policies.lp import allocation, extra_columns, job_rows, pairs_of, solve, stack
from accelnet.sched.rounds import Allocation, RoundContext, RoundPolicy


def equal_share(ctx: RoundContext) -> dict[str, float]:
    """Each job's throughput from an equal share of every model (time fractions scaled so
    that a job never gets more than all of its time)."""
    n = max(1, len(ctx.jobs))
    share = {m: ctx.capacity[m] / n for m in ctx.models}
    out: dict[str, float] = {}
    for job in ctx.jobs:
        rates = ctx.tput[job.id]
        gang = max(1, ctx.gang[job.id])
        time = {m: share[m] / gang for m in rates}
        total = sum(time.values())
        scale = 1.0 / total if total > 1.0 else 1.0
        out[job.id] = sum(rates[m] * time[m] * scale for m in rates)
    return out


class HeteroFair(RoundPolicy):
    """Max-min fairness over normalised effective throughput (see the module docstring)."""

    name = "hetero-fair"

    def allocate(self, ctx: RoundContext) -> Allocation:
        """See :class:`RoundPolicy`."""
        p = pairs_of(ctx)
        if p.n == 0:
            return {}
        fair = equal_share(ctx)
        norm = np.array(
            [1.0 / max(1e-12, fair[p.jobs[i]] * ctx.weights.get(p.jobs[i], 1.0))
             for i, _ in p.pairs]
        )  # fmt: skip
        coef = p.rate * norm
        level_rows = job_rows(p, coef)  # normalised throughput of each job
        jobs = len(p.jobs)
        # stage 1: maximise t s.t. level_j >= t  <=>  t - level_j <= 0
        a = stack(
            extra_columns(p.a_shared, 1),
            csr_matrix(hstack([-level_rows, csr_matrix(np.ones((jobs, 1)))])),
        )
        b = np.concatenate([p.b_shared, np.zeros(jobs)])
        c = np.zeros(p.n + 1)
        c[-1] = -1.0
        v = solve(c, a, b, [(0.0, 1.0)] * p.n + [(0.0, None)])
        if v is None:
            return {}
        t = v[-1] * (1 - 1e-6)
        # stage 2: the most total normalised throughput with every job at level t or more
        a2 = stack(p.a_shared, -level_rows)
        b2 = np.concatenate([p.b_shared, -np.full(jobs, t)])
        v2 = solve(-coef, a2, b2, [(0.0, 1.0)] * p.n)
        return allocation(p, v2 if v2 is not None else v)
