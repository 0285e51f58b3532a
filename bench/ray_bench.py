"""Ray dispatch benchmark: trivial tasks through accelnet's Ray backend and as plain Ray
tasks, on the same multi-node Ray cluster, in the same run.

The cluster: ``--nodes`` Ray nodes started on this machine (``ray.cluster_utils.Cluster``,
as ``accelnet demo --backend ray`` starts them), each with ``--cpus`` CPUs and emulating as
many CPU devices (``accelnet.io/emulate: <cpus>xCPU-core``), so both systems have the same
number of task slots: accelnet one worker process per device, Ray one task per CPU.

1. **accelnet over Ray**: ``LocalCluster(ray=RayOptions(address))``, default settings
   (workers kept warm per tenant), on the cluster (one agent actor per node, one worker per
   device; the controller, scheduler and store in this process). After ``--warmup`` tasks
   (every worker started), the main thread submits ``--tasks`` trivial tasks
   (``cluster.submit(stamp)``) as fast as it can, then waits for every one. Everything goes
   through the real path: job spec, cloudpickle, the store, the controller and scheduler,
   Ray actor calls to the agents, the agents' workers, the events back, and the device
   refresh between jobs (a call to the node's agent).
2. **plain Ray tasks**: ``ray.remote(stamp)`` (1 CPU each, Ray's default) on the same
   cluster and driver connection, warmed the same way, ``--tasks`` calls, one ``ray.get``.
3. **one at a time** (both systems): ``--serial`` tasks, each submitted after the last one
   finished: submit -> start and submit -> result when nothing queues (the fixed cost of
   one dispatch).

The task is ``stamp()``: ``time.time_ns()`` read inside the worker. Figures per run:
tasks/s (tasks / wall time from just before the first submit until the driver holds every
result); submit -> start (in task): ``time.time()`` just before the submit call to the
task's stamp; submit -> finish: to when the driver knew (accelnet ``record.finished_at``,
Ray a completion callback, as in dispatch_bench.py); for the serial runs submit -> result
in the caller's hands. Each figure is the median over ``--repeats`` repeats (a fresh
accelnet cluster per repeat, start-up and warm-up untimed; the Ray cluster is started
once); the systems alternate repeat by repeat so both see the same machine noise. Ratios
are accelnet / Ray.

Run from the project root (needs the ray extra)::

    .venv/bin/python bench/ray_bench.py [--nodes 2] [--cpus 1] [--tasks 2000]
                                        [--serial 200] [--repeats 3] [--warmup 20]

It prints a table and writes ``bench/results/ray.json``.
"""

from __future__ import annotations

import argparse
import gc
import logging
import os
import platform
import shlex
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from importlib.metadata import version
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from accelnet.runtime.ray.connect import RayOptions
from accelnet.runtime.ray.local_cluster import start_cluster
from accelnet.runtime.sdk import LocalCluster
from accelnet.sched import JobState
from benchutil import run_and_report, source_state, src_label

RESULTS = Path(__file__).resolve().parent / "results" / "ray.json"
NS = 1e-9


def stamp() -> int:
    """The trivial task: when it started, in ns since the epoch."""
    return time.time_ns()


@dataclass
class RunResult:
    """One timed run of one system (latencies in ms)."""

    system: str
    tasks: int
    wall_s: float
    tasks_per_s: float
    start_ms: dict[str, float]
    finish_ms: dict[str, float]
    serial_start_ms: dict[str, float]
    serial_result_ms: dict[str, float]
    notes: dict[str, Any] = field(default_factory=dict)


def percentiles(xs: Sequence[float]) -> dict[str, float]:
    """p50/p90/p99/max of ``xs`` (seconds) in milliseconds."""
    qs = statistics.quantiles(xs, n=100, method="inclusive")
    return {"p50": qs[49] * 1e3, "p90": qs[89] * 1e3, "p99": qs[98] * 1e3, "max": max(xs) * 1e3}


def _at(t: float | None) -> float:
    if t is None:
        raise RuntimeError("a finished job without a finish time")
    return t


# ----- accelnet over Ray ----------------------------------------------------------------


def run_accelnet(address: str, args: argparse.Namespace, workdir: Path) -> RunResult:
    """One timed run on a fresh accelnet cluster over the Ray cluster."""
    options = RayOptions(address=address)  # default settings (recycle="per-tenant")
    with LocalCluster(workdir=workdir, ray=options) as cluster:
        for job in [cluster.submit(stamp) for _ in range(args.warmup)]:
            job.result(timeout=120)
        gc.collect()
        stamps: list[float] = []
        t0 = time.perf_counter()
        jobs = []
        for _ in range(args.tasks):
            stamps.append(time.time())
            jobs.append(cluster.submit(stamp))
        end = time.monotonic() + args.timeout
        records = [j.wait(max(0.0, end - time.monotonic())) for j in jobs]
        wall = time.perf_counter() - t0
        serial_start, serial_result = [], []
        for _ in range(args.serial):
            s = time.time()
            job = cluster.submit(stamp)
            started = job.result(timeout=120)
            serial_result.append(time.time() - s)
            serial_start.append(started * NS - s)
        devices, hosts = len(cluster.fabric.devices), len(cluster.fabric.hosts)
    bad = [r for r in records if r.state is not JobState.SUCCEEDED]
    if bad:
        raise RuntimeError(f"{len(bad)} accelnet tasks did not succeed, e.g. {bad[0]}")
    return RunResult(
        system="accelnet (Ray backend)",
        tasks=args.tasks,
        wall_s=wall,
        tasks_per_s=args.tasks / wall,
        start_ms=percentiles([r.result * NS - s for r, s in zip(records, stamps, strict=True)]),
        finish_ms=percentiles(
            [_at(r.finished_at) - s for r, s in zip(records, stamps, strict=True)]
        ),
        serial_start_ms=percentiles(serial_start),
        serial_result_ms=percentiles(serial_result),
        notes={"devices": devices, "hosts": hosts},
    )


# ----- plain Ray ------------------------------------------------------------------------


def run_ray(args: argparse.Namespace) -> RunResult:
    """One timed run of plain Ray tasks on the same cluster and driver connection."""
    import ray

    remote_stamp = ray.remote(stamp)
    ray.get([remote_stamp.remote() for _ in range(args.warmup)], timeout=120)
    gc.collect()
    done_at = [0.0] * args.tasks
    stamps: list[float] = []
    refs = []
    t0 = time.perf_counter()
    for _ in range(args.tasks):
        stamps.append(time.time())
        refs.append(remote_stamp.remote())
    for i, ref in enumerate(refs):
        ref.future().add_done_callback(_stamper(done_at, i))
    starts: list[int] = ray.get(refs, timeout=args.timeout)
    wall = time.perf_counter() - t0
    end = time.monotonic() + 60
    while not all(done_at) and time.monotonic() < end:
        time.sleep(0.01)
    serial_start, serial_result = [], []
    for _ in range(args.serial):
        s = time.time()
        started = ray.get(remote_stamp.remote(), timeout=120)
        serial_result.append(time.time() - s)
        serial_start.append(started * NS - s)
    return RunResult(
        system="plain Ray tasks",
        tasks=args.tasks,
        wall_s=wall,
        tasks_per_s=args.tasks / wall,
        start_ms=percentiles([st * NS - s for st, s in zip(starts, stamps, strict=True)]),
        finish_ms=percentiles([d - s for d, s in zip(done_at, stamps, strict=True)]),
        serial_start_ms=percentiles(serial_start),
        serial_result_ms=percentiles(serial_result),
        notes={"cpus": int(ray.cluster_resources().get("CPU", 0))},
    )


def _stamper(out: list[float], i: int) -> Callable[[Any], None]:
    def done(_: Any) -> None:
        out[i] = time.time()

    return done


# ----- the run --------------------------------------------------------------------------


def median_run(runs: Sequence[RunResult]) -> dict[str, Any]:
    """Medians over repeats of every figure."""

    def med(key: str) -> dict[str, float]:
        first: dict[str, float] = getattr(runs[0], key)
        return {k: statistics.median(getattr(r, key)[k] for r in runs) for k in first}

    return {
        "system": runs[0].system,
        "tasks": runs[0].tasks,
        "repeats": len(runs),
        "tasks_per_s": statistics.median(r.tasks_per_s for r in runs),
        "wall_s": statistics.median(r.wall_s for r in runs),
        "start_ms": med("start_ms"),
        "finish_ms": med("finish_ms"),
        "serial_start_ms": med("serial_start_ms"),
        "serial_result_ms": med("serial_result_ms"),
    }


def ratios(a: dict[str, Any], b: dict[str, Any]) -> dict[str, float]:
    """accelnet / Ray: tasks/s (below 1: accelnet slower), latencies (above 1: slower)."""
    out = {"tasks_per_s": a["tasks_per_s"] / b["tasks_per_s"]}
    for kind in ("start_ms", "finish_ms", "serial_start_ms", "serial_result_ms"):
        for p in ("p50", "p99"):
            out[f"{kind[:-3]}_{p}"] = a[kind][p] / b[kind][p]
    return out


def run(args: argparse.Namespace, console: Console) -> dict[str, Any]:
    """Start the cluster, run both systems ``--repeats`` times; the JSON-ready result."""
    import ray

    load_before = os.getloadavg()
    nodes = {f"bench{i}": f"{args.cpus}xCPU-core" for i in range(args.nodes)}
    runs: dict[str, list[RunResult]] = {"accelnet": [], "ray": []}
    console.print(f"starting a Ray cluster of {args.nodes} node(s), {args.cpus} CPU(s) each")
    cluster = start_cluster(nodes, cpus=args.cpus)
    try:
        ray.init(address=cluster.address, log_to_driver=False, logging_level=logging.ERROR)
        with tempfile.TemporaryDirectory(prefix="accelnet-raybench-") as tmp:
            for i in range(args.repeats):
                console.print(f"repeat {i + 1}/{args.repeats}: accelnet over Ray")
                runs["accelnet"].append(run_accelnet(cluster.address, args, Path(tmp) / f"a{i}"))
                console.print(f"repeat {i + 1}/{args.repeats}: plain Ray tasks")
                runs["ray"].append(run_ray(args))
    finally:
        ray.shutdown()
        cluster.shutdown()
    medians = {name: median_run(rs) for name, rs in runs.items()}
    return {
        "schema": "accelnet.bench.ray/v1",
        "timestamp": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": shlex.join(sys.orig_argv),
        "parameters": {
            "nodes": args.nodes,
            "cpus_per_node": args.cpus,
            "tasks": args.tasks,
            "serial": args.serial,
            "repeats": args.repeats,
            "warmup": args.warmup,
            "task": "stamp(): return time.time_ns()",
        },
        "machine": {
            "cpu_count": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
            "accelnet": version("accelnet"),
            "ray": version("ray"),
            "loadavg_before": load_before,
            "loadavg_after": os.getloadavg(),
        },
        "source": source_state(),
        "runs": {name: [asdict(r) for r in rs] for name, rs in runs.items()},
        "medians": medians,
        "ratios": {"accelnet_over_ray": ratios(medians["accelnet"], medians["ray"])},
    }


def report(result: dict[str, Any], console: Console) -> None:
    """The figures as a table."""
    p, m, med = result["parameters"], result["machine"], result["medians"]
    table = Table(
        title="Dispatch through accelnet's Ray backend vs plain Ray tasks (same cluster, same run)",
        caption=f"medians of {p['repeats']} repeats; {p['nodes']} Ray nodes x {p['cpus_per_node']}"
        f" CPU on one machine of {m['cpu_count']} cores; Ray {m['ray']}, Python {m['python']};"
        f" src at {src_label(result['source'])}",
    )
    table.add_column("system")
    for col in ("tasks/s", "start p50", "start p99", "finish p50", "finish p99",
                "1-by-1 start p50", "1-by-1 result p50"):  # fmt: skip
        table.add_column(col if col == "tasks/s" else f"{col} (ms)", justify="right")

    def fig(r: dict[str, Any]) -> list[str]:
        return [
            f"{r['tasks_per_s']:,.0f}", f"{r['start_ms']['p50']:,.1f}",
            f"{r['start_ms']['p99']:,.1f}", f"{r['finish_ms']['p50']:,.1f}",
            f"{r['finish_ms']['p99']:,.1f}", f"{r['serial_start_ms']['p50']:,.2f}",
            f"{r['serial_result_ms']['p50']:,.2f}",
        ]  # fmt: skip

    for name in ("accelnet", "ray"):
        table.add_row(f"{med[name]['system']}, {med[name]['tasks']:,} tasks", *fig(med[name]))
    r = result["ratios"]["accelnet_over_ray"]
    table.add_row(
        "ratio accelnet / Ray", f"{r['tasks_per_s']:.2f}x", f"{r['start_p50']:.1f}x",
        f"{r['start_p99']:.1f}x", f"{r['finish_p50']:.1f}x", f"{r['finish_p99']:.1f}x",
        f"{r['serial_start_p50']:.1f}x", f"{r['serial_result_p50']:.1f}x",
    )  # fmt: skip
    console.print(table)
    console.print(
        "start = submit call -> the task's own time.time_ns(); finish = submit call -> the "
        "driver knows it is done; 1-by-1 = one task at a time (nothing queued): its start, "
        "and its result in the caller's hands. Latency ratios above 1: accelnet slower."
    )


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Command-line options."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0] if __doc__ else None)
    parser.add_argument("--nodes", type=int, default=2, help="Ray nodes on this machine")
    parser.add_argument("--cpus", type=int, default=1, help="CPUs (= devices) per node")
    parser.add_argument("--tasks", type=int, default=2000, help="tasks per throughput run")
    parser.add_argument("--serial", type=int, default=200, help="tasks run one at a time")
    parser.add_argument("--repeats", type=int, default=3, help="runs of each system")
    parser.add_argument("--warmup", type=int, default=20, help="untimed tasks before timing")
    parser.add_argument("--timeout", type=float, default=1800.0, help="give up on a run (s)")
    parser.add_argument("--out", type=Path, default=RESULTS, help="where to write the JSON")
    args = parser.parse_args(argv)
    for name in ("nodes", "cpus", "tasks", "serial", "repeats", "warmup"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be >= 1")
    return args


def main(argv: Sequence[str] | None = None) -> None:
    """Run the benchmark, print the table, write the JSON."""
    args = parse_args(argv)
    run_and_report(args, run, report, args.out)


if __name__ == "__main__":
    main()
