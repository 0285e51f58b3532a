"""What the scheduler writes about one job reaches that job's tenant (its events, its
waiting reason): another tenant's job is never named there, nor its priority or request.
Jobs of one tenant still name each other."""

from __future__ import annotations

from accelnet.fabric import Fabric
from accelnet.sched import Decision, JobView, Scheduler, Snapshot

from .conftest import job, on

PREEMPT = Scheduler("priority", preemption="priority")


def decide(fabric: Fabric, *jobs: JobView) -> Decision:
    return PREEMPT.decide(Snapshot.all_ready(fabric, tuple(jobs), now=0.0))


def test_a_victim_of_another_tenant_is_not_told_who_preempted_it(lab: Fabric) -> None:
    victim = job("bstubborn", "T4:4", devices=on("t", 0, 1, 2, 3), tenant="b", started=1)
    high = job("ahigh", "T4:2", priority=737, tenant="a")
    d = decide(lab, victim, high)
    assert [(p.job, p.for_job) for p in d.preemptions] == [("bstubborn", "ahigh")]
    why = d.preemptions[0].reason
    assert why == "preempted for a higher-priority job of another tenant"
    assert "ahigh" not in why and "737" not in why and "T4" not in why
    # and the preempting job's reason does not name its victim
    assert d.waiting["ahigh"] == "needs 2 x T4; 0 of 4 free; preempting 1 job of another tenant"


def test_jobs_of_one_tenant_still_name_each_other(lab: Fabric) -> None:
    victim = job("low", "T4:4", devices=on("t", 0, 1, 2, 3), tenant="a", started=1)
    high = job("high", "T4:2", priority=7, tenant="a")
    d = decide(lab, victim, high)
    assert d.preemptions[0].reason == (
        "preempted for high (priority 7 > 0), which needs 2 x T4; 0 of 4 free"
    )
    assert d.waiting["high"] == "needs 2 x T4; 0 of 4 free; preempting low"


def test_victims_of_both_kinds_are_named_or_counted(lab: Fabric) -> None:
    running = [
        job("mine", "T4:2", devices=on("t", 0, 1), tenant="a", started=1),
        job("theirs1", "T4:1", devices=on("t", 2), tenant="b", started=2),
        job("theirs2", "T4:1", devices=on("t", 3), tenant="c", started=3),
    ]
    high = job("high", "T4:4", priority=9, tenant="a")
    d = decide(lab, *running, high)
    reasons = {p.job: p.reason for p in d.preemptions}
    assert set(reasons) == {"mine", "theirs1", "theirs2"}
    assert reasons["mine"].startswith("preempted for high (priority 9 > 0)")
    for other in ("theirs1", "theirs2"):
        assert reasons[other] == "preempted for a higher-priority job of another tenant"
    assert d.waiting["high"].endswith("; preempting mine, 2 jobs of other tenants")
    assert "theirs" not in d.waiting["high"]
