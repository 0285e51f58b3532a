"""The fate of a job when its attempt ends (accelnet.runtime.control.fate): a pure function of the
job's record and the attempt, tested without a backend, a store or a clock."""

from __future__ import annotations

from typing import Any

import pytest

from accelnet.runtime.backend import TaskEventKind
from accelnet.runtime.control.fate import fate
from accelnet.runtime.control.runs import Attempt
from accelnet.runtime.control.store import JobRecord
from accelnet.sched import JobSpec, JobState
from accelnet.sched.reasons import OutcomeCode as O

S, F, C = TaskEventKind.SUCCEEDED, TaskEventKind.FAILED, TaskEventKind.CANCELLED
NOW = 100.0


def record(state: JobState = JobState.RUNNING, failures: int = 0, **spec: Any) -> JobRecord:
    full = {"name": "j", "run": "true", "retry": {"backoff_s": 2.0, "jitter": 0.0}, **spec}
    return JobRecord("j-1", JobSpec.model_validate(full), state, 0.0, failures=failures)


def attempt(*ended: TaskEventKind, **fields: Any) -> Attempt:
    run = Attempt(attempt=1, world=len(ended), **fields)
    run.ended = dict(enumerate(ended))
    run.results = {r: f"out{r}" for r, k in enumerate(ended) if k is S}
    return run


def test_every_rank_succeeded_gives_the_result_and_clears_an_earlier_error() -> None:
    one = fate(record(), attempt(S), NOW)
    assert one.state is JobState.SUCCEEDED and one.succeeded
    assert one.changes == {"result": "out0", "finished_at": NOW, "error": None,
                           "outcome": O.SUCCEEDED}  # fmt: skip
    gang = fate(record(), attempt(S, S, S), NOW)
    assert gang.changes["result"] == ["out0", "out1", "out2"]


def test_a_cancelled_job_ends_cancelled_whatever_its_ranks_did() -> None:
    end = fate(record(max_retries=3), attempt(F, C, error="rank 0 failed", cancel="cancelled"),
               NOW)  # fmt: skip
    assert (end.state, end.cause) == (JobState.CANCELLED, "cancelled")
    assert end.changes == {"finished_at": NOW, "outcome": O.CANCELLED}


def test_a_preempted_job_is_requeued_without_spending_a_retry() -> None:
    end = fate(record(JobState.PREEMPTING), attempt(C, cancel="preempted: x"), NOW)
    assert end.state is JobState.ADMITTED and end.outcome is O.PREEMPTED
    assert end.changes == {"placement": None, "outcome": O.PREEMPTED}
    assert not end.succeeded


def test_a_preempted_job_whose_rank_failed_first_counts_the_failure() -> None:
    end = fate(record(JobState.PREEMPTING, max_retries=0),
               attempt(F, error="rank 0 failed: 1", failure=O.TASK_FAILED), NOW)  # fmt: skip
    assert end.state is JobState.FAILED and end.changes["failures"] == 1
    assert end.outcome is O.TASK_FAILED


def test_a_failure_with_retries_left_is_requeued_after_its_backoff() -> None:
    end = fate(record(failures=1, max_retries=3),
               attempt(F, error="rank 0 failed: 2", failure=O.TIMED_OUT), NOW)  # fmt: skip
    assert end.state is JobState.ADMITTED
    assert end.changes == {"placement": None, "failures": 2, "error": "rank 0 failed: 2",
                           "retry_at": pytest.approx(NOW + 4.0),
                           "outcome": O.TIMED_OUT}  # fmt: skip
    assert end.cause == "requeued (retry 2 of 3, in 4 s): rank 0 failed: 2"


def test_a_device_failure_requeues_at_once() -> None:
    run = attempt(F, error="device d0 failed: xid 79", failure=O.DEVICE_FAILED)
    end = fate(record(max_retries=1), run, NOW)
    assert end.state is JobState.ADMITTED and end.changes["retry_at"] is None
    assert end.outcome is O.DEVICE_FAILED
    assert end.cause == "requeued (retry 1 of 1): device d0 failed: xid 79"


@pytest.mark.parametrize(("error", "shown"), [("rank 1 lost: gone", "rank 1 lost: gone"),
                                              (None, "stopped")])  # fmt: skip
def test_out_of_retries_the_job_fails_with_its_first_error(error: str | None, shown: str) -> None:
    failure = None if error is None else O.WORKER_LOST
    end = fate(record(failures=2, max_retries=2), attempt(S, F, error=error, failure=failure), NOW)
    assert end.state is JobState.FAILED and end.cause == shown
    assert end.changes == {"failures": 3, "error": shown, "finished_at": NOW,
                           "outcome": failure or O.TASK_FAILED}  # fmt: skip


def test_the_first_failure_of_an_attempt_keeps_its_code() -> None:
    run = attempt(F, F)
    run.failed("rank 0 timed out", O.TIMED_OUT)
    run.failed("rank 1 lost", O.WORKER_LOST)  # a consequence of the first
    assert (run.error, run.failure) == ("rank 0 timed out", O.TIMED_OUT)
    assert not run.device_failed
    end = fate(record(), run, NOW)
    assert end.state is JobState.FAILED and end.outcome is O.TIMED_OUT
