"""Queue waits for ``accelnet_queue_wait_seconds`` (issue 26 item 1): each attempt's wait is
observed once, when the attempt starts, so the histogram only grows; a retried job adds
its second wait instead of moving its first one into another bucket."""

from __future__ import annotations

from pathlib import Path

from accelnet.fabric import load_fabric
from accelnet.monitor.timing import HistogramSnapshot
from accelnet.runtime.backend import Backend, TaskEvent, TaskEventKind, TaskSpec
from accelnet.runtime.clock import ManualClock
from accelnet.runtime.control.controller import Controller
from accelnet.runtime.control.sqlite_store import SqliteStore
from accelnet.sched import JobSpec, JobState


class _Timed(Backend):
    """Each task starts at once and ends ``run_s[job]`` seconds later on the manual clock,
    failing on its job's attempts listed in ``fail``."""

    def __init__(self, clock: ManualClock, run_s: dict[str, float], fail: set[tuple[str, int]]):
        self.clock, self.run_s, self.fail = clock, run_s, fail
        self.ends: list[tuple[float, TaskEvent]] = []
        self.events: list[TaskEvent] = []

    def launch(self, task: TaskSpec) -> None:
        now = self.clock.now()
        self.events.append(TaskEvent(task.task_id, TaskEventKind.STARTED, now))
        end = now + self.run_s[task.job_id]
        if (task.job_id, task.attempt) in self.fail:
            ev = TaskEvent(task.task_id, TaskEventKind.FAILED, end, exit_code=3, error="boom")
        else:
            ev = TaskEvent(task.task_id, TaskEventKind.SUCCEEDED, end, exit_code=0)
        self.ends.append((end, ev))

    def cancel(self, task_id: str) -> None:
        pass

    def poll(self, timeout: float) -> list[TaskEvent]:
        now = self.clock.now()
        due = [ev for at, ev in self.ends if at <= now]
        self.ends = [(at, ev) for at, ev in self.ends if at > now]
        out, self.events = [*self.events, *due], []
        return out

    def close(self) -> None:
        pass


def _spec(name: str, gpus: int, retries: int = 0) -> JobSpec:
    return JobSpec.model_validate({
        "name": name, "tenant": "team", "run": "true", "max_retries": retries,
        "retry": {"backoff_s": 2.0, "jitter": 0.0},
        "resources": {"accelerators": f"L4:{gpus}"},
    })  # fmt: skip


def _run_until(ctl: Controller, clock: ManualClock, t: float) -> None:
    while clock.now() < t:
        for _ in range(3):
            ctl.step(0)
        clock.advance(1.0)
    for _ in range(3):
        ctl.step(0)


def _waits(ctl: Controller) -> HistogramSnapshot:
    return ctl.queue_waits.snapshot()["team"]


def test_a_retried_job_adds_its_second_wait_and_never_moves_the_first(tmp_path: Path) -> None:
    clock = ManualClock(1000.0)
    backend = _Timed(clock, {"flaky": 25.0, "big": 5.0}, {("flaky", 1)})
    ctl = Controller(load_fabric("pcie-4xL4"), SqliteStore(tmp_path / "s.db"), backend, clock,
                     tmp_path / "work")  # fmt: skip
    ctl.submit(_spec("flaky", 1, retries=1), job_id="flaky")
    _run_until(ctl, clock, 1000.0)
    ctl.submit(_spec("big", 4), job_id="big")  # needs every L4: waits for flaky's first try
    _run_until(ctl, clock, 1001.0)
    first = _waits(ctl)
    assert first.count == 1 and first.cumulative[0] == 1  # flaky started at once (<= 0.1 s)

    _run_until(ctl, clock, 1060.0)  # flaky failed at 1,025 s; big ran 1,025-1,030 s
    after = _waits(ctl)
    # three waits, each observed once: flaky's first (0 s), big's (25 s: behind flaky's
    # first attempt), flaky's retry (backoff 2 s after the failure, then behind big)
    assert after.count == 3
    assert all(b >= a for a, b in zip(first.cumulative, after.cumulative, strict=True))
    bucket = dict(zip(after.bounds, after.cumulative, strict=True))
    assert bucket[0.1] == 1  # the first wait stays where it was
    assert bucket[30.0] == 3  # both later waits are under 30 s
    assert ctl.store.get("flaky").state is JobState.SUCCEEDED
    assert ctl.store.get("flaky").attempts == 2
    # flaky's retry became ready at 1,027 s (backoff) and started when big ended (1,030 s)
    assert 2.0 <= after.total - 25.0 <= 4.0


def test_a_cancelled_queued_job_observes_no_wait(tmp_path: Path) -> None:
    clock = ManualClock(0.0)
    backend = _Timed(clock, {"a": 10.0, "b": 1.0}, set())
    ctl = Controller(load_fabric("pcie-4xL4"), SqliteStore(tmp_path / "s.db"), backend, clock,
                     tmp_path / "work")  # fmt: skip
    ctl.submit(_spec("a", 4), job_id="a")
    ctl.submit(_spec("b", 4), job_id="b")
    _run_until(ctl, clock, 2.0)
    ctl.cancel("b")
    _run_until(ctl, clock, 20.0)
    assert _waits(ctl).count == 1


def test_a_retry_recovered_after_a_restart_waits_from_the_end_of_its_backoff(
    tmp_path: Path,
) -> None:
    clock = ManualClock(1000.0)
    spec = JobSpec.model_validate({
        "name": "flaky", "tenant": "team", "run": "true", "max_retries": 1,
        "retry": {"backoff_s": 10.0, "jitter": 0.0}, "resources": {"accelerators": "L4:1"},
    })  # fmt: skip
    store = SqliteStore(tmp_path / "s.db")
    first = Controller(load_fabric("pcie-4xL4"), store, _Timed(clock, {"flaky": 0.0},
                       {("flaky", 1)}), clock, tmp_path / "work")  # fmt: skip
    first.submit(spec, job_id="flaky")
    _run_until(first, clock, 1001.0)  # failed at once: requeued, may start at 1,010 s
    assert store.get("flaky").retry_at == 1010.0
    clock.set(1003.0)  # the controller restarts during the backoff
    again = Controller(load_fabric("pcie-4xL4"), store, _Timed(clock, {"flaky": 5.0}, set()),
                       clock, tmp_path / "work")  # fmt: skip
    _run_until(again, clock, 1020.0)
    waits = _waits(again)
    assert waits.count == 1 and waits.total <= 2.0  # from 1,010 s, not from the restart
