"""The incremental scheduler (Session) decides exactly as the full rescan does, and both
start exactly what a walk that tries every queued job (``prune=False``) starts."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from accelnet.devices import DeviceState
from accelnet.fabric import Fabric, load_fabric
from accelnet.sched import Decision, JobSpec, JobState, JobView, Scheduler, Snapshot, Tenant
from accelnet.sched.ordering import OrderingPolicy
from accelnet.sched.reasons import Reason, WaitCode, code_of
from accelnet.sched.session import Session

from .test_properties import ACCELERATORS, FABRICS, TOPOLOGY


class LargestFirst(OrderingPolicy):
    """A policy without a fixed key (the session falls back to ordering every time)."""

    name = "largest-first"

    def order(self, snapshot: Snapshot, queued: Sequence[JobView]) -> list[JobView]:
        def size(j: JobView) -> float:
            acc = j.spec.resources.accelerators
            return -acc.count * acc.share

        return sorted(queued, key=lambda j: (size(j), j.submitted_at, j.id))


CONFIGS: dict[str, dict[str, Any]] = {
    "fifo": {"ordering": "fifo"},
    "fifo-first-fit": {"ordering": "fifo", "placement": "first-fit"},
    "priority-preempt": {"ordering": "priority", "preemption": "priority", "aging_s": 50.0},
    "priority-frag-aware": {"ordering": "priority", "placement": "frag-aware"},
    "fifo-comm-aware": {"ordering": "fifo", "placement": "comm-aware"},
    "unkeyed": {"ordering": LargestFirst()},
    "fifo-reserve": {"ordering": "fifo", "reserve_after_s": 5.0},
    "priority-reserve": {"ordering": "priority", "reserve_after_s": 0.0},
}
TENANTS = {
    "none": {},
    "quota": {
        "a": Tenant("a", quota={"*": 6, "H100": 3}),
        "b": Tenant("b", quota={"B200": 4, "T4": 1.5}),
    },
    "many-none": {},
    "many": {  # every fourth tenant under a quota on all devices, every fourth on H100
        f"t{i}": Tenant(f"t{i}", quota=[{"*": 3}, {"H100": 2}, {}, {}][i % 4]) for i in range(12)
    },
}
NAMES = {  # the tenants jobs are drawn from (with "many", t12 is not known)
    "none": ["a", "b", "c"],
    "quota": ["a", "b", "c"],
    "many-none": [f"t{i}" for i in range(13)],
    "many": [f"t{i}" for i in range(13)],
}
# what a queued job asks for: devices, or (CPU-only) a host's cores alone
REQUESTS = [*ACCELERATORS, "cpus:1", "cpus:4"]
STATES = [DeviceState.READY] * 4 + [
    DeviceState.ALLOCATED,
    DeviceState.DRAINING,
    DeviceState.UNHEALTHY,
]


def same(a: Decision, b: Decision) -> None:
    assert a.starts == b.starts
    assert a.preemptions == b.preemptions
    assert dict(a.nominations) == dict(b.nominations)
    assert dict(a.waiting) == dict(b.waiting)
    # every reason is typed, and the incremental and full scans give the same codes
    assert {j: code_of(r) for j, r in a.waiting.items()} == {
        j: code_of(r) for j, r in b.waiting.items()
    }
    assert all(isinstance(r, Reason) for d in (a, b) for r in d.waiting.values())
    assert a.time_shares == b.time_shares
    assert a.again_at == b.again_at


def spec(
    name: str, acc: str, topo: str | None, prio: int, tenant: str, ckpt: bool,
    wait: float | None = None,
) -> JobSpec:  # fmt: skip
    body: dict[str, Any] = {"name": name, "run": "x", "priority": prio, "tenant": tenant,
                            "checkpointable": ckpt, "resources": {"accelerators": acc}}  # fmt: skip
    if acc.startswith("cpus:"):  # no device: only a host's cores
        body["resources"] = {"cpus": float(acc.removeprefix("cpus:"))}
        topo = None
    if topo and wait is not None:  # preferred, waited for up to wait s (topology.wait_s)
        body["topology"] = {"preferred": topo, "wait_s": wait}
    elif topo:
        body["topology"] = {"required": topo}
    return JobSpec.model_validate(body)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    data=st.data(),
    fabric_name=st.sampled_from(sorted(FABRICS)),
    config=st.sampled_from(sorted(CONFIGS)),
    tenants=st.sampled_from(sorted(TENANTS)),
)
def test_session_decides_as_the_full_rescan(
    data: st.DataObject, fabric_name: str, config: str, tenants: str
) -> None:
    fabric: Fabric = FABRICS[fabric_name]
    full = Scheduler(**CONFIGS[config])
    incremental = Scheduler(**CONFIGS[config])
    exact = Scheduler(**CONFIGS[config], prune=False)
    devices = dict.fromkeys(fabric.devices, DeviceState.READY)
    jobs: dict[str, JobView] = {}  # the model: what the full rescan is given
    session = Session(incremental, fabric, devices, TENANTS[tenants])
    now = 0.0

    def put(view: JobView) -> None:
        jobs[view.id] = view
        session.put(view)

    for step in range(data.draw(st.integers(5, 40), label="steps")):
        now += data.draw(st.sampled_from([0.0, 1.0, 7.5]))
        op = data.draw(st.sampled_from(["submit"] * 4 + ["decide"] * 3 + ["end", "device"]))
        if op == "submit":
            for _ in range(data.draw(st.integers(1, 6))):
                jid = f"j{len(jobs)}-{step}"
                s = spec(
                    jid,
                    data.draw(st.sampled_from(REQUESTS)),
                    data.draw(st.sampled_from(TOPOLOGY)),
                    data.draw(st.integers(0, 3)),
                    data.draw(st.sampled_from(NAMES[tenants])),
                    data.draw(st.booleans()),
                    data.draw(st.sampled_from([None, None, 0.0, 5.0, 100.0])),
                )
                state = data.draw(st.sampled_from([JobState.ADMITTED] * 5 + [JobState.PENDING]))
                put(JobView(jid, s, state, now))
        elif op == "device":
            dev = data.draw(st.sampled_from(sorted(fabric.devices)))
            devices[dev] = data.draw(st.sampled_from(STATES))
            session.set_device(dev, devices[dev])
        elif op == "end":
            holding = sorted(j for j, v in jobs.items() if v.placement is not None)
            if not holding:
                continue
            jid = data.draw(st.sampled_from(holding))
            if data.draw(st.booleans()):
                del jobs[jid]
                session.drop(jid)
            else:  # requeued
                put(replace(jobs[jid], state=JobState.ADMITTED, placement=None, nominated=()))
        snap = Snapshot(fabric, now, dict(devices), tuple(jobs.values()), TENANTS[tenants])
        got = session.decide(now)
        same(got, full.decide(snap))
        tried = exact.decide(snap)  # every queued job tried: the same decision
        assert (got.starts, got.preemptions) == (tried.starts, tried.preemptions)
        assert dict(got.nominations) == dict(tried.nominations)
        assert set(got.waiting) == set(tried.waiting)
        if op != "decide":
            continue
        for s in got.starts:
            put(replace(jobs[s.job], state=JobState.STARTING, placement=s.placement,
                        nominated=(), attempts=jobs[s.job].attempts + 1))  # fmt: skip
        for p in got.preemptions:
            put(replace(jobs[p.job], state=JobState.PREEMPTING))
        for jid, nominated in got.nominations.items():
            if jobs[jid].state is JobState.ADMITTED:
                put(replace(jobs[jid], nominated=nominated))
        for v in list(jobs.values()):
            if v.state is JobState.STARTING:
                put(replace(v, state=JobState.RUNNING, started_at=now))
            elif v.state is JobState.PENDING:
                put(replace(v, state=JobState.ADMITTED))


def test_a_decision_leaves_the_session_unchanged() -> None:
    fabric = FABRICS["mixed-lab"]
    session = Session(Scheduler(), fabric, dict.fromkeys(fabric.devices, DeviceState.READY))
    for i in range(50):
        session.put(JobView(f"j{i}", spec(f"j{i}", "any:1", None, 0, "a", False),
                            JobState.ADMITTED, float(i)))  # fmt: skip
    free = dict(session.index.free)
    first = session.decide(1.0)
    assert first.starts and dict(session.index.free) == free
    same(session.decide(1.0), first)


def test_reasons_of_a_full_fabric_stay_those_of_the_decision() -> None:
    """Waiting reasons of the queue's tail are written when read: reading them after the
    session changed still gives the reasons of the decision they came from."""
    fabric = FABRICS["mixed-lab"]
    session = Session(Scheduler(), fabric, dict.fromkeys(fabric.devices, DeviceState.READY))
    n = len(fabric.devices)
    views = [JobView(f"j{i}", spec(f"j{i}", "any:1", None, 0, "a", False),
                     JobState.ADMITTED, float(i)) for i in range(n + 5)]  # fmt: skip
    for v in views:
        session.put(v)
    decision = session.decide(1.0)
    assert len(decision.starts) == n
    for s in decision.starts:
        session.put(replace(views[int(s.job[1:])], state=JobState.RUNNING, placement=s.placement))
    later = session.decide(2.0)
    then = Scheduler().decide(session.snapshot(2.0))
    assert later.starts == ()
    for s in decision.starts:  # free everything again before reading the reasons
        session.drop(s.job)
    again = session.decide(3.0)  # the session's index changes (the decision kept alive)
    assert again.starts
    assert dict(later.waiting) == dict(then.waiting)
    assert list(later.waiting) == list(then.waiting) and len(later.waiting) == 5
    assert later.waiting[views[-1].id].startswith("needs 1 x H100-SXM; 0 of 8 free; or")


def test_reason_now_is_the_decisions_reason_for_a_full_fabrics_queue() -> None:
    fabric = FABRICS["mixed-lab"]
    session = Session(Scheduler(), fabric, dict.fromkeys(fabric.devices, DeviceState.READY))
    n = len(fabric.devices)
    views = [JobView(f"j{i}", spec(f"j{i}", "any:1", None, 0, "a", False),
                     JobState.ADMITTED, float(i)) for i in range(n + 3)]  # fmt: skip
    views.append(JobView("big", spec("big", "H100:9", None, 0, "a", False), JobState.ADMITTED, 99))
    for v in views:
        session.put(v)
    for s in session.decide(1.0).starts:
        session.put(replace(views[int(s.job[1:])], state=JobState.RUNNING, placement=s.placement))
    waiting = session.decide(2.0).waiting
    for v in views[n:]:
        assert session.reason(v.id) == waiting[v.id]
        want = WaitCode.NEVER_FITS if v.id == "big" else WaitCode.NO_CAPACITY
        assert code_of(session.reason(v.id)) is code_of(waiting[v.id]) is want
    assert session.reason("big") == waiting["big"]
    assert waiting["big"].startswith("can never run here: ")
    big = waiting["big"]
    assert isinstance(big, Reason) and big.code is WaitCode.NEVER_FITS and big.unresolvable
    assert session.reason(views[0].id) is None  # running, not waiting
    assert session.reason("nobody") is None


@pytest.mark.parametrize("config", sorted(CONFIGS))
def test_the_session_snapshot_is_what_it_decides_on(config: str) -> None:
    fabric = FABRICS["nvl72"]
    sched = Scheduler(**CONFIGS[config])
    session = Session(sched, fabric, dict.fromkeys(fabric.devices, DeviceState.READY))
    for i in range(10):
        session.put(JobView(f"j{i}", spec(f"j{i}", "any:8", None, i % 3, "a", False),
                            JobState.ADMITTED, float(i)))  # fmt: skip
    same(session.decide(5.0), Scheduler(**CONFIGS[config]).decide(session.snapshot(5.0)))


def test_a_job_that_fits_what_is_free_says_so_before_the_next_decision() -> None:
    """Issue 26 item 4: with devices free, a job submitted since the last decision is not
    told it lacks room ('largest free fabric has 3'); it waits for the next decision."""
    fabric = FABRICS["mixed-lab"]
    session = Session(Scheduler(), fabric, dict.fromkeys(fabric.devices, DeviceState.READY))
    session.decide(0.0)
    fits = JobView("fits", spec("fits", "any:1", None, 0, "a", False), JobState.ADMITTED, 1.0)
    session.put(fits)
    reason = session.reason("fits")
    assert code_of(reason) is WaitCode.AWAITING_DECISION
    assert reason is not None and "fits what is free now" in reason
    n = len(fabric.devices)
    big = JobView("big", spec("big", f"any:{n + 1}", None, 0, "a", False), JobState.ADMITTED, 2.0)
    session.put(big)
    assert code_of(session.reason("big")) in (WaitCode.NEVER_FITS, WaitCode.NO_CAPACITY)
    assert [s.job for s in session.decide(3.0).starts] == ["fits"]


def test_a_job_a_decision_left_waiting_is_not_told_it_fits_what_is_free() -> None:
    """Once a decision has seen a job, its reason is the decision's (here: the devices are
    held for a waiting gang), never 'fits what is free now' again."""
    fabric = load_fabric("pcie-4xL4")
    session = Session(Scheduler(reserve_after_s=0), fabric,
                      dict.fromkeys(fabric.devices, DeviceState.READY))  # fmt: skip
    a = JobView("A", spec("A", "L4:2", None, 0, "a", False), JobState.ADMITTED, 0.0)
    session.put(a)
    (start,) = session.decide(0.0).starts
    session.put(replace(a, state=JobState.RUNNING, placement=start.placement))
    session.put(JobView("H", spec("H", "L4:4", None, 0, "a", False), JobState.ADMITTED, 1.0))
    session.put(JobView("T", spec("T", "L4:1", None, 0, "a", False), JobState.ADMITTED, 2.0))
    assert code_of(session.reason("T")) is WaitCode.AWAITING_DECISION  # not decided on yet
    decision = session.decide(5.0)
    assert "T" not in [s.job for s in decision.starts]
    assert code_of(session.reason("T")) is not WaitCode.AWAITING_DECISION


@pytest.mark.parametrize("ordering", ["fifo", "priority"])
def test_a_merging_session_walks_nominated_jobs_in_the_queues_order(ordering: str) -> None:
    """A session that walks per-shape queues merged keeps no queue of every job; jobs that
    come with nominated devices (a decision of another configuration made them, e.g.
    before a restart) make it walk the whole queue, in order, as the full rescan does."""
    fabric = FABRICS["mixed-lab"]
    devices = sorted(fabric.devices)
    n = len(devices)
    session = Session(Scheduler(ordering), fabric, dict.fromkeys(devices, DeviceState.READY))

    def view(i: int) -> JobView:
        acc = "any:1" if i % 3 else "any:2"
        job = spec(f"j{i}", acc, None, i % 4, "ab"[i % 2], False)
        nominated = (devices[i % n],) if i % 7 == 3 else ()
        return JobView(f"j{i}", job, JobState.ADMITTED, float(i), nominated=nominated)

    views = {f"j{i}": view(i) for i in range(n + 9)}
    for v in reversed(views.values()):
        session.put(v)
    assert session.queued() == n + 9
    for now in (1.0, 2.0):
        decision = session.decide(now)
        full = Scheduler(ordering).decide(session.snapshot(now))
        same(decision, full)
        assert list(decision.waiting) == list(full.waiting)
        assert decision.starts or now > 1.0
        for s in decision.starts:
            views[s.job] = replace(views[s.job], state=JobState.RUNNING, placement=s.placement,
                                   nominated=())  # fmt: skip
            session.put(views[s.job])
    assert session.queued() == sum(v.state is JobState.ADMITTED for v in views.values()) > 0


@pytest.mark.parametrize("ordering", ["fifo", "priority"])
def test_a_full_fabrics_reasons_list_the_queue_in_the_policys_order(ordering: str) -> None:
    """A session that keeps per-shape queues lists a full fabric's waiting jobs as the full
    rescan does (the policy's order across tenants and shapes), kept or read later."""
    fabric = FABRICS["mixed-lab"]
    devices = sorted(fabric.devices)
    session = Session(Scheduler(ordering), fabric, dict.fromkeys(devices, DeviceState.READY))
    views = [
        JobView(f"j{i}", spec(f"j{i}", ["any:1", "any:2", "H100:1"][i % 3], None, i % 4,
                              "abc"[(i // 3) % 3], False), JobState.ADMITTED, float(i))
        for i in range(2 * len(devices))
    ]  # fmt: skip
    for v in views:
        session.put(v)
    for s in session.decide(1.0).starts:
        session.put(replace(views[int(s.job[1:])], state=JobState.RUNNING, placement=s.placement))
    kept = session.decide(2.0)
    full = Scheduler(ordering).decide(session.snapshot(2.0))
    assert kept.starts == () and len(kept.waiting) > 3
    assert list(kept.waiting) == list(full.waiting)
    assert dict(kept.waiting) == dict(full.waiting)
    session.drop(next(iter(kept.waiting)))  # the queue changes: the kept decision does not
    assert list(kept.waiting) == list(full.waiting)
