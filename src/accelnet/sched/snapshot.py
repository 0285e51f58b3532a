"""What the scheduler sees (a :class:`Snapshot`) and what it answers (a :class:`Decision`).

Both are immutable values: the controller builds a snapshot from its store and the clock,
the simulator builds one from its virtual state; neither the scheduler nor its policies do
any I/O or read a clock.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from accelnet.devices import DeviceState
from accelnet.fabric import DomainLevel, Fabric
from accelnet.sched.jobstate import JobState
from accelnet.sched.reasons import Reason, code_of
from accelnet.sched.spec import JobSpec


@dataclass(frozen=True, slots=True)
class Placement:
    """Exact devices for a job: each gets ``share`` of one device (1.0 = the whole device).

    ``span`` is the tightest domain level holding all of them. ``hosts``: the CPU cores
    and host memory (GB) the job holds on each host, as (host, cpus, memory_gb), for a job
    that asks for them; a CPU-only job has no devices, one host, and an empty model.
    """

    devices: tuple[str, ...]
    share: float
    model: str
    span: DomainLevel
    hosts: tuple[tuple[str, float, float], ...] = ()

    def to_json(self) -> dict[str, Any]:
        """JSON form."""
        out: dict[str, Any] = {
            "devices": list(self.devices),
            "share": self.share,
            "model": self.model,
            "span": self.span.value,
        }
        if self.hosts:
            out["hosts"] = [
                {"host": h, "cpus": cpus, "memory_gb": gb} for h, cpus, gb in self.hosts
            ]
        return out

    def where(self) -> str:
        """``h/gpu0, h/gpu1`` or, for a CPU-only job, ``host h (2 CPUs, 4 GB)``."""
        if self.devices or not self.hosts:
            return ", ".join(self.devices)
        host, cpus, gb = self.hosts[0]
        room = ", ".join(x for x in (f"{cpus:g} CPUs" * bool(cpus), f"{gb:g} GB" * bool(gb)) if x)
        return f"host {host} ({room})"


@dataclass(frozen=True, slots=True)
class JobView:
    """A job as the scheduler sees it.

    ``nominated`` holds the devices an earlier decision freed for this job by preemption
    (from ``Decision.nominations``): until the job starts they are held for it alone.
    ``attained`` is the service the job received in its *finished* attempts, as
    (device model, device-seconds) pairs, and ``done`` the work (steps) those attempts
    kept; policies add the current attempt's share through
    :class:`~accelnet.sched.jobinfo.JobInfo`.
    """

    id: str
    spec: JobSpec
    state: JobState
    submitted_at: float
    attempts: int = 0
    started_at: float | None = None
    placement: Placement | None = None
    nominated: tuple[str, ...] = ()
    attained: tuple[tuple[str, float], ...] = ()
    done: float = 0.0

    @property
    def priority(self) -> int:
        """The spec's priority."""
        return self.spec.priority

    @property
    def attained_s(self) -> float:
        """Device-seconds received in finished attempts, on every model."""
        return sum(s for _, s in self.attained)


@dataclass(frozen=True, slots=True)
class Tenant:
    """A tenant's weight (fair-share policies) and quota: devices per model (``*``: all)."""

    name: str
    weight: float = 1.0
    quota: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}))

    def __post_init__(self) -> None:
        if not (math.isfinite(self.weight) and self.weight > 0):
            raise ValueError(f"tenant {self.name}: weight must be a positive number")
        for key, value in self.quota.items():
            if not (math.isfinite(value) and value >= 0):
                raise ValueError(f"tenant {self.name}: quota {key} = {value} must be >= 0")
        object.__setattr__(self, "quota", MappingProxyType(dict(self.quota)))


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Everything one decision depends on.

    ``devices`` maps every device id to its lifecycle state (a device missing from it is
    not schedulable); ``jobs`` holds the queued jobs and those holding devices; device use
    is derived from the latter, so it can never disagree with them. When ``tenants`` is
    not empty it is the full list: a job of any other tenant does not run.
    """

    fabric: Fabric
    now: float
    devices: Mapping[str, DeviceState]
    jobs: tuple[JobView, ...]
    tenants: Mapping[str, Tenant] = field(default_factory=lambda: MappingProxyType({}))
    seed: int = 0

    @staticmethod
    def all_ready(
        fabric: Fabric,
        jobs: tuple[JobView, ...] = (),
        now: float = 0.0,
        tenants: Mapping[str, Tenant] | None = None,
    ) -> Snapshot:
        """A snapshot where every device is READY (ALLOCATED where jobs hold it)."""
        held = {d for j in jobs if j.state.holds_devices() and j.placement
                for d in j.placement.devices}  # fmt: skip
        states = {
            d: DeviceState.ALLOCATED if d in held else DeviceState.READY for d in fabric.devices
        }
        return Snapshot(fabric, now, states, jobs, MappingProxyType(dict(tenants or {})))


@dataclass(frozen=True, slots=True)
class Start:
    """Start ``job`` on ``placement``."""

    job: str
    placement: Placement


@dataclass(frozen=True, slots=True)
class Preempt:
    """Stop ``job`` (checkpoint if it can) so that ``for_job`` can run; ``reason`` says why."""

    job: str
    for_job: str
    reason: str


@dataclass(frozen=True, slots=True)
class Decision:
    """Starts, preemptions, and a reason for every job left waiting.

    ``time_shares`` is for round-based policies (Gavel-style): the fraction of time each job
    should get on each device model; None when the policy does not think in shares.
    ``nominations`` names, for each job that preempted others, the devices it will start
    on once its victims are gone (like Kubernetes' nominated node): the controller passes
    them back as ``JobView.nominated`` so that no other job takes them meanwhile.
    ``again_at``: the earliest time at which a decision may differ though nothing else
    happened (a job's ``topology.wait_s`` or the scheduler's ``reserve_after_s`` runs
    out); None if no such time.
    """

    starts: tuple[Start, ...]
    preemptions: tuple[Preempt, ...]
    waiting: Mapping[str, Reason]
    time_shares: Mapping[str, Mapping[str, float]] | None = None
    nominations: Mapping[str, tuple[str, ...]] = field(default_factory=lambda: MappingProxyType({}))
    again_at: float | None = None

    def to_json(self) -> dict[str, Any]:
        """Stable JSON form (schema ``accelnet.decision/v1``)."""
        return {
            "schema": "accelnet.decision/v1",
            "starts": [{"job": s.job, **s.placement.to_json()} for s in self.starts],
            "preemptions": [
                {"job": p.job, "for_job": p.for_job, "reason": p.reason} for p in self.preemptions
            ],
            "waiting": dict(self.waiting),
            "waiting_codes": {j: code_of(r) for j, r in self.waiting.items()},
            "time_shares": None
            if self.time_shares is None
            else {j: dict(s) for j, s in self.time_shares.items()},
            "nominations": {j: list(d) for j, d in self.nominations.items()},
            "again_at": self.again_at,
        }
