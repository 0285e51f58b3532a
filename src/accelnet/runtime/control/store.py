"""The store: every job, its transitions and the devices' states, behind one interface.

Two implementations: :class:`MemoryStore` (tests, the simulator) and
:class:`~accelnet.runtime.control.sqlite_store.SqliteStore` (the embedded default: one file, WAL,
synchronous=FULL, so a job the store accepted survives a crash of the process). Every job
state change goes through :meth:`Store.transition`, which checks the job transition table
and records an event, so the event log and the states never disagree. Several writes made
inside :meth:`Store.atomic` are kept together or not at all (a batch of jobs and the
:class:`IdempotencyRecord` of the request that made them).
"""

from __future__ import annotations

import bisect
import contextlib
import threading
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, replace
from typing import Any, Final

from accelnet.devices import DeviceState
from accelnet.devices.history import HistoryBucket, coarsen
from accelnet.sched import JOB_TRANSITIONS, JobSpec, JobState, JobView, Placement
from accelnet.sched.reasons import OutcomeCode


@dataclass(frozen=True, slots=True)
class JobRecord:
    """A job as stored. ``payload`` is a cloudpickled function call (SDK jobs);
    ``result`` the value the job produced (a list with one entry per rank for gangs);
    ``attempts`` counts launches, ``failures`` the failed ones (against ``max_retries``);
    ``attained`` and ``done`` the service and the work of its finished attempts;
    ``inputs`` the jobs whose outputs it consumes, ``(alias, job id)``, resolved from the
    spec's names when it was submitted; ``energy`` what its attempts used so far
    (:meth:`accelnet.devices.energy.JobEnergy.to_json`: joules, measured or modelled, by
    device; None before its first attempt ends or without energy accounting);
    ``retry_at`` when a job requeued after a failure may start again (its retry backoff;
    None: at once); ``outcome`` how its latest attempt ended (:class:`OutcomeCode`; the
    job's outcome once it has finished; None before an attempt has ended)."""

    id: str
    spec: JobSpec
    state: JobState
    submitted_at: float
    attempts: int = 0
    started_at: float | None = None
    finished_at: float | None = None
    placement: Placement | None = None
    nominated: tuple[str, ...] = ()
    result: Any = None
    error: str | None = None
    payload: bytes | None = None
    failures: int = 0
    attained: tuple[tuple[str, float], ...] = ()  # (model, device-seconds), finished attempts
    done: float = 0.0  # steps kept by finished attempts (checkpointed)
    inputs: tuple[tuple[str, str], ...] = ()  # (alias, upstream job id)
    energy: dict[str, Any] | None = None  # JobEnergy.to_json() of its finished attempts
    retry_at: float | None = None  # a requeued failed job waits until then (backoff)
    outcome: OutcomeCode | None = None  # how its latest attempt ended

    def view(self) -> JobView:
        """What the scheduler sees of the job."""
        return JobView(
            self.id,
            self.spec,
            self.state,
            self.submitted_at,
            self.attempts,
            self.started_at,
            self.placement if self.state.holds_devices() else None,
            self.nominated,
            self.attained,
            self.done,
        )


@dataclass(frozen=True, slots=True)
class Event:
    """One line of the event log."""

    seq: int
    at: float
    job: str | None
    kind: str
    detail: str


@dataclass(frozen=True, slots=True)
class IdempotencyRecord:
    """A submission made under an idempotency key: the tenant it was made for and its key,
    a fingerprint of the request (a hash of its body), the jobs it created (ids, in the
    order given) and when. Stored in the same transaction as those jobs."""

    tenant: str
    key: str
    fingerprint: str
    jobs: tuple[str, ...]
    at: float


HISTORY_KEEP_S: Final = 7 * 86400.0
"""Telemetry history older than this (behind a device's newest bucket) is dropped."""
HISTORY_ROWS: Final = 10_080
"""At most this many history buckets per device (7 days of one-minute buckets)."""


class StoreError(RuntimeError):
    """A store operation that cannot be done (unknown job, duplicate id, ...)."""


class JobExistsError(StoreError):
    """:meth:`Store.add` of a job id the store has already."""


class Store(ABC):
    """Jobs, events and device states. Thread-safe; every write is durable on return."""

    @abstractmethod
    def add(self, record: JobRecord, cause: str = "submitted") -> None:
        """Store a new job (StoreError if the id exists); durable when this returns."""

    @abstractmethod
    def get(self, job_id: str) -> JobRecord:
        """The job; StoreError if unknown."""

    @abstractmethod
    def jobs(self, states: Iterable[JobState] | None = None) -> list[JobRecord]:
        """Jobs (in the given states), in submission order."""

    def latest_named(self, name: str, tenant: str | None = None) -> JobRecord | None:
        """The job named ``name`` (its spec's name) submitted last, of ``tenant`` if given
        (None: of any tenant), or None."""
        found = [j for j in self.jobs() if j.spec.name == name and tenant in (None, j.spec.tenant)]
        return found[-1] if found else None

    def jobs_page(
        self,
        limit: int,
        *,
        tenant: str | None = None,
        states: Iterable[JobState] | None = None,
        name: str | None = None,
        before: str | None = None,
    ) -> list[JobRecord]:
        """At most ``limit`` jobs, newest first (the reverse of submission order), of
        ``tenant``, in one of ``states``, named ``name`` (None: any), submitted before the
        job ``before`` (an id: the last job of the previous page; StoreError if there is
        no such job). What the REST API lists with: the SQLite store reads a page from
        indexes, in time that does not grow with the jobs stored; this default filters
        every job."""
        wanted = None if states is None else set(states)
        found = self.jobs()
        if before is not None:
            at = next((k for k, r in enumerate(found) if r.id == before), None)
            if at is None:
                raise StoreError(f"no job {before!r}")
            found = found[:at]
        out: list[JobRecord] = []
        for rec in reversed(found):
            if len(out) >= limit:
                break
            if _matches(rec, tenant, wanted, name):
                out.append(rec)
        return out

    def events_page(
        self, since: int, limit: int, tenant: str | None = None
    ) -> tuple[list[Event], int]:
        """At most ``limit`` events after ``since``, oldest first: all of them, or with a
        ``tenant`` the events of its jobs and the events of no job (devices); and the
        ``since`` to ask with next (the last event returned if the page is full, else the
        newest event considered: another tenant's events after it are skipped). The
        SQLite store reads a page from indexes; this default filters every event after
        ``since``."""
        out: list[Event] = []
        last = since
        for ev in self.events_since(since):
            if len(out) >= limit:
                break
            last = ev.seq
            if tenant is None or ev.job is None or self._tenant_of(ev.job) == tenant:
                out.append(ev)
        return out, last

    def _tenant_of(self, job_id: str) -> str | None:
        try:
            return self.get(job_id).spec.tenant
        except StoreError:
            return None

    @abstractmethod
    def _write(self, record: JobRecord, event: tuple[float, str, str] | None) -> None:
        """Replace the stored job and append the event atomically."""

    @abstractmethod
    def events(self, job_id: str | None = None) -> list[Event]:
        """The event log (of one job), oldest first."""

    def events_since(self, seq: int, kinds: Iterable[str] | None = None) -> list[Event]:
        """The events after ``seq`` (of the given kinds), oldest first: how a controller
        picks up what another process appended (an operator's device requests)."""
        wanted = None if kinds is None else set(kinds)
        return [e for e in self.events() if e.seq > seq and (wanted is None or e.kind in wanted)]

    @abstractmethod
    def set_device(self, device: str, state: DeviceState, at: float, cause: str) -> None:
        """Record a device's new state (the lifecycle checks legality before)."""

    @abstractmethod
    def devices(self) -> dict[str, DeviceState]:
        """The last recorded state of every device."""

    @abstractmethod
    def add_history(self, buckets: Iterable[HistoryBucket]) -> None:
        """Keep downsampled telemetry (:class:`~accelnet.devices.history.HistoryBucket`).
        A bucket of a device, start and width already kept is merged into it (a partial
        bucket written at a controller's close, then its rest). Bounded per device: the
        newest ``history_rows`` buckets within ``history_keep_s`` of its newest."""

    @abstractmethod
    def history(self, device: str | None = None, since: float | None = None) -> list[HistoryBucket]:
        """The kept buckets (of ``device``; that end after ``since``), by device, then start."""

    @abstractmethod
    def close(self) -> None:
        """Release the store's resources."""

    @abstractmethod
    def atomic(self) -> contextlib.AbstractContextManager[None]:
        """A context in which this thread's writes are kept together or not at all: all
        durable when it ends, none kept if it ends with an exception. Other threads' store
        calls wait until it ends (take a lock that callers of the store may hold, such as
        a cluster's, before it, never inside it). Nested: the outermost decides."""

    def batch(self) -> contextlib.AbstractContextManager[None]:
        """A context whose writes become durable together when it ends (a controller's
        tick: one commit instead of one per write). Unlike :meth:`atomic`, nothing is undone
        when it ends with an exception: each write is atomic on its own, and what completed
        is kept. Other threads' store calls wait until it ends. A store with nothing to
        flush (this default) does nothing."""
        return contextlib.nullcontext()

    @abstractmethod
    def idempotency(self, tenant: str, key: str, since: float) -> IdempotencyRecord | None:
        """The submission kept for ``tenant`` under ``key`` at ``since`` or later, or None."""

    @abstractmethod
    def keep_idempotency(self, record: IdempotencyRecord, forget_before: float) -> None:
        """Keep a submission's key (call it inside the :meth:`atomic` that adds its jobs);
        records older than ``forget_before`` are dropped (one of the same tenant and key
        too). StoreError if the tenant has a newer record under that key."""

    @abstractmethod
    def idempotency_records(self) -> list[IdempotencyRecord]:
        """Every kept submission key, oldest first (audits, tests)."""

    def transition(
        self, job_id: str, to: JobState, at: float, cause: str, **changes: Any
    ) -> JobRecord:
        """Move a job to ``to`` (checked against the job table), with field ``changes``,
        recording the event; returns the new record. IllegalTransitionError if not allowed."""
        with self._lock:
            rec = self.get(job_id)
            JOB_TRANSITIONS.check(job_id, rec.state, to)
            new = replace(rec, state=to, **changes)
            self._write(new, (at, f"job:{to.value}", cause))
            return new

    def update(self, job_id: str, **changes: Any) -> JobRecord:
        """Change fields other than the state (no event)."""
        with self._lock:
            new = replace(self.get(job_id), **changes)
            self._write(new, None)
            return new

    def log(self, job_id: str | None, at: float, kind: str, detail: str) -> None:
        """Append an event that changes no job (task news, device changes)."""
        with self._lock:
            self._append_event(job_id, at, kind, detail)

    @abstractmethod
    def _append_event(self, job_id: str | None, at: float, kind: str, detail: str) -> None:
        """Append one event."""

    _lock: threading.RLock
    history_keep_s: float = HISTORY_KEEP_S  # telemetry history bounds, per device
    history_rows: int = HISTORY_ROWS


class MemoryStore(Store):
    """Everything in dicts: fast, and gone with the process."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._jobs: dict[str, JobRecord] = {}
        # the events as plain tuples (_Row), made Events when read: a tuple of atomic values
        # is one the garbage collector stops tracking, and a controller keeps every event of
        # every job it ran (about ten a job), which its full passes would walk again and again
        self._events: list[_Row] = []
        self._by_job: dict[str, list[_Row]] = {}  # each job's events (events(job) is O(its own))
        self._devices: dict[str, DeviceState] = {}
        # (tenant or None, name) -> the id of the last job of that name (None: any tenant's)
        self._named: dict[tuple[str | None, str], str] = {}
        self._history: dict[str, list[HistoryBucket]] = {}  # device -> buckets by start
        self._idem: dict[tuple[str, str], IdempotencyRecord] = {}  # (tenant, key) -> record
        self._depth = 0  # nesting of atomic()
        # for pages (jobs_page, events_page): the jobs in submission order, each job's
        # place in it, each tenant's places, each tenant's jobs' events, events of no job
        self._order: list[str] = []
        self._pos: dict[str, int] = {}
        self._tenant_pos: dict[str, list[int]] = {}
        self._tenant_events: dict[str, list[_Row]] = {}
        self._jobless: list[_Row] = []

    def add(self, record: JobRecord, cause: str = "submitted") -> None:
        """See :class:`Store`."""
        with self._lock:
            if record.id in self._jobs:
                raise JobExistsError(f"job {record.id!r} exists")
            self._jobs[record.id] = record
            self._index_job(record)
            self._named[None, record.spec.name] = record.id
            self._named[record.spec.tenant, record.spec.name] = record.id
            self._append_event(record.id, record.submitted_at, f"job:{record.state.value}", cause)

    def _index_job(self, record: JobRecord) -> None:
        self._pos[record.id] = len(self._order)
        self._tenant_pos.setdefault(record.spec.tenant, []).append(len(self._order))
        self._order.append(record.id)

    def _index_event(self, row: _Row) -> None:
        job = row[_JOB]
        if job is None:
            self._jobless.append(row)
            return
        rec = self._jobs.get(job)
        if rec is not None:
            self._tenant_events.setdefault(rec.spec.tenant, []).append(row)

    def get(self, job_id: str) -> JobRecord:
        """See :class:`Store`."""
        try:
            return self._jobs[job_id]
        except KeyError:
            raise StoreError(f"no job {job_id!r}") from None

    def latest_named(self, name: str, tenant: str | None = None) -> JobRecord | None:
        """See :class:`Store`."""
        with self._lock:
            found = self._named.get((tenant, name))
            return None if found is None else self._jobs[found]

    def jobs(self, states: Iterable[JobState] | None = None) -> list[JobRecord]:
        """See :class:`Store`."""
        wanted = set(states) if states is not None else None
        with self._lock:
            return [j for j in self._jobs.values() if wanted is None or j.state in wanted]

    def jobs_page(
        self,
        limit: int,
        *,
        tenant: str | None = None,
        states: Iterable[JobState] | None = None,
        name: str | None = None,
        before: str | None = None,
    ) -> list[JobRecord]:
        """See :class:`Store`: from the tenant's own jobs (or all), newest first, skipping
        those of other states and names (no index by state or name here)."""
        wanted = None if states is None else set(states)
        out: list[JobRecord] = []
        with self._lock:
            positions: list[int] | range = (
                range(len(self._order)) if tenant is None else self._tenant_pos.get(tenant, [])
            )
            end = len(positions)
            if before is not None:
                if before not in self._pos:
                    raise StoreError(f"no job {before!r}")
                end = bisect.bisect_left(positions, self._pos[before])
            for k in range(end - 1, -1, -1):
                if len(out) >= limit:
                    break
                rec = self._jobs.get(self._order[positions[k]])  # None: forgotten (SimStore)
                if rec is not None and _matches(rec, tenant, wanted, name):
                    out.append(rec)
        return out

    def events_page(
        self, since: int, limit: int, tenant: str | None = None
    ) -> tuple[list[Event], int]:
        """See :class:`Store`: from the tenant's own events and those of no job."""
        start = max(0, since)
        with self._lock:
            newest = len(self._events)
            if tenant is None:
                found = self._events[start : start + max(0, limit)]
            else:
                found = []
                for kept in (self._tenant_events.get(tenant, []), self._jobless):
                    k = bisect.bisect_right(kept, since, key=_row_seq)
                    found += kept[k : k + max(0, limit)]
                found.sort(key=_row_seq)
        if len(found) >= limit:
            found = found[: max(0, limit)]
            return [Event(*r) for r in found], found[-1][_SEQ] if found else since
        return [Event(*r) for r in found], max(since, newest)

    def _write(self, record: JobRecord, event: tuple[float, str, str] | None) -> None:
        self._jobs[record.id] = record
        if event is not None:
            self._append_event(record.id, *event)

    def _append_event(self, job_id: str | None, at: float, kind: str, detail: str) -> None:
        row = (len(self._events) + 1, at, job_id, kind, detail)
        self._events.append(row)
        if job_id is not None:
            self._by_job.setdefault(job_id, []).append(row)
        self._index_event(row)

    def events(self, job_id: str | None = None) -> list[Event]:
        """See :class:`Store`."""
        with self._lock:
            rows = self._events if job_id is None else self._by_job.get(job_id, ())
            return [Event(*r) for r in rows]

    def events_since(self, seq: int, kinds: Iterable[str] | None = None) -> list[Event]:
        """See :class:`Store`."""
        wanted = None if kinds is None else set(kinds)
        with self._lock:
            newer = self._events[max(0, seq) :]  # seq n is at index n - 1
        return [Event(*r) for r in newer if wanted is None or r[_KIND] in wanted]

    def set_device(self, device: str, state: DeviceState, at: float, cause: str) -> None:
        """See :class:`Store`."""
        with self._lock:
            self._devices[device] = state
            self._append_event(None, at, f"device:{state.value}", f"{device}: {cause}")

    def devices(self) -> dict[str, DeviceState]:
        """See :class:`Store`."""
        with self._lock:
            return dict(self._devices)

    def add_history(self, buckets: Iterable[HistoryBucket]) -> None:
        """See :class:`Store`."""
        with self._lock:
            for b in buckets:
                kept = self._history.setdefault(b.device, [])
                k = bisect.bisect_left(kept, (b.start, b.width_s), key=_bucket_key)
                if k < len(kept) and _bucket_key(kept[k]) == (b.start, b.width_s):
                    kept[k] = coarsen([kept[k], b], b.width_s)[0]
                else:
                    kept.insert(k, b)
                oldest = kept[-1].start - self.history_keep_s
                drop = max(0, len(kept) - self.history_rows)
                while drop < len(kept) and kept[drop].end < oldest:
                    drop += 1
                del kept[:drop]

    def history(self, device: str | None = None, since: float | None = None) -> list[HistoryBucket]:
        """See :class:`Store`."""
        with self._lock:
            devices = sorted(self._history) if device is None else [device]
            return [b for d in devices for b in self._history.get(d, ())
                    if since is None or b.end > since]  # fmt: skip

    def close(self) -> None:
        """Nothing to release."""

    @contextlib.contextmanager
    def atomic(self) -> Iterator[None]:
        """See :class:`Store`: on an exception the jobs, events, devices and keys are put
        back as they were when the outermost block began (telemetry history is not)."""
        with self._lock:
            if self._depth:
                self._depth += 1
                try:
                    yield
                finally:
                    self._depth -= 1
                return
            saved = (dict(self._jobs), dict(self._named), dict(self._devices), dict(self._idem))
            events = len(self._events)
            self._depth = 1
            try:
                yield
            except BaseException:
                self._jobs, self._named, self._devices, self._idem = saved
                del self._events[events:]
                self._by_job = {}
                for row in self._events:
                    if row[_JOB] is not None:
                        self._by_job.setdefault(row[_JOB], []).append(row)
                self._reindex()
                raise
            finally:
                self._depth = 0

    def _reindex(self) -> None:
        """Rebuild the pages' indexes from the jobs and events (after a rollback)."""
        self._order, self._pos, self._tenant_pos = [], {}, {}
        self._tenant_events, self._jobless = {}, []
        for rec in self._jobs.values():
            self._index_job(rec)
        for row in self._events:
            self._index_event(row)

    def idempotency(self, tenant: str, key: str, since: float) -> IdempotencyRecord | None:
        """See :class:`Store`."""
        with self._lock:
            found = self._idem.get((tenant, key))
        return found if found is not None and found.at >= since else None

    def keep_idempotency(self, record: IdempotencyRecord, forget_before: float) -> None:
        """See :class:`Store`."""
        with self._lock:
            old = []
            for k, r in self._idem.items():  # kept in the order made: the oldest first
                if r.at >= forget_before:
                    break
                old.append(k)
            for k in old:
                del self._idem[k]
            if (record.tenant, record.key) in self._idem:
                raise StoreError(f"idempotency key {record.key!r} of {record.tenant} is kept")
            self._idem[(record.tenant, record.key)] = record

    def idempotency_records(self) -> list[IdempotencyRecord]:
        """See :class:`Store`."""
        with self._lock:
            return sorted(self._idem.values(), key=lambda r: r.at)


def _bucket_key(b: HistoryBucket) -> tuple[float, float]:
    return (b.start, b.width_s)


_Row = tuple[int, float, str | None, str, str]
"""An :class:`Event` as :class:`MemoryStore` keeps it: (seq, at, job, kind, detail)."""
_SEQ: Final = 0
_JOB: Final = 2
_KIND: Final = 3


def _row_seq(row: _Row) -> int:
    return row[_SEQ]


def _matches(
    rec: JobRecord, tenant: str | None, states: set[JobState] | None, name: str | None
) -> bool:
    return (
        (tenant is None or rec.spec.tenant == tenant)
        and (states is None or rec.state in states)
        and (name is None or rec.spec.name == name)
    )


def count_by_state(store: Store) -> Mapping[JobState, int]:
    """How many jobs in each state."""
    out: dict[JobState, int] = {}
    for j in store.jobs():
        out[j.state] = out.get(j.state, 0) + 1
    return out
