"""Simulator benchmark: the Philly table at scale, and Gavel's traces beside Gavel's figures.

1. **Scale**: the Philly per-job table (``../shared/data/philly/philly.csv``, 82,247 jobs;
   job types drawn by the loader's seeded rule, durations taken as run times on a V100) is
   simulated on a 2,048-GPU fabric (``--fabric``, by default 256 hosts of 8 V100 in a fat
   tree) with each policy of ``--policies``, for the first N jobs of each ``--sizes`` (the
   last is the whole table). Every run is a fresh process (so that its peak memory is its
   own); a figure is the median over ``--repeats`` runs. *wall* is ``Simulation.run``'s own
   time (the loop and the outcomes, as the CLI reports it); *load* is reading the trace;
   *peak RSS* is the process's maximum resident set (trace, fabric, simulation and its
   samples). Wall time vs jobs is fitted as ``wall = a * jobs^k`` (least squares in log
   space) and plotted to ``bench/results/sim_growth.png``.
2. **Gavel**: ``gavel-48`` (8 V100 + 16 P100 + 24 K80, one GPU per server) with Gavel's
   ``max_min_fairness.trace`` and ``minimize_makespan.trace`` under FIFO, beside the figures
   Gavel's own simulator gives (``../shared/data/README.md``: round 360 s, seed 0).

Run from the project root::

    .venv/bin/python bench/sim_bench.py [--sizes 10000,20000,40000,82247] [--repeats 3]
        [--policies fifo,priority] [--fabric fat-tree:hosts=256,gpus_per_host=8,model=V100]

It prints tables and writes ``bench/results/sim.json``.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import resource
import shlex
import statistics
import sys
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from benchutil import fit_power, run_and_report, source_state, src_label

ROOT = Path(__file__).resolve().parent
DATA = ROOT.parent.parent / "shared" / "data"
RESULTS = ROOT / "results" / "sim.json"
PLOT = ROOT / "results" / "sim_growth.png"
GAVEL_REFERENCE = {  # ../shared/data/README.md: Gavel's simulator, round 360 s, seed 0
    "max_min_fairness.trace": {"fifo": {"avg_jct_s": 35905, "makespan_s": 196524,
                                        "utilization": 0.349}},
    "minimize_makespan.trace": {"fifo": {"makespan_s": 274228}},
}  # fmt: skip


def one_run(
    fabric: str, trace: str, policy: str, limit: int | None, seed: int, spread: bool = True
) -> dict[str, Any]:
    """A simulation in this (fresh) process: its figures, wall and peak memory."""
    from accelnet.fabric import load_fabric
    from accelnet.sim.engine import Simulation
    from accelnet.sim.metrics import compute
    from accelnet.sim.policies import make_scheduler
    from accelnet.sim.throughput import ThroughputModel
    from accelnet.sim.traces import load_trace

    fab = load_fabric(fabric)
    model = ThroughputModel.gavel()
    t0 = time.perf_counter()
    source = trace if limit is None else f"{trace},limit={limit}"
    jobs, _ = load_trace(source, model, seed)
    load_s = time.perf_counter() - t0
    result = Simulation(
        fab, jobs, make_scheduler(policy), model, seed=seed, policy=policy, spread_penalty=spread
    ).run()
    m = compute(result).to_json()
    return {
        "jobs": len(jobs),
        "wall_s": result.wall_s,
        "load_s": load_s,
        "events": result.events,
        "decisions": result.decisions,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "metrics": m,
    }


def in_child(*args: Any) -> dict[str, Any]:
    """:func:`one_run` in a fresh process (spawned: nothing inherited)."""
    with mp.get_context("spawn").Pool(1) as pool:
        return pool.apply(one_run, args)


def plot(scale: dict[str, list[dict[str, Any]]], fits: dict[str, tuple[float, float]]) -> None:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6.4, 4.2))
    ax = fig.add_subplot()
    for policy, rows in scale.items():
        xs = [r["jobs"] for r in rows]
        a, k = fits[policy]
        ax.plot(xs, [r["wall_s"] for r in rows], "o-", label=f"{policy} (fit: ~ jobs^{k:.2f})")
        ax.plot(xs, [a * x**k for x in xs], ":", color="grey")
    ax.set_xlabel("jobs (first N of the Philly table)")
    ax.set_ylabel("simulation wall time (s), median")
    ax.set_title("Simulating Philly on 2,048 GPUs (2-core machine)")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(PLOT, dpi=120)


def run(args: argparse.Namespace, console: Console) -> dict[str, Any]:
    philly = DATA / "philly" / "philly.csv"
    if not philly.exists():
        sys.exit(f"{philly} is missing: the scale benchmark needs the Philly table")
    sizes = [int(s) for s in args.sizes.split(",") if s]
    policies = [p.strip() for p in args.policies.split(",")]
    scale: dict[str, list[dict[str, Any]]] = {p: [] for p in policies}
    total = len(sizes) * len(policies) * args.repeats + 2 * len(GAVEL_REFERENCE)
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), console=console) as progress:  # fmt: skip
        task = progress.add_task("simulations", total=total)
        for size in sizes:
            for policy in policies:
                runs = []
                for i in range(args.repeats):
                    progress.update(task, description=f"{policy}, {size:,} jobs, run {i + 1}")
                    runs.append(in_child(args.fabric, f"philly:{philly}", policy, size, 0))
                    progress.advance(task)
                scale[policy].append({
                    "jobs": runs[0]["jobs"],
                    "wall_s": statistics.median(r["wall_s"] for r in runs),
                    "load_s": statistics.median(r["load_s"] for r in runs),
                    "peak_rss_mb": statistics.median(r["peak_rss_mb"] for r in runs),
                    "events": runs[0]["events"],
                    "runs_wall_s": [r["wall_s"] for r in runs],
                    "avg_jct_s": runs[0]["metrics"]["jct_s"]["avg"],
                    "utilization": runs[0]["metrics"]["utilization"],
                })  # fmt: skip
        gavel: dict[str, Any] = {}
        for name in GAVEL_REFERENCE:
            for spread in (False, True):
                progress.update(task, description=f"gavel-48, {name}, spread penalty {spread}")
                r = in_child("gavel-48", str(DATA / "gavel" / "traces" / name), "fifo", None, 0,
                             spread)  # fmt: skip
                m = r["metrics"]
                gavel.setdefault(name, {})["fifo" if not spread else "fifo, spread penalty"] = {
                    "avg_jct_s": m["jct_s"]["avg"],
                    "makespan_s": m["makespan_s"],
                    "utilization": m["utilization"],
                    "jct_lb_avg_s": m["bounds"]["jct_lb_avg_s"],
                    "makespan_lb_s": m["bounds"]["makespan_lb_s"],
                }
                progress.advance(task)
    fits = {p: fit_power([r["jobs"] for r in rows], [r["wall_s"] for r in rows])
            for p, rows in scale.items() if len(rows) > 1}  # fmt: skip
    if fits:
        plot(scale, fits)
    return {
        "schema": "accelnet.bench.sim/v1",
        "timestamp": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": "bench/sim_bench.py " + shlex.join(sys.argv[1:]),
        "fabric": args.fabric,
        "repeats": args.repeats,
        "source": source_state(),
        "scale": scale,
        "growth_exponent": {p: k for p, (_, k) in fits.items()},
        "gavel": gavel,
        "gavel_reference": GAVEL_REFERENCE,
    }


def report(result: dict[str, Any], console: Console) -> None:
    t = Table(title=f"Philly on {result['fabric']} (medians of {result['repeats']})")
    for col in ("policy", "jobs", "wall (s)", "load (s)", "peak RSS (MB)", "events",
                "avg JCT (s)", "utilization"):  # fmt: skip
        t.add_column(col, justify="right")
    for policy, rows in result["scale"].items():
        for r in rows:
            t.add_row(policy, f"{r['jobs']:,}", f"{r['wall_s']:.1f}", f"{r['load_s']:.2f}",
                      f"{r['peak_rss_mb']:,.0f}", f"{r['events']:,}", f"{r['avg_jct_s']:,.0f}",
                      f"{r['utilization']:.3f}")  # fmt: skip
    console.print(t)
    for p, k in result["growth_exponent"].items():
        console.print(f"{p}: wall ~ jobs^{k:.2f}")
    g = Table(title="gavel-48, FIFO: accelnet vs Gavel's simulator")
    for col in ("trace", "figure", "accelnet (as Gavel: no spread penalty)", "lower bound",
                "accelnet (spread penalty)", "lower bound", "Gavel"):  # fmt: skip
        g.add_column(col, justify="right")

    def cell(fig: str, value: float) -> str:
        return f"{value:,.3f}" if fig == "utilization" else f"{value:,.0f}"

    for name, ref in result["gavel_reference"].items():
        runs = result["gavel"][name]
        plain, spread = runs["fifo"], runs["fifo, spread penalty"]
        for fig in ("avg_jct_s", "makespan_s", "utilization"):
            lb = {"avg_jct_s": "jct_lb_avg_s", "makespan_s": "makespan_lb_s"}.get(fig)
            g.add_row(name, fig, cell(fig, plain[fig]), cell(fig, plain[lb]) if lb else "",
                      cell(fig, spread[fig]), cell(fig, spread[lb]) if lb else "",
                      str(ref["fifo"].get(fig, "")))  # fmt: skip
    console.print(g)
    console.print(f"src {src_label(result['source'])}; plot: {PLOT}")


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="10000,20000,40000,82247", help="'' for none")
    parser.add_argument("--policies", default="fifo,priority")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--fabric", default="fat-tree:hosts=256,gpus_per_host=8,model=V100")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    run_and_report(args, run, report, args.out)


if __name__ == "__main__":
    main()
