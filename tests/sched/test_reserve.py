"""Holding a domain for a gang that waited too long, and waiting for a preferred level
(issue 22: large gangs behind backfill)."""

from __future__ import annotations

import pytest

from accelnet.devices import DeviceState
from accelnet.fabric import Fabric
from accelnet.sched import JobSpec, Scheduler, Snapshot, Tenant
from accelnet.sched.policies import make_scheduler
from accelnet.sched.session import Session

from .conftest import job, on


def decide(fabric: Fabric, *jobs, sched: Scheduler, now: float):  # type: ignore[no-untyped-def]
    return sched.decide(Snapshot.all_ready(fabric, tuple(jobs), now=now))


def started(decision) -> dict[str, tuple[str, ...]]:  # type: ignore[no-untyped-def]
    return {s.job: s.placement.devices for s in decision.starts}


def busy(lab: Fabric, free_a: int, free_b: int) -> list:  # type: ignore[type-arg]
    """Running jobs leaving ``free_a`` H100s free on a, ``free_b`` on b, none on c."""
    return [
        job("ra", f"H100:{8 - free_a}", devices=on("a", *range(8 - free_a))),
        job("rb", f"H100:{8 - free_b}", devices=on("b", *range(8 - free_b))),
        job("rc", "H100:4", devices=on("c", 0, 1, 2, 3)),
    ]


def test_a_gang_that_waited_holds_the_domain_nearest_to_fitting(lab: Fabric) -> None:
    smalls = [job(f"s{i}", "H100:1", t=10.0 + i) for i in range(3)]
    gang = job("big", "H100:8", t=0.0)
    plain = decide(lab, *busy(lab, 2, 1), gang, *smalls, sched=Scheduler(), now=1_000.0)
    assert set(started(plain)) == {"s0", "s1", "s2"}  # backfill takes every free GPU
    held = decide(lab, *busy(lab, 2, 1), gang, *smalls,
                  sched=Scheduler(reserve_after_s=600.0), now=1_000.0)  # fmt: skip
    # a's two free GPUs are held for the gang (a 8-GPU host: it fits there once a's
    # running job ends); the small jobs get what is left: b's one
    assert started(held) == {"s0": on("b", 7)}
    assert held.waiting["big"].endswith("2 devices of a held for it (waiting over 600 s)")
    assert "held" not in held.waiting["s1"]


def test_a_gang_holds_nothing_before_its_time(lab: Fabric) -> None:
    smalls = [job(f"s{i}", "H100:1", t=10.0 + i) for i in range(3)]
    d = decide(lab, *busy(lab, 2, 1), job("big", "H100:8", t=500.0), *smalls,
               sched=Scheduler(reserve_after_s=600.0), now=1_000.0)  # fmt: skip
    assert set(started(d)) == {"s0", "s1", "s2"}
    assert d.again_at == pytest.approx(1_100.0)  # when it will have waited 600 s


def test_a_held_domain_is_the_one_the_gang_then_starts_in(lab: Fabric) -> None:
    sched = Scheduler(reserve_after_s=0.0)
    gang = job("big", "H100:8", t=0.0)
    d = decide(lab, *busy(lab, 2, 1), gang, job("s", "H100:1", t=1.0), sched=sched, now=5.0)
    assert "a held" in d.waiting["big"] or "of a held" in d.waiting["big"]
    # a's job ends: a is whole, the gang starts there, not spread
    running = [j for j in busy(lab, 2, 1) if j.id != "ra"]
    d = decide(lab, *running, gang, sched=sched, now=6.0)
    assert started(d) == {"big": on("a", *range(8))}


def test_only_the_first_starving_job_holds_a_domain(lab: Fabric) -> None:
    sched = Scheduler(reserve_after_s=0.0)
    d = decide(lab, *busy(lab, 2, 1), job("g1", "H100:8", t=0.0), job("g2", "H100:8", t=1.0),
               job("s", "H100:1", t=2.0), sched=sched, now=5.0)  # fmt: skip
    assert "held for it" in d.waiting["g1"] and "held for it" not in d.waiting["g2"]
    assert started(d) == {"s": on("b", 7)}


def test_a_starving_job_behind_a_failed_shape_still_holds(lab: Fabric) -> None:
    # priority order: the young high-priority gang fails first; the old low-priority one
    # of the same shape is starving. A decision that skips failed shapes holds for it
    # just as one that tries every job does
    jobs = [*busy(lab, 2, 1), job("young", "H100:8", t=900.0, priority=5),
            job("old", "H100:8", t=0.0), job("s", "H100:1", t=950.0)]  # fmt: skip
    pruned = Scheduler("priority", reserve_after_s=600.0)
    exact = Scheduler("priority", reserve_after_s=600.0, prune=False)
    a = decide(lab, *jobs, sched=pruned, now=1_000.0)
    b = decide(lab, *jobs, sched=exact, now=1_000.0)
    assert "held for it" in a.waiting["old"]
    assert a.starts == b.starts and dict(a.waiting) == dict(b.waiting)
    assert started(a) == {"s": on("b", 7)}


def test_the_session_holds_as_a_full_decision_does(lab: Fabric) -> None:
    sched = Scheduler(reserve_after_s=600.0)
    jobs = [*busy(lab, 2, 1), job("big", "H100:8", t=0.0),
            *(job(f"s{i}", "H100:1", t=10.0 + i) for i in range(3))]  # fmt: skip
    session = Session(Scheduler(reserve_after_s=600.0), lab,
                      dict.fromkeys(lab.devices, DeviceState.READY))  # fmt: skip
    for j in jobs:
        session.put(j)
    got = session.decide(1_000.0)
    want = sched.decide(Snapshot.all_ready(lab, tuple(jobs), now=1_000.0))
    assert got.starts == want.starts and dict(got.waiting) == dict(want.waiting)
    assert started(got) == {"s0": on("b", 7)}


def test_a_level_wait_keeps_a_gang_on_one_host_until_it_ends(lab: Fabric) -> None:
    # 3 free on a, 3 on b: a 4-GPU gang fits only spread over a and b
    topo = {"preferred": "host", "wait_s": 300.0}
    gang = job("g", "H100:4", t=0.0, topology=topo)
    waiting = decide(lab, *busy(lab, 3, 3), gang, sched=Scheduler(), now=100.0)
    assert not waiting.starts
    assert waiting.waiting["g"].endswith("it waits for one host (topology.wait_s)")
    assert waiting.again_at == pytest.approx(300.0)
    later = decide(lab, *busy(lab, 3, 3), gang, sched=Scheduler(), now=300.0)
    assert len(started(later)["g"]) == 4  # the wait is over: spread over a and b
    assert later.again_at is None


def test_a_level_wait_ignores_a_level_that_could_never_hold_the_gang(lab: Fabric) -> None:
    gang = job("g", "H100:12", t=0.0, topology={"preferred": "host", "wait_s": 1e6})
    d = decide(lab, gang, sched=Scheduler(), now=1.0)
    assert len(started(d)["g"]) == 12  # no host has 12: it does not wait for one


def test_reserve_after_is_checked() -> None:
    for bad in (-1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="reserve_after_s"):
            Scheduler(reserve_after_s=bad)
    with pytest.raises(ValueError, match="queue policies"):
        make_scheduler("hetero-fair", reserve_after_s=60.0)
    assert make_scheduler("fifo", reserve_after_s=60.0).reserve_after_s == 60.0


def test_wait_s_needs_a_preferred_level() -> None:
    body = {"name": "j", "run": "x", "resources": {"accelerators": "H100:2"}}
    with pytest.raises(ValueError, match="wait_s needs 'preferred'"):
        JobSpec.model_validate({**body, "topology": {"wait_s": 5.0}})
    for bad in (-1.0, "5", True):
        with pytest.raises(ValueError, match="wait_s"):
            JobSpec.model_validate({**body, "topology": {"preferred": "host", "wait_s": bad}})


def test_a_domain_with_too_few_devices_up_is_not_held(lab: Fabric) -> None:
    # a has 2 free and 1 draining: 7 up, never 8 until it is back; b, 1 free, is held
    devices = dict.fromkeys(lab.devices, DeviceState.READY)
    devices["a/gpu7"] = DeviceState.DRAINING
    jobs = (job("ra", "H100:5", devices=on("a", *range(5))),
            job("rb", "H100:7", devices=on("b", *range(7))),
            job("rc", "H100:4", devices=on("c", 0, 1, 2, 3)),
            job("big", "H100:8", t=0.0), job("s0", "H100:1", t=1.0))  # fmt: skip
    d = Scheduler(reserve_after_s=0.0).decide(Snapshot(lab, 10.0, devices, jobs))
    assert d.waiting["big"].endswith("1 device of b held for it (waiting over 0 s)")
    assert started(d) == {"s0": on("a", 5)}


def test_a_gang_with_a_held_domain_waits_for_it_rather_than_spread(lab: Fabric) -> None:
    # 5 free on a, 3 on b: the 8-GPU gang fits spread over both at once; before its
    # time it does so, once it has waited reserve_after_s it waits for one host (a, held)
    jobs = [*busy(lab, 5, 3), job("big", "H100:8", t=0.0), job("s", "H100:1", t=1.0)]
    young = decide(lab, *jobs, sched=Scheduler(reserve_after_s=600.0), now=100.0)
    assert len(started(young)["big"]) == 8
    old = decide(lab, *jobs, sched=Scheduler(reserve_after_s=600.0), now=1_000.0)
    assert "big" not in started(old)
    assert old.waiting["big"].endswith("5 devices of a held for it (waiting over 600 s)")
    assert started(old) == {"s": on("b", 5)}


def test_a_job_over_its_quota_holds_nothing_when_failures_are_pruned(lab: Fabric) -> None:
    # b1 and b2 wait on tenant B's quota, not on capacity: no domain is held for them,
    # whether the walk skips failed shapes or tries every job (then s starts on a)
    tenants = {"default": Tenant("default"), "A": Tenant("A"),
               "B": Tenant("B", quota={"*": 2.0})}  # fmt: skip
    nv = {"required": "nvlink"}
    jobs = (job("ra", "H100:6", devices=on("a", *range(6))),
            job("rb", "H100:8", devices=on("b", *range(8))),
            job("rc", "H100:4", devices=on("c", 0, 1, 2, 3)),
            job("young", "H100:8", t=900.0, priority=5, tenant="A", topology=nv),
            job("b1", "H100:8", t=0.0, tenant="B", topology=nv),
            job("b2", "H100:8", t=1.0, tenant="B", topology=nv),
            job("s", "H100:1", t=2.0, tenant="A"))  # fmt: skip
    snap = Snapshot.all_ready(lab, jobs, now=1_000.0, tenants=tenants)
    pruned = Scheduler("priority", reserve_after_s=600.0).decide(snap)
    exact = Scheduler("priority", reserve_after_s=600.0, prune=False).decide(snap)
    assert started(pruned) == started(exact) == {"s": on("a", 6)}
    assert "held" not in pruned.waiting["b2"]


def test_a_starving_job_keeps_every_model_it_may_use(lab: Fabric) -> None:
    # H100 or T4: the H100s are all busy, the T4 host is free. A starving job is placed no
    # wider than a domain could hold it on *each* model, so T4's host still takes it
    busy = (job("ra", "H100:8", devices=on("a", *range(8))),
            job("rb", "H100:8", devices=on("b", *range(8))),
            job("rc", "H100:4", devices=on("c", 0, 1, 2, 3)))  # fmt: skip
    acc = {"models": ["H100", "T4"], "count": 4}
    sched = Scheduler(reserve_after_s=600.0)
    young = decide(lab, *busy, job("g", acc, t=900.0), sched=sched, now=1_000.0)
    old = decide(lab, *busy, job("g", acc, t=0.0), sched=sched, now=1_000.0)
    assert started(young) == started(old) == {"g": tuple(f"t/gpu{i}" for i in range(4))}
