"""``bench/jct_yardstick.py``: its preemptive priority schedules checked by hand, and its
search never worse than every priority order tried exhaustively on a small case."""

from __future__ import annotations

import itertools
import math
import random
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests.benchload import load_bench

TRACE = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "gavel" / "traces"


@pytest.fixture(scope="module")
def ys() -> ModuleType:
    return load_bench("jct_yardstick")


def inst(ys: ModuleType, jobs: list[tuple[float, float, int, dict[str, float]]],
         cap: dict[str, int]) -> Any:  # fmt: skip
    """An instance from (arrival, work, gang, rates) rows."""
    return ys.Instance(
        tuple(j[0] for j in jobs), tuple(j[1] for j in jobs), tuple(j[2] for j in jobs),
        tuple(j[3] for j in jobs), cap,
    )  # fmt: skip


def test_one_device_runs_jobs_in_priority_order(ys: ModuleType) -> None:
    i = inst(ys, [(0, 10, 1, {"A": 1.0}), (0, 20, 1, {"A": 1.0})], {"A": 1})
    assert ys.schedule(i, [0, 1], [("A",), ("A",)]) == [10, 30]
    assert ys.schedule(i, [1, 0], [("A",), ("A",)]) == [30, 20]


def test_a_later_arrival_with_priority_preempts(ys: ModuleType) -> None:
    i = inst(ys, [(0, 10, 1, {"A": 1.0}), (5, 2, 1, {"A": 1.0})], {"A": 1})
    assert ys.schedule(i, [1, 0], [("A",), ("A",)]) == [12, 7]
    assert ys.schedule(i, [0, 1], [("A",), ("A",)]) == [10, 12]


def test_gangs_take_room_on_one_model_and_preferences_can_wait(ys: ModuleType) -> None:
    rates = {"V": 2.0, "P": 1.0}
    i = inst(ys, [(0, 10, 2, rates), (0, 10, 2, rates), (0, 10, 2, rates)], {"V": 3, "P": 2})
    # room for one gang of 2 on each model: job 0 on V (done at 5), job 1 on P until then
    # (5 done), then on V (5 left at 2/s: 7.5); job 2 on P from 5 (2.5 done), then on V
    # from 7.5 (7.5 left at 2/s: 11.25)
    assert ys.schedule(i, [0, 1, 2], [("V", "P")] * 3) == [5, 7.5, 11.25]
    # job 1 will not run on P: it waits for V behind job 0; job 2 takes P meanwhile and
    # stays there (V is full)
    assert ys.schedule(i, [0, 1, 2], [("V", "P"), ("V",), ("V", "P")]) == [5, 10, 10]
    # job 2 first: it moves from P to V at 5 (5 left: 7.5); job 1 then has V
    assert ys.schedule(i, [0, 2, 1], [("V", "P"), ("V",), ("V", "P")]) == [5, 12.5, 7.5]
    # a model too small for the gang, or with no rate, is not usable
    assert ys.Instance((0.0,), (1.0,), (4,), ({"V": 1.0, "P": 0.0},), {"V": 4, "P": 8}).models(
        0
    ) == ("V",)


def test_slower_models_run_at_their_rate(ys: ModuleType) -> None:
    i = inst(
        ys, [(0, 12, 1, {"V": 3.0, "K": 1.0}), (0, 12, 1, {"V": 3.0, "K": 1.0})], {"V": 1, "K": 1}
    )
    # job 1 on K does 4 units in job 0's 4 s on V, then moves to V: 8 left at 3/s
    assert ys.schedule(i, [0, 1], [("V", "K")] * 2) == pytest.approx([4, 4 + 8 / 3])


def test_bad_orders_and_preferences_are_named(ys: ModuleType) -> None:
    i = inst(ys, [(0, 1, 1, {"A": 1.0}), (0, 1, 1, {"A": 1.0})], {"A": 1})
    with pytest.raises(ValueError, match="every job exactly once"):
        ys.schedule(i, [0, 0], [("A",), ("A",)])
    with pytest.raises(ValueError, match=r"job 1: preference \('B',\) has no usable model"):
        ys.schedule(i, [0, 1], [("A",), ("B",)])


def test_score_counts_a_makespan_over_the_limit_as_infeasible(ys: ModuleType) -> None:
    i = inst(ys, [(0, 10, 1, {"A": 1.0}), (0, 20, 1, {"A": 1.0})], {"A": 1})
    ok = ys.score(i, [0, 1], [("A",), ("A",)], math.inf)
    assert (ok.avg_jct_s, ok.makespan_s, ok.cost) == (20, 30, 20)
    over = ys.score(i, [0, 1], [("A",), ("A",)], 25.0)
    assert over.cost > 10_000 > ok.cost


def test_search_is_no_worse_than_every_priority_order(ys: ModuleType) -> None:
    rng = random.Random(3)
    rows = [
        (rng.uniform(0, 20), rng.uniform(5, 60), rng.choice([1, 1, 2]),
         {"V": rng.uniform(1, 3), "P": rng.uniform(0.5, 2), "K": rng.uniform(0.1, 1)})
        for _ in range(6)
    ]  # fmt: skip
    i = inst(ys, rows, {"V": 2, "P": 2, "K": 2})
    fastest = [i.models(k) for k in range(i.n)]
    exhaustive = min(
        ys.score(i, list(p), fastest, math.inf).avg_jct_s
        for p in itertools.permutations(range(i.n))
    )
    state = ys.start(i, 0, math.inf)
    found = ys.anneal(i, state, 3000, 3000, 5.0, math.inf)
    assert found.step == 3000
    assert found.best.avg_jct_s <= exhaustive + 1e-9
    assert found.best.avg_jct_s <= state.best.avg_jct_s
    again = ys.score(i, found.best_prio, found.best_pref, math.inf)
    assert again.avg_jct_s == pytest.approx(found.best.avg_jct_s)
    # chunks resume where they stopped: two halves are the same search as one whole
    half = ys.anneal(i, ys.anneal(i, state, 1500, 3000, 5.0, math.inf), 1500, 3000, 5.0, math.inf)
    assert (half.best_prio, half.best_pref) == (found.best_prio, found.best_pref)


def test_gavel_trace_instance_and_start(ys: ModuleType) -> None:
    path = TRACE / "max_min_fairness.trace"
    if not path.exists():
        pytest.skip(f"{path} is absent (shared data not checked out)")
    i = ys.gavel_instance(path)
    assert i.n == 96 and i.capacity == {"K80": 24, "P100": 16, "V100": 8}
    s = ys.start(i, 0, math.inf).best
    # every job done, none before the solo-run bound's average
    alone = sum(i.alone(k) for k in range(i.n)) / i.n
    assert math.isfinite(s.makespan_s) and s.avg_jct_s >= alone
