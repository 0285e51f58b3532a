"""Jobs: submit, list (filters, cursor pages), get, cancel, events, logs.

Tenant isolation is here: for a non-admin a job of another tenant does not exist (404,
the very answer an unknown id gets), lists hold its tenant's jobs only.

A page of the list is read with :meth:`~accelnet.runtime.control.store.Store.jobs_page` (keyset
paging: the jobs before the cursor's job, from the store's indexes), so it costs the same
however many jobs are stored; the cursor names the last job of the previous page.
"""

from __future__ import annotations

import base64
import binascii
import json
import threading
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from accelnet.api.admission import Admission, check_key, parse_json
from accelnet.api.errors import conflict, invalid, not_found
from accelnet.api.models import EventOut, EventsOut, HostUseOut, JobOut, JobsOut
from accelnet.api.port import ClusterPort
from accelnet.api.redact import public_text
from accelnet.api.tokens import Principal
from accelnet.runtime.control.store import JobRecord, StoreError
from accelnet.sched import JobSpec, JobState
from accelnet.sched.reasons import Reason, code_of

MAX_LIMIT = 500
MAX_LOG_READ = 16 * 1024 * 1024
_CACHE = 100_000
_DUMPED = 2048  # specs whose JSON form is remembered (the store keeps as many decoded)


class JobTenants:
    """Which tenant a job belongs to (ids are never reused: answers are cached)."""

    def __init__(self, port: ClusterPort) -> None:
        self.port = port
        self._known: dict[str, str] = {}
        self._lock = threading.Lock()

    def of(self, job_id: str) -> str | None:
        """The job's tenant, or None for an unknown job."""
        with self._lock:
            found = self._known.get(job_id)
        if found is not None:
            return found
        try:
            tenant = self.port.store.get(job_id).spec.tenant
        except StoreError:
            return None
        with self._lock:
            if len(self._known) > _CACHE:
                self._known.clear()
            self._known[job_id] = tenant
        return tenant


@dataclass(frozen=True, slots=True)
class LogChunk:
    """Bytes of a task's stream from ``offset`` on; ``next_offset`` to read on from."""

    data: bytes
    offset: int
    next_offset: int
    attempt: int
    finished: bool


def states_of(text: str | None) -> list[JobState] | None:
    """``running,admitted`` -> the states; 422 naming ``state`` for an unknown one."""
    if not text:
        return None
    out = []
    for part in text.split(","):
        try:
            out.append(JobState(part.strip()))
        except ValueError:
            valid = ", ".join(s.value for s in JobState)
            raise invalid(f"state {part.strip()!r} is not one of: {valid}", "state") from None
    return out


def _cursor(rec: JobRecord) -> str:
    raw = json.dumps({"at": rec.submitted_at, "id": rec.id}).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _uncursor(text: str) -> tuple[float, str]:
    try:
        data = json.loads(base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))
        return float(data["at"]), str(data["id"])
    except (ValueError, KeyError, TypeError, binascii.Error):
        raise invalid("not a cursor this API gave out", "cursor") from None


class JobService:
    """The job endpoints' logic."""

    def __init__(self, port: ClusterPort, admission: Admission, tenants: JobTenants) -> None:
        self.port = port
        self.admission = admission
        self.tenants = tenants
        # id(spec) -> (the spec, its JSON form): the store hands out the same immutable spec
        # object for a job read again (its own cache), so a page read again dumps none
        self._dumped: OrderedDict[int, tuple[JobSpec, dict[str, Any]]] = OrderedDict()
        self._dumped_lock = threading.Lock()

    def spec_json(self, spec: JobSpec) -> dict[str, Any]:
        """``spec.model_dump(mode="json")``, remembered for the last specs seen."""
        key = id(spec)
        with self._dumped_lock:
            found = self._dumped.get(key)
            if found is not None and found[0] is spec:
                self._dumped.move_to_end(key)
                return found[1]
        dumped: dict[str, Any] = spec.model_dump(mode="json")
        with self._dumped_lock:
            self._dumped[key] = (spec, dumped)  # the spec is kept: its id is not reused
            if len(self._dumped) > _DUMPED:
                self._dumped.popitem(last=False)
        return dumped

    def out(self, rec: JobRecord, reasons: Mapping[str, Reason | None] | None = None) -> JobOut:
        """The API's view of a stored job (with why it waits, if it does: from
        ``reasons``, by job id, if given, else asked of the cluster)."""
        p = rec.placement
        reason = None
        if rec.state in (JobState.PENDING, JobState.ADMITTED):
            reason = self.port.reason(rec.id) if reasons is None else reasons.get(rec.id)
        spec = self.spec_json(rec.spec)
        return JobOut(
            id=rec.id, name=rec.spec.name, tenant=rec.spec.tenant, state=rec.state.value,
            submitted_at=rec.submitted_at, started_at=rec.started_at,
            finished_at=rec.finished_at, attempts=rec.attempts, failures=rec.failures,
            retry_at=rec.retry_at if rec.state is JobState.ADMITTED else None,
            devices=list(p.devices) if p else [], model=p.model if p else None,
            share=p.share if p else None,
            hosts=[HostUseOut(host=h, cpus=c, memory_gb=g) for h, c, g in p.hosts] if p else [],
            reason=reason, reason_code=code_of(reason), error=public_text(rec.error),
            outcome_code=rec.outcome,
            inputs=dict(rec.inputs), spec=spec,
        )  # fmt: skip

    def find(self, who: Principal, job_id: str) -> JobRecord:
        """The job, if ``who`` may see it; 404 otherwise (unknown, or another tenant's)."""
        try:
            rec = self.port.store.get(job_id)
        except StoreError:
            rec = None
        if rec is None or (not who.admin and rec.spec.tenant != who.tenant):
            raise not_found(f"no job {job_id!r}")
        return rec

    def submit(
        self, who: Principal, raw: bytes, key: str | None = None
    ) -> tuple[list[JobOut], bool]:
        """Admit the jobs of a request body, under the request's ``Idempotency-Key`` if it
        has one (see :mod:`accelnet.api.admission`); the jobs, and whether an earlier
        request with that key made them (a replay)."""
        key = check_key(key)
        admitted = self.admission.submit(who, parse_json(raw), key)
        return [self.out(r) for r in admitted.jobs], admitted.replayed

    def list(
        self,
        who: Principal,
        state: str | None,
        tenant: str | None,
        name: str | None,
        limit: int,
        cursor: str | None,
    ) -> JobsOut:
        """Jobs newest first, filtered; ``next`` pages on (one page: at most ``limit`` + 1
        jobs read from the store's indexes, whatever the number stored)."""
        states = states_of(state)
        if not who.admin:
            if tenant is not None and tenant != who.tenant:
                return JobsOut(jobs=[], next=None)
            tenant = who.tenant
        before = _uncursor(cursor)[1] if cursor else None
        try:
            found = self.port.store.jobs_page(
                limit + 1, tenant=tenant, states=states, name=name, before=before
            )
        except StoreError:  # a well-formed cursor naming no job
            raise invalid("not a cursor this API gave out", "cursor") from None
        page = found[:limit]
        queued = [r.id for r in page if r.state in (JobState.PENDING, JobState.ADMITTED)]
        reasons = self.port.reasons(queued) if queued else {}
        more = len(found) > limit
        return JobsOut(
            jobs=[self.out(r, reasons) for r in page],
            next=_cursor(page[-1]) if more else None,
        )

    def cancel(self, who: Principal, job_id: str) -> JobOut:
        """Cancel a job; 409 if it has finished."""
        rec = self.find(who, job_id)
        if rec.state.is_finished():
            raise conflict(f"job {job_id} has finished ({rec.state.value}): nothing to cancel")
        self.port.cancel(job_id)
        return self.out(self.port.store.get(job_id))

    def events(self, who: Principal, job_id: str) -> EventsOut:
        """The job's event log."""
        self.find(who, job_id)
        events = self.port.store.events(job_id)
        return EventsOut(
            events=[EventOut(seq=e.seq, at=e.at, job=e.job, kind=e.kind,
                             detail=public_text(e.detail) or "")
                    for e in events],
            next=events[-1].seq if events else 0,
        )  # fmt: skip

    def read_log(
        self,
        who: Principal,
        job_id: str,
        rank: int,
        stream: str,
        offset: int,
        attempt: int | None = None,
        limit: int = MAX_LOG_READ,
    ) -> LogChunk:
        """Bytes of a rank's ``out``/``err`` from ``offset`` (of ``attempt``; default the
        latest); empty before the job has started."""
        rec = self.find(who, job_id)
        world = rec.spec.resources.accelerators.count
        if not 0 <= rank < world:
            raise invalid(f"rank {rank}: job {job_id} has ranks 0 to {world - 1}", "rank")
        if attempt is not None and not 1 <= attempt <= max(1, rec.attempts):
            raise invalid(f"attempt {attempt}: job {job_id} has had {rec.attempts}", "attempt")
        n = attempt if attempt is not None else rec.attempts
        finished = rec.state.is_finished() or (attempt is not None and attempt < rec.attempts)
        if n == 0:
            return LogChunk(b"", offset, offset, 0, finished)
        data = b""
        for _ in range(2):  # a task that ends meanwhile moves its spool to its log file
            path = self.port.log_path(job_id, n, rank, stream)
            try:
                with path.open("rb") as f:
                    f.seek(offset)
                    data = f.read(limit)
                break
            except FileNotFoundError:
                continue
        return LogChunk(data, offset, offset + len(data), n, finished)
