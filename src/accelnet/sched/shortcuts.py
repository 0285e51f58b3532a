"""The walk's speed-ups, apart from the scheduling rule (:meth:`accelnet.sched.scheduler.
Scheduler.walk` and ``_one``): what a decision is given (:class:`Walk`), the shapes found
not to fit in it (:class:`Failed`), waiting reasons written only when read
(:class:`Reasons`), and per-shape, per-tenant queues merged so that a decision reads only
as far as it needs (:func:`merge_shapes`). Used by the scheduler and by the incremental
:class:`~accelnet.sched.session.Session`; none of them changes what a decision decides.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from accelnet.sched.capacity import CapacityIndex
from accelnet.sched.jobinfo import JobInfo
from accelnet.sched.placement import explain
from accelnet.sched.reasons import Reason, never_fits, no_capacity
from accelnet.sched.snapshot import JobView, Tenant
from accelnet.sched.topology import Topology

if TYPE_CHECKING:
    from accelnet.sched.scheduler import Quota, Scheduler

Shape = tuple[str, int]  # a job's tenant, and the number of its request's shape


@dataclass
class Walk:
    """Everything one decision walks over, prepared (see :meth:`Scheduler.walk`).

    ``usage``: tenant -> device model (and ``*``) -> share units held; ``held``: the queued
    jobs with nominated devices, in queue order; ``ordered``: the queued jobs in the
    ordering policy's order (any iterable: it is read once, as far as needed);
    ``rest``: the queue from a job on (by default what is left of
    ``ordered``), for the reasons of a full fabric's queue tail. A caller may give
    ``ordered`` as per-shape queues merged (:func:`merge_shapes`), dropping a shape once
    it is in ``failed`` (the dict the walk fills); then ``everyone`` gives every queued
    job, and the jobs the merge never offered wait with their shape's reason, written
    when read."""

    topo: Topology
    tenants: Mapping[str, Tenant]
    index: CapacityIndex
    running: Collection[JobView]
    usage: dict[str, dict[str, int]]
    held: Sequence[JobView]
    ordered: Iterable[JobView]
    pending: Iterable[str]
    queued: int
    queued_ids: Callable[[], Iterable[str]]
    time_shares: Mapping[str, Mapping[str, float]] | None = None
    rest: Callable[[JobView], Sequence[JobView]] | None = None
    info: JobInfo | None = None  # rates, service and progress at the decision's time
    failed: Failed | None = None  # the shapes that failed, filled by the walk
    everyone: Callable[[], Sequence[JobView]] | None = None  # see the docstring
    # the queued jobs that need no device, in order (None: the walk finds them in its
    # tail; a caller that gives ``everyone`` gives this too)
    cpu_only: Callable[[], Iterable[JobView]] | None = None


class Failed:
    """The request shapes that failed in one walk, and why (see :meth:`Scheduler.walk`).

    A failure that every tenant's job of the shape meets alike (its request never fits
    here, or does not fit as it is, not narrowed by a quota) is kept per shape number: its
    reason is the capacity's alone (it names no job and no quota), so it answers every
    tenant's job of the number. One that depends on the tenant (a quota's note, or a
    request the quota narrowed) is kept per (tenant, shape number). A *bound* tenant
    (under a quota, or not known) has its jobs of a failed number still walked, as its
    quota may answer them otherwise."""

    __slots__ = ("numbers", "own", "shapes", "tenants")

    def __init__(self, tenants: Mapping[str, Tenant]) -> None:
        self.tenants = tenants
        self.numbers: dict[int, Reason] = {}
        self.shapes: dict[Shape, Reason] = {}
        self.own: set[Shape] = set()  # the shapes whose failure was their tenant's own

    def bound(self, tenant: str) -> bool:
        """Whether ``tenant``'s jobs answer to a quota (or it is not known)."""
        if not self.tenants:
            return False
        known = self.tenants.get(tenant)
        return known is None or bool(known.quota)

    def get(self, shape: Shape) -> Reason | None:
        """Why a job of ``shape`` waits, if the shape failed for its tenant."""
        why = self.shapes.get(shape)
        if why is None:
            why = self.numbers.get(shape[1])
            if why is not None and self.bound(shape[0]):
                return None
        return why

    def add(self, shape: Shape, reason: Reason, shared: bool) -> None:
        """``shape`` failed with ``reason``; ``shared``: for every tenant alike."""
        if shared:
            self.numbers.setdefault(shape[1], reason)
            if not self.bound(shape[0]):
                return
        else:
            self.own.add(shape)
        self.shapes[shape] = reason

    def for_capacity(self, shape: Shape) -> bool:
        """Whether the failure :meth:`get` gives for ``shape`` is the capacity's (not a
        quota's note, nor a request a quota narrowed)."""
        return shape not in self.own


class Reasons(Mapping[str, Reason]):
    """Waiting reasons, those of the queue's tail computed when first read.

    The walk stops early when nothing is free (every later job waits with the reason its
    request gets from the final, unchanging capacity index), and a merged queue never
    offers the jobs of a shape that failed (they wait with its reason); writing them all
    at decision time would only cost time, and reading them gives exactly what eager
    writing would have.
    """

    def __init__(
        self,
        eager: dict[str, Reason],
        tail: Sequence[JobView],
        scheduler: Scheduler,
        topo: Topology,
        index: CapacityIndex | None,
        failed: Failed,
        *,
        skip: Collection[str] = (),
        total: int | None = None,
        quota: Quota | None = None,
    ) -> None:
        """``tail``: the jobs after the break, never among ``eager``; or, with ``total``
        (how many wait in all), every queued job, of which those in ``eager`` or ``skip``
        (started) are not the tail's. ``quota``: the tenants and their use where the
        walk ended (none: no quota checks)."""
        self._quota = quota
        self._eager = eager
        self._tail_list = tail
        self._skip = skip
        self._total = total
        self._tail: dict[str, JobView] | None = None  # by id, made on the first lookup
        self._scheduler = scheduler
        self._topo = topo
        self._index = index
        self._failed = failed
        self._shapes: dict[tuple[object, ...], str] = {}
        self._computed: dict[str, Reason] = {}

    def __getitem__(self, job_id: str) -> Reason:
        found = self._eager.get(job_id) or self._computed.get(job_id)
        if found is not None:
            return found
        if self._tail is None:
            self._tail = {j.id: j for j in self._tail_list}
        if job_id in self._skip:
            raise KeyError(job_id)
        job = self._tail[job_id]
        shape = self._scheduler.shape(job, self._topo)
        why = self._failed.get(shape) or self._unwalked(job, shape[1])
        self._computed[job_id] = why
        return why

    def _unwalked(self, job: JobView, number: int) -> Reason:
        """What the walk would have written for ``job`` where it ended (nothing changes
        after that point: the same capacity, the same tenants' use)."""
        never, base = self._scheduler.request(job, self._topo)
        if never is not None:
            return never_fits(never.message)
        req, note, over = (base, None, "") if self._quota is None else self._quota.check(job, base)
        if note is not None:
            return note
        if not over:
            shared = self._failed.numbers.get(number)
            if shared is not None:
                return shared
        assert self._index is not None, "a shape left without a reason"
        key = (req.classes, req.count, req.share, req.required, req.counts, req.cpus,
               req.memory_gb, req.per_host)  # fmt: skip
        why = self._shapes.get(key) or self._shapes.setdefault(key, explain(req, self._index))
        return no_capacity(why, over)

    def freeze(self, index: CapacityIndex) -> None:
        """``index`` is about to change: if the reasons not yet written read it, they read
        a copy of it as it is now from here on (a caller that keeps the decision's index
        calls this first, so a decision let go before then never copies it)."""
        if self._index is index:
            self._index = index.frozen()

    @property
    def eager(self) -> Mapping[str, Reason]:
        """The reasons written during the decision (not those of the queue's tail)."""
        return self._eager

    def __iter__(self) -> Iterator[str]:
        yield from self._eager
        if self._total is None:
            yield from (j.id for j in self._tail_list)
        else:
            eager, skip = self._eager, self._skip
            yield from (j.id for j in self._tail_list if j.id not in eager and j.id not in skip)

    def __len__(self) -> int:
        if self._total is not None:
            return self._total
        return len(self._eager) + len(self._tail_list)


class ShapeQueues(Protocol):
    """The queued jobs of one shape number: each tenant's in the ordering's order, and the
    tenants as ``(key of its first job, tenant)``, sorted."""

    @property
    def heads(self) -> Iterable[tuple[Any, str]]: ...

    @property
    def queues(self) -> Mapping[str, Iterable[JobView]]: ...


@dataclass
class Listed:
    """:class:`ShapeQueues` as lists (made for one decision)."""

    heads: list[tuple[Any, str]]
    queues: dict[str, list[JobView]]


def merge_shapes(
    numbers: Mapping[int, ShapeQueues],
    key: Callable[[JobView], Any],
    failed: Failed,
    bound: Collection[str] = (),
) -> Iterator[JobView]:
    """The jobs of every (tenant, shape number) queue (each in ``key`` order; keys unique)
    in ``key`` order, but none more of a tenant's shape once the walk has found it failed,
    nor of any tenant's once the shape number failed for all (``failed`` is read before
    each next job), except the ``bound`` tenants' (:meth:`Failed.bound`): every tenant
    under a quota or not known that has queued jobs (more may be given).

    Two levels, so that a decision costs about the shape numbers it visits and the jobs
    it walks, not the tenants: the numbers in a heap by their next job, and in each the
    tenants read from ``heads`` as far as needed (:class:`_Tenants`)."""
    heap: list[tuple[Any, int, _Tenants]] = []
    for number, queues in numbers.items():
        tenants = _Tenants(number, queues, key)
        first = tenants.next_key()
        if first is not None:
            heap.append((first, number, tenants))  # keys are unique: no tie reaches _Tenants
    heapq.heapify(heap)
    while heap:
        tenants = heap[0][2]
        yield tenants.take()
        tenants.after(failed, bound)
        nxt = tenants.next_key()
        if nxt is None:
            heapq.heappop(heap)
        else:
            heapq.heapreplace(heap, (nxt, tenants.number, tenants))


class _Tenants:
    """One shape number's tenant queues merged lazily: a tenant's queue joins the merge
    (a heap) when its first job comes up in ``heads``; once the number failed for every
    tenant, only the bound tenants' queues are left."""

    __slots__ = ("_active", "_head", "_heads", "_key", "_last", "_queues", "_seen", "number")

    def __init__(self, number: int, queues: ShapeQueues, key: Callable[[JobView], Any]) -> None:
        self.number = number
        self._queues = queues.queues
        self._heads: Iterator[tuple[Any, str]] | None = iter(queues.heads)
        self._head = next(self._heads, None)  # the first tenant not in the merge yet
        self._active: list[tuple[Any, str, JobView, Iterator[JobView]]] = []
        self._seen: set[str] = set()  # the tenants that joined
        self._key = key
        self._last: tuple[str, Iterator[JobView]] | None = None

    def next_key(self) -> Any:
        """The key of the next job (None: no more)."""
        head, active = self._head, self._active
        if active and (head is None or active[0][0] < head[0]):
            return active[0][0]
        return None if head is None else head[0]

    def take(self) -> JobView:
        """The next job (there is one: :meth:`next_key` said so)."""
        head, active = self._head, self._active
        if active and (head is None or active[0][0] < head[0]):
            _, tenant, job, it = heapq.heappop(active)
        else:
            assert head is not None and self._heads is not None
            tenant = head[1]
            it = iter(self._queues[tenant])
            job = next(it)
            self._seen.add(tenant)
            self._head = next(self._heads, None)
        self._last = (tenant, it)
        return job

    def after(self, failed: Failed, bound: Collection[str]) -> None:
        """The job taken last was walked: its tenant's next job joins, unless failed."""
        assert self._last is not None
        tenant, it = self._last
        number = self.number
        if self._heads is not None and number in failed.numbers:
            self._only(bound, failed)
            if tenant not in bound:
                return
        if (tenant, number) in failed.shapes:
            return
        nxt = next(it, None)
        if nxt is not None:
            heapq.heappush(self._active, (self._key(nxt), tenant, nxt, it))

    def _only(self, bound: Collection[str], failed: Failed) -> None:
        """The number failed for every tenant: only the bound tenants' queues go on."""
        self._heads, self._head = None, None
        keep = [entry for entry in self._active if entry[1] in bound]
        for tenant in bound:
            queue = self._queues.get(tenant)
            if queue is None or tenant in self._seen or (tenant, self.number) in failed.shapes:
                continue
            self._seen.add(tenant)
            it = iter(queue)
            job = next(it)
            keep.append((self._key(job), tenant, job, it))
        heapq.heapify(keep)
        self._active = keep
