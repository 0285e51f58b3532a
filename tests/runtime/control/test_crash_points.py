"""Crash points (bench/crash_points_bench.py is the full enumeration): the controller
SIGKILLed just before and just after durable writes of a small workload, the first write of
every kind it makes and writes spread over the whole run; each time a restarted controller
recovers to a consistent store, loses no acknowledged job or cancel, and every job ends as
planned. Also the regression tests of the bug the enumeration found: a cancel accepted
while the job's tasks were running was lost when the controller died before they ended."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest

from accelnet.fabric import load_fabric
from accelnet.runtime.backend import Backend, TaskEvent, TaskEventKind, TaskSpec
from accelnet.runtime.clock import SystemClock
from accelnet.runtime.control.controller import CANCEL_REQUESTED, Controller
from accelnet.runtime.control.invariants import check
from accelnet.runtime.control.sqlite_store import SqliteStore
from accelnet.sched import JobSpec, JobState, Scheduler
from tests.benchload import load_bench


def _bench() -> ModuleType:
    return load_bench("crash_points_bench")


@pytest.mark.slow
def test_a_kill_at_any_kind_of_write_recovers_to_a_consistent_store(tmp_path: Path) -> None:
    bench = _bench()
    # every kind's first write, before and after its COMMIT, plus the first, middle and last
    # write of the run (bench/crash_points_bench.py kills at every one); a retry waits
    # 0.05-0.1 s instead of 0.5-1 s (RetrySpec's default), the retry path being the same
    cfg = bench.CrashPointsConfig(workload="small", limit=3, by_kind=1, parallel=2, seed=3,
                                  retry_backoff_s=0.1)  # fmt: skip
    report = bench.run_crash_points(cfg, tmp_path / "points")
    assert report.reference_ok, "the workload does not end as planned even without a kill"
    failed = {f"{p.kind or 'write'} {p.n} {p.phase}": bench._why(p) for p in report.failed()}
    assert failed == {}
    assert sum(len(p.lost) + len(p.lost_cancels) for p in report.points) == 0
    must = ("job:pending (submitted)", "job:starting", "job:running", "device:allocated",
            "task:succeeded", "job:succeeded", "job:failed", "job:cancel-requested",
            "job:cancelled", "device:unhealthy", "job:admitted (requeue: retry)",
            "device:refreshing")  # fmt: skip
    assert set(must) <= set(report.reference_labels)
    for p in report.points:  # a kind a run may or may not make (timing) need not be reached
        assert p.killed or p.kind not in must, f"{p.kind} {p.n} {p.phase} never reached"
    for phase in ("before", "after"):
        covered = report.covered(phase)
        assert set(must) <= set(covered), f"{phase}: {sorted(set(must) - set(covered))}"
    assert len(report.points) >= 2 * len(report.reference_labels)


# ----- the lost cancel: regression --------------------------------------------------------------
class _Hand(Backend):
    """Starts each task at once; a cancelled task ends only when the test says so."""

    def __init__(self) -> None:
        self.clock = SystemClock()
        self.events: list[TaskEvent] = []
        self.cancelled: list[str] = []

    def launch(self, task: TaskSpec) -> None:
        self.events.append(TaskEvent(task.task_id, TaskEventKind.STARTED, self.clock.now()))

    def cancel(self, task_id: str) -> None:
        self.cancelled.append(task_id)

    def end_cancelled(self) -> None:
        now = self.clock.now()
        self.events += [TaskEvent(t, TaskEventKind.CANCELLED, now) for t in self.cancelled]
        self.cancelled = []

    def poll(self, timeout: float) -> list[TaskEvent]:
        out, self.events = self.events, []
        return out

    def close(self) -> None:
        pass


def _controller(store: SqliteStore, backend: _Hand, work: Path) -> Controller:
    scheduler = Scheduler("priority", "best-fit", "priority")
    fabric = load_fabric("pcie-4xL4")
    return Controller(fabric, store, backend, backend.clock, work, scheduler=scheduler)


def _run_until(ctl: Controller, job: str, state: JobState) -> None:
    for _ in range(50):
        ctl.step(0)
        if ctl.store.get(job).state is state:
            return
    raise AssertionError(f"{job} never {state.value}: {ctl.store.get(job).state.value}")


def test_a_cancel_accepted_before_the_controller_died_outlives_the_restart(
    tmp_path: Path,
) -> None:
    # the bug: cancel() of a running job only asked the backend to stop its tasks; nothing
    # durable said so until the tasks had ended and job:cancelled was written. A controller
    # killed in between (the task:cancelled write, or the job:cancelled write before its
    # COMMIT) came back and requeued the job ("lost when the controller restarted"), which
    # then ran again to the end although its cancel had been accepted.
    db = tmp_path / "state.db"
    store = SqliteStore(db)
    ctl = _controller(store, _Hand(), tmp_path)
    ctl.submit(JobSpec.model_validate({"name": "k", "run": "sleep 30"}), job_id="k")
    _run_until(ctl, "k", JobState.RUNNING)
    ctl.cancel("k")  # accepted; the controller dies before the task has ended
    store.close()
    store = SqliteStore(db)
    again = _controller(store, _Hand(), tmp_path)
    assert store.get("k").state is JobState.CANCELLED
    assert CANCEL_REQUESTED in [e.kind for e in store.events("k")]
    assert again.idle()
    assert not any("requeued" in e.detail for e in store.events("k"))
    check(store)


@pytest.mark.parametrize("stopping", ["preempted", "device failed"])
def test_a_cancel_while_the_job_is_being_stopped_anyway_ends_it_cancelled(
    tmp_path: Path, stopping: str
) -> None:
    # the same lost cancel without a crash: a job already being stopped (preempted, or off
    # a failed device) ignored a cancel and was requeued when its tasks ended
    store = SqliteStore(tmp_path / "state.db")
    hand = _Hand()
    ctl = _controller(store, hand, tmp_path)
    for i in range(4):  # the fabric full of low-priority jobs
        ctl.submit(JobSpec.model_validate({"name": f"l{i}", "run": "sleep 30",
                                           "max_retries": 3}), job_id=f"l{i}")  # fmt: skip
    _run_until(ctl, "l3", JobState.RUNNING)
    if stopping == "preempted":
        ctl.submit(JobSpec.model_validate({"name": "p", "run": "true", "priority": 9}), job_id="p")
        ctl.step(0)
        victim = next(f"l{i}" for i in range(4) if store.get(f"l{i}").state is JobState.PREEMPTING)
    else:
        victim = "l0"
        device = store.get(victim).placement.devices[0]  # type: ignore[union-attr]
        ctl.fail_device(device, "test: fault")
    assert hand.cancelled, "the job's task is being stopped"
    ctl.cancel(victim)
    hand.end_cancelled()
    ctl.step(0)
    assert store.get(victim).state is JobState.CANCELLED
    check(store, quiescent=False)
