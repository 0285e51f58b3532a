"""Admission: from a submission body to accepted jobs, or an error naming the field.

A body is one job spec or ``{"jobs": [...]}``. Every job is checked before any is stored
(all or nothing): the spec (pydantic; the key path inside the body: ``jobs[1].resources.
accelerators``), the tenant (a non-admin submits for its own tenant only; a job without
``tenant`` is the token's), whether the fabric can ever run it, its ``inputs`` (ids or
names of the tenant's jobs, or of earlier jobs in the same request), and its tenant's
quota (:mod:`accelnet.api.quota`; 422 ``over_quota``). Submissions are serialised, so
two requests cannot both take the last of a quota. The jobs of one request are stored in
one transaction (:meth:`accelnet.api.port.ClusterPort.submit_all`).

Idempotency: a request with an ``Idempotency-Key`` (1 to 255 characters, no control
characters) is kept under the principal's tenant and that key, with a fingerprint of its
body (SHA-256 of its canonical JSON) and the ids of the jobs it made, in the same
transaction as those jobs, for :data:`KEY_KEEP_S` (24 h). The same key again within that
time: the jobs it made are answered (201, :attr:`Admitted.replayed`), nothing new is
made, nothing is checked again (quota); with another body: 409 naming the key. After
that time the key may make new jobs.

The quota ledger follows the store's event log (``job:starting``, ``job:admitted``,
finished states) before each check, so it knows where jobs run and which have ended. The
tenants the scheduler checks (weights and quotas) are pushed to the cluster whenever they
change.
"""

from __future__ import annotations

import hashlib
import json
import threading
import unicodedata
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from pydantic import ValidationError

from accelnet.api.errors import ApiError, conflict, forbidden, invalid
from accelnet.api.port import ClusterPort
from accelnet.api.quota import Charge, QuotaLedger
from accelnet.api.tenants import TenantRecord, Tenants
from accelnet.api.tokens import Principal
from accelnet.runtime.clock import Clock
from accelnet.runtime.control.controller import JobRejectedError
from accelnet.runtime.control.store import IdempotencyRecord, JobExistsError, JobRecord, StoreError
from accelnet.sched import JobSpec, JobState, Tenant
from accelnet.sched.request import eligible_classes, rejection
from accelnet.sched.topology import Topology
from accelnet.specio import SpecIssue, short_repr, validation_issues

LIVE = (JobState.PENDING, JobState.ADMITTED, JobState.STARTING, JobState.RUNNING,
        JobState.PREEMPTING)  # fmt: skip
_FOLLOWED = ("job:starting", "job:admitted", "job:succeeded", "job:failed", "job:cancelled")
MAX_ISSUES = 10
KEY_HEADER: Final = "Idempotency-Key"
KEY_KEEP_S: Final = 24 * 3600.0
"""How long an idempotency key answers with the jobs it made (then it is forgotten)."""
MAX_KEY = 255


ID_TRIES = 8  # draws of the batch's job ids before a collision is answered 409


@dataclass(frozen=True, slots=True)
class Admitted:
    """The jobs of a submission; ``replayed``: an earlier request with the same
    idempotency key made them (nothing new was made)."""

    jobs: list[JobRecord]
    replayed: bool = False


def check_key(key: str | None) -> str | None:
    """The ``Idempotency-Key`` header's value, or None without one; 422 naming the header
    for an empty one, one over 255 characters, or one with control characters."""
    if key is None:
        return None
    if not key:
        raise invalid(f"{KEY_HEADER} is empty: 1 to {MAX_KEY} characters", KEY_HEADER)
    if len(key) > MAX_KEY:
        raise invalid(f"{KEY_HEADER} has {len(key)} characters; at most {MAX_KEY}", KEY_HEADER)
    bad = next((c for c in key if unicodedata.category(c) == "Cc"), None)
    if bad is not None:
        raise invalid(f"{KEY_HEADER} holds a control character ({bad!r})", KEY_HEADER)
    return key


def fingerprint(data: Any) -> str:
    """SHA-256 of the body's canonical JSON (keys sorted, no spaces): the same request
    however its keys were ordered or spaced."""
    text = json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()


def parse_json(raw: bytes) -> Any:
    """The body as JSON; 422 naming what is wrong."""
    if not raw.strip():
        raise invalid('the body is empty: send a job spec or {"jobs": [...]}')
    try:
        return json.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise invalid(f"the body is not valid JSON: {exc}") from None


def _issue_text(where: str, issue: SpecIssue) -> str:
    """``jobs[0].resources.accelerators = 'H100:0': the count must be at least 1``."""
    message = issue.message
    if issue.value is None:
        return f"{where}{issue.path}: {message}"
    shown = short_repr(issue.value)
    return f"{where}{issue.path} = {shown}: {message.removeprefix(shown + ': ')}"


class Admission:
    """Checks and submits jobs (see the module docstring). Thread-safe."""

    def __init__(self, port: ClusterPort, tenants: Tenants, clock: Clock, max_batch: int) -> None:
        self.port = port
        self.tenants = tenants
        self.clock = clock
        self.max_batch = max_batch
        self.topology = Topology(port.fabric)  # the API's own (its memos are its own)
        self._lock = threading.Lock()
        self._ledger = QuotaLedger()
        self._pushed: dict[str, Tenant] | None = None
        store = port.store
        found = store.events_since(0, _FOLLOWED)
        self._seq = found[-1].seq if found else 0
        for rec in store.jobs(LIVE):
            self._ledger.charge(rec.id, self._charge_of(rec.spec))
            if rec.state.holds_devices() and rec.placement is not None:
                self._ledger.place(rec.id, rec.placement.model)
        with self._lock:
            self._push()

    # ----- public -------------------------------------------------------------------
    def submit(self, who: Principal, data: Any, key: str | None = None) -> Admitted:
        """Check every job of ``data`` (one spec or ``{"jobs": [...]}``) and submit them
        in order, in one transaction; ApiError (422 invalid / over_quota, 403) and nothing
        stored if one fails. ``key``: the request's idempotency key (checked with
        :func:`check_key`; see the module docstring)."""
        mark = "" if key is None else fingerprint(data)
        if key is not None:
            with self._lock:
                earlier = self._replay(who, key, mark)
            if earlier is not None:
                return earlier
        items, prefix = self._split(data)
        specs = [self._spec(who, item, self._where(prefix, i)) for i, item in enumerate(items)]
        with self._lock:
            if key is not None:  # made meanwhile by a request that was in flight
                earlier = self._replay(who, key, mark)
                if earlier is not None:
                    return earlier
            self._sync()
            for tenant in sorted({s.tenant for s in specs}):
                self._known_tenant(who, tenant, specs, prefix)
            ids, resolved = self._draw(who, specs, prefix)
            charges = [self._charge_of(s) for s in specs]
            for i, (spec, charge) in enumerate(zip(specs, charges, strict=True)):
                record = self.tenants.get(spec.tenant)
                quota = record.quota if record is not None else {}
                over = self._ledger.check(
                    spec.tenant, quota, charge.amount, charge.candidates, charges[:i]
                )
                if over is not None:
                    field = self._where(prefix, i) + "resources.accelerators"
                    raise ApiError(422, "over_quota", over.message(), field)
            self._push(extra={s.tenant for s in specs})
            for attempt in range(ID_TRIES):  # nothing is stored by a failed try
                finals = [s.model_copy(update={"inputs": i}) if i else s
                          for s, i in zip(specs, resolved, strict=True)]  # fmt: skip
                now = self.clock.now()
                kept = None
                if key is not None:
                    kept = IdempotencyRecord(who.tenant, key, mark, tuple(ids), now)
                try:
                    self.port.submit_all(list(zip(finals, ids, strict=True)), kept,
                                         now - KEY_KEEP_S)  # fmt: skip
                except JobRejectedError as exc:
                    raise invalid(str(exc)) from None
                except JobExistsError as exc:  # a drawn id met an earlier job's: draw again
                    if attempt + 1 == ID_TRIES:
                        raise conflict(str(exc)) from None
                    ids, resolved = self._draw(who, specs, prefix)
                    continue
                except StoreError as exc:
                    raise conflict(str(exc)) from None
                break
            for jid, charge in zip(ids, charges, strict=True):
                self._ledger.charge(jid, charge)
            return Admitted([self.port.store.get(jid) for jid in ids])

    def _draw(
        self, who: Principal, specs: list[JobSpec], prefix: str | None
    ) -> tuple[list[str], list[dict[str, str]]]:
        """Fresh ids for ``specs`` and each one's inputs resolved with them (a job may
        consume one earlier in the same batch, by its new id)."""
        ids = [f"{s.name}-{uuid.uuid4().hex[:8]}" for s in specs]
        resolved = [
            self._inputs(who, s, specs[:i], ids[:i], specs[i + 1 :], self._where(prefix, i))
            for i, s in enumerate(specs)
        ]
        return ids, resolved

    def _replay(self, who: Principal, key: str, mark: str) -> Admitted | None:
        """The jobs an earlier request made under ``key`` (of the principal's tenant,
        within :data:`KEY_KEEP_S`), or None; 409 if that request had another body."""
        found = self.port.store.idempotency(who.tenant, key, self.clock.now() - KEY_KEEP_S)
        if found is None:
            return None
        if found.fingerprint != mark:
            raise ApiError(
                409, "conflict",
                f"{KEY_HEADER} {short_repr(key)} was used by an earlier request with another "
                f"body (jobs {', '.join(found.jobs)}); use a new key for a new request",
                KEY_HEADER,
            )  # fmt: skip
        try:
            return Admitted([self.port.store.get(jid) for jid in found.jobs], replayed=True)
        except StoreError as exc:
            raise conflict(f"{KEY_HEADER} {short_repr(key)}: {exc}") from None

    def committed(self, tenant: str) -> dict[str, float]:
        """What the tenant's live jobs count against its quota, per model and ``*``."""
        with self._lock:
            self._sync()
            return self._ledger.use(tenant)

    def live_tenants(self) -> set[str]:
        """The tenants of live jobs."""
        with self._lock:
            self._sync()
            return self._ledger.tenants()

    def tenants_changed(self) -> None:
        """The tenant table changed: tell the scheduler."""
        with self._lock:
            self._push()

    # ----- steps --------------------------------------------------------------------
    def _split(self, data: Any) -> tuple[list[Any], str | None]:
        if isinstance(data, dict) and set(data) == {"jobs"}:
            items = data["jobs"]
            if not isinstance(items, list) or not 1 <= len(items) <= self.max_batch:
                raise invalid(f"jobs: a list of 1 to {self.max_batch} job specs", "jobs")
            return items, "jobs"
        if isinstance(data, dict):
            return [data], None
        raise invalid('the body is a job spec (an object) or {"jobs": [...]}')

    @staticmethod
    def _where(prefix: str | None, i: int) -> str:
        return f"{prefix}[{i}]." if prefix else ""

    def _spec(self, who: Principal, item: Any, where: str) -> JobSpec:
        if not isinstance(item, dict):
            raise invalid("a job spec is an object", where.rstrip(".") or None)
        given = item.get("tenant")
        if given is not None and given != who.tenant and not who.admin:
            raise forbidden(
                f"a {who.role.value} token of tenant {who.tenant} submits jobs of its own "
                f"tenant only (got {short_repr(given)})",
                f"{where}tenant",
            )
        if given is None:
            item = {**item, "tenant": who.tenant}
        try:
            spec = JobSpec.model_validate(item)
        except ValidationError as exc:
            issues = validation_issues(exc, item, None, JobSpec)
            texts = [_issue_text(where, i) for i in issues[:MAX_ISSUES]]
            more = len(issues) - MAX_ISSUES
            raise invalid(
                "; ".join(texts) + (f"; and {more} more" if more > 0 else ""),
                (where + issues[0].path).rstrip(".") or None,
            ) from None
        never = rejection(spec, self.topology)
        if never is not None:
            raise invalid(
                f"job {spec.name}: {never.key} = {short_repr(never.value)}: {never.message}",
                f"{where}{never.key}",
            )
        return spec

    def _known_tenant(
        self, who: Principal, tenant: str, specs: list[JobSpec], prefix: str | None
    ) -> None:
        if self.tenants.get(tenant) is not None:
            return
        if tenant == who.tenant:  # a token's tenant exists (registered with the token)
            self.tenants.ensure(tenant, self.clock.now())
            return
        i = next(i for i, s in enumerate(specs) if s.tenant == tenant)
        known = ", ".join(sorted(self.tenants.all())) or "none"
        raise invalid(
            f"unknown tenant {tenant!r}: create it with PUT /api/v1/tenants/{tenant} "
            f"(known: {known})",
            f"{self._where(prefix, i)}tenant",
        )

    def _inputs(
        self,
        who: Principal,
        spec: JobSpec,
        before: list[JobSpec],
        before_ids: list[str],
        after: list[JobSpec],
        where: str,
    ) -> dict[str, str]:
        """Each input as a job id: an earlier job of this request (by name), or a job of
        the store: by id, one the principal may see; by name, the last of that name of the
        spec's tenant (another tenant's job, by id or name, is answered as no job at all)."""
        out: dict[str, str] = {}
        earlier = {s.name: jid for s, jid in zip(before, before_ids, strict=True)}
        later = {s.name for s in after}
        store = self.port.store
        for alias, ref in spec.inputs.items():
            if ref in earlier:
                out[alias] = earlier[ref]
                continue
            if ref in later:
                raise invalid(
                    f"inputs.{alias} = {ref!r}: job {ref} comes later in this request; "
                    "list it before the jobs that consume it",
                    f"{where}inputs.{alias}",
                )
            rec: JobRecord | None
            try:
                rec = store.get(ref)
            except StoreError:
                rec = store.latest_named(ref, spec.tenant)
            if rec is None or (not who.admin and rec.spec.tenant != spec.tenant):
                raise invalid(
                    f"inputs.{alias} = {ref!r}: no job of tenant {spec.tenant} has that id or name",
                    f"{where}inputs.{alias}",
                )
            out[alias] = rec.id
        return out

    def _charge_of(self, spec: JobSpec) -> Charge:
        acc = spec.resources.accelerators
        models = dict.fromkeys(c.model.name for c in eligible_classes(spec, self.topology))
        return Charge(spec.tenant, acc.count * acc.share, tuple(models))

    def _sync(self) -> None:
        """Follow the event log since the last look (under the lock)."""
        devices = self.port.fabric.devices
        for ev in self.port.store.events_since(self._seq, _FOLLOWED):
            self._seq = max(self._seq, ev.seq)
            if ev.job is None:
                continue
            if ev.kind == "job:starting":
                first = ev.detail.removeprefix("placed on ").split(",")[0].strip()
                if first in devices:
                    self._ledger.place(ev.job, devices[first].model.name)
            elif ev.kind == "job:admitted":
                self._ledger.unplace(ev.job)
            else:
                self._ledger.release(ev.job)

    def _push(self, extra: set[str] | None = None) -> None:
        """Give the scheduler the tenants (under the lock): none while every tenant is
        plain (weight 1, no quota), else all of them, with the tenants of live jobs."""
        registered: Mapping[str, TenantRecord] = self.tenants.all()
        wanted: dict[str, Tenant] = {}
        if any(not r.plain for r in registered.values()):
            wanted = {name: r.tenant() for name, r in registered.items()}
            for name in self._ledger.tenants() | (extra or set()):
                wanted.setdefault(name, Tenant(name))
        if wanted != self._pushed:
            self.port.set_tenants(wanted)
            self._pushed = wanted
