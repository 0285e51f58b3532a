"""Histograms: buckets are cumulative, <= bound, +Inf implied; the decision timer is
thread-safe and times a block even when it raises."""

from __future__ import annotations

import math
import threading

import pytest

from accelnet.monitor import DECISION_BUCKETS, DecisionTimer, HistogramSnapshot, histogram
from accelnet.monitor.timing import check_bounds


def test_histogram_counts_values_at_or_below_each_bound() -> None:
    h = histogram([0.5, 1.0, 1.0, 3.0, 100.0], [1.0, 2.0, 5.0])
    assert h.cumulative == (3, 3, 4)  # 1.0 falls in le="1.0"
    assert h.count == 5
    assert h.total == pytest.approx(105.5)
    assert h.buckets() == [(1.0, 3), (2.0, 3), (5.0, 4), (math.inf, 5)]


def test_empty_histogram_has_zero_buckets() -> None:
    h = HistogramSnapshot.empty([0.1, 1.0])
    assert h.buckets() == [(0.1, 0), (1.0, 0), (math.inf, 0)]
    assert h.total == 0.0


@pytest.mark.parametrize("bounds", [[], [1.0, 1.0], [2.0, 1.0], [1.0, math.inf], [math.nan]])
def test_bad_bounds_are_refused(bounds: list[float]) -> None:
    with pytest.raises(ValueError, match="histogram"):
        check_bounds(bounds)


@pytest.mark.parametrize("value", [-0.1, math.nan, math.inf])
def test_bad_observations_are_refused(value: float) -> None:
    with pytest.raises(ValueError, match="finite and >= 0"):
        histogram([value], [1.0])
    with pytest.raises(ValueError, match="finite and >= 0"):
        DecisionTimer().observe(value)


def test_snapshot_rejects_decreasing_counts() -> None:
    with pytest.raises(ValueError, match="must not decrease"):
        HistogramSnapshot((1.0, 2.0), (2, 1), 2, 1.0)
    with pytest.raises(ValueError, match="must not decrease"):
        HistogramSnapshot((1.0,), (3,), 2, 1.0)  # more below the bound than in all


def test_decision_timer_measures_with_the_injected_timer() -> None:
    ticks = iter([10.0, 10.0004, 20.0, 20.3])
    timer = DecisionTimer(timer=lambda: next(ticks))
    with timer.measure():
        pass
    with pytest.raises(RuntimeError), timer.measure():
        raise RuntimeError("the decision failed: its time still counts")
    snap = timer.snapshot()
    assert snap.bounds == DECISION_BUCKETS
    assert snap.count == 2
    assert snap.total == pytest.approx(0.3004)
    by_bound = dict(snap.buckets())
    assert by_bound[0.0005] == 1 and by_bound[0.25] == 1 and by_bound[0.5] == 2


def test_decision_timer_is_safe_across_threads() -> None:
    timer = DecisionTimer(buckets=[0.5])
    snapshots: list[HistogramSnapshot] = []

    def observe() -> None:
        for _ in range(2000):
            timer.observe(0.25)

    def read() -> None:
        for _ in range(200):
            snapshots.append(timer.snapshot())

    threads = [threading.Thread(target=observe) for _ in range(4)]
    threads.append(threading.Thread(target=read))
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    final = timer.snapshot()
    assert final.count == 8000 and final.cumulative == (8000,)
    assert final.total == pytest.approx(2000.0)
    for s in snapshots:  # every snapshot is consistent: all observations fall in le=0.5
        assert s.cumulative == (s.count,)
