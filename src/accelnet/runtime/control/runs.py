"""The controller's runs: one attempt of a job, the specs of its tasks, its accounting.

Internal to :class:`~accelnet.runtime.control.controller.Controller`: it keeps an
:class:`Attempt` per job holding devices, launches the tasks :func:`rank_specs` and
:func:`setup_specs` describe and, when every rank has ended, records what
:func:`account_for` adds up.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import cloudpickle

from accelnet.fabric import DeviceKind, Fabric
from accelnet.runtime.backend import Backend, SupportsProgress, TaskEventKind, TaskSpec
from accelnet.runtime.control.store import JobRecord
from accelnet.runtime.local.entry import call_entrypoint
from accelnet.runtime.local.taskenv import host_launch_env, rendezvous_envs
from accelnet.sched import Placement
from accelnet.sched.reasons import OutcomeCode
from accelnet.sched.spec import JobSpec, LaunchMode, stop_grace

if TYPE_CHECKING:
    from accelnet.runtime.care.power import PowerHook


@dataclass
class Attempt:
    """One attempt of a job: its tasks and what they reported. A job with a ``setup``
    command runs its setup tasks (``setup``: task id -> host) first and keeps its ranks'
    tasks in ``pending`` until every one has succeeded."""

    attempt: int
    world: int
    setup: dict[str, str] = field(default_factory=dict)
    pending: list[TaskSpec] = field(default_factory=list)
    started: set[int] = field(default_factory=set)
    ended: dict[int, TaskEventKind] = field(default_factory=dict)
    results: dict[int, Any] = field(default_factory=dict)
    error: str | None = None  # first failure of the attempt
    failure: OutcomeCode | None = None  # the code of that failure
    cancel: str | None = None  # why the controller stopped it (cancel / preempt)
    launched: float = 0.0  # when its tasks were launched

    def failed(self, error: str, code: OutcomeCode) -> None:
        """Note the attempt's first failure (later ones are consequences of it)."""
        if self.error is None:
            self.error, self.failure = error, code

    @property
    def device_failed(self) -> bool:
        """Its failure is a device's (not the job's doing: requeued without backoff)."""
        return self.failure is OutcomeCode.DEVICE_FAILED

    def task_id(self, job: str, rank: int) -> str:
        return f"{job}.{self.attempt}.{rank}"

    def settled(self) -> bool:
        """Every task of the attempt has ended (or will never start)."""
        return not self.setup and len(self.ended) == self.world


def payload_of(rec: JobRecord) -> bytes | None:
    """What a job's tasks run in their worker: its pickled function, or its entrypoint
    called (None: its tasks run its command)."""
    payload = rec.payload
    if payload is None and rec.spec.entrypoint is not None:
        ep = rec.spec.entrypoint
        payload = cloudpickle.dumps((call_entrypoint, (ep.function, ep.args, ep.kwargs), {}))
    return payload


def _by_host(devices: Sequence[str], hosts: Sequence[str]) -> dict[str, list[str]]:
    """The devices of each host, hosts in the order of their first device."""
    out: dict[str, list[str]] = {}
    for dev, host in zip(devices, hosts, strict=True):
        out.setdefault(host, []).append(dev)
    return out


def world_size(rec: JobRecord, hosts: Sequence[str]) -> int:
    """How many tasks an attempt of ``rec`` runs: one per device, or one per host (one for
    a CPU-only job)."""
    if rec.spec.resources.cpu_only:
        return 1
    return len(set(hosts)) if rec.spec.launch is LaunchMode.PER_HOST else len(hosts)


def anchor(fabric: Fabric, host: str) -> str:
    """The device a CPU-only task of ``host`` runs beside (its worker's lane): the host's
    first CPU device, else its first device. The task gets none of it."""
    ids = fabric.host(host).device_ids
    devices = fabric.devices
    cpu = [d for d in ids if devices[d].model.kind is DeviceKind.CPU]
    return (cpu or list(ids))[0]


def rank_specs(
    rec: JobRecord,
    run: Attempt,
    placement: Placement,
    payload: bytes | None,
    log_dir: Path,
    hosts: Sequence[str],
    beside: str | None = None,
) -> list[TaskSpec]:
    """The tasks of ``rec``'s attempt ``run`` on ``placement`` (``hosts``: the host of each
    of its devices): one per device with torchrun's per-rank variables, or, launched per
    host, one per host on its first device, driving all of them, with torchrun's per-node
    options; a CPU-only job's one task runs ``beside`` a device of its host
    (:func:`anchor`)."""
    devices = placement.devices
    if not devices:
        assert beside is not None, "a CPU-only task needs a device to run beside"
        return [_spec(rec, run, 0, beside, placement, payload, log_dir, {})]
    if rec.spec.launch is LaunchMode.PER_HOST:
        groups = _by_host(devices, hosts)
        nodes = list(groups)
        return [
            _spec(rec, run, node, group[0], placement, payload, log_dir,
                  host_launch_env(node, nodes, len(group)), tuple(group))
            for node, group in enumerate(groups.values())
        ]  # fmt: skip
    envs = rendezvous_envs(hosts)  # one pass for the gang, not one per rank
    return [
        _spec(rec, run, rank, dev, placement, payload, log_dir, envs[rank])
        for rank, dev in enumerate(devices)
    ]


def setup_specs(
    rec: JobRecord,
    run: Attempt,
    placement: Placement,
    log_dir: Path,
    hosts: Sequence[str],
    beside: str | None = None,
) -> dict[str, TaskSpec]:
    """The setup tasks of ``rec``'s attempt ``run`` (none without ``setup``): one per host
    of the placement, on its first device (a CPU-only job's: ``beside``), each a task of
    its own (task id ``<job>.<attempt>.setup-<node>``, logs beside the ranks'); by host."""
    if rec.spec.setup is None:
        return {}
    if placement.devices:
        groups = _by_host(placement.devices, hosts)
    else:
        assert beside is not None
        groups = {hosts[0]: [beside]}
    nodes = ",".join(groups)
    out = {}
    for node, (host, group) in enumerate(groups.items()):
        env = {**rec.spec.env, "ACCELNET_SETUP": "1", "ACCELNET_NODE_RANK": str(node),
               "ACCELNET_NUM_NODES": str(len(groups)), "ACCELNET_HOSTS": nodes}  # fmt: skip
        out[host] = TaskSpec(
            task_id=f"{rec.id}.{run.attempt}.setup-{node}",
            job_id=rec.id,
            rank=0,
            world=1,
            device=group[0],
            devices=(group[0],) if placement.devices else (),
            command=rec.spec.setup,
            env=env,
            timeout_s=rec.spec.timeout_s,
            log_dir=str(log_dir),
            attempt=run.attempt,
            tenant=rec.spec.tenant,
            share=placement.share,
            workdir=rec.spec.workdir,
            cpus=rec.spec.resources.cpus or 0.0,
        )
    return out


def _spec(
    rec: JobRecord,
    run: Attempt,
    rank: int,
    dev: str,
    placement: Placement,
    payload: bytes | None,
    log_dir: Path,
    rendezvous: dict[str, str],
    local_devices: tuple[str, ...] = (),
) -> TaskSpec:
    """The task of rank ``rank`` of ``rec``'s attempt ``run``, on ``dev``."""
    return TaskSpec(
        task_id=run.task_id(rec.id, rank),
        job_id=rec.id,
        rank=rank,
        world=run.world,
        device=dev,
        devices=placement.devices,
        command=rec.spec.run if payload is None else None,
        payload=payload,
        env=_env(rec.spec, rank),
        timeout_s=rec.spec.timeout_s,
        log_dir=str(log_dir),
        attempt=run.attempt,
        inputs=dict(rec.inputs),
        tenant=rec.spec.tenant,
        share=placement.share,
        fresh_worker=rec.spec.fresh_worker,
        rendezvous=rendezvous,
        workdir=rec.spec.workdir,
        local_devices=local_devices,
        grace_s=stop_grace(rec.spec),
        cpus=rec.spec.resources.cpus or 0.0,
    )


def _env(spec: JobSpec, rank: int) -> dict[str, str]:
    """The job's own environment for rank ``rank``: its ``env``, and for rank 0 of a job that
    serves on a ``port``, that port as ``ACCELNET_PORT`` and ``PORT`` (``env`` may override
    ``PORT``)."""
    if spec.port is None or rank != 0:
        return dict(spec.env)
    return {"ACCELNET_PORT": str(spec.port), "PORT": str(spec.port), **spec.env}


def account_for(
    rec: JobRecord,
    run: Attempt,
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
