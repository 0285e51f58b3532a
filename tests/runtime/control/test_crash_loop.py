"""A job that kills the controller every time it runs (issue 21, item 2) must not keep the
service in a crash loop: the first loss at a restart is free (the job may be a bystander),
each later one spends a retry, and a job out of retries ends FAILED with the reason, so the
next controller comes up with nothing to rerun. Here the controller's death is a restart on
the same SQLite file while the job's task was running (as a SIGKILL leaves it)."""

from __future__ import annotations

from pathlib import Path

import pytest

from accelnet.fabric import load_fabric
from accelnet.runtime.backend import Backend, TaskEvent, TaskEventKind, TaskSpec
from accelnet.runtime.clock import SystemClock
from accelnet.runtime.control.controller import Controller
from accelnet.runtime.control.invariants import check
from accelnet.runtime.control.sqlite_store import SqliteStore
from accelnet.sched import JobSpec, JobState


class _Starts(Backend):
    """Starts every task at once; none ever ends (the controller dies first)."""

    def __init__(self) -> None:
        self.clock = SystemClock()
        self.events: list[TaskEvent] = []

    def launch(self, task: TaskSpec) -> None:
        self.events.append(TaskEvent(task.task_id, TaskEventKind.STARTED, self.clock.now()))

    def cancel(self, task_id: str) -> None:
        pass

    def poll(self, timeout: float) -> list[TaskEvent]:
        out, self.events = self.events, []
        return out

    def close(self) -> None:
        pass


def _life(db: Path, work: Path) -> tuple[Controller, SqliteStore]:
    store = SqliteStore(db)
    backend = _Starts()
    return Controller(load_fabric("pcie-4xL4"), store, backend, backend.clock, work), store


def _until_running(ctl: Controller, job: str) -> None:
    for _ in range(100):
        ctl.step(0)
        if ctl.store.get(job).state is JobState.RUNNING:
            return
    raise AssertionError(f"{job} never ran: {ctl.store.get(job).state.value}")


@pytest.mark.parametrize("retries", [0, 2])
def test_a_job_running_at_every_controller_death_ends_failed_once_its_retries_are_spent(
    tmp_path: Path, retries: int
) -> None:
    db = tmp_path / "state.db"
    ctl, store = _life(db, tmp_path)
    ctl.submit(JobSpec.model_validate({"name": "killer", "run": "kill -9 $PPID",
                                       "max_retries": retries, "retry": {"backoff_s": 0}}),
               job_id="killer")  # fmt: skip
    deaths = 0
    while True:
        _until_running(ctl, "killer")
        store.close()  # the controller dies while the job runs
        deaths += 1
        ctl, store = _life(db, tmp_path)
        rec = store.get("killer")
        if rec.state is not JobState.ADMITTED:
            break
        assert deaths <= retries + 1, "requeued forever"
    assert deaths == retries + 2  # one free loss, then one per retry, then no more
    assert rec.state is JobState.FAILED and rec.failures == retries + 1
    assert rec.error is not None and f"the controller died {deaths} times" in rec.error
    details = [e.detail for e in store.events("killer")]
    assert details.count("requeued: lost when the controller restarted") == 1
    assert sum(d.startswith("requeued (retry") for d in details) == retries
    assert ctl.idle()  # the next controller has nothing to rerun
    check(store)  # the retry budget and every other invariant hold
    store.close()


def test_a_bystander_lost_once_is_requeued_without_spending_a_retry(tmp_path: Path) -> None:
    db = tmp_path / "state.db"
    ctl, store = _life(db, tmp_path)
    ctl.submit(JobSpec.model_validate({"name": "b", "run": "sleep 9"}), job_id="b")
    _until_running(ctl, "b")
    store.close()
    ctl, store = _life(db, tmp_path)
    rec = store.get("b")
    assert (rec.state, rec.failures) == (JobState.ADMITTED, 0)
    _until_running(ctl, "b")  # and it runs again
    store.close()
