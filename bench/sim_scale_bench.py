"""Simulator at scale: a million generated jobs on 16,384 GPUs, the Philly table ten times
over, and how simulation time grows with jobs and with GPUs.

The simulator streams its trace (jobs are made as they arrive) and keeps compact columns
of outcomes and samples, letting every ended job go (``forget_finished``); these runs
measure what that buys.

1. **A million jobs**: Gavel's generator (``gavel-gen``: Poisson arrivals; 1/2/4/8 GPUs at
   70/10/15/5%; run times of 10^U(1.5,3) minutes (80%) or 10^U(3,4) minutes on a V100)
   on a fat tree of V100 hosts of 8 (``fat-tree:hosts=2048,gpus_per_host=8,model=V100``:
   16,384 GPUs). V100 because the generator's run times are V100 run times, so the
   offered load is exact: a job asks for 1.9 GPUs x 60,361 s on average (114,686
   GPU-seconds), and the mean inter-arrival time is set so that the trace offers
   ``--load`` (0.7) of the fabric: ``lam = 114,686 / (GPUs x load)`` (10.0 s on 16,384
   GPUs: a million jobs arrive over 116 days). FIFO by default. At 0.7 the fabric is
   never full (the GPUs busy are a Poisson sum: 11,469 on average, 24 standard deviations
   below 16,384; 6 below 1,024 GPUs), so no job queues: the cost measured is arrivals,
   starts and ends on a large fabric, not long queues (``bench/scale_bench.py`` does).
2. **Philly at 10x**: ``philly:PATH,scale=10,repeat=10``: the Philly table (82,247 jobs
   of 82,247 rows) played ten times back to back, each copy 10x faster, so 822,470
   jobs arrive over the table's own 3-month span: ten times its arrival rate, on the same
   16,384 GPUs (8x the 2,048 of ``bench/sim_bench.py``).
3. **Growth**: wall time vs jobs (1k, 10k, 100k, 1M) on 16,384 GPUs, and vs GPUs (1,024,
   4,096, 16,384, 65,536, 131,072) at 100k jobs, each at the same offered load;
   ``wall = a * x^k`` fitted in log space and plotted (log-log) to
   ``bench/results/sim_scale_growth.png``.

Each point is :func:`sim_point` (``bench/scale_bench.py`` imports it), run in a fresh
process so that its peak RSS (``ru_maxrss``: the process's own high-water mark, imports and
fabric included) is its own. *wall* is ``Simulation.run``'s time; *jobs/s* is jobs / wall.

Run from the project root::

    .venv/bin/python bench/sim_scale_bench.py [--jobs 1000,10000,100000,1000000]
        [--gpus 1024,4096,16384,65536,131072] [--gpus-jobs 100000] [--policy fifo]
        [--load 0.7] [--no-philly] [--reuse bench/results/sim_scale.json]

It prints tables and writes ``bench/results/sim_scale.json``; ``--reuse`` takes the points
a previous run measured (same policy, load and seed) instead of running them again, so a
long benchmark can be run in parts.
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing as mp
import queue
import resource
import shlex
import sys
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from benchutil import fit_power, run_and_report, source_state, src_label

ROOT = Path(__file__).resolve().parent
DATA = ROOT.parent.parent / "shared" / "data"
PHILLY = DATA / "philly" / "philly.csv"
RESULTS = ROOT / "results" / "sim_scale.json"
PLOT = ROOT / "results" / "sim_scale_growth.png"
FABRIC = "fat-tree:hosts={hosts},gpus_per_host=8,model=V100"
LOAD = 0.7
# the generator's mean GPU-seconds per job on a V100: E[gpus] x E[run time]
_LN10 = math.log(10.0)
JOB_GPU_S = (
    (0.7 + 0.1 * 2 + 0.15 * 4 + 0.05 * 8)
    * 60.0
    * (0.8 * (10**3 - 10**1.5) / (1.5 * _LN10) + 0.2 * (10**4 - 10**3) / _LN10)
)

Progressed = Callable[[int, int], None]


def lam_for(gpus: int, load: float = LOAD) -> float:
    """The mean inter-arrival time (s) at which the generator offers ``load`` of
    ``gpus`` V100s."""
    return JOB_GPU_S / (gpus * load)


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _run(
    fabric_ref: str, source: str, policy: str, seed: int, progress: Progressed | None
) -> dict[str, Any]:
    """Simulate ``source`` (streamed) on ``fabric_ref`` under ``policy``: figures, cost."""
    from accelnet.fabric import load_fabric
    from accelnet.sim.engine import Simulation
    from accelnet.sim.metrics import compute
    from accelnet.sim.policies import make_scheduler
    from accelnet.sim.throughput import ThroughputModel
    from accelnet.sim.traces import stream_trace

    t0 = time.perf_counter()
    fab = load_fabric(fabric_ref)
    model = ThroughputModel.gavel()
    stream = stream_trace(source, model, seed)
    setup_s = time.perf_counter() - t0
    rss_start = _rss_mb()
    sim = Simulation(
        fab, stream.jobs, make_scheduler(policy, model), model, seed=seed, policy=policy,
        trace=source, forget_finished=True, total=stream.count,
    )  # fmt: skip
    result = sim.run(progress=progress)
    t1 = time.perf_counter()
    m = compute(result)
    metrics_s = time.perf_counter() - t1
    jobs = len(result.jobs)
    return {
        "jobs": jobs,
        "gpus": len(fab.devices),
        "policy": policy,
        "seed": seed,
        "fabric": fabric_ref,
        "trace": source,
        "wall_s": result.wall_s,
        "setup_s": setup_s,
        "metrics_s": metrics_s,
        "jobs_per_s": jobs / result.wall_s if result.wall_s > 0 else None,
        "peak_rss_mb": _rss_mb(),
        "rss_at_start_mb": rss_start,
        "samples": len(result.samples),
        "events": result.events,
        "decisions": result.decisions,
        "avg_jct_s": m.jct.avg,
        "makespan_s": m.makespan_s,
        "utilization": m.utilization,
        "avg_queueing_s": m.queueing.avg,
        "p99_jct_s": m.jct.p99,
        "finished": m.jobs_finished,
        "metrics": m.to_json(),
    }


def sim_point(
    gpus: int, jobs: int, seed: int, policy: str, *, load: float = LOAD,
    progress: Progressed | None = None,
) -> dict[str, Any]:  # fmt: skip
    """One growth point, in this process: ``jobs`` generated jobs (seeded, offering
    ``load`` of the fabric) on ``gpus`` V100s (a fat tree of 8-GPU hosts) under
    ``policy``. JSON-ready; keys include wall_s, peak_rss_mb (this process's high-water
    mark: call it in a fresh process for a point's own), jobs, gpus, avg_jct_s,
    makespan_s, jobs_per_s, utilization and the full ``metrics``."""
    if gpus < 8 or gpus % 8:
        raise ValueError(f"gpus = {gpus}: a multiple of 8 (hosts of 8 GPUs)")
    lam = lam_for(gpus, load)
    source = f"gavel-gen:n={jobs},lam={lam!r},seed={seed}"
    out = _run(FABRIC.format(hosts=gpus // 8), source, policy, seed, progress)
    out["lam_s"] = lam
    out["load"] = load
    return out


def philly_point(gpus: int, scale: float, repeat: int, seed: int, policy: str,
                 progress: Progressed | None = None) -> dict[str, Any]:  # fmt: skip
    """The Philly table, ``scale`` x faster and ``repeat`` times over, on ``gpus``."""
    source = f"philly:{PHILLY},scale={scale:g},repeat={repeat}"
    return _run(FABRIC.format(hosts=gpus // 8), source, policy, seed, progress)


# ------------------------------------------------------------------ fresh processes


def _child(
    fn: Callable[..., dict[str, Any]], args: tuple[Any, ...], kwargs: dict[str, Any], out: Any
) -> None:
    last = [0.0]

    def progress(done: int, total: int) -> None:
        if time.perf_counter() - last[0] > 0.5:
            last[0] = time.perf_counter()
            out.put(("progress", done, total))

    try:
        out.put(("done", fn(*args, **kwargs, progress=progress)))
    except BaseException as exc:  # report, then let the child end
        out.put(("error", f"{type(exc).__name__}: {exc}"))
        raise


def in_child(
    fn: Callable[..., dict[str, Any]],
    args: tuple[Any, ...],
    show: Progressed,
    **kwargs: Any,
) -> dict[str, Any]:
    """``fn(*args, **kwargs, progress=...)`` in a fresh (spawned) process, its progress
    shown."""
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    proc = ctx.Process(target=_child, args=(fn, args, kwargs, out))
    proc.start()
    try:
        while True:
            try:
                msg = out.get(timeout=1.0)
            except queue.Empty:
                if not proc.is_alive():
                    raise RuntimeError(f"the child died (exit code {proc.exitcode})") from None
                continue
            if msg[0] == "progress":
                show(msg[1], msg[2])
            elif msg[0] == "done":
                result: dict[str, Any] = msg[1]
                return result
            else:
                raise RuntimeError(msg[1])
    finally:
        proc.join()


# ------------------------------------------------------------------ the benchmark


def plot(by_jobs: list[dict[str, Any]], by_gpus: list[dict[str, Any]], gpus: int,
         jobs: int, path: Path = PLOT) -> None:  # fmt: skip
    from matplotlib.figure import Figure

    fig = Figure(figsize=(11.0, 4.4), layout="constrained")
    panels = [
        (fig.add_subplot(1, 2, 1), by_jobs, "jobs", f"jobs (generated, on {gpus:,} GPUs)"),
        (fig.add_subplot(1, 2, 2), by_gpus, "gpus", f"GPUs (fat tree of V100 x 8, {jobs:,} jobs)"),
    ]
    for ax, rows, key, label in panels:
        if not rows:
            continue
        xs = [r[key] for r in rows]
        ys = [r["wall_s"] for r in rows]
        ax.plot(xs, ys, "o-", label="simulation wall time")
        if len(rows) > 1:
            a, k = fit_power(xs, ys)
            ax.plot(xs, [a * x**k for x in xs], ":", color="grey", label=f"fit: ~ {key}^{k:.2f}")
        for x, y, r in zip(xs, ys, rows, strict=True):
            ax.annotate(f"{r['peak_rss_mb']:,.0f} MB", (x, y), textcoords="offset points",
                        xytext=(4, -12), fontsize="x-small", color="dimgrey")  # fmt: skip
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel(label)
        ax.set_ylabel("wall time (s)")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(loc="upper left", fontsize="small")
    fig.suptitle("accelnet simulator, FIFO, load 0.7 (2-core machine; labels: peak RSS)")
    fig.savefig(path, dpi=120)


def run(args: argparse.Namespace, console: Console) -> dict[str, Any]:
    job_points = [int(s) for s in args.jobs.split(",") if s]
    gpu_points = [int(s) for s in args.gpus.split(",") if s]
    todo: list[tuple[str, int, int]] = [("jobs", args.at_gpus, n) for n in job_points]
    todo += [("gpus", g, args.gpus_jobs) for g in gpu_points
             if not (g == args.at_gpus and args.gpus_jobs in job_points)]  # fmt: skip
    points: dict[tuple[int, int], dict[str, Any]] = {}
    philly: dict[str, Any] | None = None
    for old in args.reuse:  # points measured before, with the same policy, load and seed
        done = json.loads(Path(old).read_text(encoding="utf-8"))
        same = (done["policy"], done["load"], done["seed"]) == (args.policy, args.load, args.seed)
        for r in (*done["growth"]["jobs"], *done["growth"]["gpus"]):
            if same:
                points[(r["gpus"], r["jobs"])] = r
        if same and done.get("philly_x10") and done["philly_x10"]["gpus"] == args.at_gpus:
            philly = done["philly_x10"]
    todo = [p for p in todo if (p[1], p[2]) not in points]
    philly_todo = not args.no_philly and philly is None
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), console=console) as progress:  # fmt: skip
        overall = progress.add_task("points", total=len(todo) + philly_todo)
        for _, g, n in todo:
            task = progress.add_task(f"{n:,} jobs on {g:,} GPUs", total=n)

            def show(done: int, total: int, task: Any = task) -> None:
                progress.update(task, completed=done, total=total)

            r = in_child(sim_point, (g, n, args.seed, args.policy), show, load=args.load)
            points[(g, n)] = r
            progress.update(task, completed=n)
            console.print(f"{n:,} jobs on {g:,} GPUs: {r['wall_s']:.1f} s, "
                          f"{r['peak_rss_mb']:,.0f} MB, {r['jobs_per_s']:,.0f} jobs/s")  # fmt: skip
            progress.advance(overall)
        if philly_todo:
            if not PHILLY.exists():
                sys.exit(f"{PHILLY} is missing (--no-philly to skip it)")
            task = progress.add_task(f"Philly x10 on {args.at_gpus:,} GPUs", total=None)

            def show_p(done: int, total: int) -> None:
                progress.update(task, completed=done, total=total)

            philly = in_child(philly_point, (args.at_gpus, 10.0, 10, args.seed, args.policy),
                              show_p)  # fmt: skip
            console.print(f"Philly x10: {philly['wall_s']:.1f} s, "
                          f"{philly['peak_rss_mb']:,.0f} MB")  # fmt: skip
            progress.advance(overall)
    by_jobs = sorted(
        (points[(args.at_gpus, n)] for n in job_points if (args.at_gpus, n) in points),
        key=lambda r: r["jobs"],
    )
    by_gpus = sorted(
        (points[(g, args.gpus_jobs)] for g in gpu_points if (g, args.gpus_jobs) in points),
        key=lambda r: r["gpus"],
    )
    fits = {}
    for name, rows, key in (("jobs", by_jobs, "jobs"), ("gpus", by_gpus, "gpus")):
        if len(rows) > 1:
            fits[name] = fit_power([r[key] for r in rows], [r["wall_s"] for r in rows])[1]
    plot(by_jobs, by_gpus, args.at_gpus, args.gpus_jobs, args.out.parent / PLOT.name)
    million = next((r for r in by_jobs if r["jobs"] >= 1_000_000), None)
    return {
        "schema": "accelnet.bench.sim_scale/v1",
        "timestamp": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": "bench/sim_scale_bench.py " + shlex.join(sys.argv[1:]),
        "policy": args.policy,
        "load": args.load,
        "seed": args.seed,
        "source": source_state(),
        "million": million,
        "philly_x10": philly,
        "growth": {"jobs": by_jobs, "gpus": by_gpus},
        "growth_exponent": fits,
        "target": {"wall_s": 600, "peak_rss_mb": 4096},
        "plot": str(args.out.parent / PLOT.name),
    }


def _row(t: Table, label: str, r: dict[str, Any]) -> None:
    def num(x: float | None, fmt: str = ",.0f") -> str:
        return "-" if x is None else format(x, fmt)

    t.add_row(label, f"{r['jobs']:,}", f"{r['gpus']:,}", f"{r['wall_s']:.1f}",
              num(r["jobs_per_s"]), f"{r['peak_rss_mb']:,.0f}", num(r["avg_jct_s"]),
              num(r["makespan_s"]), num(r["utilization"], ".3f"),
              num(r["avg_queueing_s"]))  # fmt: skip


def report(result: dict[str, Any], console: Console) -> None:
    t = Table(title=f"Simulator at scale ({result['policy']}, generated load {result['load']})")
    for col in ("run", "jobs", "GPUs", "wall (s)", "jobs/s", "peak RSS (MB)", "avg JCT (s)",
                "makespan (s)", "utilization", "avg queueing (s)"):  # fmt: skip
        t.add_column(col, justify="right")
    for r in result["growth"]["jobs"]:
        _row(t, "jobs growth", r)
    for r in result["growth"]["gpus"]:
        _row(t, "GPUs growth", r)
    if result["philly_x10"] is not None:
        _row(t, "Philly x10", result["philly_x10"])
    console.print(t)
    for name, k in result["growth_exponent"].items():
        console.print(f"wall ~ {name}^{k:.2f}")
    m = result["million"]
    if m is not None:
        ok = m["wall_s"] < 600 and m["peak_rss_mb"] < 4096
        console.print(f"1M jobs on {m['gpus']:,} GPUs: {m['wall_s']:.0f} s, "
                      f"{m['peak_rss_mb']:,.0f} MB peak: target (< 600 s, < 4 GiB) "
                      f"{'met' if ok else 'NOT met'}")  # fmt: skip
    console.print(f"src {src_label(result['source'])}; plot: {result['plot']}")


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", default="1000,10000,100000,1000000", help="'' for none")
    parser.add_argument("--at-gpus", type=int, default=16_384, help="GPUs of the jobs series")
    parser.add_argument("--gpus", default="1024,4096,16384,65536,131072", help="'' for none")
    parser.add_argument("--gpus-jobs", type=int, default=100_000, help="jobs of the GPU series")
    parser.add_argument("--policy", default="fifo")
    parser.add_argument("--load", type=float, default=LOAD)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-philly", action="store_true")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument(
        "--reuse",
        action="append",
        default=[],
        metavar="JSON",
        help="take points already measured from this result file (repeatable)",
    )
    args = parser.parse_args(argv)
    run_and_report(args, run, report, args.out)


if __name__ == "__main__":
    main()
