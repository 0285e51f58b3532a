"""``energy``: the fewest joules per unit of work, within a power budget and deadlines.

**Power.** A device of model ``m`` draws ``idle_w_m`` when idle and ``max_w_m`` when busy
(the catalog's figures, as in the simulator's power model). Under an allocation ``x`` the
cluster draws, on average over a round::

    P(x) = F + sum_{j,m} (max_w_m - idle_w_m) * gang_j * x[j][m],   F = sum_m idle_w_m * cap_m

``F``, the *idle floor*, is paid whatever runs. A job on a share of a device counts as a
whole device, as in the capacity rows.

**Work.** Steps of different job types are not comparable, so work is counted in device-
seconds at the job's best speed: ``W(x) = sum_j gang_j * speed_j(x) / best_j`` with
``speed_j = sum_m rate[j][m] x[j][m]`` and ``best_j`` its rate on its fastest model here.
A job on its fastest model counts its whole gang; on a model half as fast, half of it.

**Objective.** The energy a set of jobs costs is power times the time their work takes,
and that time is work over its rate of progress, so the policy minimises joules per unit
of work, ``P(x) / W(x)``. Each job then goes where it does the most steps per joule (a
Recommendation job on a P100, which is faster than a V100 at it and draws less). Because
``F`` is in the numerator, the policy does not slow down for nothing: leaving a device idle
lowers ``P`` but also ``W``, and the floor is then spread over less work. The ratio is
myopic, though: it would park a job less efficient than the average of the others,
although its work must be done some time (and later, alone, it bears the floor too). So
the ratio is minimised only among allocations that make at least ``1 - slack`` of the most
progress possible, ``W*``: ``slack`` (default 0.1) is how much progress the policy may
give up for efficiency, e.g. to use a frugal model that is at least 90 % as fast. (Gavel's
``sum progress - lambda * power`` would need a ``lambda`` in W per unit of progress, with no
natural value; minimising power alone at ``(1 - eps) W*`` would idle devices down to the
bound.)

Three LPs (HiGHS), each keeping the constraints before it: the shared time and capacity
rows (:mod:`~accelnet.sched.policies.lp`) and, with a budget, ``P(x) <= budget``.

0. **Deadlines.** A job whose spec has a ``deadline`` (absolute, on the scheduler's clock)
   needs ``need_j = deadline_weight * r_j / (deadline_j - now)`` steps/s, ``r_j`` its
   remaining steps (:func:`~accelnet.sched.policies.min_makespan.remaining_steps`: estimated
   when unknown), at most ``best_j``; a missed deadline needs ``best_j`` (finish as soon as
   possible). ``deadline_weight`` is the margin: 1 aims to finish on the deadline, the
   default 1.1 leaves 10 % for round boundaries and restarts; 0 ignores deadlines. The LP
   maximises ``phi <= 1`` with ``speed_j >= phi * need_j`` for every such job; ``phi = 1``
   when all can be met, else the largest share of its need every one can get. Later
   stages keep ``speed_j >= phi * need_j``.
1. **Progress.** ``W* = max W(x)``.
2. **Efficiency.** Minimise ``P(x) / W(x)`` subject to ``W(x) >= (1 - slack) W*``. A
   linear-fractional program, an LP after Charnes and Cooper: with ``tau = 1 / W(x)`` and
   ``y = tau * x``, minimise ``F tau + d . y`` subject to ``W(y) >= 1`` (equality at the
   optimum, since the objective grows with scale), ``A y <= b tau`` for every row above,
   and ``tau <= 1 / ((1 - slack) W*)``; then ``x = y / tau``.

**Budget.** ``power_budget_w`` bounds ``P(x)``, which includes the floor. A budget below
the floor cannot be met even by idling every device: the policy then allocates nothing
and every job waits. A round realises fractions in whole devices, so :meth:`Energy.order`
also keeps the *instantaneous* draw within the budget: it drops a (job, model) pair whose
start, on top of the jobs running and those planned before it, would exceed the budget.
The floor counts the schedulable devices only (failed or drained ones are not seen).

**Power caps** are not this policy's business: an operator caps devices (the simulator's
``--power-cap``, a device's ``power_limit_w``), which makes them slower and lowers their
draw. The policy assumes uncapped devices (``max_w`` when busy), so under caps its power
figures are an upper bound and its rates optimistic; it allocates under the budget.

Unlike Gavel's policies, devices the allocation leaves idle stay idle: :meth:`Energy.order`
drops pairs with ``X = 0`` (no work-conserving fill), since the LP found them not worth
their energy. Fairness is not this policy's aim: a job that is inefficient everywhere may
wait while efficient ones run, within the ``slack`` bound.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import numpy as np
from scipy.sparse import csr_matrix, hstack

from accelnet.fabric.catalog import find_device_model
from accelnet.sched.jobstate import JobState
from accelnet.sched.policies.lp import (
    Pairs,
    allocation,
    extra_columns,
    job_rows,
    pairs_of,
    solve,
    stack,
)
from accelnet.sched.policies.min_makespan import remaining_steps
from accelnet.sched.rounds import Allocation, RoundContext, RoundPolicy

_TOL = 1e-6  # relative give on a bound found by an earlier stage
_LIVE = (JobState.RUNNING, JobState.STARTING)


class PowerTable:
    """Idle and busy draw (W) of the device models in a context, from the catalog.

    A model the catalog does not know is taken to draw as much as the hungriest known one
    (idle and busy), so it is never preferred for being unknown and never under-counted
    against a budget; with none known, it draws nothing.
    """

    def __init__(self, models: Iterable[str]) -> None:
        self._w: dict[str, tuple[float, float]] = {}
        unknown: list[str] = []
        for name in models:
            found = find_device_model(name)
            if found is None:
                unknown.append(name)
            else:
                self._w[name] = (found.idle_w, max(found.idle_w, found.max_w))
        idle = max((w[0] for w in self._w.values()), default=0.0)
        busy = max((w[1] for w in self._w.values()), default=0.0)
        for name in unknown:
            self._w[name] = (idle, busy)

    def idle_w(self, model: str) -> float:
        """Draw of one idle device of ``model``."""
        return self._w[model][0]

    def dynamic_w(self, model: str) -> float:
        """Extra draw of one busy device of ``model`` over its idle draw."""
        idle, busy = self._w[model]
        return busy - idle

    @classmethod
    def of(cls, ctx: RoundContext) -> PowerTable:
        """The table for ``ctx``'s models and those its running jobs are on."""
        running = [j.placement.model for j in ctx.jobs if j.placement is not None]
        return cls([*ctx.models, *running])

    def floor(self, ctx: RoundContext) -> float:
        """``F``: every schedulable device of ``ctx`` idle."""
        return sum(self.idle_w(m) * ctx.capacity[m] for m in ctx.models)


def allocation_power(ctx: RoundContext, x: Allocation) -> float:
    """``P(x)``: the cluster's average draw (W) under allocation ``x``, idle floor included."""
    table = PowerTable.of(ctx)
    busy = sum(
        table.dynamic_w(m) * ctx.gang[j] * share for j, row in x.items() for m, share in row.items()
    )
    return table.floor(ctx) + busy


class Energy(RoundPolicy):
    """Least joules per unit of work within ``power_budget_w`` (W, idle floor included;
    None: no budget) and the jobs' deadlines; see the module docstring for the LPs and
    for ``deadline_weight`` (margin on deadline rates) and ``slack`` (progress that may be
    given up for efficiency)."""

    name = "energy"
    rotates = True  # time-slices by time received (see RoundPolicy.rotates)

    def __init__(
        self,
        power_budget_w: float | None = None,
        deadline_weight: float = 1.1,
        *,
        slack: float = 0.1,
    ) -> None:
        if power_budget_w is not None and not (
            math.isfinite(power_budget_w) and power_budget_w > 0
        ):
            raise ValueError(
                f"power_budget_w must be a finite number of W > 0, got {power_budget_w!r}"
            )
        if not (math.isfinite(deadline_weight) and deadline_weight >= 0):
            raise ValueError(f"deadline_weight must be finite and >= 0, got {deadline_weight!r}")
        if not (0 <= slack < 1):
            raise ValueError(f"slack must be in [0, 1), got {slack!r}")
        self.power_budget_w = power_budget_w
        self.deadline_weight = deadline_weight
        self.slack = slack

    def required_rates(self, ctx: RoundContext) -> dict[str, float]:
        """``need_j`` (steps/s) of each job with a deadline that can run here (stage 0)."""
        if self.deadline_weight == 0:
            return {}
        left: dict[str, float] | None = None
        out: dict[str, float] = {}
        for job in ctx.jobs:
            best = max(ctx.tput[job.id].values(), default=0.0)
            if job.spec.deadline is None or best <= 0:
                continue
            if left is None:
                left = remaining_steps(ctx)
            span = job.spec.deadline - ctx.info.now
            wanted = self.deadline_weight * left[job.id] / span if span > 0 else best
            out[job.id] = min(best, wanted)
        return out

    def allocate(self, ctx: RoundContext) -> Allocation:
        """See :class:`RoundPolicy` and the module docstring."""
        table = PowerTable.of(ctx)
        floor = table.floor(ctx)
        budget = self.power_budget_w
        if budget is not None and budget < floor:
            return {}  # every device idle already draws more than the budget
        p = pairs_of(ctx)
        if p.n == 0:
            return {}
        gang = np.array([float(ctx.gang[p.jobs[i]]) for i, _ in p.pairs])
        dyn = np.array([table.dynamic_w(m) for _, m in p.pairs]) * gang
        best = {j: max(ctx.tput[j].values()) for j in p.jobs}
        work = p.rate * gang / np.array([best[p.jobs[i]] for i, _ in p.pairs])
        a, b = p.a_shared, p.b_shared
        if budget is not None:
            a = stack(a, csr_matrix(dyn.reshape(1, -1)))
            b = np.append(b, budget - floor)
        a, b = self._deadline_rows(ctx, p, a, b)
        v1 = solve(-work, a, b, [(0.0, 1.0)] * p.n)
        if v1 is None:
            return {}
        most = float(work @ v1)
        if most <= 0:
            return allocation(p, v1)
        v2 = self._least_ratio(floor, dyn, work, a, b, most)
        return allocation(p, v2 if v2 is not None else v1)

    def _deadline_rows(
        self, ctx: RoundContext, p: Pairs, a: csr_matrix, b: np.ndarray
    ) -> tuple[csr_matrix, np.ndarray]:
        """Stage 0: ``a``, ``b`` with ``speed_j >= phi * need_j`` rows, at the best ``phi``."""
        needs = self.required_rates(ctx)
        need = np.array([needs.get(j, 0.0) for j in p.jobs])
        has = need > 0
        if not has.any():
            return a, b
        speed = job_rows(p, p.rate)[has]
        a0 = stack(
            extra_columns(a, 1), csr_matrix(hstack([-speed, csr_matrix(need[has].reshape(-1, 1))]))
        )
        b0 = np.concatenate([b, np.zeros(int(has.sum()))])
        c = np.zeros(p.n + 1)
        c[-1] = -1.0
        v = solve(c, a0, b0, [(0.0, 1.0)] * p.n + [(0.0, 1.0)])
        if v is None or v[-1] <= 0:
            return a, b  # no deadline can be helped: go on without them
        phi = float(v[-1]) * (1 - _TOL)
        return stack(a, -speed), np.concatenate([b, -phi * need[has]])

    def _least_ratio(
        self,
        floor: float,
        dyn: np.ndarray,
        work: np.ndarray,
        a: csr_matrix,
        b: np.ndarray,
        most: float,
    ) -> np.ndarray | None:
        """Stage 2 (Charnes-Cooper): the ``x`` of least ``P/W`` with ``W >= (1-slack) most``."""
        n = work.size
        a2 = stack(
            csr_matrix(hstack([a, csr_matrix(-b.reshape(-1, 1))])),
            csr_matrix(np.append(-work, 0.0).reshape(1, -1)),
        )
        b2 = np.concatenate([np.zeros(a.shape[0]), [-1.0]])
        tau_max = 1.0 / ((1 - self.slack) * most * (1 - _TOL))
        v = solve(np.append(dyn, floor), a2, b2, [(0.0, None)] * n + [(0.0, tau_max)])
        if v is None or v[-1] <= 1e-12:
            return None
        return np.asarray(v[:n] / v[-1], dtype=float)

    def order(self, ctx: RoundContext, x: Allocation) -> list[tuple[str, str]]:
        """Gavel's order of the pairs the allocation uses (no work-conserving fill); with a
        budget, without the pairs whose start would take the draw above it, planning as
        the round scheduler does (each job takes its first pair with room) on top of the
        jobs running now."""
        pairs = [(j, m) for j, m in super().order(ctx, x) if x.get(j, {}).get(m, 0.0) > 1e-9]
        budget = self.power_budget_w
        if budget is None:
            return pairs
        table = PowerTable.of(ctx)
        held: dict[str, float] = {}
        for job in ctx.jobs:
            where = job.placement
            if where is not None and job.state in _LIVE:
                held[job.id] = table.dynamic_w(where.model) * len(where.devices)
        power = table.floor(ctx) + sum(held.values())
        room = dict(ctx.capacity)
        planned: set[str] = set()
        out: list[tuple[str, str]] = []
        for jid, model in pairs:
            need = ctx.gang[jid]
            if jid in planned or room.get(model, 0) < need:
                continue
            extra = table.dynamic_w(model) * need - held.get(jid, 0.0)  # a move frees its old draw
            if power + extra > budget * (1 + 1e-9):
                continue
            power += extra
            room[model] -= need
            planned.add(jid)
            out.append((jid, model))
        return out
