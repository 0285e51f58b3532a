"""Everything the API's routes use, made once per server: :class:`ApiContext`."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from importlib.metadata import PackageNotFoundError, version

import anyio

from accelnet.api.admission import Admission
from accelnet.api.audit import MAX_ROWS, RETENTION_DAYS, AuditLog, RefusalSampler
from accelnet.api.control import ControlService
from accelnet.api.db import ApiDb
from accelnet.api.devices import DeviceService
from accelnet.api.jobs import JobService, JobTenants
from accelnet.api.limits import RateLimiter
from accelnet.api.port import ClusterPort
from accelnet.api.request_counts import RequestCounts
from accelnet.api.services import ServiceManager
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
    min_reallocation_s: float = 0.0  # the round policies' re-allocation interval (serve's)
    anon_rate: float = 10.0  # requests per second per client address without a valid token
    anon_burst: int = 100  # such requests at once per address (<= 0 rate: no limit)
    per_sender: int = 2  # requests of one token (or address) worked on at once (<= 0: any)
    audit_retention_s: float = RETENTION_DAYS * 86400  # audit entries kept (<= 0: forever)
    audit_max_rows: int = MAX_ROWS  # audit entries kept at most (<= 0: no bound)


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
    anon_limiter: RateLimiter
    admission: Admission
    jobs: JobService
    devices: DeviceService
    control: ControlService
    services: ServiceManager
    requests: RequestCounts = field(default_factory=RequestCounts)  # for /metrics
    version: str = field(default_factory=accelnet_version)
    stopping: Callable[[], bool] = lambda: False
    pause: Callable[[float], Awaitable[None]] = anyio.sleep


def build_context(
    port: ClusterPort, db: ApiDb, clock: Clock, settings: ApiSettings | None = None
) -> ApiContext:
    """Wire the services (reads the tenants, follows the store for quotas)."""
    settings = settings or ApiSettings()
    tenants = Tenants(db)
    audit = AuditLog(db, RefusalSampler(clock))
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
        anon_limiter=RateLimiter(settings.anon_rate, settings.anon_burst, clock),
        admission=admission,
        jobs=JobService(port, admission, job_tenants),
        devices=DeviceService(port, job_tenants, settings.op_wait_s),
        control=ControlService(
            port, tenants, admission, audit, clock, settings.policy, settings.min_reallocation_s
        ),
        services=ServiceManager(port, db, tenants, clock),
    )
