"""``/metrics``: the Prometheus exporter (:mod:`accelnet.monitor`) over the served cluster.

Each scrape copies what it needs (jobs from the store, devices with their latest samples
and health, the links the running jobs' rings load as the communication model prices them,
the scheduler's decision times) and renders outside any lock. Open to anyone who can reach
the server unless ``--metrics-token`` is set: then a scrape needs that bearer token
(Prometheus' ``authorization`` setting).
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterable, Sequence
from dataclasses import replace
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import PlainTextResponse, Response

from accelnet.api.audit import client_address
from accelnet.api.context import ApiContext
from accelnet.api.control import devices_held
from accelnet.api.limits import ANON_SPENT, retry_after
from accelnet.comm import Communicator, CostModel
from accelnet.comm.contention import CommJob, link_shares
from accelnet.monitor.source import (
    Accounting,
    DeviceInfo,
    DeviceJob,
    JobInfo,
    LinkUse,
    ServiceInfo,
    Snapshot,
    TenantUse,
    device_info,
    job_info,
    link_uses,
)
from accelnet.monitor.timing import HistogramSnapshot
from accelnet.runtime.control.store import JobRecord
from accelnet.sched import JobState
from accelnet.sched.scheduler import canonical_quota

_RUNNING = (JobState.STARTING, JobState.RUNNING)


class ClusterMetrics:
    """A :class:`~accelnet.monitor.source.MetricsSource` over the served cluster.
    ``named``: whether the series name jobs and services (only when a scrape needs the
    metrics token: an open ``/metrics`` would tell every tenant the others' job ids and
    service names, which the API shows a tenant only of its own). Otherwise
    ``accelnet_device_job``'s job label is empty (one series per device and tenant, valued at
    the tenant's share of the device) and each service is named by a digest of its tenant
    and name (``svc-1a2b3c4d5e``: stable, distinct, not the name)."""

    def __init__(
        self, ctx: ApiContext, model: CostModel | None = None, named: bool = False
    ) -> None:
        self.ctx = ctx
        self.model = model or CostModel()
        self.named = named

    def snapshot(self) -> Snapshot:
        """Everything one scrape exports, copied now."""
        port = self.ctx.port
        records = port.store.jobs()
        return Snapshot(
            [job_info(r) for r in records],
            list(self._devices()),
            self._links(r for r in records if r.state in _RUNNING),
            self._decisions(),
            [s.info() if self.named else _unnamed(s.info()) for s in self._services()],
            self._waits(),
            self._accounting(records),
        )

    def _accounting(self, records: Sequence[JobRecord]) -> Accounting:
        tally = getattr(self._controller(), "attempts", None)
        quotas = {(name, model): float(limit)
                  for name, rec in self.ctx.tenants.all().items()
                  for model, limit in canonical_quota(rec.quota).items()}  # fmt: skip
        on_devices = [DeviceJob(d, r.id, r.spec.tenant, r.placement.share) for r in records
                      if r.state.holds_devices() and r.placement is not None
                      for d in r.placement.devices]  # fmt: skip
        if not self.named:  # no job ids for whoever can reach an open /metrics
            shares: dict[tuple[str, str], float] = {}
            for dj in on_devices:
                shares[dj.device, dj.tenant] = shares.get((dj.device, dj.tenant), 0.0) + dj.share
            on_devices = [DeviceJob(d, "", t, v) for (d, t), v in sorted(shares.items())]
        return Accounting(
            usage=tenant_usage(records),
            quotas=quotas,
            attempts=tally.counts() if tally is not None else {},
            run_times=tally.run.snapshot() if tally is not None else {},
            device_jobs=on_devices,
            api_requests=self.ctx.requests.snapshot(),
        )

    def _devices(self) -> Iterable[DeviceInfo]:
        fabric = self.ctx.port.fabric
        for row in self.ctx.port.devices():
            dev = fabric.devices.get(row.device)
            if dev is None:
                continue
            yield device_info(dev, row.state, sample=row.sample, health=row.health.value)

    def _links(self, running: Iterable[JobRecord]) -> list[LinkUse]:
        fabric = self.ctx.port.fabric
        jobs = []
        for rec in running:
            nbytes = rec.spec.workload.bytes_per_step
            if rec.placement is None or len(rec.placement.devices) < 2 or not nbytes:
                continue
            jobs.append(CommJob(rec.id, Communicator(fabric, rec.placement.devices), nbytes))
        return link_uses(link_shares(self.model, jobs)) if jobs else []

    def _services(self) -> list[Any]:
        services = getattr(self.ctx.port, "services", None)  # ports without services: none
        return list(services()) if services is not None else []

    def _controller(self) -> Any:
        return getattr(getattr(self.ctx.port, "cluster", None), "controller", None)

    def _decisions(self) -> HistogramSnapshot | None:
        timer = getattr(self._controller(), "decision_timer", None)
        return timer.snapshot() if timer is not None else None

    def _waits(self) -> dict[str, HistogramSnapshot]:
        waits = getattr(self._controller(), "queue_waits", None)
        return waits.snapshot() if waits is not None else {}


def _unnamed(info: ServiceInfo) -> ServiceInfo:
    """``info`` under a digest of its tenant and name (see :class:`ClusterMetrics`)."""
    digest = hashlib.sha256(f"{info.tenant}/{info.name}".encode()).hexdigest()[:10]
    return replace(info, name=f"svc-{digest}")


def tenant_usage(records: Sequence[JobRecord]) -> list[TenantUse]:
    """Per tenant and model: the devices held now, and the device-seconds of the ended
    attempts (from the store: a counter that only grows, restarts included; a running
    attempt is added when it ends, as the store records it)."""
    held = {(t, m): n for t, per in devices_held(records).items() for m, n in per.items()}
    used: dict[tuple[str, str], float] = {}
    for rec in records:
        for model, seconds in rec.attained:
            used[rec.spec.tenant, model] = used.get((rec.spec.tenant, model), 0.0) + seconds
    return [TenantUse(t, m, held.get((t, m), 0.0), used.get((t, m), 0.0))
            for t, m in sorted(held.keys() | used.keys())]  # fmt: skip


def mount_metrics(app: FastAPI, ctx: ApiContext, token: str | None = None) -> None:
    """Serve ``GET /metrics`` (outside the API's auth; ``token``: the bearer a scrape
    must carry, if any). Kept out of the OpenAPI document."""
    from accelnet.monitor import CONTENT_TYPE, exposition, make_registry  # noqa: PLC0415

    source = ClusterMetrics(ctx, named=token is not None)

    @app.get("/metrics", include_in_schema=False)
    def metrics(request: Request) -> Response:
        if token is not None:
            given = request.headers.get("authorization", "")
            if not hmac.compare_digest(given.encode(), f"Bearer {token}".encode()):
                wait = 0.0
                if not getattr(request.state, ANON_SPENT, False):  # a wrong token: counted
                    wait = ctx.anon_limiter.take(client_address(request.scope))
                if wait > 0:
                    return PlainTextResponse(
                        "too many requests without the scrape token\n",
                        status_code=429,
                        headers={"Retry-After": retry_after(wait)},
                    )
                return PlainTextResponse("metrics need the scrape token\n", status_code=401)
        registry = make_registry(source.snapshot())
        return Response(exposition(registry), media_type=CONTENT_TYPE)


__all__ = ["ClusterMetrics", "JobInfo", "mount_metrics"]
