"""Chaos on the Ray backend (bench/chaos_bench.py ``--backend ray``, reduced): a local Ray
cluster whose worker nodes are SIGKILLed (raylet and everything under it) and added back,
the controller SIGKILLed and restarted on its SQLite file (joining the same cluster),
processes under the nodes' agents SIGKILLed, devices failed and repaired. Then every
planned job is stored once and ended as planned, every invariant holds, the jobs lost
with a node were requeued within their retry budget (the loss charged to it, as
docs/ray.md says), every killed node is back in service and every device READY.

Also the two faults the chaos found, each on its own: a controller restarted while a
node it had seen die is back (the store has its devices OFFLINE), and a node that dies
while a controller connects."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from accelnet.devices import DeviceState
from accelnet.fabric import build_fabric, parse_spec
from accelnet.runtime.clock import SystemClock
from accelnet.runtime.control.controller import Controller
from accelnet.runtime.control.sqlite_store import SqliteStore
from accelnet.runtime.ray.connect import RayOptions
from tests.benchload import load_bench

ray = pytest.importorskip("ray", reason="the Ray backend needs the ray extra")
pytestmark = [pytest.mark.ray, pytest.mark.slow]


def _bench() -> ModuleType:
    return load_bench("chaos_bench")


def test_chaos_with_ray_node_kills_keeps_every_invariant_and_loses_no_job(
    tmp_path: Path,
) -> None:
    bench = _bench()
    cfg = bench.ChaosConfig(
        jobs=40, controller_kills=2, worker_kills=4, node_kills=2, fault_rate=1.0, seed=7,
        timeout_s=120.0, backend="ray",
    )  # fmt: skip
    report = bench.run_chaos(cfg, tmp_path / "chaos")
    assert report.lost == [] and report.duplicated == []
    assert report.unfinished == []
    assert report.violations == []  # including: each loss to a node charged to the retries
    assert report.node_kills == cfg.node_kills, "the run ended before the node kills were spent"
    assert report.controller_kills >= 1 and report.worker_kills >= 1
    assert report.unrecovered_nodes == []
    assert len(report.node_recovery_s) == report.node_kills
    assert report.out_of_service == []  # every device READY: none ALLOCATED, none OFFLINE
    assert report.unplanned == []
    assert report.node_lost_jobs, "no node kill caught a job running: nothing was tested"
    store = SqliteStore(str(tmp_path / "chaos" / "state.db"))
    try:
        for job, losses in report.node_lost_jobs.items():
            rec = store.get(job)
            assert 1 <= rec.failures <= rec.spec.max_retries + 1, (job, losses, rec.failures)
    finally:
        store.close()
    assert sum(report.states.values()) == cfg.jobs
    # as planned: the doomed jobs failed, every other one succeeded, but for those the
    # crash-loop guard held (each running at two or more controller deaths: the audit checks)
    # or whose every attempt the chaos itself ended (out of retries: the audit checks each)
    assert report.unplanned == []
    doomed = {
        j["name"] for j in bench.workload(cfg.jobs, cfg.seed, tmp_path) if j["run"] == "exit 4"
    }
    held = (set(report.held) | set(report.spent)) - doomed  # (a job's id is its name)
    assert report.states.get("succeeded", 0) == cfg.jobs - len(doomed) - len(held)


# -- the faults the chaos found, one at a time ------------------------------------------------

NODES = {"n0": "1xT4", "n1": "2xL4"}  # n0 is the head
# a dead node is noticed after about 3 s: long enough to connect while Ray lists it alive
SLOW = {"health_check_period_ms": 1000, "health_check_timeout_ms": 1000,
        "health_check_failure_threshold": 3}  # fmt: skip


@pytest.fixture
def chaos_cluster() -> Iterator[Any]:
    bench = _bench()
    c = bench.RayChaosCluster(NODES, (0.0, 0.0), SLOW)
    try:
        ray.init(address=c.address, log_to_driver=False, logging_level="warning")
        yield c
    finally:
        ray.shutdown()
        c.close()


def alive() -> list[str]:
    """The hosts of the live Ray nodes."""
    return [n["Labels"].get("accelnet.io/host", "") for n in ray.nodes() if n["Alive"]]


def _wait_for(check: Callable[[], bool], what: str, limit: float = 30.0) -> None:
    end = time.monotonic() + limit
    while not check():
        assert time.monotonic() < end, f"gave up waiting for {what}"
        threading.Event().wait(0.05)


def test_a_node_dying_while_a_controller_connects_is_down_not_an_error(
    chaos_cluster: Any, tmp_path: Path
) -> None:
    """Connecting right after a node was SIGKILLed (Ray still lists it alive): its
    description fails; the node is down (with a note), not a RayConnectError. Then a
    controller restarted once the node is back (the store has its devices OFFLINE) puts
    them back in service."""
    fabric = build_fabric(parse_spec(_bench().ray_fabric_spec(NODES), "test"))
    clock = SystemClock()
    options = RayOptions(address=chaos_cluster.address, kill_grace_s=0.5)
    store = SqliteStore(str(tmp_path / "state.db"))
    try:
        assert chaos_cluster.kill_node(random.Random(0)) == "n1"
        assert len(alive()) == 2  # Ray has not noticed yet
        with options.connect(fabric, tmp_path / "work", clock) as b:
            assert b.hosts() == {"n0": True, "n1": False}
            assert any("died while it was described" in n for n in b.notes), b.notes
            ctl = Controller(fabric, store, b, clock, tmp_path / "work")
            ctl.step(0.05)
            states = ctl.device_states()
            assert [states[d] for d in ("n1/gpu0", "n1/gpu1")] == [DeviceState.OFFLINE] * 2
        assert store.devices()["n1/gpu0"] is DeviceState.OFFLINE  # as the next life finds it
        chaos_cluster.revive(force=True)  # the machine is back while no controller runs

        _wait_for(lambda: "n1" in alive(), "n1 to rejoin Ray")
        with options.connect(fabric, tmp_path / "work", clock) as b:
            assert b.hosts() == {"n0": True, "n1": True}
            ctl = Controller(fabric, store, b, clock, tmp_path / "work")

            def ready() -> bool:
                ctl.step(0.05)
                return set(ctl.device_states().values()) == {DeviceState.READY}

            _wait_for(ready, "n1's devices back in service", limit=10.0)
    finally:
        store.close()
