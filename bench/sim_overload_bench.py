"""Queues that build: a Gavel-generated trace offered above the fabric's capacity.

``bench/sim_scale_bench.py`` runs at load 0.7, where no job ever waits. Here the same
generator (``gavel-gen``: 1/2/4/8-GPU jobs at 70/10/15/5 %, V100 run times) offers
``--loads`` (default 0.7 and 1.3) of ``--gpus`` V100s in hosts of 8 (a fat tree), FIFO, and
each load runs under four settings of the scheduler:

- **plain**: backfill as it is by default (a job that does not fit is skipped; a gang
  that does not fit in one host is spread over several);
- **reserve**: ``reserve_after_s`` (``--reserve-after``, default 3,600 s): a domain is held
  for the first job that has waited that long and does not fit;
- **one host**: every gang prefers one host and waits for one (``topology.wait_s``
  ``--locality-wait``, default 1e12 s: a gang one host can hold is never spread);
- **both**.

A gang spread over hosts runs at Gavel's measured ``*_unconsolidated`` rate (up to 8x
slower than on one host for some models). For each run: utilization (busy GPUs over the
window from the first arrival to the last end), makespan, average JCT, the wait (first
start minus arrival) by gang size (median, p90, max), the share of GPU-time spent in
spread gangs, and the simulator's wall time.

Run from the project root::

    .venv/bin/python bench/sim_overload_bench.py [--gpus 1024] [--jobs 10000]
        [--loads 0.7,1.3] [--reserve-after 3600] [--locality-wait 1e12]

It prints a table and writes ``bench/results/sim_overload.json``.
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent))
from sim_scale_bench import FABRIC, lam_for

RESULTS = Path(__file__).resolve().parent / "results" / "sim_overload.json"
SETTINGS = ("plain", "reserve", "one host", "both")


def run_point(
    gpus: int, jobs: int, load: float, setting: str, reserve_s: float, wait_s: float
) -> dict[str, Any]:
    """One simulation: the figures of ``setting`` at ``load``."""
    from accelnet.fabric import load_fabric
    from accelnet.sim.engine import Simulation
    from accelnet.sim.metrics import compute
    from accelnet.sim.policies import make_scheduler
    from accelnet.sim.throughput import ThroughputModel
    from accelnet.sim.traces import stream_trace
    from accelnet.sim.workload import prefer_one_host

    source = f"gavel-gen:n={jobs},lam={lam_for(gpus, load)!r},seed=0"
    model = ThroughputModel.gavel()
    stream = stream_trace(source, model, 0)
    reserve = reserve_s if setting in ("reserve", "both") else None
    trace = stream.jobs if setting in ("plain", "reserve") else prefer_one_host(stream.jobs, wait_s)
    sim = Simulation(
        load_fabric(FABRIC.format(hosts=gpus // 8)), trace,
        make_scheduler("fifo", model, reserve_after_s=reserve), model, seed=0, policy="fifo",
        trace=source, forget_finished=True, total=stream.count, samples=True,
    )  # fmt: skip
    result = sim.run()
    m = compute(result)
    waits: dict[int, list[float]] = {}
    spread_s = total_s = 0.0
    for o in result.jobs:
        if o.first_start is not None:
            waits.setdefault(o.gpus, []).append(o.first_start - o.arrival)
        held = o.run_s * o.gpus
        total_s += held
        if o.run_s > o.alone_s * 1.001:  # slower than alone on one host: it was spread
            spread_s += held
    by_size = {
        str(g): {
            "jobs": len(w),
            "wait_p50_s": statistics.median(w),
            "wait_p90_s": statistics.quantiles(w, n=10)[-1] if len(w) > 1 else w[0],
            "wait_max_s": max(w),
        }
        for g, w in sorted(waits.items())
    }
    return {
        "gpus": gpus, "jobs": len(result.jobs), "load": load, "setting": setting,
        "reserve_after_s": reserve, "locality_wait_s": None if setting in ("plain", "reserve")
        else wait_s, "trace": source, "utilization": m.utilization, "makespan_s": m.makespan_s,
        "avg_jct_s": m.jct.avg,
        "spread_gpu_time": spread_s / total_s if total_s else 0.0, "waits": by_size,
        "wall_s": result.wall_s, "decisions": result.decisions,
    }  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--gpus", type=int, default=1024)
    p.add_argument("--jobs", type=int, default=10_000)
    p.add_argument("--loads", default="0.7,1.3")
    p.add_argument("--reserve-after", type=float, default=3600.0)
    p.add_argument("--locality-wait", type=float, default=1e12)
    p.add_argument("--out", type=Path, default=RESULTS)
    args = p.parse_args(argv)
    loads = [float(x) for x in args.loads.split(",") if x.strip()]
    points: list[dict[str, Any]] = []
    console = Console(width=170)
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), console=console) as progress:  # fmt: skip
        task = progress.add_task("simulations", total=len(loads) * len(SETTINGS))
        for load in loads:
            for setting in SETTINGS:
                progress.update(task, description=f"load {load:g}, {setting}")
                points.append(run_point(args.gpus, args.jobs, load, setting,
                                        args.reserve_after, args.locality_wait))  # fmt: skip
                progress.advance(task)
    table = Table(title=f"FIFO, gavel-gen n={args.jobs:,} on {args.gpus:,} V100s (hosts of 8)")
    for col in ("load", "setting", "utilization", "makespan (s)", "avg JCT (s)",
                "spread GPU-time", "8-GPU wait p50 / p90 / max (s)",
                "1-GPU wait p50 / p90 (s)", "wall (s)"):  # fmt: skip
        table.add_column(col, justify="left" if col == "setting" else "right")
    for pt in points:
        w8, w1 = pt["waits"].get("8", {}), pt["waits"].get("1", {})
        table.add_row(
            f"{pt['load']:g}", pt["setting"], f"{pt['utilization']:.3f}",
            f"{pt['makespan_s']:,.0f}", f"{pt['avg_jct_s']:,.0f}", f"{pt['spread_gpu_time']:.1%}",
            f"{w8.get('wait_p50_s', 0):,.0f} / {w8.get('wait_p90_s', 0):,.0f} / "
            f"{w8.get('wait_max_s', 0):,.0f}",
            f"{w1.get('wait_p50_s', 0):,.0f} / {w1.get('wait_p90_s', 0):,.0f}",
            f"{pt['wall_s']:.1f}",
        )  # fmt: skip
    console.print(table)
    out = {
        "command": "bench/sim_overload_bench.py " + shlex.join(argv or sys.argv[1:]),
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "points": points,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=1) + "\n")
    console.print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
