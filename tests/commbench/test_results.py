"""Rows beside the model (nccl-tests' algbw/busbw), their summary and the JSON document."""

from __future__ import annotations

import pytest

from accelnet.comm import CostModel
from accelnet.commbench import SCHEMA, Measurement, Settings, bench_json, make_steps, plan_bench
from accelnet.commbench.results import band, make_rows, summarize
from accelnet.fabric.discovery import discover
from tests.fabric import nvml_fake as nf


def test_rows_follow_nccl_tests_and_the_model() -> None:
    local = discover(2, nvml=nf.FakeNvml(nf.Machine("550.0", (), {})), hostname="vm").fabric
    plan = plan_bench(local, None, local, ((0,), (1,)))
    steps = make_steps(["allreduce", "allgather"], [1 << 10, 1 << 20, 1 << 26], 2)
    found = [Measurement(s, (2e-3, 1e-3, 5e-3)) for s in steps]
    model = CostModel()
    rows = make_rows(plan, found, model)
    for r in rows:
        assert r.time_s == 2e-3  # the median of the repeats
        assert r.algbw_gbps == r.nbytes / 2e-3 / 1e9
        want = 1.0 if r.collective == "allreduce" else 0.5  # 2(p-1)/p, (p-1)/p
        assert r.busbw_gbps == r.algbw_gbps * want
        pred = model.estimate(plan.comm, r.collective, r.nbytes, "ring")
        assert r.predicted == pred
        assert r.ratio == pytest.approx(pred.time_s / r.time_s)
    doc = bench_json(plan, rows, Settings(repeats=3), model, {"host": "vm", "cores": 2})
    assert doc["schema"] == SCHEMA == "accelnet.comm-bench/v1"
    assert doc["devices"] == ["vm/cpu0", "vm/cpu1"]
    assert doc["backend"] == "gloo" and doc["model"]["algorithm"] == "ring"
    assert doc["calibration"] is None and doc["machine"]["cores"] == 2
    assert doc["rows"][0]["times_us"] == pytest.approx([2000.0, 1000.0, 5000.0])
    assert set(doc["summary"]) == {"allreduce", "allgather"}
    assert set(doc["summary"]["allreduce"]) == {"small", "medium", "large", "all"}


def test_bands_and_worst_factor() -> None:
    assert [band(n) for n in (1 << 10, (64 << 10) - 1, 64 << 10, 4 << 20)] == [
        "small",
        "small",
        "medium",
        "large",
    ]
    assert summarize([]) == {}
