"""``hetero-jct``: an allocation that minimises average job completion time, knowing each
job's rate on every model and its remaining work (a policy Gavel does not have).

Shortest-remaining-processing-time is optimal for average completion time on one machine;
on heterogeneous devices the question is also *where*. The LP maximises the total rate at
which jobs complete, ``sum_j (sum_m rate[j][m] x[j][m]) / r_j``: each job's progress as a
fraction of what it has left. Its optimum puts short jobs first, each on the model where it
is fastest relative to the others, and long jobs on what is left. The round mechanism
re-solves it as work is done, so a job that gets short moves up.

Two refinements, each measured on Gavel's ``max_min_fairness.trace`` (BENCHMARKS.md):

- ``gang_weight`` divides each job's term by its gang size to that power (default 1):
  completing a job that holds 4 devices frees them all but counts once in the average, so
  small gangs go first at equal remaining time (average JCT 12,491 -> 12,286 s).
- ``protect_critical``: the job with the longest remaining time on its fastest model, when
  that time exceeds what the whole load needs on the whole fabric (total remaining
  device-time over devices), is the makespan's critical path. It is offered that model
  first, so starving it cannot stretch the makespan (65,602 -> 62,130 s, for 12,286 ->
  12,720 s average JCT). Off by default (``hetero-jct``), on in ``hetero-jct-tail``: under
  a sustained load it costs 2-10 % of average JCT (Gavel-style generated jobs, 0.5 to 3
  jobs/h), so it suits finite batches whose makespan matters.

``guard`` (0 by default) holds every job to that fraction of its min-makespan rate: a
softer and costlier way to bound the makespan.

Above :data:`~.lp.CLASSES_ABOVE` active jobs, jobs alike (rates, gang and work left) are
solved as classes (the same optimum); a class's time goes to its members one after the
other in queue order (to each all of its time), as completion times favour, unless
``guard`` holds every member to a rate (then equal shares).
"""

from __future__ import annotations

import numpy as np

from accelnet.sched.policies.lp import (
    CLASSES_ABOVE,
    allocation,
    class_pairs,
    group,
    job_rows,
    pairs_of,
    solve,
    split,
    stack,
)
from accelnet.sched.policies.min_makespan import MinMakespan, remaining_steps
from accelnet.sched.rounds import Allocation, RoundContext, RoundPolicy


class HeteroJct(RoundPolicy):
    """Maximise the rate at which jobs complete (see the module docstring)."""

    name = "hetero-jct"

    @classmethod
    def tail(cls) -> HeteroJct:
        """The variant that protects the makespan's critical job (``hetero-jct-tail``)."""
        policy = cls(protect_critical=True)
        policy.name = "hetero-jct-tail"
        return policy

    def __init__(
        self, guard: float = 0.0, gang_weight: float = 1.0, protect_critical: bool = False
    ) -> None:
        if not 0.0 <= guard < 1.0:
            raise ValueError(f"guard must be in [0, 1), got {guard}")
        self.guard = guard
        self.gang_weight = gang_weight
        self.protect_critical = protect_critical

    def allocate(self, ctx: RoundContext) -> Allocation:
        """See :class:`RoundPolicy`."""
        left = remaining_steps(ctx)
        grouped = group(ctx, left) if len(ctx.jobs) > CLASSES_ABOVE else None
        if grouped is not None:
            p, col = class_pairs(grouped)
            size = grouped.sizes(p)
        else:
            p = pairs_of(ctx)
            col, size = np.ones(p.n), np.ones(len(p.jobs))
        if p.n == 0:
            return {}
        gang = np.array([float(ctx.gang[p.jobs[i]]) for i, _ in p.pairs])
        progress = p.rate / np.array([left[p.jobs[i]] for i, _ in p.pairs])
        progress /= gang**self.gang_weight
        a, b = p.a_shared, p.b_shared
        bounds = [(0.0, float(n)) for n in col]
        guarded = False
        if self.guard > 0:
            theta = MinMakespan().theta(ctx)
            if theta is not None:
                need = np.array([left[j] for j in p.jobs]) * size * theta * self.guard
                a = stack(a, -job_rows(p, p.rate))
                b = np.concatenate([b, -need])
                guarded = True
        v = solve(-progress, a, b, bounds)
        if v is None and guarded:
            v, guarded = solve(-progress, p.a_shared, p.b_shared, bounds), False
        if v is None:
            return {}
        if grouped is not None:  # jobs alike one after the other, unless each is guarded
            return split(grouped, p, v, serial=not guarded)
        return allocation(p, v)

    def order(self, ctx: RoundContext, x: Allocation) -> list[tuple[str, str]]:
        """The critical job's fastest model first (if protected); then allocated pairs by
        the job's remaining time there (shortest first); then the rest by the same (work
        conservation)."""
        left = remaining_steps(ctx)
        ranked = []
        critical: tuple[float, str, str] | None = None
        for pos, job in enumerate(ctx.jobs):
            rates = {m: r for m, r in ctx.tput[job.id].items() if r > 0}
            if not rates:
                continue
            fastest = max(rates, key=lambda m: (rates[m], m))
            longest = left[job.id] / rates[fastest]
            if critical is None or longest > critical[0]:
                critical = (longest, job.id, fastest)
            for model, rate in rates.items():
                share = x.get(job.id, {}).get(model, 0.0)
                finish = left[job.id] / rate
                ranked.append(((0 if share > 1e-6 else 1, finish, pos), job.id, model))
        ranked.sort(key=lambda r: r[0])
        pairs = [(j, m) for _, j, m in ranked]
        if self.protect_critical and critical is not None:
            # the longest job is the makespan's bottleneck only if it outlasts the time the
            # whole load needs on the whole fabric; under a heavy load it is not, and
            # favouring it would only cost average JCT
            area = sum(
                left[j.id] / max(ctx.tput[j.id].values()) * ctx.gang[j.id]
                for j in ctx.jobs
                if any(r > 0 for r in ctx.tput[j.id].values())
            )
            if critical[0] >= area / max(1, sum(ctx.capacity.values())):
                first = (critical[1], critical[2])
                pairs = [first, *(pair for pair in pairs if pair != first)]
        return pairs
