"""Everything the API's routes use, made once per server: :class:`ApiContext`."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError, version

import anyio

from accelnet.api.admission import Admission
from accelnet.api.audit import AuditLog
from accelnet.api.control import ControlService
from accelnet.api.db import ApiDb
from accelnet.api.devices import DeviceService
from accelnet.api.jobs import JobService, JobTenants
from accelnet.api.limits import RateLimiter
from accelnet.api.port import ClusterPort
from accelnet.api.tenants import Tenants
from accelnet.api.tokens import Tokens
from accelnet.runtime.clock import Clock


def accelnet_version() -> str:
    """The installed package's version."""
    try:
        return version("accelnet")
    except PackageNotFoundError:  # pragma: no cover - run from a source tree
        return "0+unknown"


@dataclass(frozen=True, slots=True)
class ApiSettings:
    """The knobs of ``accelnet serve`` that the API itself uses."""

    max_body: int = 1 << 20  # bytes of a request body (413 beyond)
    rate: float = 50.0  # requests per second per token (<= 0: no limit)
    burst: int = 100  # requests at once per token
    max_batch: int = 1000  # jobs in one submission
    op_wait_s: float = 10.0  # how long a device operation is waited for (then 202, pending)
    poll_s: float = 0.25  # how often streams look for news
    keepalive_s: float = 15.0  # a comment line on an idle event stream
    policy: str = "fifo"  # the name of the policy the cluster was started with


@dataclass
class ApiContext:
    """The services over one cluster and one API database.

    ``stopping`` says whether the server is shutting down (streams end then); ``pause``
    waits between a stream's looks (an injected sleep, for tests)."""

    port: ClusterPort
    db: ApiDb
    clock: Clock
    settings: ApiSettings
    tokens: Tokens
    tenants: Tenants
    audit: AuditLog
    limiter: RateLimiter
    admission: Admission
    jobs: JobService
    devices: DeviceService
    control: ControlService
    version: str = field(default_factory=accelnet_version)
    stopping: Callable[[], bool] = lambda: False
    pause: Callable[[float], Awaitable[None]] = anyio.sleep


def build_context(
    port: ClusterPort, db: ApiDb, clock: Clock, settings: ApiSettings | None = None
) -> ApiContext:
    """Wire the services (reads the tenants, follows the store for quotas)."""
    settings = settings or ApiSettings()
    tenants = Tenants(db)
    audit = AuditLog(db)
    admission = Admission(port, tenants, clock, settings.max_batch)
    job_tenants = JobTenants(port)
    return ApiContext(
        port=port,
        db=db,
        clock=clock,
        settings=settings,
        tokens=Tokens(db),
        tenants=tenants,
        audit=audit,
        limiter=RateLimiter(settings.rate, settings.burst, clock),
        admission=admission,
        jobs=JobService(port, admission, job_tenants),
        devices=DeviceService(port, job_tenants, settings.op_wait_s),
        control=ControlService(
            port, tenants, admission, job_tenants, audit, clock, settings.policy
        ),
    )
