"""The Ray backend's records: what the driver knows of each node and each task, the
book of which nodes hold which jobs' outputs (for the hand-off between jobs), and the book
of where each job's tasks ran (their checkpoints follow the job to its next attempt).

Internal to :class:`~accelnet.runtime.ray.backend.RayBackend`, its node membership
(:mod:`accelnet.runtime.ray.members`) and its gangs (:mod:`accelnet.runtime.ray.gangs`).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from accelnet.runtime.backend import TaskSpec
from accelnet.runtime.ray.nodes import NodeReport

CALL_S = 30.0  # a blocking call to an agent (beyond the backend's own waits)
_PACKS_KEPT = 64
_JOBS_KEPT = 4096  # jobs whose hosts the checkpoint book remembers (the latest ended)
CHECKPOINT_PART = "checkpoint:"  # a launch part that is a job's checkpoint folder


@dataclass(slots=True, eq=False)
class NodeRecord:
    host: str
    devices: tuple[str, ...]
    node_id: str | None = None
    report: NodeReport | None = None
    agent: Any = None
    up: bool = False
    shared: bool = False  # its files are on the driver's file system
    address: str = "127.0.0.1"  # the node's address, as Ray knows it (its agent says)
    heard: float = 0.0  # time.monotonic() of its last answer (or of asking, if later)
    polls: int = 0  # long polls outstanding (to its current agent)
    epoch: int = 0  # agents started for it (answers of an earlier one are ignored)
    seq: int = 0  # the last answer handled
    beats: dict[str, tuple[float, int]] = field(default_factory=dict)
    pids: dict[str, int] = field(default_factory=dict)
    sent_path: list[str] | None = None


@dataclass(slots=True)
class RayTask:
    spec: TaskSpec
    host: str
    sent: bool = False  # handed to its agent (not held by its gang)


class PackCache:
    """The Ray objects of packs already asked for, by (job, source host, news): the last
    :data:`_PACKS_KEPT` of them."""

    def __init__(self) -> None:
        self._refs: OrderedDict[tuple[str, str, int], Any] = OrderedDict()

    def get(self, key: tuple[str, str, int], ask: Callable[[], Any]) -> Any:
        """The cached object for ``key``, else ``ask()``'s (kept)."""
        ref = self._refs.get(key)
        if ref is None:
            ref = self._refs[key] = ask()
            while len(self._refs) > _PACKS_KEPT:
                self._refs.popitem(last=False)
        return ref


class Outputs:
    """Which nodes hold parts of which jobs' outputs, and the packs of them already asked
    for. Thread-safe where the backend's thread-safe methods use it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        # job -> (its last attempt that succeeded somewhere, host -> news counter)
        self._outputs: dict[str, tuple[int, dict[str, int]]] = {}
        self._news = 0
        self._packs = PackCache()

    def keep(self, t: RayTask) -> None:
        """A task succeeded: its node holds part of its job's outputs (of the attempt a
        consumer will read: the job's last, which succeeded if the consumer runs)."""
        with self._lock:
            self._news += 1
            attempt, hosts = self._outputs.get(t.spec.job_id, (0, {}))
            if t.spec.attempt > attempt:
                attempt, hosts = t.spec.attempt, {}
            if t.spec.attempt == attempt:
                hosts[t.host] = self._news
                self._outputs[t.spec.job_id] = (attempt, hosts)

    def hosts(self, job_id: str) -> list[str]:
        """The hosts that hold parts of ``job_id``'s outputs. Thread-safe."""
        with self._lock:
            return sorted(self._outputs.get(job_id, (0, {}))[1])

    def sources(self, jobs: Iterable[str]) -> dict[str, dict[str, int]]:
        """For each of ``jobs``: host -> news counter of the part it holds. Thread-safe."""
        with self._lock:
            return {job: dict(self._outputs.get(job, (0, {}))[1]) for job in jobs}

    def pack(self, job: str, src: str, news: int, agent: Any) -> Any:
        """The Ray object of ``src``'s part of ``job``'s outputs (asked of ``agent`` once)."""
        return self._packs.get((job, src, news), lambda: agent.pack.remote(job))


class Checkpoints:
    """Where each job's tasks ran: ``$ACCELNET_CHECKPOINT_DIR`` is a folder of the node's
    own, so a later attempt on another node gets the parts the earlier ones left (asked of
    those nodes' agents as Ray objects, once per (job, host, news)). The backend's thread
    only."""

    def __init__(self) -> None:
        self._news = 0
        self._hosts: OrderedDict[str, dict[str, int]] = OrderedDict()  # job -> host -> news
        self._packs = PackCache()

    def ran(self, t: RayTask) -> None:
        """A task of ``t``'s job ended on its host (its checkpoint part may have changed)."""
        self._news += 1
        hosts = self._hosts.pop(t.spec.job_id, {})
        hosts[t.host] = self._news
        self._hosts[t.spec.job_id] = hosts
        while len(self._hosts) > _JOBS_KEPT:
            self._hosts.popitem(last=False)

    def sources(self, job: str, host: str) -> dict[str, int]:
        """The hosts other than ``host`` where ``job``'s tasks ran: host -> news."""
        return {h: n for h, n in self._hosts.get(job, {}).items() if h != host}

    def pack(self, job: str, src: str, news: int, agent: Any) -> Any:
        """The Ray object of ``src``'s checkpoint folder of ``job`` (asked of ``agent`` once)."""
        return self._packs.get((job, src, news), lambda: agent.pack_checkpoint.remote(job))


def keep_logs(spec: TaskSpec, logs: Mapping[str, bytes]) -> None:
    folder = Path(spec.log_dir)
    folder.mkdir(parents=True, exist_ok=True)
    for stream, data in logs.items():
        (folder / f"{spec.task_id}.{stream}").write_bytes(data)


def first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0][:300]
