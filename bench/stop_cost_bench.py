"""Round policies that pay for their stops: average JCT and stops per job on generated
traces, with and without the floor on turns (issue 27).

Gavel's generator (``gavel-gen``) makes ``--jobs`` jobs (each size of ``--sizes``) that
arrive at a mean gap chosen so that the offered load is ``--load`` of the fabric: the jobs'
run-alone device-seconds over the fabric's devices times the arrival span. The fabric is
Gavel's kind of cluster with one GPU per host, ``n`` V100 + ``n`` P100 + ``n`` K80 with
``n`` = jobs / 25 (12 of each for 300 jobs, 24 for 600). Each trace (each seed of
``--seeds``) is simulated with each policy of ``--policies`` in three settings:

- **default, floor** (accelnet's default): the measured spread penalty, a 30 s restart per
  stop, and the floor on turns (:attr:`accelnet.sched.rounds.RoundScheduler.stop_overhead`,
  1 %: a job that takes turns runs 100x its stop cost, at most 1,920 s, before a round
  stops it);
- **default, no floor** (the code before the floor: ``stop_overhead=None``), side by side;
- **as Gavel**: no spread penalty, no restart cost (the floor is then 0 s, so this is
  the same with or without it: tests/sched/test_rounds_stop_floor.py).

Figures: average JCT, its ratio to the run-alone bound (the average of each job's time
alone on the fabric's best devices), stops (preemptions) per job, makespan. Simulations are
deterministic; they run ``--workers`` at a time (processes). Beside them, per trace, the
LP lower bound on the average JCT (:func:`accelnet.sim.bounds.jct_lp`, gangs at their
one-host rate, as Gavel) over the run-alone bound as Gavel: how close to the run-alone
bound any schedule can come on that trace (``--bounds-only`` computes just these), and the
peak memory of the worker process that computed it (imports included).

Run from the project root::

    .venv/bin/python bench/stop_cost_bench.py [--sizes 300,600] [--seeds 1,2,3]
        [--load 0.7] [--policies hetero-fair,hetero-jct,las,finish-time-fair,min-makespan]
        [--settings "default, floor; as Gavel"]   # some of the settings (';' between)

It prints a table and writes ``bench/results/stop_cost.json``.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import resource
import shlex
import statistics
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from benchutil import run_and_report, source_state, src_label

ROOT = Path(__file__).resolve().parent
RESULTS = ROOT / "results" / "stop_cost.json"
MODELS = ("V100", "P100", "K80")
SETTINGS = ("default, floor", "default, no floor", "as Gavel")


def fabric_spec(n: int) -> dict[str, Any]:
    """``n`` V100 + ``n`` P100 + ``n`` K80, one GPU per host, on one leaf."""
    return {
        "name": f"gavel-{n}x3",
        "switches": [{"name": "leaf0", "kind": "leaf"}],
        "hosts": [{"name": f"{m.lower()}-{{i:02d}}", "count": n, "devices": f"1x{m}",
                   "nics": "1xEth-10G", "network": "leaf0"} for m in MODELS],
    }  # fmt: skip


def alone_s(model: Any, job: Any) -> float:
    """``job``'s time alone on its fastest model here, its gang in one host."""
    return float(job.work / max(model.rate(job.job_type, m, job.gpus) for m in MODELS))


def gap_for(jobs: int, seed: int, devices: int, load: float) -> float:
    """The mean arrival gap that offers ``load`` of ``devices``: the generated jobs'
    run-alone device-seconds (fastest model, one host) per device, over the load."""
    from accelnet.sim.throughput import ThroughputModel
    from accelnet.sim.traces import load_trace

    model = ThroughputModel.gavel()
    probe, _ = load_trace(f"gavel-gen:n={jobs},lam=1000,seed={seed}", model, seed)
    area = sum(alone_s(model, j) * j.gpus for j in probe)
    return area / devices / jobs / load


def lp_ratio(case: tuple[int, int, float]) -> dict[str, Any]:
    """(jobs, seed, gap) -> the trace's LP bound on the average JCT and the run-alone
    bound, both as Gavel (one-host rates), and their ratio."""
    from accelnet.fabric.build import build_fabric, parse_spec
    from accelnet.sim.bounds import jct_lp
    from accelnet.sim.policies import model_rates
    from accelnet.sim.throughput import ThroughputModel
    from accelnet.sim.traces import load_trace

    jobs_n, seed, gap = case
    fab = build_fabric(parse_spec(fabric_spec(jobs_n // 25), "<bench>"), "<bench>")
    model = ThroughputModel.gavel()
    jobs, _ = load_trace(f"gavel-gen:n={jobs_n},lam={gap:.0f},seed={seed}", model, seed)
    alone = [alone_s(model, j) for j in jobs]
    lb = sum(alone) / len(alone)
    lp = jct_lp(fab, jobs, model_rates(model)) or lb
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # the worker's, so far
    return {"jobs": jobs_n, "seed": seed, "jct_lp_avg_s": lp, "jct_lb_avg_s": lb,
            "lp_over_alone": lp / lb, "worker_peak_rss_mb": rss}  # fmt: skip


def one_run(case: tuple[int, int, float, str, str]) -> dict[str, Any]:
    """One simulation: (jobs, seed, gap, policy, setting) -> its figures."""
    from accelnet.fabric.build import build_fabric, parse_spec
    from accelnet.sched.rounds import RoundScheduler
    from accelnet.sim.engine import Simulation
    from accelnet.sim.metrics import compute
    from accelnet.sim.policies import make_scheduler
    from accelnet.sim.throughput import ThroughputModel
    from accelnet.sim.traces import load_trace

    jobs_n, seed, gap, policy, setting = case
    n = jobs_n // 25
    fab = build_fabric(parse_spec(fabric_spec(n), "<bench>"), "<bench>")
    model = ThroughputModel.gavel()
    trace = f"gavel-gen:n={jobs_n},lam={gap:.0f},seed={seed}"
    jobs, _ = load_trace(trace, model, seed)
    sched = make_scheduler(policy, model)
    if setting == "default, no floor" and isinstance(sched, RoundScheduler):
        sched.stop_overhead = None
    gavel = setting == "as Gavel"
    result = Simulation(fab, jobs, sched, model, seed=seed, spread_penalty=not gavel,
                        restart_s=0.0 if gavel else 30.0, forget_finished=True).run()  # fmt: skip
    m = compute(result)
    return {
        "jobs": jobs_n, "seed": seed, "trace": trace, "policy": policy, "setting": setting,
        "avg_jct_s": m.jct.avg, "jct_lb_avg_s": m.jct_lb_avg_s,
        "ratio": m.jct.avg / m.jct_lb_avg_s if m.jct_lb_avg_s else None,
        "makespan_s": m.makespan_s, "preemptions_per_job": m.preemptions / jobs_n,
        "utilization": m.utilization, "finished": m.jobs_finished, "wall_s": result.wall_s,
    }  # fmt: skip


def run(args: argparse.Namespace, console: Console) -> dict[str, Any]:
    sizes = [int(x) for x in args.sizes.split(",") if x.strip()]
    seeds = [int(x) for x in args.seeds.split(",") if x.strip()]
    policies = [p.strip() for p in args.policies.split(",") if p.strip()]
    settings = [x.strip() for x in args.settings.split(";") if x.strip()]
    unknown = [x for x in settings if x not in SETTINGS]
    if unknown:
        sys.exit(f"--settings: unknown {unknown}; known: {'; '.join(SETTINGS)}")
    gaps = {(n, s): gap_for(n, s, 3 * (n // 25), args.load) for n in sizes for s in seeds}
    cases = [(n, s, gaps[(n, s)], p, setting) for n in sizes for s in seeds for p in policies
             for setting in settings]  # fmt: skip
    with mp.get_context("spawn").Pool(args.workers) as pool:
        lps = pool.map(lp_ratio, [(n, s, gaps[(n, s)]) for n in sizes for s in seeds])
    if args.bounds_only:
        cases = []
    rows: list[dict[str, Any]] = []
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), console=console) as progress:  # fmt: skip
        task = progress.add_task("simulations", total=len(cases))
        with mp.get_context("spawn").Pool(args.workers) as pool:
            for row in pool.imap_unordered(one_run, cases):
                rows.append(row)
                progress.advance(task)
    summary: dict[str, dict[str, dict[str, float]]] = {}
    for n in sizes if cases else []:
        for p in policies:
            for setting in settings:
                mine = [
                    r for r in rows if (r["jobs"], r["policy"], r["setting"]) == (n, p, setting)
                ]
                summary.setdefault(f"{n} jobs", {}).setdefault(p, {})[setting] = {
                    "ratio_median": statistics.median(r["ratio"] for r in mine),
                    "ratio_min": min(r["ratio"] for r in mine),
                    "ratio_max": max(r["ratio"] for r in mine),
                    "preemptions_per_job_median": statistics.median(
                        r["preemptions_per_job"] for r in mine
                    ),
                }
    return {
        "schema": "accelnet.bench.stop_cost/v1",
        "timestamp": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": "bench/stop_cost_bench.py " + shlex.join(sys.argv[1:]),
        "load": args.load,
        "settings": settings,
        "gaps_s": {f"{n} jobs, seed {s}": g for (n, s), g in gaps.items()},
        "source": source_state(),
        "lp_bounds": lps,
        "summary": summary,
        "runs": sorted(rows, key=lambda r: (r["jobs"], r["seed"], r["policy"], r["setting"])),
    }


def report(result: dict[str, Any], console: Console) -> None:
    t = Table(title=f"avg JCT / run-alone bound and stops per job (median over seeds; "
                    f"offered load {result['load']:g})")  # fmt: skip
    t.add_column("jobs")
    t.add_column("policy")
    settings = result.get("settings", SETTINGS)
    for setting in settings:
        t.add_column(f"{setting}: JCT ratio", justify="right")
        t.add_column("stops/job", justify="right")
    for size, policies in result["summary"].items():
        for policy, by in policies.items():
            cells = []
            for setting in settings:
                s = by[setting]
                cells += [f"{s['ratio_median']:.3f} ({s['ratio_min']:.2f}-{s['ratio_max']:.2f})",
                          f"{s['preemptions_per_job_median']:.2f}"]  # fmt: skip
            t.add_row(size, policy, *cells)
    console.print(t)
    for b in result.get("lp_bounds", []):
        console.print(f"{b['jobs']} jobs, seed {b['seed']}: LP bound on the average JCT "
                      f"{b['jct_lp_avg_s']:,.0f} s = {b['lp_over_alone']:.3f}x the run-alone "
                      f"bound {b['jct_lb_avg_s']:,.0f} s (as Gavel); worker peak RSS "
                      f"{b.get('worker_peak_rss_mb', 0):,.0f} MB")  # fmt: skip
    console.print(f"src {src_label(result['source'])}; gaps {result['gaps_s']}")


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="300,600", help="jobs per trace (n = jobs / 25)")
    parser.add_argument("--seeds", default="1,2,3")
    parser.add_argument("--load", type=float, default=0.7, help="offered load of the fabric")
    parser.add_argument("--policies", default="hetero-fair,hetero-jct,las,finish-time-fair,"
                        "min-makespan")  # fmt: skip
    parser.add_argument("--settings", default="; ".join(SETTINGS),
                        help="the settings to run, separated by ';'")  # fmt: skip
    parser.add_argument("--workers", type=int, default=2, help="simulations at a time")
    parser.add_argument("--bounds-only", action="store_true", help="only the LP bounds")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    run_and_report(args, run, report, args.out)


if __name__ == "__main__":
    main()
