"""Figures of hand-built simulations, checked against values worked out by hand."""

from __future__ import annotations

import json
from itertools import pairwise

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from accelnet.sim.metrics import SCHEMA, Distribution, StepFunction, compute, finish_time_fairness
from accelnet.sim.records import JobOutcome, Sample, SimResult


def fifo_result(policy: str = "fifo") -> SimResult:
    """One V100; FIFO. a runs 0-10, b (arrives at 2) waits until 10 and runs to 15 (its
    deadline 12 missed), idle 15-20, c runs 20-24 (deadline 30 met), d arrives at 26 needing
    two devices and never runs (deadline 28, missed when the run stops at 30)."""
    jobs = [
        JobOutcome(
            "a", "resnet", "t1", 1, arrival=0.0, work=100, state="succeeded",
            first_start=0.0, end=10.0, attempts=1, run_s=10.0, device_s={"V100": 10.0},
            energy_j=3000.0, alone_s=10.0,
        ),
        JobOutcome(
            "b", "bert", "t2", 1, arrival=2.0, work=50, deadline=12.0, state="succeeded",
            first_start=10.0, end=15.0, attempts=1, run_s=5.0, device_s={"V100": 5.0},
            energy_j=1500.0, alone_s=5.0,
        ),
        JobOutcome(
            "c", "resnet", "t1", 1, arrival=20.0, work=40, deadline=30.0, state="succeeded",
            first_start=20.0, end=24.0, attempts=2, preemptions=1, failures=1, run_s=4.0,
            device_s={"V100": 4.0}, energy_j=1200.0, alone_s=4.0,
        ),
        JobOutcome("d", "gpt", "t2", 2, arrival=26.0, work=30, deadline=28.0, alone_s=3.0),
    ]  # fmt: skip
    on = {"V100": 1}
    samples = [
        Sample(0.0, 1, 1, 300.0, 0, 1, on),
        Sample(2.0, 1, 1, 300.0, 1, 1, on),
        Sample(10.0, 1, 1, 300.0, 0, 1, on),
        Sample(15.0, 0, 1, 50.0, 0, 0, {}),
        Sample(20.0, 1, 1, 300.0, 0, 1, on),
        Sample(24.0, 0, 1, 50.0, 0, 0, {}),
        Sample(26.0, 0, 1, 50.0, 1, 0, {}),
    ]
    return SimResult(
        policy, "one-v100", "hand", 0, jobs, samples, {"V100": 1}, end=30.0,
        wall_s=0.5, events=40, decisions=8, peak_rss_mb=120.0,
    )  # fmt: skip


def test_counts_and_times_by_hand() -> None:
    m = compute(fifo_result())
    assert (m.jobs_total, m.jobs_finished, m.jobs_failed, m.jobs_unfinished) == (4, 3, 0, 1)
    assert m.jct.count == 3
    assert m.jct.avg == pytest.approx(9.0)  # 10, 13, 4
    assert m.jct.median == pytest.approx(10.0)
    assert m.jct.p95 == pytest.approx(np.percentile([10, 13, 4], 95))
    assert m.queueing.count == 3  # d never started
    assert m.queueing.avg == pytest.approx(8.0 / 3)  # 0, 8, 0
    assert m.queueing.median == pytest.approx(0.0)
    assert m.makespan_s == pytest.approx(24.0)
    assert (m.window_start, m.window_end) == (0.0, 24.0)


def test_utilization_and_tenants_by_hand() -> None:
    m = compute(fifo_result())
    assert m.utilization == pytest.approx(19.0 / 24.0)  # busy 0-15 and 20-24 of [0, 24]
    assert m.utilization_by_model == pytest.approx({"V100": 19.0 / 24.0})
    assert m.tenant_share == pytest.approx({"t1": 14.0 / 19.0, "t2": 5.0 / 19.0})
    assert m.tenant_avg_jct["t1"] == pytest.approx(7.0)
    assert m.tenant_avg_jct["t2"] == pytest.approx(13.0)


def test_fairness_by_hand() -> None:
    m = compute(fifo_result())
    # a: N over [0, 10] = (1*2 + 2*8) / 10 = 1.8; rho = 10 / (10 * 1.8)
    # b: N over [2, 15] = (2*8 + 1*5) / 13 = 21/13; rho = 13 / (5 * 21/13) = 169/105
    # c: N over [20, 24] = 1; rho = 4 / 4
    expected = {"a": 10 / 18, "b": 169 / 105, "c": 1.0}
    assert m.rho_by_job == pytest.approx(expected)
    assert m.rho_avg == pytest.approx(sum(expected.values()) / 3)
    assert m.rho_max == pytest.approx(169 / 105)
    assert m.rho_over_1 == pytest.approx(1 / 3)


def test_energy_deadlines_bounds_cost_by_hand() -> None:
    m = compute(fifo_result())
    assert m.energy_j == pytest.approx(300 * 15 + 50 * 5 + 300 * 4 + 50 * 6)  # to end=30
    assert m.avg_power_w == pytest.approx(6250.0 / 30.0)
    assert m.energy_jobs_j == pytest.approx(5700.0)
    assert m.peak_power_w == 300.0
    assert (m.preemptions, m.failures) == (1, 1)
    assert (m.deadline_jobs, m.deadline_missed) == (3, 2)  # b late, d unfinished past 28
    # makespan lb = max((10 + 5 + 4) / 1 device, max(10, 7, 24) - 0) = 24
    assert m.makespan_lb_s == pytest.approx(24.0)
    assert m.makespan_ratio == pytest.approx(1.0)
    assert m.jct_lb_avg_s == pytest.approx(19.0 / 3)
    assert m.jct_ratio == pytest.approx(9.0 / (19.0 / 3))
    assert (m.wall_s, m.events, m.decisions, m.peak_rss_mb) == (0.5, 40, 8, 120.0)
    assert m.events_per_s == pytest.approx(80.0)


def test_unfinished_deadline_before_end_is_not_missed_yet() -> None:
    r = fifo_result()
    r.end = 27.0  # d's deadline 28 not yet passed
    assert compute(r).deadline_missed == 1


def test_failed_job_misses_its_deadline() -> None:
    r = fifo_result()
    r.jobs[3].state = "failed"
    r.jobs[3].deadline = 100.0
    m = compute(r)
    assert (m.jobs_failed, m.jobs_unfinished, m.deadline_missed) == (1, 0, 2)


def test_nothing_finished() -> None:
    job = JobOutcome("x", "t", "u", 1, arrival=5.0, work=1.0, alone_s=1.0)
    r = SimResult("p", "f", "t", 1, [job], [Sample(5.0, 0, 2, 10.0, 1, 0)], {"A": 2}, end=9.0)
    m = compute(r)
    assert m.makespan_s is None and m.jct.avg is None and m.jct.count == 0
    assert m.makespan_lb_s is None and m.jct_ratio is None and m.rho_avg is None
    assert m.utilization == 0.0  # window falls back to [first arrival, end]
    assert (m.window_start, m.window_end) == (5.0, 9.0)
    assert m.energy_j == pytest.approx(40.0)
    assert m.events_per_s is None
    json.dumps(m.to_json(), allow_nan=False)


def test_empty_result() -> None:
    m = compute(SimResult("p", "f", "t", 0, [], [], {}))
    assert m.jobs_total == 0 and m.utilization is None and m.energy_j == 0.0
    assert m.peak_power_w is None and m.tenant_share == {}
    json.dumps(m.to_json(), allow_nan=False)


def test_samples_out_of_order_are_sorted() -> None:
    r = fifo_result()
    r.samples = list(reversed(r.samples))
    assert compute(r) == compute(fifo_result())


def test_to_json_schema_and_rounding() -> None:
    doc = compute(fifo_result()).to_json()
    assert doc["schema"] == SCHEMA == "accelnet.sim.metrics/v1"
    assert doc["jobs"] == {
        "total": 4, "finished": 3, "failed": 0, "cancelled": 0, "unfinished": 1, "rejected": 0
    }  # fmt: skip
    assert doc["utilization"] == pytest.approx(19 / 24, rel=1e-6)
    assert doc["utilization"] == float(f"{19 / 24:.7g}")
    assert doc["tenants"]["t1"]["avg_jct_s"] == 7.0
    assert doc["bounds"]["makespan_lb_s"] == 24.0
    assert "rho_by_job" not in doc
    assert json.loads(json.dumps(doc)) == doc


def test_step_integral_exact() -> None:
    f = StepFunction([1.0, 3.0, 3.0, 4.0, 8.0], [2.0, 7.0, 5.0, 0.5, 1.0])
    # 2 on [1, 3), 5 on [3, 4) (the later sample at 3 wins), 0.5 on [4, 8), 1 after 8
    assert f.integral(0.0, 10.0) == 2 * 2 + 5 * 1 + 0.5 * 4 + 1 * 2
    assert f.integral(0.0, 1.0) == 0.0
    assert f.integral(2.0, 3.5) == 2 * 1 + 5 * 0.5
    assert f.integral(5.0, 5.0) == 0.0
    assert f.mean(1.0, 4.0) == pytest.approx(3.0)
    assert f.mean(3.0, 3.0) == 5.0
    assert list(f.at([0.0, 1.0, 2.9, 3.0, 9.0])) == [0.0, 2.0, 2.0, 5.0, 1.0]
    with pytest.raises(ValueError, match="decrease"):
        StepFunction([2.0, 1.0], [0.0, 0.0])


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.floats(min_value=0.0, max_value=1e6, allow_nan=False, allow_infinity=False),
        min_size=1,
        max_size=60,
    )
)
def test_percentiles_match_numpy(values: list[float]) -> None:
    jobs = [
        JobOutcome(
            f"j{i}", "t", "u", 1, arrival=0.0, work=1.0, state="succeeded",
            first_start=v / 2, end=v, alone_s=1.0,
        )
        for i, v in enumerate(values)
    ]  # fmt: skip
    m = compute(SimResult("p", "f", "t", 0, jobs, [], {"A": 1}))
    arr = np.array(values)
    assert m.jct.avg == pytest.approx(arr.mean())
    for got, q in ((m.jct.median, 50), (m.jct.p95, 95), (m.jct.p99, 99)):
        assert got == pytest.approx(np.percentile(arr, q, method="linear"))
    assert m.queueing.p99 == pytest.approx(np.percentile(arr / 2, 99))
    assert Distribution.of([]) == Distribution(0, None, None, None, None)


@settings(max_examples=40, deadline=None)
@given(
    steps=st.lists(st.tuples(st.integers(0, 5), st.integers(0, 4)), min_size=1, max_size=25),
    spans=st.lists(st.tuples(st.integers(0, 30), st.integers(0, 10)), min_size=1, max_size=15),
)
def test_rho_matches_brute_force(
    steps: list[tuple[int, int]], spans: list[tuple[int, int]]
) -> None:
    times = np.cumsum([float(d) for d, _ in steps])
    counts = [float(c) for _, c in steps]
    f = StepFunction(times, counts)
    jobs = [
        JobOutcome(
            f"j{i}", "t", "u", 1, arrival=float(a), work=1.0, state="succeeded",
            end=float(a + d), alone_s=0.5,
        )
        for i, (a, d) in enumerate(spans)
    ]  # fmt: skip
    rho = finish_time_fairness(jobs, f)

    def value(x: float) -> float:  # the step function, read one sample at a time
        last = 0.0
        for t, c in zip(times, counts, strict=True):
            if t <= x:
                last = c
        return last

    for j in jobs:
        assert j.end is not None
        if j.end > j.arrival:
            cuts = sorted({j.arrival, j.end, *(t for t in times if j.arrival < t < j.end)})
            area = sum(value(a) * (b - a) for a, b in pairwise(cuts))
            n = max(1.0, area / (j.end - j.arrival))
        else:
            n = max(1.0, value(j.arrival))
        assert rho[j.id] == pytest.approx((j.end - j.arrival) / (0.5 * n))
