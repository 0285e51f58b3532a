"""The jobs waiting out a retry backoff (accelnet.runtime.control.retry_waits): they answer
as a plain dict scanned every time would, without the scan."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from accelnet.runtime.control.retry_waits import RetryWaits

JOBS = [f"j{i}" for i in range(6)]
op = st.one_of(
    st.tuples(st.just("set"), st.sampled_from(JOBS), st.integers(0, 20)),
    st.tuples(st.just("pop"), st.sampled_from(JOBS), st.just(0)),
    st.tuples(st.just("due"), st.just(""), st.integers(0, 20)),
)


@settings(max_examples=200, deadline=None)
@given(st.lists(op, max_size=60))
def test_waits_answer_as_a_scanned_dict_would(ops: list[tuple[str, str, int]]) -> None:
    waits, model = RetryWaits(), {}
    for kind, job, t in ops:
        if kind == "set":
            waits.set(job, float(t))
            model[job] = float(t)
        elif kind == "pop":
            waits.pop(job)
            model.pop(job, None)
        else:
            due = sorted(waits.due(float(t)))
            assert due == sorted(j for j, at in model.items() if at <= t)
            model = {j: at for j, at in model.items() if at > t}
        assert waits.first() == (min(model.values()) if model else None)
        assert len(waits) == len(model) and bool(waits) == bool(model)
        assert all(waits.get(j) == model.get(j) for j in JOBS)


def test_waits_end_in_time_order_among_many() -> None:
    waits = RetryWaits()
    for i in reversed(range(10_000)):
        waits.set(f"j{i}", 1_000.0 + i)
    assert waits.due(999.0) == [] and len(waits) == 10_000
    assert waits.due(1_001.5) == ["j0", "j1"] and waits.first() == 1_002.0


def test_jobs_given_up_before_their_time_do_not_pile_up() -> None:
    waits = RetryWaits()
    waits.set("long", 1e9)
    for i in range(10_000):  # set and cancelled long before their time
        waits.set(f"j{i}", 100.0 + i)
        waits.pop(f"j{i}")
    assert len(waits._heap) <= 2 * len(waits) + 65
    assert waits.first() == 1e9 and waits.due(1e9) == ["long"] and not waits
