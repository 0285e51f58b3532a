"""The accelnet agent on one Ray node: that node's devices, run by a :class:`LocalBackend`.

:class:`~accelnet.runtime.ray.backend.RayBackend` starts one agent per node, as a Ray
actor pinned to the node (node affinity, not soft; ``num_cpus=0``). In Ray's resource view
the agent holds the node's GPUs that accelnet runs (``num_gpus``: as many as Ray counts on
the node, at most accelnet's), so that Ray Train, Ray Serve or anyone else's Ray tasks on
a shared cluster never see them as free; accelnet itself still chooses the device of each
task (``CUDA_VISIBLE_DEVICES`` set per task, never Ray's remapping). The agent runs the
node's share of accelnet exactly as it runs on one machine: one worker process per device,
commands in process groups of their own (cancel and timeouts kill the whole tree),
payloads inside the device's worker, ``CUDA_VISIBLE_DEVICES`` set by accelnet to the
device it chose, logs through spool files, each attempt's shared memory. Tasks also see
``ACCELNET_RAY_NODE`` (the node's id). The worker processes are the agent's children and
die with it: a node that goes away takes its tasks along.

Threads: the :class:`LocalBackend` belongs to one *pump* thread, which runs the calls the
actor's methods queue (:meth:`NodeAgent.launch`, :meth:`NodeAgent.refresh`, ...) and
polls the backend; :meth:`NodeAgent.events` hands what it gathered to the driver, which
keeps one such call outstanding per agent (a long poll: it returns at the first event or
after ``timeout``), so the driver also hears from a live agent at least that often.

Files: on a file system the driver shares (the driver's workdir holds the token it was
given) the node's folders are ``<driver workdir>/nodes/<host>`` and logs go straight to
the driver's log folder; elsewhere they are under the node's temporary folder and each
ended task's logs travel back with its event. Jobs' output folders are the node's own;
:meth:`NodeAgent.pack` and the ``parts`` of :meth:`NodeAgent.launch` move a job's outputs
between nodes as Ray objects (a tar of the folder); :meth:`NodeAgent.pack_checkpoint` and
the same ``parts`` bring a retried job's checkpoint folder (``$ACCELNET_CHECKPOINT_DIR``)
from the nodes it ran on before, the newer of two files of one name winning.
"""

from __future__ import annotations

import contextlib
import io
import os
import queue
import sys
import tarfile
import tempfile
import threading
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TypeVar

from accelnet.devices.reset import NvidiaSmiReset
from accelnet.runtime.backend import TaskEvent, TaskEventKind, TaskSpec
from accelnet.runtime.clock import SystemClock
from accelnet.runtime.local.backend import LocalBackend, Recycle
from accelnet.runtime.local.handoff import CHECKPOINT_DIR
from accelnet.runtime.local.worker import free_port
from accelnet.runtime.ray.nodes import NodeReport, build_fabric_of
from accelnet.runtime.ray.parts import CHECKPOINT_PART

NODE_ENV = "ACCELNET_RAY_NODE"
BIND_ENV = "ACCELNET_BIND"  # the node's address: where a service replica listens
_IDLE_POLL_S = 0.5  # the pump's longest wait for its backend (calls wake it at once)
_EARLY_KEPT = 10_000  # cancels of tasks not launched (yet): kept up to this many
_LINGER_S = 0.002  # news of a start waits this long for the task's end
_T = TypeVar("_T")


@dataclass(frozen=True, slots=True)
class AgentSetup:
    """What an agent is told when it starts (plain data)."""

    report: NodeReport  # with the fabric's name of the host
    session: str  # the driver's session (folder names)
    driver_workdir: str
    token: str  # found in ``<driver_workdir>/.ray-<session>``: a shared file system
    recycle: Recycle = "per-tenant"
    kill_grace_s: float = 1.0
    heartbeat_s: float | None = 1.0
    ping_timeout_s: float = 10.0


def token_file(workdir: str | Path, session: str) -> Path:
    """Where the driver leaves its token (agents that can read it share its files)."""
    return Path(workdir) / f".ray-{session}"


def pack_folder(folder: Path) -> bytes | None:
    """A tar of ``folder``'s contents (None if it does not exist); files keep their
    modification times to the nanosecond's float (PAX headers)."""
    if not folder.is_dir():
        return None
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for entry in sorted(folder.iterdir()):
            tar.add(entry, arcname=entry.name)
    return buf.getvalue()


def unpack_into(blob: bytes, folder: Path) -> None:
    """Extract a :func:`pack_folder` tar into ``folder`` (made if missing; files of the
    same name are replaced; nothing may land outside it)."""
    folder.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(blob), mode="r") as tar:
        tar.extractall(folder, filter="data")


def unpack_newer(blob: bytes, folder: Path) -> int:
    """Extract the members of a :func:`pack_folder` tar that ``folder`` lacks or holds
    an older copy of (by modification time): parts of one checkpoint folder from several
    nodes merge, and the latest save of a file wins. The number extracted."""
    folder.mkdir(parents=True, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(blob), mode="r") as tar:
        newer = []
        for member in tar.getmembers():
            try:
                have = (folder / member.name).lstat().st_mtime
            except OSError:
                have = None
            if have is None or (member.isfile() and member.mtime > have):
                newer.append(member)
        tar.extractall(folder, members=newer, filter="data")
    return sum(m.isfile() for m in newer)


def _ray_gpu_ids() -> list[str]:
    """The GPU ids Ray gave this actor (its ``num_gpus``); none outside Ray."""
    try:
        import ray  # noqa: PLC0415

        return [str(i) for i in ray.get_gpu_ids()]
    except Exception:  # not in a Ray worker
        return []


class NodeAgent:
    """The body of the per-node actor (see the module docstring). Its methods are called
    by Ray from several threads at once; all of them return quickly except
    :meth:`events` (up to its timeout) and the device operations (:meth:`refresh`,
    :meth:`reset`: up to the backend's ping timeout)."""

    def __init__(self, setup: AgentSetup) -> None:
        self.setup = setup
        report = setup.report
        self.host = report.host
        import ray  # noqa: PLC0415 (the agent runs inside Ray)

        self.address = str(ray.util.get_node_ip_address())  # as Ray knows this node
        fabric = build_fabric_of([report])
        self.devices = tuple(fabric.devices)
        self.shared = _reads_token(setup)
        base = (
            Path(setup.driver_workdir) / "nodes"
            if self.shared
            else Path(tempfile.gettempdir()) / f"accelnet-ray-{setup.session}"
        )
        self.workdir = base / self.host
        self.workdir.mkdir(parents=True, exist_ok=True)
        self._logs = self.workdir / "logs"  # task logs, when the driver's are out of reach
        os.environ[NODE_ENV] = report.node_id  # device workers (and their tasks) inherit it
        os.environ[BIND_ENV] = self.address  # where a task's server listens (services)
        self._clock = SystemClock()
        self.backend = LocalBackend(
            fabric.devices, self.workdir, self._clock, recycle=setup.recycle,
            emulated=report.emulated, kill_grace_s=setup.kill_grace_s,
            ping_timeout_s=setup.ping_timeout_s, heartbeat_s=setup.heartbeat_s,
            device_reset=NvidiaSmiReset(),  # real NVIDIA GPUs only, where permitted
        )  # fmt: skip
        self._calls: queue.SimpleQueue[tuple[Callable[[], Any], Future[Any]]] = queue.SimpleQueue()
        self._ready = threading.Condition()
        self._events: list[tuple[Any, ...]] = []
        self._losses: list[tuple[str, float, int, str, str | None]] = []
        self._beats: dict[str, tuple[float, int]] = {}
        self._pids: dict[str, int] = {}
        self._shipped: set[str] = set()  # tasks whose logs travel with their end
        self._running: dict[str, str] = {}  # launched, not ended: task -> device (pump only)
        self._early: set[str] = set()  # cancelled before their launch came (pump only)
        self._parts_lock = threading.Lock()
        self._unpacked: set[tuple[str, str]] = set()  # (job, source) already extracted
        self._seq = 0  # answers given (under _ready)
        self._closing = False
        self._pump_thread = threading.Thread(target=self._pump, name="agent-pump", daemon=True)
        self._pump_thread.start()

    # ----- called by the driver -----------------------------------------------------
    def hello(self) -> dict[str, Any]:
        """Who and where the agent is (the driver waits for this before using it)."""
        return {"pid": os.getpid(), "node_id": self.setup.report.node_id, "host": self.host,
                "workdir": str(self.workdir), "shared": self.shared,
                "address": self.address, "ray_gpus": _ray_gpu_ids()}  # fmt: skip

    def rendezvous(self) -> tuple[str, int | None]:
        """This node's address (the one Ray knows it by) and a TCP port free on it now:
        where rank 0 of a gang across nodes listens (``MASTER_ADDR``, ``MASTER_PORT``)."""
        return self.address, free_port(self.address)

    def launch(
        self,
        spec: TaskSpec,
        sys_path: list[str] | None,
        parts: list[tuple[str, str]],
        *blobs: bytes | None,
    ) -> None:
        """Launch ``spec`` on its device. ``parts[i] = (job, source)`` names ``blobs[i]``,
        input outputs packed on another node (Ray has fetched them here before this
        runs): they are extracted into this node's folder of that job first, once per
        source. ``sys_path``: the driver's ``sys.path`` (its entries that exist here are
        added to the agent's, for payloads pickled by reference)."""
        for (job, source), blob in zip(parts, blobs, strict=True):
            self._take_part(job, source, blob)
        self._submit(self._starter(spec, sys_path))

    def exchange(
        self, tasks: list[tuple[TaskSpec, list[str] | None]], wait_s: float
    ) -> dict[str, Any]:
        """Launch each ``(spec, sys_path)`` (as :meth:`launch`, in order; tasks without
        inputs from elsewhere), then answer as :meth:`events` does, waiting up to
        ``wait_s``: the driver's one call per turn to this node, both its launches and its
        long poll (a short task's start and end often come back in the same answer)."""
        if tasks:
            starters = [self._starter(spec, path) for spec, path in tasks]

            def go() -> None:
                for start in starters:
                    start()

            self._submit(go)
        return self.events(wait_s)

    def _starter(self, spec: TaskSpec, sys_path: list[str] | None) -> Callable[[], None]:
        """What the pump runs to launch ``spec``."""
        if not self.shared:
            self._shipped.add(spec.task_id)
            spec = replace(spec, log_dir=str(self._logs))

        def go() -> None:
            if spec.task_id in self._early:  # its cancel overtook it
                self._early.discard(spec.task_id)
                self._shipped.discard(spec.task_id)
                self._tell(spec.task_id, TaskEventKind.CANCELLED, "cancelled")
                return
            if sys_path:
                sys.path.extend(p for p in sys_path if p not in sys.path and os.path.isdir(p))
            try:
                self.backend.launch(spec)
            except (ValueError, KeyError, RuntimeError) as exc:
                self._tell(spec.task_id, TaskEventKind.FAILED, f"could not launch: {exc}")
            else:
                self._running[spec.task_id] = spec.device

        return go

    def cancel(self, task_id: str) -> None:
        """Stop ``task_id`` and its process tree (CANCELLED comes as an event). Ray may run
        this before the :meth:`launch` it follows (a threaded actor keeps no order): a
        cancel of a task not launched yet is kept and stops it when it comes."""

        def stop() -> None:
            if task_id in self._running:
                self.backend.cancel(task_id)
            elif len(self._early) < _EARLY_KEPT:  # not launched yet (or already ended)
                self._early.add(task_id)

        self._submit(stop)

    def events(self, timeout: float) -> dict[str, Any]:
        """What happened since the last call, waiting up to ``timeout`` s for a task
        event: ``events`` (task id, kind, exit code, error, result, shipped logs, whether
        it timed out, and for an end the device's refresh that followed: (ok, detail) or
        None), worker ``losses``
        (device, age s, pid, how, the task it ran or None), heartbeat ``beats`` (device ->
        (age s, pid)), worker ``pids``, and ``seq``, which numbers the answers in the order
        their events happened (calls may overlap)."""
        with self._ready:
            self._ready.wait_for(lambda: bool(self._events) or self._closing, timeout)
            if timeout > 0 and _unfinished(self._events):  # a task that just started may
                self._ready.wait(_LINGER_S)  # end at once: one answer for both
            events, self._events = self._events, []
            self._seq += 1
            losses, self._losses = self._losses, []
            now = self._clock.now()
            beats = {d: (max(0.0, now - at), pid) for d, (at, pid) in self._beats.items()}
            losses_aged = [(d, max(0.0, now - at), pid, how, task)
                           for d, at, pid, how, task in losses]  # fmt: skip
            return {"seq": self._seq, "events": events, "losses": losses_aged,
                    "beats": beats, "pids": dict(self._pids)}  # fmt: skip

    def refresh(self, device: str) -> tuple[bool, str]:
        """:meth:`LocalBackend.refresh` on this node. (The agent also refreshes a device
        as soon as its task has ended, and sends the outcome with the task's end: the
        driver then needs no call before the device's next job.)"""
        return self._call(lambda: self.backend.refresh(device))

    def reset(self, device: str, hardware: bool) -> tuple[bool, str]:
        """:meth:`LocalBackend.reset` on this node."""
        return self._call(lambda: self.backend.reset(device, hardware))

    def kill_worker(self, device: str, why: str) -> bool:
        """:meth:`LocalBackend.kill_worker` on this node."""
        return self._call(lambda: self.backend.kill_worker(device, why))

    def live_log(self, task_id: str, stream: str) -> str | None:
        """Where a running task's output is meanwhile (a path on this node)."""
        path = self._call(lambda: self.backend.live_log(task_id, stream))
        return None if path is None else str(path)

    def pack(self, job_id: str) -> bytes | None:
        """This node's part of ``job_id``'s outputs, as a tar (None if it has none)."""
        return pack_folder(Path(self.backend.output_location(job_id)))

    def pack_checkpoint(self, job_id: str) -> bytes | None:
        """This node's ``$ACCELNET_CHECKPOINT_DIR`` of ``job_id``, as a tar (None if none)."""
        return pack_folder(self._checkpoint_dir(job_id))

    def _checkpoint_dir(self, job_id: str) -> Path:
        return Path(self.backend.output_location(job_id)) / CHECKPOINT_DIR

    def close(self) -> None:
        """Stop every task and worker of the node; idempotent."""
        if not self._closing:
            with contextlib.suppress(RuntimeError):
                self._call(self._shut)
        self._pump_thread.join(10.0)

    # ----- the pump -----------------------------------------------------------------
    def _submit(self, fn: Callable[[], _T]) -> Future[_T]:
        fut: Future[_T] = Future()
        self._calls.put((fn, fut))
        self.backend.wakeup()
        return fut

    def _call(self, fn: Callable[[], _T]) -> _T:
        if self._closing:
            raise RuntimeError(f"the agent of {self.host} is closing")
        return self._submit(fn).result()

    def _shut(self) -> None:
        self._closing = True
        self.backend.close()

    def _pump(self) -> None:
        backend = self.backend
        while True:
            while True:
                try:
                    fn, fut = self._calls.get_nowait()
                except queue.Empty:
                    break
                if fut.set_running_or_notify_cancel():
                    try:
                        fut.set_result(fn())
                    except BaseException as exc:
                        fut.set_exception(exc)
            if self._closing:
                with self._ready:
                    self._ready.notify_all()
                self._fail_calls()
                return
            got = backend.poll(_IDLE_POLL_S)
            losses = backend.take_losses()
            beats = backend.heartbeats()
            pids = {d: p for d in self.devices if (p := backend.worker_pid(d)) is not None}
            out = []
            for ev in got:
                fresh = None
                if ev.kind is not TaskEventKind.STARTED:
                    device = self._running.pop(ev.task_id, None)
                    if device is not None:
                        fresh = backend.refresh(device)  # before the next job: see refresh()
                out.append((*self._outgoing(ev), fresh))
            with self._ready:
                self._events += out
                self._losses += [(x.device, x.at, x.pid, x.how, x.task) for x in losses]
                self._beats, self._pids = beats, pids
                if self._events or self._losses:
                    self._ready.notify_all()

    def _tell(self, task_id: str, kind: TaskEventKind, error: str) -> None:
        """An outcome the agent decided itself (the backend never had the task)."""
        with self._ready:
            # the same shape as every event's (_outgoing), with no refresh after it
            self._events.append((*self._outgoing(TaskEvent(task_id, kind, 0.0, error=error)), None))
            self._ready.notify_all()

    def _fail_calls(self) -> None:
        while True:
            try:
                _, fut = self._calls.get_nowait()
            except queue.Empty:
                return
            if fut.set_running_or_notify_cancel():
                fut.set_exception(RuntimeError(f"the agent of {self.host} closed"))

    def _outgoing(self, ev: TaskEvent) -> tuple[Any, ...]:
        logs = None
        if ev.kind is not TaskEventKind.STARTED and ev.task_id in self._shipped:
            self._shipped.discard(ev.task_id)
            logs = {}
            for stream in ("out", "err"):
                path = self._logs / f"{ev.task_id}.{stream}"
                with contextlib.suppress(OSError):
                    logs[stream] = path.read_bytes()
                    path.unlink()
        return (ev.task_id, ev.kind.value, ev.exit_code, ev.error, ev.result, logs, ev.timed_out)

    def _take_part(self, job: str, source: str, blob: bytes | None) -> None:
        with self._parts_lock:
            if blob is None or (job, source) in self._unpacked:
                return
            if source.startswith(CHECKPOINT_PART):
                unpack_newer(blob, self._checkpoint_dir(job))
            else:
                unpack_into(blob, Path(self.backend.output_location(job)))
            self._unpacked.add((job, source))


def _unfinished(events: list[tuple[Any, ...]]) -> bool:
    """Whether a task started among ``events`` has not ended among them."""
    started = {e[0] for e in events if e[1] == TaskEventKind.STARTED.value}
    return bool(started - {e[0] for e in events if e[1] != TaskEventKind.STARTED.value})


def _reads_token(setup: AgentSetup) -> bool:
    try:
        return token_file(setup.driver_workdir, setup.session).read_text() == setup.token
    except OSError:
        return False
