"""Real worker processes (gloo on this machine's first two CPU cores): errors surface with
the rank and device, and no worker outlives a failed, stalled or interrupted run."""

from __future__ import annotations

from collections.abc import Iterator

import psutil
import pytest

from accelnet.commbench import BenchError, BenchPlan, Settings, make_steps, plan_bench, run_bench
from accelnet.commbench.affinity import physical_cores
from accelnet.commbench.worker import Step
from accelnet.fabric.discovery import discover

FAST = Settings(warmup=0, iters=1)


@pytest.fixture(scope="module")
def plan() -> BenchPlan:
    local = discover("per-core").fabric
    cores = physical_cores()
    if len(cores) < 2:
        pytest.skip("needs 2 CPU cores")
    return plan_bench(local, ["cpu0", "cpu1"], local, cores)


@pytest.fixture
def no_orphans() -> Iterator[None]:
    """Fail if the test leaves a child process behind that it did not find at its start."""
    me = psutil.Process()
    before = {p.pid for p in me.children(recursive=True)}
    yield
    left = [p for p in me.children(recursive=True) if p.pid not in before and p.is_running()]
    left = [p for p in left if p.status() != psutil.STATUS_ZOMBIE]
    assert not left, f"workers left running: {left}"


def test_a_workers_error_names_its_rank_and_device(plan: BenchPlan, no_orphans: None) -> None:
    bad = (Step("allreduce", 0, 0),)  # an empty buffer: torch/gloo refuse it
    with pytest.raises(BenchError) as e:
        run_bench(plan, bad, FAST)
    where, _, why = str(e.value).partition(": ")
    assert where in {f"rank {k} ({d})" for k, d in enumerate(plan.comm.ranks)}
    assert why  # the worker's own message: "Type: text"


def test_interrupt_stops_every_worker(plan: BenchPlan, no_orphans: None) -> None:
    def interrupt(step: int) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_bench(plan, make_steps(["allreduce"], [1024, 2048], 2), FAST, interrupt)


def test_a_stalled_run_gives_up(plan: BenchPlan, no_orphans: None) -> None:
    with pytest.raises(BenchError, match=r"no rank reported for 0\.2 s"):
        run_bench(plan, make_steps(["allreduce"], [1024], 2), Settings(stall_s=0.2))


def test_missing_torch_names_the_extra(
    plan: BenchPlan, monkeypatch: pytest.MonkeyPatch, no_orphans: None
) -> None:
    from accelnet.commbench import runner

    monkeypatch.setattr(runner.importlib.util, "find_spec", lambda name: None)
    monkeypatch.setattr(runner.subprocess, "Popen", _no_process)
    with pytest.raises(BenchError, match=r"pip install 'accelnet\[torch\]'"):
        run_bench(plan, make_steps(["allreduce"], [1024], 2), FAST)


def _no_process(*args: object) -> None:
    raise AssertionError("a process was about to start")
