"""Fragmentation gradient descent (``fgd``): hand-built cases and properties."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from accelnet.fabric import DomainLevel, Fabric
from accelnet.fabric.build import build_fabric, parse_spec
from accelnet.sched import JobState, JobView, Placement, Scheduler, Snapshot
from accelnet.sched.capacity import SHARE_UNITS, CapacityIndex, units
from accelnet.sched.fgd import FGD, HostTables, shape_of
from accelnet.sched.hostfit import host_use
from accelnet.sched.placement import PLACEMENTS, BestFit
from accelnet.sched.request import Request
from accelnet.sched.spec import Prefer
from accelnet.sched.topology import Topology, cpu_units, memory_units

from .conftest import job


def fabric(*hosts: dict[str, Any]) -> Fabric:
    spec = {
        "name": "f",
        "switches": [{"name": "leaf0", "kind": "leaf"}, {"name": "leaf1", "kind": "leaf"}],
        "hosts": [{"nics": "IB-EDR", "network": "leaf0", **h} for h in hosts],
    }
    return build_fabric(parse_spec(spec, "<f>"))


def running(name: str, acc: Any, placement: Placement, **resources: Any) -> JobView:
    view = job(name, acc, resources={"accelerators": acc, **resources} if acc else resources)
    return JobView(name, view.spec, JobState.RUNNING, 0.0, started_at=0.0, placement=placement)


def index_of(fab: Fabric, free: dict[str, float] | None = None) -> CapacityIndex:
    topo = Topology(fab)
    return CapacityIndex(topo, {d: (free or {}).get(d, 1.0) for d in topo.class_of})


def classes(index: CapacityIndex, model: str) -> tuple[Any, ...]:
    return tuple(c for c in index.topo.classes.values() if c.model.name == model)


# ----- choices ------------------------------------------------------------------------
def test_a_cpu_hungry_cpu_only_job_goes_where_the_gpus_are_used_not_where_they_are_free() -> None:
    fab = fabric(
        {"name": "a", "devices": "4xT4", "cpus": 32.0, "memory_gb": 128.0},
        {"name": "b", "devices": "4xT4", "cpus": 32.0, "memory_gb": 128.0},
    )
    full = running("full", "T4:4", Placement(tuple(f"a/gpu{i}" for i in range(4)), 1.0, "T4",
                   DomainLevel.HOST, (("a", 4.0, 0.0),)), cpus=1)  # fmt: skip
    side = running(
        "side", None, Placement((), 1.0, "", DomainLevel.HOST, (("b", 6.0, 0.0),)), cpus=6
    )
    gpu = job("gpu", "T4:1", t=1, resources={"accelerators": "T4:1", "cpus": 4})
    hog = job("hog", None, t=2, resources={"cpus": 20})
    snap = Snapshot.all_ready(fab, (full, side, gpu, hog), now=10.0)
    got = {}
    for strategy in ("best-fit", "fgd"):
        starts = {s.job: s.placement for s in Scheduler("fifo", strategy).decide(snap).starts}
        assert starts["gpu"].hosts == (("b", 4.0, 0.0),), strategy  # a has no free GPU
        got[strategy] = starts["hog"].hosts[0][0]
    # b has 22 cores left beside 3 free GPUs, a 28 beside none: best fit on cores takes
    # b and leaves its GPUs without cores for a GPU job like the one just seen; fgd
    # takes a, where nothing can be stranded
    assert got == {"best-fit": "b", "fgd": "a"}


def test_a_share_fills_a_partly_used_gpu_or_keeps_its_room_as_the_learned_mix_says() -> None:
    fab = fabric({"name": "c", "devices": "4xT4"})
    index = index_of(fab, {"c/gpu0": 0.75})
    t4 = classes(index, "T4")
    quarter = Request("q", t4, 1, 0.25, None, None)
    assert BestFit().place(quarter, index).devices == ("c/gpu0",)  # type: ignore[union-attr]
    # mostly 0.75 shares: filling gpu0 would leave 0.5 that none of them can use
    threes = FGD()
    for i in range(20):
        threes.observe(Request(f"t{i}", t4, 1, 0.75, None, None))
    assert threes.place(quarter, index).devices == ("c/gpu1",)  # type: ignore[union-attr]
    # mostly whole GPUs: gpu0 is a fragment for them already; a fresh GPU would be one more
    wholes = FGD()
    for i in range(20):
        wholes.observe(Request(f"w{i}", t4, 1, 1.0, None, None))
    assert wholes.place(quarter, index).devices == ("c/gpu0",)  # type: ignore[union-attr]


def test_fragmentation_is_the_free_share_the_mix_cannot_use() -> None:
    fab = fabric({"name": "c", "devices": "4xT4", "cpus": 16.0, "memory_gb": 64.0})
    index = index_of(fab, {"c/gpu0": 0.5, "c/gpu1": 0.25})  # gpu2 and gpu3 wholly free
    t4 = classes(index, "T4")
    fgd = FGD()
    fgd.observe(Request("half", t4, 1, 0.5, None, None, cpus=2))
    fgd.observe(Request("two", t4, 2, 1.0, None, None, cpus=4))  # 8 cores for 2 ranks
    fgd.observe(Request("big", t4, 2, 1.0, None, None, cpus=10))  # 20 cores: never here
    fgd.observe(Request("cpu", (), 0, 1.0, None, None, cpus=8))
    tables = HostTables(index.topo)
    host = "c"
    raw = (tables.layout[host], tuple(map(index.free.get, tables.devices[host])),
           index.cpu.get(host), index.mem.get(host))  # fmt: skip
    # free: 50 + 25 + 100 + 100 = 275 units; half: gpu1 (25) is fragment; two: gpu0 and
    # gpu1 (75); big lacks cores: all 275; cpu fits: 0
    assert fgd.fragmentation(tables.slots[raw[0]], raw) == 25 + 75 + 275 + 0
    assert fgd.workload() == {shape_of(r): 0.25 for r in (
        Request("half", t4, 1, 0.5, None, None, cpus=2),
        Request("two", t4, 2, 1.0, None, None, cpus=4),
        Request("big", t4, 2, 1.0, None, None, cpus=10),
        Request("cpu", (), 0, 1.0, None, None, cpus=8),
    )}  # fmt: skip


def test_nvlink_required_and_preferred_within_a_host() -> None:
    fab = fabric(
        {"name": "p", "devices": "4xH100-NVL", "nvlink": "pairs"},
        {"name": "q", "devices": "4xH100-NVL", "nvlink": "pairs"},
    )
    index = index_of(fab, {"p/gpu0": 0.0, "p/gpu2": 0.0, "q/gpu0": 0.0, "q/gpu1": 0.0})
    nvl = classes(index, "H100-NVL")
    fgd = FGD()
    pair = fgd.place(Request("r", nvl, 2, 1.0, DomainLevel.NVLINK, None), index)
    assert pair is not None and pair.devices == ("q/gpu2", "q/gpu3")
    index.take_all(("q/gpu2",), 1.0)
    assert fgd.place(Request("r2", nvl, 2, 1.0, DomainLevel.NVLINK, None), index) is None
    loose = fgd.place(Request("r3", nvl, 2, 1.0, DomainLevel.HOST, None), index)
    assert loose is not None and loose.devices == ("p/gpu1", "p/gpu3")


def test_a_preferred_nvlink_domain_wins_over_a_split_one() -> None:
    fab = fabric(
        {"name": "p", "devices": "4xH100-NVL", "nvlink": "pairs"},
        {"name": "q", "devices": "4xH100-NVL", "nvlink": "pairs"},
    )
    index = index_of(fab, {"p/gpu0": 0.0, "p/gpu2": 0.0, "q/gpu0": 0.0})
    nvl = classes(index, "H100-NVL")
    got = FGD().place(Request("r", nvl, 2, 1.0, None, DomainLevel.NVLINK), index)
    assert got is not None and got.devices == ("q/gpu2", "q/gpu3")


def test_gangs_no_host_holds_fall_back_to_best_fit() -> None:
    fab = fabric(
        {"name": "a", "devices": "4xT4", "cpus": 32.0},
        {"name": "b", "devices": "4xT4", "cpus": 32.0, "network": "leaf1"},
    )
    index = index_of(fab)
    t4 = classes(index, "T4")
    six = Request("six", t4, 6, 1.0, None, None, cpus=2)
    got = FGD().place(six, index)
    assert got is not None and got == BestFit().place(six, index)
    assert {d.split("/")[0] for d in got.devices} == {"a", "b"}
    assert {h: c for h, c, _ in got.hosts} == {"a": 8.0, "b": 4.0}
    assert FGD().place(Request("six", t4, 6, 1.0, DomainLevel.HOST, None), index) is None
    assert FGD().place(Request("six", t4, 6, 1.0, None, None, cpus=11.0), index) is None


def test_prefer_order_takes_the_first_class_that_fits() -> None:
    fab = fabric({"name": "t", "devices": "2xT4"}, {"name": "l", "devices": "1xL4"})
    index = index_of(fab, {"t/gpu0": 0.5})
    order = (*classes(index, "L4"), *classes(index, "T4"))
    req = Request("r", order, 1, 0.5, None, None, prefer=Prefer.ORDER)
    assert FGD().place(req, index).devices == ("l/gpu0",)  # type: ignore[union-attr]
    index.take_all(("l/gpu0",), 1.0)
    assert FGD().place(req, index).devices[0].startswith("t/")  # type: ignore[union-attr]


# ----- the learned workload, parameters, registry --------------------------------------
def test_a_job_asked_again_counts_once_and_the_window_slides() -> None:
    fab = fabric({"name": "c", "devices": "4xT4"})
    index = index_of(fab)
    t4 = classes(index, "T4")
    fgd = FGD(window=3, refresh=1)
    for _ in range(5):
        fgd.place(Request("same", t4, 1, 0.5, None, None), index)
    assert list(fgd.workload().values()) == [1.0]
    for i in range(3):
        fgd.place(Request(f"w{i}", t4, 1, 1.0, None, None), index)
    assert fgd.workload() == {shape_of(Request("w", t4, 1, 1.0, None, None)): 1.0}


@pytest.mark.parametrize(
    ("params", "words"),
    [
        ({"window": 0}, "window"),
        ({"window": "1000"}, "window"),
        ({"window": True}, "window"),
        ({"refresh": -1}, "refresh"),
        ({"refresh": 2.5}, "refresh"),
    ],
)
def test_bad_parameters_are_named(params: dict[str, Any], words: str) -> None:
    with pytest.raises(ValueError, match=f"fgd: {words} must be an integer >= 1"):
        FGD(**params)
    with pytest.raises(ValueError, match=words):
        PLACEMENTS.create("fgd", **params)
    with pytest.raises(TypeError):
        PLACEMENTS.create("fgd", windows=10)


def test_the_registry_name_works_through_the_scheduler() -> None:
    fab = fabric({"name": "c", "devices": "4xT4", "cpus": 8.0})
    sched = Scheduler(placement="fgd")
    assert isinstance(sched.placement, FGD)
    a = job("a", "T4:0.5", resources={"accelerators": "T4:0.5", "cpus": 2})
    b = job("b", "T4:2", t=1, resources={"accelerators": "T4:2", "cpus": 3})
    c = job("c", "T4:1", t=2, resources={"accelerators": "T4:1", "cpus": 1})
    d = sched.decide(Snapshot.all_ready(fab, (a, b, c), now=1.0))
    assert {s.job for s in d.starts} == {"a", "b"}  # 2 + 6 cores: none left for c
    assert "c" in d.waiting


# ----- properties ---------------------------------------------------------------------
PROPS = fabric(
    {"name": "a", "devices": "4xH100-NVL", "nvlink": "pairs", "cpus": 32.0, "memory_gb": 256.0},
    {"name": "b", "devices": "8xH100-SXM", "nvlink": "nvswitch", "cpus": 64.0,
     "memory_gb": 512.0},
    {"name": "c", "devices": "2xT4", "cpus": 16.0, "memory_gb": 64.0, "network": "leaf1"},
    {"name": "d", "devices": "4xT4", "network": "leaf1"},
    {"name": "e", "devices": ["2xH100-SXM", "2xT4"], "nvlink": "nvswitch", "cpus": 24.0,
     "network": "leaf1"},
)  # fmt: skip
PROPS_TOPO = Topology(PROPS)
CLASSES = tuple(PROPS_TOPO.classes.values())


@st.composite
def requests(draw: st.DrawFn, name: str) -> Request:
    cpus = float(draw(st.sampled_from([0, 0, 1, 2, 4, 8, 16, 40])))
    mem = float(draw(st.sampled_from([0, 0, 4, 16, 64, 300])))
    if draw(st.integers(0, 5)) == 0:
        return Request(name, (), 0, 1.0, None, None, cpus=cpus or 1.0, memory_gb=mem)
    picked = draw(st.lists(st.sampled_from(CLASSES), min_size=1, max_size=3, unique=True))
    share = draw(st.sampled_from([0.25, 0.5, 0.75, 1.0, 1.0, 1.0]))
    count = 1 if share < 1 else draw(st.sampled_from([1, 2, 3, 4, 8]))
    counts: tuple[int, ...] = ()
    if share == 1 and len(picked) > 1 and draw(st.booleans()):
        counts = tuple(draw(st.sampled_from([1, 2, 4])) for _ in picked)
    required = draw(st.sampled_from([None, None, DomainLevel.NVLINK, DomainLevel.HOST,
                                     DomainLevel.LEAF]))  # fmt: skip
    preferred = draw(st.sampled_from([None, DomainLevel.NVLINK]))
    return Request(
        name, tuple(picked), count, share, required, preferred, counts=counts, cpus=cpus,
        memory_gb=mem, per_host=draw(st.booleans()), prefer=draw(st.sampled_from(list(Prefer))),
    )  # fmt: skip


@st.composite
def states(draw: st.DrawFn) -> tuple[CapacityIndex, FGD]:
    down = draw(st.sets(st.sampled_from(sorted(PROPS_TOPO.class_of)), max_size=3))
    index = CapacityIndex(PROPS_TOPO, {d: 1.0 for d in PROPS_TOPO.class_of if d not in down})
    fgd = FGD(window=draw(st.integers(1, 20)), refresh=draw(st.integers(1, 5)))
    warm = BestFit()
    for i in range(draw(st.integers(0, 12))):
        req = draw(requests(f"w{i}"))
        by = fgd if draw(st.booleans()) else warm
        got = by.place(req, index)
        if got is not None:
            index.hold(got)
    return index, fgd


def _check(req: Request, got: Placement, index: CapacityIndex) -> None:
    topo = index.topo
    if req.cpu_only:
        assert got.devices == () and len(got.hosts) == 1
        assert index.host_schedulable(got.hosts[0][0])
    else:
        cls = topo.class_of[got.devices[0]]
        assert cls in req.classes and all(topo.class_of[d] is cls for d in got.devices)
        want = 1 if req.share < 1 else req.count_on(req.classes.index(cls))
        assert len(set(got.devices)) == len(got.devices) == want
        assert got.share == (req.share if req.share < 1 else 1.0)
        assert all(index.free.get(d, 0) >= units(req.share) for d in got.devices)
        if req.required is not None:
            assert len({topo.domain_of[req.required][d] for d in got.devices}) == 1
        assert got.hosts == host_use(req, got.devices, topo)
        assert got.span == topo.span(got.devices)
    for host, cpus, gb in got.hosts:
        room_cpu, room_mem = index.host_room(host)
        assert cpu_units(cpus) <= room_cpu and memory_units(gb) <= room_mem
    mark = index.mark()
    index.hold(got)  # raises if anything is over-committed
    index.rollback(mark)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(state=states(), reqs=st.lists(requests("r"), min_size=1, max_size=6))
def test_fgd_never_over_commits_and_places_when_best_fit_does(
    state: tuple[CapacityIndex, FGD], reqs: list[Request]
) -> None:
    index, fgd = state
    for i, drawn in enumerate(reqs):
        req = replace(drawn, job=f"r{i}")
        before = (dict(index.free), dict(index.cpu), dict(index.mem), index.mark())
        got = fgd.place(req, index)
        assert (dict(index.free), dict(index.cpu), dict(index.mem), index.mark()) == before
        best = BestFit().place(req, index)
        assert (got is None) == (best is None), (req, got, best)
        if got is None:
            continue
        _check(req, got, index)
        one_host = len({index.topo.host_of[d] for d in got.devices}) <= 1
        if not one_host:  # fgd spans hosts only as best fit does
            assert got == best
        index.hold(got)
    assert all(0 <= f <= SHARE_UNITS for f in index.free.values())
