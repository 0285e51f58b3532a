"""Submissions through the REST API while the server is SIGKILLed and restarted, at a
reduced size (bench/api_chaos_bench.py is the long one): every acknowledged submission is
in the store, none twice, and the store's invariants hold."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest

from tests.benchload import load_bench


def _bench() -> ModuleType:
    return load_bench("api_chaos_bench")


@pytest.mark.slow
def test_no_acknowledged_submission_is_lost_or_doubled_across_restarts(tmp_path: Path) -> None:
    bench = _bench()
    cfg = bench.ApiChaosConfig(submissions=400, clients=6, restarts=4, seed=5, timeout_s=120.0)
    report = bench.run_api_chaos(cfg, tmp_path / "chaos")
    assert report.restarts == cfg.restarts, "the run ended before the restarts were spent"
    assert len(report.downtime_s) == cfg.restarts  # each restarted server answered
    assert report.acknowledged == cfg.submissions and report.given_up == 0
    assert report.lost == [] and report.duplicated == [] and report.mismatched == []
    assert report.stored == report.keys_kept == cfg.submissions
    assert report.unacknowledged_stored == 0
    assert report.violations == []
    assert report.client_retries > 0  # the clients did meet the restarts
    assert report.server_exit == 0
    assert report.ok()
