"""Run tasks on this machine: one long-lived worker process per device.

A worker (:mod:`accelnet.runtime.worker`) starts on the first task for its device, in a
session of its own, and serves that device's tasks one at a time until it is recycled or the
backend closes. Commands run as ``/bin/sh -c`` in their own session under the worker;
payloads (cloudpickled functions) run inside the worker, which is what makes them cheap.

How a task flows: :meth:`LocalBackend.launch` checks the spec, builds the task's
environment, starts the device's worker if it has none and sends it the task; the worker
reports ``started`` and ``done``; :meth:`LocalBackend.poll` turns those messages into
:class:`~accelnet.runtime.backend.TaskEvent` s stamped with the injected clock. Every
launched task gets exactly one terminal event (SUCCEEDED, FAILED, CANCELLED or LOST).

Time: event times come from the injected clock only; ``time.monotonic`` measures real
intervals (payload timeouts, bounded waits), which real processes need.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from pathlib import Path
from typing import Any, Literal

import cloudpickle

from accelnet.fabric.model import Device
from accelnet.runtime import worker as _worker
from accelnet.runtime.backend import (
    Backend,
    SupportsHandoff,
    SupportsLiveLogs,
    SupportsRefresh,
    SupportsWorkers,
    TaskEvent,
    TaskEventKind,
    TaskSpec,
    WorkerLoss,
    check_launch,
    lookup_device,
)
from accelnet.runtime.clock import Clock
from accelnet.runtime.handoff import HandoffArea
from accelnet.runtime.runas import OsUser, hand_over, task_identity, user_for
from accelnet.runtime.taskenv import device_env, device_path, scrub_env, task_env_delta

Recycle = Literal["always", "after-python", "never"]
RECYCLE_POLICIES: tuple[Recycle, ...] = ("always", "after-python", "never")

_INLINE_PAYLOAD_BYTES = 64 * 1024  # larger payloads go through a file: launch never blocks
_LIVENESS_CHECK_S = 1.0  # poll looks at worker processes at least this often
_REAP_TIMEOUT_S = 10.0  # waiting for a SIGKILLed process to be reaped


@dataclass(slots=True)
class _Task:
    spec: TaskSpec
    pid: int | None = None  # from the worker's "started"
    deadline: float | None = None  # time.monotonic(); payload tasks with a timeout, once started


@dataclass(slots=True, eq=False)
class _Worker:
    device: str
    proc: subprocess.Popen[bytes]
    conn: Connection
    log: Path
    task: _Task | None = None
    pong: int = -1
    dead: bool = False
    sys_path: list[str] | None = None  # the sys.path last sent (payloads import with it)
    beat: float = 0.0  # when it was last heard from (the injected clock)


class LocalBackend(Backend, SupportsRefresh, SupportsLiveLogs, SupportsHandoff, SupportsWorkers):
    """Runs tasks as local processes, one worker process per device.

    ``devices`` maps device ids to devices (e.g. ``fabric.devices``); ``workdir`` holds the
    per-device scratch dirs (``scratch/<host>/<name>``, exported as ``ACCELNET_SCRATCH``),
    the workers' own logs (``workers/<host>/<name>.log``) and spilled payloads. ``recycle``
    says when :meth:`refresh` restarts a device's worker: ``"always"``, ``"after-python"``
    (when a payload ran in it since the last refresh: payloads can leave imports and global
    state behind) or ``"never"``. ``emulated`` fabrics run every task with
    ``CUDA_VISIBLE_DEVICES=""`` and ``ACCELNET_EMULATED=1``. Data hand-off
    (:mod:`accelnet.runtime.handoff`): jobs' outputs in ``<workdir>/outputs/<job>``, each
    attempt's shared memory in a folder under ``shm_base`` (default ``/dev/shm``).

    ``task_cwd``: where tasks start, the backend's own working folder (``"inherit"``, as
    ``accelnet run`` wants: job files name paths relative to it) or the device's scratch dir
    (``"scratch"``, emptied between jobs, 0700; what the service uses). Tasks run as a
    tenant's user (``run_as``) always start in their scratch dir.

    ``kill_grace_s`` is how long a cancelled or timed-out command has between SIGTERM and
    SIGKILL; ``ping_timeout_s`` bounds :meth:`refresh`'s health check. Workers send a
    heartbeat every ``heartbeat_s`` (:meth:`heartbeats`; None: none). ``device_reset``
    resets a device's hardware in :meth:`reset` (e.g.
    :class:`accelnet.devices.reset.NvidiaSmiReset`); ``(done, detail)``.

    All methods but :meth:`wakeup` are to be called from one thread. Usable as a context
    manager (closes on exit).
    """

    def __init__(
        self,
        devices: Mapping[str, Device],
        workdir: str | Path,
        clock: Clock,
        recycle: Recycle = "after-python",
        emulated: bool = False,
        *,
        kill_grace_s: float = 1.0,
        ping_timeout_s: float = 10.0,
        shm_base: Path | None = None,
        heartbeat_s: float | None = 1.0,
        device_reset: Callable[[Device], tuple[bool, str]] | None = None,
        run_as: Mapping[str, OsUser] | None = None,
        task_cwd: Literal["inherit", "scratch"] = "inherit",
    ) -> None:
        if recycle not in RECYCLE_POLICIES:
            raise ValueError(f"unknown recycle policy {recycle!r}; valid: {RECYCLE_POLICIES}")
        self._devices = dict(devices)
        self._run_as = dict(run_as or {})
        if task_cwd not in ("inherit", "scratch"):
            raise ValueError(f"task_cwd {task_cwd!r}: inherit or scratch")
        self._task_cwd = task_cwd
        self._workdir = Path(workdir).resolve()
        self._handoff = HandoffArea(self._workdir, shm_base)
        self._clock = clock
        self._recycle = recycle
        self._emulated = emulated
        self._kill_grace_s = kill_grace_s
        self._ping_timeout_s = ping_timeout_s
        self._heartbeat_s = heartbeat_s
        self._device_reset = device_reset
        self._losses: list[WorkerLoss] = []
        self._workers: dict[str, _Worker] = {}
        self._tasks: dict[str, str] = {}  # running task id -> device id
        self._python_ran: set[str] = set()  # devices with a payload since their last refresh
        self._ever_started: set[str] = set()
        self._events: list[TaskEvent] = []
        self._log_dirs: dict[str, str] = {}  # a task's log_dir -> resolved
        self._checked_at = 0.0  # when exit statuses were last read (monotonic)
        self._ping_token = 0
        self._closed = False
        self._wake_lock = threading.Lock()  # wakeup() may come from any thread
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)

    # -- the Backend contract ---------------------------------------------------------------

    def launch(self, task: TaskSpec) -> None:
        """Send ``task`` to its device's worker, starting the worker first if need be.

        Returns at once: STARTED and the outcome come from :meth:`poll`; a worker that cannot
        be spawned gives a FAILED event. Raises ``ValueError`` for a malformed spec (not
        exactly one of command/payload, a non-string env value, a task id already running),
        ``KeyError`` for an unknown device, ``RuntimeError`` if the device is still running
        another task or the backend is closed.
        """
        self._check_open()
        check_launch(task, self._tasks)
        device = self._device(task.device)
        w = self._workers.get(device.id)
        if w is not None:
            self._drain(w)  # a worker that died is noticed here (EOF) or when sent to
        w = self._workers.get(device.id)
        if w is not None and w.task is not None:
            raise RuntimeError(
                f"device {device.id} is busy with task {w.task.spec.task_id}; "
                f"cannot launch {task.task_id}"
            )
        req: dict[str, Any] = {
            "task_id": task.task_id,
            "command": task.command,
            "payload": None,
            "payload_path": None,
            # the worker has the parent's environment and the device's from its start
            "env": task_env_delta(task, self._handoff.task_env(task, self._here(task))),
            "out": self._log_path(task, "out"),
            "err": self._log_path(task, "err"),
            "timeout_s": task.timeout_s,
            "grace_s": self._kill_grace_s,
            "sys_path": None,
            "user": None,
            # where the task starts: its device's scratch dir, or the backend's own cwd
            "cwd": str(self._scratch(device)) if self._task_cwd == "scratch" else None,
        }
        try:
            if task.payload is not None:
                self._python_ran.add(device.id)
                if len(task.payload) <= _INLINE_PAYLOAD_BYTES:
                    req["payload"] = task.payload
                else:
                    spill = self._workdir / "payloads" / f"{task.task_id}.pkl"
                    _private_dir(spill.parent)
                    spill.write_bytes(task.payload)
                    req["payload_path"] = str(spill)
            if w is None:
                w = self._start(device)
            user = user_for(self._run_as, task.tenant)
            if user is not None:
                self._hand_over(task, device, user, req)
        except OSError as e:
            self._emit(task.task_id, TaskEventKind.FAILED, error=f"could not start: {e}")
            return
        if w.dead:
            self._emit(task.task_id, TaskEventKind.FAILED, error="the worker died at start")
            return
        if task.payload is not None and w.sys_path != sys.path:
            w.sys_path = req["sys_path"] = list(sys.path)  # sent when it changed
        w.task = _Task(task)
        self._tasks[task.task_id] = device.id
        self._send(w, ("run", req))

    def _hand_over(self, task: TaskSpec, device: Device, user: OsUser, req: dict[str, Any]) -> None:
        """Make ``task`` run as ``user`` (:mod:`accelnet.runtime.runas`): its scratch folder
        (its working folder) and its job's output folder become the user's."""
        scratch = self._scratch(device)
        hand_over(scratch, user, self._workdir)
        hand_over(self._handoff.output(task.job_id), user, self._workdir)
        req["user"], req["cwd"] = user.to_wire(), str(scratch)
        req["env"] = {**task_identity(user, str(scratch)), **req["env"]}

    def cancel(self, task_id: str) -> None:
        """Stop a running task and its whole process tree; a no-op if it is not running.

        A command's process group gets SIGTERM, then SIGKILL after ``kill_grace_s``; the
        worker does that and reports CANCELLED (from :meth:`poll`). A payload's worker is
        killed with its process group at once (CANCELLED is queued before this returns) and
        restarted with the device's next task. If the task finished before the cancel got to
        it, its own outcome stands: every task gets exactly one terminal event. Does not block
        beyond reaping a killed worker.
        """
        device = self._tasks.get(task_id)
        if device is None:
            return
        w = self._workers[device]
        self._drain(w)
        if w.dead or w.task is None or w.task.spec.task_id != task_id:
            return
        if w.task.spec.payload is not None:
            self._kill(w)  # first: its output is kept while it still has the task
            self._finish(w, TaskEventKind.CANCELLED, error="cancelled")
        else:
            self._send(w, ("cancel", task_id))

    def poll(self, timeout: float) -> list[TaskEvent]:
        """Events since the last call, waiting up to ``timeout`` s for the first.

        Returns as soon as there is at least one event, or ``[]`` when ``timeout`` passes
        (or at once after :meth:`close`, or on :meth:`wakeup`). Also where payload timeouts
        are enforced and dead workers are noticed. Never raises for a task's failure.
        """
        end = time.monotonic() + max(0.0, timeout)
        while not self._closed:
            self._collect()
            if self._events:
                events, self._events = self._events, []
                return events
            now = time.monotonic()
            if end <= now:
                return []
            wait_s = min(end - now, _LIVENESS_CHECK_S)
            deadlines = [
                w.task.deadline
                for w in self._workers.values()
                if w.task is not None and w.task.deadline is not None
            ]
            if deadlines:
                wait_s = max(0.0, min(wait_s, min(deadlines) - now))
            ready = wait([self._wake_r, *(w.conn for w in self._workers.values())], wait_s)
            if self._wake_r in ready:
                with contextlib.suppress(BlockingIOError):
                    os.read(self._wake_r, 4096)
                self._collect()
                events, self._events = self._events, []
                return events
        return []

    def close(self) -> None:
        """Stop every worker and every task's process tree; idempotent.

        Workers are asked to exit (a running command gets SIGTERM, then SIGKILL after
        ``kill_grace_s``); whatever is left after that is SIGKILLed. Tasks still running get
        no further events. Blocks for at most about ``kill_grace_s`` + 1 s.
        """
        if self._closed:
            return
        self._closed = True
        for w in list(self._workers.values()):
            self._drain(w)  # learn the pids of commands that have started
        workers = list(self._workers.values())
        for w in workers:
            if w.task is None or w.task.spec.command is not None:
                self._send(w, ("exit",))
        end = time.monotonic() + self._kill_grace_s + 1.0
        for w in workers:
            if w.task is None or w.task.spec.command is not None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    w.proc.wait(max(0.0, end - time.monotonic()))
            self._kill(w)
        self._tasks.clear()
        self._handoff.close()
        with self._wake_lock:
            os.close(self._wake_r)
            os.close(self._wake_w)

    # -- SupportsRefresh --------------------------------------------------------------------

    def refresh(self, device: str) -> tuple[bool, str]:
        """Clean ``device`` for its next job: (ok, detail); blocks up to ``ping_timeout_s``.

        Empties the device's scratch dir; restarts its worker as the recycle policy says
        (and starts one if its last worker died); a new worker must answer a ping (a kept
        one has just answered its last task).
        A device that never had a worker gets none started. Not ok if the device is running a
        task, the scratch dir cannot be emptied, or the worker cannot be started or does not
        answer. Raises ``KeyError`` for an unknown device, ``RuntimeError`` once closed.
        """
        self._check_open()
        dev = self._device(device)
        w = self._workers.get(dev.id)
        if w is not None:
            self._drain(w)
            if not w.dead and w.proc.poll() is not None:
                self._on_death(w)
            w = self._workers.get(dev.id)
        if w is not None and w.task is not None:
            return False, f"device {dev.id} is running task {w.task.spec.task_id}"
        scratch = self._scratch(dev)
        try:
            _private_dir(scratch)
            if self._run_as and scratch.stat().st_uid != os.geteuid():  # back from a user
                os.chown(scratch, os.geteuid(), os.getegid())
            for entry in scratch.iterdir():
                if entry.is_dir() and not entry.is_symlink():
                    shutil.rmtree(entry)
                else:
                    entry.unlink()
        except OSError as e:
            return False, f"could not empty scratch dir {scratch}: {e}"
        python_ran = dev.id in self._python_ran
        self._python_ran.discard(dev.id)
        recycle = self._recycle == "always" or (self._recycle == "after-python" and python_ran)
        if dev.id not in self._ever_started:
            return True, "scratch emptied; no worker started yet"
        if w is not None and recycle:
            self._stop(w)
            w = None
        restarted = w is None
        if w is None:
            try:
                w = self._start(dev)
            except OSError as e:
                return False, f"could not start a worker: {e}"
        if not restarted and not w.dead and w.proc.poll() is None:
            # it has just reported its last task: alive; a ping would only add a round trip
            return True, f"scratch emptied; worker kept (pid {w.proc.pid})"
        answered = self._ping(w, self._ping_timeout_s)
        if answered is None:
            how = "died" if w.dead else f"did not answer a ping in {self._ping_timeout_s:g} s"
            return False, f"worker pid {w.proc.pid} {how}{self._log_tail(w)}"
        what = "restarted" if restarted else "kept"
        return True, f"scratch emptied; worker {what} (pid {w.proc.pid}, ping {answered:.1f} ms)"

    # -- extras -----------------------------------------------------------------------------

    def wakeup(self) -> None:
        """Make a :meth:`poll` in progress (or the next one) return early; thread-safe."""
        with self._wake_lock, contextlib.suppress(BlockingIOError):
            if not self._closed:
                os.write(self._wake_w, b"!")

    def output_location(self, job_id: str) -> str:
        """``<workdir>/outputs/<job>``. See :class:`SupportsHandoff`."""
        return str(self._handoff.output(job_id))

    def live_shm(self) -> list[Path]:
        """The shared-memory folders of attempts still running (diagnostics, tests)."""
        return self._handoff.live_shm()

    def live_log(self, task_id: str, stream: str) -> Path | None:
        """Where a running task's output is until it ends (its worker's spool); None if the
        task is not running. See :class:`SupportsLiveLogs`."""
        device = self._tasks.get(task_id)
        return None if device is None else Path(f"{self._spool(device)}.{stream}")

    def worker_pid(self, device: str) -> int | None:
        """The pid of ``device``'s worker if one is running (diagnostics, tests)."""
        w = self._workers.get(device)
        return None if w is None or w.dead else w.proc.pid

    # -- SupportsWorkers -------------------------------------------------------------------

    def heartbeats(self) -> dict[str, tuple[float, int]]:
        """See :class:`SupportsWorkers`."""
        self._collect()
        return {d: (w.beat, w.proc.pid) for d, w in self._workers.items() if not w.dead}

    def take_losses(self) -> list[WorkerLoss]:
        """See :class:`SupportsWorkers` (deaths :meth:`poll` noticed; reads nothing)."""
        out, self._losses = self._losses, []
        return out

    def kill_worker(self, device: str, why: str) -> bool:
        """See :class:`SupportsWorkers`."""
        w = self._workers.get(device)
        if w is None or w.dead:
            return False
        task = w.task
        code = self._kill(w)
        if task is not None:
            self._finish(w, TaskEventKind.LOST, exit_code=code, error=f"worker killed: {why}")
        return True

    def reset(self, device: str, hardware: bool = False) -> tuple[bool, str]:
        """See :class:`SupportsWorkers`: the worker is stopped (or killed) even if it was
        kept by the recycle policy; the new one must answer a ping."""
        self._check_open()
        dev = self._device(device)
        w = self._workers.get(dev.id)
        if w is not None and w.task is not None:
            return False, f"device {dev.id} is running task {w.task.spec.task_id}"
        notes = []
        if w is not None:
            self._stop(w)
            notes.append(f"worker pid {w.proc.pid} stopped")
        if hardware and self._device_reset is not None and not self._emulated:
            notes += [d for d in self._device_reset(dev)[1:] if d]
        self._ever_started.add(dev.id)  # a reset device gets a worker, to prove it answers
        self._python_ran.discard(dev.id)
        ok, detail = self.refresh(dev.id)
        return ok, "; ".join([*notes, detail])

    def scratch_dir(self, device: str) -> Path:
        """``device``'s scratch dir (``ACCELNET_SCRATCH`` of its tasks). ``KeyError`` if unknown."""
        return self._scratch(self._device(device))

    def __enter__(self) -> LocalBackend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- workers ----------------------------------------------------------------------------

    def _start(self, device: Device) -> _Worker:
        """Spawn ``device``'s worker (does not wait for it to come up). Raises ``OSError``."""
        log = self._workdir / "workers" / f"{device_path(device.id)}.log"
        _private_dir(self._workdir / "workers")
        _private_dir(log.parent)
        _private_dir(self._workdir / "scratch")
        _private_dir(self._scratch(device))
        env = scrub_env(os.environ)
        env.update(device_env(device, self._scratch(device), self._emulated))
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
        w = _Worker(device.id, proc, Connection(ours.detach()), log)
        self._workers[device.id] = w
        self._ever_started.add(device.id)
        w.beat = self._clock.now()
        init = {"parent_pid": os.getpid(), "spool": str(self._spool(device.id)),
                "beat_s": self._heartbeat_s}  # fmt: skip
        self._send(w, ("init", init))
        return w

    def _send(self, w: _Worker, msg: tuple[Any, ...]) -> None:
        try:
            w.conn.send(msg)
        except OSError:
            self._on_death(w)

    def _stop(self, w: _Worker) -> None:
        """Ask an idle worker to exit; kill it if it has not within a second."""
        self._send(w, ("exit",))
        with contextlib.suppress(subprocess.TimeoutExpired):
            w.proc.wait(1.0)
        self._kill(w)

    def _kill(self, w: _Worker) -> int | None:
        """SIGKILL the worker's process group, reap the worker, forget it; its exit code."""
        w.dead = True
        if self._workers.get(w.device) is w:
            del self._workers[w.device]
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(w.proc.pid, signal.SIGKILL)
        if w.task is not None and w.task.pid is not None and w.task.spec.command is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(w.task.pid, signal.SIGKILL)  # the command's own session
        code: int | None = None
        with contextlib.suppress(subprocess.TimeoutExpired):
            code = w.proc.wait(_REAP_TIMEOUT_S)
        w.conn.close()
        if w.task is not None:  # it died with a task: keep what the task wrote
            self._salvage(w.device, w.task.spec)
        return code

    def _salvage(self, device: str, spec: TaskSpec) -> None:
        spool = self._spool(device)
        for stream in _worker.STREAMS:
            path = f"{spool}.{stream}"
            with contextlib.suppress(OSError):
                if os.path.getsize(path) > 0:
                    _worker.move_log(path, self._log_path(spec, stream))

    def _on_death(self, w: _Worker) -> None:
        """The worker is gone (EOF, broken pipe or exited): its task is LOST."""
        if w.dead:
            return
        task = w.task
        code = self._kill(w)
        how = "vanished" if code is None else _worker.describe_exit(code)
        if not self._closed:
            self._losses.append(WorkerLoss(w.device, self._clock.now(), w.proc.pid, how))
        if task is not None:
            error = f"worker of {w.device} (pid {w.proc.pid}) {how}" + self._log_tail(w)
            self._finish(w, TaskEventKind.LOST, exit_code=code, error=error)

    def _ping(self, w: _Worker, timeout: float) -> float | None:
        """Round trip to the worker in ms; None if it died or took over ``timeout`` s."""
        self._ping_token += 1
        token = self._ping_token
        t0 = time.monotonic()
        end = t0 + timeout
        self._send(w, ("ping", token))
        while not w.dead and w.pong != token:
            left = end - time.monotonic()
            if left <= 0:
                return None
            wait([w.conn], left)
            self._drain(w)
        return None if w.dead else (time.monotonic() - t0) * 1000.0

    # -- messages ---------------------------------------------------------------------------

    def _collect(self) -> None:
        """Read every message waiting; notice dead workers; enforce payload timeouts."""
        workers = list(self._workers.values())
        if workers:
            by_conn = {id(w.conn): w for w in workers}
            for conn in wait([w.conn for w in workers], 0):
                self._drain(by_conn[id(conn)])
        now = time.monotonic()
        # a dead worker's connection ends (EOF), which draining notices; exit statuses are
        # also read now and then, for a worker whose connection lingers
        check = now - self._checked_at >= _LIVENESS_CHECK_S
        if check:
            self._checked_at = now
        for w in workers:
            if w.dead:
                continue
            if check and w.proc.poll() is not None:
                self._drain(w)
                self._on_death(w)
            elif w.task is not None and w.task.deadline is not None and w.task.deadline <= now:
                timeout = w.task.spec.timeout_s
                self._kill(w)
                self._finish(w, TaskEventKind.FAILED, error=f"timed out after {timeout:g} s")

    def _drain(self, w: _Worker) -> None:
        """Handle the messages ``w`` has sent, without blocking for more."""
        while not w.dead:
            try:
                if not w.conn.poll(0):
                    return
                msg = w.conn.recv()
            except (EOFError, OSError):
                self._on_death(w)
                return
            self._handle(w, msg)

    def _handle(self, w: _Worker, msg: tuple[Any, ...]) -> None:
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
            self._finish(w, TaskEventKind(kind), exit_code=code, error=error, result=result)

    def _finish(self, w: _Worker, kind: TaskEventKind, **fields: Any) -> None:
        """The terminal event of ``w``'s task (``fields``: exit_code, error, result); frees
        the device."""
        assert w.task is not None
        task_id = w.task.spec.task_id
        w.task = None
        self._tasks.pop(task_id, None)
        self._emit(task_id, kind, **fields)

    def _emit(self, task_id: str, kind: TaskEventKind, **fields: Any) -> None:
        if kind is not TaskEventKind.STARTED:
            self._handoff.task_ended(task_id)  # its attempt's shared memory goes with the last
        self._events.append(TaskEvent(task_id, kind, self._clock.now(), **fields))

    # -- small helpers ----------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("the backend is closed")

    def _device(self, device_id: str) -> Device:
        return lookup_device(self._devices, device_id)

    def _here(self, task: TaskSpec) -> int:
        """How many of the task's gang run on this backend's devices (a backend may hold
        one machine's share of a gang that spans several)."""
        return sum(1 for d in task.devices if d in self._devices)

    def _scratch(self, device: Device) -> Path:
        return self._workdir / "scratch" / device_path(device.id)

    def _spool(self, device: str) -> Path:
        return self._workdir / "workers" / f"{device_path(device)}.spool"

    def _log_path(self, spec: TaskSpec, stream: str) -> str:
        log_dir = self._log_dirs.get(spec.log_dir)
        if log_dir is None:
            log_dir = self._log_dirs[spec.log_dir] = str(Path(spec.log_dir).resolve())
            with contextlib.suppress(OSError):  # the worker makes it if this cannot
                _private_dir(Path(log_dir))  # the job logs: the service user's only
        return f"{log_dir}/{spec.task_id}.{stream}"

    @staticmethod
    def _log_tail(w: _Worker) -> str:
        text = _worker.tail(str(w.log))
        return f"; its log ends:\n{text}" if text else ""


def _private_dir(path: Path) -> None:
    """Make ``path`` (and missing parents) and leave it readable by its owner only (0700):
    one user's tasks cannot read another's scratch, logs or payloads. Raises ``OSError``."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    mode = path.stat().st_mode & 0o777
    if mode & 0o066 or mode & 0o700 != 0o700:  # o+x (0711, :func:`runas.hand_over`) is kept
        path.chmod(0o700)
