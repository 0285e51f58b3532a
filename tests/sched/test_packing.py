"""Fragmentation-aware packing (``frag-aware``): hand-built cases and properties."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings

from accelnet.fabric import DomainLevel, Fabric
from accelnet.fabric.build import build_fabric, parse_spec
from accelnet.sched import JobSpec, JobState, JobView, Placement, Scheduler, Snapshot
from accelnet.sched.capacity import CapacityIndex, units
from accelnet.sched.packing import (
    TYPICAL_MIX,
    FragAware,
    Typical,
    free_capacity,
    usable_capacity,
    usable_fraction,
)
from accelnet.sched.placement import PLACEMENTS, BestFit
from accelnet.sched.request import Request, make_request

from .conftest import job
from .test_properties import snapshots

# two PCIe hosts of 8 x L4: no NVLink, so every GPU is its own NVLink domain and best fit,
# which looks at the tightest level only, sees 16 alike 1-GPU domains
PCIE: dict[str, Any] = {
    "name": "pcie",
    "switches": [{"name": "leaf0", "kind": "leaf"}],
    "hosts": [{"name": "p{i}", "count": 2, "devices": "8xL4", "nics": "IB-NDR",
               "network": "leaf0"}],
}  # fmt: skip


@pytest.fixture(scope="module")
def pcie() -> Fabric:
    return build_fabric(parse_spec(PCIE, "<pcie>"))


def running(name: str, model: str, devices: tuple[str, ...], share: float = 1.0) -> JobView:
    """A running job holding ``share`` of each of ``devices``."""
    acc = f"{model}:{share if share < 1 else len(devices)}"
    spec = JobSpec.model_validate({"name": name, "run": "x", "resources": {"accelerators": acc}})
    placement = Placement(devices, share, model, DomainLevel.HOST)
    return JobView(name, spec, JobState.RUNNING, 0.0, started_at=0.0, placement=placement)


def starts(fabric: Fabric, placement: str, *jobs: JobView) -> dict[str, tuple[str, ...]]:
    snap = Snapshot.all_ready(fabric, jobs, now=10.0)
    decision = Scheduler("fifo", placement).decide(snap)
    return {s.job: s.placement.devices for s in decision.starts}


def test_a_single_gpu_goes_to_the_used_host_and_keeps_a_whole_host_for_8(pcie: Fabric) -> None:
    busy = running("busy", "L4", ("p1/gpu0",))
    one = job("one", "L4:1", t=1)
    eight = job("eight", "L4:8", t=2, topology={"required": "host"})
    # every GPU is its own NVLink domain here (all tie at 1 free): best fit weighs the
    # host next, takes a GPU of the partly used host p1, and p0 stays whole for the 8 (it
    # took p0/gpu0 and left the 8-GPU job waiting before); frag-aware does the same
    whole_p0 = tuple(f"p0/gpu{i}" for i in range(8))
    for strategy in ("best-fit", "frag-aware"):
        got = starts(pcie, strategy, busy, one, eight)
        assert got == {"one": ("p1/gpu1",), "eight": whole_p0}, strategy
    # first fit keeps fabric order: the baseline that breaks p0
    assert starts(pcie, "first-fit", busy, one, eight) == {"one": ("p0/gpu0",)}


def test_required_levels_bound_the_candidates(pcie: Fabric) -> None:
    sched = Scheduler("fifo", "frag-aware")
    index = sched.capacity(Snapshot.all_ready(pcie, (running("busy", "L4", ("p1/gpu0",)),)))
    l4 = tuple(sched.topology(pcie).classes.values())
    frag = FragAware()
    # no NVLink domain holds 2 GPUs here, though every host does
    assert frag.place(Request("x", l4, 2, 1.0, DomainLevel.NVLINK, None), index) is None
    got = frag.place(Request("x", l4, 2, 1.0, DomainLevel.HOST, None), index)
    assert got is not None and got.devices == ("p1/gpu1", "p1/gpu2")  # p0 stays whole
    wide = frag.place(Request("x", l4, 12, 1.0, DomainLevel.LEAF, None), index)
    assert wide is not None and len(set(wide.devices)) == 12 and "p1/gpu0" not in wide.devices


def test_a_share_goes_on_a_partly_used_device_not_a_whole_one(lab: Fabric) -> None:
    busy = running("busy", "T4", ("t/gpu2",), share=0.25)  # later in fabric order
    assert starts(lab, "frag-aware", busy, job("half", "T4:0.5")) == {"half": ("t/gpu2",)}
    assert starts(lab, "frag-aware", busy, job("whole", "T4:0.8")) == {"whole": ("t/gpu0",)}


def test_shares_keep_rooms_that_later_shares_can_use(lab: Fabric) -> None:
    # rooms 0.5 (gpu0) and 0.75 (gpu1): best fit puts 0.25 on gpu0 (leaving 0.25 and 0.75,
    # one 0.5 fits); frag-aware puts it on gpu1 (leaving 0.5 and 0.5: both 0.5 jobs fit)
    held = (running("b0", "T4", ("t/gpu0",), 0.5), running("b1", "T4", ("t/gpu1",), 0.25))
    queue = (job("q", "T4:0.25", t=1), job("h1", "T4:0.5", t=2), job("h2", "T4:0.5", t=3))
    best = starts(lab, "best-fit", *held, *queue)
    assert best == {"q": ("t/gpu0",), "h1": ("t/gpu1",), "h2": ("t/gpu2",)}
    frag = starts(lab, "frag-aware", *held, *queue)
    assert frag == {"q": ("t/gpu1",), "h1": ("t/gpu0",), "h2": ("t/gpu1",)}


def test_registered_and_configurable(lab: Fabric) -> None:
    assert "frag-aware" in PLACEMENTS
    made = PLACEMENTS.create("frag-aware", mix=[(1, 0.5, 1.0)], max_candidates=2)
    assert isinstance(made, FragAware)
    assert made.mix == (Typical(1, 0.5, 1.0),) and made.max_candidates == 2
    d = Scheduler("fifo", "frag-aware").decide(
        Snapshot.all_ready(lab, (job("a", "H100:3"), job("b", "T4:0.5")))
    )
    assert {s.job for s in d.starts} == {"a", "b"} and not d.waiting
    for bad in ([], [(2, 0.5, 1.0)], [(1, 0.0, 1.0)], [(1, 1.0, 0.0)], [(0, 1.0, 1.0)]):
        with pytest.raises(ValueError, match="typical job"):
            FragAware(bad)
    with pytest.raises(ValueError, match="max_candidates"):
        FragAware(max_candidates=0)


def test_usable_fraction_of_an_empty_and_a_full_fabric(pcie: Fabric) -> None:
    sched = Scheduler("fifo", "frag-aware")
    empty = sched.capacity(Snapshot.all_ready(pcie))
    # 16 free GPUs in 2 hosts: every shape can use all of it
    assert usable_fraction(empty) == pytest.approx(1.0)
    assert free_capacity(empty) == 16.0
    held = running("all", "L4", tuple(pcie.devices))
    assert usable_fraction(sched.capacity(Snapshot.all_ready(pcie, (held,)))) == 0.0
    one_each = running("x", "L4", ("p0/gpu0", "p1/gpu0"))
    half = sched.capacity(Snapshot.all_ready(pcie, (one_each,)))
    # 7 + 7 free: 8-GPU jobs can use none of it, 4-GPU jobs 8 of 14, pairs 12, the rest all
    weights = sum(t.weight for t in TYPICAL_MIX)
    expect = (0.30 + 0.20 + 0.25 + 0.10 * 12 / 14 + 0.10 * 8 / 14) / weights
    assert usable_fraction(half) == pytest.approx(expect)


def _after(index: CapacityIndex, p: Placement, cls: str) -> float:
    """Usable capacity of ``cls`` once ``p`` is taken (a what-if, rolled back)."""
    mark = index.mark()
    index.take_all(p.devices, p.share)
    try:
        return usable_capacity(index, cls)
    finally:
        index.rollback(mark)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(snap=snapshots())
def test_frag_aware_keeps_every_invariant_and_places_when_best_fit_does(snap: Snapshot) -> None:
    sched = Scheduler("fifo", "frag-aware")
    topo = sched.topology(snap.fabric)
    index = sched.capacity(snap)
    free_before = dict(index.free)
    frag, best = FragAware(), BestFit()
    for j in snap.jobs:
        if j.state is not JobState.ADMITTED:
            continue
        req: Request = make_request(j.id, j.spec, topo)
        got, ref = frag.place(req, index), best.place(req, index)
        assert index.free == free_before  # place() never changes the index
        assert (got is None) == (ref is None), (req, got, ref)
        if got is None or ref is None:
            continue
        want = 1 if req.share < 1 else req.count
        assert len(got.devices) == len(set(got.devices)) == want
        assert got.share == req.share and got.model == ref.model
        for d in got.devices:
            assert index.free.get(d, 0) >= units(req.share)  # free and schedulable
            assert topo.class_of[d] in req.classes
            assert topo.class_of[d].model.name == got.model
        if req.required is not None:
            assert len({topo.domain_of[req.required][d] for d in got.devices}) == 1
        assert len({topo.domain_of[got.span][d] for d in got.devices}) == 1
        # the local gain is the change a full recount sees, and never worse than best fit's
        cls = topo.class_of[got.devices[0]].key
        before = usable_capacity(index, cls)
        gain = frag.gain(index, cls, got.devices, got.share)
        assert gain == pytest.approx(_after(index, got, cls) - before, abs=1e-9)
        assert _after(index, got, cls) >= _after(index, ref, cls) - 1e-9
    assert 0.0 <= usable_fraction(index) <= 1.0 + 1e-9
    # whole decisions: no device over-committed, gangs whole, required level kept
    decision = sched.decide(snap)
    used = {d: 1 - index.free.get(d, 0) / 100 for d in topo.class_of}
    jobs = {j.id: j for j in snap.jobs}
    for s in decision.starts:
        acc = jobs[s.job].spec.resources.accelerators
        assert len(s.placement.devices) == acc.count and s.placement.share == acc.share
        for d in s.placement.devices:
            used[d] += s.placement.share
        required = jobs[s.job].spec.topology.required
        if required is not None:
            assert len({topo.domain_of[required.domain][d] for d in s.placement.devices}) == 1
    assert all(v <= 1 + 1e-9 for v in used.values())
    assert sched.decide(snap) == decision
