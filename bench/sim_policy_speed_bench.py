"""Simulator speed with the round policies, beside Gavel's simulator on the same kind of run.

Gavel's generator (``gavel-gen``: Poisson arrivals, mean gap ``--lam`` s, Gavel's job
types, durations and gang sizes) makes a ``--jobs``-job trace that is simulated on
Gavel's 64:64:64 cluster (64 V100 + 64 P100 + 64 K80; here 16 hosts of 4 GPUs of each
model, a leaf switch per model, one spine: :data:`FABRIC`, also written to
``bench/results/sim_policy_speed_fabric.yaml`` so that ``accelnet simulate`` can replay
any row) with each policy of ``--policies`` (by default every round policy and ``fifo``),
as ``accelnet simulate`` runs it (ended jobs forgotten). Every run is a fresh process
(its peak memory is its own); a figure is the median over ``--repeats`` runs. *wall* is
``Simulation.run``'s own time, *CPU* the process's CPU time in it (steadier than wall on a
busy machine), *peak RSS* the process's maximum resident set. *vs Gavel* is Gavel's
simulator's time on such a trace (issue 22, measured alternately on this machine kind:
``max_min_fairness_perf`` 20.5 s, ``fifo`` 25.8 s; Gavel is not installed here) over
accelnet's wall: the goal is >= 5 for every policy. Round policies are compared with
Gavel's max-min fairness, ``fifo`` with Gavel's FIFO. ``--min-reallocation-s`` (a list)
runs each round policy at each re-allocation interval (0: accelnet's default, re-solve at
every round and change; 1920: Gavel's rule and interval, like for like with Gavel's
figure); *preempt/job* is the round stops per job.

Run from the project root::

    .venv/bin/python bench/sim_policy_speed_bench.py [--jobs 3000] [--lam 1800] [--seed 0]
        [--repeats 3] [--policies hetero-fair,hetero-jct,...] [--min-reallocation-s 0,1920]

It prints a table and writes ``bench/results/sim_policy_speed.json``.
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

import yaml
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from benchutil import run_and_report, source_state, src_label

ROOT = Path(__file__).resolve().parent
RESULTS = ROOT / "results" / "sim_policy_speed.json"
FABRIC_FILE = ROOT / "results" / "sim_policy_speed_fabric.yaml"
MODELS = ("V100", "P100", "K80")
FABRIC: dict[str, Any] = {
    "name": "gavel-64-64-64",
    "description": "Gavel's 64:64:64 cluster: 16 hosts of 4 V100, of 4 P100 and of 4 K80, "
    "10GbE to a leaf per GPU model, 100GbE leaf-spine",
    "switches": [
        *({"name": f"leaf-{m.lower()}", "kind": "leaf", "pod": "pod0"} for m in MODELS),
        {"name": "spine0", "kind": "spine"},
    ],
    "hosts": [
        {"name": f"{m.lower()}-{{i:02d}}", "count": 16, "devices": f"4x{m}",
         "nics": "1xEth-10G", "network": f"leaf-{m.lower()}"}
        for m in MODELS
    ],
    "links": [{"a": f"leaf-{m.lower()}", "b": "spine0", "type": "Eth-100G"} for m in MODELS],
}  # fmt: skip
GAVEL_S = {"round": 20.5, "fifo": 25.8}  # Gavel's simulator on such a trace (issue 22)
GOAL = 5.0


def round_policies() -> list[str]:
    from accelnet.sched.policies import ROUND_POLICIES

    return list(ROUND_POLICIES)


def one_run(trace: str, policy: str, seed: int, realloc: float = 0.0) -> dict[str, Any]:
    """A simulation in this (fresh) process: its figures, wall, CPU and peak memory."""
    from accelnet.fabric.build import build_fabric, parse_spec
    from accelnet.sim.engine import Simulation
    from accelnet.sim.metrics import compute
    from accelnet.sim.policies import make_scheduler
    from accelnet.sim.throughput import ThroughputModel
    from accelnet.sim.traces import load_trace

    fab = build_fabric(parse_spec(FABRIC, "<bench>"), "<bench>")
    model = ThroughputModel.gavel()
    jobs, _ = load_trace(trace, model, seed)
    cpu0 = time.process_time()
    sched = make_scheduler(policy, model, min_reallocation_s=realloc)
    result = Simulation(fab, jobs, sched, model, seed=seed,
                        policy=policy, trace=trace, forget_finished=True).run()  # fmt: skip
    cpu = time.process_time() - cpu0
    m = compute(result).to_json()
    return {
        "jobs": len(jobs),
        "wall_s": result.wall_s,
        "cpu_s": cpu,
        "events": result.events,
        "decisions": result.decisions,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "avg_jct_s": m["jct_s"]["avg"],
        "makespan_s": m["makespan_s"],
        "preemptions": m["preemptions"],
    }


def in_child(*args: Any) -> dict[str, Any]:
    """:func:`one_run` in a fresh process (spawned: nothing inherited)."""
    with mp.get_context("spawn").Pool(1) as pool:
        return pool.apply(one_run, args)


def run(args: argparse.Namespace, console: Console) -> dict[str, Any]:
    policies = [p.strip() for p in args.policies.split(",") if p.strip()] or [
        "fifo",
        *round_policies(),
    ]
    trace = f"gavel-gen:n={args.jobs},lam={args.lam:g},seed={args.seed}"
    FABRIC_FILE.parent.mkdir(parents=True, exist_ok=True)
    FABRIC_FILE.write_text(yaml.safe_dump(FABRIC, sort_keys=False), encoding="utf-8")
    intervals = [float(x) for x in args.min_reallocation_s.split(",") if x.strip()] or [0.0]
    cases = [(p, x) for p in policies for x in ([0.0] if p == "fifo" else intervals)]
    rows: dict[str, dict[str, Any]] = {}
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), console=console) as progress:  # fmt: skip
        task = progress.add_task("simulations", total=len(cases) * args.repeats)
        for policy, realloc in cases:
            key = policy if len(intervals) == 1 or policy == "fifo" else f"{policy} @{realloc:g}s"
            runs = []
            for i in range(args.repeats):
                progress.update(task, description=f"{key}, run {i + 1}")
                runs.append(in_child(trace, policy, args.seed, realloc))
                progress.advance(task)
            wall = statistics.median(r["wall_s"] for r in runs)
            gavel = GAVEL_S["fifo" if policy == "fifo" else "round"]
            figures = {(r["avg_jct_s"], r["makespan_s"]) for r in runs}
            same = len(figures) == 1
            rows[key] = {
                "policy": policy,
                "min_reallocation_s": realloc,
                "wall_s": wall,
                "cpu_s": statistics.median(r["cpu_s"] for r in runs),
                "peak_rss_mb": statistics.median(r["peak_rss_mb"] for r in runs),
                "runs_wall_s": [r["wall_s"] for r in runs],
                "events": runs[0]["events"],
                "decisions": runs[0]["decisions"],
                "avg_jct_s": runs[0]["avg_jct_s"],
                "makespan_s": runs[0]["makespan_s"],
                "preemptions_per_job": runs[0]["preemptions"] / max(1, runs[0]["jobs"]),
                "same_figures_every_run": same,
                "gavel_s": gavel,
                "vs_gavel": gavel / wall if wall > 0 else None,
            }
    return {
        "schema": "accelnet.bench.sim_policy_speed/v1",
        "timestamp": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": "bench/sim_policy_speed_bench.py " + shlex.join(sys.argv[1:]),
        "trace": trace,
        "fabric": str(FABRIC_FILE.relative_to(ROOT.parent)),
        "repeats": args.repeats,
        "goal_vs_gavel": GOAL,
        "gavel_reference_s": GAVEL_S,
        "source": source_state(),
        "policies": rows,
    }


def report(result: dict[str, Any], console: Console) -> None:
    t = Table(title=f"{result['trace']} on 64 V100 + 64 P100 + 64 K80 "
                    f"(medians of {result['repeats']})")  # fmt: skip
    for col in ("policy", "wall (s)", "CPU (s)", "peak RSS (MB)", "events", "decisions",
                "avg JCT (s)", "makespan (s)", "preempt/job", "Gavel (s)", "vs Gavel"):  # fmt: skip
        t.add_column(col, justify="right")
    for policy, r in result["policies"].items():
        ratio = r["vs_gavel"]
        mark = "" if ratio is None or ratio >= result["goal_vs_gavel"] else " (below goal)"
        t.add_row(policy, f"{r['wall_s']:.1f}", f"{r['cpu_s']:.1f}", f"{r['peak_rss_mb']:,.0f}",
                  f"{r['events']:,}", f"{r['decisions']:,}", f"{r['avg_jct_s']:,.1f}",
                  f"{r['makespan_s']:,.0f}", f"{r['preemptions_per_job']:.2f}",
                  f"{r['gavel_s']:.1f}", f"{ratio:.2f}x{mark}" if ratio else "-")  # fmt: skip
    console.print(t)
    console.print(f"src {src_label(result['source'])}; fabric {result['fabric']}; goal: "
                  f">= {result['goal_vs_gavel']:g}x Gavel's simulator")  # fmt: skip


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=3000)
    parser.add_argument("--lam", type=float, default=1800.0, help="mean arrival gap, s")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--policies", default="", help="comma-separated; default: every "
                        "round policy")  # fmt: skip
    parser.add_argument("--min-reallocation-s", default="0", help="comma-separated "
                        "re-allocation intervals for the round policies, s (0: at every "
                        "round and change; Gavel: 1920)")  # fmt: skip
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    run_and_report(args, run, report, args.out)


if __name__ == "__main__":
    main()
