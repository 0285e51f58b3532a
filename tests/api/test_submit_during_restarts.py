"""Submissions through the REST API while the server is SIGKILLed and restarted, at a
reduced size (bench/api_chaos_bench.py is the long one): every acknowledged submission is
in the store, none twice, and the store's invariants hold."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

BENCH = Path(__file__).parents[2] / "bench" / "api_chaos_bench.py"


def _bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("api_chaos_bench", BENCH)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


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
