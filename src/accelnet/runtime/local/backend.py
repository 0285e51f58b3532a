"""Run tasks on this machine: one long-lived worker process per device.

A worker (:mod:`accelnet.runtime.local.worker`) starts on the first task for its device, in a
session of its own, and serves that device's tasks one at a time until it is recycled or the
backend closes. Commands run as ``/bin/sh -c`` in their own session under the worker;
payloads (cloudpickled functions) run inside the worker, which is what makes them cheap.

How a task flows: :meth:`LocalBackend.launch` checks the spec, picks a free lane of the
device, builds the task's request and environment, cleans the lane (scratch folder; a
worker another tenant's Python ran in is replaced), starts the lane's worker if it has none, hands
the task's folders to its tenant's user, and sends it the task; the worker
reports ``started`` and ``done``; :meth:`LocalBackend.poll` turns those messages into
:class:`~accelnet.runtime.backend.TaskEvent` s stamped with the injected clock. Every
launched task gets exactly one terminal event (SUCCEEDED, FAILED, CANCELLED or LOST).

Time: event times come from the injected clock only; ``time.monotonic`` measures real
intervals (payload timeouts, bounded waits), which real processes need.

This module implements the Backend contract (:mod:`accelnet.runtime.backend`) and its
capabilities for one machine; the worker processes themselves (spawn, ping, messages,
kill) are in :mod:`accelnet.runtime.local.workers`.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Literal

from accelnet.fabric.model import Device
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
from accelnet.runtime.local import worker as _worker
from accelnet.runtime.local.cores import CoreBook
from accelnet.runtime.local.handoff import (
    ADDR_VARS,
    PORT_AT_START,
    PORT_VARS,
    SHM_ENV,
    HandoffArea,
)
from accelnet.runtime.local.runas import OsUser, RunAsError, TenantUsers, hand_over, task_identity
from accelnet.runtime.local.taskenv import (
    cuda_visible_devices,
    mps_env,
    omp_threads,
    task_env_delta,
)
from accelnet.runtime.local.workers import (
    LIVENESS_CHECK_S,
    LaneTask,
    WorkerPool,
    WorkerProcess,
    lane_key,
    private_dir,
)

Recycle = Literal["per-tenant", "always", "after-python", "never"]
RECYCLE_POLICIES: tuple[Recycle, ...] = ("per-tenant", "always", "after-python", "never")

_INLINE_PAYLOAD_BYTES = 64 * 1024  # larger payloads go through a file: launch never blocks


def _device_less(w: WorkerProcess) -> bool:
    """Whether ``w`` runs a CPU-only task (no device: it only runs beside one)."""
    return w.task is not None and not w.task.spec.devices


def _serving(lanes: list[WorkerProcess]) -> list[WorkerProcess]:
    """The lanes that serve their device: all but those running a CPU-only task beside it,
    which the device's refresh, reset and worker kill pass by."""
    return [w for w in lanes if not _device_less(w)]


class LocalBackend(Backend, SupportsRefresh, SupportsLiveLogs, SupportsHandoff, SupportsWorkers):
    """Runs tasks as local processes, one worker process per device.

    ``devices`` maps device ids to devices (e.g. ``fabric.devices``); ``workdir`` holds the
    per-device scratch dirs (``scratch/<host>/<name>``, exported as ``ACCELNET_SCRATCH``),
    the workers' own logs (``workers/<host>/<name>.log``) and spilled payloads. ``recycle``
    says when a device's worker is restarted. ``"per-tenant"`` (the default): a worker in
    which a tenant's Python ran (a payload run in the worker's own process: imports and
    global state stay behind) is kept for that tenant's next tasks, as Ray keeps a job's
    workers, and replaced before a task of another tenant; a payload run as a tenant's user
    (``run_as``) runs in a child of the worker, which stays clean. ``"always"``: at every
    :meth:`refresh`; ``"after-python"``: at the refresh after a payload ran in it (any
    tenant); ``"never"``. ``emulated`` fabrics run every task with
    ``CUDA_VISIBLE_DEVICES=""`` and ``ACCELNET_EMULATED=1``. Data hand-off
    (:mod:`accelnet.runtime.local.handoff`): jobs' outputs in ``<workdir>/outputs/<job>``, each
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
        recycle: Recycle = "per-tenant",
        emulated: bool = False,
        *,
        kill_grace_s: float = 1.0,
        ping_timeout_s: float = 10.0,
        shm_base: Path | None = None,
        heartbeat_s: float | None = 1.0,
        device_reset: Callable[[Device], tuple[bool, str]] | None = None,
        run_as: Mapping[str, OsUser] | TenantUsers | None = None,
        task_cwd: Literal["inherit", "scratch"] = "inherit",
    ) -> None:
        if recycle not in RECYCLE_POLICIES:
            raise ValueError(f"unknown recycle policy {recycle!r}; valid: {RECYCLE_POLICIES}")
        self._devices = dict(devices)
        self._users = run_as if isinstance(run_as, TenantUsers) else TenantUsers(run_as)
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
        self._pool = WorkerPool(
            self._workdir, clock, emulated, heartbeat_s, self._finish, self._emit, self._lose
        )
        self._workers = self._pool.workers
        self._tasks: dict[str, str] = {}  # running task id -> device id
        self._python_ran: set[str] = set()  # devices with a payload since their last refresh
        # lanes whose task ended while the device could not be refreshed (another lane was
        # busy, or a spare lane) -> whether a payload ran: cleaned before their next task
        self._dirty: dict[tuple[str, int], bool] = {}
        self._running_on: dict[str, int] = {}  # device -> its tasks running now (all lanes)
        self._cores = CoreBook()  # which cores each task that asked for CPUs runs on
        self._ever_started = self._pool.ever_started
        self._events: list[TaskEvent] = []
        self._closed = False
        self._wake_lock = threading.Lock()  # wakeup() may come from any thread
        self._woken = False  # a wake-up byte is in the pipe, not read yet
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self._pool.watch(self._wake_r)

    # -- the Backend contract ---------------------------------------------------------------

    def launch(self, task: TaskSpec) -> None:
        """Send ``task`` to its device's worker, starting the worker first if need be.

        Returns at once: STARTED and the outcome come from :meth:`poll`; a worker that cannot
        be spawned gives a FAILED event. Raises ``ValueError`` for a malformed spec (not
        exactly one of command/payload, a non-string env value, a task id already running),
        ``KeyError`` for an unknown device, ``RuntimeError`` if the backend is closed. A task
        for a device that is running another (a share of it, or a packed job beside it) runs
        in a spare worker of the device (a *lane*, :mod:`~accelnet.runtime.local.workers`).
        """
        self._check_open()
        check_launch(task, self._tasks)
        device = self._device(task.device)
        lane, w = self._free_lane(device, 0 if task.devices else 1)  # CPU-only: a spare
        scratch = self._pool.scratch(device, lane)
        try:
            ready = self._ready(task, device, lane, scratch, w)
        except Exception:  # a bug, raised to the caller: the hand-off forgets the task
            self._handoff.task_ended(task.task_id)
            raise
        if ready is None:  # it could not start (FAILED is emitted)
            return
        w, req = ready
        if w.dead:  # it died as it started (killed, or it crashed): the task never ran
            code = w.proc.returncode
            how = "vanished" if code is None else _worker.describe_exit(code)
            error = f"worker of {w.device} (pid {w.proc.pid}) {how} as the task was sent to it"
            self._emit(task.task_id, TaskEventKind.LOST, error=error + self._pool.log_tail(w))
            return
        if task.payload is not None and w.sys_path != sys.path:
            w.sys_path = req["sys_path"] = list(sys.path)  # sent when it changed
        self._send_run(w, task, req)

    def _ready(
        self, task: TaskSpec, device: Device, lane: int, scratch: Path, w: WorkerProcess | None
    ) -> tuple[WorkerProcess, dict[str, Any]] | None:
        """``task``'s request made (first: the task then counts in its attempt's hand-off
        however its launch ends), its lane cleaned and its worker prepared; the worker and
        the request, or None with the task FAILED where one of those could not be done."""
        try:
            req = self._request(task, device, scratch)  # OSError: no shared-memory base
            w, failed = self._clean_lane(task, device.id, lane, scratch, w)
            if failed is None:  # else still to be cleaned before the lane's next task
                return self._prepare(task, device, lane, scratch, w, req), req
        except (OSError, RunAsError) as e:
            failed = str(e)
        self._emit(task.task_id, TaskEventKind.FAILED, error=f"could not start: {failed}")
        return None

    def _clean_lane(
        self, task: TaskSpec, device: str, lane: int, scratch: Path, w: WorkerProcess | None
    ) -> tuple[WorkerProcess | None, str | None]:
        """Make a lane fit for ``task``: its scratch emptied if a task ran since the device
        was refreshed, its worker stopped if the recycle policy, the last task or another
        tenant's Python in it says so. The worker to use (None: start one), and why the
        lane could not be cleaned, if it could not."""
        python = self._dirty.get((device, lane))
        if python is not None:  # it ran a task and the device was not refreshed since
            if w is not None and self._recycles(python):
                self._pool.stop(w)  # nothing of the last task's Python lives on
                w = None
            failed = self._empty(scratch)
            if failed is not None:
                return w, failed
            del self._dirty[device, lane]
        if w is not None and (w.spent or (w.python_of not in (None, task.tenant)
                                           and self._recycle != "never")):  # fmt: skip
            self._pool.stop(w)  # another tenant's Python ran in it, or its task asked
            w = None
        return w, None

    def _request(self, task: TaskSpec, device: Device, scratch: Path) -> dict[str, Any]:
        """The ``run`` message for ``task``'s worker (payload, user and cores come later)."""
        # made here where tasks run as users (given to the task's user in _hand_over)
        handoff = self._handoff.task_env(task, self._here(task), make=self._users.active)
        # the worker has the parent's environment and the device's from its start
        env = task_env_delta(
            task,
            {**handoff, **mps_env(device, task.share, self._emulated),
             **self._local_devices_env(task)},
        )  # fmt: skip
        port_vars = [k for k in PORT_VARS if env.get(k) == PORT_AT_START and k not in task.env]
        return {
            "task_id": task.task_id,
            "command": task.command,
            "payload": None,
            "payload_path": None,
            "env": env,
            # the worker makes the attempt's shared-memory folder and picks the port of an
            # attempt of one task as the task starts (accelnet.runtime.local.handoff)
            "shm": handoff[SHM_ENV],  # the folder named here, whatever a job's env says
            "port_vars": port_vars or None,
            # what the worker drops with them if it can bind no port: the backend's own
            "addr_vars": [k for k in ADDR_VARS if k in env and k not in task.env]
            if port_vars
            else None,
            "out": self._pool.log_path(task, "out"),
            "err": self._pool.log_path(task, "err"),
            "timeout_s": task.timeout_s,
            "grace_s": self._kill_grace_s if task.grace_s is None else task.grace_s,
            "sys_path": None,
            "user": None,
            # where the task starts: its workdir, else its device's scratch dir, or the
            # backend's own cwd (a relative workdir is taken from there)
            "cwd": self._cwd(task, scratch if self._task_cwd == "scratch" else None),
        }

    def _prepare(
        self,
        task: TaskSpec,
        device: Device,
        lane: int,
        scratch: Path,
        w: WorkerProcess | None,
        req: dict[str, Any],
    ) -> WorkerProcess:
        """Put the payload in ``req`` (spilled to a file when large), start the lane's
        worker if it has none, and hand the task's folders to its tenant's user (when tasks
        run as users); the worker. Raises OSError or RunAsError."""
        if task.payload is not None:
            self._python_ran.add(device.id)
            if len(task.payload) <= _INLINE_PAYLOAD_BYTES:
                req["payload"] = task.payload
            else:
                spill = self._workdir / "payloads" / f"{task.task_id}.pkl"
                private_dir(spill.parent)
                spill.write_bytes(task.payload)
                req["payload_path"] = str(spill)
        if w is None:
            w = self._pool.start(device, lane)
        user = self._users.get(task.tenant)
        if user is not None:
            self._hand_over(task, scratch, user, req)
        elif task.payload is not None:
            w.python_of = task.tenant  # it runs in the worker's own process
        w.spent = task.fresh_worker
        return w

    def _send_run(self, w: WorkerProcess, task: TaskSpec, req: dict[str, Any]) -> None:
        """Hand ``task`` to worker ``w``, on its own cores if it asked for CPUs."""
        w.task = LaneTask(task)
        self._tasks[task.task_id] = w.key
        self._running_on[w.device] = self._running_on.get(w.device, 0) + 1
        cores = self._cores.lend(task.task_id, task.cpus) if task.cpus else ()
        req["cpu_set"] = list(cores) or None
        if cores and "OMP_NUM_THREADS" not in task.env:  # no more threads than its cores
            req["env"]["OMP_NUM_THREADS"] = str(omp_threads(task, len(cores)))
        self._pool.send(w, ("run", req))

    def _free_lane(self, device: Device, lane: int = 0) -> tuple[int, WorkerProcess | None]:
        """The first lane of ``device`` from ``lane`` on whose worker is free or not started,
        and its worker."""
        while True:
            w = self._workers.get(lane_key(device.id, lane))
            if w is not None:
                self._pool.drain(w)  # a worker that died is noticed here (EOF) or when sent to
            w = self._workers.get(lane_key(device.id, lane))
            if w is None or w.task is None:
                return lane, w
            lane += 1

    def _hand_over(self, task: TaskSpec, scratch: Path, user: OsUser, req: dict[str, Any]) -> None:
        """Make ``task`` run as ``user`` (:mod:`accelnet.runtime.local.runas`): its scratch folder
        (its working folder) and its job's output folder become the user's."""
        hand_over(scratch, user, self._workdir)
        hand_over(self._handoff.output(task.job_id), user, self._workdir)
        self._handoff.give(req["shm"], user.uid, user.gid)  # made by _request's task_env
        req["user"], req["cwd"] = user.to_wire(), self._cwd(task, scratch)
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
        key = self._tasks.get(task_id)
        if key is None:
            return
        w = self._workers[key]
        self._pool.drain(w)
        if w.dead or w.task is None or w.task.spec.task_id != task_id:
            return
        if w.task.spec.payload is not None:
            self._pool.kill(w)  # first: its output is kept while it still has the task
            self._finish(w, TaskEventKind.CANCELLED, error="cancelled")
        else:
            self._pool.send(w, ("cancel", task_id))

    def poll(self, timeout: float) -> list[TaskEvent]:
        """Events since the last call, waiting up to ``timeout`` s for the first.

        Returns as soon as there is at least one event, or ``[]`` when ``timeout`` passes
        (or at once after :meth:`close`, or on :meth:`wakeup`). Also where payload timeouts
        are enforced and dead workers are noticed. Never raises for a task's failure.
        """
        end = time.monotonic() + max(0.0, timeout)
        while not self._closed:
            self._pool.collect()
            if self._events:
                events, self._events = self._events, []
                return events
            now = time.monotonic()
            if end <= now:
                return []
            wait_s = min(end - now, LIVENESS_CHECK_S)
            deadlines = [
                w.task.deadline
                for w in self._workers.values()
                if w.task is not None and w.task.deadline is not None
            ]
            if deadlines:
                wait_s = max(0.0, min(wait_s, min(deadlines) - now))
            if self._wake_r in self._pool.wait(wait_s):
                with self._wake_lock, contextlib.suppress(BlockingIOError):
                    self._woken = False  # a wakeup() from now on writes again
                    os.read(self._wake_r, 4096)
                self._pool.collect()
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
            self._pool.drain(w)  # learn the pids of commands that have started
        workers = list(self._workers.values())
        for w in workers:
            if w.task is None or w.task.spec.command is not None:
                self._pool.send(w, ("exit",))
        end = time.monotonic() + self._kill_grace_s + 1.0
        for w in workers:
            if w.task is None or w.task.spec.command is not None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    w.proc.wait(max(0.0, end - time.monotonic()))
            self._pool.kill(w)
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
        one has just answered its last task). Spare lanes' workers are stopped and their
        scratch dirs emptied.
        A device that never had a worker gets none started. Not ok if the device is running a
        task, the scratch dir cannot be emptied, or the worker cannot be started or does not
        answer. Raises ``KeyError`` for an unknown device, ``RuntimeError`` once closed.
        """
        self._check_open()
        dev = self._device(device)
        for lw in self._pool.lanes(dev.id):
            self._pool.drain(lw)
            if not lw.dead and lw.proc.poll() is not None:
                self._pool.on_death(lw)
        # a CPU-only task beside the device (a spare lane, never lane 0) uses neither the
        # device nor its scratch: the device is refreshed around it
        alive = self._pool.lanes(dev.id)
        lanes = _serving(alive)
        beside = {lw.lane for lw in alive} - {lw.lane for lw in lanes}
        busy = self._busy_with(lanes)
        if busy is not None:
            return False, f"device {dev.id} is running task {busy}"
        for lw in lanes:
            if lw.lane > 0:
                self._pool.stop(lw)  # the spares
        w = self._workers.get(dev.id)
        kept = {self._pool.scratch(dev, lane) for lane in beside}
        for scratch in self._pool.scratches(dev):
            failed = None if scratch in kept else self._empty(scratch)
            if failed is not None:
                return False, failed
        for key in [k for k in self._dirty if k[0] == dev.id and k[1] not in beside]:
            del self._dirty[key]
        python_ran = dev.id in self._python_ran
        self._python_ran.discard(dev.id)
        recycle = self._recycles(python_ran)
        if dev.id not in self._ever_started:
            return True, "scratch emptied; no worker started yet"
        if w is not None and recycle:
            self._pool.stop(w)
            w = None
        restarted = w is None
        if w is None:
            try:
                w = self._pool.start(dev)
            except OSError as e:
                return False, f"could not start a worker: {e}"
        if not restarted and not w.dead and w.proc.poll() is None:
            # it has just reported its last task: alive; a ping would only add a round trip
            return True, f"scratch emptied; worker kept (pid {w.proc.pid})"
        answered = self._pool.ping(w, self._ping_timeout_s)
        if answered is None:
            how = "died" if w.dead else f"did not answer a ping in {self._ping_timeout_s:g} s"
            return False, f"worker pid {w.proc.pid} {how}{self._pool.log_tail(w)}"
        what = "restarted" if restarted else "kept"
        return True, f"scratch emptied; worker {what} (pid {w.proc.pid}, ping {answered:.1f} ms)"

    def _recycles(self, python_ran: bool) -> bool:
        """Whether the recycle policy restarts a worker before its next task."""
        return self._recycle == "always" or (self._recycle == "after-python" and python_ran)

    @staticmethod
    def _busy_with(lanes: list[WorkerProcess]) -> str | None:
        """The task a lane of a device is running, if any."""
        return next((w.task.spec.task_id for w in lanes if w.task is not None), None)

    def _empty(self, scratch: Path) -> str | None:
        """Empty a scratch dir (made if missing, taken back from a user); why not, if not."""
        try:
            st = private_dir(scratch)
            if self._users.active and st.st_uid != os.geteuid():  # back from a user
                os.chown(scratch, os.geteuid(), os.getegid())
            with os.scandir(scratch) as found:
                entries = list(found)
            for entry in entries:
                if entry.is_dir(follow_symlinks=False):
                    shutil.rmtree(entry.path)
                else:
                    os.unlink(entry.path)
        except OSError as e:
            return f"could not empty scratch dir {scratch}: {e}"
        return None

    # -- extras -----------------------------------------------------------------------------

    def wakeup(self) -> None:
        """Make a :meth:`poll` in progress (or the next one) return early; thread-safe."""
        with self._wake_lock, contextlib.suppress(BlockingIOError):
            if not self._closed and not self._woken:  # one byte waiting is enough
                self._woken = True
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
        key = self._tasks.get(task_id)
        w = None if key is None else self._workers.get(key)
        return None if w is None else Path(f"{self._pool.spool(w.device, w.lane)}.{stream}")

    def worker_pid(self, device: str) -> int | None:
        """The pid of ``device``'s worker if one is running (diagnostics, tests)."""
        w = self._workers.get(device)
        return None if w is None or w.dead else w.proc.pid

    # -- SupportsWorkers -------------------------------------------------------------------

    def heartbeats(self) -> dict[str, tuple[float, int]]:
        """See :class:`SupportsWorkers`: for a device with several workers (lanes), the one
        heard from longest ago."""
        self._pool.collect()
        beats: dict[str, tuple[float, int]] = {}
        for w in self._workers.values():
            if not w.dead and (w.device not in beats or w.beat < beats[w.device][0]):
                beats[w.device] = (w.beat, w.proc.pid)
        return beats

    def take_losses(self) -> list[WorkerLoss]:
        """See :class:`SupportsWorkers` (deaths :meth:`poll` noticed; reads nothing)."""
        out, self._losses = self._losses, []
        return out

    def kill_worker(self, device: str, why: str) -> bool:
        """See :class:`SupportsWorkers`: every worker of the device (all its lanes)."""
        lanes = [w for w in _serving(self._pool.lanes(device)) if not w.dead]
        for w in lanes:
            task = w.task
            code = self._pool.kill(w)
            if task is not None:
                self._finish(w, TaskEventKind.LOST, exit_code=code, error=f"worker killed: {why}")
        return bool(lanes)

    def reset(self, device: str, hardware: bool = False) -> tuple[bool, str]:
        """See :class:`SupportsWorkers`: the worker is stopped (or killed) even if it was
        kept by the recycle policy; the new one must answer a ping."""
        self._check_open()
        dev = self._device(device)
        busy = self._busy_with(_serving(self._pool.lanes(dev.id)))
        if busy is not None:
            return False, f"device {dev.id} is running task {busy}"
        w = self._workers.get(dev.id)
        notes = []
        if w is not None:
            self._pool.stop(w)
            notes.append(f"worker pid {w.proc.pid} stopped")
        if hardware and self._device_reset is not None and not self._emulated:
            notes += [d for d in self._device_reset(dev)[1:] if d]
        self._ever_started.add(dev.id)  # a reset device gets a worker, to prove it answers
        self._python_ran.discard(dev.id)
        ok, detail = self.refresh(dev.id)
        return ok, "; ".join([*notes, detail])

    def scratch_dir(self, device: str) -> Path:
        """``device``'s scratch dir (``ACCELNET_SCRATCH`` of its tasks). ``KeyError`` if unknown."""
        return self._pool.scratch(self._device(device))

    def __enter__(self) -> LocalBackend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- events -----------------------------------------------------------------------------

    def _finish(self, w: WorkerProcess, kind: TaskEventKind, **fields: Any) -> None:
        """The terminal event of ``w``'s task (``fields``: exit_code, error, result); frees
        the device."""
        assert w.task is not None
        task_id = w.task.spec.task_id
        key = (w.device, w.lane)
        left = self._running_on.pop(w.device, 1) - 1
        if left:
            self._running_on[w.device] = left
        # cleaned before the lane's next task unless the device is refreshed first: a device
        # another job still holds (a packed mate, a share) is not refreshed between its jobs
        self._dirty[key] = self._dirty.get(key, False) or w.task.spec.payload is not None
        w.task = None
        self._tasks.pop(task_id, None)
        self._cores.give_back(task_id)
        self._emit(task_id, kind, **fields)

    def _lose(self, device: str, pid: int, how: str, task: str | None) -> None:
        """A worker died on its own, running ``task`` or idle (noted unless the backend is
        closed)."""
        if not self._closed:
            self._losses.append(WorkerLoss(device, self._clock.now(), pid, how, task))

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
        one machine's share of a gang that spans several): one per device, or per host
        for a gang launched per host."""
        if task.local_devices:
            return len({self._devices[d].host for d in task.devices if d in self._devices})
        return sum(1 for d in task.devices if d in self._devices)

    def _local_devices_env(self, task: TaskSpec) -> dict[str, str]:
        """A task launched per host sees every device it drives in
        ``CUDA_VISIBLE_DEVICES`` (in the order given: ring order), not only its own."""
        if not task.devices:  # a CPU-only task: no accelerator, whatever runs beside it
            return {"CUDA_VISIBLE_DEVICES": "", "ACCELNET_DEVICE": "", "ACCELNET_DEVICE_MODEL": ""}
        if not task.local_devices:
            return {}
        seen = (cuda_visible_devices(self._device(d), self._emulated) for d in task.local_devices)
        return {"CUDA_VISIBLE_DEVICES": ",".join(x for x in seen if x)}

    @staticmethod
    def _cwd(task: TaskSpec, default: Path | None) -> str | None:
        """Where ``task`` starts: its ``workdir`` (relative: to ``default``, or to the
        backend's own folder), else ``default`` (None: the backend's own folder)."""
        if task.workdir is None:
            return None if default is None else str(default)
        return str(Path(task.workdir) if default is None else default / task.workdir)
