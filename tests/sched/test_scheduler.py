"""Scheduler rules on hand-built snapshots, reasons included."""

from __future__ import annotations

from accelnet.devices import DeviceState
from accelnet.fabric import DomainLevel, Fabric
from accelnet.sched import JobState, Scheduler, Snapshot, Tenant

from .conftest import job, on


def decide(fabric: Fabric, *jobs, sched: Scheduler | None = None, now: float = 0.0, **kw):  # type: ignore[no-untyped-def]
    snap = Snapshot.all_ready(fabric, tuple(jobs), now=now, tenants=kw.get("tenants"))
    return (sched or Scheduler()).decide(snap)


def started(decision) -> dict[str, tuple[str, ...]]:  # type: ignore[no-untyped-def]
    return {s.job: s.placement.devices for s in decision.starts}


def test_gang_goes_to_the_tightest_best_fitting_domain(lab: Fabric) -> None:
    # a has 8 free, b 3 free (5 held), c 4 free: 3 GPUs fit best in b, keeping a and c whole
    d = decide(lab, job("busy", "H100:5", devices=on("b", 0, 1, 2, 3, 4)), job("j", "H100:3"))
    assert started(d)["j"] == on("b", 5, 6, 7)
    assert d.starts[0].placement.span is DomainLevel.NVLINK


def test_required_nvlink_reason_names_largest_domain(lab: Fabric) -> None:
    busy = [job(f"busy{h}", "H100:2", devices=on(h, 0, 1)) for h in ("a", "b")]
    d = decide(lab, *busy, job("big", "H100:8", topology={"required": "nvlink"}))
    assert "big" not in started(d)
    assert d.waiting["big"] == (
        "needs 8 x H100-SXM in one NVLink domain; largest free NVLink domain has 6 (on a)"
    )


def test_without_topology_a_gang_may_span_hosts_but_as_few_as_possible(lab: Fabric) -> None:
    busy = [job(f"busy{h}", "H100:2", devices=on(h, 0, 1)) for h in ("a", "b")]
    d = decide(lab, *busy, job("big", "H100:10"))
    devs = started(d)["big"]
    assert len(devs) == 10 and {x.split("/")[0] for x in devs} == {"a", "b"}
    assert d.starts[-1].placement.span is DomainLevel.LEAF


def test_preferred_topology_falls_back(lab: Fabric) -> None:
    d = decide(lab, job("j", "H100:12", topology={"preferred": "host"}))
    assert len(started(d)["j"]) == 12
    assert d.starts[0].placement.span is DomainLevel.LEAF
    d = decide(lab, job("j", "H100:12", topology={"required": "host"}))
    assert "j" in d.waiting and "one host" in d.waiting["j"]


def test_gangs_are_all_or_nothing(lab: Fabric) -> None:
    d = decide(lab, job("j", "T4:5"))
    assert d.starts == () and d.waiting["j"].startswith("can never run here")
    busy = job("busy", "T4:2", devices=("t/gpu0", "t/gpu1"))
    d = decide(lab, busy, job("j", "T4:3"))
    assert d.starts == () and d.waiting["j"] == "needs 3 x T4; 2 of 4 free"


def test_fractional_shares_are_packed(lab: Fabric) -> None:
    d = decide(lab, job("q1", "T4:0.25", t=0), job("q2", "T4:0.5", t=1), job("q3", "T4:0.5", t=2))
    s = started(d)
    assert s["q1"] == s["q2"] == ("t/gpu0",)  # 0.25 + 0.5 share one device
    assert s["q3"] == ("t/gpu1",)  # 0.5 does not fit in the 0.25 left
    shares = {x.job: x.placement.share for x in d.starts}
    assert shares == {"q1": 0.25, "q2": 0.5, "q3": 0.5}


def test_fraction_reason(lab: Fabric) -> None:
    busy = [job(f"b{i}", "T4:0.75", devices=(f"t/gpu{i}",), share=0.75) for i in range(4)]
    d = decide(lab, *busy, job("q", "T4:0.5"))
    assert d.waiting["q"] == (
        "needs 0.5 of a T4; no T4 has 0.5 free (largest free share 0.25, 0 wholly free)"
    )


def test_memory_kind_and_model_preference(lab: Fabric) -> None:
    d = decide(lab, job("big-mem", "any:1", resources={"accelerators": "any:1",
                                                      "min_memory_gb": 30}))  # fmt: skip
    assert started(d)["big-mem"][0].split("/")[0] in {"a", "b", "c", "m"}
    d = decide(lab, job("pref", {"any_of": ["A100-80GB", "H100"], "count": 2}))
    assert started(d)["pref"] == ("m/gpu0", "m/gpu1")
    fastest = {"accelerators": {"count": 1, "prefer": "speed"}, "kind": "gpu"}
    d = decide(lab, job("slow", "T4:1", resources=fastest))
    assert started(d)["slow"][0].startswith(("a/", "b/", "c/"))  # fastest model first
    # by default (prefer: fit) any model is weighed by fit: the tightest NVLink domain
    d = decide(lab, job("fit", "T4:1", resources={"accelerators": "any:1", "kind": "gpu"}))
    assert started(d)["fit"][0].startswith("t/")  # a T4, its own NVLink domain


def test_fifo_skips_jobs_that_do_not_fit(lab: Fabric) -> None:
    d = decide(lab, job("huge", "H100:8", t=0, topology={"required": "nvlink"}),
               job("huge2", "H100:8", t=1, topology={"required": "nvlink"}),
               job("huge3", "H100:8", t=2, topology={"required": "nvlink"}),
               job("small", "H100:4", t=3))  # fmt: skip
    assert set(started(d)) == {"huge", "huge2", "small"}
    assert "huge3" in d.waiting


def test_priority_with_aging(lab: Fabric) -> None:
    sched = Scheduler("priority", aging_s=100.0)
    low_old = job("low-old", "H100:8", t=0, priority=1, topology={"required": "nvlink"})
    high_new = job("high-new", "H100:8", t=950, priority=10, topology={"required": "nvlink"})
    mid = job("mid", "H100:8", t=900, priority=5, topology={"required": "nvlink"})
    order = [j.id for j in sched.ordering.order(Snapshot.all_ready(lab, now=1000),
                                                 [low_old, high_new, mid])]  # fmt: skip
    assert order == ["low-old", "high-new", "mid"]  # 1 + 10 aged > 10 + 0.5 > 5 + 1


def test_quotas(lab: Fabric) -> None:
    tenants = {"v": Tenant("v", quota={"H100": 8})}  # an alias of H100-SXM
    busy = job("busy", "H100:6", devices=on("a", *range(6)), tenant="v")
    d = decide(lab, busy, job("more", "H100:4", tenant="v"), tenants=tenants)
    assert d.waiting["more"] == "tenant v quota reached: H100-SXM 8 (6 in use); needs 4 more"
    d = decide(lab, busy, job("other", "any:4", tenant="v"), tenants=tenants)
    assert not started(d)["other"][0].startswith(("a/", "b/", "c/"))  # steered off H100
    both = job("both", {"any_of": ["H100", "T4"], "count": 4}, tenant="v", t=1)
    t4s = job("t4s", "T4:4", devices=("t/gpu0", "t/gpu1", "t/gpu2", "t/gpu3"), tenant="w")
    d = decide(lab, busy, t4s, both, tenants={**tenants, "w": Tenant("w")})
    assert d.waiting["both"] == ("needs 4 x T4; 0 of 4 free; over quota: H100-SXM 8 (6 in use)")
    tenants = {"v": Tenant("v", quota={"*": 7})}
    d = decide(lab, busy, job("more", "T4:2", tenant="v"), tenants=tenants)
    assert d.waiting["more"] == "tenant v quota is 7 devices; 6 in use, needs 2 more"


def test_unschedulable_devices_are_not_used(lab: Fabric) -> None:
    states = {d: DeviceState.READY for d in lab.devices}
    states["t/gpu0"] = DeviceState.DRAINING
    states["t/gpu1"] = DeviceState.UNHEALTHY
    del states["t/gpu2"]
    snap = Snapshot(lab, 0.0, states, (job("j", "T4:2"),))
    d = Scheduler().decide(snap)
    assert d.waiting["j"] == "needs 2 x T4; 1 of 4 free (3 draining, unhealthy or offline)"


def test_preemption_picks_checkpointable_then_prunes(lab: Fabric) -> None:
    running = [
        job("keep", "H100:4", devices=on("c", 0, 1, 2, 3), priority=0, started=5),
        job("ckpt", "H100:8", devices=on("a", *range(8)), priority=0, checkpointable=True,
            started=1),
        job("plain", "H100:8", devices=on("b", *range(8)), priority=0, started=9),
    ]  # fmt: skip
    urgent = job("urgent", "H100:8", priority=5, topology={"required": "nvlink"})
    d = decide(lab, *running, urgent, sched=Scheduler("priority", preemption="priority"))
    assert [p.job for p in d.preemptions] == ["ckpt"]
    assert d.preemptions[0].for_job == "urgent"
    assert d.preemptions[0].reason.startswith("preempted for urgent (priority 5 > 0)")
    assert d.waiting["urgent"].endswith("; preempting ckpt")
    assert d.starts == ()


def test_no_preemption_of_equal_or_higher_priority(lab: Fabric) -> None:
    running = [job(f"r{h}", "H100:8", devices=on(h, *range(8)), priority=5) for h in "ab"]
    d = decide(lab, *running, job("u", "H100:8", priority=5, topology={"required": "nvlink"}),
               sched=Scheduler("priority", preemption="priority"))  # fmt: skip
    assert d.preemptions == () and "u" in d.waiting


def test_preempted_devices_are_nominated_and_held_for_their_job(lab: Fabric) -> None:
    prio = Scheduler("priority", preemption="priority")
    big = [job(f"big-{h}", "H100:8", devices=on(h, *range(8)), priority=100) for h in "ab"]
    low = job("low", "H100:2", devices=on("c", 0, 1), priority=0, started=1)
    hi = job("hi", "H100:4", t=5, priority=50, topology={"required": "nvlink"})
    small = job("small", "H100:2", t=6, priority=1)
    d = decide(lab, *big, low, hi, small, sched=prio)
    assert [p.job for p in d.preemptions] == ["low"]
    assert d.nominations == {"hi": on("c", 0, 1, 2, 3)}
    assert "small" not in started(d)  # c/gpu2,3 are held for hi, not taken by small
    # next round: low is stopping; hi waits for it, and nobody else takes its devices
    stopping = job("low", "H100:2", devices=on("c", 0, 1), state=JobState.PREEMPTING)
    hi2 = job("hi", "H100:4", t=5, priority=50, topology={"required": "nvlink"},
              nominated=d.nominations["hi"])  # fmt: skip
    d2 = decide(lab, *big, stopping, hi2, small, sched=prio)
    assert d2.preemptions == () and "small" not in started(d2)
    assert d2.waiting["hi"].endswith("waiting for preempted jobs to release 2 nominated devices")
    # once low is gone, hi starts on its nomination
    d3 = decide(lab, *big, hi2, small, sched=prio)
    assert started(d3)["hi"] == on("c", 0, 1, 2, 3)


def test_victims_on_unschedulable_devices_free_nothing(lab: Fabric) -> None:
    states = {d: DeviceState.READY for d in lab.devices}
    for i in (2, 3):
        states[f"c/gpu{i}"] = DeviceState.DRAINING
    big = [job(f"big-{h}", "H100:8", devices=on(h, *range(8)), priority=100) for h in "ab"]
    low = job("low", "H100:2", devices=on("c", 0, 1), priority=0)
    hi = job("hi", "H100:4", priority=50, topology={"required": "nvlink"})
    snap = Snapshot(lab, 0.0, states, (*big, low, hi))
    d = Scheduler("priority", preemption="priority").decide(snap)
    assert d.preemptions == ()  # stopping low would still leave hi 2 devices short


def test_victims_lowest_priority_first(lab: Fabric) -> None:
    running = [
        job("important-ckpt", "H100:8", devices=on("a", *range(8)), priority=9,
            checkpointable=True),
        job("scratch", "H100:4", devices=on("c", *range(4)), priority=0),
        job("other", "H100:8", devices=on("b", *range(8)), priority=9),
    ]  # fmt: skip
    d = decide(lab, *running, job("hi", "H100:4", priority=10, topology={"required": "nvlink"}),
               sched=Scheduler("priority", preemption="priority"))  # fmt: skip
    assert [p.job for p in d.preemptions] == ["scratch"]


def test_same_snapshot_same_decision(lab: Fabric) -> None:
    jobs = [job(f"j{i}", f"H100:{1 + i % 4}", t=i) for i in range(12)]
    snap = Snapshot.all_ready(lab, tuple(jobs))
    a, b = Scheduler().decide(snap), Scheduler().decide(snap)
    assert a == b and a.to_json() == b.to_json()


def test_pending_jobs_wait_for_admission(lab: Fabric) -> None:
    d = decide(lab, job("p", state=JobState.PENDING))
    assert d.waiting == {"p": "waiting for admission"}


def test_first_fit_is_available(lab: Fabric) -> None:
    busy = job("busy", "H100:5", devices=on("b", 0, 1, 2, 3, 4))
    d = decide(lab, busy, job("j", "H100:3"), sched=Scheduler(placement="first-fit"))
    assert started(d)["j"] == on("a", 0, 1, 2)


def test_unknown_policy_names_list_the_valid_ones() -> None:
    import pytest

    from accelnet.fabric import UnknownNameError

    with pytest.raises(UnknownNameError, match="unknown ordering policy 'lifo'; known: fifo"):
        Scheduler("lifo")
    with pytest.raises(UnknownNameError, match="known: best-fit, comm-aware, fgd, first-fit"):
        Scheduler(placement="worst-fit")


def test_model_families_and_unknown_tenants() -> None:
    from accelnet.fabric.build import build_fabric, parse_spec

    spec = {"name": "p", "hosts": [{"name": "h", "devices": "2xH100-PCIe"},
                                   {"name": "n", "devices": "2xH100-NVL"}]}  # fmt: skip
    fab = build_fabric(parse_spec(spec, "t"))
    d = decide(fab, job("j", "H100:2"), job("k", "H100:2", t=1))
    assert {s.placement.model for s in d.starts} == {"H100-PCIe", "H100-NVL"}
    tenants = {"R": Tenant("R", quota={"*": 8})}
    d = decide(fab, job("x", "H100:1", tenant="r"), tenants=tenants)
    assert d.waiting["x"] == "tenant r is not known here (tenants are case-sensitive)"


def test_tenant_quota_must_be_a_number() -> None:
    import math

    import pytest

    with pytest.raises(ValueError, match="quota H100 = nan must be >= 0"):
        Tenant("t", quota={"H100": math.nan})


def test_a_full_fabric_queue_gets_the_same_reasons_lazily(lab: Fabric) -> None:
    busy = [job(f"busy-{i}", "H100:1", devices=(d,)) for i, d in enumerate(lab.devices)
            if not d.startswith(("t/", "m/"))]  # fmt: skip
    t4 = job("t4s", "T4:4", devices=("t/gpu0", "t/gpu1", "t/gpu2", "t/gpu3"))
    a100 = job("a100s", "A100:2", devices=("m/gpu0", "m/gpu1"))
    queue = [job("q0", "H100:2", t=1), job("q1", "T4:1", t=2), job("q2", "H100:2", t=3),
             job("q3", "B200:1", t=4)]  # fmt: skip
    d = decide(lab, *busy, t4, a100, *queue)
    assert dict(d.waiting) == {
        "q0": "needs 2 x H100-SXM; 0 of 20 free",
        "q1": "needs 1 x T4; 0 of 4 free",
        "q2": "needs 2 x H100-SXM; 0 of 20 free",
        "q3": "can never run here: fabric 'lab' has no B200; models here: A100-SXM4-80GB, "
        "H100-SXM, T4",
    }
    assert len(d.waiting) == 4 and sorted(d.waiting) == ["q0", "q1", "q2", "q3"]
    assert d.waiting == {k: d.waiting[k] for k in d.waiting}
