"""LocalBackend with real worker processes: environment, outcomes, logs, timeouts, cancel,
lost workers, refresh and close. Every wait is bounded; nothing sleeps for a fixed time."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import cloudpickle
import psutil
import pytest

from accelnet.fabric import load_preset
from accelnet.fabric.discovery import discover
from accelnet.runtime.backend import TaskEvent, TaskEventKind, TaskSpec
from accelnet.runtime.clock import ManualClock
from accelnet.runtime.local_backend import LocalBackend
from accelnet.runtime.taskenv import cuda_visible_devices

DEVICES = load_preset("pcie-4xL4").devices
GPU0, GPU1, GPU2, GPU3 = "l4box/gpu0", "l4box/gpu1", "l4box/gpu2", "l4box/gpu3"
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
    "ACCELNET_EMULATED",
    "ACCELNET_SCRATCH",
    "CUDA_VISIBLE_DEVICES",
    "EXTRA",
)


@pytest.fixture(autouse=True, scope="module")
def _pickle_this_module_by_value() -> Iterator[None]:
    """Ship this file's functions by value: workers need not import the test module."""
    module = sys.modules[__name__]
    cloudpickle.register_pickle_by_value(module)
    yield
    cloudpickle.unregister_pickle_by_value(module)


@pytest.fixture
def backend(tmp_path: Path) -> Iterator[LocalBackend]:
    b = LocalBackend(DEVICES, tmp_path / "work", ManualClock(T0), emulated=True, kill_grace_s=0.5)
    yield b
    b.close()


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
) -> TaskSpec:
    gang = devices or (device,)
    return TaskSpec(
        task_id=tid,
        job_id="job1",
        rank=rank,
        world=len(gang),
        device=device,
        devices=gang,
        command=command,
        payload=None if fn is None else cloudpickle.dumps((fn, args, {})),
        env=env or {},
        timeout_s=timeout_s,
        log_dir=str(logs),
    )


def until(
    b: LocalBackend, done: Callable[[list[TaskEvent]], bool], limit: float = 15.0
) -> list[TaskEvent]:
    """Poll until ``done(events so far)``; fail (rather than hang) after ``limit`` s."""
    events: list[TaskEvent] = []
    end = time.monotonic() + limit
    while not done(events):
        assert time.monotonic() < end, f"gave up waiting; events so far: {events}"
        events += b.poll(0.5)
    return events


def run(b: LocalBackend, *specs: TaskSpec) -> dict[str, TaskEvent]:
    """Launch ``specs`` and return each task's terminal event (checking STARTED came first)."""
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
    return out


def started(b: LocalBackend, tid: str) -> int:
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
    return {k: os.environ.get(k) for k in ENV_KEYS}


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


def write_scratch() -> str:
    path = Path(os.environ["ACCELNET_SCRATCH"]) / "left-behind"
    path.write_text("x")
    return str(path)


# -- environment ----------------------------------------------------------------------------


def test_a_gang_gets_its_ranks_devices_and_the_task_env(
    backend: LocalBackend, tmp_path: Path
) -> None:
    gang = (GPU0, GPU1)
    logs = tmp_path / "logs"
    cmd = f"env -0 > {tmp_path}/env-$ACCELNET_RANK"
    extra = {"EXTRA": "x", "ACCELNET_JOB": "job1"}
    specs = [task(f"c{r}", gang[r], logs, cmd, devices=gang, rank=r, env=extra) for r in (0, 1)]
    assert all(e.kind is TaskEventKind.SUCCEEDED for e in run(backend, *specs).values())
    envs = []
    for r in (0, 1):
        pairs = (Path(tmp_path / f"env-{r}").read_text().split("\0"))[:-1]
        envs.append(dict(p.split("=", 1) for p in pairs))
    pays = [task(f"p{r}", gang[r], logs, None, env_values, devices=gang, rank=r, env=extra)
            for r in (0, 1)]  # fmt: skip
    results = run(backend, *pays)
    from_payload = [results["p0"].result, results["p1"].result]
    for r, (env, penv) in enumerate(zip(envs, from_payload, strict=True)):
        for k in ENV_KEYS:
            if k != "ACCELNET_TASK":
                assert penv[k] == env[k], k  # the same variables in both kinds of task
        assert env["ACCELNET_DEVICE"] == gang[r]
        assert env["ACCELNET_RANK"] == str(r)
        assert env["ACCELNET_WORLD_SIZE"] == "2"
        assert env["ACCELNET_DEVICES"] == "l4box/gpu0,l4box/gpu1"
        assert env["ACCELNET_JOB"] == "job1"
        assert env["ACCELNET_EMULATED"] == "1"
        assert env["CUDA_VISIBLE_DEVICES"] == ""  # emulated: no real GPU is visible
        assert env["EXTRA"] == "x"
        assert env["PATH"] == os.environ["PATH"]  # the parent's environment underneath
        assert Path(env["ACCELNET_SCRATCH"]) == backend.scratch_dir(gang[r])
        assert backend.scratch_dir(gang[r]).is_dir()
    assert (envs[0]["ACCELNET_TASK"], from_payload[1]["ACCELNET_TASK"]) == ("c0", "p1")
    assert envs[0]["ACCELNET_SCRATCH"] != envs[1]["ACCELNET_SCRATCH"]
    # a payload's environment lasts as long as the payload
    after = run(backend, task("p2", GPU0, logs, None, env_values))["p2"].result
    assert after["EXTRA"] is None
    assert after["ACCELNET_TASK"] == "p2"


def test_cuda_visible_devices_names_real_nvidia_gpus_only(tmp_path: Path) -> None:
    gpu2 = DEVICES[GPU2]
    assert cuda_visible_devices(gpu2, emulated=False) == "2"
    assert cuda_visible_devices(gpu2, emulated=True) == ""
    # the number in the name, not the position among all of the host's devices
    assert cuda_visible_devices(dataclasses.replace(gpu2, name="gpu7", index=9), False) == "7"
    cpu = next(iter(discover("per-core").fabric.devices.values()))
    assert cuda_visible_devices(cpu, emulated=False) == ""
    out = tmp_path / "cvd"
    with LocalBackend(DEVICES, tmp_path / "work", ManualClock(T0)) as b:
        cmd = f'printf "%s/%s" "$CUDA_VISIBLE_DEVICES" "$ACCELNET_EMULATED" > {out}'
        assert run(b, task("t", GPU2, tmp_path, cmd))["t"].kind is TaskEventKind.SUCCEEDED
    assert out.read_text() == "2/0"


# -- outcomes and logs ----------------------------------------------------------------------


def test_exit_codes_become_outcomes(backend: LocalBackend, tmp_path: Path) -> None:
    ev = run(
        backend,
        task("ok", GPU0, tmp_path, "exit 0"),
        task("three", GPU1, tmp_path, "echo oops >&2; exit 3"),
        task("killed", GPU2, tmp_path, "kill -9 $$"),
    )
    assert (ev["ok"].kind, ev["ok"].exit_code, ev["ok"].error) == (TaskEventKind.SUCCEEDED, 0, None)
    assert (ev["three"].kind, ev["three"].exit_code) == (TaskEventKind.FAILED, 3)
    assert ev["three"].error is not None
    assert "exited with code 3" in ev["three"].error
    assert "oops" in ev["three"].error  # the end of stderr, for the reader
    assert (ev["killed"].kind, ev["killed"].exit_code) == (TaskEventKind.FAILED, -9)
    assert "SIGKILL" in (ev["killed"].error or "")


def test_payload_results_and_exceptions(backend: LocalBackend, tmp_path: Path) -> None:
    ev = run(
        backend,
        task("val", GPU0, tmp_path, None, length, b"abc"),
        task("exc", GPU1, tmp_path, None, boom),
        task("lock", GPU2, tmp_path, None, unpicklable),
    )
    assert (ev["val"].kind, ev["val"].result, ev["val"].exit_code) == (
        TaskEventKind.SUCCEEDED,
        3,
        0,
    )
    assert ev["exc"].kind is TaskEventKind.FAILED
    assert ev["exc"].error is not None
    assert ev["exc"].error.endswith("ValueError: boom")
    err = (tmp_path / "exc.err").read_text()
    assert "Traceback (most recent call last)" in err
    assert "in boom" in err
    assert ev["lock"].kind is TaskEventKind.FAILED
    assert "could not be pickled" in (ev["lock"].error or "")


def test_big_payloads_and_by_reference_functions(
    backend: LocalBackend, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    big = os.urandom(300_000)  # more than fits the pipe: goes through a file
    assert run(backend, task("big", GPU0, tmp_path, None, length, big))["big"].result == 300_000
    assert not list((tmp_path / "work" / "payloads").iterdir())
    # a function of a module the parent imported from its own sys.path, pickled by reference
    mods = tmp_path / "mods"
    mods.mkdir()
    (mods / "accelnet_probe_mod.py").write_text("def answer():\n    return 42\n")
    monkeypatch.syspath_prepend(str(mods))
    import accelnet_probe_mod  # type: ignore[import-not-found]

    assert (
        run(backend, task("ref", GPU0, tmp_path, None, accelnet_probe_mod.answer))["ref"].result
        == 42
    )


def test_stdout_and_stderr_of_both_kinds_go_to_the_logs(
    backend: LocalBackend, tmp_path: Path
) -> None:
    run(
        backend,
        task("cmd", GPU0, tmp_path, "echo out-c; echo err-c >&2"),
        task("py1", GPU1, tmp_path, None, chatty, "a"),
    )
    assert (tmp_path / "cmd.out").read_text() == "out-c\n"
    assert (tmp_path / "cmd.err").read_text() == "err-c\n"
    out = (tmp_path / "py1.out").read_text()
    assert {"print-a", "fd1-a", "child-a"} <= set(out.split())
    assert (tmp_path / "py1.err").read_text() == "stderr-a\n"
    # the same worker again: the second task's output goes to its own logs only
    run(backend, task("py2", GPU1, tmp_path, None, chatty, "b"))
    assert "b" not in (tmp_path / "py1.out").read_text().replace("child-a", "")
    assert "print-b" in (tmp_path / "py2.out").read_text()


# -- stopping tasks -------------------------------------------------------------------------


def test_timeouts_fail_the_task(backend: LocalBackend, tmp_path: Path) -> None:
    ev = run(
        backend,
        task("cmd", GPU0, tmp_path, "sleep 30", timeout_s=0.3),
        task("py", GPU1, tmp_path, None, nap, 30, timeout_s=0.3),
    )
    for tid in ("cmd", "py"):
        assert ev[tid].kind is TaskEventKind.FAILED
        assert ev[tid].error == "timed out after 0.3 s"
    # the payload's worker was killed; the device's next task gets a fresh one
    again = run(backend, task("py2", GPU1, tmp_path, None, nap, 0))["py2"]
    assert again.kind is TaskEventKind.SUCCEEDED
    assert again.result == backend.worker_pid(GPU1)


def test_cancel_kills_the_whole_tree(backend: LocalBackend, tmp_path: Path) -> None:
    backend.launch(task("tree", GPU0, tmp_path, "sleep 100 & sleep 100"))
    procs = tree(started(backend, "tree"))
    backend.cancel("tree")
    (ev,) = until(backend, bool)
    assert (ev.task_id, ev.kind) == ("tree", TaskEventKind.CANCELLED)
    assert gone([p.pid for p in procs])
    # a payload: its worker goes, with everything in its process group
    backend.launch(task("py", GPU1, tmp_path, None, nap, 100))
    worker = started(backend, "py")
    backend.cancel("py")
    backend.cancel("py")  # no longer running: a no-op
    backend.cancel("never-launched")
    (ev,) = until(backend, bool)
    assert (ev.task_id, ev.kind) == ("py", TaskEventKind.CANCELLED)
    assert gone([worker])
    assert run(backend, task("next", GPU1, tmp_path, None, getpid))["next"].result != worker


def test_a_killed_worker_loses_its_task_and_the_device_recovers(
    backend: LocalBackend, tmp_path: Path
) -> None:
    backend.launch(task("cmd", GPU0, tmp_path, "sleep 100"))
    sleep_pid = started(backend, "cmd")
    worker = backend.worker_pid(GPU0)
    assert worker is not None
    os.kill(worker, signal.SIGKILL)
    (ev,) = until(backend, bool)
    assert (ev.task_id, ev.kind, ev.exit_code) == ("cmd", TaskEventKind.LOST, -9)
    assert "SIGKILL" in (ev.error or "")
    assert gone([sleep_pid])  # the task's own session went with it
    backend.launch(task("py", GPU0, tmp_path, None, nap, 100))
    worker = started(backend, "py")
    os.kill(worker, signal.SIGKILL)
    (ev,) = until(backend, bool)
    assert (ev.task_id, ev.kind) == ("py", TaskEventKind.LOST)
    assert run(backend, task("again", GPU0, tmp_path, "true"))["again"].exit_code == 0


# -- refresh, start and close ---------------------------------------------------------------


def test_refresh_cleans_scratch_and_recycles_after_python(tmp_path: Path) -> None:
    clock = ManualClock(T0)
    with LocalBackend(DEVICES, tmp_path / "a", clock) as b:
        assert b.refresh(GPU3) == (True, "scratch emptied; no worker started yet")
        assert b.worker_pid(GPU3) is None
        cmd = 'mkdir -p "$ACCELNET_SCRATCH/sub" && touch "$ACCELNET_SCRATCH/sub/f" && echo $PPID'
        run(b, task("c", GPU0, tmp_path, cmd))
        first = int((tmp_path / "c.out").read_text())
        assert first == b.worker_pid(GPU0)
        ok, detail = b.refresh(GPU0)
        assert ok, detail
        assert "kept" in detail
        assert not list(b.scratch_dir(GPU0).iterdir())
        assert b.worker_pid(GPU0) == first  # only a command ran: the worker stays
        ev = run(b, task("p", GPU0, tmp_path, None, write_scratch))["p"]
        assert Path(ev.result).exists()
        ok, detail = b.refresh(GPU0)
        assert ok, detail
        assert "restarted" in detail
        assert not Path(ev.result).exists()
        assert b.worker_pid(GPU0) not in (None, first)  # a payload ran: recycled
        b.launch(task("busy", GPU0, tmp_path, "sleep 100"))
        started(b, "busy")
        ok, detail = b.refresh(GPU0)
        assert not ok
        assert "busy" in detail
        with pytest.raises(KeyError, match="known: l4box/gpu0"):
            b.refresh("nohost/gpu9")
    for policy, kind, recycled in (("never", "payload", False), ("always", "command", True)):
        with LocalBackend(DEVICES, tmp_path / policy, clock, recycle=policy) as b:  # type: ignore[arg-type]
            spec = task(policy, GPU0, tmp_path, None, getpid)
            if kind == "command":
                spec = task(policy, GPU0, tmp_path, "true")
            run(b, spec)
            before = b.worker_pid(GPU0)
            assert b.refresh(GPU0)[0]
            assert (b.worker_pid(GPU0) != before) is recycled


def test_workers_start_lazily_and_close_leaves_no_process(tmp_path: Path) -> None:
    b = LocalBackend(DEVICES, tmp_path / "work", ManualClock(T0), kill_grace_s=0.5)
    b.launch(task("cmd", GPU0, tmp_path, "sleep 100 & sleep 100"))
    b.launch(task("py", GPU1, tmp_path, None, nap, 100))
    shell = next(e.result["pid"] for e in until(b, lambda ev: len(ev) == 2) if e.task_id == "cmd")
    tree(shell)
    assert b.worker_pid(GPU2) is None  # never used: never started
    assert b.worker_pid(GPU3) is None
    descendants = psutil.Process().children(recursive=True)
    workers = {b.worker_pid(GPU0), b.worker_pid(GPU1)}
    assert workers <= {p.pid for p in descendants}
    assert len(descendants) >= 5  # two workers, the shell and its two sleeps
    t0 = time.monotonic()
    b.close()
    assert time.monotonic() - t0 < 3
    assert gone([p.pid for p in descendants])
    b.close()  # idempotent
    assert b.poll(0.1) == []
    with pytest.raises(RuntimeError, match="closed"):
        b.launch(task("late", GPU0, tmp_path, "true"))


def test_workers_do_not_outlive_a_killed_controller(tmp_path: Path) -> None:
    script = textwrap.dedent(f"""
        import json, sys, time, cloudpickle
        from accelnet.fabric import load_preset
        from accelnet.runtime.backend import TaskSpec
        from accelnet.runtime.clock import SystemClock
        from accelnet.runtime.local_backend import LocalBackend
        b = LocalBackend(load_preset("pcie-4xL4").devices, {str(tmp_path)!r}, SystemClock())
        pay = cloudpickle.dumps((time.sleep, (100,), {{}}))
        logs = {str(tmp_path)!r}
        cmd = "sleep 100 & sleep 100"
        b.launch(TaskSpec("c", "j", 0, 1, "{GPU0}", ("{GPU0}",), cmd, log_dir=logs))
        b.launch(TaskSpec("p", "j", 0, 1, "{GPU1}", ("{GPU1}",), payload=pay, log_dir=logs))
        seen = []
        while len(seen) < 2:
            seen += b.poll(5)
        print(json.dumps([e.result["pid"] for e in seen]), flush=True)
        time.sleep(100)
    """)
    ctl = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert ctl.stdout is not None
        pids = json.loads(ctl.stdout.readline())
        shell = next(p for p in pids if psutil.Process(p).name() == "sh")
        tree(shell)
        procs = psutil.Process(ctl.pid).children(recursive=True)
        assert set(pids) <= {p.pid for p in procs}
        assert len(procs) >= 5
    finally:
        ctl.kill()
        ctl.wait()
    assert gone([p.pid for p in procs])


def test_launch_rejects_bad_specs_and_poll_keeps_its_deadline(
    backend: LocalBackend, tmp_path: Path
) -> None:
    with pytest.raises(ValueError, match="exactly one"):
        backend.launch(dataclasses.replace(task("x", GPU0, tmp_path, "true"), payload=b"x"))
    with pytest.raises(ValueError, match="exactly one"):
        backend.launch(task("x", GPU0, tmp_path))
    with pytest.raises(KeyError, match="unknown device 'l4box/gpu9'; known: l4box/gpu0"):
        backend.launch(task("x", "l4box/gpu9", tmp_path, "true"))
    with pytest.raises(ValueError, match="env values must be strings"):
        backend.launch(task("x", GPU0, tmp_path, "true", env={"N": 1}))  # type: ignore[dict-item]
    backend.launch(task("x", GPU0, tmp_path, "sleep 100"))
    with pytest.raises(ValueError, match="already running"):
        backend.launch(task("x", GPU1, tmp_path, "true"))
    with pytest.raises(RuntimeError, match="busy with task x"):
        backend.launch(task("y", GPU0, tmp_path, "true"))
    started(backend, "x")
    t0 = time.monotonic()
    assert backend.poll(0.1) == []
    assert time.monotonic() - t0 < 1.0
    threading.Timer(0.05, backend.wakeup).start()
    t0 = time.monotonic()
    assert backend.poll(30) == []
    assert time.monotonic() - t0 < 5.0
