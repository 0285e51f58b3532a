"""The local backend's worker processes: one per device, spawned, pinged, drained, killed.

A worker (:mod:`accelnet.runtime.local.worker`) starts on the first task for its device, in a
session of its own, and serves that device's tasks one at a time until it is recycled or the
backend closes; it reports ``started`` and ``done`` for each task, ``pong`` for a ping and a
heartbeat now and then. A device that runs several tasks at once (jobs holding shares of
it, or packed side by side) gets a worker per task: its *lanes*. Lane 0 is the device's own
worker; lanes 1, 2, ... are spares with their own log, spool and scratch folder, started
when the lanes before them are busy.

Internal to :class:`~accelnet.runtime.local.backend.LocalBackend`, which owns one
:class:`WorkerPool` (called from its thread only).
"""

from __future__ import annotations

import contextlib
import errno
import os
import pickle
import select
import signal
import socket
import stat
import struct
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from pathlib import Path
from typing import Any

import cloudpickle

from accelnet.fabric.model import Device
from accelnet.runtime.backend import TaskEventKind, TaskSpec
from accelnet.runtime.clock import Clock
from accelnet.runtime.local import worker as _worker
from accelnet.runtime.local.taskenv import device_env, device_path, scrub_env

LIVENESS_CHECK_S = 1.0  # poll looks at worker processes at least this often
_REAP_TIMEOUT_S = 10.0  # waiting for a SIGKILLed process to be reaped
_READ = 1 << 16  # bytes read from a worker's connection at once


@dataclass(slots=True)
class LaneTask:
    spec: TaskSpec
    pid: int | None = None  # from the worker's "started"
    deadline: float | None = None  # time.monotonic(); payload tasks with a timeout, once started


def lane_key(device: str, lane: int) -> str:
    """The key of a device's lane in :attr:`WorkerPool.workers` (lane 0: the device id)."""
    return device if lane == 0 else f"{device}#lane{lane}"


@dataclass(slots=True, eq=False)
class WorkerProcess:
    device: str
    proc: subprocess.Popen[bytes]
    conn: Connection
    log: Path
    lane: int = 0
    task: LaneTask | None = None
    pong: int = -1
    dead: bool = False
    sys_path: list[str] | None = None  # the sys.path last sent (payloads import with it)
    python_of: str | None = None  # the tenant whose payloads ran in this process, if any
    inbox: bytearray = field(default_factory=bytearray)  # bytes read, not yet a message
    spent: bool = False  # a task that asked for a fresh worker ran: replace before the next
    beat: float = 0.0  # when it was last heard from (the injected clock)
    # its connection alone, to ask whether it is readable: one system call (a Connection's
    # own poll(0) builds a selector each time)
    readable: select.poll = field(default_factory=select.poll)

    @property
    def key(self) -> str:
        return lane_key(self.device, self.lane)


class WorkerPool:
    """The workers of a backend's devices (``workers``: :func:`lane_key` -> its live
    worker; a device's own worker under the device id).

    ``workdir`` holds the workers' logs, spools and the devices' scratch dirs; ``emulated``
    and ``heartbeat_s`` are the backend's. ``finish(w, kind, **fields)`` ends ``w``'s task
    with its terminal event, ``emit(task_id, kind, **fields)`` records an event, ``lose(
    device, pid, how, task)`` notes a worker that died on its own (running ``task``, or
    idle: None).
    """

    def __init__(
        self,
        workdir: Path,
        clock: Clock,
        emulated: bool,
        heartbeat_s: float | None,
        finish: Callable[..., None],
        emit: Callable[..., None],
        lose: Callable[[str, int, str, str | None], None],
    ) -> None:
        self._workdir = workdir
        self._clock = clock
        self._emulated = emulated
        self._heartbeat_s = heartbeat_s
        self._finish = finish
        self._emit = emit
        self._lose = lose
        self.workers: dict[str, WorkerProcess] = {}
        self._top_lane: dict[str, int] = {}  # device -> the highest lane ever started
        self.ever_started: set[str] = set()
        self._log_dirs: dict[str, str] = {}  # a task's log_dir -> resolved
        self._scratch: dict[tuple[str, int], Path] = {}  # (device, lane) -> its scratch dir
        self._spares: dict[str, set[Path]] = {}  # device -> its spare lanes' scratch dirs
        self._looked: set[str] = set()  # devices whose spare lanes were looked for on disk
        self._checked_at = 0.0  # when exit statuses were last read (monotonic)
        self._ping_token = 0
        # one poll object for every worker's connection (and what the backend watches):
        # waiting costs one system call, not a selector built per wait
        self._poller = select.poll()
        self._by_fd: dict[int, WorkerProcess] = {}
        self._watched: set[int] = set()  # other fds (the backend's wake-up pipe)

    # -- processes --------------------------------------------------------------------------

    def start(self, device: Device, lane: int = 0) -> WorkerProcess:
        """Spawn the worker of ``device``'s ``lane`` (does not wait for it to come up).
        Raises ``OSError``."""
        log = self._workdir / "workers" / f"{_lane_path(device.id, lane)}.log"
        private_dir(self._workdir / "workers")
        private_dir(log.parent)
        private_dir(self._workdir / "scratch")
        private_dir(self.scratch(device, lane))
        env = scrub_env(os.environ)
        env.update(device_env(device, self.scratch(device, lane), self._emulated))
        ours, theirs = socket.socketpair()
        try:
            with theirs, open(log, "ab") as log_file:
                proc = subprocess.Popen(
                    [sys.executable, "-P", _worker.__file__, str(theirs.fileno())],
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=log_file,
                    pass_fds=(theirs.fileno(),),
                    env=env,
                    start_new_session=True,
                )
        except BaseException:
            ours.close()
            raise
        w = WorkerProcess(device.id, proc, Connection(ours.detach()), log, lane)
        w.readable.register(w.conn.fileno(), select.POLLIN)
        self.workers[w.key] = w
        self._by_fd[w.conn.fileno()] = w
        self._poller.register(w.conn.fileno(), select.POLLIN)
        self._top_lane[device.id] = max(lane, self._top_lane.get(device.id, 0))
        self.ever_started.add(device.id)
        w.beat = self._clock.now()
        init = {"parent_pid": os.getpid(), "spool": str(self.spool(device.id, lane)),
                "beat_s": self._heartbeat_s}  # fmt: skip
        self.send(w, ("init", init))
        return w

    def send(self, w: WorkerProcess, msg: tuple[Any, ...]) -> None:
        """Send ``msg`` to ``w`` (pickled here: what ``Connection.send`` would do, less the
        multiprocessing pickler it makes for every message); a failed send is its death."""
        try:
            w.conn.send_bytes(pickle.dumps(msg, pickle.HIGHEST_PROTOCOL))
        except OSError:
            self.on_death(w)

    def stop(self, w: WorkerProcess) -> None:
        """Ask an idle worker to exit; kill it if it has not within a second."""
        self.send(w, ("exit",))
        with contextlib.suppress(subprocess.TimeoutExpired):
            w.proc.wait(1.0)
        self.kill(w)

    def kill(self, w: WorkerProcess) -> int | None:
        """SIGKILL the worker's process group, reap the worker, forget it; its exit code."""
        w.dead = True
        if self.workers.get(w.key) is w:
            del self.workers[w.key]
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(w.proc.pid, signal.SIGKILL)
        if w.task is not None and w.task.pid is not None and w.task.spec.command is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(w.task.pid, signal.SIGKILL)  # the command's own session
        code: int | None = None
        with contextlib.suppress(subprocess.TimeoutExpired):
            code = w.proc.wait(_REAP_TIMEOUT_S)
        if not w.conn.closed:
            fd = w.conn.fileno()
            if self._by_fd.get(fd) is w:
                del self._by_fd[fd]
                self._poller.unregister(fd)
            w.readable.unregister(fd)  # the number may be another socket's next
        w.conn.close()
        if w.task is not None:  # it died with a task: keep what the task wrote
            self._salvage(w, w.task.spec)
        return code

    def lanes(self, device: str) -> list[WorkerProcess]:
        """The live workers of ``device``, its own first (looked up by lane, not by a scan
        of every device's workers)."""
        keys = (lane_key(device, n) for n in range(self._top_lane.get(device, 0) + 1))
        return [self.workers[k] for k in keys if k in self.workers]

    def _salvage(self, w: WorkerProcess, spec: TaskSpec) -> None:
        spool = self.spool(w.device, w.lane)
        for stream in _worker.STREAMS:
            path = f"{spool}.{stream}"
            with contextlib.suppress(OSError):
                if os.path.getsize(path) > 0:
                    _worker.move_log(path, self.log_path(spec, stream))

    def on_death(self, w: WorkerProcess) -> None:
        """The worker is gone (EOF, broken pipe or exited): its task is LOST. The loss
        names the task it was running, if any: the one most likely to have ended it (a
        payload runs in the worker's own process; a command is its child)."""
        if w.dead:
            return
        task = w.task
        code = self.kill(w)
        how = "vanished" if code is None else _worker.describe_exit(code)
        self._lose(w.device, w.proc.pid, how, None if task is None else task.spec.task_id)
        if task is not None:
            error = (f"worker of {w.device} (pid {w.proc.pid}) {how} while it ran this task"
                     + self.log_tail(w))  # fmt: skip
            self._finish(w, TaskEventKind.LOST, exit_code=code, error=error)

    def ping(self, w: WorkerProcess, timeout: float) -> float | None:
        """Round trip to the worker in ms; None if it died or took over ``timeout`` s."""
        self._ping_token += 1
        token = self._ping_token
        t0 = time.monotonic()
        end = t0 + timeout
        self.send(w, ("ping", token))
        while not w.dead and w.pong != token:
            left = end - time.monotonic()
            if left <= 0:
                return None
            wait([w.conn], left)
            self.drain(w)
        return None if w.dead else (time.monotonic() - t0) * 1000.0

    # -- messages ---------------------------------------------------------------------------

    def watch(self, fd: int) -> None:
        """Have :meth:`wait` also return when ``fd`` is readable."""
        self._watched.add(fd)
        self._poller.register(fd, select.POLLIN)

    def wait(self, timeout: float) -> set[int]:
        """Wait up to ``timeout`` s until a worker's connection or a watched fd is readable
        (or closed); the watched fds that are."""
        ready = self._poller.poll(max(0, int(timeout * 1000 + 0.999)))
        return {fd for fd, _ in ready if fd in self._watched}

    def collect(self) -> None:
        """Read every message waiting; notice dead workers; enforce payload timeouts."""
        workers = list(self.workers.values())
        if workers:
            for fd, _ in self._poller.poll(0):
                w = self._by_fd.get(fd)
                if w is not None:
                    self.drain(w, readable=True)
        now = time.monotonic()
        # a dead worker's connection ends (EOF), which draining notices; exit statuses are
        # also read now and then, for a worker whose connection lingers
        check = now - self._checked_at >= LIVENESS_CHECK_S
        if check:
            self._checked_at = now
        for w in workers:
            if w.dead:
                continue
            if check and w.proc.poll() is not None:
                self.drain(w)
                self.on_death(w)
            elif w.task is not None and w.task.deadline is not None and w.task.deadline <= now:
                timeout = w.task.spec.timeout_s
                self.kill(w)
                self._finish(
                    w, TaskEventKind.FAILED, error=f"timed out after {timeout:g} s", timed_out=True
                )

    def drain(self, w: WorkerProcess, readable: bool = False) -> None:
        """Handle the messages ``w`` has sent, without blocking for more (``readable``: its
        connection is known to be, so one read, not a poll first). Bytes are read in one
        call as they come and cut into messages here (``multiprocessing.connection``'s
        framing, which the worker sends with), not a header and a body per message."""
        while not w.dead:
            try:
                if not readable and not w.readable.poll(0):
                    return
                data = os.read(w.conn.fileno(), _READ)
            except OSError:
                self.on_death(w)
                return
            if not data:  # EOF: the worker is gone
                self.on_death(w)
                return
            w.inbox += data
            for msg in _messages(w.inbox):
                if w.dead:
                    return
                self._handle(w, msg)
            if len(data) < _READ:
                return  # all there was
            readable = False

    def _handle(self, w: WorkerProcess, msg: tuple[Any, ...]) -> None:
        op = msg[0]
        w.beat = self._clock.now()
        if op == "beat":
            return
        if op == "pong":
            w.pong = msg[1]
            return
        task = w.task
        if task is None or task.spec.task_id != msg[1]:
            return  # news of a task already finished (e.g. cancelled meanwhile)
        if op == "started":
            task.pid = msg[2]
            if task.spec.payload is not None and task.spec.timeout_s is not None:
                task.deadline = msg[3] + task.spec.timeout_s
            self._emit(task.spec.task_id, TaskEventKind.STARTED, result={"pid": msg[2]})
        elif op == "done":
            _, _, kind, code, error, blob = msg
            result = None
            if blob is not None:
                try:
                    result = cloudpickle.loads(blob)
                except Exception as e:
                    kind, error = "failed", f"the return value could not be unpickled: {e!r}"
            late = kind == _worker.TIMED_OUT  # a command past its timeout_s: FAILED, so marked
            self._finish(w, TaskEventKind.FAILED if late else TaskEventKind(kind), exit_code=code,
                         error=error, result=result, timed_out=late)  # fmt: skip

    # -- paths ------------------------------------------------------------------------------

    def scratch(self, device: Device, lane: int = 0) -> Path:
        """The scratch dir of ``device``'s ``lane`` (its path; made by whoever uses it)."""
        path = self._scratch.get((device.id, lane))
        if path is None:
            path = self._workdir / "scratch" / _lane_path(device.id, lane)
            self._scratch[device.id, lane] = path
            if lane > 0:
                self._spares.setdefault(device.id, set()).add(path)
        return path

    def scratches(self, device: Device) -> list[Path]:
        """The scratch dirs of ``device``: its own, and every spare lane's ever made (by
        this pool, or by an earlier one on the same workdir: looked for once per device)."""
        own = self.scratch(device)
        if device.id not in self._looked:
            self._looked.add(device.id)
            spares = own.with_name(f"{own.name}.lanes")
            if spares.is_dir():
                found = {p for p in spares.iterdir() if p.is_dir()}
                self._spares.setdefault(device.id, set()).update(found)
        return [own, *sorted(self._spares.get(device.id, ()))]

    def spool(self, device: str, lane: int = 0) -> Path:
        return self._workdir / "workers" / f"{_lane_path(device, lane)}.spool"

    def log_path(self, spec: TaskSpec, stream: str) -> str:
        log_dir = self._log_dirs.get(spec.log_dir)
        if log_dir is None:
            log_dir = self._log_dirs[spec.log_dir] = str(Path(spec.log_dir).resolve())
            with contextlib.suppress(OSError):  # the worker makes it if this cannot
                private_dir(Path(log_dir))  # the job logs: the service user's only
        return f"{log_dir}/{spec.task_id}.{stream}"

    @staticmethod
    def log_tail(w: WorkerProcess) -> str:
        text = _worker.tail(str(w.log))
        return f"; its log ends:\n{text}" if text else ""


def _lane_path(device: str, lane: int) -> Path:
    """A lane's relative path: the device's, and ``lane<n>`` inside it for a spare lane (a
    name no device path part can take: the device's own files sit beside it, not in it)."""
    path = device_path(device)
    return path if lane == 0 else path.with_name(f"{path.name}.lanes") / f"lane{lane}"


def private_dir(path: Path) -> os.stat_result:
    """Make ``path`` (and missing parents) and leave it readable by its owner only (0700):
    one user's tasks cannot read another's scratch, logs or payloads; its stat (before a
    chmod). Raises ``OSError`` (``NotADirectoryError`` if something else has the name)."""
    try:
        st = os.stat(path)  # one system call when it is there, as it nearly always is
    except FileNotFoundError:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        st = os.stat(path)
    if not stat.S_ISDIR(st.st_mode):
        raise NotADirectoryError(errno.ENOTDIR, "not a directory", str(path))
    mode = st.st_mode & 0o777
    if mode & 0o066 or mode & 0o700 != 0o700:  # o+x (0711, :func:`runas.hand_over`) is kept
        path.chmod(0o700)
    return st


def _messages(inbox: bytearray) -> list[Any]:
    """The whole messages at the start of ``inbox``, removed from it (a message cut short
    stays for the next read): ``multiprocessing.connection``'s framing, a 4-byte big-endian
    length (-1: an 8-byte length follows), then the pickle."""
    out: list[Any] = []
    pos, end = 0, len(inbox)
    while end - pos >= 4:
        (size,) = struct.unpack_from("!i", inbox, pos)
        head = 4
        if size == -1:
            if end - pos < 12:
                break
            (size,) = struct.unpack_from("!Q", inbox, pos + 4)
            head = 12
        if end - pos - head < size:
            break
        out.append(pickle.loads(inbox[pos + head : pos + head + size]))
        pos += head + size
    del inbox[:pos]
    return out
