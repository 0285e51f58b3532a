"""The Ray part of the chaos run (``bench/chaos_bench.py --backend ray``): the controller
script on the Ray backend, the local Ray cluster whose worker nodes are killed and added
back, and the audit of node losses and recoveries. Imported by ``chaos_bench.py`` (as a
top-level module: ``bench/`` is on ``sys.path``), whose ``RayChaosCluster`` and
``ray_fabric_spec`` (what the tests use) are these.
"""

from __future__ import annotations

import contextlib
import random
import re
import signal
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psutil

if TYPE_CHECKING:
    from chaos_bench import ChaosReport

# The controller on the Ray backend: the local one's loop, plus a line in nodes.txt each
# time a machine's devices leave or re-enter service, and, at the end, a wait for every
# machine to be back (the driver re-adds the nodes it killed) and every fault repaired.
# a controller life's start, the same on both backends: it says it is ready, then submits
# the planned jobs no earlier life stored, recording each acknowledged one
SUBMIT_PLANNED = r"""
with open(work / "ready.txt", "a") as f:
    f.write(f"{life} {time.time()}\n")
known = {r.id for r in store.jobs()}
acked = open(work / "acked.txt", "a")
for spec in plan["jobs"]:
    if spec["name"] not in known:  # submitted by no earlier life
        ctl.submit(JobSpec.model_validate(spec), job_id=spec["name"])
        acked.write(spec["name"] + "\n")
        acked.flush()
faults = open(work / "faults.txt", "a")
"""

CONTROLLER_RAY = (
    r"""
import json, random, sys, time
from pathlib import Path
from accelnet.devices import DeviceState
from accelnet.fabric import build_fabric, parse_spec
from accelnet.runtime.clock import SystemClock
from accelnet.runtime.control.controller import Controller
from accelnet.runtime.ray.connect import RayOptions
from accelnet.runtime.control.sqlite_store import SqliteStore
from accelnet.sched import JobSpec

db, work = sys.argv[1], Path(sys.argv[2])
seed, life, fault_rate = int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])
address = sys.argv[6]
plan = json.loads((work / "plan.json").read_text())
rng = random.Random(seed * 1000 + life)
fabric = build_fabric(parse_spec(plan["ray_fabric"], "chaos"))
clock = SystemClock()
store = SqliteStore(db)
options = RayOptions(address=address, kill_grace_s=0.5, node_timeout_s=10.0,
                     gang_timeout_s=10.0, connect_timeout_s=60.0)
backend = options.connect(fabric, str(work), clock)
ctl = Controller(fabric, store, backend, clock, str(work))
"""
    + SUBMIT_PLANNED
    + r"""nodes = open(work / "nodes.txt", "a")
notes = open(work / "notes.txt", "a")  # the backend's notes (nodes refused, left out)
noted = 0
hosts = {h.name: h.device_ids for h in fabric.hosts}
serving: dict[str, bool] = {}
broken: dict[str, float] = {}
last = time.monotonic()
idle_since = None
while True:
    ctl.step(0.05)
    now = time.monotonic()
    states = ctl.device_states()
    for note in backend.notes[noted:]:
        notes.write(f"{time.time()} {life} {note}\n")
        notes.flush()
    noted = len(backend.notes)
    for host, devs in hosts.items():  # a machine is in service when no device is OFFLINE
        up = all(states[d] is not DeviceState.OFFLINE for d in devs)
        if serving.get(host) is not up:
            serving[host] = up
            nodes.write(f"{time.time()} {host} {int(up)} {life}\n")
            nodes.flush()
    for dev, state in states.items():  # a fault of an earlier life, or a repair that failed
        if state is DeviceState.UNHEALTHY and dev not in broken:
            broken[dev] = now  # (its node was down, say): repaired (again) 0.5 s later
    if ctl.idle():
        idle_since = idle_since or now
        if (all(serving.values()) and not broken) or now - idle_since > 60:
            break
    for dev, at in list(broken.items()):
        if now - at > 0.5:
            del broken[dev]
            if ctl.device_states()[dev] is DeviceState.UNHEALTHY:  # not OFFLINE since
                ctl.repair_device(dev, "chaos: repaired")
    if fault_rate > 0 and not ctl.idle() and rng.random() < fault_rate * (now - last):
        dev = rng.choice(sorted(fabric.devices))
        usable = ctl.device_states()[dev] in (DeviceState.READY, DeviceState.ALLOCATED)
        if dev not in broken and usable:
            broken[dev] = now
            ctl.fail_device(dev, "chaos: injected fault")
            faults.write(dev + "\n")
            faults.flush()
    last = now
backend.close()
print("idle", flush=True)
"""
)

# The Ray cluster of ``--backend ray``: host -> emulated devices; the first is the head
# (never killed), the others are the worker nodes the chaos kills.
RAY_NODES = {"n0": "2xT4", "n1": "3xL4", "n2": "2xL4_1xT4"}
# A dead raylet is declared dead within about a second (Ray's default: about 15 s).
RAY_SYSTEM = {"health_check_period_ms": 500, "health_check_timeout_ms": 500,
              "health_check_failure_threshold": 2, "health_check_initial_delay_ms": 0}  # fmt: skip


def ray_fabric_spec(nodes: Mapping[str, str]) -> dict[str, Any]:
    """The fabric spec that declares the machines of ``nodes`` (host -> emulated devices)."""
    hosts = [{"name": h, "devices": [g for g in re.split(r"[_+,]", e) if g]}
             for h, e in nodes.items()]  # fmt: skip
    return {"name": "chaos-ray", "hosts": hosts}


class RayChaosCluster:
    """The local Ray cluster of a ``--backend ray`` run (``nodes``: host -> emulated
    devices, the first the head), whose worker nodes are killed and added back. ``system``:
    Ray's system config (how fast a dead node is noticed). Starting it blocks until every
    node is up (seconds per node); :meth:`close` removes it all."""

    def __init__(
        self,
        nodes: Mapping[str, str],
        down_s: tuple[float, float],
        system: Mapping[str, Any] = RAY_SYSTEM,
    ) -> None:
        from accelnet.runtime.ray.local_cluster import new_cluster, node_args

        self._emulate = dict(nodes)
        self._down_s = down_s
        (self.head, emulate), *rest = nodes.items()
        # on 127.0.0.1, as every node added below (node_args)
        head = {**node_args(self.head, emulate), "_system_config": dict(system)}
        self.cluster = new_cluster(head)
        self.nodes: dict[str, Any] = {self.head: self.cluster.head_node}
        try:
            for host, emu in rest:
                self.nodes[host] = self.cluster.add_node(wait=False, **node_args(host, emu))
            self.cluster.wait_for_nodes()
        except BaseException:
            self.cluster.shutdown()
            raise
        self.down: dict[str, float] = {}  # host killed -> when it is added back (monotonic)
        self.kills: list[tuple[str, float]] = []  # (host, time.time() of the kill)
        self.revivals: list[tuple[str, float]] = []  # (host, time.time() it was added back)

    @property
    def address(self) -> str:
        """The cluster's GCS address (what the controllers join)."""
        return str(self.cluster.address)

    def kill_node(self, rng: random.Random) -> str | None:
        """SIGKILL a live worker node's raylet and every process under it (the agent, its
        workers and their tasks, Ray's own agents); it is added back after ``down_s``.
        The host killed, or None if every worker node is down already."""
        up = [h for h in self.nodes if h != self.head and h not in self.down]
        if not up:
            return None
        host = rng.choice(up)
        node = self.nodes.pop(host)
        raylet = psutil.Process(node.all_processes["raylet"][0].process.pid)
        procs = [raylet, *raylet.children(recursive=True)]
        for p in procs:
            with contextlib.suppress(psutil.NoSuchProcess):
                p.send_signal(signal.SIGKILL)
        self.kills.append((host, time.time()))
        self.down[host] = time.monotonic() + rng.uniform(*self._down_s)
        psutil.wait_procs(procs[1:], timeout=15)
        self.cluster.remove_node(node, allow_graceful=False)  # reaps the raylet, forgets it
        return host

    def revive(self, force: bool = False) -> None:
        """Add back (a new Ray node for the same machine) each killed node that is due, or
        every one with ``force``; returns without waiting for them to register."""
        from accelnet.runtime.ray.local_cluster import node_args

        for host, due in list(self.down.items()):
            if force or time.monotonic() >= due:
                del self.down[host]
                args = node_args(host, self._emulate[host])
                self.revivals.append((host, time.time()))
                self.nodes[host] = self.cluster.add_node(wait=False, **args)

    def kill_a_worker(self, rng: random.Random) -> int:
        """SIGKILL one process under a node's accelnet agent (a device's worker or a task
        it runs); 1 if done."""
        found: list[psutil.Process] = []
        for node in self.nodes.values():
            with contextlib.suppress(psutil.Error):
                raylet = psutil.Process(node.all_processes["raylet"][0].process.pid)
                for p in raylet.children():
                    with contextlib.suppress(psutil.Error):
                        if p.cmdline()[:1] and p.cmdline()[0].startswith("ray::NodeAgent"):
                            found += p.children(recursive=True)
        if not found:
            return 0
        with contextlib.suppress(psutil.NoSuchProcess):
            rng.choice(found).send_signal(signal.SIGKILL)
            return 1
        return 0

    def close(self) -> None:
        """Remove every node. Idempotent."""
        self.cluster.shutdown()


def _audit_nodes(work: Path, ray: RayChaosCluster, report: ChaosReport) -> None:
    """Ray's part of the audit: each node kill's detection (kill -> the first time after
    it that a controller had the machine's devices OFFLINE; kills of a machine that was
    not in service yet are left out) and recovery (kill, and the
    node's re-adding, -> the first time after it that a controller had every device of
    that machine in service), the jobs whose
    tasks were lost with a node, each such loss charged to the job's retry budget (the
    next settlement of the job is a retry or its failure; a loss left unsettled by a
    controller that died is requeued by the next without charge, as every running job
    is), and every device READY at the end."""
    from accelnet.devices import DeviceState
    from accelnet.runtime.control.sqlite_store import SqliteStore

    path = work / "nodes.txt"
    seen = [line.split() for line in path.read_text().splitlines()] if path.exists() else []

    def first(host: str, up: str, after: float) -> float | None:
        times = [float(t) for t, h, u, _ in seen if h == host and u == up and float(t) > after]
        return min(times) - after if times else None

    def serving(host: str, at: float) -> bool:
        before = [(float(t), u) for t, h, u, _ in seen if h == host and float(t) <= at]
        return bool(before) and max(before)[1] == "1"

    for host, killed in ray.kills:
        down = first(host, "0", killed) if serving(host, killed) else None
        if down is not None:  # (a machine killed again while it rejoined: no detection)
            report.node_detect_s.append(down)
        seen_down = killed + (down or 0.0)  # "in service" lines before it were stale news
        back = first(host, "1", seen_down)
        if back is None:
            report.unrecovered_nodes.append(f"{host} killed at {killed:.3f}")
        else:
            report.node_recovery_s.append(seen_down + back - killed)
    for host, added in ray.revivals:
        rejoined = first(host, "1", added)
        if rejoined is not None:
            report.node_rejoin_s.append(rejoined)
    store = SqliteStore(str(work / "state.db"))
    try:
        events = store.events()
        lost: dict[str, int] = {}
        pending: dict[str, int] = {}  # job -> losses not settled yet
        for e in events:
            if e.job is None:
                continue
            if e.kind == "task:lost" and "went away" in e.detail:
                attempt = e.detail.split(":")[0].rsplit(".", 2)[-2]
                if pending.get(e.job) != int(attempt):  # a gang's ranks: one loss
                    lost[e.job] = lost.get(e.job, 0) + 1
                pending[e.job] = int(attempt)
            elif e.job in pending and e.kind in ("job:admitted", "job:failed"):
                del pending[e.job]
                charged = e.kind == "job:failed" or e.detail.startswith("requeued (retry")
                if not charged and not e.detail.startswith("requeued: lost when the controller"):
                    report.violations.append(f"[node-loss] {e.job}: lost with a node, then "
                                             f"#{e.seq} {e.kind}: {e.detail}")  # fmt: skip
        report.node_lost_jobs = lost
        report.out_of_service = sorted(
            f"{d} {s.value}" for d, s in store.devices().items() if s is not DeviceState.READY
        )
    finally:
        store.close()
