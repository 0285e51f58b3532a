"""Round-based scheduling: an allocation per round, realised into placements.

Heterogeneity-aware policies (Gavel, OSDI'20) think in *allocations*: ``X[j][m]``, the
fraction of time job ``j`` should spend on device model ``m``. A :class:`RoundPolicy`
computes one (an LP, a ranking...); a :class:`RoundScheduler` turns it into decisions the
controller can apply, through the same :meth:`Scheduler.walk` every other policy uses, live
and in the simulator:

1. **Plan** (at the start of each round, ``round_s`` long, and again when jobs arrive or
   leave): jobs are offered devices in the policy's order of (job, model) pairs. Gavel's
   order is by ``X[j][m]`` over the fraction of time the job has received on ``m`` so far,
   so jobs that are behind their allocation go first. A job takes the model of its first
   pair that still has room for its gang (:func:`~accelnet.sched.roundplan.make_plan`).
   A job already running on that model keeps its devices (no needless move).
2. **Realise**: planned jobs that are not running start on free devices of their model
   (topology-aware: the placement strategy chooses the exact devices). Running jobs that
   are not in the plan, or are planned on another model, are preempted. That happens only
   when a round begins; between rounds, new plans fill free devices and stop nothing.
   Planned jobs waiting for preempted jobs' devices start when those are released; nothing
   else takes those devices meanwhile.
3. **Work conservation**: pairs with ``X = 0`` come last in the order, so devices no
   allocated job can use go to whoever can use them, not idle. Between rounds, devices that
   no queued job takes go to running jobs much faster there (``upgrade``), which move.

Unlike the queue policies, a round scheduler keeps state between decisions: the round's
plan and each job's time per model in the current accounting window (:class:`Window`).
So its decisions are not repeatable: the first decision of a round preempts, a second one
on the same snapshot does not (the round has begun); preview decisions with a copy. A
STARTING job cannot be preempted (the job table allows it only once RUNNING): one not in a
new round's plan keeps its devices until it is RUNNING and the next round begins.

A job stopped at a round boundary is requeued (PREEMPTING, then ADMITTED), keeps its work
if it is checkpointable, and pays the restart cost when it starts again, exactly as a
priority preemption does. So a round never stops a job that is not checkpointable (it
would lose all its work: it keeps its devices until it ends), and a stop must pay for
itself (:class:`StopCost`: the time to save, the job's stop grace, and to warm up again):
a running job whose known remaining time is below its stop cost keeps its devices at a
round, and a move to faster idle devices between rounds must save more time than it costs.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from accelnet.sched.capacity import Schedulable
from accelnet.sched.colocate import (
    PACKED_SHARE,
    Factors,
    PackedAllocation,
    PairRateFn,
    accepts,
    current_mates,
    is_packed,
    packable,
    pair_request,
)
from accelnet.sched.jobinfo import JobInfo, RateFn
from accelnet.sched.jobstate import JobState
from accelnet.sched.placement import PlacementStrategy, explain
from accelnet.sched.reasons import AWAITING_ADMISSION, Reason, WaitCode, make_reason, never_fits
from accelnet.sched.roundplan import leads_home, make_plan, running_plan
from accelnet.sched.scheduler import Scheduler, traffic_hook
from accelnet.sched.shortcuts import Walk
from accelnet.sched.snapshot import Decision, JobView, Placement, Preempt, Start, Tenant
from accelnet.sched.spec import JobSpec, stop_grace
from accelnet.sched.topology import DeviceClass

Allocation = Mapping[str, Mapping[str, float]]  # job -> model -> fraction of time


@dataclass
class RoundContext:
    """What a round policy decides on.

    ``jobs``: the active jobs (queued and running, not those being stopped), in queue
    order; ``models``: the device models with schedulable devices; ``capacity``: such devices
    per model; ``gang``: each job's device count; ``tput``: each job's gang rate (steps/s) per
    model it may use (a model it may not use is absent); ``info``: service and progress;
    ``round_s``: the round length; ``stop_s``: what a stop (a move to another model
    included) costs each running job that a round may stop, in seconds of its run
    (:class:`StopCost`).
    """

    jobs: list[JobView]
    models: list[str]
    capacity: dict[str, int]
    gang: dict[str, int]
    tput: dict[str, dict[str, float]]
    info: JobInfo
    round_s: float
    weights: dict[str, float] = field(default_factory=dict)
    window: Window | None = None
    tenants: Mapping[str, Tenant] = field(default_factory=dict)
    size: dict[str, float] = field(default_factory=dict)  # devices a job holds: count x share
    colocated: Callable[[str, str, str], Factors | None] | None = None  # (a, b, model)
    stop_s: dict[str, float] = field(default_factory=dict)  # a running job's cost of a stop
    # what ``colocated`` reads pair rates from, when it is the same across contexts (the
    # round scheduler's pair rate function), so an answer that depends on them can be kept;
    # a ``replace`` that gives the context other pair rates must set it too (or None)
    pair_source: object | None = None
    # answers a policy derives from this context and reads more than once in a decision
    # (its allocation and its order): not copied by ``replace``, which makes another context
    memo: dict[str, object] = field(default_factory=dict, init=False, repr=False, compare=False)

    @classmethod
    def of(
        cls,
        jobs: list[JobView],
        capacity: Mapping[str, int],
        info: JobInfo,
        round_s: float = 360.0,
        models: Callable[[JobView], Iterable[str]] | None = None,
    ) -> RoundContext:
        """A context from jobs alone: each job's gang rate on every model (or on
        ``models(job)``) that has room for its gang."""
        gang = {j.id: j.spec.resources.accelerators.count for j in jobs}
        tput = {
            j.id: {m: info.rate(j, m) for m in (models(j) if models else capacity)
                   if capacity[m] >= gang[j.id]}
            for j in jobs
        }  # fmt: skip
        return cls(jobs, sorted(capacity), dict(capacity), gang, tput, info, round_s)

    def holds(self, jid: str) -> float:
        """Devices the job holds (its gang times its share of each)."""
        return self.size.get(jid, float(self.gang[jid]))

    def received(self, job: JobView, model: str) -> float:
        """Fraction of the recent past (the current accounting window, or its life) the
        job has run on ``model``."""
        if self.window is not None:
            return self.window.fraction(job, model, self.info.now)
        age = self.info.age(job)
        if age <= 0:
            return 0.0
        gang = max(1, self.gang[job.id])
        return self.info.attained_on(job, model) / gang / age


class Window:
    """Time each job ran on each model since the window opened; reopened every
    ``reset_s`` (Gavel resets its counters every 1,920 s, so a job's priority reflects
    what it received lately, not its whole life)."""

    def __init__(self, reset_s: float) -> None:
        self.reset_s = reset_s
        self.opened = 0.0
        self.last = 0.0
        self.time: dict[tuple[str, str], float] = {}

    def advance(self, now: float, running: Sequence[JobView]) -> None:
        """Count the time since the last call for the jobs running now; reopen if due."""
        if now - self.opened >= self.reset_s:
            self.opened, self.last, self.time = now, now, {}
            return
        dt = now - self.last
        self.last = now
        if dt <= 0:
            return
        for job in running:
            if job.placement is not None and job.state is JobState.RUNNING:
                key = (job.id, job.placement.model)
                self.time[key] = self.time.get(key, 0.0) + dt

    def fraction(self, job: JobView, model: str, now: float) -> float:
        """Share of the window (since the job arrived, if later) it ran on ``model``."""
        span = now - max(self.opened, job.submitted_at)
        return self.time.get((job.id, model), 0.0) / span if span > 0 else 0.0


class RoundPolicy(ABC):
    """Computes an allocation (and, if it wants, its own order of (job, model) pairs).
    ``preemptive``: whether a new round may stop running jobs (else they run to the end).
    ``rotates``: whether its stops mostly take turns, time-slicing jobs that all hold an
    allocation (fairness by time received): such stops gain little each, so the round
    scheduler makes a job run a while before one (:attr:`RoundScheduler.stop_overhead`).
    Policies whose stops put a job that finishes sooner or is owed a share first do not."""

    name = "?"
    preemptive = True
    rotates = False
    packs = False  # whether allocate() may return a PackedAllocation (space sharing)
    # whether allocate() reads only the jobs (their specs, rates, gangs and weights, in
    # order), the models and their devices: not the time, progress or time received, so a
    # round whose jobs and devices are those of the last plan keeps its allocation
    timeless = False

    @abstractmethod
    def allocate(self, ctx: RoundContext) -> Allocation:
        """``X[j][m]`` >= 0 with ``sum_m X[j][m] <= 1`` and, per model,
        ``sum_j X[j][m] * gang_j <= capacity_m``."""

    def order(self, ctx: RoundContext, x: Allocation) -> list[tuple[str, str]]:
        """(job, model) pairs, most deserving first; by default Gavel's priority:
        ``X[j][m]`` over the fraction of time received on ``m`` (never received: first),
        then the allocation, then queue order. Pairs with ``X = 0`` come last, by rate.
        (For a :class:`PackedAllocation`, ``X`` is each job's time alone.)"""
        return [(unit[0], m) for _, unit, m in sorted(self._gavel(ctx, x), key=_first)
                if len(unit) == 1]  # fmt: skip

    def order_units(self, ctx: RoundContext, x: Allocation) -> list[tuple[tuple[str, ...], str]]:
        """Units to plan, most deserving first: a job alone ``((job,), model)`` or a packed
        pair ``((a, b), model)``. By default :meth:`order`'s jobs alone, and the pairs of a
        :class:`PackedAllocation` ranked among them by the same priority (their time
        together over the time the less served of the two received on the model)."""
        if not isinstance(x, PackedAllocation) or not x.pairs:
            return [((j,), m) for j, m in self.order(ctx, x)]
        return [(unit, m) for _, unit, m in sorted(self._gavel(ctx, x), key=_first)]

    def first_units(self, ctx: RoundContext, x: Allocation) -> list[tuple[tuple[str, ...], str]]:
        """Units in an order that puts each job's first unit of :meth:`order_units` before
        its others (what a plan that stands reads: see
        :func:`~accelnet.sched.roundplan.standing_plan`). By default the order itself;
        Gavel's order (not overridden, jobs alone) gives each job's first unit only,
        found without sorting every unit."""
        cls = type(self)
        if (
            cls.order is not RoundPolicy.order
            or cls.order_units is not RoundPolicy.order_units
            or cls._gavel is not RoundPolicy._gavel
            or isinstance(x, PackedAllocation)
        ):
            return self.order_units(ctx, x)
        return _gavel_firsts(ctx, x)

    def _gavel(
        self, ctx: RoundContext, x: Allocation
    ) -> list[tuple[tuple[float, ...], tuple[str, ...], str]]:
        """Every unit with its key for Gavel's order (see :meth:`order`)."""
        alone = x.alone if isinstance(x, PackedAllocation) else x
        ranked: list[tuple[tuple[float, ...], tuple[str, ...], str]] = []
        pos_of: dict[str, int] = {}
        for pos, job in enumerate(ctx.jobs):
            pos_of[job.id] = pos
            for model, rate in ctx.tput[job.id].items():
                share = alone.get(job.id, {}).get(model, 0.0)
                if share > 1e-9:
                    got = ctx.received(job, model)
                    prio = share / got if got > 1e-9 else math.inf
                    ranked.append(((0.0, -prio, -share, pos), (job.id,), model))
                elif rate > 0:
                    ranked.append(((1.0, float(pos), -rate, 0.0), (job.id,), model))
        if isinstance(x, PackedAllocation):
            views = {j.id: j for j in ctx.jobs}
            for (a, b), shares in x.pairs.items():
                for model, value in shares.items():
                    if value <= 1e-9 or a not in views or b not in views:
                        continue
                    got = min(ctx.received(views[a], model), ctx.received(views[b], model))
                    prio = value / got if got > 1e-9 else math.inf
                    first = float(min(pos_of[a], pos_of[b]))
                    ranked.append(((0.0, -prio, -value, first), (a, b), model))
        return ranked


def _first(entry: tuple[tuple[float, ...], tuple[str, ...], str]) -> tuple[float, ...]:
    return entry[0]


def _gavel_firsts(ctx: RoundContext, x: Allocation) -> list[tuple[tuple[str, ...], str]]:
    """Each job's first unit in Gavel's order of jobs alone (:meth:`RoundPolicy.order`):
    its unit of the least key of :meth:`RoundPolicy._gavel`, the earliest of equal keys
    (the order's sort is stable), in the order of the jobs. The keys are those of
    ``_gavel``, written out again on purpose: it runs at every round that may stand, and a
    shared helper made it 1.3x dearer (tests/sched/test_roundplan.py holds the two to the
    same first units)."""
    out: list[tuple[tuple[str, ...], str]] = []
    for pos, job in enumerate(ctx.jobs):
        mine = x.get(job.id, {})
        best: tuple[float, ...] | None = None
        first = ""
        for model, rate in ctx.tput[job.id].items():
            share = mine.get(model, 0.0)
            if share > 1e-9:
                got = ctx.received(job, model)
                prio = share / got if got > 1e-9 else math.inf
                key: tuple[float, ...] = (0.0, -prio, -share, pos)
            elif rate > 0:
                key = (1.0, float(pos), -rate, 0.0)
            else:
                continue
            if best is None or key < best:
                best, first = key, model
        if best is not None:
            out.append(((job.id,), first))
    return out


@dataclass(frozen=True, slots=True)
class StopCost:
    """What stopping a running (checkpointable) job costs it, in seconds of its run:
    saving its state, ``checkpoint_s`` (None: the job's own stop grace, what it is given
    between SIGTERM and SIGKILL, the longest a save may take), then warming up again when
    it restarts, ``restart_s`` (loading the checkpoint, rebuilding state). Live the
    defaults apply; the simulator sets its own ``restart_s`` and ``checkpoint_s``, the
    costs it charges."""

    restart_s: float = 30.0
    checkpoint_s: float | None = None

    def of(self, spec: JobSpec) -> float:
        """The cost of one stop of a job of ``spec``."""
        save = self.checkpoint_s if self.checkpoint_s is not None else stop_grace(spec)
        return (save or 0.0) + self.restart_s


class RoundScheduler(Scheduler):
    """A :class:`Scheduler` whose decisions realise a round policy's allocations."""

    def __init__(
        self,
        policy: RoundPolicy,
        placement: str | PlacementStrategy = "best-fit",
        round_s: float = 360.0,
        rates: RateFn | None = None,
        reset_s: float = 1920.0,
        upgrade: float | None = 0.5,
        colocated: PairRateFn | None = None,
        stop_cost: StopCost | None = None,
        min_reallocation_s: float = 0.0,
        stop_overhead: float | None = 0.01,
    ) -> None:
        if not round_s > 0:
            raise ValueError(f"round_s must be > 0, got {round_s}")
        if not (math.isfinite(min_reallocation_s) and min_reallocation_s >= 0):
            raise ValueError(f"min_reallocation_s must be >= 0 s, got {min_reallocation_s}")
        if stop_overhead is not None and not 0 < stop_overhead <= 1:
            raise ValueError(f"stop_overhead must be in (0, 1], got {stop_overhead}")
        super().__init__("fifo", placement, "none", rates=rates)
        self.policy = policy
        self.round_s = round_s
        self._round = -1
        self._active: frozenset[str] = frozenset()
        self._plan: dict[str, str] = {}  # job -> model, for the current round
        self._mate: dict[str, str] = {}  # job -> the job it is planned packed with
        self.colocated = colocated  # pair rates, for policies that pack
        self._x: Allocation = {}
        # re-solve the allocation at most once per min_reallocation_s (0: at every round
        # and every change of the jobs): when it was last solved, whether the jobs or the
        # devices changed since, and the devices per model at the last plan
        self.min_reallocation_s = min_reallocation_s
        self._solved_at: float | None = None
        self._stale = False
        self._room: dict[str, int] = {}
        self._fixed: frozenset[str] = frozenset()  # running jobs this round could not stop
        self._planned: _Planned | None = None  # what the last plan was made from
        self.window = Window(reset_s)
        self.upgrade = upgrade  # move running jobs onto idle faster devices (see _upgrades)
        self.stop_cost = stop_cost or StopCost()
        # a round stops a running job only once it has run stop cost / stop_overhead since
        # it (re)started (at most an accounting window): see _stoppable (None: no floor)
        self.stop_overhead = stop_overhead
        # each job's rates per model, kept across decisions: (spec, rate fn, room, rates)
        self._all: tuple[object, dict[str, int]] = (None, {})  # topology, devices per model
        self._tput: dict[str, tuple[JobSpec, RateFn, tuple[tuple[str, int], ...],
                                    dict[str, float]]] = {}  # fmt: skip

    def walk(self, w: Walk) -> Decision:
        """Plan (when a round begins or the jobs changed) and realise the plan."""
        info = w.info or JobInfo(0.0, self.rates)
        running = [j for j in w.running if j.state in (JobState.STARTING, JobState.RUNNING)]
        stopping_views = [j for j in w.running if j.state is JobState.PREEMPTING]
        stopping = [j.id for j in stopping_views]
        queued = list(w.ordered)
        jobs = running + queued
        self._forget(w.queued, w.queued_ids)
        waiting: dict[str, Reason] = dict.fromkeys(w.pending, AWAITING_ADMISSION)
        if not jobs:
            self._plan, self._mate, self._active = {}, {}, frozenset()
            self._planned = None  # the jobs changed: the next round's plan is made
            return Decision((), (), waiting, {})
        round_no = math.floor(info.now / self.round_s)
        self.window.advance(info.now, running)
        new_round = round_no != self._round
        if new_round and not queued and not stopping_views and self._stands(running, info, w):
            self._round = round_no  # every job runs on as planned: nothing to stop or start
            return Decision((), (), waiting, self._shares())
        # who runs packed with whom: a policy that packs needs it at every decision; any
        # other only at a round boundary, to stop pairs left by a policy that packed
        mates_now = current_mates(running) if self.policy.packs or new_round else {}
        # a job being stopped is still one of the jobs: its requeueing changes no plan
        active = frozenset(j.id for j in jobs) | frozenset(stopping)
        preemptive = new_round and self.policy.preemptive
        if new_round or active != self._active:
            # jobs being stopped are planned too: they hold devices now and will requeue
            ctx = self._context(jobs + stopping_views, info, w)
            self._planned = (
                _Planned(ctx, dict(w.tenants), info.rates)
                if not queued and not stopping_views
                else None
            )
            self._allocate(ctx, active)
            self._replan(ctx, preemptive, running, [*stopping, *(q.id for q in queued)],
                         mates_now, info)  # fmt: skip
            self._round, self._active = round_no, active
        preemptions: list[Preempt] = []
        if preemptive:
            for job in running:
                if job.id in self._fixed:
                    continue  # kept running through the round (see _stoppable)
                planned = self._plan.get(job.id)
                moved = job.placement is not None and planned != job.placement.model
                why = self._why(job, planned)
                if not moved and self._repack(job, mates_now):
                    moved, why = True, f"{self.policy.name} round: packed anew"
                if moved and job.state is JobState.RUNNING:
                    preemptions.append(Preempt(job.id, "", why))
        leaving = frozenset(p.job for p in preemptions)
        starts = self._starts(queued, running, stopping_views, leaving, w, waiting)
        quotas = any(t.quota for t in w.tenants.values())
        if (
            not preemptive
            and self.upgrade is not None
            and self.policy.preemptive
            and running
            and not quotas
        ):  # a move is not checked against quotas: none when there are
            preemptions += self._upgrades(running, info, w)
        return Decision(tuple(starts), tuple(preemptions), waiting, self._shares())

    def _shares(self) -> dict[str, dict[str, float]]:
        """The decision's time shares: a copy of the allocation."""
        return {j: dict(m) for j, m in self._x.items()}

    def _stands(self, running: Sequence[JobView], info: JobInfo, w: Walk) -> bool:
        """A round begins with every job running (none queued or being stopped): whether
        the plan stands, found from the last plan's context (the same job views, tenants,
        rates and devices; its allocation kept, see :meth:`_holds`) at the time now, without
        making a context, an allocation or a plan. If so the plan is set (each job on its
        model, as :meth:`_replan` would set it); if not, nothing changes."""
        last = self._planned
        if last is None or self._mate or self.policy.packs or not self._holds(info.now):
            return False
        ctx = last.ctx
        if len(ctx.jobs) != len(running) or any(
            a is not b for a, b in zip(ctx.jobs, running, strict=True)
        ):
            return False
        if info.rates is not last.rates or w.tenants != last.tenants:
            return False
        plan = last.standing()
        if plan is None or self._capacity(w) != ctx.capacity:
            return False  # not every job runs whole where it may stay (see running_plan)
        if self.policy.preemptive:
            now = replace(ctx, info=info)  # a new memo: the time has moved
            if not leads_home(plan, self.policy.first_units(now, self._x)):
                return False
        self._plan, self._mate, self._fixed = dict(plan), {}, frozenset()
        return True

    def _holds(self, now: float) -> bool:
        """Whether :meth:`_allocate` would leave the allocation as it is at ``now``, for the
        jobs and devices of the last plan: a policy whose allocation does not read the
        time (:attr:`RoundPolicy.timeless`) when it re-solves at every round; with a
        re-allocation interval, unless a re-solve is due."""
        if self.min_reallocation_s <= 0:
            return self.policy.timeless
        return not self._due(now)  # (no device model is gone: the devices are the same)

    def _due(self, now: float) -> bool:
        """With a re-allocation interval: whether the allocation is solved at ``now`` (never
        solved, or the jobs or devices changed since and the interval has passed)."""
        last = self._solved_at
        return last is None or (self._stale and now - last >= self.min_reallocation_s)

    def _replan(
        self,
        ctx: RoundContext,
        preemptive: bool,
        running: Sequence[JobView],
        waiting: Sequence[str],
        mates_now: Mapping[str, str],
        info: JobInfo,
    ) -> None:
        """The plan (``_plan``, ``_mate``) and the jobs a round keeps running (``_fixed``)
        for the allocation ``_x``. ``waiting``: the queued jobs and those being stopped.
        When every job runs, most plans leave each where it is: found without making the
        plan (:func:`~accelnet.sched.roundplan.standing_plan`), the same plan."""
        units = self.policy.order_units(ctx, self._x) if preemptive else None
        planned = self._planned  # this context's, when no job is waiting (see walk)
        if planned is not None and not self.policy.packs and not self._mate:
            assert planned.ctx is ctx and not waiting
            standing = planned.standing()
            if standing is not None and (units is None or leads_home(standing, units)):
                self._plan, self._mate, self._fixed = dict(standing), {}, frozenset()
                return
        keep, kept_mates = self._kept(preemptive, running, waiting, mates_now, info)
        halves = {
            j.id: j.placement.model
            for j in running
            if j.placement is not None and is_packed(j) and j.id not in mates_now
        }
        if units is None:
            units = self.policy.order_units(ctx, self._x)
        self._plan, self._mate = make_plan(ctx, units, keep, kept_mates, halves)
        self._fixed = frozenset(j for j in keep if preemptive)

    def _kept(
        self,
        preemptive: bool,
        running: Sequence[JobView],
        waiting: Sequence[str],
        mates_now: Mapping[str, str],
        info: JobInfo,
    ) -> tuple[dict[str, str], dict[str, str]]:
        """Jobs the plan must leave where they are (job -> model) and the pairs among them.
        When a round begins: the running jobs a round must not stop (not checkpointable, or
        too near their end). Between rounds: every running job, and the earlier plan of the
        ``waiting`` (queued and being stopped) jobs."""
        if preemptive:
            keep = {j.id: j.placement.model for j in running
                    if j.placement is not None and not self._stoppable(j, info)}  # fmt: skip
            return keep, {j: m for j, m in mates_now.items() if j in keep and m in keep}
        keep = {j.id: j.placement.model for j in running if j.placement is not None}
        keep.update((j, self._plan[j]) for j in waiting if j in self._plan)
        kept_mates = {j: m for j, m in self._mate.items() if j in keep and m in keep}
        kept_mates.update(mates_now)
        return keep, kept_mates

    def _allocate(self, ctx: RoundContext, active: frozenset[str]) -> None:
        """The allocation for this plan. Without a re-allocation interval: solved anew
        (at every round and every change of the jobs). With one, Gavel's rule: solved only
        when the jobs or the devices changed since the last solve (a job that left and came
        back counts), and at most once per interval, but at once when a model has no
        schedulable device left; meanwhile the last allocation stands, the jobs no longer
        active dropped, and jobs that arrived since have none (they take what the
        allocated jobs leave: see :meth:`RoundPolicy.order`)."""
        now = ctx.info.now
        if self.min_reallocation_s <= 0:
            self._x = self.policy.allocate(ctx)
            return
        if active != self._active or ctx.capacity != self._room:
            self._stale = True
        gone = bool(self._room) and not self._room.keys() <= ctx.capacity.keys()
        self._room = dict(ctx.capacity)
        if gone or self._due(now):
            self._x = self.policy.allocate(ctx)
            self._solved_at, self._stale = now, False
        elif self._stale:
            self._x = _restricted(self._x, active)

    def _upgrades(self, running: Sequence[JobView], info: JobInfo, w: Walk) -> list[Preempt]:
        """Between rounds, devices nobody queued can use go to running jobs that are at
        least ``1 + upgrade`` times faster there and have at least a round's work left:
        they are stopped and restart on them (their plan moves), instead of the devices
        idling until the next round. On Gavel's max_min_fairness.trace this took 1-2 % off
        average JCT and makespan (hetero-fair 14,622 -> 14,388 s). Only the running jobs'
        rates are read (no context per event), and a job's remaining work only when a
        faster model has room for it."""
        assert self.upgrade is not None
        room: dict[str, int] = {}
        for cls in w.index.topo.classes.values():
            room[cls.model.name] = room.get(cls.model.name, 0) + w.index.total_whole(cls.key)
        if not any(room.values()):
            return []  # nothing idle to move to
        capacity = self._capacity(w)
        models = sorted(capacity)
        key = tuple((m, capacity[m]) for m in models)
        moves: list[tuple[float, JobView, str]] = []
        for job in running:
            p = job.placement
            if job.state is not JobState.RUNNING or p is None or p.share < 1:
                continue
            if job.id in self._mate:
                continue  # planned packed: it moves with its mate at the round
            if not job.spec.checkpointable:
                continue  # a stop would lose its work
            gang = job.spec.resources.accelerators.count
            rates = self._job_rates(job, info, w, models, capacity, key)
            here = rates.get(p.model, 0.0)
            bar = here * (1 + self.upgrade)
            faster = [(m, r) for m, r in rates.items()
                      if m != p.model and r > bar and room.get(m, 0) >= gang]  # fmt: skip
            if not faster:
                continue
            left = info.remaining_s(job, p.model)
            if left is not None and left < self.round_s:
                continue  # about to finish: a move would not pay for its restart
            # the time it saves over its remaining work (a round's, if that is not
            # known) must outlast what the stop costs it
            horizon, cost = (self.round_s if left is None else left), self.stop_cost.of(job.spec)
            for model, rate in faster:
                if horizon * (1 - here / rate) > cost:
                    moves.append((rate / max(here, 1e-12), job, model))
        out: list[Preempt] = []
        moved: set[str] = set()
        for _, job, model in sorted(moves, key=lambda m: (-m[0], m[1].id)):
            gang = job.spec.resources.accelerators.count
            if job.id in moved or room.get(model, 0) < gang:
                continue
            room[model] -= gang
            moved.add(job.id)
            self._plan[job.id] = model
            out.append(Preempt(job.id, "", f"{self.policy.name}: moved to idle {model}"))
        return out

    def _stoppable(self, job: JobView, info: JobInfo) -> bool:
        """Whether a round may stop ``job``: it is checkpointable (else it would lose its
        work); under a policy that rotates (:attr:`RoundPolicy.rotates`), it has run at
        least its stop cost over ``stop_overhead`` since it (re)started,
        or a whole accounting window (``reset_s``, 1,920 s) if that is less (each stop then
        costs it at most that fraction of the run before, and a round's rotation does not
        stop a job at every round when stops are dear, while the time each job receives is
        still evened out within a window); and, if its remaining time is known, it has more
        left than a stop costs (it would end before it was running again)."""
        if not job.spec.checkpointable:
            return False
        cost = self.stop_cost.of(job.spec)
        if self.stop_overhead is not None and self.policy.rotates and job.started_at is not None:
            floor = min(cost / self.stop_overhead, self.window.reset_s)
            if info.now - job.started_at < floor:
                return False
        p = job.placement
        left = None if p is None else info.remaining_s(job, p.model)
        return left is None or left > cost

    def _repack(self, job: JobView, mates_now: Mapping[str, str]) -> bool:
        """Whether a running job must stop to run packed anew: it runs whole but is planned
        packed, or runs packed beside another job than the one it is planned with (a packed
        job whose mate has gone keeps running: a new mate can join it)."""
        planned, now = self._mate.get(job.id), mates_now.get(job.id)
        if planned == now:
            return False
        if not is_packed(job):
            return planned is not None
        return now is not None

    def _starts(
        self,
        queued: Sequence[JobView],
        running: Sequence[JobView],
        stopping: Sequence[JobView],
        leaving: frozenset[str],
        w: Walk,
        waiting: dict[str, Reason],
    ) -> list[Start]:
        """Planned queued jobs onto free devices of their model (the rest wait, why noted);
        a packed pair onto the same devices, both members' requests met; a job planned to
        join a running packed job onto the half kept for it (:meth:`_halves`)."""
        starts: list[Start] = []
        started = traffic_hook(self.placement, w.topo, w.running)
        held = {j.id: j for j in running if j.id not in leaving}  # not stopped by this decision
        views = {j.id: j for j in (*running, *stopping, *queued)}
        reserved = self._halves(held, views, w)
        for job in queued:
            model = self._plan.get(job.id)
            never, req = self.request(job, w.topo)
            if never is not None:
                waiting[job.id] = never_fits(never.message)
                continue
            if model is None:
                waiting[job.id] = make_reason(
                    f"{self.policy.name}: not planned to run this round", WaitCode.NOT_PLANNED
                )
                continue
            mine = req.narrowed([i for i, c in enumerate(req.classes) if c.model.name == model])
            mate = self._mate.get(job.id)
            if mate is not None:
                packed = reserved.pop(job.id, None)
                if packed is not None:
                    starts.append(Start(job.id, packed))
                    continue
                if mate in held:  # it runs whole, or elsewhere, or its devices have no room
                    other = views.get(mate)  # another tenant's job is not named to this one
                    who = mate if other and other.spec.tenant == job.spec.tenant else "a job"
                    waiting[job.id] = make_reason(
                        f"planned packed with {who}: waiting for its devices",
                        WaitCode.PLANNED,
                        {"model": model, "packed": True},
                    )
                    continue
                # its mate is queued (or being stopped): this job places the pair
                if mate in views:
                    mine = pair_request(mine, self.request(views[mate], w.topo)[1])
            placed = self.placement.place(mine, w.index)
            if placed is None:
                waiting[job.id] = make_reason(
                    f"planned on {model}: {explain(mine, w.index)}",
                    WaitCode.PLANNED,
                    {"model": model},
                )
                continue
            w.index.hold(placed)
            if mate is not None:  # the pair's devices: each member gets half of every one
                placed = replace(placed, share=PACKED_SHARE)
                reserved[mate] = placed
            starts.append(Start(job.id, placed))
            started(mine, placed)
        return starts

    def _halves(self, held: Mapping[str, JobView], views: Mapping[str, JobView],
                w: Walk) -> dict[str, Placement]:  # fmt: skip
        """The free half of each running packed job's devices, taken for the job planned to
        join it there (queued: its placement; being stopped: kept until it requeues) before
        anyone else is placed, so no other job takes it. Only where the joiner is planned on
        that model and its request accepts those devices."""
        out: dict[str, Placement] = {}
        for host in held.values():
            mate = self._mate.get(host.id)
            p = host.placement
            if mate is None or mate in held or mate not in views or p is None:
                continue
            if not is_packed(host) or self._plan.get(mate) != p.model:
                continue
            never, req = self.request(views[mate], w.topo)
            if never is not None or not accepts(req, p.devices, w.topo):
                continue
            if any(w.index.free_share(d) < PACKED_SHARE - 1e-9 for d in p.devices):
                continue
            w.index.take_all(p.devices, PACKED_SHARE)
            if views[mate].state is not JobState.PREEMPTING:
                out[mate] = replace(p, share=PACKED_SHARE)
        return out

    def _why(self, job: JobView, planned: str | None) -> str:
        where = "not planned this round" if planned is None else f"moved to {planned}"
        return f"{self.policy.name} round: {where}"

    def _context(self, jobs: list[JobView], info: JobInfo, w: Walk) -> RoundContext:
        capacity = self._capacity(w)
        models = sorted(capacity)
        gang: dict[str, int] = {}
        tput: dict[str, dict[str, float]] = {}
        size: dict[str, float] = {}
        room = tuple((m, capacity[m]) for m in models)
        if len(self._tput) > 2 * len(jobs) + 1000:
            ids = {j.id for j in jobs}
            self._tput = {k: v for k, v in self._tput.items() if k in ids}
        for job in jobs:
            acc = job.spec.resources.accelerators
            gang[job.id] = acc.count
            size[job.id] = acc.count * acc.share
            tput[job.id] = dict(self._job_rates(job, info, w, models, capacity, room))
        stop_s = {j.id: self.stop_cost.of(j.spec) for j in jobs
                  if j.state is JobState.RUNNING and j.spec.checkpointable}  # fmt: skip
        weights = {}
        if w.tenants:
            for job in jobs:
                tenant = w.tenants.get(job.spec.tenant)
                weights[job.id] = tenant.weight if tenant is not None else 1.0
        return RoundContext(
            jobs, models, capacity, gang, tput, info, self.round_s, weights, self.window,
            w.tenants, size, self._pair_rates(jobs, gang), stop_s,
            self.colocated if self.policy.packs else None,
        )  # fmt: skip

    def _job_rates(
        self,
        job: JobView,
        info: JobInfo,
        w: Walk,
        models: Sequence[str],
        capacity: Mapping[str, int],
        room: tuple[tuple[str, int], ...],
    ) -> dict[str, float]:
        """The job's gang rate (times its share) on each model it may use that has room
        for its gang; kept across decisions while its spec, the rate function and the
        models' room (``room``: (model, devices) pairs) stay the same. Not to be changed."""
        hit = self._tput.get(job.id)
        if hit is not None and hit[0] is job.spec and hit[1] is info.rates and hit[2] == room:
            return hit[3]
        acc = job.spec.resources.accelerators
        n = acc.count
        never, req = self.request(job, w.topo)
        allowed = {c.model.name for c in req.classes} if never is None else set()
        rates = {m: info.rate(job, m, n) * acc.share for m in models
                 if m in allowed and capacity[m] >= n}  # fmt: skip
        self._tput[job.id] = (job.spec, info.rates, room, rates)
        return rates

    def _capacity(self, w: Walk) -> dict[str, int]:
        """Schedulable devices per model, in the topology's order of models. With none of
        the topology's devices down, its total per model (counted once per topology)."""
        topo, schedulable = w.topo, w.index.schedulable
        whole = isinstance(schedulable, Schedulable) and not schedulable.down
        if whole and schedulable.known is topo.class_of:
            if self._all[0] is not topo:
                self._all = (topo, _count_models(topo.class_of, lambda _: True))
            return dict(self._all[1])
        return _count_models(topo.class_of, schedulable.__contains__)

    def _pair_rates(
        self, jobs: Sequence[JobView], gang: Mapping[str, int]
    ) -> Callable[[str, str, str], Factors | None] | None:
        """The context's pair rates (for a policy that packs and measured pairs)."""
        fn = self.colocated
        if fn is None or not self.policy.packs:
            return None
        specs = {j.id: j.spec for j in jobs if packable(j)}  # the jobs that may pack

        def pair(a: str, b: str, model: str) -> Factors | None:
            sa, sb = specs.get(a), specs.get(b)
            if sa is None or sb is None or gang[a] != gang[b]:
                return None
            return fn(sa, sb, model, gang[a])

        return pair


class _Planned:
    """What a round scheduler's last plan was made from: its context, the tenants (a
    copy) and the rate function; and, found when first asked, the plan in which every
    job of the context stays where it runs, if it may
    (:func:`~accelnet.sched.roundplan.running_plan`: the order aside, it reads only
    these). See :meth:`RoundScheduler._stands`."""

    __slots__ = ("_found", "_plan", "ctx", "rates", "tenants")

    def __init__(self, ctx: RoundContext, tenants: dict[str, Tenant], rates: RateFn) -> None:
        self.ctx, self.tenants, self.rates = ctx, tenants, rates
        self._plan: dict[str, str] | None = None
        self._found = False

    def standing(self) -> dict[str, str] | None:
        """Each job of the context on the model it runs on, or None (see above)."""
        if not self._found:
            self._plan, self._found = running_plan(self.ctx), True
        return self._plan


def _restricted(x: Allocation, active: frozenset[str]) -> Allocation:
    """``x`` without the jobs no longer active (a packed pair goes with either member)."""
    if isinstance(x, PackedAllocation):
        alone = {j: v for j, v in x.alone.items() if j in active}
        pairs = {k: v for k, v in x.pairs.items() if k[0] in active and k[1] in active}
        return PackedAllocation(alone, pairs)
    return {j: v for j, v in x.items() if j in active}


def _count_models(
    class_of: Mapping[str, DeviceClass], keep: Callable[[str], bool]
) -> dict[str, int]:
    """Devices per model among those ``keep`` accepts (models in order of first device)."""
    out: dict[str, int] = {}
    for dev, cls in class_of.items():
        if keep(dev):
            out[cls.model.name] = out.get(cls.model.name, 0) + 1
    return out
