"""LocalBackend with real worker processes: the backend contract (backend_contract.py),
then what is the local backend's own: CUDA_VISIBLE_DEVICES, spilled payloads, scratch
dirs, refresh and recycling, lazy workers, close, and workers that die with their
controller. Every wait is bounded; nothing sleeps for a fixed time."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from accelnet.fabric import load_preset
from accelnet.fabric.discovery import discover
from accelnet.runtime.backend import TaskEventKind
from accelnet.runtime.clock import ManualClock
from accelnet.runtime.local.backend import LocalBackend
from accelnet.runtime.local.taskenv import cuda_visible_devices, mps_env
from tests.runtime.backend_contract import (
    T0,
    BackendContract,
    EventContract,
    EventHarness,
    Harness,
    command_tasks,
    env_values,
    getpid,
    gone,
    length,
    nap,
    pickled_by_value,
    run,
    started,
    task,
    tree,
    until,
)

DEVICES = load_preset("pcie-4xL4").devices
GPU0, GPU1, GPU2, GPU3 = "l4box/gpu0", "l4box/gpu1", "l4box/gpu2", "l4box/gpu3"


@pytest.fixture(autouse=True, scope="module")
def _pickle_this_module_by_value() -> Iterator[None]:
    with pickled_by_value(__name__):
        yield


@pytest.fixture
def backend(tmp_path: Path) -> Iterator[LocalBackend]:
    b = LocalBackend(DEVICES, tmp_path / "work", ManualClock(T0), emulated=True, kill_grace_s=0.5)
    yield b
    b.close()


class TestLocalBackendContract(BackendContract):
    """The contract every backend keeps, on one machine's emulated 4 x L4."""

    @pytest.fixture
    def harness(self, backend: LocalBackend, tmp_path: Path) -> Harness:
        return Harness(backend, (GPU0, GPU1, GPU2, GPU3), tmp_path / "logs")


class TestLocalBackendEvents(EventContract):
    """The event protocol (the simulator's backend keeps it too: tests/sim)."""

    @pytest.fixture
    def protocol(self, backend: LocalBackend, tmp_path: Path) -> EventHarness:
        logs = tmp_path / "logs"

        devices = (GPU0, GPU1, GPU2, GPU3)
        short, long = command_tasks(logs, "true"), command_tasks(logs, "sleep 100")
        return EventHarness(
            backend,
            devices,
            short,
            long,
            lambda done: until(backend, done),
            lambda: backend.poll(0.2),
        )


def write_scratch() -> str:
    path = Path(os.environ["ACCELNET_SCRATCH"]) / "left-behind"
    path.write_text("x")
    return str(path)


def test_each_device_has_its_scratch_dir(backend: LocalBackend, tmp_path: Path) -> None:
    gang = (GPU0, GPU1)
    pays = [task(f"p{r}", gang[r], tmp_path, None, env_values, devices=gang, rank=r)
            for r in (0, 1)]  # fmt: skip
    results = run(backend, *pays)
    for r in (0, 1):
        scratch = Path(results[f"p{r}"].result["ACCELNET_SCRATCH"])
        assert scratch == backend.scratch_dir(gang[r])
        assert scratch.is_dir()


def test_big_payloads_go_through_a_file_that_is_removed(
    backend: LocalBackend, tmp_path: Path
) -> None:
    big = os.urandom(300_000)  # more than fits the pipe: goes through a file
    assert run(backend, task("big", GPU0, tmp_path, None, length, big))["big"].result == 300_000
    assert not list((tmp_path / "work" / "payloads").iterdir())


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


def test_a_share_of_a_real_gpu_gets_mps_limits_that_the_task_can_override(tmp_path: Path) -> None:
    gpu2 = DEVICES[GPU2]
    assert mps_env(gpu2, 0.5, emulated=False) == {
        "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "50",
        "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": f"0={int(gpu2.memory_gb * 1024 * 0.5)}M",
    }
    assert mps_env(gpu2, 0.004, emulated=False)["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "1"
    assert mps_env(gpu2, 1.0, emulated=False) == {}  # a whole device: no limit
    assert mps_env(gpu2, 0.5, emulated=True) == {}  # no real GPU behind it
    cpu = next(iter(discover("per-core").fabric.devices.values()))
    assert mps_env(cpu, 0.5, emulated=False) == {}
    cmd = (
        'printf "%s/%s" "${CUDA_MPS_ACTIVE_THREAD_PERCENTAGE-unset}" '
        '"${CUDA_MPS_PINNED_DEVICE_MEM_LIMIT-unset}" > "$OUT"'
    )
    with LocalBackend(DEVICES, tmp_path / "work", ManualClock(T0)) as b:
        half = dataclasses.replace(
            task("half", GPU2, tmp_path, cmd, env={"OUT": str(tmp_path / "half")}), share=0.25
        )
        whole = task("whole", GPU2, tmp_path, cmd, env={"OUT": str(tmp_path / "whole")})
        own = dataclasses.replace(
            task("own", GPU2, tmp_path, cmd,
                 env={"OUT": str(tmp_path / "own"), "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "40"}),
            share=0.25,
        )  # fmt: skip
        for t in (half, whole, own):
            assert run(b, t)[t.task_id].kind is TaskEventKind.SUCCEEDED
    mem = int(gpu2.memory_gb * 1024 * 0.25)
    assert (tmp_path / "half").read_text() == f"25/0={mem}M"
    assert (tmp_path / "whole").read_text() == "unset/unset"
    assert (tmp_path / "own").read_text() == f"40/0={mem}M"  # the spec's env wins


# -- refresh, start and close ---------------------------------------------------------------


def test_refresh_cleans_scratch_and_keeps_a_worker_for_its_tenant(tmp_path: Path) -> None:
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
        assert "kept" in detail  # the default, per-tenant: warm for the same tenant
        assert not Path(ev.result).exists()
        assert b.worker_pid(GPU0) == first
        assert run(b, task("p2", GPU0, tmp_path, None, getpid))["p2"].result == first
        assert b.refresh(GPU0)[0]
        # another tenant's task: not in a process where the first tenant's Python ran
        other = dataclasses.replace(task("o", GPU0, tmp_path, None, getpid), tenant="other")
        fresh = run(b, other)["o"].result
        assert fresh not in (None, first) and b.worker_pid(GPU0) == fresh
        assert b.refresh(GPU0)[0]
        # ... and a command of the first tenant after it: the worker is replaced again
        run(b, task("c2", GPU0, tmp_path, "true"))
        assert b.worker_pid(GPU0) not in (None, first, fresh)
        b.launch(task("busy", GPU0, tmp_path, "sleep 100"))
        started(b, "busy")
        ok, detail = b.refresh(GPU0)
        assert not ok
        assert "busy" in detail
        with pytest.raises(KeyError, match="known: l4box/gpu0"):
            b.refresh("nohost/gpu9")
    for policy, kind, recycled in (("never", "payload", False), ("always", "command", True),
                                   ("after-python", "payload", True)):  # fmt: skip
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
        from accelnet.runtime.local.backend import LocalBackend
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


def test_refresh_stops_spare_lanes_and_empties_their_scratch(tmp_path: Path) -> None:
    with LocalBackend(DEVICES, tmp_path / "w", ManualClock(T0), emulated=True) as b:
        b.launch(task("long", GPU0, tmp_path, "sleep 100"))
        started(b, "long")
        spare = run(b, task("spare", GPU0, tmp_path, None, write_scratch))["spare"]
        left = Path(spare.result)
        assert left.exists() and left.parent != b.scratch_dir(GPU0)  # a lane of its own
        assert set(b.heartbeats()) == {GPU0}  # the device's own worker, not the spare's
        ok, detail = b.refresh(GPU0)
        assert not ok and "long" in detail  # a task still runs on the device
        assert left.exists()
        b.cancel("long")
        until(b, bool)
        ok, detail = b.refresh(GPU0)
        assert ok, detail
        assert not left.exists()  # the spare lane's scratch was emptied
        assert [w.lane for w in b._pool.lanes(GPU0)] == [0]  # the spare's worker stopped


def read_scratch() -> list[str]:
    return sorted(p.name for p in Path(os.environ["ACCELNET_SCRATCH"]).iterdir())


def test_a_lane_is_cleaned_before_its_next_task_while_the_device_stays_busy(
    tmp_path: Path,
) -> None:
    # the device cannot be refreshed while another lane runs: the lane that ended is
    # cleaned (scratch emptied; its worker kept for the same tenant, replaced for another)
    # before its next task
    with LocalBackend(DEVICES, tmp_path / "w", ManualClock(T0), emulated=True) as b:
        b.launch(task("long", GPU0, tmp_path, "sleep 100"))
        started(b, "long")
        first = run(b, task("x", GPU0, tmp_path, None, write_scratch, job="jx"))["x"]
        pid = run(b, task("pid", GPU0, tmp_path, None, getpid, job="jp"))["pid"].result
        assert Path(first.result).parent == Path(
            run(b, task("y", GPU0, tmp_path, None, env_values, job="jy"))["y"].result[
                "ACCELNET_SCRATCH"])  # fmt: skip
        assert run(b, task("z", GPU0, tmp_path, None, read_scratch, job="jz"))["z"].result == []
        assert run(b, task("pid2", GPU0, tmp_path, None, getpid))["pid2"].result == pid
        other = dataclasses.replace(task("pid3", GPU0, tmp_path, None, getpid), tenant="b")
        assert run(b, other)["pid3"].result != pid  # another tenant: not where a's Python ran


def test_a_device_not_refreshed_between_tasks_is_cleaned_even_with_nothing_else_running(
    tmp_path: Path,
) -> None:
    # the controller does not refresh a device another job still holds (a packed gang whose
    # rank here ended while its other rank runs on): lane 0's next task, with no other task
    # running, still gets an empty scratch and, after Python, a new worker ("after-python";
    # the default, per-tenant, keeps it for the same tenant: the test above)
    with LocalBackend(DEVICES, tmp_path / "w", ManualClock(T0), emulated=True,
                      recycle="after-python") as b:  # fmt: skip
        run(b, task("x", GPU0, tmp_path, None, write_scratch, job="jx"))
        pid = run(b, task("pid", GPU0, tmp_path, None, getpid, job="jp"))["pid"].result
        assert run(b, task("z", GPU0, tmp_path, None, read_scratch, job="jz"))["z"].result == []
        assert run(b, task("pid2", GPU0, tmp_path, None, getpid, job="jq"))["pid2"].result != pid
    # recycle="never" keeps the worker (as refresh does), and still empties the scratch
    with LocalBackend(DEVICES, tmp_path / "v", ManualClock(T0), emulated=True,
                      recycle="never") as b:  # fmt: skip
        run(b, task("x", GPU0, tmp_path, None, write_scratch, job="jx"))
        pid = run(b, task("pid", GPU0, tmp_path, None, getpid, job="jp"))["pid"].result
        assert run(b, task("z", GPU0, tmp_path, None, read_scratch, job="jz"))["z"].result == []
        assert run(b, task("pid2", GPU0, tmp_path, None, getpid, job="jq"))["pid2"].result == pid


def test_kill_worker_kills_every_lane_and_heartbeats_watch_them_all(tmp_path: Path) -> None:
    with LocalBackend(DEVICES, tmp_path / "w", ManualClock(T0), emulated=True) as b:
        for name in ("a", "b"):
            b.launch(task(name, GPU0, tmp_path, "sleep 100", job=name))
        until(b, lambda ev: len(ev) >= 2)
        pids = {w.proc.pid for w in b._pool.lanes(GPU0)}
        assert len(pids) == 2 and b.heartbeats()[GPU0][1] in pids
        assert b.kill_worker(GPU0, "hung")
        lost = until(b, lambda ev: len(ev) >= 2)
        assert sorted((e.task_id, e.kind) for e in lost) == [
            ("a", TaskEventKind.LOST), ("b", TaskEventKind.LOST)]  # fmt: skip
        assert GPU0 not in b.heartbeats()


def test_a_lane_whose_cleaning_failed_is_still_cleaned_before_its_next_task(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the mark that a lane needs cleaning was dropped before the cleaning: a task refused
    # because the scratch could not be emptied let the next tenant run in the old scratch
    with LocalBackend(DEVICES, tmp_path / "w", ManualClock(T0), emulated=True) as b:
        run(b, task("t1", GPU0, tmp_path, None, write_scratch, job="j1"))
        real = b._empty
        monkeypatch.setattr(b, "_empty", lambda scratch: f"could not empty {scratch}: fault")
        ev = run(b, task("t2", GPU0, tmp_path, "true", job="j2"))["t2"]
        assert ev.kind is TaskEventKind.FAILED and "could not empty" in (ev.error or "")
        monkeypatch.setattr(b, "_empty", real)  # the fault goes away
        assert run(b, task("t3", GPU0, tmp_path, None, read_scratch, job="j3"))["t3"].result == []


def test_a_task_that_asks_for_a_fresh_worker_leaves_its_process_to_no_other(
    tmp_path: Path,
) -> None:
    # as Ray's max_calls=1: the worker its Python ran in is replaced before the next task,
    # of the same tenant too (refreshed or not in between); without the ask it stays warm
    with LocalBackend(DEVICES, tmp_path / "w", ManualClock(T0), emulated=True) as b:
        warm = run(b, task("a", GPU0, tmp_path, None, getpid))["a"].result
        assert run(b, task("b", GPU0, tmp_path, None, getpid))["b"].result == warm
        asks = dataclasses.replace(task("c", GPU0, tmp_path, None, getpid), fresh_worker=True)
        assert run(b, asks)["c"].result == warm  # it runs where it finds the worker
        after = run(b, task("d", GPU0, tmp_path, None, getpid))["d"].result
        assert after not in (None, warm)
        assert b.refresh(GPU0)[0]
        assert run(b, task("e", GPU0, tmp_path, None, getpid))["e"].result == after


def test_a_worker_killed_as_it_starts_loses_the_task_and_says_how(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the chaos bench's worker kills can land between a worker's spawn and its first task:
    # the task never ran, so it is LOST (not a failure of its own) and the error names the
    # signal, as a worker that dies while it runs a task does
    b = LocalBackend(DEVICES, tmp_path / "work", ManualClock(T0), kill_grace_s=0.5)
    pool = b._pool
    spawn = pool.start

    def start_and_kill(device: object, lane: int = 0) -> object:
        w = spawn(device, lane)  # type: ignore[arg-type]
        os.kill(w.proc.pid, 9)
        w.proc.wait(10)
        pool.on_death(w)  # what the first send to it finds out
        return w

    monkeypatch.setattr(pool, "start", start_and_kill)
    try:
        b.launch(task("t", GPU0, tmp_path, "true"))
        (ev,) = until(b, lambda evs: len(evs) == 1)
        assert ev.kind is TaskEventKind.LOST
        assert "killed by SIGKILL as the task was sent to it" in (ev.error or "")
        assert GPU0 in (ev.error or "")
        assert [loss.device for loss in b.take_losses()] == [GPU0]
        monkeypatch.undo()  # the device's next task gets a worker that lives
        b.launch(task("u", GPU0, tmp_path, "true"))
        assert until(b, lambda evs: any(e.kind is TaskEventKind.SUCCEEDED for e in evs))
    finally:
        b.close()
