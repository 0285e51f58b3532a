"""The incremental scheduler: state kept up to date by events, decisions without rescans.

:meth:`Scheduler.decide` derives everything from a :class:`Snapshot`: the free capacity
from every device and every running job, the queue by filtering and sorting every job. A
controller that decides after every event would pay for the whole queue each time. A
:class:`Session` keeps the same state between decisions instead, changed by the events
themselves (``put`` a job's new view, ``drop`` a finished one, ``set_device``):

- the capacity index, updated device by device as jobs start and end and devices change
  state;
- the queue, sorted by the ordering policy's fixed key (:meth:`OrderingPolicy.key`), so a
  decision reads it from the head and stops as soon as nothing more can start;
- the jobs holding devices, each tenant's usage, the pending and the nominated jobs.

``session.decide(now)`` gives exactly ``scheduler.decide(session.snapshot(now))`` (a
property test holds them equal on random workloads); the session itself is unchanged by
it. Policies without a fixed key fall back to ordering the queue for every decision.

When the fabric is full, the decision's waiting reasons for the rest of the queue are
read from the session's queue and capacity index themselves, not copied: should either
change while such a decision is still referenced, the queue's tail and the index are
copied for it first (copy on write), so a decision never changes after the fact and one
nobody keeps costs nothing.
"""

from __future__ import annotations

import heapq
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from types import MappingProxyType
from typing import Any, overload

from sortedcontainers import SortedKeyList, SortedList

from accelnet.devices import DeviceState
from accelnet.fabric import Fabric
from accelnet.sched.capacity import (
    HOST_CPU,
    HOST_MEM,
    SHARE_UNITS,
    CapacityIndex,
    tally_hosts,
    units,
)
from accelnet.sched.jobinfo import JobInfo, ProgressFn
from accelnet.sched.jobstate import JobState
from accelnet.sched.ordering import OrderingPolicy
from accelnet.sched.placement import explain
from accelnet.sched.reasons import (
    AWAITING_ADMISSION,
    AWAITING_DECISION,
    Reason,
    never_fits,
    no_capacity,
)
from accelnet.sched.scheduler import Quota, Scheduler, charge, uncharge
from accelnet.sched.shortcuts import Failed, Reasons, Walk, merge_shapes
from accelnet.sched.snapshot import Decision, JobView, Snapshot, Tenant

_HOLDING = frozenset({JobState.STARTING, JobState.RUNNING, JobState.PREEMPTING})


class Session:
    """A scheduler with its state kept between decisions (see the module docstring)."""

    def __init__(
        self,
        scheduler: Scheduler,
        fabric: Fabric,
        devices: Mapping[str, DeviceState],
        tenants: Mapping[str, Tenant] | None = None,
    ) -> None:
        """``devices``: every device's state (a device missing is not schedulable)."""
        self.scheduler = scheduler
        self.fabric = fabric
        self.topo = scheduler.topology(fabric)
        self.tenants: Mapping[str, Tenant] = MappingProxyType(dict(tenants or {}))
        self._states: dict[str, DeviceState] = dict(devices)
        self._index = scheduler.capacity(Snapshot(fabric, 0.0, self._states, ()))
        self._stale: set[str] = set()  # devices whose entry in the index is out of date
        self._used: dict[str, int] = {}  # device -> share units held by jobs
        self._host_used: dict[str, tuple[int, int]] = {}  # host -> CPU, memory units held
        self._jobs: dict[str, JobView] = {}
        self._holding: dict[str, JobView] = {}
        self._pending: dict[str, None] = {}
        self._nominated: dict[str, JobView] = {}
        self._usage: dict[str, dict[str, int]] = {}
        policy = scheduler.ordering
        self._keyed = type(policy).key is not OrderingPolicy.key
        # the queue in the policy's order: kept for a keyed policy unless _merge (then the
        # per-shape queues are the queue, merged when read whole: _in_order)
        self._queue: SortedKeyList[JobView] = SortedKeyList(key=policy.key)
        self._keyed_jobs = 0  # how many queued jobs a keyed policy has
        # the queued jobs that need no device: by id unless _merge, else their shape numbers
        self._hosts_only: dict[str, JobView] = {}
        self._cpu_only_numbers: set[int] = set()
        self._queued: dict[str, JobView] = {}  # for policies without a fixed key
        self._numbers: dict[int, _ShapeQueues] = {}  # per shape number, kept when _merge
        self._tenant_jobs: dict[str, int] = {}  # queued jobs per tenant, kept when _merge
        self._bound: list[str] | None = None  # the bound tenants queued (Failed.bound)
        self._quota_tenants = [n for n, t in self.tenants.items() if t.quota]
        self._merge = self._keyed and scheduler.merges(())  # see decide
        self._shares = type(policy).time_shares is not OrderingPolicy.time_shares
        self.progress: ProgressFn | None = None  # the backend's progress reports, if any
        self._tails: weakref.WeakSet[_QueueTail] = weakref.WeakSet()  # read from the queue
        self._unseen: set[str] = set()  # jobs queued since the last decision (see reason)
        # the last decision's reasons, which read the index as it is (see _thaw)
        self._reader: weakref.ref[Reasons] | None = None

    # ----- events ---------------------------------------------------------------------
    def put(self, job: JobView) -> None:
        """A job's current view (new, or changed state, placement or nomination)."""
        self._copy_tails()
        old = self._jobs.get(job.id)
        if (
            old is not None
            and old.placement is not None
            and old.placement == job.placement
            and old.state in _HOLDING
            and job.state in _HOLDING
        ):  # still holding the same devices (STARTING -> RUNNING): nothing to recount
            self._jobs[job.id] = self._holding[job.id] = job
            return
        self.drop(job.id)
        self._jobs[job.id] = job
        if job.state is JobState.PENDING:
            self._pending[job.id] = None
        elif job.state is JobState.ADMITTED:
            self._unseen.add(job.id)
            cpu_only = job.spec.resources.cpu_only
            if cpu_only and not self._merge:
                self._hosts_only[job.id] = job
            if not self._keyed:
                self._queued[job.id] = job
            elif not self._merge:
                self._queue.add(job)
            self._keyed_jobs += self._keyed
            if self._merge:
                number = self.scheduler.shape(job, self.topo)[1]
                mine = self._numbers.get(number)
                if mine is None:
                    mine = self._numbers[number] = _ShapeQueues(self.scheduler.ordering.key)
                    if cpu_only:
                        self._cpu_only_numbers.add(number)
                mine.add(job)
                tenant = job.spec.tenant
                count = self._tenant_jobs.get(tenant, 0)
                if not count:
                    self._bound = None
                self._tenant_jobs[tenant] = count + 1
            if job.nominated:
                self._nominated[job.id] = job
        elif job.state in _HOLDING and job.placement is not None:
            self._holding[job.id] = job
            self._hold(job, 1)

    def drop(self, job_id: str) -> None:
        """Forget a job (finished, or about to be put again)."""
        self._copy_tails()
        old = self._jobs.pop(job_id, None)
        if old is None:
            return
        self._unseen.discard(job_id)
        self._pending.pop(job_id, None)
        self._nominated.pop(job_id, None)
        if old.state is JobState.ADMITTED:
            self._hosts_only.pop(job_id, None)
            if not self._keyed:
                del self._queued[job_id]
            elif not self._merge:
                self._queue.remove(old)
            self._keyed_jobs -= self._keyed
            if self._merge:
                number = self.scheduler.shape(old, self.topo)[1]
                if self._numbers[number].remove(old):
                    del self._numbers[number]
                    self._cpu_only_numbers.discard(number)
                tenant = old.spec.tenant
                count = self._tenant_jobs[tenant] - 1
                if count:
                    self._tenant_jobs[tenant] = count
                else:
                    del self._tenant_jobs[tenant]
                    self._bound = None
        elif self._holding.pop(job_id, None) is not None:
            self._hold(old, -1)

    def set_device(self, dev: str, state: DeviceState) -> None:
        """A device changed state (only schedulable devices take work)."""
        self._states[dev] = state
        if dev in self.topo.class_of:
            self._stale.add(dev)

    @property
    def index(self) -> CapacityIndex:
        """The free capacity now (device changes are applied to it when it is read, so a
        device that goes through several states between decisions costs one update)."""
        if self._stale:
            self._thaw()
            index, used, states = self._index, self._used, self._states
            devices: list[tuple[str, int, bool]] = []
            for dev in self._stale:
                if dev[0] in (HOST_CPU, HOST_MEM):
                    index.reset_host(dev[1:], *self._host_used.get(dev[1:], (0, 0)))
                    continue
                state = states.get(dev)
                ok = state is not None and state.schedulable()
                devices.append((dev, SHARE_UNITS - used.get(dev, 0), ok))
            index.reset_many(devices)
            self._stale.clear()
        return self._index

    def set_tenants(self, tenants: Mapping[str, Tenant]) -> None:
        """Replace the tenants (an empty mapping: no tenant checks)."""
        self.tenants = MappingProxyType(dict(tenants))
        self._quota_tenants = [n for n, t in self.tenants.items() if t.quota]
        self._bound = None

    def _hold(self, job: JobView, sign: int) -> None:
        placement = job.placement
        assert placement is not None
        share = sign * units(placement.share)
        used, stale, known = self._used, self._stale, self.topo.class_of
        for dev in placement.devices:
            now_used = used.get(dev, 0) + share
            if now_used:
                used[dev] = now_used
            else:
                used.pop(dev, None)
            if dev in known:
                stale.add(dev)
        tally_hosts(self._host_used, placement.hosts, sign)
        stale.update(HOST_CPU + h for h, _, _ in placement.hosts if h in self.topo.host_order)
        if sign > 0:
            charge(self._usage, job.spec.tenant, placement)
        else:
            uncharge(self._usage, job.spec.tenant, placement)

    # ----- decisions ------------------------------------------------------------------
    def queued(self) -> int:
        """How many jobs are queued (waiting for devices)."""
        return self._keyed_jobs + len(self._queued)

    def jobs(self) -> Iterable[JobView]:
        """Every job the session knows (pending, queued, holding devices)."""
        return self._jobs.values()

    def snapshot(self, now: float) -> Snapshot:
        """The equivalent snapshot (what :meth:`Scheduler.decide` would be given)."""
        return Snapshot(
            self.fabric,
            now,
            MappingProxyType(dict(self._states)),
            tuple(self._jobs.values()),
            self.tenants,
        )

    def decide(self, now: float) -> Decision:
        """The decision ``scheduler.decide(self.snapshot(now))`` would give, made from the
        kept state: the queue is read from its head only as far as needed."""
        scheduler = self.scheduler
        snap: Snapshot | None = None
        self._unseen.clear()
        if self._keyed:
            ordered: Iterable[JobView] = self._queue  # (empty while _merge)
            key: Any = scheduler.ordering.key
            held = sorted(self._nominated.values(), key=key)
        else:
            snap = self.snapshot(now)
            ordered = scheduler.ordering.order(snap, list(self._queued.values()))
            held = [j for j in ordered if j.nominated]
        shares = None
        if self._shares:
            snap = snap or self.snapshot(now)
            shares = scheduler.ordering.time_shares(snap)
        failed: Failed | None = None
        everyone: Callable[[], Sequence[JobView]] | None = None
        cpu_only: Callable[[], Iterable[JobView]] | None = None
        if scheduler.merges(held):  # only shapes that have not failed are walked
            failed = Failed(self.tenants)
            if self._merge:
                ordered = merge_shapes(self._numbers, key, failed, self._bound_tenants(failed))
                everyone = self._everyone
                cpu_only = self._cpu_only_reader(failed)
            else:  # a policy without a fixed key: its order of this decision, by shape
                listed = list(ordered)
                ordered = scheduler.merge_listed(listed, self.topo, failed)
                everyone = lambda: listed  # noqa: E731
                cpu_only = lambda: scheduler.merge_cpu_only(listed, self.topo, failed)  # noqa: E731
        else:
            if self._merge:  # nominated jobs (not of this scheduler's making): walk them all
                ordered = self._in_order()
            cpu_only = self._cpu_only_reader(None)
        index = self.index
        self._thaw()
        mark = index.mark()
        try:
            decision = scheduler.walk(
                Walk(
                    topo=self.topo,
                    tenants=self.tenants,
                    index=index,
                    running=self._holding.values(),
                    usage=self._quota_usage(),
                    held=held,
                    ordered=ordered,
                    pending=list(self._pending),
                    queued=self.queued(),
                    queued_ids=self._queued_ids,
                    time_shares=shares,
                    rest=self._rest if self._keyed and not self._merge else None,
                    info=JobInfo(now, scheduler.rates, self.progress),
                    failed=failed,
                    everyone=everyone,
                    cpu_only=cpu_only,
                )
            )
        finally:  # the decision's changes stay until the index is read again: then each
            # device changed is set from what jobs hold (a start the caller applies as it
            # was decided costs nothing more; one it does not is undone)
            self._stale.update(index.keep(mark))
        if isinstance(decision.waiting, Reasons):
            self._reader = weakref.ref(decision.waiting)
        return decision

    def _thaw(self) -> None:
        """The index is about to change: the last decision's reasons, if still alive and
        reading it as it was, get a copy of it (a decision let go before then costs no
        copy: the controller keeps only the reasons written during it). Only the last
        decision's can read it: each decision thaws the one before."""
        if self._reader is not None:
            reasons = self._reader()
            if reasons is not None:
                reasons.freeze(self._index)
            self._reader = None

    def _quota_usage(self) -> dict[str, dict[str, int]]:
        """A copy of the tenants' use for a decision: only that of tenants under a quota
        is read (the decision adds its starts to it)."""
        usage = self._usage
        return {t: dict(usage[t]) for t in self._quota_tenants if t in usage}

    def _bound_tenants(self, failed: Failed) -> list[str]:
        """The queued tenants under a quota or not known (kept until one comes or goes)."""
        if self._bound is None:
            self._bound = [t for t in self._tenant_jobs if failed.bound(t)]
        return self._bound

    def reason(self, job_id: str) -> Reason | None:
        """Why a queued job waits *now* (what a decision would say of a job in a full
        fabric's queue tail); None for a job that is not queued."""
        job = self._jobs.get(job_id)
        if job is None:
            return None
        if job.state is JobState.PENDING:
            return AWAITING_ADMISSION
        if job.state is not JobState.ADMITTED:
            return None
        never, base = self.scheduler.request(job, self.topo)
        if never is not None:
            return never_fits(never.message)
        req, note, over = Quota(self.tenants, self._usage).check(job, base)
        if note is not None:
            return note
        place = self.scheduler.placement.place
        if job_id in self._unseen and place(req, self.index) is not None:
            return AWAITING_DECISION  # queued since the last decision, and room is free
        return no_capacity(explain(req, self.index), over)

    def _everyone(self) -> Sequence[JobView]:
        queue = self._queue
        if self._merge:
            tail = _QueueTail(self._in_order, self._keyed_jobs)
        else:
            tail = _QueueTail(lambda: queue.islice(0), len(queue))
        self._tails.add(tail)
        return tail

    def _rest(self, job: JobView) -> Sequence[JobView]:
        queue = self._queue
        start = queue.index(job)
        tail = _QueueTail(lambda: queue.islice(start), len(queue) - start)
        self._tails.add(tail)
        return tail

    def _cpu_only_reader(self, failed: Failed | None) -> Callable[[], Iterable[JobView]] | None:
        """What gives a decision that finds no device free the queued jobs that need none
        (only a host's cores and memory), in the keyed policy's order, to walk still: with
        a merged walk their shapes' queues merged, dropping a shape once it failed (the
        walk's ``failed``); else all of them, sorted. None where the walk finds them in its
        own tail: a policy without a key, or a merging session's walk of every job in
        order (it keeps no list of them; that walk, of nominated jobs, never stops anyway)."""
        if not self._keyed:
            return None
        key = self.scheduler.ordering.key
        if self._merge:
            if failed is None:
                return None
            shapes_failed = failed

            def merged() -> Iterable[JobView]:
                if not self._cpu_only_numbers:
                    return ()
                numbers = {n: self._numbers[n] for n in self._cpu_only_numbers}
                bound = self._bound_tenants(shapes_failed)
                return merge_shapes(numbers, key, shapes_failed, bound)

            return merged
        return lambda: sorted(self._hosts_only.values(), key=key) if self._hosts_only else ()

    def _in_order(self) -> Iterator[JobView]:
        """Every queued job of a keyed policy in its order, read from the per-shape queues
        merged (while _merge: a decision walks them merged by shape instead, so the
        session keeps no queue of them all)."""
        queues = [q for mine in self._numbers.values() for q in mine.queues.values()]
        return heapq.merge(*queues, key=self.scheduler.ordering.key)

    def _copy_tails(self) -> None:
        if self._tails:
            for tail in list(self._tails):
                tail.copy()
            self._tails.clear()

    def _queued_ids(self) -> Iterable[str]:
        yield from (j.id for j in (self._in_order() if self._merge else self._queue))
        yield from self._queued


class _ShapeQueues:
    """The queued jobs of one shape number (:class:`~accelnet.sched.shortcuts.ShapeQueues`):
    per tenant in the ordering's order, and ``(key of its first job, tenant)`` sorted."""

    __slots__ = ("heads", "key", "queues")

    def __init__(self, key: Callable[[JobView], Any]) -> None:
        self.key = key
        self.heads: SortedList[tuple[Any, str]] = SortedList()
        self.queues: dict[str, SortedKeyList[JobView]] = {}

    def add(self, job: JobView) -> None:
        tenant = job.spec.tenant
        queue = self.queues.get(tenant)
        if queue is None:
            queue = self.queues[tenant] = SortedKeyList(key=self.key)
        first = queue[0] if queue else None
        queue.add(job)
        if queue[0] is job:
            if first is not None:
                self.heads.remove((self.key(first), tenant))
            self.heads.add((self.key(job), tenant))

    def remove(self, job: JobView) -> bool:
        """Take ``job`` (as it was added) out; whether no job of the number is left."""
        tenant = job.spec.tenant
        queue = self.queues[tenant]
        first = queue[0] is job
        queue.remove(job)
        if first:
            self.heads.remove((self.key(job), tenant))
            if queue:
                self.heads.add((self.key(queue[0]), tenant))
        if not queue:
            del self.queues[tenant]
        return not self.queues


class _QueueTail(Sequence[JobView]):
    """The session's queue (from some job on): ``read`` iterates it in place, ``size``
    long, until :meth:`copy` is called (by the session, before its queue changes)."""

    def __init__(self, read: Callable[[], Iterable[JobView]], size: int) -> None:
        self._read: Callable[[], Iterable[JobView]] | None = read
        self._size = size
        self._items: list[JobView] | None = None

    def copy(self) -> None:
        if self._read is not None:  # once copied it reads (and keeps) the session no more
            self._items = list(self._read())
            self._read = None

    @overload
    def __getitem__(self, i: int) -> JobView: ...
    @overload
    def __getitem__(self, i: slice) -> Sequence[JobView]: ...
    def __getitem__(self, i: int | slice) -> JobView | Sequence[JobView]:
        self.copy()
        assert self._items is not None
        return self._items[i]

    def __len__(self) -> int:
        return len(self._items) if self._items is not None else self._size

    def __iter__(self) -> Iterator[JobView]:
        if self._read is None:
            assert self._items is not None
            return iter(self._items)
        return iter(self._read())
