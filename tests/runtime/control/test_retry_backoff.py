"""Retries with backoff (issue 23 item 6): a failed job waits, exponentially longer after
each failure and with jitter, before its next attempt; the wait outlives a restart of the
controller; a job that succeeds on a retry shows no error."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from accelnet.fabric import load_fabric
from accelnet.runtime.backend import Backend, TaskEvent, TaskEventKind, TaskSpec
from accelnet.runtime.clock import ManualClock
from accelnet.runtime.control.controller import Controller
from accelnet.runtime.control.sqlite_store import SqliteStore
from accelnet.sched import JobSpec, JobState
from accelnet.sched.spec import RetrySpec


class _Scripted(Backend):
    """Every task starts at once and ends as its attempt's entry in ``outcomes`` says
    (attempts past the list succeed)."""

    def __init__(self, clock: ManualClock, outcomes: list[TaskEventKind]) -> None:
        self.clock = clock
        self.outcomes = outcomes
        self.launched: list[tuple[int, float]] = []  # (attempt, when)
        self.events: list[TaskEvent] = []

    def launch(self, task: TaskSpec) -> None:
        now = self.clock.now()
        self.launched.append((task.attempt, now))
        kind = (
            self.outcomes[task.attempt - 1]
            if task.attempt <= len(self.outcomes)
            else TaskEventKind.SUCCEEDED
        )
        self.events.append(TaskEvent(task.task_id, TaskEventKind.STARTED, now))
        error = f"boom in attempt {task.attempt}" if kind is TaskEventKind.FAILED else None
        code = 3 if kind is TaskEventKind.FAILED else 0
        self.events.append(TaskEvent(task.task_id, kind, now, exit_code=code, error=error))

    def cancel(self, task_id: str) -> None:
        pass

    def poll(self, timeout: float) -> list[TaskEvent]:
        out, self.events = self.events, []
        return out

    def close(self) -> None:
        pass


FAILED, OK = TaskEventKind.FAILED, TaskEventKind.SUCCEEDED


def _controller(
    tmp: Path, outcomes: list[TaskEventKind], clock: ManualClock | None = None
) -> tuple[Controller, _Scripted]:
    clock = clock or ManualClock(1000.0)
    backend = _Scripted(clock, outcomes)
    store = SqliteStore(tmp / "state.db")
    return Controller(load_fabric("pcie-4xL4"), store, backend, clock, tmp / "work"), backend


def _spec(retries: int, **retry: float) -> JobSpec:
    return JobSpec.model_validate(
        {"name": "flaky", "run": "true", "max_retries": retries, "retry": retry}
    )


def _steps(ctl: Controller, n: int = 5) -> None:
    for _ in range(n):
        ctl.step(0)


def test_each_retry_waits_its_backoff_and_no_longer(tmp_path: Path) -> None:
    ctl, backend = _controller(tmp_path, [FAILED, FAILED, FAILED])
    clock = backend.clock
    jid = ctl.submit(_spec(3, backoff_s=2.0, factor=3.0, jitter=0.0), job_id="flaky")
    _steps(ctl)
    assert [a for a, _ in backend.launched] == [1]  # failed at once; now it waits
    rec = ctl.store.get(jid)
    assert rec.state is JobState.ADMITTED and rec.retry_at == pytest.approx(1002.0)
    reason = ctl.reason(jid)
    assert reason is not None and "retry backoff after failure 1" in reason
    assert ctl.again_at == pytest.approx(1002.0)  # the loop knows when to look again
    for wait in (2.0, 6.0, 18.0):  # backoff_s, then x3 each time; no jitter: exact
        before = len(backend.launched)
        clock.advance(wait * 0.99)
        _steps(ctl)
        assert len(backend.launched) == before  # not yet
        clock.advance(wait * 0.01 + 1e-6)
        _steps(ctl)
        assert len(backend.launched) == before + 1  # started once the wait ran out
    assert [a for a, _ in backend.launched] == [1, 2, 3, 4]
    starts = [t for _, t in backend.launched]
    gaps = [b - a for a, b in itertools.pairwise(starts)]
    assert gaps[0] >= 2.0 and gaps[1] >= 6.0 and gaps[2] >= 18.0
    rec = ctl.store.get(jid)
    assert rec.state is JobState.SUCCEEDED and rec.failures == 3
    assert rec.error is None  # the first attempts' errors are in the events only
    requeues = [e.detail for e in ctl.store.events(jid) if "requeued (retry" in e.detail]
    assert len(requeues) == 3 and "in 2 s" in requeues[0] and "boom in attempt 1" in requeues[0]


def test_the_backoff_holds_across_a_restart_of_the_controller(tmp_path: Path) -> None:
    ctl, _backend = _controller(tmp_path, [FAILED])
    jid = ctl.submit(_spec(1, backoff_s=30.0, jitter=0.0), job_id="flaky")
    _steps(ctl)
    assert ctl.store.get(jid).retry_at == pytest.approx(1030.0)
    ctl.store.close()  # the controller dies while the job waits
    clock = ManualClock(1010.0)
    again, backend2 = _controller(tmp_path, [FAILED], clock)
    _steps(again)
    assert backend2.launched == []  # it still waits: 20 s left
    assert again.store.get(jid).state is JobState.ADMITTED
    clock.advance(20.0)
    _steps(again)
    assert [a for a, _ in backend2.launched] == [2]
    assert again.store.get(jid).state is JobState.SUCCEEDED


def test_a_job_cancelled_while_it_waits_never_starts(tmp_path: Path) -> None:
    ctl, backend = _controller(tmp_path, [FAILED])
    jid = ctl.submit(_spec(2, backoff_s=5.0), job_id="flaky")
    _steps(ctl)
    ctl.cancel(jid)
    backend.clock.advance(60.0)
    _steps(ctl)
    assert len(backend.launched) == 1
    assert ctl.store.get(jid).state is JobState.CANCELLED and ctl.reason(jid) is None


def test_no_backoff_retries_at_once(tmp_path: Path) -> None:
    ctl, backend = _controller(tmp_path, [FAILED, FAILED])
    jid = ctl.submit(_spec(2, backoff_s=0.0), job_id="flaky")
    _steps(ctl)
    assert [a for a, _ in backend.launched] == [1, 2, 3]
    assert ctl.store.get(jid).state is JobState.SUCCEEDED


@given(
    failures=st.integers(1, 200),
    backoff=st.floats(0.001, 100.0),
    factor=st.floats(1.0, 10.0),
    cap=st.floats(0.0, 3600.0),
    jitter=st.floats(0.0, 1.0),
    key=st.text(min_size=1, max_size=20),
)
def test_a_delay_is_the_capped_exponential_less_at_most_its_jitter(
    failures: int, backoff: float, factor: float, cap: float, jitter: float, key: str
) -> None:
    r = RetrySpec(backoff_s=backoff, factor=factor, max_backoff_s=cap, jitter=jitter)
    base = min(cap, backoff * factor ** min(failures - 1, 64))
    d = r.delay(failures, key)
    assert base * (1 - jitter) - 1e-9 <= d <= base + 1e-9
    assert r.delay(failures, key) == d  # the same job waits the same on every run


def test_jitter_spreads_jobs_that_failed_together() -> None:
    r = RetrySpec(backoff_s=10.0, jitter=0.5)
    delays = {r.delay(1, f"job-{i}") for i in range(100)}
    assert len(delays) == 100 and min(delays) >= 5.0 and max(delays) <= 10.0
    assert max(delays) - min(delays) > 2.5  # spread over most of [5, 10]
    assert RetrySpec().delay(1, "j") <= 1.0 and RetrySpec().delay(30, "j") <= 60.0


@pytest.mark.parametrize(
    ("retry", "where"),
    [
        ({"factor": 0.5}, "retry.factor"),
        ({"jitter": 2}, "retry.jitter"),
        ({"backoff_s": -1}, "retry.backoff_s"),
        ({"backoff_s": "1s"}, "retry.backoff_s"),
        ({"every": 3}, "retry.every"),
    ],
)
def test_a_bad_retry_setting_names_its_key(retry: dict[str, object], where: str) -> None:
    with pytest.raises(ValidationError) as err:
        JobSpec.model_validate({"name": "j", "run": "true", "retry": retry})
    assert where in str(err.value).replace("\n", ".").replace(" ", "")
