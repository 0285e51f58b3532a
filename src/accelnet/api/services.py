"""``/api/v1/services``: a tenant's long-running services (:mod:`accelnet.serve`).

A service is created from a :class:`~accelnet.serve.spec.ServiceSpec` (JSON), for the
token's tenant (an admin may name another); its replicas are jobs of that tenant, so the
tenant's quota, weight and priority apply to them as to any job, and its tasks run as the
tenant's user. The spec is checked as a job is (the key path of a bad value; whether the
fabric can ever run a replica) before anything starts. A tenant sees, updates and stops its
own services only (another tenant's is "not found", as its jobs are); an admin sees all.
A tenant runs at most ``max_per_tenant`` services.

The specs are kept in the API's tables (``api_services``), so a server restarted on the
same ``--db`` serves them again (:meth:`ServiceManager.restore`): the replica jobs the
stopped server left are cancelled and new ones started.
"""

from __future__ import annotations

import json
import threading
from typing import Any

from pydantic import ValidationError

from accelnet.api.admission import parse_json
from accelnet.api.db import ApiDb
from accelnet.api.errors import ApiError, conflict, forbidden, invalid, not_found
from accelnet.api.models import ServiceOut
from accelnet.api.port import ClusterPort
from accelnet.api.tenants import Tenants
from accelnet.api.tokens import Principal
from accelnet.runtime.clock import Clock
from accelnet.sched.request import rejection
from accelnet.sched.topology import Topology
from accelnet.serve.spec import ServiceSpec
from accelnet.specio import short_repr, validation_issues

MAX_PER_TENANT = 16
MAX_EVENTS = 50  # the latest events a service's answer lists


class ServiceManager:
    """See the module docstring. Thread-safe (one lock around creation and removal)."""

    def __init__(
        self,
        port: ClusterPort,
        db: ApiDb,
        tenants: Tenants,
        clock: Clock,
        max_per_tenant: int = MAX_PER_TENANT,
    ) -> None:
        self.port = port
        self.db = db
        self.tenants = tenants
        self.clock = clock
        self.max_per_tenant = max_per_tenant
        self.topology = Topology(port.fabric)
        self._lock = threading.Lock()
        db.write(
            "CREATE TABLE IF NOT EXISTS api_services (tenant TEXT NOT NULL, name TEXT NOT NULL, "
            "spec TEXT NOT NULL, created_at REAL NOT NULL, PRIMARY KEY (tenant, name))"
        )

    # ----- requests -----------------------------------------------------------------------
    def create(self, who: Principal, raw: bytes) -> ServiceOut:
        """Start a service; 201's body. 422 for a bad spec, 409 if the tenant runs one of
        that name, 422 ``too_many`` past the tenant's limit."""
        spec = self._spec(who, parse_json(raw))
        with self._lock:
            mine = [s for s in self.port.services() if s.spec.tenant == spec.tenant]
            if any(s.spec.name == spec.name for s in mine):
                raise conflict(f"tenant {spec.tenant} runs a service named {spec.name} already: "
                               f"PUT /api/v1/services/{spec.name} updates it")  # fmt: skip
            if len(mine) >= self.max_per_tenant:
                raise ApiError(422, "too_many", f"tenant {spec.tenant} runs {len(mine)} "
                               f"services, the most a tenant may (stop one first)")  # fmt: skip
            self._known_tenant(who, spec.tenant)
            service = self.port.serve(spec)
            self.db.write(
                "INSERT OR REPLACE INTO api_services(tenant, name, spec, created_at) "
                "VALUES(?, ?, ?, ?)",
                (spec.tenant, spec.name, spec.model_dump_json(), self.clock.now()),
            )
        return describe(service)

    def visible(self, who: Principal) -> list[ServiceOut]:
        """The caller's tenant's services (an admin: every tenant's)."""
        return [describe(s) for s in self.port.services() if who.admin or
                s.spec.tenant == who.tenant]  # fmt: skip

    def get(self, who: Principal, name: str, tenant: str | None) -> ServiceOut:
        """One service; 404 if the caller's tenant has none of that name."""
        return describe(self._find(who, name, tenant))

    def update(self, who: Principal, name: str, tenant: str | None, raw: bytes) -> ServiceOut:
        """Roll the service onto a new spec (same name and tenant): new replicas start, old
        ones leave once new ones are ready; no request is cut."""
        service = self._find(who, name, tenant)
        data = parse_json(raw)
        if isinstance(data, dict):
            data.setdefault("name", name)
            data.setdefault("tenant", service.spec.tenant)
        spec = self._spec(who, data)
        if spec.name != name or spec.tenant != service.spec.tenant:
            raise invalid(f"an update keeps the service's name and tenant "
                          f"({service.spec.tenant}/{name})", "name")  # fmt: skip
        service.update(spec)
        self.db.write("UPDATE api_services SET spec = ? WHERE tenant = ? AND name = ?",
                      (spec.model_dump_json(), spec.tenant, spec.name))  # fmt: skip
        return describe(service)

    def delete(self, who: Principal, name: str, tenant: str | None) -> ServiceOut:
        """Stop a service: its router closes and its replica jobs are cancelled."""
        service = self._find(who, name, tenant)
        with self._lock:
            out = describe(service)
            self.db.write("DELETE FROM api_services WHERE tenant = ? AND name = ?",
                          (service.spec.tenant, service.spec.name))  # fmt: skip
            service.close()
        return out.model_copy(update={"state": "stopped"})

    def restore(self) -> list[str]:
        """Serve again the services kept in the tables (a restarted server); a note for
        each one that cannot be (its spec no longer valid here: kept, not served)."""
        notes = []
        for tenant, name, text in self.db.query(
            "SELECT tenant, name, spec FROM api_services ORDER BY created_at"
        ):
            try:
                spec = ServiceSpec.model_validate(json.loads(text))
                never = rejection(spec.replica(0, None, 65535), self.topology)
                if never is not None:
                    raise ValueError(f"{never.key}: {never.message}")
                self.port.serve(spec)
            except (ValueError, ValidationError) as exc:
                notes.append(f"service {tenant}/{name} not served: {exc}")
        return notes

    # ----- checks -------------------------------------------------------------------------
    def _spec(self, who: Principal, data: Any) -> ServiceSpec:
        if not isinstance(data, dict):
            raise invalid("a service spec is an object")
        given = data.get("tenant")
        if given is not None and given != who.tenant and not who.admin:
            raise forbidden(f"a {who.role.value} token of tenant {who.tenant} runs services "
                            f"of its own tenant only (got {short_repr(given)})",
                            "tenant")  # fmt: skip
        if given is None:
            data = {**data, "tenant": who.tenant}
        try:
            spec = ServiceSpec.model_validate(data)
        except ValidationError as exc:
            issues = validation_issues(exc, data, None, ServiceSpec)
            first = issues[0]
            texts = [f"{i.path}: {i.message}" if i.value is None else
                     f"{i.path} = {short_repr(i.value)}: "
                     f"{i.message.removeprefix(short_repr(i.value) + ': ')}"
                     for i in issues[:10]]  # fmt: skip
            raise invalid("; ".join(texts), first.path.rstrip(".") or None) from None
        try:
            replica = spec.replica(0, None, 65535)
        except ValidationError as exc:
            raise invalid(f"a replica of {spec.name} is no valid job: "
                          f"{exc.errors()[0]['msg']}")  from None  # fmt: skip
        never = rejection(replica, self.topology)
        if never is not None:
            raise invalid(f"service {spec.name}: {never.key} = {short_repr(never.value)}: "
                          f"{never.message}", never.key)  # fmt: skip
        return spec

    def _known_tenant(self, who: Principal, tenant: str) -> None:
        if self.tenants.get(tenant) is not None:
            return
        if tenant == who.tenant:
            self.tenants.ensure(tenant, self.clock.now())
            return
        known = ", ".join(sorted(self.tenants.all())) or "none"
        raise invalid(f"unknown tenant {tenant!r}: create it with PUT /api/v1/tenants/"
                      f"{tenant} (known: {known})", "tenant")  # fmt: skip

    def _find(self, who: Principal, name: str, tenant: str | None) -> Any:
        owner = tenant if (tenant is not None and who.admin) else who.tenant
        if tenant is not None and tenant != who.tenant and not who.admin:
            raise not_found(f"no service {name}")
        for s in self.port.services():
            if s.spec.name == name and s.spec.tenant == owner:
                return s
        raise not_found(f"no service {name}" + (f" of tenant {owner}" if who.admin else ""))


def describe(service: Any) -> ServiceOut:
    """A running :class:`~accelnet.serve.service.Service` as the API answers it."""
    spec: ServiceSpec = service.spec
    st = service.stats()
    replicas = [{"id": rid, **r} for rid, r in sorted(service.replicas().items())]
    now = service.now()
    events = [{"ago_s": max(0.0, now - at), "what": what, "detail": detail}
              for at, what, detail in service.events[-MAX_EVENTS:]]  # fmt: skip
    return ServiceOut.model_validate({
        "name": spec.name, "tenant": spec.tenant, "url": service.url, "state": "running",
        "version": service.version, "updating": service.updating(),
        "replicas": replicas, "ready": service.ready_count(),
        "min_replicas": spec.replicas.min, "max_replicas": spec.replicas.max,
        "goal_p95_ms": spec.goal.p95_ms,
        "stats": {"window_s": st.window_s, "requests": st.requests, "rate": st.rate,
                  "p50_ms": st.p50_ms, "p95_ms": st.p95_ms, "p99_ms": st.p99_ms,
                  "errors": st.errors, "rejected": st.rejected, "inflight": st.inflight,
                  "queued": st.queued},
        "events": events,
        "spec": json.loads(spec.model_dump_json()),
    })  # fmt: skip
