"""The controller's runs: one attempt of a job, the specs of its tasks, its accounting.

Internal to :class:`~accelnet.runtime.controller.Controller`: it keeps a :class:`_Run`
per job holding devices, launches the tasks :func:`_task_spec` describes and, when every
rank has ended, records what :func:`_accounting` adds up.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import cloudpickle

from accelnet.runtime.backend import Backend, SupportsProgress, TaskEventKind, TaskSpec
from accelnet.runtime.entry import call_entrypoint
from accelnet.runtime.store import JobRecord
from accelnet.runtime.taskenv import rendezvous_env
from accelnet.sched import Placement

if TYPE_CHECKING:
    from accelnet.runtime.power_care import PowerHook


@dataclass
class _Run:
    """One attempt of a job: its tasks and what they reported."""

    attempt: int
    world: int
    started: set[int] = field(default_factory=set)
    ended: dict[int, TaskEventKind] = field(default_factory=dict)
    results: dict[int, Any] = field(default_factory=dict)
    error: str | None = None  # first failure of the attempt
    cancel: str | None = None  # why the controller stopped it (cancel / preempt)
    device_failed: bool = False  # its error is a device's failure: requeued without backoff
    launched: float = 0.0  # when its tasks were launched

    def task_id(self, job: str, rank: int) -> str:
        return f"{job}.{self.attempt}.{rank}"


def _payload(rec: JobRecord) -> bytes | None:
    """What a job's tasks run in their worker: its pickled function, or its entrypoint
    called (None: its tasks run its command)."""
    payload = rec.payload
    if payload is None and rec.spec.entrypoint is not None:
        ep = rec.spec.entrypoint
        payload = cloudpickle.dumps((call_entrypoint, (ep.function, ep.args, ep.kwargs), {}))
    return payload


def _task_spec(
    rec: JobRecord,
    run: _Run,
    rank: int,
    dev: str,
    placement: Placement,
    payload: bytes | None,
    log_dir: Path,
    hosts: Sequence[str],
) -> TaskSpec:
    """The task of rank ``rank`` of ``rec``'s attempt ``run``, on ``dev`` (``hosts``: the
    host of each rank's device)."""
    return TaskSpec(
        task_id=run.task_id(rec.id, rank),
        job_id=rec.id,
        rank=rank,
        world=run.world,
        device=dev,
        devices=placement.devices,
        command=rec.spec.run if payload is None else None,
        payload=payload,
        env=dict(rec.spec.env),
        timeout_s=rec.spec.timeout_s,
        log_dir=str(log_dir),
        attempt=run.attempt,
        inputs=dict(rec.inputs),
        tenant=rec.spec.tenant,
        share=placement.share,
        fresh_worker=rec.spec.fresh_worker,
        rendezvous=rendezvous_env(rank, hosts),
    )


def _accounting(
    rec: JobRecord,
    run: _Run,
    now: float,
    ok: bool,
    backend: Backend,
    power: PowerHook | None,
) -> dict[str, Any]:
    """The job's attained service and kept work after this attempt: device-seconds on
    its model, and the steps done (all of them if it succeeded; what the backend says
    it kept, if the backend can say; else as before); its energy, if accounted."""
    attained = dict(rec.attained)
    p = rec.placement
    if p is not None:
        used = (now - run.launched) * len(p.devices) * p.share
        attained[p.model] = attained.get(p.model, 0.0) + used
    done = rec.done
    if ok:
        done = rec.spec.workload.total_steps or done
    elif isinstance(backend, SupportsProgress):
        kept = backend.progress(rec.id)
        done = done if kept is None else kept
    out: dict[str, Any] = {"attained": tuple(sorted(attained.items())), "done": done}
    if power is not None:  # the attempt's energy, added to the earlier ones'
        out["energy"] = power.ended(rec, run.attempt, now)
    return out
