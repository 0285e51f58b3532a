"""Scheduling policies compared: Gavel's traces beside Gavel's figures, JCT against load,
and the LP policies' solve time at scale.

1. **Gavel's traces** on ``gavel-48`` (8 V100 + 16 P100 + 24 K80, one GPU per server),
   360 s rounds for round-based policies, every policy of ``--policies``, in two settings.
   *As Gavel*: no spread penalty (Gavel's simulator runs a gang spread over servers at the
   one-host rate) and no restart cost (it has none). *accelnet default*: the measured spread
   penalty and a 30 s warm-up after every restart. Gavel's figures from
   ``../shared/data/README.md`` are printed beside the first setting.
2. **Average JCT against load** (Gavel's Fig. 8): Gavel-style generated workloads
   (``gavel-gen``, ``--jobs`` jobs, seeded) on ``gavel-48`` at each rate of ``--rates``
   (jobs per hour), every policy, *as Gavel*; plotted to
   ``bench/results/policy_jct_vs_rate.png``.
3. **LP solve time**: one round's allocation for 5,000 active jobs (Gavel's job types and
   gang-size mix, seeded) on 2,048 GPUs (683 V100 + 683 P100 + 682 K80), median of
   ``--repeats``, for each LP (hetero-fair, min-makespan, hetero-jct, finish-time-fair,
   energy; the ``-tail`` variants solve hetero-jct's); and ``hetero-jct-packed``'s LP with
   its pair columns at 500 active jobs (above that its LP solves over classes, without
   pairs). ``hetero-fair-packed``'s LP is not timed here.

Every trace and load point also gets the LP lower bound on the average JCT
(:func:`accelnet.sim.bounds.jct_lp`; 60 s intervals on Gavel's traces, 360 s on the load
points), beside the run-alone bound.

Run from the project root (needs ``../shared/data``: Gavel's traces)::

    .venv/bin/python bench/policy_bench.py [--rates 0.5,1,1.5,2,3] [--jobs 100] [--repeats 5]

It prints tables and writes ``bench/results/policies.json``. About 5 minutes on 2 cores.
"""

from __future__ import annotations

import argparse
import json
import random
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

from accelnet.fabric import load_fabric
from accelnet.sched import JobSpec, JobState, JobView
from accelnet.sched.jobinfo import JobInfo
from accelnet.sched.policies import ROUND_POLICIES
from accelnet.sched.rounds import RoundContext
from accelnet.sim.bounds import jct_lp
from accelnet.sim.engine import Simulation
from accelnet.sim.metrics import compute
from accelnet.sim.policies import make_scheduler, model_pairs, model_rates
from accelnet.sim.throughput import ThroughputModel
from accelnet.sim.traces import load_trace
from benchutil import run_and_report, source_state, src_label

ROOT = Path(__file__).resolve().parent
TRACES = ROOT.parent.parent / "shared" / "data" / "gavel" / "traces"
RESULTS = ROOT / "results" / "policies.json"
PLOT = ROOT / "results" / "policy_jct_vs_rate.png"
POLICIES = (
    "fifo,las,srtf,sjf,drf,hetero-fair,hetero-fair-packed,hetero-jct,hetero-jct-tail,"
    "hetero-jct-packed,hetero-jct-tail-packed,min-makespan,finish-time-fair,energy"
)
GAVEL = {  # ../shared/data/README.md: Gavel's simulator, round 360 s, seed 0
    "max_min_fairness.trace": {
        "fifo": (35905, 196524),
        "max_min_fairness (LAS)": (19989, 77141),
        "max_min_fairness_perf": (14623, 63945),
        "gandiva": (17379, 67405),
        "finish_time_fairness_perf": (15010, 64971),
    },
    "minimize_makespan.trace": {
        "min_total_duration_perf": (None, 64721),
        "min_total_duration": (None, 76635),
        "fifo": (None, 274228),
    },
}
SETTINGS = {"as Gavel": {"spread_penalty": False, "restart_s": 0.0},
            "accelnet default": {"spread_penalty": True, "restart_s": 30.0}}  # fmt: skip


def simulate(
    model: ThroughputModel, trace: str, policy: str, seed: int, setting: dict[str, Any]
) -> dict[str, Any]:
    """One simulation on gavel-48: its main figures."""
    jobs, _ = load_trace(trace, model, seed)
    sim = Simulation(load_fabric("gavel-48"), jobs, make_scheduler(policy, model), model,
                     seed=seed, policy=policy, **setting)  # fmt: skip
    m = compute(sim.run()).to_json()
    return {
        "avg_jct_s": m["jct_s"]["avg"],
        "makespan_s": m["makespan_s"],
        "utilization": m["utilization"],
        "rho_avg": m["fairness"]["rho_avg"],
        "rho_max": m["fairness"]["rho_max"],
        "preemptions": m["preemptions"],
        "jct_lb_avg_s": m["bounds"]["jct_lb_avg_s"],
        "makespan_lb_s": m["bounds"]["makespan_lb_s"],
        "wall_s": m["cost"]["wall_s"],
        "unfinished": m["jobs"]["unfinished"],
    }


def lp_context(model: ThroughputModel, jobs: int, seed: int) -> RoundContext:
    """A round with ``jobs`` active jobs on 2,048 GPUs of three models."""
    rng = random.Random(seed)
    rates = model_rates(model)
    types = model.job_types()
    views = []
    for i in range(jobs):
        gang = rng.choices([1, 2, 4, 8], weights=[70, 10, 15, 5])[0]
        spec = JobSpec.model_validate({
            "name": f"j{i}", "run": "simulated", "resources": {"accelerators": f"any:{gang}"},
            "workload": {"type": rng.choice(types), "total_steps": rng.uniform(1e3, 1e6)},
        })  # fmt: skip
        views.append(JobView(f"j{i}", spec, JobState.ADMITTED, rng.uniform(0, 3600)))
    capacity = {"V100": 683, "P100": 683, "K80": 682}
    return RoundContext.of(views, capacity, JobInfo(3600.0, rates))


def jct_bound(model: ThroughputModel, trace: str, seed: int, step_s: float) -> float | None:
    """The LP lower bound on the average JCT of a trace on gavel-48 (up to 2,000,000
    columns: the fine grid of 60 s intervals is kept, at about 1 GB)."""
    jobs, _ = load_trace(trace, model, seed)
    return jct_lp(load_fabric("gavel-48"), jobs, model_rates(model), step_s, 2_000_000)


def packed_lp_s(model: ThroughputModel, jobs: int, seed: int, repeats: int) -> dict[str, Any]:
    """hetero-jct-packed's LP round (pair columns included) at ``jobs`` active jobs."""
    ctx = lp_context(model, jobs, seed)
    views = {j.id: j for j in ctx.jobs}
    pairs = model_pairs(model)

    def colocated(a: str, b: str, m: str) -> tuple[float, float] | None:
        if ctx.gang[a] != ctx.gang[b]:
            return None
        return pairs(views[a].spec, views[b].spec, m, ctx.gang[a])

    ctx.colocated = colocated
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        ROUND_POLICIES["hetero-jct-packed"]().allocate(ctx)
        times.append(time.perf_counter() - t0)
    return {"jobs": jobs, "median_s": statistics.median(times), "runs_s": times}


def run(args: argparse.Namespace, console: Console) -> dict[str, Any]:
    if not TRACES.exists():
        sys.exit(f"{TRACES} is missing: the bench needs Gavel's traces")
    model = ThroughputModel.gavel()
    policies = [p.strip() for p in args.policies.split(",")]
    rates = [float(r) for r in args.rates.split(",")]
    lp_names = ["hetero-fair", "min-makespan", "hetero-jct", "finish-time-fair", "energy"]
    total = len(GAVEL) * len(SETTINGS) * len(policies) + len(rates) * len(policies) + len(lp_names)
    total += len(GAVEL) + len(rates) + 1  # the JCT bounds, the packed LP
    gavel: dict[str, Any] = {}
    bounds: dict[str, Any] = {}
    load: dict[str, list[dict[str, Any]]] = {p: [] for p in policies}
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), console=console) as progress:  # fmt: skip
        task = progress.add_task("simulations", total=total)
        for trace in GAVEL:
            progress.update(task, description=f"{trace}, JCT LP bound")
            bounds[trace] = jct_bound(model, str(TRACES / trace), 0, 60.0)
            progress.advance(task)
            for setting, params in SETTINGS.items():
                for policy in policies:
                    progress.update(task, description=f"{trace}, {setting}, {policy}")
                    gavel.setdefault(trace, {}).setdefault(setting, {})[policy] = simulate(
                        model, str(TRACES / trace), policy, 0, params
                    )
                    progress.advance(task)
        load_bounds = []
        for rate in rates:
            lam = 3600.0 / rate
            progress.update(task, description=f"{rate:g} jobs/h, JCT LP bound")
            gen = f"gavel-gen:n={args.jobs},lam={lam}"
            lp = jct_bound(model, gen, args.seed, 360.0)
            load_bounds.append({"jobs_per_hour": rate, "jct_lp_avg_s": lp})
            progress.advance(task)
            for policy in policies:
                progress.update(task, description=f"{rate:g} jobs/h, {policy}")
                r = simulate(model, f"gavel-gen:n={args.jobs},lam={lam}", policy, args.seed,
                             SETTINGS["as Gavel"])  # fmt: skip
                load[policy].append({"jobs_per_hour": rate, **r})
                progress.advance(task)
        solve: dict[str, Any] = {}
        ctx = lp_context(model, 5000, args.seed)
        for name in lp_names:
            progress.update(task, description=f"LP solve time, {name}")
            times = []
            for _ in range(args.repeats):
                policy = ROUND_POLICIES[name]()
                t0 = time.perf_counter()
                policy.allocate(ctx)
                times.append(time.perf_counter() - t0)
            solve[name] = {"median_s": statistics.median(times), "runs_s": times}
            progress.advance(task)
        progress.update(task, description="LP solve time, hetero-jct-packed at 500 jobs")
        packed = packed_lp_s(model, 500, args.seed, args.repeats)
        progress.advance(task)
    plot(load, load_bounds)
    return {
        "schema": "accelnet.bench.policies/v1",
        "timestamp": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": "bench/policy_bench.py " + shlex.join(sys.argv[1:]),
        "source": source_state(),
        "settings": SETTINGS,
        "gavel_traces": gavel,
        "gavel_jct_lp_avg_s": bounds,
        "gavel_reference": reference(),
        "load": load,
        "load_jct_lp_avg_s": load_bounds,
        "jobs_per_load_point": args.jobs,
        "lp_solve_5000_jobs_2048_gpus": solve,
        "lp_solve_packed_2048_gpus": packed,
    }


def reference() -> dict[str, Any]:
    """Gavel's figures as JSON."""
    return {
        trace: {p: {"avg_jct_s": jct, "makespan_s": span} for p, (jct, span) in runs.items()}
        for trace, runs in GAVEL.items()
    }


def plot(load: dict[str, list[dict[str, Any]]], bounds: list[dict[str, Any]]) -> None:
    import matplotlib as mpl
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7.6, 4.8))
    ax = fig.add_subplot()
    colors = mpl.colormaps["tab20"].colors
    for i, (policy, rows) in enumerate(load.items()):
        ax.plot([r["jobs_per_hour"] for r in rows], [r["avg_jct_s"] / 3600 for r in rows],
                "os^vD"[i % 5] + "-", color=colors[(2 * i) % 20 + (i // 10) % 2], ms=4,
                label=policy)  # fmt: skip
    known = [b for b in bounds if b["jct_lp_avg_s"] is not None]
    ax.plot([b["jobs_per_hour"] for b in known], [b["jct_lp_avg_s"] / 3600 for b in known],
            "k--", label="LP lower bound")  # fmt: skip
    ax.set_xlabel("input job rate (jobs / hour)")
    ax.set_ylabel("average JCT (hours)")
    ax.set_title("gavel-48, Gavel-style generated jobs (as Gavel: no spread penalty)")
    ax.set_yscale("log")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(PLOT, dpi=120)


def report(result: dict[str, Any], console: Console) -> None:
    for trace, settings in result["gavel_traces"].items():
        t = Table(title=f"gavel-48, {trace}")
        for col in ("setting", "policy", "avg JCT (s)", "makespan (s)", "utilization",
                    "rho avg / max", "preemptions", "JCT lb", "makespan lb"):  # fmt: skip
            t.add_column(col, justify="right")
        for setting, runs in settings.items():
            for policy, r in runs.items():
                t.add_row(setting, policy, f"{r['avg_jct_s']:,.0f}", f"{r['makespan_s']:,.0f}",
                          f"{r['utilization']:.3f}", f"{r['rho_avg']:.3f} / {r['rho_max']:.3f}",
                          f"{r['preemptions']:,}", f"{r['jct_lb_avg_s']:,.0f}",
                          f"{r['makespan_lb_s']:,.0f}")  # fmt: skip
        for policy, ref in result["gavel_reference"][trace].items():
            jct = ref["avg_jct_s"]
            t.add_row("Gavel", policy, f"{jct:,}" if jct else "", f"{ref['makespan_s']:,}",
                      "", "", "", "", "")  # fmt: skip
        console.print(t)
        lp = result["gavel_jct_lp_avg_s"].get(trace)
        if lp is not None:
            console.print(f"{trace}: LP lower bound on the average JCT {lp:,.0f} s")
    t = Table(title=f"average JCT (s) vs load ({result['jobs_per_load_point']} jobs per point)")
    policies = list(result["load"])
    t.add_column("jobs/h", justify="right")
    for p in policies:
        t.add_column(p, justify="right")
    t.add_column("LP bound", justify="right")
    rates = [r["jobs_per_hour"] for r in result["load"][policies[0]]]
    for i, rate in enumerate(rates):
        lp = result["load_jct_lp_avg_s"][i]["jct_lp_avg_s"]
        t.add_row(f"{rate:g}", *(f"{result['load'][p][i]['avg_jct_s']:,.0f}" for p in policies),
                  "" if lp is None else f"{lp:,.0f}")  # fmt: skip
    console.print(t)
    for name, r in result["lp_solve_5000_jobs_2048_gpus"].items():
        console.print(f"LP round, 5,000 jobs on 2,048 GPUs, {name}: {r['median_s']:.3f} s median")
    r = result["lp_solve_packed_2048_gpus"]
    console.print(f"LP round, {r['jobs']} jobs on 2,048 GPUs, hetero-jct-packed (pair columns): "
                  f"{r['median_s']:.3f} s median")  # fmt: skip
    console.print(f"src {src_label(result['source'])}; plot: {PLOT}")


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--policies", default=POLICIES)
    parser.add_argument("--rates", default="0.5,1,1.5,2,3", help="jobs per hour")
    parser.add_argument("--jobs", type=int, default=100, help="jobs per load point")
    parser.add_argument("--repeats", type=int, default=5, help="LP solve repeats")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--replot", action="store_true", help="redraw the plot from --out")
    args = parser.parse_args(argv)
    if args.replot:
        saved = json.loads(args.out.read_text())
        plot(saved["load"], saved.get("load_jct_lp_avg_s", []))
        print(f"plot: {PLOT}")
        return
    run_and_report(args, run, report, args.out)


if __name__ == "__main__":
    main()
