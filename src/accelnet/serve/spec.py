"""A service's spec: a command that serves HTTP, kept up as replicas behind one router.

Each replica is an ordinary job of the scheduler (quotas, tenants, fairness, priorities and
device health apply) whose rank 0 serves on ``$ACCELNET_PORT`` (also ``$PORT``) on
127.0.0.1. Example (YAML)::

    name: digits
    run: python -m accelnet.workloads.digits_service
    resources: {accelerators: {any_of: [H100, L4, T4], count: 1}}
    replicas: {min: 1, max: 4}
    goal: {p95_ms: 150, target_inflight: 2}
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import Field, ValidationError, model_validator

from accelnet.sched.spec import JobSpec, ResourcesSpec
from accelnet.specio import (
    SpecError,
    SpecIssue,
    SpecModel,
    StrictFloat,
    StrictInt,
    parse_text,
    read_text,
    validation_issues,
)

_NAME = r"^[\w][\w.-]*$"


class Replicas(SpecModel):
    """How many replicas: never fewer than ``min`` (0: the service may scale to zero when
    idle), never more than ``max``."""

    min: StrictInt = Field(1, ge=0, le=1000)
    max: StrictInt = Field(1, ge=1, le=1000)

    @model_validator(mode="after")
    def _ordered(self) -> Replicas:
        if self.min > self.max:
            raise ValueError(f"replicas.min {self.min} is above replicas.max {self.max}")
        return self


class Goal(SpecModel):
    """What the autoscaler keeps: the p95 latency under ``p95_ms`` (scaled up before it is
    broken) and each replica at about ``target_inflight`` requests in flight (its load)."""

    p95_ms: StrictFloat | None = Field(None, gt=0, le=3_600_000)
    target_inflight: StrictFloat = Field(2.0, gt=0, le=10_000)


class Scaling(SpecModel):
    """How fast the replica count follows the load: up after the need has lasted ``up_s``,
    down one replica at a time after the surplus has lasted ``down_s`` (hysteresis), to
    zero after ``idle_s`` without a request (only with ``replicas.min: 0``)."""

    up_s: StrictFloat = Field(1.0, ge=0, le=3600)
    down_s: StrictFloat = Field(10.0, ge=0, le=86_400)
    idle_s: StrictFloat = Field(60.0, gt=0, le=86_400)
    window_s: StrictFloat = Field(5.0, gt=0, le=3600)


class Readiness(SpecModel):
    """A replica takes requests once ``GET path`` answers 2xx; it must within ``timeout_s``
    of starting, or it is replaced."""

    path: str = Field("/healthz", pattern=r"^/[\w./~-]*$", max_length=256)
    timeout_s: StrictFloat = Field(120.0, gt=0, le=3600)


class ServiceSpec(SpecModel):
    """See the module docstring."""

    name: str = Field(pattern=_NAME, max_length=100)
    tenant: str = Field("default", pattern=_NAME, max_length=64)
    priority: StrictInt = Field(0, ge=-1000, le=1000)
    run: str = Field(min_length=1, max_length=65536)
    resources: ResourcesSpec = Field(default_factory=ResourcesSpec)
    env: dict[str, str] = Field(default_factory=dict)
    replicas: Replicas = Field(default_factory=Replicas)
    goal: Goal = Field(default_factory=Goal)
    scaling: Scaling = Field(default_factory=Scaling)
    readiness: Readiness = Field(default_factory=Readiness)
    max_inflight: StrictInt = Field(8, ge=1, le=100_000)  # per replica, then 429

    def models(self) -> tuple[str, ...]:
        """The device models a replica may run on (empty: any)."""
        return self.resources.accelerators.models

    def replica(self, index: int, model: str | None, port: int) -> JobSpec:
        """The job of replica ``index`` on ``model`` (None: any the request allows),
        serving on ``port``. ValueError (pydantic's) if the result is not a valid job."""
        acc = self.resources.accelerators
        accelerators: dict[str, Any] = {"count": acc.count}
        if model is not None:
            accelerators["any_of"] = [model]
        elif acc.models:
            accelerators["any_of"] = list(acc.models)
        if acc.share < 1:
            accelerators = {"any_of": accelerators.get("any_of", []), "count": 1}
            accelerators["share"] = acc.share
        resources = self.resources.model_dump(exclude_defaults=True)
        resources["accelerators"] = accelerators
        return JobSpec.model_validate({
            "name": f"{self.name}.{index}", "tenant": self.tenant, "priority": self.priority,
            "run": self.run, "env": dict(self.env), "resources": resources, "port": port,
            "launch": "per-host", "workload": {"category": "inference"},
        })  # fmt: skip


class ServiceSpecError(SpecError):
    """An invalid service file: every problem, with its key path and line."""

    what = "service spec"


def load_service(path: str | Path) -> ServiceSpec:
    """Read and validate a service file (YAML or JSON); ServiceSpecError names the file,
    the line and the key of each problem."""
    source = str(path)
    text = read_text(path, ServiceSpecError)
    data, node = parse_text(text, source, ServiceSpecError, source.lower().endswith(".json"))
    if not isinstance(data, dict):
        raise ServiceSpecError(source, [SpecIssue("", "a service spec is a mapping")])
    try:
        return ServiceSpec.model_validate(data)
    except ValidationError as exc:
        raise ServiceSpecError(source, validation_issues(exc, data, node, ServiceSpec)) from None
