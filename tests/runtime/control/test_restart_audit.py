"""After a controller restart no job holds a device: the audit of the log agrees, for a
shared device that is not refreshed at the restart (unhealthy), whose refresh fails, or
whose release was never written (each used to be reported "still held by finished job")."""

from __future__ import annotations

from pathlib import Path

import pytest

from accelnet.devices import DeviceState
from accelnet.fabric import load_fabric
from accelnet.runtime.backend import Backend, SupportsRefresh, TaskEvent, TaskEventKind, TaskSpec
from accelnet.runtime.clock import ManualClock
from accelnet.runtime.control.controller import Controller
from accelnet.runtime.control.devices import RESTART_LET_GO
from accelnet.runtime.control.invariants import violations
from accelnet.runtime.control.sqlite_store import SqliteStore
from accelnet.sched import JobSpec, JobState, Scheduler


class Hand(Backend, SupportsRefresh):
    """Tasks start at once and end when the test says; refresh as told."""

    def __init__(self, clock: ManualClock, refresh_ok: bool = True) -> None:
        self.clock = clock
        self.events: list[TaskEvent] = []
        self.cancelled: list[str] = []
        self.refresh_ok = refresh_ok

    def launch(self, task: TaskSpec) -> None:
        self.events.append(TaskEvent(task.task_id, TaskEventKind.STARTED, self.clock.now()))

    def cancel(self, task_id: str) -> None:
        self.cancelled.append(task_id)

    def refresh(self, dev: str) -> tuple[bool, str]:
        return (True, "refreshed") if self.refresh_ok else (False, "refresh failed: test")

    def poll(self, timeout: float) -> list[TaskEvent]:
        out, self.events = self.events, []
        return out

    def close(self) -> None:
        pass


def ctl_for(store: SqliteStore, backend: Backend, clock: ManualClock, work: Path) -> Controller:
    return Controller(
        load_fabric("pcie-4xL4"),
        store,
        backend,
        clock,
        work,
        scheduler=Scheduler("priority", "best-fit", "priority"),
    )


def half(name: str) -> JobSpec:
    return JobSpec.model_validate(
        {"name": name, "run": "sleep 30", "resources": {"accelerators": "L4:0.5"}}
    )


@pytest.mark.parametrize("how", ["device-failed-jobs-left-running", "restart-refresh-fails"])
def test_cancel_accepted_before_restart_on_unrefreshed_shared_device(
    tmp_path: Path, how: str
) -> None:
    db = tmp_path / "s.db"
    clock = ManualClock(100.0)
    store = SqliteStore(db)
    ctl = ctl_for(store, Hand(clock), clock, tmp_path)
    for n in "ab":
        ctl.submit(half(n), job_id=n)
    for _ in range(5):
        clock.advance(1)
        ctl.step(0)
    a, b = store.get("a"), store.get("b")
    assert a.state is b.state is JobState.RUNNING
    dev = a.placement.devices[0]
    assert b.placement.devices == (dev,) and a.placement.share == 0.5  # shared device
    if how == "device-failed-jobs-left-running":
        ctl.fail_device(dev, "test: fault (report only)", requeue=False)
    ctl.cancel("a")  # accepted (logged); the controller dies before a's task ends
    store.close()

    store = SqliteStore(db)
    again = ctl_for(
        store, Hand(clock, refresh_ok=(how != "restart-refresh-fails")), clock, tmp_path
    )
    assert store.get("a").state is JobState.CANCELLED
    assert store.get("b").state is JobState.ADMITTED
    assert again.jobs_on(dev) == []  # the restarted controller holds nothing there
    assert store.devices()[dev] is DeviceState.UNHEALTHY
    found = [str(v) for v in violations(store, quiescent=False)]
    assert found == [], found


class CrashError(Exception):
    pass


class DiesAtRelease(SqliteStore):
    """Dies (like a SIGKILL) just before it would write 'a released it'."""

    def set_device(self, device: str, state: DeviceState, at: float, cause: str) -> None:
        if cause == "a released it":
            raise CrashError()
        super().set_device(device, state, at, cause)


def test_kill_between_job_end_and_release_of_a_failed_shared_device(tmp_path: Path) -> None:
    # a and b share a device; it fails, both are stopped; a (no retries left) is recorded
    # FAILED and the controller dies before it writes 'a released it'. The restarted
    # controller does not refresh an UNHEALTHY device and holds nothing there, yet the audit
    # kept a as a holder for ever.
    db = tmp_path / "s.db"
    clock = ManualClock(100.0)
    store = DiesAtRelease(db)
    hand = Hand(clock)
    ctl = ctl_for(store, hand, clock, tmp_path)
    for n in "ab":
        ctl.submit(half(n), job_id=n)
    for _ in range(3):
        clock.advance(1)
        ctl.step(0)
    dev = store.get("a").placement.devices[0]
    assert store.get("b").placement.devices == (dev,)
    ctl.fail_device(dev, "test: fault")
    assert sorted(hand.cancelled) == ["a.1.0", "b.1.0"]
    hand.events.append(TaskEvent("a.1.0", TaskEventKind.CANCELLED, clock.now()))
    with pytest.raises(CrashError):
        ctl.step(0)
    assert store.get("a").state is JobState.FAILED  # durable; its release never written
    store.close()

    store = SqliteStore(db)
    again = ctl_for(store, Hand(clock), clock, tmp_path)
    assert again.jobs_on(dev) == [] and store.devices()[dev] is DeviceState.UNHEALTHY
    assert any(e.detail == f"{dev}: {RESTART_LET_GO}" for e in store.events())
    found = [str(v) for v in violations(store)]
    assert found == [], found
