"""CPU cores and host memory beside accelerators, cross-model fit, and best fit's host
tie-break (issue: real cluster requests)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from accelnet.fabric import Fabric
from accelnet.fabric.build import build_fabric, parse_spec
from accelnet.sched import JobSpec, JobState, JobView, Scheduler, Snapshot, Tenant
from accelnet.sched.capacity import SHARE_UNITS
from accelnet.sched.placement import PLACEMENTS
from accelnet.sched.reasons import WaitCode, code_of
from accelnet.sched.request import make_request, rejection
from accelnet.sched.session import Session

from .conftest import job


def fabric(*hosts: dict[str, Any]) -> Fabric:
    spec = {
        "name": "f",
        "switches": [{"name": "leaf", "kind": "leaf"}],
        "hosts": [{"nics": "IB-EDR", "network": "leaf", **h} for h in hosts],
    }
    return build_fabric(parse_spec(spec, "<f>"))


def decide(fab: Fabric, *jobs: JobView, placement: str = "best-fit", tenants: Any = None) -> Any:
    snap = Snapshot.all_ready(fab, jobs, now=10.0, tenants=tenants)
    return Scheduler("fifo", placement).decide(snap)


def started(decision: Any) -> dict[str, Any]:
    return {s.job: s.placement for s in decision.starts}


# ----- item 1: CPU and memory requests, host capacity, CPU-only jobs ---------------------
def test_a_host_without_free_cores_takes_no_gpu_job_though_its_gpus_are_free() -> None:
    fab = fabric(
        {"name": "a", "devices": "4xT4", "cpus": 8, "memory_gb": 64},
        {"name": "b", "devices": "4xT4", "cpus": 32, "memory_gb": 256},
    )
    cpu_hog = job("hog", None, resources={"cpus": 8})  # a CPU-only job: all of a's cores
    d = decide(fab, cpu_hog)
    hog = started(d)["hog"]
    assert hog.devices == () and hog.hosts == (("a", 8.0, 0.0),)  # best fit on cores
    running = JobView("hog", cpu_hog.spec, JobState.RUNNING, 0.0, 0.0, placement=hog)
    gpu = job("gpu", "T4:2", t=1, resources={"accelerators": "T4:2", "cpus": 4})
    d = decide(fab, running, gpu)
    placed = started(d)["gpu"]
    assert {dev.split("/")[0] for dev in placed.devices} == {"b"}  # a has free GPUs, no cores
    assert placed.hosts == (("b", 8.0, 0.0),)  # 4 cores per rank, 2 ranks
    # one more CPU-only job needing 30 cores fits nowhere now, and says why
    big = job("big", None, t=2, resources={"cpus": 30})
    running_gpu = JobView("gpu", gpu.spec, JobState.RUNNING, 0.0, 0.0, placement=placed)
    d = decide(fab, running, running_gpu, big)
    assert "big" not in started(d)
    assert "needs 30 CPUs on one host" in d.waiting["big"]
    assert "24 CPUs" in d.waiting["big"]  # the most free: b's 32 less the 8 held


def test_per_host_launch_counts_cpus_once_per_host_and_memory_too() -> None:
    fab = fabric({"name": "a", "devices": "8xT4", "cpus": 16, "memory_gb": 100})
    per_device = job("pd", "T4:4", resources={"accelerators": "T4:4", "cpus": 5})
    d = decide(fab, per_device)
    assert "pd" not in started(d) and "needs 5 CPUs per rank" in d.waiting["pd"]
    per_host = job("ph", "T4:4", launch="per-host", resources={"accelerators": "T4:4", "cpus": 5})
    assert started(decide(fab, per_host))["ph"].hosts == (("a", 5.0, 0.0),)
    mem = job("mem", "T4:2", resources={"accelerators": "T4:2", "memory_gb": 60})
    assert "mem" not in started(decide(fab, mem))  # 2 ranks x 60 GB > 100 GB


def test_every_strategy_honours_host_room() -> None:
    fab = fabric(
        {"name": "a", "devices": "4xT4", "cpus": 2},
        {"name": "b", "devices": "2xT4", "cpus": 64},
    )
    gang = job("g", "T4:2", resources={"accelerators": "T4:2", "cpus": 2})
    share = job("s", "T4:0.5", t=1, resources={"accelerators": "T4:0.5", "cpus": 3})
    for strategy in ("best-fit", "first-fit", "frag-aware", "comm-aware"):
        d = decide(fab, gang, share, placement=strategy)
        got = started(d)
        assert {x.split("/")[0] for x in got["g"].devices} == {"b"}, strategy
        # the share needs 3 cores: only b has them, and b's GPUs are all the gang's now
        assert "s" not in got, strategy


def test_undeclared_hosts_are_not_limited_and_old_jobs_are_unchanged(lab: Fabric) -> None:
    hungry = job("h", "H100:8", resources={"accelerators": "H100:8", "cpus": 4000})
    d = decide(lab, hungry)
    assert started(d)["h"].hosts == (("a", 32000.0, 0.0),)  # recorded, not limited
    plain = decide(lab, job("p", "H100:1"))
    assert started(plain)["p"].hosts == ()


def test_cpu_only_spec_forms_and_errors() -> None:
    spec = JobSpec.model_validate({"name": "c", "run": "x", "resources": {"cpus": 2}})
    assert spec.resources.cpu_only and spec.resources.accelerators.describe() == "no accelerator"
    none = JobSpec.model_validate(
        {"name": "c", "run": "x", "resources": {"accelerators": "none", "memory_gb": 4}}
    )
    assert none.resources.cpu_only
    # leaving everything out still asks for one device of any model
    assert not JobSpec.model_validate({"name": "c", "run": "x"}).resources.cpu_only
    for bad, words in (
        ({"accelerators": "none"}, "give cpus or memory_gb"),
        ({"cpus": 0}, "greater than 0"),
        ({"cpus": 0.005}, "steps of 0.01"),
        ({"cpus": 1, "kind": "gpu"}, "kind describes an accelerator"),
        ({"memory_gb": -1}, "greater than 0"),
    ):
        with pytest.raises(ValidationError, match=words):
            JobSpec.model_validate({"name": "c", "run": "x", "resources": bad})


def test_a_rank_bigger_than_every_host_can_never_run() -> None:
    fab = fabric({"name": "a", "devices": "2xT4", "cpus": 16, "memory_gb": 64})
    topo = Scheduler().topology(fab)
    spec = JobSpec.model_validate({"name": "c", "run": "x", "resources": {"cpus": 17}})
    never = rejection(spec, topo)
    assert never is not None and never.key == "resources.cpus" and never.value == 17
    assert "largest host has 16" in never.message
    mem = JobSpec.model_validate(
        {"name": "c", "run": "x", "resources": {"accelerators": "T4:1", "memory_gb": 65}}
    )
    never = rejection(mem, topo)
    assert never is not None and never.key == "resources.memory_gb"


def test_quotas_over_cpus_and_memory() -> None:
    fab = fabric({"name": "a", "devices": "4xT4", "cpus": 64, "memory_gb": 512})
    tenants = {"v": Tenant("v", quota={"cpus": 10, "memory_gb": 100})}
    first = job("one", None, tenant="v", resources={"cpus": 6, "memory_gb": 10})
    d = decide(fab, first, tenants=tenants)
    running = JobView("one", first.spec, JobState.RUNNING, 0.0, 0.0, placement=started(d)["one"])
    more = job("two", None, t=1, tenant="v", resources={"cpus": 6})
    d = decide(fab, running, more, tenants=tenants)
    assert d.waiting["two"] == "tenant v quota is 10 CPU cores; 6 in use, needs 6 more"
    gpu = job("gpu", "T4:2", t=1, tenant="v", resources={"accelerators": "T4:2", "memory_gb": 50})
    d = decide(fab, running, gpu, tenants=tenants)
    assert "quota is 100 GB of host memory; 10 in use, needs 100 more" in d.waiting["gpu"]


def test_the_session_tracks_host_room_as_jobs_come_and_go() -> None:
    fab = fabric({"name": "a", "devices": "2xT4", "cpus": 8})
    sched = Scheduler()
    states = Snapshot.all_ready(fab).devices
    session = Session(sched, fab, states)
    one = job("one", None, resources={"cpus": 6})
    session.put(one)
    d = session.decide(10.0)
    assert d == sched.decide(session.snapshot(10.0))
    p = started(d)["one"]
    session.put(JobView("one", one.spec, JobState.RUNNING, 0.0, 10.0, placement=p))
    two = job("two", None, t=1, resources={"cpus": 6})
    session.put(two)
    d = session.decide(11.0)
    assert "two" not in started(d) and d == sched.decide(session.snapshot(11.0))
    session.drop("one")
    assert started(session.decide(12.0))["two"].hosts == (("a", 6.0, 0.0),)


# ----- item 2: cross-model placement -------------------------------------------------------
def test_any_fills_a_half_used_t4_instead_of_breaking_a_whole_v100() -> None:
    fab = fabric({"name": "a", "devices": "1xV100"}, {"name": "b", "devices": "1xT4"})
    jobs = (
        job("t4", "T4:0.5", t=0),
        job("any", "any:0.5", t=1),
        job("v100", "V100:1", t=2),
    )
    got = started(decide(fab, *jobs))
    assert got["any"].devices == ("b/gpu0",)  # the free half of the T4
    assert got["v100"].devices == ("a/gpu0",)  # and the V100 stays whole for this job
    fastest = job("any", {"count": 1, "share": 0.5, "prefer": "speed"}, t=1)
    old = started(decide(fab, jobs[0], fastest, jobs[2]))
    assert old["any"].devices == ("a/gpu0",) and "v100" not in old  # the old rule


def test_any_of_as_an_ordered_preference_or_an_unordered_set() -> None:
    fab = fabric(
        {"name": "v", "devices": "4xV100", "nvlink": "nvswitch"},
        {"name": "t", "devices": "2xT4"},
    )
    busy = JobView(
        "busy",
        job("busy", "V100:3").spec,
        JobState.RUNNING,
        0.0,
        0.0,
        placement=make_placement(fab, ("v/gpu0", "v/gpu1", "v/gpu2"), "V100"),
    )
    ordered = job("o", {"any_of": ["T4", "V100"], "count": 1, "prefer": "order"}, t=1)
    assert started(decide(fab, busy, ordered))["o"].model == "T4"  # first listed with room
    fit = job("f", {"any_of": ["T4", "V100"], "count": 1}, t=1)
    assert started(decide(fab, busy, fit))["f"].devices == ("v/gpu3",)  # fills the V100 host


def make_placement(fab: Fabric, devices: tuple[str, ...], model: str) -> Any:
    from accelnet.fabric import DomainLevel
    from accelnet.sched import Placement

    return Placement(devices, 1.0, model, DomainLevel.HOST)


def test_per_model_counts() -> None:
    fab = fabric({"name": "v", "devices": "2xV100"}, {"name": "t", "devices": "4xT4"})
    j = job("c", {"V100": 4, "T4": 4})
    got = started(decide(fab, j))["c"]
    assert got.model == "T4" and len(got.devices) == 4  # 4 V100 do not exist here
    j2 = job("c2", {"V100": 2, "T4": 4})
    got2 = started(decide(fab, j2))["c2"]
    assert got2.model == "V100" and len(got2.devices) == 2  # the tighter fit (2 of 2)
    never = job("c3", {"V100": 8, "T4": 8})
    d = decide(fab, never)
    assert d.waiting["c3"].startswith("can never run here")


# ----- item 3: best fit weighs host fullness -------------------------------------------------
def test_best_fit_puts_one_t4_on_the_fuller_host_so_a_host_stays_whole() -> None:
    fab = fabric({"name": "n0", "devices": "4xT4"}, {"name": "n1", "devices": "2xT4"})
    one = job("one", "T4:1", t=0)
    four = job("four", "T4:4", t=1, topology={"required": "host"})
    got = started(decide(fab, one, four))
    assert got["one"].devices == ("n1/gpu0",)
    assert got["four"].devices == tuple(f"n0/gpu{i}" for i in range(4))


# ----- properties: no host's CPU, memory or device share is ever over-committed --------------
HOSTS = [
    {"name": "a", "devices": "4xT4", "cpus": 8, "memory_gb": 64},
    {"name": "b", "devices": "2xV100", "cpus": 4, "memory_gb": 32},
    {"name": "c", "devices": "8xT4", "cpus": 48},
    {"name": "d", "devices": "1xT4", "memory_gb": 16},
    {"name": "e", "devices": "2xV100"},
]
FAB = fabric(*HOSTS)
REQUESTS = [
    {"accelerators": "T4:1", "cpus": 2},
    {"accelerators": "T4:0.5", "cpus": 1, "memory_gb": 4},
    {"accelerators": "any:2", "cpus": 3},
    {"accelerators": "V100:2", "memory_gb": 12},
    {"accelerators": "any:0.25", "memory_gb": 8},
    {"cpus": 3},
    {"cpus": 1.5, "memory_gb": 10},
    {"memory_gb": 20},
    {"accelerators": "T4:4", "cpus": 1},
    {"accelerators": "any:1"},
]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    picks=st.lists(st.sampled_from(range(len(REQUESTS))), min_size=1, max_size=30),
    strategy=st.sampled_from(["best-fit", "first-fit", "frag-aware", "comm-aware"]),
    per_host=st.lists(st.booleans(), min_size=30, max_size=30),
)
def test_no_host_cpu_memory_or_device_share_is_ever_over_committed(
    picks: list[int], strategy: str, per_host: list[bool]
) -> None:
    sched = Scheduler("fifo", strategy)
    running: list[JobView] = []
    for i, pick in enumerate(picks):
        launch = "per-host" if per_host[i] else "per-device"
        j = job(f"j{i}", None, t=float(i), launch=launch, resources=REQUESTS[pick])
        d = sched.decide(Snapshot.all_ready(FAB, (*running, j), now=float(i)))
        for s in d.starts:
            running.append(
                JobView(s.job, j.spec, JobState.RUNNING, 0.0, float(i), placement=s.placement)
            )
    cpu: dict[str, float] = {}
    mem: dict[str, float] = {}
    share: dict[str, int] = {}
    for r in running:
        p = r.placement
        assert p is not None
        for dev in p.devices:
            share[dev] = share.get(dev, 0) + round(p.share * SHARE_UNITS)
        for host, cpus, gb in p.hosts:
            cpu[host] = cpu.get(host, 0.0) + cpus
            mem[host] = mem.get(host, 0.0) + gb
        want = make_request(r.id, r.spec, sched.topology(FAB))
        if want.cpu_only:
            assert p.devices == () and len(p.hosts) == 1
    assert all(v <= SHARE_UNITS for v in share.values()), share
    for h in HOSTS:
        if "cpus" in h:
            assert cpu.get(h["name"], 0.0) <= h["cpus"] + 1e-9, (h, cpu)
        if "memory_gb" in h:
            assert mem.get(h["name"], 0.0) <= h["memory_gb"] + 1e-9, (h, mem)


def test_placement_strategies_are_registered() -> None:
    assert {"best-fit", "first-fit", "frag-aware", "comm-aware"} <= set(PLACEMENTS)


def test_a_job_short_of_cores_preempts_a_lower_priority_job_holding_them() -> None:
    fab = fabric({"name": "a", "devices": "2xT4", "cpus": 8})
    low = job("low", None, priority=0, resources={"cpus": 6})
    d = decide(fab, low)
    running = JobView("low", low.spec, JobState.RUNNING, 0.0, 0.0, placement=started(d)["low"])
    high = job("high", None, t=1, priority=5, resources={"cpus": 4})
    gpu = job("gpu", "T4:1", t=1, priority=5, resources={"accelerators": "T4:1", "cpus": 4})
    for asker in (high, gpu):  # a CPU-only job, and a GPU job whose GPU is free
        snap = Snapshot.all_ready(fab, (running, asker), now=10.0)
        d = Scheduler("priority", "best-fit", "priority").decide(snap)
        assert [p.job for p in d.preemptions] == ["low"], asker.id
        assert "preempting" in d.waiting[asker.id]


def test_per_model_counts_meet_quotas_and_round_policies_with_their_own_count() -> None:
    fab = fabric({"name": "t", "devices": "8xT4", "cpus": 64}, {"name": "a", "devices": "1xA100"})
    tenants = {"v": Tenant("v", quota={"cpus": 10, "*": 3})}
    j = job("c", {"T4": 8, "A100": 2}, tenant="v", resources={
        "accelerators": {"T4": 8, "A100": 2}, "cpus": 2})  # fmt: skip
    d = decide(fab, j, tenants=tenants)
    assert "c" not in started(d)  # 8 T4 x 2 cores = 16 > 10; 2 A100 do not exist
    assert d.waiting["c"].endswith("over quota: 8 x T4")  # it used to start on 8 T4
    alone = job("c2", {"T4": 8}, tenant="v", resources={"accelerators": "T4:8", "cpus": 2})
    d = decide(fab, alone, tenants=tenants)
    assert d.waiting["c2"] == "tenant v quota is 10 CPU cores; 0 in use, needs 16 more"
    # a round policy narrows to one model per round: the count goes with its model
    from accelnet.sched.policies import make_scheduler

    small = job("s", {"T4": 4, "A100": 1})
    for policy in ("las", "drf"):
        got = make_scheduler(policy).decide(Snapshot.all_ready(fab, (small,), now=10.0))
        (start,) = got.starts
        want = 4 if start.placement.model == "T4" else 1
        assert len(start.placement.devices) == want, (policy, start.placement)


def test_counts_naming_any_or_a_model_twice_are_refused() -> None:
    for bad, words in (
        ({"any": 2}, "'any' has no count"),
        ({"any_of": ["T4", "t4"], "counts": [1, 2]}, "twice"),
    ):
        with pytest.raises(ValidationError, match=words):
            JobSpec.model_validate({"name": "c", "run": "x", "resources": {"accelerators": bad}})


def test_devices_kept_visible_on_a_short_host_are_chosen_by_its_nvlink_domains() -> None:
    # four pair hosts with 1 core each (no room for 2 ranks of 2 cores) push the search to
    # hide every short host at once; h has room for 2 ranks: the 2 kept must be a pair
    hosts = [{"name": f"x{i}", "devices": "2xH100-NVL", "nvlink": "pairs", "cpus": 1}
             for i in range(4)]  # fmt: skip
    fab = fabric(*hosts, {"name": "h", "devices": "4xH100-NVL", "nvlink": "pairs", "cpus": 4})
    busy = JobView("busy", job("busy", "H100-NVL:1").spec, JobState.RUNNING, 0.0, 0.0,
                   placement=make_placement(fab, ("h/gpu0",), "H100-NVL"))  # fmt: skip
    for topology in ({"required": "nvlink"}, {}):
        j = job("j", "H100-NVL:2", t=1, topology=topology,
                resources={"accelerators": "H100-NVL:2", "cpus": 2})  # fmt: skip
        got = started(decide(fab, busy, j)).get("j")
        assert got is not None and got.devices == ("h/gpu2", "h/gpu3"), (topology, got)


def test_a_job_that_preempted_for_cores_waits_for_them_and_preempts_no_more() -> None:
    fab = fabric({"name": "a", "devices": "2xT4", "cpus": 8})
    lows = [job(f"low{i}", None, t=i, priority=0, resources={"cpus": 3}) for i in range(2)]
    placed = started(decide(fab, *lows))
    run = [JobView(j.id, j.spec, JobState.RUNNING, 0.0, 0.0, placement=placed[j.id]) for j in lows]
    for asker in (
        job("high", None, t=5, priority=5, resources={"cpus": 4}),
        job("gpu", "T4:1", t=5, priority=5, resources={"accelerators": "T4:1", "cpus": 4}),
    ):
        sched = Scheduler("priority", "best-fit", "priority")
        first = sched.decide(Snapshot.all_ready(fab, (*run, asker), now=10.0))
        (victim,) = [p.job for p in first.preemptions]
        nominated = first.nominations[asker.id]
        assert "@a=400=0" in nominated  # the 4 cores it preempted for are held for it
        stopping = [
            JobView(v.id, v.spec, JobState.PREEMPTING if v.id == victim else v.state, 0.0, 0.0,
                    placement=v.placement)
            for v in run
        ]  # fmt: skip
        waiting = JobView(asker.id, asker.spec, JobState.ADMITTED, 5.0, nominated=nominated)
        second = sched.decide(Snapshot.all_ready(fab, (*stopping, waiting), now=20.0))
        assert second.preemptions == ()  # it preempted another before: a cascade
        assert "waiting for preempted jobs to release the host room" in second.waiting[asker.id]
        # once the victim is gone the cores are its own: an earlier, lower job cannot take them
        rest = [v for v in run if v.id != victim]
        other = job("other", None, t=0.5, priority=5, resources={"cpus": 4})
        third = sched.decide(Snapshot.all_ready(fab, (*rest, other, waiting), now=30.0))
        assert [s.job for s in third.starts] == [asker.id]


@pytest.mark.parametrize(
    "config",
    [{"ordering": "fifo"}, {"ordering": "priority"}, {"ordering": "fifo", "reserve_after_s": 60.0}],
)
def test_a_cpu_only_job_starts_on_free_cores_while_every_device_is_busy(
    config: dict[str, Any],
) -> None:
    """No device is free, but a host has free cores: the CPU-only jobs behind the GPU jobs
    in the queue start (a walk that stopped at the first job needing a device left them
    waiting with "needs 1 CPU on one host; the most free on a host: 4 CPUs"), in the
    queue's order and within the host's cores; the GPU jobs wait for devices."""
    fab = fabric({"name": "a", "devices": "1xL4", "cpus": 4, "memory_gb": 16})
    gpu = job("gpu", "L4:1")
    placed = started(decide(fab, gpu))["gpu"]
    running = JobView("gpu", gpu.spec, JobState.RUNNING, 0.0, 0.0, placement=placed)
    queued = [
        job("d1", "L4:1", t=1),
        job("c1", None, t=2, resources={"cpus": 1}),
        job("d2", "L4:1", t=3),
        job("c2", None, t=4, resources={"cpus": 2}),
        job("c3", None, t=5, resources={"cpus": 2}),  # 1 core left after c1 and c2
    ]
    session = Session(Scheduler(**config), fab, Snapshot.all_ready(fab, ()).devices)
    for v in (running, *queued):
        session.put(v)
    got = session.decide(10.0)
    full = Scheduler(**config).decide(Snapshot.all_ready(fab, (running, *queued), now=10.0))
    for d in (got, full):
        assert [s.job for s in d.starts] == ["c1", "c2"]
        assert [s.placement.hosts for s in d.starts] == [(("a", 1.0, 0.0),), (("a", 2.0, 0.0),)]
        assert sorted(d.waiting) == ["c3", "d1", "d2"] and len(d.waiting) == 3
        assert d.waiting["d1"].startswith("needs 1 x L4; 0 of 1 free")
        assert "the most free on a host: 1 CPU" in d.waiting["c3"]
    assert list(got.waiting) == list(full.waiting)


def test_a_reason_behind_a_full_fabric_reads_the_use_where_the_walk_stopped() -> None:
    """A CPU-only job behind a GPU job in the queue starts on free cores while no device is
    free; the GPU job's reason, written when read, counts the tenant's use where the walk
    reached it (no device free), not the cores the job behind it took: its tenant is not
    over quota for it (a walk that never stops says the same)."""
    fab = fabric({"name": "a", "devices": "1xL4", "cpus": 8})
    tenants = {"a": Tenant("a", quota={"cpus": 3}), "c": Tenant("c")}
    gpu = job("gpu", "L4:1", tenant="c")
    snap = Snapshot.all_ready(fab, (gpu,), now=0.0, tenants=tenants)
    placed = Scheduler().decide(snap).starts[0].placement
    running = JobView("gpu", gpu.spec, JobState.RUNNING, 0.0, 0.0, placement=placed)
    d1 = job("d1", "L4:1", t=1, tenant="a", resources={"accelerators": "L4:1", "cpus": 2})
    c1 = job("c1", None, t=2, tenant="a", resources={"cpus": 2})
    session = Session(Scheduler(), fab, Snapshot.all_ready(fab, ()).devices, tenants)
    for v in (running, d1, c1):
        session.put(v)
    full = Scheduler().decide(Snapshot.all_ready(fab, (running, d1, c1), now=10.0, tenants=tenants))
    for d in (session.decide(10.0), full):
        assert [s.job for s in d.starts] == ["c1"]
        assert code_of(d.waiting["d1"]) is WaitCode.NO_CAPACITY, d.waiting["d1"]
        assert d.waiting["d1"].startswith("needs 1 x L4 with 2 CPUs per rank; 0 of 1 free")
