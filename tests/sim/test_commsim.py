"""The simulator prices communicating gangs with the communication model, contention
included; the model against Gavel's consolidated and spread measurements."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from accelnet.fabric.build import build_fabric, parse_spec
from accelnet.runtime.backend import TaskEventKind, TaskSpec
from accelnet.runtime.clock import ManualClock
from accelnet.sched import JobSpec
from accelnet.sim.backend import SimBackend
from accelnet.sim.commcheck import Checker, check, entries, fit_overlap, summary
from accelnet.sim.commsim import CommSim
from accelnet.sim.gradients import gradient_bytes
from accelnet.sim.throughput import ThroughputModel

GAVEL = Path(__file__).resolve().parents[3] / "shared" / "data" / "gavel"
TYPE = "ResNet-50 (batch size 64)"


def _fabric() -> Any:
    spec = {
        "name": "two",
        "switches": [{"name": "leaf", "kind": "leaf"}],
        "hosts": [{"name": "h", "count": 2, "devices": "4xV100", "nics": "1xEth-10G",
                   "network": "leaf"}],
    }  # fmt: skip
    return build_fabric(parse_spec(spec, "<two>"))


def _spec(name: str, steps: float) -> JobSpec:
    return JobSpec.model_validate({
        "name": name, "run": "simulated", "resources": {"accelerators": "V100:4"},
        "workload": {"type": TYPE, "total_steps": steps,
                     "bytes_per_step": gradient_bytes(TYPE)},
    })  # fmt: skip


def _launch(backend: SimBackend, job: str, devices: tuple[str, ...]) -> None:
    for rank, dev in enumerate(devices):
        backend.launch(TaskSpec(f"{job}.{rank}", job, rank, len(devices), dev, devices))


A = ("h-0/gpu0", "h-0/gpu1", "h-1/gpu0", "h-1/gpu1")
B = ("h-0/gpu2", "h-0/gpu3", "h-1/gpu2", "h-1/gpu3")


def test_gangs_sharing_a_nic_slow_down_and_recover() -> None:
    fabric = _fabric()
    clock = ManualClock(0.0)
    specs = {"a": _spec("a", 10_000.0), "b": _spec("b", 500.0)}
    comm = CommSim(fabric)
    backend = SimBackend(fabric, clock, ThroughputModel.gavel(), specs.__getitem__,
                         restart_s=0.0, comm=comm)  # fmt: skip
    _launch(backend, "a", A)
    alone = backend._runs["a"].rate
    one_host = ThroughputModel.gavel().rate(TYPE, "V100", 4, True)
    assert alone < one_host  # spread over two servers: it pays the network
    clock.set(100.0)
    _launch(backend, "b", B)
    shared = backend._runs["a"].rate
    assert shared < alone  # both rings cross the same two NICs
    assert backend._runs["b"].rate == pytest.approx(shared)
    # b ends: a speeds up again, and its progress so far is kept
    t_b = backend.next_time()
    assert t_b is not None
    clock.set(t_b)
    ended = [e.task_id for e in backend.poll(0) if e.kind is TaskEventKind.SUCCEEDED]
    assert sorted(ended) == [f"b.{r}" for r in range(4)]
    assert backend._runs["a"].rate == pytest.approx(alone)
    done = backend.progress("a")
    assert done == pytest.approx(100.0 * alone + (t_b - 100.0) * shared)
    end = backend.next_time()
    assert end == pytest.approx(t_b + (10_000.0 - done) / alone)


def test_without_the_model_the_table_prices_the_spread() -> None:
    fabric = _fabric()
    specs = {"a": _spec("a", 10_000.0)}
    backend = SimBackend(fabric, ManualClock(0.0), ThroughputModel.gavel(), specs.__getitem__)
    _launch(backend, "a", A)
    assert backend._runs["a"].rate == pytest.approx(
        ThroughputModel.gavel().rate(TYPE, "V100", 4, False)
    )


def test_comm_sim_validates_its_overlap() -> None:
    with pytest.raises(ValueError, match="overlap must be in"):
        CommSim(_fabric(), overlap=1.0)


@pytest.mark.skipif(not GAVEL.exists(), reason="needs ../shared/data/gavel")
def test_the_model_predicts_gavels_spread_penalty_on_held_out_entries() -> None:
    doc = json.loads((GAVEL / "simulation_throughputs.json").read_text())
    items = entries(doc)
    assert len(items) > 100
    checker = Checker()
    overlap = fit_overlap(checker, items[0::2])
    held_out = summary(check(checker, items[1::2], overlap))
    assert held_out["geomean_factor"] < 1.4
    assert held_out["within_1_5x"] > 0.75
    # without overlap (every byte on the critical path) the model is far too pessimistic
    assert summary(check(checker, items, 0.0))["geomean_factor"] > 2.0


def test_gangs_linked_through_a_third_are_repriced() -> None:
    # A shares h1's NIC with C, C shares h2's NIC with B: A's coming changes C's share,
    # which changes what C takes from B, so B is re-priced too
    spec = {"name": "chain", "switches": [{"name": "leaf", "kind": "leaf"}],
            "hosts": [{"name": "h", "count": 4, "devices": "8xV100", "nics": "1xEth-10G",
                       "network": "leaf"}]}  # fmt: skip
    fabric = build_fabric(parse_spec(spec, "<chain>"))
    comm = CommSim(fabric)
    nb = gradient_bytes(TYPE) or 0.0
    comm.add("C", ("h-1/gpu0", "h-1/gpu1", "h-2/gpu0", "h-2/gpu1"), nb)
    comm.add("B", ("h-2/gpu2", "h-2/gpu3", "h-3/gpu0", "h-3/gpu1"), nb)
    comm.changed()
    comm.add("A", ("h-0/gpu0", "h-0/gpu1", "h-1/gpu2", "h-1/gpu3"), nb)
    assert comm.changed() == ["A", "B", "C"]


def test_a_gang_saving_its_checkpoint_leaves_the_links() -> None:
    fabric = _fabric()
    clock = ManualClock(0.0)
    specs = {"a": _spec("a", 10_000.0), "b": _spec("b", 10_000.0)}
    specs = {k: v.model_copy(update={"checkpointable": True}) for k, v in specs.items()}
    backend = SimBackend(fabric, clock, ThroughputModel.gavel(), specs.__getitem__,
                         restart_s=0.0, checkpoint_s=50.0, comm=CommSim(fabric))  # fmt: skip
    _launch(backend, "a", A)
    alone = backend._runs["a"].rate
    _launch(backend, "b", B)
    assert backend._runs["a"].rate < alone
    clock.set(10.0)
    for rank in range(4):
        backend.cancel(f"b.{rank}")  # b starts saving: its gradients stop flowing
    assert backend._runs["a"].rate == pytest.approx(alone)
