"""The invariant checker, on hand-built stores that keep or break each promise."""

from __future__ import annotations

from dataclasses import replace

import pytest

from accelnet.devices import DeviceState
from accelnet.fabric.model import DomainLevel
from accelnet.runtime.control.invariants import check, violations
from accelnet.runtime.control.store import JobRecord, MemoryStore
from accelnet.sched import JobSpec, JobState, Placement

S = JobState


def _spec(retries: int = 0) -> JobSpec:
    return JobSpec.model_validate({"name": "j", "run": "true", "max_retries": retries})


def _place(*devs: str, share: float = 1.0) -> Placement:
    return Placement(tuple(devs), share, "L4", next(iter(DomainLevel)))


def _run_to(store: MemoryStore, jid: str, end: JobState, devs: tuple[str, ...] = ("d0",),
            retries: int = 0, share: float = 1.0) -> None:  # fmt: skip
    """A job's correct life: submitted, admitted, allocated, run, ended, released."""
    store.add(JobRecord(jid, _spec(retries), S.PENDING, 0.0))
    store.transition(jid, S.ADMITTED, 1.0, "admitted")
    for d in devs:
        store.set_device(d, DeviceState.ALLOCATED, 2.0, f"allocated to {jid}")
    store.transition(jid, S.STARTING, 2.0, "placed", placement=_place(*devs, share=share),
                     attempts=1)  # fmt: skip
    store.transition(jid, S.RUNNING, 3.0, "every rank started")
    if end is S.RUNNING:
        return
    store.transition(jid, end, 4.0, "ended", finished_at=4.0)
    for d in devs:
        store.set_device(d, DeviceState.READY, 4.0, f"{jid} released it")


def _kinds(store: MemoryStore) -> set[str]:
    return {v.invariant for v in violations(store)}


def test_a_correct_history_has_no_violations() -> None:
    store = MemoryStore()
    _run_to(store, "a", S.SUCCEEDED, ("d0", "d1"))
    _run_to(store, "b", S.FAILED)
    _run_to(store, "c", S.RUNNING, ("d2",))
    store.add(JobRecord("d", _spec(), S.PENDING, 0.0))
    assert violations(store) == []
    check(store)


def test_two_terminal_events_are_caught() -> None:
    store = MemoryStore()
    _run_to(store, "a", S.SUCCEEDED)
    store.log("a", 5.0, "job:succeeded", "again")
    found = violations(store)
    assert [(v.invariant, v.subject) for v in found] == [("ended-once", "a")]
    assert "job:succeeded" in found[0].evidence
    with pytest.raises(AssertionError, match=r"ended-once\] a"):
        check(store)


def test_a_live_job_with_a_terminal_event_and_an_unknown_job_are_caught() -> None:
    store = MemoryStore()
    _run_to(store, "a", S.RUNNING)
    store.log("a", 5.0, "job:failed", "but it runs")
    store.log("ghost", 5.0, "job:succeeded", "never submitted")
    found = {(v.invariant, v.subject) for v in violations(store)}
    assert ("ended-once", "a") in found and ("ended-once", "ghost") in found


def test_a_device_given_to_two_jobs_is_caught() -> None:
    store = MemoryStore()
    _run_to(store, "a", S.RUNNING, ("d0",))
    _run_to(store, "b", S.RUNNING, ("d0",))
    found = violations(store)
    assert [(v.invariant, v.subject) for v in found] == [("devices", "d0")]
    assert "allocated to b while held by ['a']" in found[0].evidence


def test_shares_that_fit_on_one_device_are_not_a_violation() -> None:
    store = MemoryStore()
    _run_to(store, "a", S.RUNNING, ("d0",), share=0.5)
    _run_to(store, "b", S.RUNNING, ("d0",), share=0.5)
    assert violations(store) == []


def test_a_device_left_held_by_a_finished_job_is_caught() -> None:
    store = MemoryStore()
    _run_to(store, "a", S.RUNNING, ("d0",))
    store.transition("a", S.SUCCEEDED, 4.0, "done", finished_at=4.0)  # never released
    found = {(v.invariant, v.subject, v.evidence) for v in violations(store)}
    assert ("devices", "d0", "still held by finished job(s) ['a']") in found
    assert ("devices", "d0", "ALLOCATED but no live job holds it") in found
    assert {v.invariant for v in violations(store, quiescent=False)} == {"devices"}


def test_a_restart_frees_the_devices_of_requeued_jobs() -> None:
    store = MemoryStore()
    _run_to(store, "a", S.RUNNING, ("d0",))
    store.transition("a", S.ADMITTED, 5.0, "requeued: lost when the controller restarted",
                     placement=None)  # fmt: skip
    store.set_device("d0", DeviceState.REFRESHING, 5.0, "refresh after restart")
    store.set_device("d0", DeviceState.READY, 5.0, "nothing to refresh")
    _run_to(store, "b", S.SUCCEEDED, ("d0",))
    assert violations(store) == []


def test_retries_beyond_the_budget_are_caught() -> None:
    store = MemoryStore()
    _run_to(store, "a", S.RUNNING, retries=1)
    for n in (1, 2):
        store.transition("a", S.ADMITTED, 5.0 + n, f"requeued (retry {n} of 1): boom",
                         placement=None, failures=n)  # fmt: skip
        store.transition("a", S.STARTING, 5.5 + n, "placed", attempts=1 + n)
        store.transition("a", S.RUNNING, 5.6 + n, "started")
    store.update("a", failures=3, attempts=2)
    found = [v for v in violations(store) if v.invariant == "retry-budget"]
    evidence = " | ".join(v.evidence for v in found)
    assert "3 failures, max_retries 1" in evidence
    assert "2 retries" in evidence
    assert "3 failures in 2 attempts" in evidence


def test_a_state_change_without_an_event_is_caught() -> None:
    store = MemoryStore()
    _run_to(store, "a", S.RUNNING, ("d0",))
    rec = store.get("a")
    store._write(replace(rec, state=S.CANCELLED), None)  # the bug: no event
    found = {(v.invariant, v.subject) for v in violations(store)}
    assert ("events-match-states", "a") in found
    assert "events-match-states" in _kinds(store)


def test_an_allocation_is_audited_at_the_share_it_was_given() -> None:
    """Two half shares of one device, then one job requeued (no placement any more): its
    earlier half is not counted as a whole device. A whole allocation stays whole even if
    the job is later placed at a half."""
    store = MemoryStore()
    for jid, t in (("a", 2.0), ("b", 3.0)):
        store.add(JobRecord(jid, _spec(retries=1), S.PENDING, 0.0))
        store.transition(jid, S.ADMITTED, 1.0, "admitted")
        store.set_device("d0", DeviceState.ALLOCATED, t, f"allocated to {jid} (share 0.5)")
        store.transition(jid, S.STARTING, t, "placed", placement=_place("d0", share=0.5),
                         attempts=1)  # fmt: skip
        store.transition(jid, S.RUNNING, t, "every rank started")
    store.set_device("d0", DeviceState.ALLOCATED, 5.0, "a released it")
    store.transition("a", S.ADMITTED, 5.0, "requeued (retry 1 of 1): lost", placement=None,
                     failures=1)  # fmt: skip
    assert violations(store) == []
    # c is given all of d1, then (wrongly) d beside it at a half, and c's record says 0.5
    _run_to(store, "c", S.RUNNING, ("d1",))
    store.set_device("d1", DeviceState.ALLOCATED, 6.0, "allocated to d (share 0.5)")
    store.update("c", placement=_place("d1", share=0.5))
    found = [v for v in violations(store) if v.invariant == "devices"]
    assert len(found) == 1 and "allocated to d while held by ['c']" in found[0].evidence
