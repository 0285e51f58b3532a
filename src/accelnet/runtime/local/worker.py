"""The worker process of :class:`~accelnet.runtime.local.backend.LocalBackend`: one per device.

Started as ``python -P worker.py <fd>`` in a session of its own, it talks to its parent over
a :class:`multiprocessing.connection.Connection` on ``fd`` and runs one task at a time:

- a *command* runs as ``/bin/sh -c`` in a new session (its process group is the task's
  tree); the worker waits for it, answers pings meanwhile, and kills the group on a
  ``cancel``, on a timeout and, for stragglers left in the background, when the shell exits;
- a *payload* (``cloudpickle.dumps((fn, args, kwargs))``) runs in this process, with fds 1
  and 2 pointed at the task's logs and ``os.environ`` set to the task's for the duration.

A request's ``env`` holds what the task adds to the worker's own environment (the
parent's, with the device's variables, from the worker's start); its ``sys_path`` is sent
only when it changed (``None``: as before).

A task's stdout and stderr first go to the worker's *spool* files (``<spool>.out`` and
``.err``, opened once and reused); when the task ends, a spool a task wrote to is moved to
the task's log file (``out`` / ``err`` of the request) before the parent hears of the end,
and a new spool is made. A task that writes nothing costs no file at all: creating files
is the slowest thing a trivial task would do (on a busy disk a create can take a
millisecond). While a task runs, its output so far is in the spool; if the worker dies, the
parent moves the spools itself.
  The parent enforces payload timeouts and cancels by killing this process's group.

The worker exits when its parent closes the connection and, while a payload keeps the main
thread busy, when a watchdog thread sees that its parent has died; either way it kills the
running command's process group first, so a SIGKILLed controller leaves no orphans.

Messages are tuples. Parent to worker: ``("init", {"parent_pid": int, "spool": str,
"beat_s": float | None})`` first, then
``("run", request)``, ``("cancel", task_id)``, ``("ping", token)``, ``("exit",)``. Worker to
parent: ``("started", task_id, pid, monotonic_time)``, ``("done", task_id, kind,
exit_code, error, result)`` with ``kind`` one of :data:`DONE_KINDS` or :data:`TIMED_OUT`,
``("pong", token)``, and ``("beat",)`` every ``beat_s`` seconds from a thread of its own (a
heartbeat: it comes while a payload keeps the main thread busy, and stops if the process is
stopped or hung).
Sends go through one lock, so the heartbeat never interleaves with another message.

Imports are the standard library only (cloudpickle is imported on the first payload): the
worker answers its first message about 50 ms after it is spawned.
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
import traceback
from collections.abc import Iterator
from multiprocessing.connection import Connection, wait
from typing import Any

DONE_KINDS = ("succeeded", "failed", "cancelled")
TIMED_OUT = "timed_out"  # a command past its timeout_s (reported as failed, marked so)
STREAMS = ("out", "err")
PARENT_CHECK_S = 0.25  # how often the watchdog looks for its parent
ERROR_LINES = 6  # lines of a traceback (or of a command's stderr) kept in an event's error
_NO_PIDFD_POLL_S = 0.01  # exit polling period where os.pidfd_open is missing
_GROUP_POLL_S = 0.02  # how often a stopped task's process group is looked at during its grace
_pause = threading.Event().wait  # a sleep that no one interrupts


def tail(path: str, lines: int = ERROR_LINES, limit: int = 4096) -> str:
    """The last ``lines`` lines of the file at ``path`` ("" if it cannot be read)."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - limit))
            data = f.read()
    except OSError:
        return ""
    text = data.decode("utf-8", "replace").rstrip()
    return "\n".join(text.splitlines()[-lines:])


def describe_exit(code: int) -> str:
    """A process's exit code (negative: the signal that killed it) in words."""
    if code >= 0:
        return f"exited with code {code}"
    try:
        return f"killed by {signal.Signals(-code).name}"
    except ValueError:
        return f"killed by signal {-code}"


class _Child:
    """A running command: its Popen and, where the kernel has them, a pidfd to wait on."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self.proc = proc
        self.pidfd: int | None = None
        with contextlib.suppress(AttributeError, OSError):
            self.pidfd = os.pidfd_open(proc.pid)

    def exited(self) -> bool:
        """Whether the shell has exited; leaves it unreaped, so its pid stays reserved."""
        flags = os.WEXITED | os.WNOHANG | os.WNOWAIT
        try:
            return os.waitid(os.P_PID, self.proc.pid, flags) is not None
        except ChildProcessError:
            return True

    def wait_exit(self, timeout: float) -> bool:
        """Wait up to ``timeout`` s for the shell to exit; whether it did."""
        end = time.monotonic() + timeout
        while not self.exited():
            left = end - time.monotonic()
            if left <= 0:
                return False
            if self.pidfd is not None:
                wait([self.pidfd], left)
            else:
                _pause(min(left, _NO_PIDFD_POLL_S))
        return True

    def kill(self, grace: float) -> int:
        """SIGTERM the group, SIGKILL what is left of it after ``grace`` s; reap the shell and
        return its exit code. The grace is the whole group's: ``/bin/sh -c 'python
        train.py'`` (dash does not exec its last command) loses its shell to SIGTERM at once
        while the program it started is still saving its work, and is given the rest of
        the grace to finish."""
        end = time.monotonic() + grace
        if not self.exited():
            self.signal(signal.SIGTERM)
            self.wait_exit(grace)
        while time.monotonic() < end and group_alive(self.proc.pid):
            _pause(_GROUP_POLL_S)
        return self.reap()

    def signal(self, sig: signal.Signals) -> None:
        """Send ``sig`` to the command's whole process group."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, sig)

    def reap(self) -> int:
        """Kill what is left of the group, reap the shell, close the pidfd; the exit code."""
        self.signal(signal.SIGKILL)  # stragglers: `cmd &` children outliving the shell
        code = self.proc.wait()
        if self.pidfd is not None:
            os.close(self.pidfd)
            self.pidfd = None
        return code


def group_alive(pgid: int) -> bool:
    """Whether process group ``pgid`` has a member that is not a zombie (read from
    ``/proc``: the group's own shell, exited but not reaped, still counts for
    ``killpg(pgid, 0)``)."""
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rfind(b")") + 2 :].split()  # state, ppid, pgrp, ...
        if len(fields) > 2 and fields[0] not in (b"Z", b"X") and int(fields[2]) == pgid:
            return True
    return False


class Worker:
    """The serving loop of one worker process (see the module docstring)."""

    def __init__(
        self, conn: Connection, parent_pid: int, spool: str, beat_s: float | None = None
    ) -> None:
        self.conn = conn
        self.beat_s = beat_s
        self._send_lock = threading.Lock()
        self.parent_pid = parent_pid
        self.base_env = dict(os.environ)  # what every task's environment starts from
        self.spool = {stream: f"{spool}.{stream}" for stream in STREAMS}
        self.fds: dict[str, int] = {}  # open spool files
        self.child: _Child | None = None
        self.exiting = False

    # -- the loop ---------------------------------------------------------------------------

    def serve(self) -> None:
        """Answer messages until the parent says ``exit`` or closes the connection."""
        threading.Thread(target=self._watch_parent, name="watch-parent", daemon=True).start()
        if self.beat_s:
            threading.Thread(target=self._beat, name="heartbeat", daemon=True).start()
        while not self.exiting:
            try:
                msg = self.conn.recv()
            except (EOFError, OSError):
                return
            self._dispatch(msg, None)

    def _dispatch(self, msg: tuple[Any, ...], running: str | None) -> bool:
        """Handle one message; True if it asks to stop the task ``running``."""
        op: str = msg[0]
        if op == "run":
            self._run(msg[1])
        elif op == "ping":
            self._send(("pong", msg[1]))
        elif op == "exit":
            self.exiting = True
            return True
        return op == "cancel" and bool(msg[1] == running)  # a cancel of anything else is stale

    def _send(self, msg: tuple[Any, ...]) -> None:
        with self._send_lock:
            self.conn.send(msg)

    def _beat(self) -> None:
        assert self.beat_s
        while True:
            _pause(self.beat_s)
            try:
                self._send(("beat",))
            except OSError:  # the parent is gone: the main thread finds out too
                return

    def _watch_parent(self) -> None:
        while True:
            _pause(PARENT_CHECK_S)
            if os.getppid() != self.parent_pid:
                if self.child is not None:
                    self.child.signal(signal.SIGKILL)
                os.killpg(os.getpgrp(), signal.SIGKILL)

    def _done(
        self,
        task_id: str,
        kind: str,
        exit_code: int | None = None,
        error: str | None = None,
        result: bytes | None = None,
    ) -> None:
        self._send(("done", task_id, kind, exit_code, error, result))

    # -- tasks ------------------------------------------------------------------------------

    def _run(self, req: dict[str, Any]) -> None:
        """Run one task; whatever goes wrong in starting it (no spool, no shell, a value
        ``Popen`` refuses: a NUL byte, text that is not UTF-8, a huge environment) fails
        that task, never this worker, which serves the device's next task."""
        task_id: str = req["task_id"]
        before: set[int] | None = None
        try:
            # the task (and every process it starts) runs on its cores: set on this
            # thread before the command is spawned or the function called, undone after
            before = pin(req.get("cpu_set"))
            hand_off(req)
            out, err = self._spool_fd("out"), self._spool_fd("err")
            if req["command"] is not None:
                self._run_command(req, out, err)
            else:
                self._run_payload(req, out, err)
        except Exception as e:  # before the task started (a running one is judged inside)
            if self.child is not None:  # started after all: take its process group along
                with contextlib.suppress(Exception):
                    self.child.kill(0.0)
                self.child = None
            why = f"{type(e).__name__}: {e}" if not isinstance(e, OSError) else str(e)
            self._finish(req, "failed", error=f"cannot start the task {task_id}: {why}")
        finally:
            unpin(before)

    def _spool_fd(self, stream: str) -> int:
        fd = self.fds.get(stream)
        if fd is None:
            flags = os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND | os.O_CLOEXEC
            fd = self.fds[stream] = os.open(self.spool[stream], flags, 0o644)
        return fd

    def _keep_output(self, req: dict[str, Any]) -> str | None:
        """Move what the task wrote to its log files; an error text if that failed."""
        for stream in STREAMS:
            fd = self.fds.get(stream)
            if fd is None or os.fstat(fd).st_size == 0:
                continue
            os.close(fd)
            del self.fds[stream]
            try:
                move_log(self.spool[stream], req[stream])
            except OSError as e:
                return f"could not keep the task's {stream} log: {e}"
        return None

    def _run_command(self, req: dict[str, Any], out: int, err: int) -> None:
        task_id: str = req["task_id"]
        user = req.get("user")  # (name, uid, gid, home): run as that user (docs/runas)
        proc = subprocess.Popen(
            ["/bin/sh", "-c", req["command"]],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=err,
            env={**self.base_env, **req["env"]},
            start_new_session=True,
            cwd=req.get("cwd"),
            user=None if user is None else user[1],
            group=None if user is None else user[2],
            extra_groups=None if user is None else [],
            umask=-1 if user is None else 0o077,
        )
        child = self.child = _Child(proc)
        started = time.monotonic()
        self._send(("started", task_id, proc.pid, started))
        timeout: float | None = req["timeout_s"]
        deadline = None if timeout is None else started + timeout
        grace: float = req["grace_s"]
        try:
            while not child.exited():
                wait_s = PARENT_CHECK_S if child.pidfd is not None else _NO_PIDFD_POLL_S
                if deadline is not None:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        code = child.kill(grace)
                        self._finish(req, TIMED_OUT, code, f"timed out after {timeout:g} s")
                        return
                    wait_s = min(wait_s, left)
                watched: list[Any] = [self.conn]
                if child.pidfd is not None:
                    watched.append(child.pidfd)
                if self.conn in wait(watched, wait_s):
                    try:
                        msg = self.conn.recv()
                    except (EOFError, OSError):  # the parent is gone: take the task along
                        child.kill(0.0)
                        self.exiting = True
                        return
                    if self._dispatch(msg, task_id):
                        code = child.kill(grace)
                        self._finish(req, "cancelled", code, "cancelled")
                        return
            code = child.reap()
        except BaseException:
            if child.proc.returncode is None:  # whatever went wrong, the command goes too
                child.kill(0.0)
            raise
        finally:
            self.child = None
        if code == 0:
            self._finish(req, "succeeded", 0)
        else:
            stderr = tail(self.spool["err"])
            detail = describe_exit(code) + (f"; stderr ends:\n{stderr}" if stderr else "")
            self._finish(req, "failed", code, detail)

    def _run_payload(self, req: dict[str, Any], out: int, err: int) -> None:
        task_id: str = req["task_id"]
        if req["sys_path"] is not None:
            sys.path[:] = req["sys_path"]
        try:
            import cloudpickle  # noqa: PLC0415 (only payload tasks pay for it)

            data: bytes = req["payload"]
            if data is None:
                with open(req["payload_path"], "rb") as f:
                    data = f.read()
                os.unlink(req["payload_path"])
            fn, args, kwargs = cloudpickle.loads(data)
        except BaseException as e:
            os.write(err, traceback.format_exc().encode())
            self._finish(req, "failed", error=f"the payload could not be unpickled: {e!r}")
            return
        self._send(("started", task_id, os.getpid(), time.monotonic()))
        if req.get("user") is not None:
            self._finish(req, *_call_as(req["user"], req["cwd"], fn, args, kwargs, (out, err),
                                        self.base_env, req["env"]))  # fmt: skip
            return
        self._finish(req, *_call(fn, args, kwargs, (out, err), self.base_env, req["env"],
                                 req.get("cwd")))  # fmt: skip

    def _finish(
        self,
        req: dict[str, Any],
        kind: str,
        exit_code: int | None = None,
        error: str | None = None,
        result: bytes | None = None,
    ) -> None:
        """Keep the task's output, then report its end."""
        failed = self._keep_output(req)
        if failed is not None:
            error = f"{error}; {failed}" if error else failed
        self._done(req["task_id"], kind, exit_code, error, result)


_Outcome = tuple[str, int | None, str | None, bytes | None]  # kind, exit code, error, result


def pin(cores: list[int] | None) -> set[int] | None:
    """Run the calling thread (and what it starts from now on) on ``cores``; the mask it
    had, to :func:`unpin` to (None: nothing changed: no cores, or no CPU affinity here)."""
    setter = getattr(os, "sched_setaffinity", None)
    if not cores or setter is None:
        return None
    before = set(os.sched_getaffinity(0))
    setter(0, set(cores))
    return before


def hand_off(req: dict[str, Any]) -> None:
    """Before the task starts: make its attempt's shared-memory folder ``req["shm"]`` (mode
    0700) if it is not there yet (a folder that cannot be made is the task's to report, as
    ``shm_dir()`` does), and set each of the ``req["port_vars"]`` in its ``env`` to a TCP
    port free now on 127.0.0.1, where its rank 0 listens (if none can be had, those and the
    backend's ``req["addr_vars"]`` are dropped, as where the backend finds no port):
    work the backend leaves to the worker, off its controller's per-task path
    (:mod:`accelnet.runtime.local.handoff`)."""
    shm = req.get("shm")
    if shm and req.get("user") is None:  # not for a task run as a user: the backend made it
        with contextlib.suppress(OSError):
            os.mkdir(shm, 0o700)
    names = req.get("port_vars")
    if names:
        env = req["env"]
        port = free_port()
        if port is None:  # none of the backend's rendezvous variables then (a job's stay)
            for name in (*names, *req.get("addr_vars", ())):
                env.pop(name, None)
            return
        for name in names:
            env[name] = str(port)


def free_port(host: str = "127.0.0.1") -> int | None:
    """A TCP port free on ``host`` now (the kernel's pick of an ephemeral one, as torchrun
    and SkyPilot choose theirs); None if no socket could be bound. Nothing holds it after:
    another process could take it first, which the kernel's spread of ephemeral ports
    makes unlikely."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind((host, 0))
            port: int = s.getsockname()[1]
            return port
    except OSError:
        return None


def unpin(before: set[int] | None) -> None:
    """Undo :func:`pin`."""
    if before is not None:
        os.sched_setaffinity(0, before)


def _call(
    fn: Any, args: Any, kwargs: Any, fds: tuple[int, int], base: dict[str, str],
    env: dict[str, str], cwd: str | None = None,
) -> _Outcome:  # fmt: skip
    """Run a payload's function here (in ``cwd``, if given), its output to ``fds``; how it
    ended."""
    import cloudpickle  # noqa: PLC0415 (loaded by the caller already)

    kind, code, error, result = "failed", None, None, None
    with _redirected(*fds, base, env):
        try:
            if cwd is not None:
                os.chdir(cwd)  # the worker's own is restored afterwards
            value = fn(*args, **kwargs)
        except SystemExit as e:  # sys.exit() in a function: judge it as a process's exit
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
            kind = "succeeded" if code == 0 else "failed"
            error = None if code == 0 else f"sys.exit({e.code!r})"
        except BaseException:
            text = traceback.format_exc()
            sys.stderr.write(text)
            error = "\n".join(text.rstrip().splitlines()[-ERROR_LINES:])
        else:
            try:
                result = cloudpickle.dumps(value)
                kind, code = "succeeded", 0
            except BaseException as e:
                sys.stderr.write(traceback.format_exc())
                error = f"the return value could not be pickled: {e!r}"
    return kind, code, error, result


def _call_as(
    user: tuple[str, int, int, str], cwd: str, fn: Any, args: Any, kwargs: Any,
    fds: tuple[int, int], base: dict[str, str], env: dict[str, str],
) -> _Outcome:  # fmt: skip
    """Run a payload's function in a child of this process that has become ``user`` (no
    supplementary groups, umask 077, in ``cwd``); how it ended, sent back over a pipe. A
    child killed by a signal, or one that cannot drop to the user, is a failure."""
    import pickle  # noqa: PLC0415

    r, w = os.pipe()
    _flush()
    pid = os.fork()
    if pid == 0:  # the child: drop to the user, call, report, exit without cleanup
        status = 1
        try:
            os.close(r)
            os.setgroups([])
            os.setgid(user[2])
            os.setuid(user[1])
            os.umask(0o077)
            os.chdir(cwd)
            outcome: _Outcome = _call(fn, args, kwargs, fds, base, env)
        except BaseException as e:
            outcome = ("failed", None, f"could not run as user {user[0]}: {e!r}", None)
        try:
            with os.fdopen(w, "wb") as f:
                pickle.dump(outcome, f)
            status = 0
        finally:
            os._exit(status)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        data = f.read()
    _, wait_status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(wait_status)
    if not data:
        return "failed", code, f"the task's process (user {user[0]}) {describe_exit(code)}", None
    outcome = pickle.loads(data)
    return outcome


def move_log(spool: str, dest: str) -> None:
    """Move a spool file to a task's log path (copied across file systems)."""
    os.makedirs(os.path.dirname(dest) or ".", exist_ok=True)
    try:
        os.replace(spool, dest)
    except OSError:
        shutil.copyfile(spool, dest)
        os.unlink(spool)


@contextlib.contextmanager
def _redirected(out: int, err: int, base: dict[str, str], env: dict[str, str]) -> Iterator[None]:
    """fds 1 and 2 to the logs, the task's environment (``base`` and ``env``); everything
    restored afterwards (the environment to ``base``)."""
    streams, cwd = (sys.stdout, sys.stderr), os.getcwd()
    _flush()
    saved = os.dup(1), os.dup(2)
    os.dup2(out, 1)
    os.dup2(err, 2)
    before = _environ_data()  # the worker's own environment (``base``)
    os.environ.update(env)
    try:
        yield
    finally:
        _flush()
        sys.stdout, sys.stderr = streams
        _flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        os.close(saved[0])
        os.close(saved[1])
        for key in env:
            if key in base:
                os.environ[key] = base[key]
            else:
                os.environ.pop(key, None)
        if _environ_data() != before:  # the task changed more than its own variables
            _set_environ(base)
        with contextlib.suppress(OSError):
            os.chdir(cwd)


def _environ_data() -> dict[Any, Any]:
    """A copy of the environment as ``os.environ`` keeps it (encoded; a fast C copy)."""
    return dict(getattr(os.environ, "_data", os.environ))


def _set_environ(env: dict[str, str]) -> None:
    """Make ``os.environ`` equal ``env``, touching only what differs."""
    current = os.environ
    for key in [k for k in current if k not in env]:
        del current[key]
    for key, value in env.items():
        if current.get(key) != value:
            current[key] = value


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()


def main(argv: list[str]) -> int:
    """Serve the connection on fd ``argv[1]``; the process's exit status."""
    if os.getsid(0) != os.getpid():  # the parent starts us with setsid(); be sure of it
        os.setsid()
    fd = int(argv[1])
    os.set_inheritable(fd, False)  # a payload's os.system() children must not hold it open
    conn = Connection(fd)
    try:
        op, init = conn.recv()
    except (EOFError, OSError):
        return 0
    if op != "init" or os.getppid() != init["parent_pid"]:
        return 1
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.reconfigure(line_buffering=True)  # type: ignore[union-attr]
    Worker(conn, init["parent_pid"], init["spool"], init.get("beat_s")).serve()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
