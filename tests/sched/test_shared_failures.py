"""A request shape that does not fit for lack of capacity fails for every tenant at once:
the other tenants' jobs of that shape wait with the same reason (the capacity's alone: no
job, no quota of anyone), the decision is the one of a walk that tries every job, and a
decision probes each shape once, however many tenants queue it. A tenant under a quota
(or not known) still gets its own answer."""

from __future__ import annotations

from dataclasses import replace

from accelnet.devices import DeviceState
from accelnet.fabric import Fabric
from accelnet.sched import Decision, JobView, Scheduler, Snapshot, Tenant
from accelnet.sched.capacity import CapacityIndex
from accelnet.sched.placement import BestFit
from accelnet.sched.request import Request
from accelnet.sched.session import Session
from accelnet.sched.snapshot import Placement

from .conftest import job, on


class Counting(BestFit):
    """Best fit, counting its placement attempts."""

    def __init__(self) -> None:
        self.calls = 0

    def place(self, req: Request, index: CapacityIndex) -> Placement | None:
        self.calls += 1
        return super().place(req, index)


def full_lab() -> list[JobView]:
    """Every H100 of the lab but two of host c held by tenant ``owner``'s jobs."""
    return [
        job("r-a", "H100:8", devices=on("a", *range(8)), tenant="owner", started=1),
        job("r-b", "H100:8", devices=on("b", *range(8)), tenant="owner", started=1),
        job("r-c", "H100:2", devices=on("c", 0, 1), tenant="owner", started=1),
    ]


def decide_all_ways(
    fabric: Fabric, jobs: list[JobView], tenants: dict[str, Tenant]
) -> tuple[Decision, Decision, Decision]:
    """The session's decision, the full rescan's, and a walk that tries every job."""
    snap = Snapshot(fabric, 10.0, dict.fromkeys(fabric.devices, DeviceState.READY),
                    tuple(jobs), tenants)  # fmt: skip
    session = Session(Scheduler(), fabric, dict(snap.devices), tenants)
    for j in jobs:
        session.put(j)
    return session.decide(10.0), Scheduler().decide(snap), Scheduler(prune=False).decide(snap)


def test_one_tenants_capacity_failure_answers_the_others(lab: Fabric) -> None:
    queued = [job(f"{t}-big", "H100:4", t=float(i), tenant=t) for i, t in enumerate("xyz")]
    queued.append(job("y-small", "H100:1", t=5.0, tenant="y"))
    for tenants in ({}, {n: Tenant(n) for n in ("owner", "x", "y", "z")}):
        got, full, tried = decide_all_ways(lab, full_lab() + queued, tenants)
        assert got.starts == full.starts == tried.starts
        assert [s.job for s in got.starts] == ["y-small"]
        why = got.waiting["x-big"]
        assert why == "needs 4 x H100-SXM; 2 of 20 free"
        for d in (got, full, tried):  # the same reason for every tenant, from every walk
            assert d.waiting["y-big"] == d.waiting["z-big"] == why
        assert dict(got.waiting) == dict(full.waiting)


def test_a_tenant_under_quota_gets_its_own_answer(lab: Fabric) -> None:
    tenants = {
        "owner": Tenant("owner"),
        "x": Tenant("x"),
        "y": Tenant("y", quota={"*": 3}),  # its 4-GPU job is over quota
        "z": Tenant("z", quota={"H100": 64}),  # under quota: capacity answers it
    }
    queued = [job(f"{t}-big", "H100:4", t=float(i), tenant=t) for i, t in enumerate("xyzw")]
    got, full, tried = decide_all_ways(lab, full_lab() + queued, tenants)
    assert got.starts == full.starts == tried.starts == ()
    assert dict(got.waiting) == dict(full.waiting) == dict(tried.waiting)
    capacity = "needs 4 x H100-SXM; 2 of 20 free"
    assert got.waiting["x-big"] == got.waiting["z-big"] == capacity
    assert got.waiting["y-big"] == "tenant y quota is 3 devices; 0 in use, needs 4 more"
    assert got.waiting["w-big"] == "tenant w is not known here (tenants are case-sensitive)"


def test_no_reason_names_another_tenants_job_or_quota(lab: Fabric) -> None:
    tenants = {n: Tenant(n) for n in ("owner", "x", "z")} | {"y": Tenant("y", quota={"*": 3})}
    queued = [job(f"{t}-secret{i}", "H100:4", t=float(i), tenant=t)
              for i, t in enumerate("yxzyxz")]  # fmt: skip
    got, full, _ = decide_all_ways(lab, full_lab() + queued, tenants)
    for d in (got, full):
        for jid, why in d.waiting.items():
            assert "secret" not in why and "owner" not in why
            if not jid.startswith("y"):
                assert "quota" not in why and "tenant" not in why


def test_a_decision_probes_a_shape_once_whatever_the_tenants(lab: Fabric) -> None:
    """200 tenants queue the same shape that does not fit: one placement attempt, not
    one per tenant (the session keeps the tenants' queues; a decision reads a shape's
    first tenant only)."""
    counting = Counting()
    devices = dict.fromkeys(lab.devices, DeviceState.READY)
    session = Session(Scheduler(placement=counting), lab, devices)
    for j in full_lab():
        session.put(j)
    for i in range(200):
        session.put(job(f"j{i}", "H100:4", t=float(i), tenant=f"t{i}"))
    session.put(job("small", "H100:1", t=500.0, tenant="t7"))
    counting.calls = 0
    decision = session.decide(10.0)
    assert [s.job for s in decision.starts] == ["small"]
    assert counting.calls == 2
    assert len(decision.waiting) == 200
    assert {decision.waiting[f"j{i}"] for i in range(200)} == {"needs 4 x H100-SXM; 2 of 20 free"}
    # and as the queue changes, the heads follow: the first tenants' jobs end
    for i in range(100):
        session.drop(f"j{i}")
    session.put(replace(job("small", "H100:1", t=500.0, tenant="t7"), id="small2"))
    counting.calls = 0
    decision = session.decide(11.0)  # small (not applied) and small2 start, 100 wait
    assert [s.job for s in decision.starts] == ["small", "small2"]
    assert counting.calls == 3 and len(decision.waiting) == 100


def test_the_reason_now_answers_to_the_quota_too(lab: Fabric) -> None:
    """What the controller shows for a job the decision did not walk (Session.reason) is
    what the decision would write: with its tenant's quota, not only the capacity."""
    tenants = {"owner": Tenant("owner"), "x": Tenant("x"), "y": Tenant("y", quota={"*": 3})}
    devices = dict.fromkeys(lab.devices, DeviceState.READY)
    session = Session(Scheduler(), lab, devices, tenants)
    for j in full_lab() + [job(f"{t}-big{i}", "H100:4", t=float(i), tenant=t)
                           for i, t in enumerate("xyxy")]:  # fmt: skip
        session.put(j)
    decision = session.decide(10.0)
    for jid in ("x-big0", "y-big1", "x-big2", "y-big3"):
        assert session.reason(jid) == decision.waiting[jid]
    assert session.reason("y-big3") == "tenant y quota is 3 devices; 0 in use, needs 4 more"
