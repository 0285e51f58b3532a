"""Scale benchmark (issue 12): the incremental scheduler on fabrics up to 131,072 GPUs with
queues up to 1,000,000 jobs, and growth curves of it and of the simulator.

**Steady state** (the figure the issue asks for): a fat-tree fabric of ``GPUS`` H100s
(``fat-tree:hosts=GPUS/8,gpus_per_host=8``) is filled by the scheduler itself with running
jobs of 1/2/4/8 GPUs (sched_bench's mix, whole GPUs), and ``QUEUE`` jobs wait (the mix
with 10% half-GPU jobs, 40% needing a host or an NVLink domain, priorities 0-3). Then, for
``--seconds``, the controller's loop as it runs live: ``BATCH`` random running jobs end
(``Session.drop``), one decision (``Session.decide``) is made, its starts are applied
(``Session.put`` as RUNNING) and as many new jobs are queued as started, so the queue
stays at ``QUEUE``. Timed: everything the scheduler does (drops, puts, decisions); not
timed: drawing the random workload. Figures: placements per second of scheduler time
(starts / time), decisions per second, decision latency (median, p99); each the median of
three consecutive runs (the machine is shared and noisy). ``BATCH`` 1 is a
decision after every job end; a busy controller takes all the events a poll brings (10,
100) and decides once. The queue is spread uniformly over ``--tenants`` tenants (1, 20
and 100), and once more at the largest count with ``--quota-tenants`` of them under a
quota of ``QUOTA`` GPUs (the others known, without one).

**Burst**: the same queue on the empty fabric, one decision placing all it can: jobs
placed per second.

**Fabric build**: each size's generated fabric (16,384 hosts of 8 H100s with NVLink
inside and a three-tier fat tree across at 131,072 GPUs): wall time, and the peak of
allocated memory (tracemalloc, a second build).

**LP policies**: min-makespan and hetero-jct allocating for 1k, 10k and 100k queued jobs
of 24 kinds, over classes of jobs alike and (up to 10k) with one column per job.

**Growth**: steady-state FIFO placements/s (batch 1 and 10) against GPUs (1k -> 131k,
queue 100k) and against queue length (1k -> 1M, 16,384 GPUs); with ``--sim``, the
simulator's wall time against jobs and GPUs (bench/sim_scale_bench.py's ``sim_point``).
The fitted growth is the least-squares slope in log-log. Everything lands in one PNG.

Queued jobs of one kind and priority share one spec object (the scheduler keys its caches
by job id, never by spec identity across jobs), so a million queued jobs fit in memory.

Run from the project root::

    .venv/bin/python bench/scale_bench.py [--seconds 3] [--sim] [--quick]
    .venv/bin/python bench/scale_bench.py --steady-only [--tenants 1,20,100] [--batches 1,10]
    .venv/bin/python bench/scale_bench.py --replot --sim-json bench/results/sim_scale.json

Writes ``bench/results/scale.json`` and ``bench/results/scale_growth.png``.
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import statistics
import sys
import time
import tracemalloc
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from accelnet.devices import DeviceState
from accelnet.fabric import Fabric, load_fabric
from accelnet.sched import JobSpec, JobState, JobView, Scheduler, Tenant
from accelnet.sched.jobinfo import JobInfo
from accelnet.sched.policies import hetero_jct, lp, min_makespan
from accelnet.sched.policies.hetero_jct import HeteroJct
from accelnet.sched.policies.min_makespan import MinMakespan
from accelnet.sched.rounds import RoundContext
from accelnet.sched.session import Session
from benchutil import fit_power, run_and_report, source_state, src_label, write_json
from sched_bench import KINDS, draw_kind, make_spec, preload, preset_ref

RESULTS_DIR = Path(__file__).resolve().parent / "results"
RESULTS = RESULTS_DIR / "scale.json"
PLOT = RESULTS_DIR / "scale_growth.png"
TARGET_GPUS = 131_072
TARGET_QUEUE = 100_000
TARGET_RATE = 10_000.0  # placements (and decisions) per second
QUOTA = 64.0  # GPUs (``*``) of each tenant with a quota in the quota variant
GROWTH_GPUS = (1024, 4096, 16_384, 65_536, 131_072)
GROWTH_QUEUES = (1000, 10_000, 100_000, 1_000_000)
GROWTH_QUEUE_GPUS = 16_384


def tenant_names(tenants: int) -> list[str]:
    """The tenants the queue is spread over: ``default`` alone, or ``t00``, ``t01``, ..."""
    if tenants == 1:
        return ["default"]
    return [f"t{i:02d}" for i in range(tenants)]


def tenant_map(tenants: int, quotas: int) -> dict[str, Tenant]:
    """The session's tenants when ``quotas`` of them have one (``*``: QUOTA GPUs each; the
    rest and ``default``, which holds the preloaded jobs, have none); empty if none has."""
    if not quotas:
        return {}
    names = tenant_names(tenants)
    out = {n: Tenant(n, quota={"*": QUOTA} if i < quotas else {}) for i, n in enumerate(names)}
    out.setdefault("default", Tenant("default"))
    return out


def of_tenant(spec: JobSpec, tenant: str) -> JobSpec:
    """``spec`` owned by ``tenant``."""
    return spec if spec.tenant == tenant else spec.model_copy(update={"tenant": tenant})


class Workload:
    """Random jobs of the mix, one spec object per (kind, priority, tenant), each job's
    tenant drawn uniformly from ``tenants``."""

    def __init__(self, rng: random.Random, tenants: int = 1) -> None:
        self.rng = rng
        self.tenants = tenant_names(tenants)
        self.specs: dict[tuple[str, int, str], JobSpec] = {
            (k, p, t): of_tenant(make_spec(f"k{k.replace('.', '_')}-p{p}", k, priority=p), t)
            for k in KINDS
            for p in range(4)
            for t in self.tenants
        }
        self.count = 0

    def job(self, now: float) -> JobView:
        """A new queued job submitted at ``now``."""
        self.count += 1
        rng = self.rng
        tenant = self.tenants[rng.randrange(len(self.tenants))] if len(self.tenants) > 1 else (
            self.tenants[0])  # fmt: skip
        spec = self.specs[(draw_kind(rng), rng.randrange(4), tenant)]
        return JobView(f"q{self.count}", spec, JobState.ADMITTED, now)


Preloaded = tuple[list[JobView], Any, float]  # running jobs, rng state after, seconds


def fill(fabric: Fabric, seed: int) -> Preloaded:
    """The fabric filled by the scheduler with running jobs (drawn from ``seed``)."""
    rng = random.Random(seed)
    t = time.perf_counter()
    running, _ = preload(fabric, rng, 1.0, 1.0)
    return list(running), rng.getstate(), time.perf_counter() - t


def build(
    fabric: Fabric,
    ordering: str,
    queue: int,
    seed: int,
    tenants: int = 1,
    quotas: int = 0,
    filled: Preloaded | None = None,
) -> tuple[Session, list[JobView], Workload, dict[str, float]]:
    """A full fabric (placed by the scheduler) and ``queue`` waiting jobs of ``tenants``
    tenants in a session (``quotas`` of them with a quota; ``filled``: the fabric's running
    jobs made already by :func:`fill` with the same seed)."""
    running, state, t_fill = filled if filled is not None else fill(fabric, seed)
    rng = random.Random()
    rng.setstate(state)
    t = time.perf_counter()
    session = Session(
        Scheduler(ordering, "best-fit", "none"),
        fabric,
        dict.fromkeys(fabric.devices, DeviceState.READY),
        tenant_map(tenants, quotas),
    )
    for job in running:
        session.put(job)
    work = Workload(rng, tenants)
    for _ in range(queue):
        session.put(work.job(1e6))
    session.decide(1e6)  # the first read of the index applies the running jobs
    t_session = time.perf_counter() - t
    return session, list(running), work, {"fill_s": t_fill, "session_s": t_session}


def steady(
    session: Session, running: list[JobView], work: Workload, batch: int, seconds: float
) -> dict[str, Any]:
    """The controller's loop for ``seconds`` of scheduler time (see the module docstring)."""
    rng = work.rng
    now = 2e6
    busy = 0.0
    starts = decisions = 0
    latencies: list[float] = []
    gc.collect()
    while busy < seconds:
        gone = []
        for _ in range(batch):
            k = rng.randrange(len(running))
            gone.append(running[k].id)
            running[k] = running[-1]
            running.pop()
        t0 = time.perf_counter()
        for jid in gone:
            session.drop(jid)
        t1 = time.perf_counter()
        decision = session.decide(now)
        t2 = time.perf_counter()
        placed = decision.starts
        del decision  # as the controller does: a kept decision makes the queue copy its tail
        started = []
        for s in placed:
            job = session._jobs[s.job]
            started.append(replace(job, state=JobState.RUNNING, placement=s.placement,
                                   started_at=now))  # fmt: skip
        fresh = [work.job(now) for _ in placed]
        t3 = time.perf_counter()
        for job in started:
            session.put(job)
        for job in fresh:
            session.put(job)
        t4 = time.perf_counter()
        running += started
        busy += (t1 - t0) + (t2 - t1) + (t4 - t3)
        latencies.append(t2 - t1)
        starts += len(placed)
        decisions += 1
        now += 1.0
    latencies.sort()
    return {
        "batch": batch,
        "scheduler_s": busy,
        "decisions": decisions,
        "starts": starts,
        "placements_per_s": starts / busy,
        "decisions_per_s": decisions / busy,
        "decide_median_us": statistics.median(latencies) * 1e6,
        "decide_p99_us": latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))] * 1e6,
        "queue_after": session.queued(),
    }


def burst(fabric: Fabric, ordering: str, queue: int, seed: int) -> dict[str, Any]:
    """One decision placing ``queue`` jobs' worth on the empty fabric."""
    rng = random.Random(seed)
    session = Session(
        Scheduler(ordering, "best-fit", "none"),
        fabric,
        dict.fromkeys(fabric.devices, DeviceState.READY),
    )
    work = Workload(rng)
    for _ in range(queue):
        session.put(work.job(0.0))
    session.index  # noqa: B018 (built before the clock starts)
    gc.collect()
    t = time.perf_counter()
    decision = session.decide(1.0)
    took = time.perf_counter() - t
    return {"queue": queue, "placed": len(decision.starts), "decide_s": took,
            "placed_per_s": len(decision.starts) / took}  # fmt: skip


def lp_context(jobs: int, kinds: int, seed: int) -> RoundContext:
    """``jobs`` queued jobs of ``kinds`` kinds (rates on three models, gang, work) for the
    round-based LP policies, on 64 + 32 + 16 devices."""
    rng = random.Random(seed)
    models = ("H100-SXM", "A100-SXM4-80GB", "V100")
    shapes = []
    for k in range(kinds):
        rates = {m: round(rng.uniform(0.5, 8.0), 2) for m in models}
        steps = rng.choice((1000.0, 5000.0, 20_000.0))
        shapes.append((k, rates, rng.choice((1, 1, 2, 4)), steps))
    table: dict[str, dict[str, float]] = {}
    views = []
    for i in range(jobs):
        k, rates, gang, steps = shapes[rng.randrange(kinds)]
        spec = JobSpec.model_validate({"name": f"k{k}", "run": "x", "workload":
                                       {"total_steps": steps},
                                       "resources": {"accelerators": f"any:{gang}"}})  # fmt: skip
        views.append(JobView(f"j{i}", spec, JobState.ADMITTED, float(i)))
        table[f"k{k}"] = rates

    def rate(spec: JobSpec, model: str, count: int) -> float:
        return table[spec.name][model] * count

    capacity = {"H100-SXM": 64, "A100-SXM4-80GB": 32, "V100": 16}
    return RoundContext.of(views, capacity, JobInfo(10.0, rate))


def lp_point(jobs: int, kinds: int, seed: int, per_job: bool) -> dict[str, Any]:
    """Time to allocate with min-makespan and hetero-jct, over classes (or per job)."""
    ctx = lp_context(jobs, kinds, seed)
    out: dict[str, Any] = {"jobs": jobs, "kinds": kinds, "per_job": per_job}
    saved = (lp.CLASSES_ABOVE, min_makespan.CLASSES_ABOVE, hetero_jct.CLASSES_ABOVE)
    limit = 10**12 if per_job else 0
    lp.CLASSES_ABOVE = min_makespan.CLASSES_ABOVE = hetero_jct.CLASSES_ABOVE = limit
    try:
        for name, policy in (("min-makespan", MinMakespan()), ("hetero-jct", HeteroJct())):
            t = time.perf_counter()
            x = policy.allocate(ctx)
            out[f"{name}_s"] = time.perf_counter() - t
            out[f"{name}_jobs"] = len(x)
    finally:
        lp.CLASSES_ABOVE, min_makespan.CLASSES_ABOVE, hetero_jct.CLASSES_ABOVE = saved
    return out


def slope(xs: Sequence[float], ys: Sequence[float]) -> float:
    """The exponent of the least-squares fit ``y = a * x^k``."""
    return fit_power(xs, ys)[1]


def point(gpus: int, queue: int, seed: int, seconds: float, orderings: Sequence[str],
          batches: Sequence[int], repeats: int = 3,
          tenant_sets: Sequence[tuple[int, int]] = ((1, 0),)) -> dict[str, Any]:  # fmt: skip
    """Steady-state figures at one size, every ordering, tenant set (tenants, how many of
    them with a quota) and batch: medians of ``repeats`` runs of ``seconds / repeats`` of
    scheduler time each."""
    gc.collect()
    t = time.perf_counter()
    fabric = load_fabric(preset_ref(gpus))
    built = time.perf_counter() - t
    del fabric
    gc.collect()
    tracemalloc.start()
    fabric = load_fabric(preset_ref(gpus))
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    out: dict[str, Any] = {"gpus": gpus, "queue": queue, "runs": [], "fabric_s": built,
                           "fabric_peak_mib": peak / 2**20}  # fmt: skip
    filled = fill(fabric, seed)
    for ordering in orderings:
        for tenants, quotas in tenant_sets:
            session, running, work, setup = build(fabric, ordering, queue, seed, tenants,
                                                  quotas, filled)  # fmt: skip
            for batch in batches:
                runs = [steady(session, running, work, batch, seconds / repeats)
                        for _ in range(repeats)]  # fmt: skip
                rates = sorted(r["placements_per_s"] for r in runs)
                run = {**runs[0], "placements_per_s": statistics.median(rates),
                       "placements_per_s_all": rates,
                       "decisions_per_s": statistics.median(r["decisions_per_s"] for r in runs),
                       "decisions_per_s_all": sorted(r["decisions_per_s"] for r in runs),
                       "decide_median_us": statistics.median(r["decide_median_us"]
                                                             for r in runs),
                       "decide_p99_us": statistics.median(r["decide_p99_us"] for r in runs),
                       "starts": sum(r["starts"] for r in runs),
                       "decisions": sum(r["decisions"] for r in runs),
                       "scheduler_s": sum(r["scheduler_s"] for r in runs)}  # fmt: skip
                out["runs"].append({"ordering": ordering, "tenants": tenants,
                                    "quota_tenants": quotas, **setup, **run})  # fmt: skip
            del session, running, work
            gc.collect()
    return out


def run(args: argparse.Namespace, console: Console) -> dict[str, Any]:
    """Every figure of the module docstring."""
    quick = args.quick
    gpus_list = (1024, 16_384) if quick else GROWTH_GPUS
    queues = (1000, 10_000) if quick else GROWTH_QUEUES
    target = (16_384, 10_000) if quick else (TARGET_GPUS, TARGET_QUEUE)
    tasks: list[tuple[str, Callable[[], Any]]] = []
    result: dict[str, Any] = {
        "source": source_state(),
        "args": {k: str(v) for k, v in vars(args).items()},
        "growth_gpus": [],
        "growth_queue": [],
        "sim": [],
    }

    def at_target() -> None:
        result["target"] = point(*target, args.seed, args.seconds, ("fifo", "priority"),
                                 args.batches, tenant_sets=tenant_sets(args))  # fmt: skip
        result["burst"] = [burst(load_fabric(preset_ref(target[0])), o, target[1], args.seed)
                           for o in ("fifo", "priority")]  # fmt: skip

    tasks.append((f"{target[0]:,} GPUs, {target[1]:,} queued", at_target))
    if args.steady_only:
        previous = json.loads(args.out.read_text(encoding="utf-8")) if args.out.exists() else {}
        for key in ("growth_gpus", "growth_queue", "sim", "lp"):
            result[key] = previous.get(key, [])
        result["kept_from"] = previous.get("source")  # the other figures' code
        _progress(tasks, console)
        result["plot"] = previous.get("plot")
        return result
    for g in gpus_list:
        q = min(TARGET_QUEUE, target[1])
        tasks.append((f"growth: {g:,} GPUs", lambda g=g, q=q: result["growth_gpus"].append(
            point(g, q, args.seed, args.seconds / 2, ("fifo",), (1, 10)))))  # fmt: skip
    for q in queues:
        g = min(GROWTH_QUEUE_GPUS, target[0])
        tasks.append((f"growth: {q:,} queued", lambda g=g, q=q: result["growth_queue"].append(
            point(g, q, args.seed, args.seconds / 2, ("fifo",), (1, 10)))))  # fmt: skip
    result["lp"] = []
    for jobs in (1000, 10_000) if quick else (1000, 10_000, 100_000):
        for per_job in (False, True) if jobs <= 10_000 else (False,):
            tasks.append((f"LP: {jobs:,} jobs{' per job' if per_job else ''}",
                          lambda jobs=jobs, per_job=per_job: result["lp"].append(
                              lp_point(jobs, 24, args.seed, per_job))))  # fmt: skip
    if args.sim:
        from sim_scale_bench import sim_point

        for jobs in (1000, 10_000, 100_000) if quick else (1000, 10_000, 100_000, 1_000_000):
            tasks.append((f"sim: {jobs:,} jobs", lambda jobs=jobs: result["sim"].append(
                {"axis": "jobs", **sim_point(16_384, jobs, args.seed, "fifo")})))  # fmt: skip
        for g in (1024, 4096, 16_384) if quick else GROWTH_GPUS:
            tasks.append((f"sim: {g:,} GPUs", lambda g=g: result["sim"].append(
                {"axis": "gpus", **sim_point(g, 100_000, args.seed, "fifo")})))  # fmt: skip
    _progress(tasks, console)
    result["plot"] = plot(result, PLOT)
    return result


def tenant_sets(args: argparse.Namespace) -> list[tuple[int, int]]:
    """(tenants, how many with a quota) of the steady state: each of ``--tenants`` without
    quotas, then the largest with ``--quota-tenants`` of them under a quota."""
    sets = [(n, 0) for n in args.tenants]
    if args.quota_tenants:
        sets.append((max(args.tenants), min(args.quota_tenants, max(args.tenants))))
    return sets


def _progress(tasks: Sequence[tuple[str, Callable[[], Any]]], console: Console) -> None:
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
               TimeElapsedColumn())  # fmt: skip
    with Progress(*columns, console=console) as progress:
        bar = progress.add_task("scale", total=len(tasks))
        for label, fn in tasks:
            progress.update(bar, description=label)
            fn()
            progress.advance(bar)


def _series(points: list[dict[str, Any]], axis: str, batch: int) -> tuple[list[float], list[float]]:
    xs, ys = [], []
    for p in points:
        for r in p["runs"]:
            if r["batch"] == batch and r["ordering"] == "fifo" and r.get("tenants", 1) == 1:
                xs.append(float(p[axis]))
                ys.append(r["placements_per_s"])
    return xs, ys


def plot(result: dict[str, Any], path: Path) -> str | None:
    """The growth curves, one PNG; its path (None without matplotlib)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    sims = result["sim"]
    panels = 4 if sims else 2
    fig, axes = plt.subplots(1, panels, figsize=(5 * panels, 4))
    for ax, key, axis, label in (
        (axes[0], "growth_gpus", "gpus", f"GPUs (queue {TARGET_QUEUE:,})"),
        (axes[1], "growth_queue", "queue", f"queued jobs ({GROWTH_QUEUE_GPUS:,} GPUs)"),
    ):
        for batch, style in ((1, "o-"), (10, "s--")):
            xs, ys = _series(result[key], axis, batch)
            if len(xs) > 1:
                ax.plot(xs, ys, style, label=f"batch {batch}: ~n^{slope(xs, ys):.2f}")
        ax.axhline(TARGET_RATE, color="grey", linestyle=":", label="10,000/s")
        ax.set(xscale="log", yscale="log", xlabel=label, ylabel="placements / s (FIFO)",
               title="scheduler, steady state")  # fmt: skip
        ax.legend(fontsize=8)
    for ax, axis, label in ((axes[2], "jobs", "jobs (16,384 GPUs)"),
                            (axes[3], "gpus", "GPUs (100k jobs)")) if sims else ():  # fmt: skip
        pts = sorted((p[axis], p["wall_s"]) for p in sims if p["axis"] == axis)
        if len(pts) > 1:
            xs, ys = [float(x) for x, _ in pts], [float(y) for _, y in pts]
            ax.plot(xs, ys, "o-", label=f"~n^{slope(xs, ys):.2f}")
            ax.legend(fontsize=8)
        ax.set(xscale="log", yscale="log", xlabel=label, ylabel="wall time (s)",
               title="simulator, FIFO")  # fmt: skip
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return str(path)


def tenants_label(run: dict[str, Any]) -> str:
    """``100`` tenants, or ``100 (10 quota)``."""
    label = f"{run.get('tenants', 1)}"
    return label + (f" ({run['quota_tenants']} quota)" if run.get("quota_tenants") else "")


def report(result: dict[str, Any], console: Console) -> None:
    """Tables of the figures."""
    t = result["target"]
    table = Table(title=f"{t['gpus']:,} GPUs, {t['queue']:,} queued, steady state "
                        f"({src_label(result['source'])})")  # fmt: skip
    for col in ("ordering", "tenants", "batch", "placements/s", "decisions/s",
                "decide median µs", "decide p99 µs", "queue after", "fill s",
                "session s"):  # fmt: skip
        table.add_column(col, justify="right")
    for r in t["runs"]:
        table.add_row(r["ordering"], tenants_label(r), str(r["batch"]),
                      f"{r['placements_per_s']:,.0f}",
                      f"{r['decisions_per_s']:,.0f}", f"{r['decide_median_us']:,.0f}",
                      f"{r['decide_p99_us']:,.0f}", f"{r['queue_after']:,}",
                      f"{r['fill_s']:.1f}", f"{r['session_s']:.1f}")  # fmt: skip
    console.print(table)
    for b in result["burst"]:
        console.print(f"burst: {b['placed']:,} placed from {b['queue']:,} queued in "
                      f"{b['decide_s']:.2f} s = {b['placed_per_s']:,.0f}/s")  # fmt: skip
    growth = Table(title="growth, FIFO placements/s (batch 1 / batch 10)")
    for col in ("GPUs", "queued", "batch 1", "batch 10", "decide median µs (batch 1)",
                "fabric build s", "build peak MiB", "session s"):  # fmt: skip
        growth.add_column(col, justify="right")
    for p in result["growth_gpus"] + result["growth_queue"]:
        by = {r["batch"]: r for r in p["runs"]}
        one, ten = by[1], by[10]
        growth.add_row(
            f"{p['gpus']:,}",
            f"{p['queue']:,}",
            f"{one['placements_per_s']:,.0f}",
            f"{ten['placements_per_s']:,.0f}",
            f"{one['decide_median_us']:,.0f}",
            f"{p['fabric_s']:.2f}",
            f"{p['fabric_peak_mib']:.0f}",
            f"{one['session_s']:.1f}",
        )
    console.print(growth)
    for key, axis in (("growth_gpus", "gpus"), ("growth_queue", "queue")):
        for batch in (1, 10):
            xs, ys = _series(result[key], axis, batch)
            if len(xs) > 1:
                console.print(f"{axis}: batch {batch} placements/s ~ n^{slope(xs, ys):.2f}")
    for row in result["lp"]:
        how = "one column per job" if row["per_job"] else "classes"
        mm, jct = row["min-makespan_s"], row["hetero-jct_s"]
        console.print(f"LP {row['jobs']:,} jobs, {row['kinds']} kinds, {how}: "
                      f"min-makespan {mm:.2f} s, hetero-jct {jct:.2f} s")  # fmt: skip
    for s in result["sim"]:
        console.print(f"sim {s['axis']}: {s['gpus']:,} GPUs, {s['jobs']:,} jobs: "
                      f"{s['wall_s']:.1f} s, peak {s['peak_rss_mb']:.0f} MB")  # fmt: skip
    if result.get("plot"):
        console.print(f"plot: {result['plot']}")


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Command-line options."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seconds", type=float, default=3.0, help="scheduler time per run")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--sim", action="store_true", help="also the simulator's growth curves")
    p.add_argument("--quick", action="store_true", help="small sizes only (a smoke run)")
    p.add_argument("--tenants", type=_ints, default=(1, 20, 100),
                   help="steady state: the tenant counts the queue is spread over")  # fmt: skip
    p.add_argument("--quota-tenants", type=int, default=10,
                   help=f"steady state: one more run at the largest tenant count with this "
                        f"many tenants under a quota of {QUOTA:g} GPUs (0: none)")  # fmt: skip
    p.add_argument("--batches", type=_ints, default=(1, 10, 100),
                   help="steady state: job ends per decision")  # fmt: skip
    p.add_argument("--steady-only", action="store_true",
                   help="only the steady state and burst at the target size; the other "
                        "figures are kept from --out")  # fmt: skip
    p.add_argument("--out", type=Path, default=RESULTS)
    p.add_argument(
        "--replot",
        action="store_true",
        help="draw the plot again from --out (and --sim-json) without measuring",
    )
    p.add_argument("--sim-json", type=Path, default=None,
                   help="with --replot: sim points from bench/sim_scale_bench.py")  # fmt: skip
    return p.parse_args(argv)


def _ints(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.split(",") if x.strip())


def sim_points(path: Path) -> list[dict[str, Any]]:
    """The growth points of bench/sim_scale_bench.py's result file, as ``--sim`` makes them."""
    data = json.loads(path.read_text(encoding="utf-8"))
    return [{"axis": axis, **p} for axis in ("jobs", "gpus") for p in data["growth"][axis]]


def main(argv: Sequence[str] | None = None) -> None:
    """Run, write the JSON, print the tables (or, with ``--replot``, only draw again)."""
    args = parse_args(argv)
    if args.replot:
        result = json.loads(args.out.read_text(encoding="utf-8"))
        if args.sim_json is not None:
            result["sim"] = sim_points(args.sim_json)
            result["sim_from"] = str(args.sim_json)
        result["plot"] = plot(result, PLOT)
        write_json(result, args.out)
        report(result, Console(width=140))
        return
    run_and_report(args, run, report, args.out)


if __name__ == "__main__":
    sys.setrecursionlimit(10_000)
    main()
