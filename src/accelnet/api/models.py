"""The API's request and response bodies (pydantic; they make the OpenAPI document).

Job specs themselves are :class:`accelnet.sched.JobSpec` (docs/job-spec.md); the submission
body is read and validated by :mod:`accelnet.api.admission`, so that errors name the key
path inside the request (``jobs[1].resources.accelerators``).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from accelnet.api.tokens import NAME_PATTERN
from accelnet.sched.placement import PLACEMENTS
from accelnet.sched.policies import POLICY_NAMES
from accelnet.sched.reasons import OutcomeCode, WaitCode
from accelnet.specio import StrictFloat, StrictInt


class _In(BaseModel):
    """Request bodies: unknown keys are errors."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class ErrorDetail(BaseModel):
    """What went wrong; ``field`` is the key path of the offending value, if one."""

    code: str = Field(description="invalid, unauthenticated, forbidden, not_found, conflict, "
                      "too_large, rate_limited, over_quota, internal")  # fmt: skip
    message: str
    field: str | None = None


class ErrorOut(BaseModel):
    """Every error response."""

    error: ErrorDetail


class Health(BaseModel):
    """``GET /healthz``."""

    status: Literal["ok", "degraded"]
    version: str
    controller: bool = Field(description="whether the controller thread runs")


class WhoAmI(BaseModel):
    """The caller's token (never its secret)."""

    token_id: str
    tenant: str
    role: Literal["viewer", "user", "admin"]
    name: str


class HostUseOut(BaseModel):
    """What a job holds of one host beside its devices."""

    host: str
    cpus: float = Field(description="CPU cores")
    memory_gb: float = Field(description="host memory, GB")


class JobOut(BaseModel):
    """A job as the API shows it."""

    id: str
    name: str
    tenant: str
    state: str = Field(description="pending, admitted, starting, running, preempting, "
                       "succeeded, failed, cancelled")  # fmt: skip
    submitted_at: float = Field(description="seconds since the epoch")
    started_at: float | None
    finished_at: float | None
    attempts: int = Field(description="launches so far")
    failures: int
    retry_at: float | None = Field(
        None, description="after a failure: when its next attempt may start (retry backoff)"
    )
    devices: list[str] = Field(description="where it runs (or ran last)")
    model: str | None = Field(description="the device model of those devices")
    share: float | None = Field(description="part of each device (1: whole)")
    hosts: list[HostUseOut] = Field(
        default_factory=list,
        description="CPU cores and host memory it holds on each host (jobs that ask for them; "
        "a CPU-only job's one host)",
    )
    reason: str | None = Field(description="why it waits (queued jobs only)")
    reason_code: WaitCode | None = Field(
        None,
        description="why it waits, as a code to branch on (queued jobs only; never_fits and "
        "unknown_tenant are unresolvable: waiting will not help); docs/api.md lists the codes",
    )
    error: str | None
    outcome_code: OutcomeCode | None = Field(
        None,
        description="how its latest attempt ended (its outcome once finished; null before an "
        "attempt has ended); docs/api.md lists the codes",
    )
    inputs: dict[str, str] = Field(description="alias -> id of each job it consumes")
    spec: dict[str, Any] = Field(description="the job spec (docs/job-spec.md)")


class JobsOut(BaseModel):
    """Jobs, newest first; ``next`` is the cursor of the following page (null: last)."""

    jobs: list[JobOut]
    next: str | None = None


class SubmittedOut(BaseModel):
    """The jobs a submission created, in the order given."""

    jobs: list[JobOut]


class EventOut(BaseModel):
    """One line of the event log."""

    seq: int
    at: float
    job: str | None
    kind: str = Field(description="job:<state>, device:<state>, health:*, remedy:*, ...")
    detail: str


class EventsOut(BaseModel):
    """Events, oldest first; ``next`` is the ``since`` to ask with for what follows."""

    events: list[EventOut]
    next: int


class AnswerOut(BaseModel):
    """The outcome of a device operation (probes: with their findings)."""

    ok: bool
    detail: str
    findings: list[dict[str, Any]] = []


class DeviceOut(BaseModel):
    """A device: lifecycle state, remediation phase, health, its jobs, latest telemetry
    (readings null when unknown)."""

    id: str
    host: str
    model: str
    kind: str
    state: str
    phase: str
    health: Literal["pass", "warn", "fail", "unknown"]
    failures: int
    jobs: list[str] = Field(description="jobs on it (for a non-admin: its tenant's only)")
    busy: bool = Field(description="whether any job holds (a share of) it")
    utilization_pct: float | None = None
    memory_used_bytes: float | None = None
    memory_total_bytes: float | None = None
    power_w: float | None = None
    temperature_c: float | None = None
    sampled_at: float | None = None
    findings: list[dict[str, Any]] = []


class DevicesOut(BaseModel):
    """Every device."""

    devices: list[DeviceOut]


class DeviceOpIn(_In):
    """Optional body of a device operation."""

    reason: str | None = Field(None, max_length=256, description="recorded with the change")
    level: StrictInt = Field(1, ge=1, le=2, description="probe level: 1 quick, 2 with stress")


class DeviceOpOut(DeviceOut):
    """The device after an operation, with its answer (null: still being carried out;
    watch the device or the event log)."""

    answer: AnswerOut | None = None


class TenantOut(BaseModel):
    """A tenant: weight, quota, and what it uses."""

    name: str
    weight: float
    quota: dict[str, float] = Field(description="devices per model; '*': all models")
    usage: dict[str, float] = Field(description="devices its running jobs hold, per model")
    committed: dict[str, float] = Field(
        description="what quotas are checked against: running and queued jobs, per model"
    )


class TenantsOut(BaseModel):
    """Tenants (a non-admin sees its own only)."""

    tenants: list[TenantOut]


class TenantIn(_In):
    """``PUT /api/v1/tenants/{name}``: what is given changes, the rest stays."""

    weight: StrictFloat | None = Field(None, gt=0, le=1e6, description="share under fair policies")
    quota: dict[str, StrictFloat] | None = Field(
        None, description="devices per model (catalog name or alias; '*': all models)"
    )


class PolicyOut(BaseModel):
    """The scheduling policy deciding now."""

    policy: str
    placement: str
    round_s: float | None = Field(description="round length of round-based policies")
    reserve_after_s: float | None = Field(
        None,
        description="a gang that waited this long has a domain held for it (queue policies; "
        "set with `accelnet serve --reserve-after`, kept across policy changes)",
    )
    min_reallocation_s: float | None = Field(
        None,
        description="a round policy re-solves its allocation only when the jobs or devices "
        "changed, at most once per this many s (0: at every round and change; round "
        "policies only)",
    )
    policies: list[str] = Field(description="the policies one may set")
    placements: list[str] = Field(description="the placement strategies one may set")


class PolicyIn(_In):
    """``PUT /api/v1/policy``: applies to decisions from now on."""

    policy: str = Field(json_schema_extra={"enum": list(POLICY_NAMES)})
    placement: str | None = Field(None, json_schema_extra={"enum": list(PLACEMENTS)})
    round_s: StrictFloat | None = Field(None, ge=1, le=86400, description="round-based policies")
    min_reallocation_s: StrictFloat | None = Field(
        None,
        ge=0,
        le=7 * 86400,
        description="round-based policies: re-solve the allocation at most once per this many "
        "s (Gavel: 1920; 0: whenever the jobs change); default: the server's "
        "--min-reallocation-s",
    )


class AuditEntryOut(BaseModel):
    """One audited call: who (token id, tenant, role), what, how it ended."""

    seq: int
    at: float
    token_id: str | None
    tenant: str | None
    role: str | None
    method: str
    path: str
    status: int
    detail: str


class AuditOut(BaseModel):
    """Audit entries, oldest first; ``next``: the ``since`` for what follows."""

    entries: list[AuditEntryOut]
    next: int


class ServiceReplicaOut(BaseModel):
    """One replica of a service: its job, device model, port and whether it takes
    requests."""

    id: str
    job: str
    model: str | None
    port: int
    ready: bool
    stopping: bool


class ServiceStatsOut(BaseModel):
    """The router's figures over the service's scaling window (latencies in ms, null when
    no request ended in it)."""

    window_s: float
    requests: int
    rate: float
    p50_ms: float | None
    p95_ms: float | None
    p99_ms: float | None
    errors: int
    rejected: int
    inflight: int
    queued: int


class ServiceEventOut(BaseModel):
    """Something the service did (``scale``, ``asked``, ``ready``, ``gone``, ``update``,
    ``retire``, ``error``), ``ago_s`` seconds ago."""

    ago_s: float
    what: str
    detail: str


class ServiceOut(BaseModel):
    """A service: where it answers, its replicas, its figures, its latest events."""

    name: str
    tenant: str
    url: str = Field(description="the router's address (send requests here)")
    state: str = Field(description="running, or stopped (the answer to a DELETE)")
    version: int = Field(description="the spec's version (1, then one more per update)")
    updating: bool
    ready: int = Field(description="replicas taking requests")
    min_replicas: int
    max_replicas: int
    goal_p95_ms: float | None
    replicas: list[ServiceReplicaOut]
    stats: ServiceStatsOut
    events: list[ServiceEventOut]
    spec: dict[str, Any] = Field(description="the service spec (docs/serve.md)")


class ServicesOut(BaseModel):
    """Services, by tenant and name."""

    services: list[ServiceOut]


TENANT_NAME = Field(pattern=NAME_PATTERN, max_length=64)
ERRORS: dict[int | str, dict[str, Any]] = {
    code: {"model": ErrorOut, "description": what}
    for code, what in (
        (401, "no token, or a bad one"),
        (403, "the token's role does not allow it"),
        (413, "the body is too large"),
        (422, "invalid request (field names the key path)"),
        (429, "too many requests for this token (see Retry-After)"),
    )
}
NOT_FOUND: dict[int | str, dict[str, Any]] = {404: {"model": ErrorOut, "description": "unknown"}}
CONFLICT: dict[int | str, dict[str, Any]] = {
    409: {"model": ErrorOut, "description": "not possible now"}
}
