"""What a simulation replays: jobs arriving over time, and device failures.

A :class:`SimJob` is one job of a trace: when it arrives, what it is (a job type of the
throughput table), how many devices it needs (a gang), and how much work it has (steps). It
becomes a :class:`~accelnet.sched.JobSpec` whose ``workload`` carries the type, the steps
and the measured throughputs, so the scheduler and the simulated backend read the same
spec the live system would.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from accelnet.sched import JobSpec
from accelnet.sim.gradients import gradient_bytes


class RateModel(Protocol):
    """What trace loaders need of a throughput model (see :mod:`accelnet.sim.throughput`)."""

    reference: str  # the catalog model durations in traces are taken on (e.g. "V100")

    def job_types(self) -> tuple[str, ...]:
        """Every job type the model knows, in a stable order."""
        ...

    def reference_rate(self, job_type: str, gpus: int) -> float:
        """Steps/s of a gang of ``gpus`` devices of the reference model, consolidated."""
        ...


@dataclass(frozen=True, slots=True)
class SimJob:
    """One job of a trace.

    ``work`` is in steps of ``job_type`` (the throughput table's unit). ``accelerators``
    overrides the request (by default ``any:<gpus>`` with ``prefer: speed``: any device
    model, faster first, as a throughput-table trace means it; a job file's ``any`` weighs
    models by fit instead).
    ``deadline`` is absolute (seconds from the trace's start), None if there is none.
    ``throughput`` (steps/s per device model, one device) is the hint the scheduler's
    ``any`` ordering reads; the simulator fills it from its throughput model.
    ``bytes_per_step`` is what a step allreduces (by default the gradient of the job
    type's family, :mod:`accelnet.sim.gradients`).
    """

    id: str
    arrival: float
    job_type: str
    gpus: int
    work: float
    priority: int = 0
    tenant: str = "default"
    weight: float = 1.0
    deadline: float | None = None
    checkpointable: bool = True
    accelerators: str | None = None
    max_retries: int = 3
    throughput: Mapping[str, float] = field(default_factory=dict)
    bytes_per_step: float | None = None  # None: the gradient of its family, if known
    topology: Mapping[str, Any] | None = None  # the spec's ``topology`` (levels, wait_s)

    def __post_init__(self) -> None:
        if self.gpus < 1:
            raise ValueError(f"job {self.id}: gpus must be >= 1, got {self.gpus}")
        if not self.work > 0:
            raise ValueError(f"job {self.id}: work must be > 0 steps, got {self.work}")
        if self.arrival < 0:
            raise ValueError(f"job {self.id}: arrival must be >= 0, got {self.arrival}")

    def spec(self) -> JobSpec:
        """The job spec the controller is given."""
        body: dict[str, Any] = {
            "name": _name(self.id),
            "tenant": self.tenant,
            "priority": self.priority,
            "checkpointable": self.checkpointable,
            "max_retries": self.max_retries,
            "deadline": self.deadline,
            "resources": {
                "accelerators": self.accelerators or {"count": self.gpus, "prefer": "speed"}
            },
            "run": "simulated",
            "workload": {
                "category": "training",
                "type": self.job_type,
                "total_steps": self.work,
                "throughput": dict(self.throughput),
            },
        }
        if self.topology:
            body["topology"] = dict(self.topology)
        nbytes = self.bytes_per_step
        if nbytes is None:
            nbytes = gradient_bytes(self.job_type)
        if nbytes:
            body["workload"]["bytes_per_step"] = nbytes
        return JobSpec.model_validate(body)


def prefer_one_host(jobs: Iterable[SimJob], wait_s: float) -> Iterator[SimJob]:
    """``jobs`` with every gang (two devices or more, no topology of its own) preferring
    one host and waiting up to ``wait_s`` for one (``topology.wait_s``); lazily."""
    if not (math.isfinite(wait_s) and wait_s >= 0):
        raise ValueError(f"locality wait must be a number of seconds >= 0, not {wait_s!r}")
    want = {"preferred": "host", "wait_s": float(wait_s)}
    for job in jobs:
        yield replace(job, topology=want) if job.gpus > 1 and job.topology is None else job


@dataclass(frozen=True, slots=True)
class DeviceFailure:
    """A device fails at ``at`` (seconds from the trace's start) and is repaired
    ``repair_s`` later (None: never). ``device`` None picks one at random (seeded)."""

    at: float
    device: str | None = None
    repair_s: float | None = 3600.0


def _name(job_id: str) -> str:
    """A job name the spec accepts, from a trace's job id."""
    safe = "".join(c if c.isalnum() or c in "-_." else "-" for c in job_id).strip("-.")
    return (safe or "job")[:128]
