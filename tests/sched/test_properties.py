"""Properties of every decision on random fabrics, loads and queues (hypothesis)."""

from __future__ import annotations

from collections import defaultdict

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from accelnet.devices import DeviceState
from accelnet.fabric import DomainLevel, Fabric, load_preset
from accelnet.fabric.build import build_fabric, parse_spec
from accelnet.sched import JobSpec, JobState, JobView, Scheduler, Snapshot
from accelnet.sched.request import eligible_classes
from accelnet.sched.topology import Topology

HYBRID = {
    "name": "hybrid",
    "switches": [{"name": n, "kind": k} for n, k in
                 (("nv", "nvswitch"), ("leafA", "leaf"), ("leafB", "leaf"), ("sp", "spine"))],
    "hosts": [
        {"name": "tray{i}", "count": 4, "devices": "4xB200", "nics": "IB-NDR",
         "network": "leafA"},
        {"name": "trayb{i}", "count": 2, "devices": "4xB200", "nics": "IB-NDR",
         "network": "leafB"},
        {"name": "l4box", "devices": "4xL4", "sockets": 2, "nics": "IB-HDR", "network": "leafA"},
        {"name": "mix", "devices": ["2xH100-SXM", "2xT4"], "nvlink": "nvswitch",
         "nics": "IB-NDR", "network": "leafB"},
    ],
    "links": [
        *({"a": f"tray{t}/gpu{g}", "b": "nv", "type": "NVLink5", "count": 18}
          for t in range(4) for g in range(4)),
        *({"a": f"trayb{t}/gpu{g}", "b": "nv", "type": "NVLink5", "count": 18}
          for t in range(2) for g in range(4)),
        {"a": "leafA", "b": "sp", "type": "IB-NDR"}, {"a": "leafB", "b": "sp", "type": "IB-NDR"},
    ],
}  # fmt: skip
FABRICS = {
    "hybrid": build_fabric(parse_spec(HYBRID, "<hybrid>")),
    "mixed-lab": load_preset("mixed-lab"),
    "fat": load_preset("fat-tree:hosts=12,gpus_per_host=4,hosts_per_leaf=3,leaves_per_pod=2"),
    "nvl72": load_preset("nvl72"),
}
ACCELERATORS = ["H100:1", "H100:2", "H100:4", "H100:8", "any:1", "any:3", "T4:0.25",
                "T4:0.5", "H100:0.5", "L4:2", "B200:4", "B200:12", "any:0.75"]  # fmt: skip
TOPOLOGY = [None, "nvlink", "host", "leaf", "any"]


@st.composite
def snapshots(draw: st.DrawFn) -> Snapshot:
    fabric: Fabric = FABRICS[draw(st.sampled_from(sorted(FABRICS)))]
    states = {
        d: draw(st.sampled_from([DeviceState.READY] * 6 + [DeviceState.DRAINING,
                                                           DeviceState.UNHEALTHY]))
        for d in fabric.devices
    }  # fmt: skip
    jobs: list[JobView] = []
    # running jobs, placed by the scheduler itself so that the load is consistent
    warm = []
    for i in range(draw(st.integers(0, 12))):
        warm.append(_job(f"r{i}", draw(st.sampled_from(ACCELERATORS)), None, i, 0))
    snap = Snapshot(fabric, 0.0, states, tuple(warm))
    for s in Scheduler().decide(snap).starts:
        v = next(j for j in warm if j.id == s.job)
        jobs.append(JobView(v.id, v.spec, JobState.RUNNING, 0.0, started_at=1.0,
                            placement=s.placement))  # fmt: skip
    for i in range(draw(st.integers(1, 25))):
        acc = draw(st.sampled_from(ACCELERATORS))
        topo = draw(st.sampled_from(TOPOLOGY))
        prio = draw(st.integers(0, 3))
        jobs.append(_job(f"q{i}", acc, topo, 10 + i, prio, draw(st.booleans())))
    return Snapshot(fabric, 100.0, states, tuple(jobs))


def _job(name: str, acc: str, topo: str | None, t: float, prio: int, ckpt: bool = False) -> JobView:
    spec = {"name": name, "run": "x", "priority": prio, "checkpointable": ckpt,
            "resources": {"accelerators": acc}}  # fmt: skip
    if topo:
        spec["topology"] = {"required": topo}
    return JobView(name, JobSpec.model_validate(spec), JobState.ADMITTED, t)


SCHEDULERS = [
    Scheduler("fifo"),
    Scheduler("priority", "best-fit", "priority"),
    Scheduler("fifo", "first-fit"),
]


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(snap=snapshots(), which=st.integers(0, len(SCHEDULERS) - 1))
def test_decisions_keep_every_invariant(snap: Snapshot, which: int) -> None:
    sched = SCHEDULERS[which]
    decision = sched.decide(snap)
    topo = Topology(snap.fabric)
    jobs = {j.id: j for j in snap.jobs}
    # never over-allocated: running shares + new shares <= 1 on every device
    used: dict[str, float] = defaultdict(float)
    for j in snap.jobs:
        if j.state.holds_devices() and j.placement:
            for d in j.placement.devices:
                used[d] += j.placement.share
    for s in decision.starts:
        job = jobs[s.job]
        assert job.state is JobState.ADMITTED
        p = s.placement
        acc = job.spec.resources.accelerators
        # gang: all devices or none, distinct, the right share
        assert len(p.devices) == acc.count == len(set(p.devices))
        assert p.share == acc.share
        for d in p.devices:
            assert snap.devices.get(d) in (DeviceState.READY, DeviceState.ALLOCATED)
            used[d] += p.share
            dev = snap.fabric.devices[d]
            assert dev.model.name == p.model
            assert topo.class_of[d] in eligible_classes(job.spec, topo)
        # required topology is never violated
        req = job.spec.topology.required
        if req is not None:
            domains = snap.fabric.domains.map(req.domain)
            keys = {domains[d] for d in p.devices}
            assert len(keys) == 1, (s.job, req, p.devices)
        # the span is honest: one fabric domain at that level holds the gang
        assert len({snap.fabric.domains.map(p.span)[d] for d in p.devices}) == 1
    assert all(v <= 1.0 + 1e-9 for v in used.values()), used
    # every queued job not started has a reason; no job both starts and waits
    queued = {j.id for j in snap.jobs if j.state is JobState.ADMITTED}
    started = {s.job for s in decision.starts}
    assert queued - started == set(decision.waiting) - {
        j.id for j in snap.jobs if j.state is JobState.PENDING
    }
    assert all(decision.waiting[j] for j in queued - started)
    # victims are running jobs of lower priority than the job they make way for
    for p in decision.preemptions:
        assert jobs[p.job].state is JobState.RUNNING
        assert jobs[p.job].priority < jobs[p.for_job].priority
        assert p.for_job in decision.waiting
    # devices nominated for a preempting whole-device job are not given to anyone else
    nominated = {
        d
        for j, devs in decision.nominations.items()
        if jobs[j].spec.resources.accelerators.share == 1
        for d in devs
    }
    assert not nominated & {d for s in decision.starts for d in s.placement.devices}
    assert set(decision.nominations) <= {p.for_job for p in decision.preemptions}
    # deterministic
    assert sched.decide(snap) == decision


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(snap=snapshots())
def test_an_idle_device_is_never_left_while_a_single_device_job_waits(snap: Snapshot) -> None:
    decision = Scheduler().decide(snap)
    waiting_single = [
        j for j in snap.jobs
        if j.id in decision.waiting and j.spec.resources.accelerators.count == 1
        and j.spec.resources.accelerators.share == 1.0 and j.spec.topology.required is None
    ]  # fmt: skip
    if not waiting_single:
        return
    topo = Topology(snap.fabric)
    busy = {d for j in snap.jobs if j.placement for d in j.placement.devices}
    busy |= {d for s in decision.starts for d in s.placement.devices}
    for j in waiting_single:
        for cls in eligible_classes(j.spec, topo):
            idle = [d for d, c in topo.class_of.items() if c is cls and d not in busy
                    and snap.devices[d] is DeviceState.READY]  # fmt: skip
            assert not idle, (j.id, decision.waiting[j.id], idle[:3])


def test_span_levels_are_ordered() -> None:
    assert [lv.value for lv in DomainLevel] == ["nvlink", "host", "leaf", "pod", "fabric"]
