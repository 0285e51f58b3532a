"""The device and job lifecycles: one table each, illegal transitions raise, history kept."""

from __future__ import annotations

import pytest

from accelnet.devices import DEVICE_TRANSITIONS, DeviceState
from accelnet.sched import JOB_TRANSITIONS, JobState
from accelnet.statemachine import IllegalTransitionError, Tracked, TransitionTable


def reachable(
    table: TransitionTable[DeviceState] | TransitionTable[JobState], start: object
) -> set[object]:
    seen, todo = {start}, [start]
    while todo:
        for nxt in table.targets(todo.pop()):  # type: ignore[arg-type]
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


def test_every_device_state_is_reachable_and_every_row_explained() -> None:
    assert reachable(DEVICE_TRANSITIONS, DeviceState.UNKNOWN) == set(DeviceState)
    for src, row in DEVICE_TRANSITIONS.rows.items():
        for dst, why in row.items():
            assert why, f"{src} -> {dst} has no comment"


def test_device_life_records_time_and_cause() -> None:
    d: Tracked[DeviceState] = Tracked(DeviceState.UNKNOWN)
    d = d.to(DEVICE_TRANSITIONS, "n1/gpu0", DeviceState.READY, 1.0, "probe passed")
    d = d.to(DEVICE_TRANSITIONS, "n1/gpu0", DeviceState.ALLOCATED, 2.0, "job j1")
    d = d.to(DEVICE_TRANSITIONS, "n1/gpu0", DeviceState.REFRESHING, 3.0, "j1 finished")
    d = d.to(DEVICE_TRANSITIONS, "n1/gpu0", DeviceState.READY, 4.0, "refreshed")
    assert d.state is DeviceState.READY
    assert [(t.at, t.src.value, t.dst.value, t.cause) for t in d.history] == [
        (1.0, "unknown", "ready", "probe passed"),
        (2.0, "ready", "allocated", "job j1"),
        (3.0, "allocated", "refreshing", "j1 finished"),
        (4.0, "refreshing", "ready", "refreshed"),
    ]


def test_illegal_device_transition_raises_and_names_the_way_out() -> None:
    d: Tracked[DeviceState] = Tracked(DeviceState.ALLOCATED)
    with pytest.raises(IllegalTransitionError) as info:
        d.to(DEVICE_TRANSITIONS, "n1/gpu0", DeviceState.READY, 1.0, "skip the refresh")
    msg = str(info.value)
    assert "device n1/gpu0: allocated -> ready is not allowed" in msg
    assert "refreshing" in msg and "draining" in msg
    assert d.history == ()  # nothing changed


def test_released_devices_are_refreshed_before_reuse() -> None:
    assert not DEVICE_TRANSITIONS.allowed(DeviceState.ALLOCATED, DeviceState.READY)
    assert DEVICE_TRANSITIONS.allowed(DeviceState.REFRESHING, DeviceState.READY)
    assert DeviceState.READY.schedulable() and not DeviceState.DRAINING.schedulable()


def test_job_lifecycle_and_requeue_paths() -> None:
    assert reachable(JOB_TRANSITIONS, JobState.PENDING) == set(JobState)
    for final in (JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED):
        assert final.is_finished() and JOB_TRANSITIONS.targets(final) == ()
    # requeue: running -> admitted (retry), preempting -> admitted
    assert JOB_TRANSITIONS.allowed(JobState.RUNNING, JobState.ADMITTED)
    assert JOB_TRANSITIONS.allowed(JobState.PREEMPTING, JobState.ADMITTED)
    j: Tracked[JobState] = Tracked(JobState.SUCCEEDED)
    with pytest.raises(
        IllegalTransitionError,
        match="succeeded -> running is not allowed; from succeeded it may go to nothing",
    ):
        j.to(JOB_TRANSITIONS, "j1", JobState.RUNNING, 5.0, "zombie")


def test_lifecycle_helpers_never_skip_the_refresh() -> None:
    from accelnet.devices import allocate, drain, fail, recover, refreshed, release

    d: Tracked[DeviceState] = Tracked(DeviceState.READY)
    d = allocate(d, "g", 1.0, "j1")
    d = allocate(d, "g", 1.5, "j2")  # shared: stays allocated, no new record
    d = release(d, "g", 2.0, "j1", last=False)
    d = drain(d, "g", 2.5, "maintenance")
    assert d.state is DeviceState.DRAINING
    d = release(d, "g", 3.0, "j2")
    assert d.state is DeviceState.DRAINED
    with pytest.raises(IllegalTransitionError):
        d.to(DEVICE_TRANSITIONS, "g", DeviceState.READY, 4.0, "undrain without refresh")
    d = recover(d, "g", 4.0, "undrain")
    d = refreshed(d, "g", 5.0, ok=False, detail="probe: wrong answer")
    assert d.state is DeviceState.UNHEALTHY
    d = recover(d, "g", 6.0)
    d = refreshed(d, "g", 7.0, ok=True)
    assert d.state is DeviceState.READY
    d = fail(d, "g", 8.0, "Xid 79")
    assert [t.dst.value for t in d.history] == [
        "allocated", "draining", "drained", "refreshing", "unhealthy", "refreshing", "ready",
        "unhealthy",
    ]  # fmt: skip


def test_a_device_keeps_only_its_recent_history_in_memory() -> None:
    from accelnet.devices import DEVICE_TRANSITIONS
    from accelnet.statemachine import HISTORY

    d: Tracked[DeviceState] = Tracked(DeviceState.READY)
    cycle = {
        DeviceState.READY: DeviceState.ALLOCATED,
        DeviceState.ALLOCATED: DeviceState.REFRESHING,
        DeviceState.REFRESHING: DeviceState.READY,
    }
    for i in range(3 * HISTORY):
        d = d.to(DEVICE_TRANSITIONS, "gpu0", cycle[d.state], float(i), f"step {i}")
    assert len(d.history) == HISTORY
    assert d.history[-1].cause == f"step {3 * HISTORY - 1}"
    assert d.history[0].cause == f"step {2 * HISTORY}"
