"""``Scheduler.decide(snapshot) -> Decision``: pure, deterministic, explained.

One decision walks the queue in the ordering policy's order and, for each job, checks its
tenant's quota, asks the placement strategy for exact devices, and either starts it (the
devices are taken from the capacity index at once, so later jobs see them as used) or
records why it waits; a job that does not fit may preempt lower-priority work under the
preemption rule. The live controller and the simulator call the very same object.

The rule is :meth:`Scheduler.walk` and ``_one`` here; what only makes it fast (the walk's
inputs, failed shapes, lazy reasons, merged per-shape queues: ``Walk``, ``Failed``,
``Reasons``, ``merge_shapes``) is in :mod:`accelnet.sched.shortcuts`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from accelnet.fabric import DomainLevel, Fabric
from accelnet.fabric.catalog import find_device_model
from accelnet.sched.capacity import SHARE_UNITS, CapacityIndex, host_units, tally_hosts, units
from accelnet.sched.jobinfo import JobInfo, RateFn
from accelnet.sched.jobstate import JobState
from accelnet.sched.ordering import ORDERINGS, OrderingPolicy, queued_jobs
from accelnet.sched.placement import PLACEMENTS, PlacementStrategy, SeesTraffic, explain
from accelnet.sched.preemption import (
    PREEMPTIONS,
    NoPreemption,
    PreemptionRule,
    VictimSearch,
    release,
)
from accelnet.sched.reasons import (
    AWAITING_ADMISSION,
    Reason,
    WaitCode,
    make_reason,
    never_fits,
    no_capacity,
)
from accelnet.sched.request import (
    Rejection,
    Request,
    request_and_rejection,
)
from accelnet.sched.reserve import hold_for
from accelnet.sched.shortcuts import Failed, Listed, Reasons, Shape, Walk, merge_shapes
from accelnet.sched.snapshot import (
    Decision,
    JobView,
    Placement,
    Preempt,
    Snapshot,
    Start,
    Tenant,
)
from accelnet.sched.spec import JobSpec
from accelnet.sched.topology import (
    CPU_UNITS,
    LEVEL_NAMES,
    LEVELS,
    MEMORY_UNITS,
    Topology,
    cpu_units,
    memory_units,
)

_HOLDING = frozenset({JobState.STARTING, JobState.RUNNING, JobState.PREEMPTING})
_Usage = Mapping[str, Mapping[str, int]]


class Scheduler:
    """Ordering policy + placement strategy + preemption rule, by name or instance.

    ``prune`` (default): a decision does not place again a job whose request shape has
    failed in it already (:meth:`walk`); off, every queued job is tried (the same starts,
    slower on long queues of few shapes; tests compare the two).

    ``reserve_after_s``: a gang that has waited this long since it was submitted and does
    not fit has a domain held for it, so that jobs behind it cannot take every device that
    frees up there (:mod:`accelnet.sched.reserve`); None (default): later jobs take
    whatever they fit in (plain backfill).

    Keeps caches between calls, never state that changes a decision: the
    :class:`Topology` of the last fabric it saw, and each queued job's request.
    """

    def __init__(
        self,
        ordering: str | OrderingPolicy = "fifo",
        placement: str | PlacementStrategy = "best-fit",
        preemption: str | PreemptionRule = "none",
        rates: RateFn | None = None,
        *,
        prune: bool = True,
        reserve_after_s: float | None = None,
        **params: Any,
    ) -> None:
        if reserve_after_s is not None and not (
            math.isfinite(reserve_after_s) and reserve_after_s >= 0
        ):
            raise ValueError(f"reserve_after_s must be a number >= 0, not {reserve_after_s!r}")
        self.ordering = (
            ORDERINGS.create(ordering, **params) if isinstance(ordering, str) else ordering
        )
        self.placement = PLACEMENTS.create(placement) if isinstance(placement, str) else placement
        self.preemption = (
            PREEMPTIONS.create(preemption) if isinstance(preemption, str) else preemption
        )
        self.rates = rates  # steps/s per job, model and gang size (None: the jobs' hints)
        self.prune = prune  # skip jobs whose shape failed (see walk); False: try each job
        self.reserve_after_s = reserve_after_s  # see the class docstring
        self._topology: Topology | None = None
        self._requests: dict[str, tuple[JobSpec, Rejection | None, Request, int]] = {}
        self._tights: dict[str, tuple[JobSpec, tuple[Request, int] | None]] = {}  # _level_wait
        self._hold_shapes: dict[int, DomainLevel | None] = {}  # shape -> level (_for_hold)
        self._shapes: dict[tuple[object, ...], int] = {}  # request shape -> a small number

    def topology(self, fabric: Fabric) -> Topology:
        """The (cached) topology of ``fabric``."""
        if self._topology is None or self._topology.fabric is not fabric:
            self._topology = Topology(fabric)
            self._requests.clear()  # shape numbers stay: a job's shape never changes
            self._tights.clear()
            self._hold_shapes.clear()  # the levels domains reach are the fabric's
        return self._topology

    def _make_way(
        self,
        job: JobView,
        req: Request,
        index: CapacityIndex,
        victims: list[JobView],
        reason: str,
        preemptions: list[Preempt],
    ) -> tuple[str, ...]:
        """Record the preemptions and hold the job's future devices; its nomination."""
        target = _placement_after(index, victims, req, self.placement)
        _reserve(index, target)  # later jobs in this decision must not take them
        for v in victims:
            preemptions.append(Preempt(v.id, job.id, preempted_for(v, job, reason)))
        return target

    def _forget(self, queued: int, ids: Callable[[], Iterable[str]]) -> None:
        """Drop cached requests of jobs no longer queued (now and then, not every call)."""
        if len(self._requests) + len(self._tights) > 2 * queued + 1000:
            keep = set(ids())
            self._requests = {k: v for k, v in self._requests.items() if k in keep}
            self._tights = {k: v for k, v in self._tights.items() if k in keep}

    def request(self, job: JobView, topo: Topology) -> tuple[Rejection | None, Request]:
        """The job's never-fits verdict and request, cached per spec object (a queued job
        keeps its spec across decisions; the cache never changes an answer)."""
        hit = self._entry(job, topo)
        return hit[1], hit[2]

    def shape(self, job: JobView, topo: Topology) -> Shape:
        """The job's tenant and the number of its request's shape (everything a placement
        depends on but the job: classes, count, share, levels, traffic): two queued jobs
        of one shape fit, or not, alike (see :meth:`walk`)."""
        return job.spec.tenant, self._entry(job, topo)[3]

    def _entry(
        self, job: JobView, topo: Topology
    ) -> tuple[JobSpec, Rejection | None, Request, int]:
        hit = self._requests.get(job.id)
        if hit is not None and hit[0] is job.spec:
            return hit
        req, never = request_and_rejection(job.id, job.spec, topo)
        entry = self._requests[job.id] = (job.spec, never, req, self._number(req, never))
        return entry

    def _number(self, req: Request, never: Rejection | None = None) -> int:
        """The number of ``req``'s shape: requests alike (and alike never-fit) share it."""
        key = (never and never.message, tuple(c.key for c in req.classes), req.count,
               req.share, req.required, req.preferred, req.comm_bytes, req.step_rates,
               req.counts, req.cpus, req.memory_gb, req.per_host, req.prefer)  # fmt: skip
        return self._shapes.setdefault(key, len(self._shapes))

    def _required_at(self, base: Request, level: DomainLevel) -> tuple[Request, int]:
        """``base`` required at ``level``, and that request's shape number (a job whose spec
        asks for that level outright has the same one: they fit, or not, alike)."""
        req = replace(base, required=level)
        return req, self._number(req)

    def _level_wait(
        self, job: JobView, base: Request, number: int, topo: Topology, now: float
    ) -> tuple[Request, int, float | None]:
        """While ``job``'s ``topology.wait_s`` runs, its request required at its preferred
        level: (request, shape number, when the wait ends); ``base`` as it is, with None,
        once the wait is over or if it changes nothing (no domain at that level could
        ever hold the gang, or it is required there already)."""
        wait = job.spec.topology.wait_s
        if wait is None or now >= job.submitted_at + wait:
            return base, number, None
        hit = self._tights.get(job.id)
        if hit is None or hit[0] is not job.spec:
            hit = self._tights[job.id] = (job.spec, self._tight(base, topo))
        if hit[1] is None:
            return base, number, None
        return hit[1][0], hit[1][1], job.submitted_at + wait

    def _tight(self, base: Request, topo: Topology) -> tuple[Request, int] | None:
        """``base`` required at its preferred level, and that shape's number; None if that
        changes nothing or no domain at that level could ever hold it."""
        level = base.preferred
        if (
            level is None
            or base.required == level
            or base.share < 1
            or not any(topo.largest(c.key, level) >= base.count for c in base.classes)
        ):
            return None
        return self._required_at(base, level)

    def capacity(self, snapshot: Snapshot, running: list[JobView] | None = None) -> CapacityIndex:
        """Free capacity in ``snapshot``: schedulable devices minus what jobs hold
        (``running``: the jobs holding devices, if the caller has them already)."""
        topo = self.topology(snapshot.fabric)
        order = topo.order
        states = snapshot.devices.items()
        free = {d: SHARE_UNITS for d, s in states if s.schedulable() and d in order}
        if running is None:
            running = [j for j in snapshot.jobs if j.state in _HOLDING and j.placement]
        hosts: dict[str, tuple[int, int]] = {}
        for job in running:
            if job.placement is not None:
                used = units(job.placement.share)
                for d in job.placement.devices:
                    if d in free:
                        free[d] = max(0, free[d] - used)
                tally_hosts(hosts, job.placement.hosts)
        return CapacityIndex(topo, {d: u / SHARE_UNITS for d, u in free.items()}, hosts)

    def decide(self, snapshot: Snapshot) -> Decision:
        """Starts, preemptions and reasons for ``snapshot``; no I/O, no clock."""
        topo = self.topology(snapshot.fabric)
        running = [j for j in snapshot.jobs if j.state in _HOLDING and j.placement]
        queued = queued_jobs(snapshot)
        ordered = self.ordering.order(snapshot, queued)
        held = [j for j in ordered if j.nominated]
        walk = Walk(
            topo=topo,
            tenants=snapshot.tenants,
            index=self.capacity(snapshot, running),
            running=running,
            usage=usage_of(running),
            held=held,
            ordered=ordered,
            pending=[j.id for j in snapshot.jobs if j.state is JobState.PENDING],
            queued=len(queued),
            queued_ids=lambda: (j.id for j in queued),
            time_shares=self.ordering.time_shares(snapshot),
            info=JobInfo(snapshot.now, self.rates),
        )
        if self.merges(held):
            failed = walk.failed = Failed(snapshot.tenants)
            walk.ordered = self.merge_listed(ordered, topo, failed)
            walk.everyone = lambda: ordered
            walk.cpu_only = lambda: self.merge_cpu_only(ordered, topo, failed)
        return self.walk(walk)

    def merge_cpu_only(
        self, ordered: Sequence[JobView], topo: Topology, failed: Failed
    ) -> Iterator[JobView]:
        """The jobs of ``ordered`` that need no device, merged by shape as :meth:`walk`
        reads them once no device is free (a shape that failed is read no further)."""
        return self.merge_listed([j for j in ordered if j.spec.resources.cpu_only], topo, failed)

    def merge_listed(
        self, ordered: Sequence[JobView], topo: Topology, failed: Failed
    ) -> Iterator[JobView]:
        """``ordered`` as per-shape queues merged again in its order (:func:`merge_shapes`)."""
        numbers: dict[int, Listed] = {}
        rank: dict[str, int] = {}
        for i, job in enumerate(ordered):
            tenant, number = self.shape(job, topo)
            rank[job.id] = i
            mine = numbers.get(number)
            if mine is None:
                mine = numbers[number] = Listed([], {})
            queue = mine.queues.get(tenant)
            if queue is None:
                queue = mine.queues[tenant] = []
                mine.heads.append((i, tenant))  # in order: first seen, first head
            queue.append(job)
        tenants = {job.spec.tenant for job in ordered}
        bound = [t for t in tenants if failed.bound(t)]
        return merge_shapes(numbers, lambda j: rank[j.id], failed, bound)

    def merges(self, held: Sequence[JobView]) -> bool:
        """Whether a decision may walk per-shape queues merged (:func:`merge_shapes`):
        when it prunes failed shapes, which it does unless preemption or held (nominated)
        devices may still make room for a job whose shape did not fit."""
        return (
            self.prune
            and isinstance(self.preemption, NoPreemption)
            and not held
            and self.reserve_after_s is None  # a failed shape's jobs may still need a hold
        )

    def walk(self, w: Walk) -> Decision:
        """The decision itself, on prepared state (:meth:`decide` prepares it from a
        snapshot, the incremental :class:`~accelnet.sched.session.Session` keeps it).

        Within one decision free capacity and tenants' use only shrink and grow, so a job
        whose shape (:meth:`shape`) did not fit, or was over its tenant's quota, means every
        later job of that shape waits too, with the same reason, without being placed
        again; given per-shape queues merged (:func:`merge_shapes`), the walk never even
        reads them, and they wait with their shape's reason (read when asked for). Not so
        with preemption or held (nominated) devices, where a job may still make room.
        A request that does not fit as it is (not narrowed by a quota) fails for every
        tenant's jobs of its shape number at once, with the capacity's reason
        (:class:`Failed`): a decision costs the shape numbers it visits, not the tenants.

        Changes ``w.index`` and ``w.usage``; a caller that keeps them rolls back. The
        reasons written when read (:class:`Reasons`) read ``w.index`` as the walk left it:
        a caller that changes it while the decision may still be read calls
        :meth:`Reasons.freeze` first."""
        topo, index = w.topo, w.index
        run = _WalkState(
            index,
            w.tenants,
            w.usage,
            waiting=dict.fromkeys(w.pending, AWAITING_ADMISSION),
            search=self.preemption.start(w.running),
            started=traffic_hook(self.placement, topo, w.running),
            # devices promised to jobs by earlier preemptions are held for them alone
            held={j.id: _reserve(index, j.nominated) for j in w.held},
        )
        waiting, search, held = run.waiting, run.search, run.held
        failed: Failed | None = None
        if self.prune and not (search or held):
            failed = w.failed if w.failed is not None else Failed(w.tenants)
        assert w.everyone is None or (failed is not None and w.cpu_only is not None), (
            "a merged queue needs pruning, and its CPU-only jobs given"
        )
        stop: _Stop | None = None  # where no device was free, if it came to that
        source: Iterable[JobView] | None = w.ordered
        cap: Reason | None = None
        reserve = self.reserve_after_s if w.info is not None else None
        now = w.info.now if w.info is not None else math.inf  # no time: nobody waits
        again = math.inf  # when a wait runs out (Decision.again_at)
        no_hold: set[int] = set()  # shapes a domain could not be held for in this walk
        while source is not None:
            jobs, source = iter(source), None
            for job in jobs:
                if stop is None and not index.free and search is None and not held:
                    # no device is free and none can be freed: every later job that needs one
                    # waits; their reasons are written when read (a long queue stays cheap per
                    # decision). Jobs that need only a host's cores and memory are walked still.
                    stop = self._stop(w, job, jobs, run)
                    source = stop.after
                    break
                _, never, base, number = self._entry(job, topo)
                until: float | None = None  # when its wait for its preferred level ends
                if never is None and job.spec.topology.wait_s is not None:
                    base, number, until = self._level_wait(job, base, number, topo, now)
                if reserve is not None and never is None and now >= job.submitted_at + reserve:
                    base, number = self._for_hold(base, number, topo)  # it waits for its domain
                shape = (job.spec.tenant, number)
                if failed is not None:
                    known = failed.get(shape)
                    if known is not None:
                        waiting[job.id] = known
                        if until is not None:
                            again = min(again, until)
                        if reserve is not None and never is None and failed.for_capacity(shape):
                            reserve, again = self._starving(job, base, run, known, (now, again),
                                                        number, no_hold)  # fmt: skip
                        continue
                    cap = failed.numbers.get(number)
                reason, shared = self._one(job, never, base, run, cap)
                if reason is None:
                    continue
                if until is not None:
                    again = min(again, until)
                    reason = _note_level_wait(job.id, base, reason, run.waiting)
                if failed is not None:
                    failed.add(shape, reason, shared)
                if reserve is not None and shared and never is None:
                    reserve, again = self._starving(job, base, run, reason, (now, again), number,
                                                no_hold)  # fmt: skip
        self._forget(w.queued, w.queued_ids)
        reasons = self._reasons(w, run, stop, index, failed or Failed(w.tenants))
        return Decision(
            tuple(run.starts), tuple(run.preemptions), reasons, w.time_shares, run.nominations,
            again_at=None if again == math.inf else again,
        )  # fmt: skip

    def _reasons(
        self,
        w: Walk,
        run: _WalkState,
        stop: _Stop | None,
        final: CapacityIndex | None,
        failed: Failed,
    ) -> Mapping[str, Reason]:
        """The decision's waiting reasons: those written, and the lazy ones of the jobs not
        walked (a queue's tail, or with a merged queue every job of a failed shape), which
        read the tenants' use where the walk stopped (not what CPU-only jobs walked after
        the stop, some of them behind those jobs in the queue, took)."""
        tail, walked_after = ((), 0) if stop is None else (stop.tail, stop.walked)
        usage = run.usage if stop is None or stop.usage is None else stop.usage
        quota = Quota(w.tenants, usage)
        if w.everyone is not None:
            if not tail:  # the merge ran out: every job not walked is of a failed shape
                final = None
            started = {s.job for s in run.starts}
            total = len(set(w.pending)) + w.queued - len(started)
            return Reasons(run.waiting, w.everyone(), self, w.topo, final, failed,
                           skip=started, total=total, quota=quota)  # fmt: skip
        if walked_after:  # jobs of the tail walked: their reasons are written, or they started
            started = {s.job for s in run.starts}
            total = len(run.waiting) + len(tail) - walked_after
            return Reasons(run.waiting, tail, self, w.topo, final, failed,
                           skip=started, total=total, quota=quota)  # fmt: skip
        if tail:
            return Reasons(run.waiting, tail, self, w.topo, final, failed, quota=quota)
        return run.waiting

    def _stop(self, w: Walk, job: JobView, jobs: Iterator[JobView], run: _WalkState) -> _Stop:
        """The walk stops at ``job`` (no device free): the queue from it (with a merged
        queue, where the jobs not walked are read from everyone, only that it stopped
        here), and what it walks still: the queued jobs that need no device (CPU cores
        and memory of one host), in the queue's order, not read yet. From the caller's
        (``w.cpu_only``: a caller that merges gives it), else from the tail."""
        if w.everyone is not None:
            tail: Sequence[JobView] = (job,)
        else:
            tail = w.rest(job) if w.rest is not None else [job, *jobs]
        found = w.cpu_only() if w.cpu_only is not None else tail
        if not found:
            return _Stop(tail)
        stop = _Stop(tail, usage={t: dict(u) for t, u in run.usage.items()})
        stop.after = _after_stop(found, run, stop)
        return stop

    def _for_hold(self, base: Request, number: int, topo: Topology) -> tuple[Request, int]:
        """``base`` required at the tightest level where a domain could ever hold it, and
        that shape's number (``base`` itself if it is required there already): a job that
        has waited ``reserve_after_s`` starts in a domain like the one held for it, not
        spread wider over what happens to be free (:mod:`accelnet.sched.reserve`)."""
        if number not in self._hold_shapes:
            self._hold_shapes[number] = _tightest_level(base, topo)
        level = self._hold_shapes[number]
        return (base, number) if level is None else self._required_at(base, level)

    def _starving(
        self,
        job: JobView,
        req: Request,
        run: _WalkState,
        reason: Reason,
        times: tuple[float, float],
        number: int,
        no_hold: set[int],
    ) -> tuple[float | None, float]:
        """``job`` does not fit for lack of capacity: hold a domain for it if it has waited
        ``reserve_after_s`` (then no other job gets one in this decision: None); else when
        it will have (the decision's ``again``, ``times[1]``, lowered to that). ``no_hold``:
        the shape numbers no domain could be held for in this decision (capacity only
        shrinks within one), ``number`` added when none can for it."""
        now, again = times
        after = self.reserve_after_s
        assert after is not None
        if now < job.submitted_at + after:  # the form again_at is in: always later than now
            return after, min(again, job.submitted_at + after)
        if number in no_hold:
            return after, again
        if self._hold(job, req, run, reason):
            return None, again
        no_hold.add(number)
        return after, again

    def _hold(self, job: JobView, req: Request, run: _WalkState, reason: Reason) -> bool:
        """Hold a domain for ``job``, which has waited ``reserve_after_s`` and does not
        fit (:mod:`accelnet.sched.reserve`); whether one was held. Its reason says where."""
        held = hold_for(req, run.index)
        if held is None:
            return False
        node, count = held
        place = run.index.topo.place_name(node)
        run.waiting[job.id] = reason.recoded(
            WaitCode.DOMAIN_HELD,
            f"{count} device{'s' * (count > 1)} of {place} held for it (waiting over "
            f"{self.reserve_after_s:g} s)",
            devices=count,
            domain=place,
        )
        return True

    def _one(
        self,
        job: JobView,
        never: Rejection | None,
        base: Request,
        run: _WalkState,
        cap: Reason | None,
    ) -> tuple[Reason | None, bool]:
        """Start ``job``, make way for it, or write why it waits. Returns the reason when
        it waits because its shape does not fit now (None otherwise), and whether any
        tenant's job of the shape would wait for it alike (it never fits, or its request,
        not narrowed by a quota, does not fit: the reason is the capacity's alone).
        ``cap``: that reason, if another job of the shape met it already in this walk."""
        index, held = run.index, run.held
        if never is not None:
            reason = never_fits(never.message)
            run.waiting[job.id] = reason
            return reason, True
        req, quota_note, over = _within_quota(job, base, run.tenants, run.usage)
        if quota_note is not None:
            run.waiting[job.id] = quota_note
            return quota_note, False
        if cap is not None and not over:  # the same request failed: capacity only shrinks
            run.waiting[job.id] = cap
            return cap, True
        mark = index.mark()
        for dev, share in held.get(job.id, ()):  # its own reservation is free for it
            if dev.startswith(HOST_HOLD):
                host, cpu, mem = _held_room(dev)
                index.give_host(host, cpu, mem)
            else:
                index.give(dev, share)
        placed = self.placement.place(req, index)
        if placed is not None:
            index.hold(placed)
            run.starts.append(Start(job.id, placed))
            run.started(req, placed)
            _charge(run.usage, job.spec.tenant, placed)
            return None, False
        index.rollback(mark)
        reason = no_capacity(explain(req, index), over)
        pending: list[str] = []
        if job.nominated:
            mine = {d for d, share in held.get(job.id, ()) if share >= 1}
            pending = [d for d in job.nominated if d not in mine]
        if pending:
            rooms = sum(d.startswith(HOST_HOLD) for d in pending)
            devices = len(pending) - rooms
            what = [f"{devices} nominated device{'s' * (devices > 1)}"] if devices else []
            what += ["the host room nominated for it"] if rooms else []
            run.waiting[job.id] = reason.recoded(
                WaitCode.AWAITING_RELEASE,
                f"waiting for preempted jobs to release {' and '.join(what)}",
                devices=devices,
            )
            run.nominations[job.id] = job.nominated
            return None, False
        victims = run.search.victims(job, req, index, self.placement) if run.search else None
        if victims:
            run.nominations[job.id] = self._make_way(
                job, req, index, victims, reason, run.preemptions
            )
            run.waiting[job.id] = reason.recoded(
                WaitCode.PREEMPTING,
                f"preempting {victims_named(job, victims)}",
                victims=len(victims),
            )
            return None, False
        run.waiting[job.id] = reason
        return reason, not over


def _tightest_level(req: Request, topo: Topology) -> DomainLevel | None:
    """The tightest level at which a domain of each of ``req``'s device classes could ever
    hold its gang (the loosest of theirs, so that no class it may use is ruled out), if
    tighter than the level it requires; None if not, or for a share of a device."""
    if req.share < 1:
        return None
    loosest = -1
    for c in req.classes:
        tightest = next((i for i, lv in enumerate(LEVELS)
                         if topo.largest(c.key, lv) >= req.count), None)  # fmt: skip
        if tightest is not None:  # a class too small to ever hold it does not count
            loosest = max(loosest, tightest)
    if loosest < 0 or LEVELS[loosest] is DomainLevel.FABRIC:
        return None
    if req.required is not None and LEVELS.index(req.required) <= loosest:
        return None  # required at least that tight already
    return LEVELS[loosest]


def _note_level_wait(job: str, req: Request, reason: Reason, waiting: dict[str, Reason]) -> Reason:
    """``reason`` (the job's, in ``waiting``) saying that it waits for its level."""
    assert req.required is not None
    level = LEVEL_NAMES[req.required]
    note = f"it waits for one {level} (topology.wait_s)"
    if note not in reason:  # a reason its shape met already has it
        reason = waiting[job] = reason.noted(note, level_wait=level)
    return reason


@dataclass
class _WalkState:
    """What one walk changes as it goes: the index, the tenants' use, the decision."""

    index: CapacityIndex
    tenants: Mapping[str, Tenant]
    usage: dict[str, dict[str, int]]
    waiting: dict[str, Reason]
    search: VictimSearch | None
    started: Callable[[Request, Placement], None]
    held: dict[str, tuple[tuple[str, float], ...]]
    starts: list[Start] = field(default_factory=list)
    preemptions: list[Preempt] = field(default_factory=list)
    nominations: dict[str, tuple[str, ...]] = field(default_factory=dict)


def _after_stop(found: Iterable[JobView], run: _WalkState, stop: _Stop) -> Iterator[JobView]:
    """The CPU-only jobs of ``found`` the walk has not read, counted in ``stop``."""
    waiting = run.waiting
    started = {s.job for s in run.starts}
    for j in found:
        if j.id in waiting or j.id in started or not j.spec.resources.cpu_only:
            continue
        stop.walked += 1
        yield j


class _Stop:
    """Where a walk found no device free (``tail``: the queue from there), the jobs it
    walks after that (``after``: those that need no device), how many it did
    (``walked``), and the tenants' use at the stop (None: nothing walked after it)."""

    __slots__ = ("after", "tail", "usage", "walked")

    def __init__(self, tail: Sequence[JobView], usage: dict[str, dict[str, int]] | None = None):
        self.tail = tail
        self.after: Iterator[JobView] | None = None
        self.walked = 0
        self.usage = usage


@dataclass(frozen=True)
class Quota:
    """The tenants and their use (share units) where a decision ended."""

    tenants: Mapping[str, Tenant]
    usage: _Usage

    def check(self, job: JobView, req: Request) -> tuple[Request, Reason | None, str]:
        """:func:`_within_quota` there."""
        return _within_quota(job, req, self.tenants, self.usage)


def preempted_for(victim: JobView, job: JobView, reason: str) -> str:
    """Why ``victim`` is stopped for ``job`` (``reason``: why ``job`` did not fit). The
    text reaches the victim's tenant: ``job``'s id, priority and request are named only
    when both jobs are the same tenant's."""
    if victim.spec.tenant != job.spec.tenant:
        return "preempted for a higher-priority job of another tenant"
    return f"preempted for {job.id} (priority {job.priority} > {victim.priority}), which {reason}"


def victims_named(job: JobView, victims: Sequence[JobView]) -> str:
    """The jobs ``job`` preempts, for its waiting reason (read by its tenant): those of
    its own tenant by id, the others only counted."""
    mine = [v.id for v in victims if v.spec.tenant == job.spec.tenant]
    others = len(victims) - len(mine)
    if others:
        many = f"{others} jobs of other tenants"
        mine.append("1 job of another tenant" if others == 1 else many)
    return ", ".join(mine)


def _reserve(index: CapacityIndex, devices: tuple[str, ...]) -> tuple[tuple[str, float], ...]:
    """Take whatever is free of ``devices`` (and of host room entries, :func:`host_hold`)
    out of ``index``; returns what was taken (a host entry with share 1 when all of it
    was, as the entry of what was taken otherwise, with share 0)."""
    taken = []
    for d in devices:
        if d.startswith(HOST_HOLD):
            host, cpu, mem = _held_room(d)
            room_cpu, room_mem = index.host_room(host)
            got_cpu, got_mem = min(cpu, room_cpu), min(mem, room_mem)
            index.take_host(host, got_cpu, got_mem)
            whole = (got_cpu, got_mem) == (cpu, mem)
            taken.append((d if whole else f"{HOST_HOLD}{host}={got_cpu}={got_mem}", float(whole)))
            continue
        share = index.free_share(d)
        if share > 0:
            index.take(d, share)
            taken.append((d, share))
    return tuple(taken)


def traffic_hook(
    placement: PlacementStrategy, topo: Topology, running: Collection[JobView]
) -> Callable[[Request, Placement], None]:
    """Tell a strategy that weighs traffic which jobs hold devices (a decision begins);
    returns what to call for every start (a no-op for other strategies)."""
    if isinstance(placement, SeesTraffic):
        placement.begin(topo, running)
        return placement.started
    return lambda req, placed: None


def _placement_after(
    index: CapacityIndex, victims: list[JobView], req: Request, placement: PlacementStrategy
) -> tuple[str, ...]:
    """Where ``req`` goes once ``victims`` are gone (the nomination)."""
    mark = index.mark()
    for v in victims:
        release(index, v)
    found = placement.place(req, index)
    index.rollback(mark)
    assert found is not None, "victims were chosen because the job fits without them"
    return found.devices + tuple(host_hold(h, c, g) for h, c, g in found.hosts)


HOST_HOLD = "@"  # a nomination entry of host room: @host=cpu units=memory units


def host_hold(host: str, cpus: float, memory_gb: float) -> str:
    """The nomination entry that holds ``cpus`` and ``memory_gb`` of ``host`` for a job
    (beside its devices: a job that preempted for cores keeps them until it starts)."""
    return f"{HOST_HOLD}{host}={cpu_units(cpus)}={memory_units(memory_gb)}"


def _held_room(entry: str) -> tuple[str, int, int]:
    host, cpu, mem = entry[len(HOST_HOLD) :].rsplit("=", 2)
    return host, int(cpu), int(mem)


def usage_of(running: Iterable[JobView]) -> dict[str, dict[str, int]]:
    """Share units held per tenant per device model (``*``: all models)."""
    usage: dict[str, dict[str, int]] = {}
    for job in running:
        assert job.placement is not None
        _charge(usage, job.spec.tenant, job.placement)
    return usage


def _charge(usage: dict[str, dict[str, int]], tenant: str, p: Placement, sign: int = 1) -> None:
    per = usage.setdefault(tenant, {})
    if p.devices:
        amount = sign * len(p.devices) * units(p.share)
        per[p.model] = per.get(p.model, 0) + amount
        per["*"] = per.get("*", 0) + amount
    for _, cpu, mem in host_units(p.hosts):
        per[QUOTA_CPUS] = per.get(QUOTA_CPUS, 0) + sign * cpu
        per[QUOTA_MEMORY] = per.get(QUOTA_MEMORY, 0) + sign * mem


def charge(usage: dict[str, dict[str, int]], tenant: str, p: Placement) -> None:
    """Add a placement's share units to ``usage`` (a job started holding devices)."""
    _charge(usage, tenant, p)


def uncharge(usage: dict[str, dict[str, int]], tenant: str, p: Placement) -> None:
    """Take a placement's share units off ``usage`` (a job stopped holding devices)."""
    _charge(usage, tenant, p, -1)


def _over(note: str | None, tenant: str) -> Reason:
    assert note is not None  # every class is over: the first one's note was kept
    return make_reason(note, WaitCode.OVER_QUOTA, {"tenant": tenant})


def _within_quota(
    job: JobView, req: Request, tenants: Mapping[str, Tenant], usage_units: _Usage
) -> tuple[Request, Reason | None, str]:
    """``req`` narrowed to the classes the tenant's quota still allows, or a reason; and a
    note naming the classes the quota took away (for the waiting reason)."""
    if not tenants:
        return req, None, ""
    tenant = tenants.get(job.spec.tenant)
    if tenant is None:
        text = f"tenant {job.spec.tenant} is not known here (tenants are case-sensitive)"
        return req, make_reason(text, WaitCode.UNKNOWN_TENANT, {"tenant": job.spec.tenant}), ""
    if not tenant.quota:
        return req, None, ""
    mine = usage_units.get(job.spec.tenant, {})
    used = {m: u / SHARE_UNITS for m, u in mine.items()}
    quota = canonical_quota(tenant.quota)
    if req.cpu_only:
        host_note = _host_quota(tenant.name, req, quota, mine, 1)
        return req, None if host_note is None else _over(host_note, tenant.name), ""
    total = quota.get("*")
    allowed: list[int] = []
    blocked: list[str] = []  # every class the quota takes away, for the waiting reason
    by_model: list[str] = []  # those over their own model's limit
    first: str | None = None  # the first class's reason, when every class is over
    for rank, cls in enumerate(req.classes):  # each class with its own gang size
        count = req.count_on(rank)
        need = count * req.share
        note = _host_quota(tenant.name, req, quota, mine, 1 if req.per_host else count)
        if note is None and total is not None and used.get("*", 0.0) + need > total + 1e-9:
            note = (
                f"tenant {tenant.name} quota is {total:g} devices; {used.get('*', 0.0):g} in "
                f"use, needs {need:g} more"
            )
        limit = quota.get(cls.model.name)
        if (
            note is None
            and limit is not None
            and used.get(cls.model.name, 0.0) + need > limit + 1e-9
        ):
            by_model.append(
                f"{cls.model.name} {limit:g} ({used.get(cls.model.name, 0.0):g} in use)"
            )
            blocked.append(by_model[-1])
            note = f"tenant {tenant.name} quota reached: {by_model[-1]}; needs {need:g} more"
        elif note is not None:
            blocked.append(f"{count} x {cls.model.name}")
        if note is None:
            allowed.append(rank)
        elif first is None:
            first = note
    if not allowed:
        if len(by_model) == len(req.classes) > 1:  # every model over its own limit: name all
            need = req.count * req.share
            first = (
                f"tenant {tenant.name} quota reached: {', '.join(by_model)}; needs {need:g} more"
            )
        return req, _over(first, tenant.name), ""
    if not blocked:
        return req, None, ""
    return req.narrowed(allowed), None, ", ".join(blocked)


QUOTA_CPUS = "cpus"  # quota keys (and usage keys) of CPU cores and host memory
QUOTA_MEMORY = "memory_gb"


def _host_quota(
    tenant: str, req: Request, quota: Mapping[str, float], used: Mapping[str, int], ranks: int
) -> str | None:
    """Why ``ranks`` ranks of ``req``'s CPU cores or host memory would take its tenant over
    quota, or None (a job launched per host counts one rank: its hosts are not known yet)."""
    for key, want, unit, what in (
        (QUOTA_CPUS, req.cpus, CPU_UNITS, "CPU cores"),
        (QUOTA_MEMORY, req.memory_gb, MEMORY_UNITS, "GB of host memory"),
    ):
        limit = quota.get(key)
        if limit is None or not want:
            continue
        have = used.get(key, 0) / unit
        if have + want * ranks > limit + 1e-9:
            return (
                f"tenant {tenant} quota is {limit:g} {what}; {have:g} in use, needs "
                f"{want * ranks:g} more"
            )
    return None


def canonical_quota(quota: Mapping[str, float]) -> dict[str, float]:
    """Quota keys by catalog name (``H100`` -> ``H100-SXM``); ``*`` and unknown kept.

    Two keys naming one model keep the smaller limit (the safe reading)."""
    out: dict[str, float] = {}
    for key, value in quota.items():
        found = find_device_model(key) if key != "*" else None
        name = found.name if found is not None else key
        out[name] = min(value, out.get(name, value))
    return out
