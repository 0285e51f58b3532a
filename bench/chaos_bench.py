"""Chaos run: a controller SIGKILLed and restarted on the same SQLite file, workers killed,
devices failed (and, on Ray, Ray nodes killed), then the store's invariants checked and
every submitted job found once.

    python bench/chaos_bench.py                  # 500 jobs, 20 controller kills, 50 worker kills
    python bench/chaos_bench.py --jobs 80 --controller-kills 4 --worker-kills 8 --seed 3
    python bench/chaos_bench.py --backend ray --jobs 500 --controller-kills 6 --node-kills 6 \
        --worker-kills 24 --gap 0.2 0.8                         # a local Ray cluster, nodes die

The controller runs in a child process (``python -c CONTROLLER``) on an emulated fabric
with the local backend; the driver (this process) kills it or its workers (found as its
children) at seeded random times and restarts it on the same database; the controller
itself fails and repairs devices at seeded random times (``Controller.fail_device``, which
requeues the jobs on them within their retry budget). Once the kills are spent the last
controller runs the queue dry; then :func:`accelnet.runtime.control.invariants.violations` reads the
store. Prints a table and writes JSON under ``bench/results/``. Also imported by
``tests/runtime/test_chaos.py`` at a reduced size.

``--backend ray``: the driver starts a local Ray cluster on this machine (``RAY_NODES``:
a head and two worker nodes, each emulating a machine, as the Ray tests do) and the
controller runs the Ray backend on a declared fabric of those machines (a restarted
controller joins the same cluster; a machine that is down then starts OFFLINE). Besides
killing the controller and workers (processes under a node's accelnet agent), the driver
SIGKILLs a worker node (its raylet and every process under it) ``--node-kills`` times and
adds it back (the same machine, a new Ray node) after ``node_down_s``. As docs/ray.md
promises, the jobs on a lost node end LOST and are requeued within their retry budget
(the loss counts as a failure); the node's devices go OFFLINE and come back READY. Node
recovery is measured from the kill to the moment the controller has every device of that
machine in service again. The last controller waits for every machine to be back before
it stops. ``tests/runtime/ray/test_chaos_ray.py`` runs it at a reduced size. That part (the
controller script, the cluster, the audit of the nodes) is in ``bench/chaos_ray.py``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import psutil

HERE = str(Path(__file__).resolve().parent)
if HERE not in sys.path:  # imported by path (the tests), not run as a script: its siblings
    sys.path.insert(0, HERE)

from benchutil import outlive  # noqa: E402
from chaos_ray import (  # noqa: E402
    CONTROLLER_RAY,
    RAY_NODES,
    SUBMIT_PLANNED,
    RayChaosCluster,
    _audit_nodes,
    ray_fabric_spec,
)

CONTROLLER = (
    r"""
import json, random, sys, time
from pathlib import Path
from accelnet.devices import DeviceState
from accelnet.fabric import load_fabric
from accelnet.runtime.clock import SystemClock
from accelnet.runtime.control.controller import Controller
from accelnet.runtime.local.backend import LocalBackend
from accelnet.runtime.control.sqlite_store import SqliteStore
from accelnet.sched import JobSpec

db, work = sys.argv[1], Path(sys.argv[2])
seed, life, fault_rate = int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])
plan = json.loads((work / "plan.json").read_text())
rng = random.Random(seed * 1000 + life)
fabric = load_fabric(plan["fabric"])
clock = SystemClock()
store = SqliteStore(db)
backend = LocalBackend(fabric.devices, str(work), clock, emulated=True)
ctl = Controller(fabric, store, backend, clock, str(work))
for dev, state in ctl.device_states().items():  # faults of an earlier life: repaired now
    if state is DeviceState.UNHEALTHY:
        ctl.repair_device(dev, "chaos: repaired after restart")
"""
    + SUBMIT_PLANNED
    + r"""broken: dict[str, float] = {}
last = time.monotonic()
while not ctl.idle():
    ctl.step(0.05)
    now = time.monotonic()
    for dev, at in list(broken.items()):
        if now - at > 0.5:
            del broken[dev]
            ctl.repair_device(dev, "chaos: repaired")
    if fault_rate > 0 and rng.random() < fault_rate * (now - last):
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


@dataclass
class ChaosConfig:
    """The size of a run: jobs, kills, faults (per second of controller time), seed."""

    jobs: int = 500
    controller_kills: int = 20
    worker_kills: int = 50
    fault_rate: float = 1.0
    seed: int = 1
    fabric: str = "dgx1-v100"
    gap_s: tuple[float, float] = (0.05, 0.3)  # between two kills
    timeout_s: float = 1800.0
    backend: str = "local"  # or "ray": a local Ray cluster, whose worker nodes die too
    node_kills: int = 0  # Ray worker nodes SIGKILLed (then added back), on "ray"
    node_down_s: tuple[float, float] = (1.0, 3.0)  # a killed node is added back after
    shares: float = 0.0  # fraction of jobs asking for half a device (several tasks per device)


@dataclass
class ChaosReport:
    """What a run did and found."""

    config: dict[str, Any]
    jobs: int = 0
    controller_kills: int = 0
    worker_kills: int = 0
    faults: int = 0
    # the old controller's workers gone -> the restarted controller ready
    recovery_s: list[float] = field(default_factory=list)
    node_kills: int = 0
    node_recovery_s: list[float] = field(default_factory=list)  # kill -> devices in service
    node_detect_s: list[float] = field(default_factory=list)  # kill -> devices OFFLINE
    node_rejoin_s: list[float] = field(default_factory=list)  # added back -> in service
    unrecovered_nodes: list[str] = field(default_factory=list)  # killed, never back in service
    node_lost_jobs: dict[str, int] = field(default_factory=dict)  # job -> attempts lost to nodes
    out_of_service: list[str] = field(default_factory=list)  # devices not READY at the end
    unplanned: list[str] = field(default_factory=list)  # ended otherwise than planned
    # FAILED by the crash-loop guard: running at two or more controller deaths, out of retries
    held: list[str] = field(default_factory=list)
    # planned to succeed, FAILED with every retry spent by the chaos itself (see _spent)
    spent: list[str] = field(default_factory=list)
    states: dict[str, int] = field(default_factory=dict)
    lost: list[str] = field(default_factory=list)  # submitted (acknowledged) but not stored
    duplicated: list[str] = field(default_factory=list)
    unfinished: list[str] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)
    wall_s: float = 0.0

    def ok(self) -> bool:
        """No job lost, duplicated or unfinished; every invariant holds; (on Ray) every
        killed node back in service and every device READY at the end."""
        return not (self.lost or self.duplicated or self.unfinished or self.violations
                    or self.unrecovered_nodes or self.out_of_service
                    or self.unplanned)  # fmt: skip


def workload(n: int, seed: int, work: Path, shares: float = 0.0) -> list[dict[str, Any]]:
    """``n`` short jobs: mostly single-device, some gangs of 2 or 4, some that fail once
    before succeeding, some that always fail, some checkpointable (seeded); ``shares``: that
    fraction of them (drawn apart, so the rest of the mix is unchanged) ask for half a
    device instead of a whole one, so devices run several tasks at once."""
    rng = random.Random(seed)
    halves = random.Random(seed + 1)
    jobs = []
    for i in range(n):
        name = f"c{i:04d}"
        nap = rng.choice(["0.05", "0.1", "0.2", "0.3"])
        kind = rng.random()
        spec: dict[str, Any] = {"name": name, "max_retries": 8}
        run = f"sleep {nap}"
        if kind < 0.15:
            spec["resources"] = {"accelerators": f"any:{rng.choice([2, 4])}"}
        elif kind < 0.30:  # fails its first attempt, then succeeds
            mark = work / "marks" / name
            run = f"if [ -e {mark} ]; then sleep {nap}; else touch {mark}; exit 3; fi"
        elif kind < 0.35:  # always fails: ends FAILED after its retries
            run, spec["max_retries"] = "exit 4", 1
        elif kind < 0.50:
            spec["checkpointable"] = True
        if "resources" not in spec and halves.random() < shares:
            spec["resources"] = {"accelerators": "any:0.5"}
        spec["run"] = run
        jobs.append(spec)
    return jobs


def _start(
    work: Path, cfg: ChaosConfig, life: int, address: str | None = None
) -> subprocess.Popen[bytes]:
    args = [str(work / "state.db"), str(work), str(cfg.seed), str(life), str(cfg.fault_rate)]
    script = CONTROLLER if address is None else CONTROLLER_RAY
    if address is not None:
        args.append(address)
    log = open(work / f"controller.{life}.log", "wb")  # noqa: SIM115 - the child owns it
    return subprocess.Popen([sys.executable, "-c", script, *args], stdout=log, stderr=log)


def _is_ready(work: Path, life: int) -> bool:
    """Whether controller life ``life`` has said it is ready (a ``"<life> <time>"`` line).

    By life number, not by counting lines: a life killed before it wrote its line (a kill
    soon after a start) writes none, and counting left the harness one life behind, waiting
    for a line the current life had already written ("controller life N did not come up")."""
    path = work / "ready.txt"
    if not path.exists():
        return False
    return any(line.split()[:1] == [str(life)] for line in path.read_text().splitlines())


def _kill_tree(proc: subprocess.Popen[bytes]) -> None:
    kids: list[psutil.Process] = []
    with contextlib.suppress(psutil.NoSuchProcess):
        kids = psutil.Process(proc.pid).children(recursive=True)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    alive = outlive(kids, 15.0)  # workers notice their controller died
    for p in alive:  # one that did not is a bug the report shows, but must not linger
        with contextlib.suppress(psutil.NoSuchProcess):
            p.kill()


def run_chaos(cfg: ChaosConfig, work: Path) -> ChaosReport:
    """One seeded chaos run in ``work`` (created); returns the report. Bounded by
    ``cfg.timeout_s`` (TimeoutError). ``cfg.backend == "ray"`` starts a local Ray
    cluster for the run (and removes it after)."""
    if cfg.backend not in ("local", "ray"):
        raise ValueError(f"backend {cfg.backend!r}: valid: local, ray")
    work.mkdir(parents=True, exist_ok=True)
    (work / "marks").mkdir(exist_ok=True)
    jobs = workload(cfg.jobs, cfg.seed, work, cfg.shares)
    plan: dict[str, Any] = {"fabric": cfg.fabric, "jobs": jobs}
    if cfg.backend == "ray":
        plan["ray_fabric"] = ray_fabric_spec(RAY_NODES)
    (work / "plan.json").write_text(json.dumps(plan))
    report = ChaosReport(config=asdict(cfg), jobs=len(jobs))
    ray = RayChaosCluster(RAY_NODES, cfg.node_down_s) if cfg.backend == "ray" else None
    try:
        t0 = time.monotonic()
        proc = _havoc(cfg, work, report, t0 + cfg.timeout_s, ray)
        while proc.poll() is None:  # run the queue dry
            if time.monotonic() > t0 + cfg.timeout_s:
                _kill_tree(proc)
                raise TimeoutError(f"chaos run did not finish in {cfg.timeout_s} s: see {work}")
            time.sleep(0.05)
        if proc.returncode != 0:
            raise RuntimeError(f"last controller exited {proc.returncode}: see {work}")
        report.wall_s = time.monotonic() - t0
    finally:
        if ray is not None:
            ray.close()
    faults = work / "faults.txt"
    report.faults = len(faults.read_text().splitlines()) if faults.exists() else 0
    _audit(work, {j["name"]: "failed" if j["run"] == "exit 4" else "succeeded" for j in jobs},
           report)  # fmt: skip
    if ray is not None:
        _audit_nodes(work, ray, report)
    return report


def _havoc(
    cfg: ChaosConfig,
    work: Path,
    report: ChaosReport,
    deadline: float,
    ray: RayChaosCluster | None = None,
) -> subprocess.Popen[bytes]:
    """Start the controller, spend the kills at seeded random times; the live controller.
    With ``ray``, also kill its worker nodes and add them back (all of them are back, or
    being added, when this returns)."""
    rng = random.Random(cfg.seed)
    life = 0
    address = None if ray is None else ray.address
    proc = _start(work, cfg, life, address)
    kills = ["controller"] * cfg.controller_kills + ["worker"] * cfg.worker_kills
    if ray is not None:  # joining Ray takes seconds: the chaos starts once it has joined
        kills += ["node"] * cfg.node_kills
        while not _is_ready(work, 0):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"controller life 0 did not come up: see {work}")
            time.sleep(0.005)
    rng.shuffle(kills)
    for what in kills:
        time.sleep(rng.uniform(*cfg.gap_s))
        if ray is not None:
            ray.revive()
        if time.monotonic() > deadline:
            break
        if proc.poll() is not None:  # ran dry before the kills were spent: no more to do
            break
        if what == "node" and ray is not None:
            report.node_kills += ray.kill_node(rng) is not None
            continue
        if what == "worker":  # between launches there may be none: try a little longer
            for _ in range(50):
                if _kill_a_worker(proc, rng) if ray is None else ray.kill_a_worker(rng):
                    report.worker_kills += 1
                    break
                time.sleep(0.01)
            continue
        _kill_tree(proc)
        killed = time.monotonic()
        report.controller_kills += 1
        life += 1
        proc = _start(work, cfg, life, address)
        while not _is_ready(work, life):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"controller life {life} did not come up: see {work}")
            time.sleep(0.005)
        report.recovery_s.append(time.monotonic() - killed)
    while ray is not None and ray.down:  # every machine back, when it is due
        ray.revive(force=time.monotonic() > deadline)
        time.sleep(0.05)
    return proc


def _kill_a_worker(proc: subprocess.Popen[bytes], rng: random.Random) -> int:
    """SIGKILL one of the controller's descendants (a worker or its task); 1 if done."""
    try:
        kids = psutil.Process(proc.pid).children(recursive=True)
        if kids:
            rng.choice(kids).send_signal(signal.SIGKILL)
            return 1
    except psutil.NoSuchProcess:
        pass
    return 0


def _audit(work: Path, planned: dict[str, str], report: ChaosReport) -> None:
    """Read the store: lost, duplicated and unfinished jobs, final states, violations, and
    each job's outcome against the plan. A job the controller's crash-loop guard failed
    (``Controller._requeue_lost``: it was running at two or more controller deaths and ran
    out of retries) is listed in ``held``, not as unplanned: the kills come a fraction of a
    second after each restart, so the job placed first is often running at several, and
    the controller cannot tell it from a job that kills it. Held with fewer than two
    deaths in its events is a violation."""
    from accelnet.runtime.control.controller import HELD_AFTER_DEATHS, LOST_AT_RESTART
    from accelnet.runtime.control.invariants import violations
    from accelnet.runtime.control.sqlite_store import SqliteStore
    from accelnet.sched import JobState

    store = SqliteStore(str(work / "state.db"))
    try:
        records = store.jobs()
        names = Counter(r.spec.name for r in records)
        acked = set((work / "acked.txt").read_text().split())
        report.lost = sorted((acked | set(planned)) - set(names))
        report.duplicated = sorted(n for n, c in names.items() if c > 1)
        report.unfinished = sorted(r.id for r in records if not r.state.is_finished())
        report.states = dict(Counter(r.state.value for r in records))
        report.violations = [str(v) for v in violations(store)]
        for r in records:
            if r.state is JobState.FAILED and (r.error or "").startswith(HELD_AFTER_DEATHS):
                report.held.append(r.id)
                deaths = 1 + sum(LOST_AT_RESTART in e.detail for e in store.events(r.id))
                if deaths < 2:
                    report.violations.append(f"[crash-loop guard] {r.id} held after {deaths} "
                                             f"controller death(s): {r.error}")  # fmt: skip
            elif r.state.value != planned.get(r.spec.name):
                if planned.get(r.spec.name) == "succeeded" and _spent(r, store.events(r.id)):
                    report.spent.append(r.id)
                    continue
                others = [c[:200] for c in _causes(r, store.events(r.id))
                          if not any(k in c for k in CHAOS_CAUSES)]  # fmt: skip
                report.unplanned.append(
                    f"{r.id} {r.state.value}, planned {planned.get(r.spec.name)} (attempts "
                    f"{r.attempts}, failures {r.failures}: {(r.error or '')[:300]}; failures "
                    f"the harness did not cause: {others})"
                )
    finally:
        store.close()


# what the harness inflicts, as a job's errors name it: a SIGKILL of a worker or of a task's
# shell, of the shell's child (the shell then exits 137 and says "Killed": the workload's
# commands exit 0, 3 or 4 on their own), an injected device fault, a controller death
CHAOS_CAUSES = (
    "killed by SIGKILL",
    "exited with code 137",
    "chaos: injected fault",
    "lost when the controller restarted",
)


def _spent(record: Any, events: Sequence[Any]) -> bool:
    """Whether a job planned to succeed ended FAILED only because the chaos hit each of its
    attempts: it failed ``max_retries + 1`` times (the budget it was given) and every one of
    those failures (the "requeued (retry k of n)" events and its final error) names a cause
    the harness inflicts (:data:`CHAOS_CAUSES`). A job of 4 of the 8 devices that is left
    last in the queue is running under every kill of the last seconds, and a correct
    controller must then fail it. Any other failure (a task's own error, a timeout, a
    wrong requeue) keeps it unplanned."""
    causes = _causes(record, events)
    return len(causes) == record.spec.max_retries + 1 and all(
        any(c in cause for c in CHAOS_CAUSES) for cause in causes
    )


def _causes(record: Any, events: Sequence[Any]) -> list[str]:
    """Why each retry was spent (its "requeued (retry k of n)" event), then the last error."""
    causes = [e.detail for e in events if e.detail.startswith("requeued (retry")]
    causes.append(record.error or "")
    return causes


def figures(report: ChaosReport) -> dict[str, Any]:
    """The headline numbers of a run."""
    rec, nodes = report.recovery_s, report.node_recovery_s
    detect, rejoin = report.node_detect_s, report.node_rejoin_s
    ray = {
        "node kills": report.node_kills,
        "node down median s": round(statistics.median(detect), 3) if detect else None,
        "node recovery median s": round(statistics.median(nodes), 3) if nodes else None,
        "node recovery max s": round(max(nodes), 3) if nodes else None,
        "node rejoin median s": round(statistics.median(rejoin), 3) if rejoin else None,
        "nodes not recovered": len(report.unrecovered_nodes),
        "jobs hit by node loss": len(report.node_lost_jobs),
        "devices not READY": len(report.out_of_service),
    }
    return {
        "jobs": report.jobs,
        "controller kills": report.controller_kills,
        "worker kills": report.worker_kills,
        "device faults": report.faults,
        "recovery median s": round(statistics.median(rec), 3) if rec else None,
        "recovery max s": round(max(rec), 3) if rec else None,
        **(ray if report.config.get("backend") == "ray" else {}),
        "jobs lost": len(report.lost),
        "duplicated": len(report.duplicated),
        "unfinished": len(report.unfinished),
        "violations": len(report.violations),
        "unplanned outcomes": len(report.unplanned),
        "held by the crash-loop guard": len(report.held),
        "retries spent by the chaos": len(report.spent),
        "final states": report.states,
        "wall s": round(report.wall_s, 1),
    }


def main() -> None:
    """Command line: run once, print a table, write JSON under bench/results/."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    d = ChaosConfig()
    ap.add_argument("--jobs", type=int, default=d.jobs)
    ap.add_argument("--controller-kills", type=int, default=d.controller_kills)
    ap.add_argument("--worker-kills", type=int, default=d.worker_kills)
    ap.add_argument("--fault-rate", type=float, default=d.fault_rate)
    ap.add_argument("--seed", type=int, default=d.seed)
    ap.add_argument("--shares", type=float, default=d.shares,
                    help="fraction of jobs asking for half a device")  # fmt: skip
    ap.add_argument("--backend", choices=["local", "ray"], default=d.backend)
    ap.add_argument("--node-kills", type=int, default=d.node_kills, help="Ray worker nodes")
    ap.add_argument("--gap", type=float, nargs=2, default=None, metavar=("MIN", "MAX"),
                    help="seconds between two kills (default: 0.05 0.3)")  # fmt: skip
    ap.add_argument("--work", type=Path, default=None, help="keep the run here (default: temp)")
    a = ap.parse_args()
    cfg = ChaosConfig(a.jobs, a.controller_kills, a.worker_kills, a.fault_rate, a.seed,
                      backend=a.backend, node_kills=a.node_kills, shares=a.shares)  # fmt: skip
    if a.gap is not None:
        cfg.gap_s = (a.gap[0], a.gap[1])
    import tempfile

    with tempfile.TemporaryDirectory(prefix="accelnet-chaos-") as tmp:
        report = run_chaos(cfg, a.work or Path(tmp))
    figs = figures(report)
    for k, v in figs.items():
        print(f"{k:>20}  {v}")
    print(f"{'cores':>20}  {os.cpu_count()}")
    for v in report.violations[:20]:
        print("VIOLATION", v)
    for n in report.unrecovered_nodes + report.out_of_service:
        print("NOT BACK", n)
    for n in report.unplanned[:20]:
        print("UNPLANNED", n)
    name = "chaos_bench.json" if cfg.backend == "local" else f"chaos_bench_{cfg.backend}.json"
    if cfg.shares > 0:
        name = name.replace(".json", "_shares.json")
    out = Path(__file__).parent / "results" / name
    out.parent.mkdir(exist_ok=True)
    cmd = " ".join(["python", "bench/chaos_bench.py", *sys.argv[1:]])
    data = {"command": cmd, "cores": os.cpu_count(), "figures": figs, "report": asdict(report)}
    out.write_text(json.dumps(data, indent=2, default=str))
    sys.exit(0 if report.ok() else 1)


if __name__ == "__main__":
    main()
