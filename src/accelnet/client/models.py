"""What the REST API answers, as typed models (docs/api.md).

These mirror the server's response bodies (``accelnet.api.models``) without importing
the server: a client needs only pydantic. Unknown keys are ignored, so a newer server
that adds fields does not break an older client. The models are frozen.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

FINISHED_STATES = frozenset({"succeeded", "failed", "cancelled"})
QUEUED_STATES = frozenset({"pending", "admitted"})
UNRESOLVABLE = frozenset({"never_fits", "unknown_tenant"})  # reason codes (docs/api.md)
LIVE_STATES = ("pending", "admitted", "starting", "running", "preempting")


class _Out(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class Health(_Out):
    """``GET /healthz``."""

    status: Literal["ok", "degraded"]
    version: str
    controller: bool


class WhoAmI(_Out):
    """The caller's token (never its secret)."""

    token_id: str
    tenant: str
    role: Literal["viewer", "user", "admin"]
    name: str


class JobOut(_Out):
    """A job: its state, where it runs (or ran last), why it waits, its spec."""

    id: str
    name: str
    tenant: str
    state: str = Field(description="pending, admitted, starting, running, preempting, "
                       "succeeded, failed, cancelled")  # fmt: skip
    submitted_at: float
    started_at: float | None = None
    finished_at: float | None = None
    attempts: int = 0
    failures: int = 0
    devices: list[str] = []
    model: str | None = None
    share: float | None = None
    reason: str | None = None
    reason_code: str | None = None
    error: str | None = None
    outcome_code: str | None = None
    inputs: dict[str, str] = {}
    spec: dict[str, Any] = {}

    @property
    def finished(self) -> bool:
        """Succeeded, failed or cancelled: it will not change any more."""
        return self.state in FINISHED_STATES

    @property
    def queued(self) -> bool:
        """Pending or admitted: waiting for devices (``reason`` says why)."""
        return self.state in QUEUED_STATES

    @property
    def unresolvable(self) -> bool:
        """Queued, and waiting will never start it (``reason_code`` ``never_fits`` or
        ``unknown_tenant``): change it or cancel it."""
        return self.reason_code in UNRESOLVABLE


class JobsPage(_Out):
    """One page of jobs, newest first; ``next`` is the cursor of the following page."""

    jobs: list[JobOut]
    next: str | None = None


class EventOut(_Out):
    """One line of the event log."""

    seq: int
    at: float
    job: str | None = None
    kind: str
    detail: str = ""


class EventsPage(_Out):
    """Events, oldest first; ``next`` is the ``since`` to ask with for what follows."""

    events: list[EventOut]
    next: int


class Answer(_Out):
    """The outcome of a device operation (a probe: with its findings)."""

    ok: bool
    detail: str
    findings: list[dict[str, Any]] = []


class DeviceOut(_Out):
    """A device: lifecycle state, remediation phase, health, its jobs, latest readings
    (None when unknown)."""

    id: str
    host: str
    model: str
    kind: str
    state: str
    phase: str
    health: str = Field(description="pass, warn, fail or unknown")
    failures: int = 0
    jobs: list[str] = []
    busy: bool = False
    utilization_pct: float | None = None
    memory_used_bytes: float | None = None
    memory_total_bytes: float | None = None
    power_w: float | None = None
    temperature_c: float | None = None
    sampled_at: float | None = None
    findings: list[dict[str, Any]] = []


class DeviceOpOut(DeviceOut):
    """The device after an operation, and its answer (None: still being carried out)."""

    answer: Answer | None = None


class TenantOut(_Out):
    """A tenant: weight, quota and what it uses (devices per model; ``*``: all models)."""

    name: str
    weight: float
    quota: dict[str, float] = {}
    usage: dict[str, float] = {}
    committed: dict[str, float] = {}


class PolicyOut(_Out):
    """The scheduling policy deciding now, and the ones one may set."""

    policy: str
    placement: str
    round_s: float | None = None
    reserve_after_s: float | None = None
    min_reallocation_s: float | None = None
    policies: list[str] = []
    placements: list[str] = []


class AuditEntry(_Out):
    """One audited call."""

    seq: int
    at: float
    token_id: str | None = None
    tenant: str | None = None
    role: str | None = None
    method: str
    path: str
    status: int
    detail: str = ""


class AuditPage(_Out):
    """Audit entries, oldest first; ``next``: the ``since`` for what follows."""

    entries: list[AuditEntry]
    next: int


class LogChunk(_Out):
    """Text of a task's stream from byte ``offset``; read on from ``next_offset``.
    ``attempt`` is the launch it belongs to (0: the job has not started)."""

    text: str
    offset: int
    next_offset: int
    attempt: int


class ServiceReplicaOut(_Out):
    """One replica of a service: its job, device model, port, whether it takes requests."""

    id: str
    job: str
    model: str | None = None
    port: int
    ready: bool
    stopping: bool = False


class ServiceStatsOut(_Out):
    """The router's figures over the service's scaling window (ms; None: no request)."""

    window_s: float
    requests: int
    rate: float
    p50_ms: float | None = None
    p95_ms: float | None = None
    p99_ms: float | None = None
    errors: int = 0
    rejected: int = 0
    inflight: int = 0
    queued: int = 0


class ServiceEventOut(_Out):
    """Something a service did, ``ago_s`` seconds ago."""

    ago_s: float
    what: str
    detail: str


class ServiceOut(_Out):
    """A service: where it answers, its replicas, its figures, its latest events."""

    name: str
    tenant: str
    url: str
    state: str
    version: int
    updating: bool = False
    ready: int
    min_replicas: int
    max_replicas: int
    goal_p95_ms: float | None = None
    replicas: list[ServiceReplicaOut] = []
    stats: ServiceStatsOut
    events: list[ServiceEventOut] = []
    spec: dict[str, Any] = {}
