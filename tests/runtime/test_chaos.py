"""A seeded chaos run at a reduced size (bench/chaos_bench.py is the long one): the
controller SIGKILLed and restarted on its SQLite file several times, workers SIGKILLed,
devices failed and repaired; then every invariant holds and no job is lost."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

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
    doomed = sum(1 for j in bench.workload(cfg.jobs, cfg.seed, tmp_path) if j["run"] == "exit 4")
    assert report.states == {"succeeded": cfg.jobs - doomed, "failed": doomed}  # as planned
