"""Space sharing in the simulator: Gavel's measured pairs read as fractions of each job's
rate alone, packed jobs priced by them (and repriced when one leaves), and a packing
policy that packs when the pair completes work faster."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from accelnet.fabric import Fabric
from accelnet.fabric.build import build_fabric, parse_spec
from accelnet.runtime.backend import TaskEventKind, TaskSpec
from accelnet.runtime.clock import ManualClock
from accelnet.sched import JobSpec
from accelnet.sim.backend import SimBackend
from accelnet.sim.colocation import Colocation, pairs_from_compact, pairs_from_gavel
from accelnet.sim.engine import Simulation
from accelnet.sim.policies import make_scheduler
from accelnet.sim.throughput import ThroughputModel
from accelnet.sim.workload import SimJob

GAVEL_FILE = Path(__file__).resolve().parents[3] / "shared" / "data" / "gavel"
GAVEL_FILE = GAVEL_FILE / "simulation_throughputs.json"

# "a" and "b" run 1 step/s alone on a V100; together each keeps 0.9 of that; "c" and "a"
# together were not measured
TOY = ThroughputModel(
    {"v100": {"a": {1: 1.0}, "b": {1: 1.0}, "c": {1: 1.0}}},
    reference="V100",
    colocated=Colocation({"v100": {("a", "b", 1): (0.9, 0.9)}}),
)


def one_v100() -> Fabric:
    spec = {
        "name": "one-v100",
        "switches": [{"name": "leaf", "kind": "leaf"}],
        "hosts": [{"name": "h", "devices": "1xV100", "nics": "IB-EDR", "network": "leaf"}],
    }
    return build_fabric(parse_spec(spec, "<test>"))


# ----- reading the factors ---------------------------------------------------------------


def gavel_doc() -> dict[str, object]:
    return {
        "v100": {
            "('A', 1)": {"null": 10.0, "('B', 1)": [8.0, 3.0], "('C', 1)": [0.0, 0.0]},
            "('B', 1)": {"null": 4.0, "('A', 1)": [3.0, 8.0]},
            "('C', 1)": {"null": 2.0, "('A', 1)": [0.0, 0.0]},
            "('A', 2)": {"null": 18.0, "('B', 1)": [9.0, 2.0]},
        },
        "v100_unconsolidated": {"('A', 2)": {"null": 9.0}},
    }


def test_gavel_pairs_become_fractions_of_the_rate_alone() -> None:
    colo = pairs_from_gavel(gavel_doc(), "t.json")
    assert colo.factors("v100", "A", "B", 1) == (0.8, 0.75)
    assert colo.factors("v100", "B", "A", 1) == (0.75, 0.8)  # either way round
    assert colo.factors("v100", "A", "C", 1) is None  # a zero: they do not fit together
    assert colo.factors("v100", "A", "B", 2) is None  # gangs of unequal size: not packed
    assert colo.factors("k80", "A", "B", 1) is None
    assert colo.worker_types() == ("v100",)


def test_the_compact_form_round_trips() -> None:
    colo = pairs_from_gavel(gavel_doc(), "t.json")
    compact = json.loads(json.dumps(colo.to_compact()))
    again = pairs_from_compact(compact, "bundled")
    assert again.factors("v100", "B", "A", 1) == (0.75, 0.8)
    assert again.to_compact() == colo.to_compact()


@pytest.mark.parametrize(
    ("doc", "needle"),
    [
        ({"v100": {"('A', 1)": {"null": 1.0, "('A', 1)": [1.0]}}}, "[rate of the first"),
        ({"v100": {"('A', 1)": {"null": 1.0, "('A', 1)": ["x", 1]}}}, "two finite rates"),
        ({"v100": {"('A', 1)": {"null": 1.0, "('A', 1)": [2.0, 2.0]}}}, "(0, 1]"),
    ],
)
def test_a_bad_pair_entry_is_named(doc: dict[str, object], needle: str) -> None:
    with pytest.raises(ValueError, match=r"t\.json") as info:
        pairs_from_gavel(doc, "t.json")
    assert needle in str(info.value)


def test_a_bad_compact_entry_is_named() -> None:
    with pytest.raises(ValueError, match=r"colocated\['v100'\]\['a'\]\['b'\]\['one'\]"):
        pairs_from_compact({"v100": {"a": {"b": {"one": [0.5, 0.5]}}}}, "f.json")
    with pytest.raises(ValueError, match="co-location factors for 'k80'"):
        ThroughputModel({"v100": {"a": {1: 1.0}}},
                        colocated=Colocation({"k80": {("a", "a", 1): (0.5, 0.5)}}))  # fmt: skip


def test_the_bundled_table_keeps_gavels_pairs_and_answers_by_catalog_model() -> None:
    model = ThroughputModel.gavel()
    rn, lm = "ResNet-18 (batch size 128)", "LM (batch size 40)"
    fa, fb = model.colocated(rn, lm, "V100", 1) or (0.0, 0.0)
    assert 0 < fa <= 1 and 0 < fb <= 1 and fa + fb > 1.2  # a pair that pays on a V100
    assert model.colocated(lm, rn, "V100-PCIe", 1) == (fb, fa)  # the family shares it
    assert model.colocated(rn, lm, "H100", 1) is None  # Gavel measured no H100 pairs
    assert model.colocated(rn, lm, "V100", 4) is None  # nor gangs packed together
    if GAVEL_FILE.exists():  # the same figures as Gavel's own file
        raw = json.loads(GAVEL_FILE.read_text())["v100"]
        key_a, key_b = f"('{rn}', 1)", f"('{lm}', 1)"
        ra, rb = raw[key_a][key_b]
        assert (fa, fb) == pytest.approx((ra / raw[key_a]["null"], rb / raw[key_b]["null"]))


# ----- pricing packed jobs ---------------------------------------------------------------


def test_packed_jobs_run_at_their_pair_rates_and_the_survivor_speeds_up() -> None:
    # a (900 steps) and b (1,200 steps) share the V100: 0.9 step/s each until a ends at
    # 1,000 s; b has 300 steps left and does them alone at 1 step/s: ends at 1,300 s. c
    # beside a (not measured) would run at half its rate (its share of the device).
    fab, clock = one_v100(), ManualClock()
    specs = {
        jid: JobSpec.model_validate({"name": jid, "run": "x", "checkpointable": True,
                                     "workload": {"type": jid, "total_steps": steps}})
        for jid, steps in (("a", 900.0), ("b", 1200.0))
    }  # fmt: skip
    backend = SimBackend(fab, clock, TOY, specs.__getitem__, restart_s=0.0)
    (dev,) = fab.devices
    for jid in specs:
        backend.launch(TaskSpec(f"{jid}.1.0", jid, 0, 1, dev, (dev,), command="x", share=0.5))
    assert backend.busy[dev] == pytest.approx(1.0)  # two halves: one device in use
    assert backend.next_time() == pytest.approx(1000.0)
    clock.advance(1000.0)
    ended = [e.task_id for e in backend.poll(0) if e.kind is TaskEventKind.SUCCEEDED]
    assert ended == ["a.1.0"]
    assert backend.progress("b") == pytest.approx(900.0)
    assert backend.next_time() == pytest.approx(1300.0)


def test_a_pair_nobody_measured_shares_the_device_by_halves() -> None:
    fab, clock = one_v100(), ManualClock()
    specs = {
        jid: JobSpec.model_validate({"name": jid, "run": "x",
                                     "workload": {"type": jid, "total_steps": 100.0}})
        for jid in ("a", "c")
    }  # fmt: skip
    backend = SimBackend(fab, clock, TOY, specs.__getitem__, restart_s=0.0)
    (dev,) = fab.devices
    for jid in specs:
        backend.launch(TaskSpec(f"{jid}.1.0", jid, 0, 1, dev, (dev,), command="x", share=0.5))
    assert backend.next_time() == pytest.approx(200.0)  # 0.5 step/s each


def test_a_packed_job_beside_a_fractional_share_runs_at_its_share() -> None:
    # a (packed, its mate gone) and f (asked for half the device) on one V100: each runs at
    # half its rate, never 1.5 devices' worth of work together
    fab, clock = one_v100(), ManualClock()
    specs = {
        "a": JobSpec.model_validate({"name": "a", "run": "x",
                                     "workload": {"type": "a", "total_steps": 100.0}}),
        "f": JobSpec.model_validate({"name": "f", "run": "x",
                                     "resources": {"accelerators": "V100:0.5"},
                                     "workload": {"type": "b", "total_steps": 100.0}}),
    }  # fmt: skip
    backend = SimBackend(fab, clock, TOY, specs.__getitem__, restart_s=0.0)
    (dev,) = fab.devices
    backend.launch(TaskSpec("a.1.0", "a", 0, 1, dev, (dev,), command="x", share=0.5))
    assert backend.next_time() == pytest.approx(100.0)  # alone: its whole rate
    backend.launch(TaskSpec("f.1.0", "f", 0, 1, dev, (dev,), command="x", share=0.5))
    assert backend.next_time() == pytest.approx(200.0)  # both at half from now on


# ----- a packing policy, end to end ------------------------------------------------------


def test_hetero_jct_packed_packs_when_the_pair_completes_work_faster() -> None:
    # a: 800 steps, b: 1,200, both at t=0 on one V100. Alone first (hetero-jct): a ends at
    # 800 s, b at 2,000 s. Packed, the LP's pair term 0.9/800 + 0.9/1,200 beats a alone
    # (1/800) at every round, so both start together at 0.9 step/s: a ends at 888.9 s, b
    # has 400 steps left then and ends at 1,288.9 s: average JCT 1,088.9 s against 1,400 s.
    # hetero-fair-packed packs them too: together each does 0.9 of its rate, apart half
    jobs = [SimJob("a", 0.0, "a", 1, 800.0), SimJob("b", 0.0, "b", 1, 1200.0)]
    ends = {}
    for policy in ("hetero-jct", "hetero-jct-packed", "hetero-fair-packed"):
        sim = Simulation(one_v100(), jobs, make_scheduler(policy, TOY), TOY, restart_s=0.0)
        ends[policy] = {o.id: o.end for o in sim.run().jobs}
    assert ends["hetero-jct"] == {"a": pytest.approx(800.0), "b": pytest.approx(2000.0)}
    packed = {"a": pytest.approx(800 / 0.9), "b": pytest.approx(800 / 0.9 + 400)}
    assert ends["hetero-jct-packed"] == ends["hetero-fair-packed"] == packed


def test_a_pair_that_does_not_pay_is_not_packed() -> None:
    # a and c were not measured together: hetero-jct-packed runs them one after the other
    jobs = [SimJob("a", 0.0, "a", 1, 800.0), SimJob("c", 0.0, "c", 1, 1200.0)]
    sim = Simulation(one_v100(), jobs, make_scheduler("hetero-jct-packed", TOY), TOY,
                     restart_s=0.0)  # fmt: skip
    assert {o.id: o.end for o in sim.run().jobs} == {"a": 800.0, "c": 2000.0}
