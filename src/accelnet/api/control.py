"""Tenants and quotas, the scheduling policy, the cluster event log and the audit log.

Events a non-admin may see: its tenant's jobs' events, and the events of no job (device
states, health, remediation) with their detail cut to the part before the first ``": "``
(``h100box/gpu0``): the rest may name other tenants' jobs.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Iterable
from dataclasses import dataclass

from accelnet.api.admission import Admission
from accelnet.api.audit import AuditLog
from accelnet.api.errors import invalid
from accelnet.api.models import (
    AuditEntryOut,
    AuditOut,
    EventOut,
    EventsOut,
    PolicyIn,
    PolicyOut,
    TenantIn,
    TenantOut,
)
from accelnet.api.port import ClusterPort
from accelnet.api.redact import public_text
from accelnet.api.tenants import TenantRecord, Tenants
from accelnet.api.tokens import Principal
from accelnet.fabric.catalog import find_device_model
from accelnet.runtime.clock import Clock
from accelnet.runtime.control.store import JobRecord
from accelnet.sched import JobState
from accelnet.sched.placement import PLACEMENTS
from accelnet.sched.policies import POLICY_NAMES, QUEUE_POLICIES, make_scheduler
from accelnet.sched.rounds import RoundScheduler

_HOLDING = (JobState.STARTING, JobState.RUNNING, JobState.PREEMPTING)
DEFAULT_ROUND_S = 360.0


@dataclass(frozen=True, slots=True)
class PolicyState:
    """The policy in force: its name, placement, round length, reservation wait and
    re-allocation interval."""

    policy: str
    placement: str
    round_s: float | None
    reserve_after_s: float | None = None
    min_reallocation_s: float | None = None


def policy_of(name: str, port: ClusterPort) -> PolicyState:
    """The state of the scheduler ``port`` runs, which was made as policy ``name``."""
    s = port.scheduler()
    if isinstance(s, RoundScheduler):
        return PolicyState(name, getattr(s.placement, "name", "?"), s.round_s, None,
                           s.min_reallocation_s)  # fmt: skip
    return PolicyState(name, getattr(s.placement, "name", "?"), None, s.reserve_after_s)


def devices_held(records: Iterable[JobRecord]) -> dict[str, dict[str, float]]:
    """Devices the jobs among ``records`` that hold some (starting, running, being stopped)
    hold, per tenant and model (a packed job's share counted as such)."""
    out: dict[str, dict[str, float]] = {}
    for rec in records:
        p = rec.placement
        if not rec.state.holds_devices() or p is None:
            continue
        mine = out.setdefault(rec.spec.tenant, {})
        mine[p.model] = mine.get(p.model, 0.0) + len(p.devices) * p.share
    return out


class ControlService:
    """Tenants, policy, events and audit."""

    def __init__(
        self,
        port: ClusterPort,
        tenants: Tenants,
        admission: Admission,
        audit: AuditLog,
        clock: Clock,
        policy: str,
        min_reallocation_s: float = 0.0,
    ) -> None:
        self.port = port
        self.tenants = tenants
        self.admission = admission
        self.audit_log = audit
        self.clock = clock
        self._policy = policy_of(policy, port)
        self._reserve_after_s = self._policy.reserve_after_s  # the server's (--reserve-after)
        # the server's re-allocation interval (--min-reallocation-s), for round policies
        self._realloc_s = min_reallocation_s or self._policy.min_reallocation_s or 0.0
        self._policy_lock = threading.Lock()  # one change at a time

    # ----- tenants --------------------------------------------------------------------
    def usage(self) -> dict[str, dict[str, float]]:
        """Devices each tenant's running jobs hold, per model and ``*``."""
        out = devices_held(self.port.store.jobs(_HOLDING))
        for mine in out.values():
            mine["*"] = sum(mine.values())
        return out

    def tenant_out(self, record: TenantRecord, usage: dict[str, dict[str, float]]) -> TenantOut:
        """A tenant with what it uses."""
        return TenantOut(
            name=record.name, weight=record.weight, quota=dict(record.quota),
            usage=usage.get(record.name, {}), committed=self.admission.committed(record.name),
        )  # fmt: skip

    def list_tenants(self, who: Principal) -> list[TenantOut]:
        """Every tenant (with those of live jobs); a non-admin's own only."""
        known = self.tenants.reload()
        for name in self.admission.live_tenants() | {who.tenant}:
            known.setdefault(name, TenantRecord(name))
        usage = self.usage()
        names = sorted(known) if who.admin else [who.tenant]
        return [self.tenant_out(known[n], usage) for n in names]

    def put_tenant(self, name: str, body: TenantIn) -> TenantOut:
        """Create or change a tenant; quota keys must name device models (or ``*``)."""
        old = self.tenants.get(name) or TenantRecord(name)
        quota = dict(old.quota) if body.quota is None else dict(body.quota)
        here = sorted({d.model.name for d in self.port.fabric.devices.values()})
        for key, value in quota.items():
            if key != "*" and find_device_model(key) is None and key not in here:
                raise invalid(
                    f"quota key {key!r} is not a device model; models here: {', '.join(here)} "
                    "(or '*' for all models)",
                    f"quota.{key}",
                )
            if not (math.isfinite(value) and value >= 0):
                raise invalid(f"quota {key} = {value}: a number of devices >= 0", f"quota.{key}")
        weight = old.weight if body.weight is None else body.weight
        record = self.tenants.put(TenantRecord(name, weight, quota), self.clock.now())
        self.admission.tenants_changed()
        return self.tenant_out(record, self.usage())

    # ----- policy ---------------------------------------------------------------------
    def policy(self) -> PolicyOut:
        """The policy in force."""
        p = self._policy
        return PolicyOut(policy=p.policy, placement=p.placement, round_s=p.round_s,
                         reserve_after_s=p.reserve_after_s,
                         min_reallocation_s=p.min_reallocation_s, policies=list(POLICY_NAMES),
                         placements=list(PLACEMENTS))  # fmt: skip

    def set_policy(self, body: PolicyIn) -> PolicyOut:
        """Decide with another policy from now on (422 naming the field for unknown names)."""
        if body.policy not in POLICY_NAMES:
            raise invalid(
                f"unknown policy {body.policy!r}; known: {', '.join(POLICY_NAMES)}", "policy"
            )
        if body.placement is not None and body.placement not in PLACEMENTS:
            raise invalid(
                f"unknown placement {body.placement!r}; known: {', '.join(PLACEMENTS)}",
                "placement",
            )
        queue = body.policy in QUEUE_POLICIES
        if queue and body.min_reallocation_s:
            raise invalid(
                f"min_reallocation_s applies to the round policies, not to {body.policy!r}",
                "min_reallocation_s",
            )
        with self._policy_lock:
            round_s = body.round_s or self._policy.round_s or DEFAULT_ROUND_S
            # the server's reservation wait (--reserve-after) carries over to a queue policy,
            # the re-allocation interval (--min-reallocation-s) to a round policy
            reserve = self._reserve_after_s if queue else None
            realloc = body.min_reallocation_s
            if realloc is None:
                realloc = 0.0 if queue else self._realloc_s
            scheduler = make_scheduler(body.policy, round_s=round_s, placement=body.placement,
                                       reserve_after_s=reserve,
                                       min_reallocation_s=realloc)  # fmt: skip
            self.port.set_scheduler(scheduler)
            self._policy = policy_of(body.policy, self.port)
            return self.policy()

    # ----- events ---------------------------------------------------------------------
    def events(self, who: Principal, since: int, limit: int) -> EventsOut:
        """Cluster events after ``since`` that ``who`` may see, at most ``limit``;
        ``next`` is the last event looked at (hidden ones included). Read with
        :meth:`~accelnet.runtime.control.store.Store.events_page` (from the store's indexes: the
        tenant's events and the devices', never the others')."""
        found, last = self.port.store.events_page(since, limit, None if who.admin else who.tenant)
        out = [
            EventOut(seq=ev.seq, at=ev.at, job=ev.job, kind=ev.kind,
                     detail=public_text(ev.detail if who.admin or ev.job
                                        else ev.detail.split(": ", 1)[0]) or "")
            for ev in found
        ]  # fmt: skip
        return EventsOut(events=out, next=last)

    # ----- audit ----------------------------------------------------------------------
    def audit(self, since: int, limit: int) -> AuditOut:
        """Audit entries after ``since``."""
        entries = self.audit_log.since(since, limit)
        return AuditOut(
            entries=[AuditEntryOut(seq=e.seq, at=e.at, token_id=e.token_id, tenant=e.tenant,
                                   role=e.role, method=e.method, path=e.path, status=e.status,
                                   detail=e.detail) for e in entries],
            next=entries[-1].seq if entries else since,
        )  # fmt: skip
