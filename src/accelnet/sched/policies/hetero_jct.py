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

from accelnet.sched.colocate import PackedAllocation
from accelnet.sched.policies.lp import (
    CLASSES_ABOVE,
    KeptPairs,
    Pairs,
    allocation,
    class_pairs,
    group,
    job_rows,
    kept_pair_columns,
    pair_allocation,
    pairs_of,
    solve,
    solve_csc,
    split,
    stack,
)
from accelnet.sched.policies.memo import Memo
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

    @classmethod
    def packed(cls, tail: bool = False) -> HeteroJct:
        """The variant that also packs pairs of jobs on the same devices
        (``hetero-jct-packed``, ``hetero-jct-tail-packed``)."""
        policy = cls(protect_critical=tail, packs=True)
        policy.name = "hetero-jct-tail-packed" if tail else "hetero-jct-packed"
        return policy

    def __init__(
        self,
        guard: float = 0.0,
        gang_weight: float = 1.0,
        protect_critical: bool = False,
        packs: bool = False,
    ) -> None:
        if not 0.0 <= guard < 1.0:
            raise ValueError(f"guard must be in [0, 1), got {guard}")
        if packs and guard > 0:
            raise ValueError("guard and packing do not combine: choose one")
        self.packs = packs
        self._pairs: KeptPairs = Memo(4)  # pair columns (their rates do not change)
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
        work = np.array([left[j] for j in p.jobs])
        # a job with under a step left is as good as done: no more urgent than one step
        # (else its term, a rate over 1e-9, would dwarf the others' by 1e10 and more)
        progress = p.rate / np.maximum(work, 1.0)[p.index]
        progress /= p.gang**self.gang_weight
        if grouped is None and ctx.stop_s:  # (over classes, above CLASSES_ABOVE: not)
            self._stay(ctx, p, progress)
        if self.packs and grouped is None:
            packed = self._packed(ctx, p, left, progress)
            if packed is not None:
                return packed
        lb, ub = np.zeros(p.n), np.asarray(col, dtype=float)
        v: np.ndarray | None = None
        guarded = False
        if self.guard > 0:
            theta = MinMakespan().theta(ctx)
            if theta is not None:
                need = work * size * theta * self.guard
                a = stack(p.a_shared, -job_rows(p, p.rate))
                b = np.concatenate([p.b_shared, -need])
                v = solve(-progress, a, b, [(0.0, float(n)) for n in col])
                guarded = v is not None
        if v is None:  # the shared rows alone, as CSC arrays (no matrix built)
            v = solve_csc(-progress, p.shared_csc(), p.b_shared, lb, ub)
        if v is None:
            return {}
        if grouped is not None:  # jobs alike one after the other, unless each is guarded
            return split(grouped, p, v, serial=not guarded)
        return allocation(p, v)

    @staticmethod
    def _stay(ctx: RoundContext, p: Pairs, progress: np.ndarray) -> None:
        """A running job's pair on the model it runs on counts ``1 + stop cost / round``
        times (in ``progress``): a move to another model costs it a stop, that much of
        its next round's run, so it moves only where the gain outlasts that. The cost is
        taken up to one round (at most twice: a job's own long ``stop_grace_s`` does not
        pin it to its model). Live the default cost is its stop grace and a 30 s restart
        (60 s: 1.17 times in a 360 s round); the simulator's is what it charges."""
        models = {m: k for k, m in enumerate(ctx.models)}
        pos = {jid: k for k, jid in enumerate(p.jobs)}
        here = np.full(len(p.jobs), -1, dtype=np.int32)  # each job's model now (-1: none)
        factor = np.ones(len(p.jobs))
        for job in ctx.jobs:
            cost, placed = ctx.stop_s.get(job.id), job.placement
            k = pos.get(job.id)
            if cost is None or placed is None or k is None or placed.model not in models:
                continue
            here[k], factor[k] = models[placed.model], 1.0 + min(cost, ctx.round_s) / ctx.round_s
        stay = here[p.index] == p.model
        progress[stay] *= factor[p.index[stay]]

    def _packed(
        self, ctx: RoundContext, p: Pairs, left: dict[str, float], progress: np.ndarray
    ) -> PackedAllocation | None:
        """The LP with a column per pair of jobs that gain by sharing a model's devices:
        its objective term is the pair's progress, each job's rate there times the
        fraction it keeps, over its remaining work (None: no such pair)."""
        pc = kept_pair_columns(ctx, p, self._pairs)
        if pc is None:
            return None
        a = [p.jobs[i] for i, _, _ in pc.cols]
        b = [p.jobs[k] for _, k, _ in pc.cols]
        gain = pc.ra / np.array([left[j] for j in a]) + pc.rb / np.array([left[j] for j in b])
        terms = gain / np.array([float(ctx.gang[j]) for j in a]) ** self.gang_weight
        n = p.n + pc.n  # the shared rows' CSC arrays built at once (no scipy.sparse blocks)
        v = solve_csc(-np.concatenate([progress, terms]), pc.shared_csc(p), p.b_shared,
                      np.zeros(n), np.ones(n))  # fmt: skip
        if v is None:
            return None
        return PackedAllocation(allocation(p, v[: p.n]), pair_allocation(p, pc, v[p.n :]))

    def order(self, ctx: RoundContext, x: Allocation) -> list[tuple[str, str]]:
        """:meth:`order_units`' jobs alone."""
        return [(unit[0], m) for unit, m in self.order_units(ctx, x) if len(unit) == 1]

    def order_units(self, ctx: RoundContext, x: Allocation) -> list[tuple[tuple[str, ...], str]]:
        """The critical job's fastest model first (if protected); then allocated units (a
        job alone, a packed pair) by remaining time there (a pair: its shorter member's,
        at its packed rate), shortest first; then the rest by the same (work conservation).
        """
        left = remaining_steps(ctx)
        alone = x.alone if isinstance(x, PackedAllocation) else x
        ranked: list[tuple[tuple[int, float, int], tuple[str, ...], str]] = []
        critical: tuple[float, str, str] | None = None
        protect, none = self.protect_critical, dict[str, float]()
        for pos, job in enumerate(ctx.jobs):
            jid = job.id
            rates = {m: r for m, r in ctx.tput[jid].items() if r > 0}
            if not rates:
                continue
            work, shares, unit = left[jid], alone.get(jid, none), (jid,)
            if protect:  # the job that would end last alone on its fastest model
                fastest = max(rates, key=lambda m: (rates[m], m))
                longest = work / rates[fastest]
                if critical is None or longest > critical[0]:
                    critical = (longest, jid, fastest)
            for model, rate in rates.items():
                later = 0 if shares.get(model, 0.0) > 1e-6 else 1
                ranked.append(((later, work / rate, pos), unit, model))
        if isinstance(x, PackedAllocation) and ctx.colocated is not None:
            pos_of = {j.id: k for k, j in enumerate(ctx.jobs)}
            for (a, b), shares in x.pairs.items():
                for model, value in shares.items():
                    f = ctx.colocated(a, b, model)
                    ra, rb = ctx.tput.get(a, {}).get(model), ctx.tput.get(b, {}).get(model)
                    if f is None or value <= 1e-6 or not ra or not rb:
                        continue  # (a model gone since a standing allocation was solved)
                    finish = min(left[a] / (f[0] * ra), left[b] / (f[1] * rb))
                    ranked.append(((0, finish, min(pos_of[a], pos_of[b])), (a, b), model))
        ranked.sort(key=lambda r: r[0])
        pairs = [(u, m) for _, u, m in ranked]
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
                first = ((critical[1],), critical[2])
                pairs = [first, *(pair for pair in pairs if pair != first)]
        return pairs
