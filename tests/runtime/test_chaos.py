"""A seeded chaos run at a reduced size (bench/chaos_bench.py is the long one): the
controller SIGKILLed and restarted on its SQLite file several times, workers SIGKILLed,
devices failed and repaired; then every invariant holds and no job is lost."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType, SimpleNamespace

import pytest

from tests.benchload import load_bench


def _bench() -> ModuleType:
    return load_bench("chaos_bench")


@pytest.mark.slow
def test_chaos_run_keeps_every_invariant_and_loses_no_job(tmp_path: Path) -> None:
    bench = _bench()
    # a third of the single jobs take half a device: devices run two tasks at once too
    cfg = bench.ChaosConfig(
        jobs=80, controller_kills=6, worker_kills=12, fault_rate=2.0, seed=7, timeout_s=90.0,
        shares=0.3,
    )  # fmt: skip
    report = bench.run_chaos(cfg, tmp_path / "chaos")
    assert report.lost == [] and report.duplicated == []
    assert report.unfinished == []
    assert report.violations == []
    assert report.controller_kills >= 3, "the run ended before the kills were spent"
    assert report.worker_kills >= 1
    assert sum(report.states.values()) == cfg.jobs
    # as planned: the doomed jobs failed, every other one succeeded, but for those the
    # crash-loop guard held (each running at two or more controller deaths: the audit checks)
    # or whose every attempt the chaos itself ended (out of retries: the audit checks each)
    assert report.unplanned == []
    doomed = {
        j["name"] for j in bench.workload(cfg.jobs, cfg.seed, tmp_path) if j["run"] == "exit 4"
    }
    held = (set(report.held) | set(report.spent)) - doomed  # (a job's id is its name)
    assert report.states.get("succeeded", 0) == cfg.jobs - len(doomed) - len(held)


def _failed(budget: int, causes: list[str]) -> tuple[SimpleNamespace, list[SimpleNamespace]]:
    """A job record that ended FAILED after ``causes`` (its retries, then its last error)."""
    events = [
        SimpleNamespace(detail=f"requeued (retry {n} of {budget}): {why}")
        for n, why in enumerate(causes[:-1], 1)
    ]
    events.insert(0, SimpleNamespace(detail="requeued: lost when the controller restarted"))
    record = SimpleNamespace(spec=SimpleNamespace(max_retries=budget), error=causes[-1])
    return record, events


def test_a_job_whose_every_retry_the_chaos_spent_is_told_apart_from_an_unplanned_failure() -> None:
    # seed 9 of the long run: a 4-device gang left last in the queue ran under every kill of
    # the last seconds and failed 9 times, each by the harness's own hand
    spent = _bench()._spent
    kill = "rank 1 lost: worker of dgx1/gpu1 (pid 18571) killed by SIGKILL while it ran this task"
    chaos = [
        kill,
        "lost when the controller restarted (2 times while it ran)",
        "device dgx1/gpu2 failed: chaos: injected fault",
        "rank 3 failed: killed by SIGKILL",
        "rank 1 failed: exited with code 137; stderr ends:\nKilled",  # its `sleep` killed
    ]
    assert spent(*_failed(4, chaos))
    # a failure of the job's own (an exit code), a timeout, or fewer failures than its budget
    # (a requeue the controller skipped) are not the chaos's doing: unplanned
    assert not spent(*_failed(4, [*chaos[:4], "rank 0 failed: exited with code 3"]))
    assert not spent(*_failed(4, [*chaos[:4], "timed out after 5 s"]))
    assert not spent(*_failed(4, chaos[:4]))
    assert not spent(*_failed(3, chaos))


def test_the_harness_waits_for_the_life_it_started_even_if_an_earlier_one_never_said_ready(
    tmp_path: Path,
) -> None:
    # life 0 was killed before its "ready" line; life 1 wrote its own: life 1 is up (the
    # harness used to count lines and wait for a second one that never came)
    bench = _bench()
    assert not bench._is_ready(tmp_path, 0)
    (tmp_path / "ready.txt").write_text("1 1700000000.0\n")
    assert bench._is_ready(tmp_path, 1)
    assert not bench._is_ready(tmp_path, 0) and not bench._is_ready(tmp_path, 2)
    assert not bench._is_ready(tmp_path, 11)  # by number, not by prefix
