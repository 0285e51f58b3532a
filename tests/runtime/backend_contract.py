"""The backend contract, one suite for every execution backend.

A test module subclasses :class:`BackendContract` (as ``Test<Backend>Contract``) and gives
it a ``harness`` fixture: a backend whose clock stands at :data:`T0`, four of its devices
(the first two on different machines where the backend has several, so that the gang
tests span machines) and a log folder. The tests launch real commands and payloads and
check what a caller of the contract relies on: the task environment, outcomes and exit
codes, logs, timeouts, cancel killing the whole process tree, a dead worker losing its
task, malformed launches refused, the order of events (STARTED first, exactly one
terminal event per task). Every wait is bounded; nothing sleeps for a fixed time. A
backend shared between tests must be left with nothing running (the harness's job).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import cloudpickle
import psutil
import pytest

from accelnet.runtime.backend import (
    Backend,
    SupportsWorkers,
    TaskEvent,
    TaskEventKind,
    TaskSpec,
)

T0 = 1000.0
TERMINAL = {
    TaskEventKind.SUCCEEDED,
    TaskEventKind.FAILED,
    TaskEventKind.CANCELLED,
    TaskEventKind.LOST,
}
ENV_KEYS = (
    "ACCELNET_JOB",
    "ACCELNET_TASK",
    "ACCELNET_RANK",
    "ACCELNET_WORLD_SIZE",
    "ACCELNET_DEVICE",
    "ACCELNET_DEVICES",
    "ACCELNET_DEVICE_SHARE",
    "ACCELNET_EMULATED",
    "ACCELNET_SCRATCH",
    "CUDA_VISIBLE_DEVICES",
    "OMP_NUM_THREADS",
    "EXTRA",
)


@dataclass
class Harness:
    """A backend under test: ``devices[0]`` and ``devices[1]`` are on different machines
    when it has several; every device is emulated; task pids are of this machine."""

    backend: Backend
    devices: tuple[str, str, str, str]
    logs: Path


# -- helpers (also used by the backends' own tests) ------------------------------------------


def task(
    tid: str,
    device: str,
    logs: Path,
    command: str | None = None,
    fn: Callable[..., Any] | None = None,
    *args: Any,
    devices: tuple[str, ...] | None = None,
    rank: int = 0,
    timeout_s: float | None = None,
    env: dict[str, str] | None = None,
    job: str = "job1",
    inputs: dict[str, str] | None = None,
) -> TaskSpec:
    gang = devices or (device,)
    return TaskSpec(
        task_id=tid,
        job_id=job,
        rank=rank,
        world=len(gang),
        device=device,
        devices=gang,
        command=command,
        payload=None if fn is None else cloudpickle.dumps((fn, args, {})),
        env=env or {},
        timeout_s=timeout_s,
        log_dir=str(logs),
        inputs=inputs or {},
    )


def until(
    b: Backend, done: Callable[[list[TaskEvent]], bool], limit: float = 20.0
) -> list[TaskEvent]:
    """Poll until ``done(events so far)``; fail (rather than hang) after ``limit`` s."""
    events: list[TaskEvent] = []
    end = time.monotonic() + limit
    while not done(events):
        assert time.monotonic() < end, f"gave up waiting; events so far: {events}"
        events += b.poll(0.5)
    return events


def run(b: Backend, *specs: TaskSpec) -> dict[str, TaskEvent]:
    """Launch ``specs`` and return each task's terminal event (checking STARTED came first,
    exactly one terminal event per task, every event stamped by the backend's clock)."""
    for s in specs:
        b.launch(s)
    ids = {s.task_id for s in specs}
    events = until(b, lambda ev: {e.task_id for e in ev if e.kind in TERMINAL} >= ids)
    out = {e.task_id: e for e in events if e.kind in TERMINAL}
    for e in events:
        assert e.at == T0
    for s in specs:
        kinds = [e.kind for e in events if e.task_id == s.task_id]
        assert kinds.count(out[s.task_id].kind) == 1, kinds
        assert sum(k in TERMINAL for k in kinds) == 1, kinds
        if TaskEventKind.STARTED in kinds:
            assert kinds.index(TaskEventKind.STARTED) == 0, kinds
    return out


def started(b: Backend, tid: str) -> int:
    """Wait for ``tid``'s STARTED; its pid."""
    events = until(b, lambda ev: any(e.task_id == tid for e in ev))
    (ev,) = events
    assert ev.kind is TaskEventKind.STARTED, ev
    pid: int = ev.result["pid"]
    return pid


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def gone(pids: list[int], limit: float = 5.0) -> bool:
    """Whether every one of ``pids`` is gone (or a zombie) within ``limit`` s."""
    end = time.monotonic() + limit
    while any(alive(pid) for pid in pids):
        if time.monotonic() > end:
            return False
        threading.Event().wait(0.01)
    return True


def tree(pid: int, sleeps: int = 2, limit: float = 5.0) -> list[psutil.Process]:
    """``pid`` and its descendants, once ``sleeps`` of them are ``sleep`` processes."""
    end = time.monotonic() + limit
    procs: list[psutil.Process] = []
    while sum(p.name() == "sleep" for p in procs) < sleeps:
        assert time.monotonic() < end, procs
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    return procs


# -- functions run as payloads --------------------------------------------------------------


def env_values() -> dict[str, str | None]:
    return {k: os.environ.get(k) for k in (*ENV_KEYS, "PATH")}


def env_together(folder: str, n: int) -> dict[str, str | None] | None:
    """:func:`env_values` once ``n`` tasks (processes) have called this with ``folder``:
    they ran at the same time. None if the others did not come within 60 s."""
    Path(folder, str(os.getpid())).touch()
    end = time.monotonic() + 60.0
    while len(os.listdir(folder)) < n:
        if time.monotonic() > end:
            return None
        time.sleep(0.01)
    return env_values()


def getpid() -> int:
    return os.getpid()


def boom() -> None:
    raise ValueError("boom")


def unpicklable() -> Any:
    return threading.Lock()


def chatty(tag: str) -> str:
    print(f"print-{tag}")
    print(f"stderr-{tag}", file=sys.stderr)
    os.write(1, f"fd1-{tag}\n".encode())
    subprocess.run(["echo", f"child-{tag}"], check=True)
    return tag


def nap(seconds: float) -> int:
    time.sleep(seconds)
    return os.getpid()


def length(data: bytes) -> int:
    return len(data)


@contextlib.contextmanager
def pickled_by_value(name: str) -> Iterator[None]:
    """Ship module ``name``'s functions by value while inside: workers need not import the
    test module."""
    module = sys.modules[name]
    cloudpickle.register_pickle_by_value(module)
    try:
        yield
    finally:
        cloudpickle.unregister_pickle_by_value(module)


class BackendContract:
    """The contract tests; a subclass named ``Test...`` provides the ``harness`` fixture."""

    @pytest.fixture(autouse=True, scope="class")
    @classmethod
    def _pickle_by_value(cls) -> Iterator[None]:
        """This file's functions by value (:func:`pickled_by_value`)."""
        with pickled_by_value(__name__):
            yield

    # -- environment ------------------------------------------------------------------------

    def test_a_gang_gets_its_ranks_devices_and_the_task_env(self, harness: Harness) -> None:
        b, logs, (d0, d1, _, _) = harness.backend, harness.logs, harness.devices
        gang = (d0, d1)
        envs_dir = logs.parent / "envs"
        envs_dir.mkdir(parents=True, exist_ok=True)
        cmd = f"env -0 > {envs_dir}/env-$ACCELNET_RANK"
        extra = {"EXTRA": "x", "ACCELNET_JOB": "job1"}
        # two cores asked for: OMP_NUM_THREADS says as many (no more than the machine has)
        specs = [replace(task(f"c{r}", gang[r], logs, cmd, devices=gang, rank=r, env=extra),
                         cpus=2.0) for r in (0, 1)]  # fmt: skip
        assert all(e.kind is TaskEventKind.SUCCEEDED for e in run(b, *specs).values())
        envs = []
        for r in (0, 1):
            pairs = (envs_dir / f"env-{r}").read_text().split("\0")[:-1]
            envs.append(dict(p.split("=", 1) for p in pairs))
        pays = [replace(task(f"p{r}", gang[r], logs, None, env_values, devices=gang, rank=r,
                             env=extra), cpus=2.0) for r in (0, 1)]  # fmt: skip
        results = run(b, *pays)
        from_payload = [results["p0"].result, results["p1"].result]
        for r, (env, penv) in enumerate(zip(envs, from_payload, strict=True)):
            for k in ENV_KEYS:
                if k != "ACCELNET_TASK":
                    assert penv[k] == env[k], k  # the same variables in both kinds of task
            assert env["ACCELNET_DEVICE"] == gang[r]
            assert env["ACCELNET_RANK"] == str(r)
            assert env["ACCELNET_WORLD_SIZE"] == "2"
            assert env["ACCELNET_DEVICES"] == ",".join(gang)
            assert env["ACCELNET_DEVICE_SHARE"] == "1"  # whole devices
            assert env["ACCELNET_JOB"] == "job1"
            assert env["ACCELNET_EMULATED"] == "1"
            assert env["CUDA_VISIBLE_DEVICES"] == ""  # emulated: no real GPU is visible
            pinned = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 2
            threads = str(min(2, pinned))
            assert env["OMP_NUM_THREADS"] == threads  # its cores', not the backend's own
            assert env["EXTRA"] == "x"
            assert env["PATH"] == os.environ["PATH"]  # the parent's environment underneath
            assert Path(env["ACCELNET_SCRATCH"]).is_dir()
        assert (envs[0]["ACCELNET_TASK"], from_payload[1]["ACCELNET_TASK"]) == ("c0", "p1")
        assert envs[0]["ACCELNET_SCRATCH"] != envs[1]["ACCELNET_SCRATCH"]
        # a payload's environment lasts as long as the payload
        after = run(b, task("p2", d0, logs, None, env_values))["p2"].result
        assert after["EXTRA"] is None
        assert after["ACCELNET_TASK"] == "p2"

    # -- outcomes and logs ------------------------------------------------------------------

    def test_exit_codes_become_outcomes(self, harness: Harness) -> None:
        b, logs, (d0, d1, d2, _) = harness.backend, harness.logs, harness.devices
        ev = run(
            b,
            task("ok", d0, logs, "exit 0"),
            task("three", d1, logs, "echo oops >&2; exit 3"),
            task("killed", d2, logs, "kill -9 $$"),
        )
        assert (ev["ok"].kind, ev["ok"].exit_code, ev["ok"].error) == (
            TaskEventKind.SUCCEEDED, 0, None
        )  # fmt: skip
        assert (ev["three"].kind, ev["three"].exit_code) == (TaskEventKind.FAILED, 3)
        assert ev["three"].error is not None
        assert "exited with code 3" in ev["three"].error
        assert "oops" in ev["three"].error  # the end of stderr, for the reader
        assert not ev["three"].timed_out
        assert (ev["killed"].kind, ev["killed"].exit_code) == (TaskEventKind.FAILED, -9)
        assert "SIGKILL" in (ev["killed"].error or "")

    def test_payload_results_and_exceptions(self, harness: Harness) -> None:
        b, logs, (d0, d1, d2, _) = harness.backend, harness.logs, harness.devices
        ev = run(
            b,
            task("val", d0, logs, None, length, b"abc"),
            task("exc", d1, logs, None, boom),
            task("lock", d2, logs, None, unpicklable),
        )
        assert (ev["val"].kind, ev["val"].result, ev["val"].exit_code) == (
            TaskEventKind.SUCCEEDED, 3, 0
        )  # fmt: skip
        assert ev["exc"].kind is TaskEventKind.FAILED
        assert ev["exc"].error is not None
        assert ev["exc"].error.endswith("ValueError: boom")
        err = (logs / "exc.err").read_text()
        assert "Traceback (most recent call last)" in err
        assert "in boom" in err
        assert ev["lock"].kind is TaskEventKind.FAILED
        assert "could not be pickled" in (ev["lock"].error or "")

    def test_big_payloads_and_by_reference_functions(
        self, harness: Harness, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        b, logs, (d0, _, _, _) = harness.backend, harness.logs, harness.devices
        big = os.urandom(300_000)  # more than fits a pipe
        assert run(b, task("big", d0, logs, None, length, big))["big"].result == 300_000
        # a function of a module the caller imported from its own sys.path, by reference
        mods = tmp_path / "mods"
        mods.mkdir()
        (mods / "accelnet_probe_mod.py").write_text("def answer():\n    return 42\n")
        monkeypatch.syspath_prepend(str(mods))
        import accelnet_probe_mod  # type: ignore[import-not-found]

        ref = run(b, task("ref", d0, logs, None, accelnet_probe_mod.answer))["ref"]
        assert ref.result == 42, ref

    def test_stdout_and_stderr_of_both_kinds_go_to_the_logs(self, harness: Harness) -> None:
        b, logs, (d0, d1, _, _) = harness.backend, harness.logs, harness.devices
        run(
            b,
            task("cmd", d0, logs, "echo out-c; echo err-c >&2"),
            task("py1", d1, logs, None, chatty, "a"),
        )
        assert (logs / "cmd.out").read_text() == "out-c\n"
        assert (logs / "cmd.err").read_text() == "err-c\n"
        out = (logs / "py1.out").read_text()
        assert {"print-a", "fd1-a", "child-a"} <= set(out.split())
        assert (logs / "py1.err").read_text() == "stderr-a\n"
        # the same device again: the second task's output goes to its own logs only
        run(b, task("py2", d1, logs, None, chatty, "b"))
        assert "b" not in (logs / "py1.out").read_text().replace("child-a", "")
        assert "print-b" in (logs / "py2.out").read_text()
        run(b, task("quiet", d0, logs, "true"))  # nothing written: no file, or an empty one
        assert not (logs / "quiet.out").exists() or (logs / "quiet.out").read_text() == ""

    # -- stopping tasks ---------------------------------------------------------------------

    def test_timeouts_fail_the_task(self, harness: Harness) -> None:
        b, logs, (d0, d1, _, _) = harness.backend, harness.logs, harness.devices
        ev = run(
            b,
            task("cmd", d0, logs, "sleep 30", timeout_s=0.3),
            task("py", d1, logs, None, nap, 30, timeout_s=0.3),
        )
        for tid in ("cmd", "py"):
            assert ev[tid].kind is TaskEventKind.FAILED
            assert ev[tid].error == "timed out after 0.3 s"
            assert ev[tid].timed_out  # the controller's outcome code: timed_out
        # the payload's worker was killed; the device's next task gets a fresh one
        again = run(b, task("py2", d1, logs, None, nap, 0))["py2"]
        assert again.kind is TaskEventKind.SUCCEEDED
        assert again.result != ev["py"].result
        if isinstance(b, SupportsWorkers):
            assert again.result == b.worker_pid(d1)

    def test_cancel_kills_the_whole_tree(self, harness: Harness) -> None:
        b, logs, (d0, d1, _, _) = harness.backend, harness.logs, harness.devices
        b.launch(task("tree", d0, logs, "sleep 100 & sleep 100"))
        procs = tree(started(b, "tree"))
        b.cancel("tree")
        (ev,) = until(b, bool)
        assert (ev.task_id, ev.kind) == ("tree", TaskEventKind.CANCELLED)
        assert gone([p.pid for p in procs])
        # a payload: its process goes, with everything in its process group
        b.launch(task("py", d1, logs, None, nap, 100))
        worker = started(b, "py")
        b.cancel("py")
        (ev,) = until(b, bool)
        b.cancel("py")  # no longer running: a no-op
        b.cancel("never-launched")
        assert (ev.task_id, ev.kind) == ("py", TaskEventKind.CANCELLED)
        assert gone([worker])
        assert run(b, task("next", d1, logs, None, getpid))["next"].result != worker
        assert b.poll(0.05) == []  # nothing more about any of them

    def test_a_cancel_racing_the_start_gives_one_outcome(self, harness: Harness) -> None:
        b, logs, devs = harness.backend, harness.logs, harness.devices
        specs = [task(f"r{i}", devs[i], logs, "true") for i in range(4)]
        for s in specs:
            b.launch(s)
            b.cancel(s.task_id)  # before, during or after its start: one outcome each
        events = until(b, lambda ev: sum(e.kind in TERMINAL for e in ev) == 4)
        for s in specs:
            kinds = [e.kind for e in events if e.task_id == s.task_id]
            assert sum(k in TERMINAL for k in kinds) == 1, kinds
            assert kinds[-1] in (TaskEventKind.CANCELLED, TaskEventKind.SUCCEEDED), kinds
        assert b.poll(0.05) == []

    def test_a_killed_worker_loses_its_task_and_the_device_recovers(self, harness: Harness) -> None:
        b, logs, (d0, _, _, _) = harness.backend, harness.logs, harness.devices
        if not isinstance(b, SupportsWorkers):
            pytest.skip("the backend has no workers to kill")
        b.launch(task("cmd", d0, logs, "sleep 100"))
        sleep_pid = started(b, "cmd")
        worker = wait_for_worker(b, d0)
        os.kill(worker, signal.SIGKILL)
        (ev,) = until(b, bool)
        assert (ev.task_id, ev.kind, ev.exit_code) == ("cmd", TaskEventKind.LOST, -9)
        assert "SIGKILL" in (ev.error or "")
        assert gone([sleep_pid])  # the task's own session went with it
        b.launch(task("py", d0, logs, None, nap, 100))
        worker = started(b, "py")
        os.kill(worker, signal.SIGKILL)
        (ev,) = until(b, bool)
        assert (ev.task_id, ev.kind) == ("py", TaskEventKind.LOST)
        assert run(b, task("again", d0, logs, "true"))["again"].exit_code == 0

    def test_tasks_sharing_a_device_run_side_by_side(self, harness: Harness) -> None:
        # jobs holding shares of one device (or packed on it) run there at the same time,
        # each in its own worker and scratch folder; one can be cancelled alone
        b, logs, (d0, _, _, _) = harness.backend, harness.logs, harness.devices
        half = [dataclasses.replace(task(f"s{i}", d0, logs, "sleep 100", job=f"j{i}"),
                                    share=0.5) for i in (0, 1)]  # fmt: skip
        for spec in half:
            b.launch(spec)
        starts = until(b, lambda ev: len(ev) >= 2)
        assert sorted((e.task_id, e.kind) for e in starts) == [
            ("s0", TaskEventKind.STARTED), ("s1", TaskEventKind.STARTED)]  # fmt: skip
        pids = [e.result["pid"] for e in sorted(starts, key=lambda e: e.task_id)]
        assert all(alive(p) for p in pids) and pids[0] != pids[1]
        b.cancel("s1")
        (ev,) = until(b, bool)
        assert (ev.task_id, ev.kind) == ("s1", TaskEventKind.CANCELLED)
        assert alive(pids[0])
        # the two meet (each waits for the other): they ran at once, however loaded the
        # machine (one that ended before the other was launched would share its folder)
        meet = logs.parent / "meet"
        meet.mkdir(mode=0o777)
        meet.chmod(0o777)  # for tasks that run as another user
        pays = [task(f"p{i}", d0, logs, None, env_together, str(meet), 2, job=f"k{i}")
                for i in (0, 1)]  # fmt: skip
        b.launch(pays[0])
        b.launch(pays[1])
        got = until(b, lambda ev: sum(e.kind in TERMINAL for e in ev) == 2, limit=90.0)
        envs = [e.result for e in got if e.kind is TaskEventKind.SUCCEEDED]
        assert len(envs) == 2 and all(e is not None for e in envs)
        assert len({e["ACCELNET_SCRATCH"] for e in envs}) == 2  # each its own folder
        assert {e["ACCELNET_DEVICE"] for e in envs} == {d0}
        b.cancel("s0")
        (ev,) = until(b, bool)
        assert (ev.task_id, ev.kind) == ("s0", TaskEventKind.CANCELLED)

    def test_launch_rejects_bad_specs_and_poll_keeps_its_deadline(self, harness: Harness) -> None:
        b, logs, (d0, d1, _, _) = harness.backend, harness.logs, harness.devices
        with pytest.raises(ValueError, match="exactly one"):
            b.launch(dataclasses.replace(task("x", d0, logs, "true"), payload=b"x"))
        with pytest.raises(ValueError, match="exactly one"):
            b.launch(task("x", d0, logs))
        with pytest.raises(KeyError, match="unknown device 'nohost/gpu9'; known: "):
            b.launch(task("x", "nohost/gpu9", logs, "true"))
        with pytest.raises(ValueError, match="env values must be strings"):
            b.launch(task("x", d0, logs, "true", env={"N": 1}))  # type: ignore[dict-item]
        b.launch(task("x", d0, logs, "sleep 100"))
        with pytest.raises(ValueError, match="already running"):
            b.launch(task("x", d1, logs, "true"))
        started(b, "x")
        t0 = time.monotonic()
        assert b.poll(0.1) == []
        assert time.monotonic() - t0 < 10  # not until the task ends (100 s)
        wake = getattr(b, "wakeup", None)
        if wake is not None:
            threading.Timer(0.05, wake).start()
            t0 = time.monotonic()
            assert b.poll(30) == []
            assert time.monotonic() - t0 < 20  # the wakeup, not the 30 s
        b.cancel("x")
        (ev,) = until(b, bool)
        assert (ev.task_id, ev.kind) == ("x", TaskEventKind.CANCELLED)


def wait_for_worker(b: SupportsWorkers, device: str, limit: float = 10.0) -> int:
    """The pid of ``device``'s worker once the backend knows it."""
    end = time.monotonic() + limit
    while (pid := b.worker_pid(device)) is None:
        assert time.monotonic() < end, f"no worker for {device}"
        threading.Event().wait(0.02)
    return pid


# -- the event protocol: every backend, the simulator's included ----------------------------


@dataclass
class EventHarness:
    """A backend under the event-protocol tests. ``short(tid, device, job, devices, share)``
    and ``long(...)`` make tasks that end on their own soon and that run until stopped;
    ``wait(done)`` gathers events until ``done(events so far)`` (polling in real time, or
    moving a simulated clock from event to event); ``quiet()`` the events left once
    nothing more can happen without a new launch or cancel (none, for a sound backend)."""

    backend: Backend
    devices: tuple[str, str, str, str]
    short: Callable[..., TaskSpec]
    long: Callable[..., TaskSpec]
    wait: Callable[[Callable[[list[TaskEvent]], bool]], list[TaskEvent]]
    quiet: Callable[[], list[TaskEvent]]


def command_tasks(logs: Path, command: str) -> Callable[..., TaskSpec]:
    """An :class:`EventHarness` task maker for a backend that runs commands: each task
    runs ``command``, its logs in ``logs``."""

    def make(tid: str, device: str, job: str, gang: tuple[str, ...], share: float) -> TaskSpec:
        spec = task(tid, device, logs, command, devices=gang, rank=gang.index(device), job=job)
        return dataclasses.replace(spec, share=share)

    return make


def _terminal_ids(events: list[TaskEvent]) -> set[str]:
    return {e.task_id for e in events if e.kind in TERMINAL}


def _one_story_each(events: list[TaskEvent], ids: set[str]) -> dict[str, TaskEventKind]:
    """Each task's events: STARTED (if any) first, then exactly one terminal event."""
    ends: dict[str, TaskEventKind] = {}
    for tid in ids:
        kinds = [e.kind for e in events if e.task_id == tid]
        assert sum(k in TERMINAL for k in kinds) == 1, (tid, kinds)
        assert kinds[-1] in TERMINAL, (tid, kinds)
        assert kinds.count(TaskEventKind.STARTED) <= 1 and (
            TaskEventKind.STARTED not in kinds or kinds[0] is TaskEventKind.STARTED
        ), (tid, kinds)
        ends[tid] = kinds[-1]
    return ends


class EventContract:
    """What the controller relies on of every backend's events, simulated ones included;
    a subclass named ``Test...`` provides the ``protocol`` fixture."""

    def test_each_task_starts_first_and_ends_exactly_once(self, protocol: EventHarness) -> None:
        b, (d0, d1, d2, _) = protocol.backend, protocol.devices
        gang = (d0, d1)
        specs = [protocol.short("g0", d0, "gang", gang, 1.0),
                 protocol.short("g1", d1, "gang", gang, 1.0),
                 protocol.short("solo", d2, "solo", (d2,), 1.0)]  # fmt: skip
        for s in specs:
            b.launch(s)
        events = protocol.wait(lambda ev: _terminal_ids(ev) >= {"g0", "g1", "solo"})
        ends = _one_story_each(events, {"g0", "g1", "solo"})
        assert set(ends.values()) == {TaskEventKind.SUCCEEDED}
        assert protocol.quiet() == []

    def test_a_cancel_ends_a_running_gang_once_and_later_cancels_do_nothing(
        self, protocol: EventHarness
    ) -> None:
        b, (d0, d1, _, _) = protocol.backend, protocol.devices
        gang = (d0, d1)
        for rank, dev in enumerate(gang):
            b.launch(protocol.long(f"l{rank}", dev, "stopped", gang, 1.0))
        began = TaskEventKind.STARTED
        seen = protocol.wait(lambda ev: {e.task_id for e in ev if e.kind is began} >= {"l0", "l1"})
        b.cancel("l0")
        b.cancel("l1")
        seen += protocol.wait(lambda ev: _terminal_ids(seen + ev) >= {"l0", "l1"})
        ends = _one_story_each(seen, {"l0", "l1"})
        assert set(ends.values()) == {TaskEventKind.CANCELLED}
        b.cancel("l0")  # ended: a no-op
        b.cancel("never-launched")
        assert protocol.quiet() == []

    def test_tasks_sharing_a_device_both_run_to_the_end(self, protocol: EventHarness) -> None:
        b, (d0, _, _, _) = protocol.backend, protocol.devices
        b.launch(protocol.short("half-a", d0, "half-a", (d0,), 0.5))
        b.launch(protocol.short("half-b", d0, "half-b", (d0,), 0.5))
        events = protocol.wait(lambda ev: _terminal_ids(ev) >= {"half-a", "half-b"})
        ends = _one_story_each(events, {"half-a", "half-b"})
        assert set(ends.values()) == {TaskEventKind.SUCCEEDED}
