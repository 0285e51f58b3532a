"""The execution backend contract: launch tasks on devices, cancel them, report events.

A job of N devices runs as N tasks, one per device (rank 0..N-1), all-or-nothing. Backends
are an ABC plus capability mixins, checked with ``isinstance`` (never by name): a backend
that can reset devices mixes in :class:`SupportsRefresh`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from accelnet.fabric import Device


@dataclass(frozen=True, slots=True)
class TaskSpec:
    """One task of a job: what to run, on which device, with which environment.

    Exactly one of ``command`` (a shell command, run with ``/bin/sh -c`` in its own
    process group) or ``payload`` (a cloudpickled ``(function, args, kwargs)`` run inside
    the device's worker process) is set. ``env`` is added to the task's environment on top
    of the accelnet variables (``ACCELNET_JOB``, ``ACCELNET_TASK``, ``ACCELNET_RANK``,
    ``ACCELNET_WORLD_SIZE``, ``ACCELNET_DEVICE``, ``ACCELNET_DEVICES`` and, for NVIDIA
    GPUs, ``CUDA_VISIBLE_DEVICES``), which the backend sets. stdout and stderr go to
    ``<log_dir>/<task_id>.out`` and ``.err`` once the task ends; a stream the task wrote
    nothing to may have no file (read as empty). A backend that is
    :class:`SupportsLiveLogs` says where the output of a running task is meanwhile.
    ``attempt`` counts the job's launches (from 1); ``inputs`` maps each alias to the job
    whose outputs the task consumes, which a :class:`SupportsHandoff` backend hands over.
    ``tenant`` is the job's (a backend may run a tenant's tasks as a user of its own).
    ``share`` is the part of each device the placement gives the job: below 1 for a job
    that asked for a fraction of one, or that the scheduler packed beside another on the
    same devices (space sharing); tasks see it as ``ACCELNET_DEVICE_SHARE``.
    ``fresh_worker``: the job asked that no task after this one run in the process this
    one's Python ran in (the worker is replaced before the device's next task).
    ``rendezvous``: the gang's launcher variables for this rank (``RANK``, ``WORLD_SIZE``,
    ``LOCAL_RANK``, ``NODE_RANK``, ... :func:`accelnet.runtime.local.taskenv.rendezvous_env`),
    set by the controller; ``MASTER_ADDR`` and ``MASTER_PORT`` are the backend's to add
    where they are missing (rank 0's host, a port free there), the same for every rank of
    the attempt. ``workdir``: where the task starts (relative: to where it would start
    otherwise). ``local_devices``: a task launched per host drives all of these (its host's
    devices of the job, ``device`` first): it sees them all in ``CUDA_VISIBLE_DEVICES`` and
    ``ACCELNET_LOCAL_DEVICES``; empty: only ``device``. ``grace_s``: how long a command
    that is stopped (cancelled, preempted, timed out) has between SIGTERM and SIGKILL to
    save its work (None: the backend's own). ``cpus``: the CPU cores the task asked for
    (``resources.cpus``): a backend that can pins it to that many cores of its own, none
    shared with another pinned task (Linux CPU affinity); 0: not pinned. A CPU-only job's
    task has no ``devices``: ``device`` only names where it runs (a device of its host).
    """

    task_id: str
    job_id: str
    rank: int
    world: int
    device: str
    devices: tuple[str, ...]
    command: str | None = None
    payload: bytes | None = None
    env: dict[str, str] = field(default_factory=dict)
    timeout_s: float | None = None
    log_dir: str = "."
    attempt: int = 1
    inputs: dict[str, str] = field(default_factory=dict)
    tenant: str = "default"
    share: float = 1.0
    fresh_worker: bool = False
    rendezvous: dict[str, str] = field(default_factory=dict)
    workdir: str | None = None
    local_devices: tuple[str, ...] = ()
    grace_s: float | None = None
    cpus: float = 0.0


class TaskEventKind(StrEnum):
    """What happened to a task."""

    STARTED = "started"
    SUCCEEDED = "succeeded"  # exit code 0 / the function returned
    FAILED = "failed"  # non-zero exit, an exception, or a timeout
    CANCELLED = "cancelled"  # stopped on request
    LOST = "lost"  # its worker died under it


@dataclass(frozen=True, slots=True)
class TaskEvent:
    """A task's news. ``result`` is the function's return value (SUCCEEDED, payload tasks);
    ``timed_out``: a FAILED task ran past its ``timeout_s``."""

    task_id: str
    kind: TaskEventKind
    at: float
    exit_code: int | None = None
    error: str | None = None
    result: Any = None
    timed_out: bool = False


class Backend(ABC):
    """Runs tasks. Methods are called from one thread (the controller's)."""

    @abstractmethod
    def launch(self, task: TaskSpec) -> None:
        """Start ``task`` on its device; returns at once (STARTED comes as an event)."""

    @abstractmethod
    def cancel(self, task_id: str) -> None:
        """Stop a running task and its whole process tree (a CANCELLED event follows)."""

    @abstractmethod
    def poll(self, timeout: float) -> list[TaskEvent]:
        """Events since the last call, waiting up to ``timeout`` seconds for the first."""

    @abstractmethod
    def close(self) -> None:
        """Stop every worker and task."""

    def address_of(self, host: str) -> str:
        """Where a task on ``host`` is reached (a service replica's server, which binds
        ``$ACCELNET_BIND`` or 127.0.0.1): 127.0.0.1 here; a backend over several machines
        answers the host's node address."""
        return "127.0.0.1"


class SupportsRefresh(ABC):
    """Capability: make a released device clean before the next job gets it."""

    @abstractmethod
    def refresh(self, device: str) -> tuple[bool, str]:
        """Recycle the device's worker and clean its scratch space; (ok, detail)."""


class SupportsLiveLogs(ABC):
    """Capability: the output of a task while it runs."""

    @abstractmethod
    def live_log(self, task_id: str, stream: str) -> Path | None:
        """The file holding running ``task_id``'s ``stream`` (``out``/``err``) so far, or
        None if the task is not running."""


class SupportsProgress(ABC):
    """Capability: how much work a job has done (steps), as the job or a model reports it."""

    @abstractmethod
    def progress(self, job_id: str) -> float | None:
        """Steps ``job_id`` has done and kept so far, its current attempt included (None if
        unknown)."""


class SupportsHandoff(ABC):
    """Capability: data hand-off. Each job has an output location its tasks write to; a
    task gets the output locations of the jobs in its ``inputs`` (by reference: nothing
    is copied), and the tasks of one attempt share a scratch area for streaming data
    between them (shared memory on the local backend), which the backend removes when the
    attempt's last task has ended, however it ended."""

    @abstractmethod
    def output_location(self, job_id: str) -> str:
        """Where ``job_id``'s outputs are (a folder on the local backend); what the tasks
        of a job consuming them are given."""


@dataclass(frozen=True, slots=True)
class WorkerLoss:
    """A device's worker that died on its own (nobody asked it to stop): when the backend
    noticed (injected clock), its pid, how it ended (``killed by SIGKILL``) and the task it
    was running (None: it was idle). A worker that dies running a task is most likely that
    task's doing (``os._exit``, ``os.abort``, a crash in native code, ``kill -9 $PPID``, the
    kernel's OOM killer): its task fails, and the device is not to blame for it."""

    device: str
    at: float
    pid: int
    how: str
    task: str | None = None


class SupportsWorkers(ABC):
    """Capability: one worker process per device, with a heartbeat, that can be killed
    and reset (what device health checks, remediation and fault injection use)."""

    @abstractmethod
    def worker_pid(self, device: str) -> int | None:
        """The pid of ``device``'s worker if one is running."""

    @abstractmethod
    def heartbeats(self) -> dict[str, tuple[float, int]]:
        """Each live worker's device -> (when it was last heard from, by the backend's
        clock; its pid). Reads what the workers sent without waiting."""

    @abstractmethod
    def take_losses(self) -> list[WorkerLoss]:
        """The workers that died on their own since the last call (each once)."""

    @abstractmethod
    def kill_worker(self, device: str, why: str) -> bool:
        """SIGKILL ``device``'s worker and its task's processes now; a task it was running
        ends LOST with ``why``. False if it had no worker. Not reported as a loss."""

    @abstractmethod
    def reset(self, device: str, hardware: bool = False) -> tuple[bool, str]:
        """Reset the device as far as the backend can: stop its worker (killed if it does
        not exit), reset the hardware if ``hardware`` and the backend can (an NVIDIA GPU:
        ``nvidia-smi --gpu-reset``, where permitted), clean its scratch space and start a
        fresh worker that must answer; (ok, detail). Blocks for seconds at most."""


@dataclass(frozen=True, slots=True)
class NodeChange:
    """A machine of the fabric came up (``up``) or went away: a Ray node that joined, died
    or disconnected. ``devices`` are its devices' ids; ``at`` is by the backend's clock."""

    host: str
    devices: tuple[str, ...]
    up: bool
    at: float
    cause: str


class SupportsMembership(ABC):
    """Capability: machines come and go while the fabric stays what it is. The fabric
    names every machine the backend may run on; one that is not (or no longer) there has
    its devices OFFLINE, and they come back (UNKNOWN, then READY) when it is up again. The
    tasks of a machine that went away end LOST (events), as with a dead local worker."""

    @abstractmethod
    def take_node_changes(self) -> list[NodeChange]:
        """Machines that came up or went away since the last call (each change once, in
        order); the first call reports every machine, up or down, as the backend found
        it when it connected (a restarted controller brings the devices of a machine that
        is back out of OFFLINE)."""


def lookup_device(devices: Mapping[str, Device], device_id: str) -> Device:
    """``devices[device_id]``; KeyError naming the device and (some of) the known ones."""
    try:
        return devices[device_id]
    except KeyError:
        known = sorted(devices)
        more = f" (and {len(known) - 8} more)" if len(known) > 8 else ""
        shown = ", ".join(known[:8]) + more
        raise KeyError(f"unknown device {device_id!r}; known: {shown or 'none'}") from None


def check_launch(task: TaskSpec, running: Collection[str]) -> None:
    """The checks every backend's ``launch`` makes first: exactly one of command and
    payload, string env values, a task id not already in ``running``; ValueError naming
    the task otherwise."""
    if (task.command is None) == (task.payload is None):
        raise ValueError(f"task {task.task_id}: set exactly one of command and payload")
    bad = [k for k, v in task.env.items() if not isinstance(v, str)]
    if bad:
        raise ValueError(f"task {task.task_id}: env values must be strings: {bad}")
    if task.task_id in running:
        raise ValueError(f"task {task.task_id} is already running")
