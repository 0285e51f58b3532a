"""Scheduler benchmark: placement latency and whole decisions on 1k-, 16k- and 65k-GPU fabrics.

For every fabric size in ``--sizes`` (GPUs; the fabric is
``fat-tree:hosts=GPUS/8,gpus_per_host=8``, H100 GPUs) the benchmark first loads the fabric
to about ``--load`` (60%) with running jobs, *placed by the scheduler itself* so that the
state is realistic and fragmented: whole-GPU jobs of 1/2/4/8 GPUs (the request mix below
without its fractional part) are queued until they ask for ``--fill`` (85%) of the GPUs, one
FIFO best-fit ``decide`` places them on the empty fabric, and then randomly chosen ones
finish until at most ``--load`` of the GPUs are held. Then, all in one run so that every
ratio is side by side on the same machine:

1. **Index build**: ``Scheduler.capacity(snapshot)`` (free shares and per-domain counts from
   the snapshot's device states and running jobs), median over ``--repeats``. The
   :class:`Topology` is cached by the scheduler between decisions, so it is built once,
   untimed, before (its one-off build time is reported apart).
2. **Placement latency**: ``scheduler.placement.place(request, index)`` for ``--requests``
   (2,000) random requests, each call timed alone with ``time.perf_counter_ns``; the index
   is built once and never changed (``place`` does not change it), so every call sees the
   same 60%-loaded state. Request mix: 10% ``H100:0.5`` (a half share); of the rest, 50%
   1 GPU, 20% 2 GPUs, 20% 4 GPUs (half of them with ``topology.required: host``) and 10%
   8 GPUs with ``topology.required: nvlink``. Median, p90 and p99 (µs) over all
   ``requests x repeats`` calls, best-fit; first-fit is timed on the same requests and index,
   interleaved with best-fit in every repeat, for the best-fit/first-fit ratio.
3. **Decisions**: a full ``Scheduler(ordering, "best-fit", "none").decide(snapshot)`` with
   ``--queue`` (10,000) queued jobs of the same mix (priorities 0-3, distinct submission
   times) on the same loaded fabric, FIFO and priority orderings: wall time (median over
   ``--repeats``; it includes the index build), jobs considered per second (queue / time),
   starts made, and jobs placed per second (starts / time).
4. **Growth**: the least-squares slope of log(time) against log(GPUs) over the sizes, for
   the decide time and the median placement latency ("~O(n^slope)").

A sanity check (not a test) runs outside the timings: every placement and every start has
the right number of distinct, free devices inside one domain of the required level, and no
start overlaps a running job or over-commits a device.

Run from the project root::

    .venv/bin/python bench/sched_bench.py [--sizes 1024,16384,65536] [--queue 10000]
                                          [--repeats 5] [--seed 0]

It prints a table and writes ``bench/results/sched.json`` (parameters, every per-call and
per-repeat sample, medians, percentiles, exponents, the git commit and whether ``src/`` has
uncommitted changes) and, if matplotlib is installed, ``bench/results/sched_growth.png``.
Garbage collection is left on, as in real use, but a full collection runs before each timed
section.
"""

from __future__ import annotations

import argparse
import gc
import math
import os
import platform
import random
import re
import shlex
import statistics
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from importlib.metadata import version
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from accelnet.fabric import DomainLevel, Fabric, load_preset
from accelnet.sched import JobSpec, JobState, JobView, Placement, Scheduler, Snapshot
from accelnet.sched.capacity import CapacityIndex
from accelnet.sched.request import Request, make_request
from accelnet.sched.topology import Topology
from benchutil import run_and_report, source_state, src_label

RESULTS_DIR = Path(__file__).resolve().parent / "results"
RESULTS = RESULTS_DIR / "sched.json"
PLOT = RESULTS_DIR / "sched_growth.png"
GPUS_PER_HOST = 8
MODEL = "H100"
NUMBER_LIST = re.compile(r"\[\s*([-+.\deE]+(?:,\s*[-+.\deE]+)*)\s*\]")
TARGET_SIZE = 16_384
TARGET_US = 1000.0
ORDERINGS = ("fifo", "priority")
STRATEGIES = ("best-fit", "first-fit")
HOST_ROW = "best-fit, CPU+memory"  # best-fit on the same requests asking for cores and RAM
HOST_CPUS, HOST_MEMORY_GB = 224, 2048  # what every host declares (a DGX H100's)
CPUS_PER_RANK, MEMORY_GB_PER_RANK = 24.0, 224.0  # 8 ranks: 192 of 224 cores, 1,792 GB

# Request kinds: (accelerators, required topology level or None).
KINDS: dict[str, tuple[str, str | None]] = {
    "1": (f"{MODEL}:1", None),
    "2": (f"{MODEL}:2", None),
    "4": (f"{MODEL}:4", None),
    "4-host": (f"{MODEL}:4", "host"),
    "8-nvlink": (f"{MODEL}:8", "nvlink"),
    "0.5": (f"{MODEL}:0.5", None),
}
FRACTIONAL_P = 0.10


def draw_kind(rng: random.Random, fractional: bool = True) -> str:
    """One request kind of the mix (10% ``0.5`` if ``fractional``; then 50/20/20/10)."""
    if fractional and rng.random() < FRACTIONAL_P:
        return "0.5"
    r = rng.random()
    if r < 0.5:
        return "1"
    if r < 0.7:
        return "2"
    if r < 0.9:
        return "4-host" if rng.random() < 0.5 else "4"
    return "8-nvlink"


def gpus_of(kind: str) -> float:
    """GPUs (or share of one) that a kind asks for."""
    acc = KINDS[kind][0]
    return float(acc.rpartition(":")[2])


def make_spec(name: str, kind: str, priority: int = 0, host: bool = False) -> JobSpec:
    """A validated job spec of ``kind`` (``host``: asking for CPU cores and memory per
    rank too, half as much for a half share)."""
    acc, required = KINDS[kind]
    resources: dict[str, Any] = {"accelerators": acc}
    if host:
        part = min(1.0, gpus_of(kind))
        resources |= {"cpus": CPUS_PER_RANK * part, "memory_gb": MEMORY_GB_PER_RANK * part}
    doc: dict[str, Any] = {
        "name": name,
        "priority": priority,
        "resources": resources,
        "run": "true",
    }
    if required is not None:
        doc["topology"] = {"required": required}
    return JobSpec.model_validate(doc)


def preset_ref(gpus: int) -> str:
    """The generator reference of a fabric with ``gpus`` GPUs."""
    return (
        f"fat-tree:hosts={gpus // GPUS_PER_HOST},gpus_per_host={GPUS_PER_HOST},"
        f"cpus_per_host={HOST_CPUS},memory_gb_per_host={HOST_MEMORY_GB}"
    )


def preload(
    fabric: Fabric, rng: random.Random, fill: float, load: float
) -> tuple[tuple[JobView, ...], dict[str, Any]]:
    """Running jobs holding about ``load`` of the GPUs, placed by the scheduler (see top)."""
    n = len(fabric.devices)
    queued: list[JobView] = []
    asked = 0.0
    i = 0
    while asked < fill * n:
        kind = draw_kind(rng, fractional=False)
        spec = make_spec(f"r{i}", kind, host=True)
        queued.append(JobView(f"r{i}", spec, JobState.ADMITTED, submitted_at=float(i)))
        asked += gpus_of(kind)
        i += 1
    decision = Scheduler("fifo", "best-fit", "none").decide(
        Snapshot.all_ready(fabric, tuple(queued), now=float(i))
    )
    by_id = {j.id: j for j in queued}
    running = [
        JobView(
            s.job,
            by_id[s.job].spec,
            JobState.RUNNING,
            submitted_at=by_id[s.job].submitted_at,
            started_at=float(i),
            placement=s.placement,
        )
        for s in decision.starts
    ]
    placed_jobs = len(running)
    held = sum(len(j.placement.devices) for j in running if j.placement)
    peak = held
    rng.shuffle(running)
    while running and held > load * n:
        gone = running.pop()
        assert gone.placement is not None
        held -= len(gone.placement.devices)
    running.sort(key=lambda j: int(j.id[1:]))
    stats = {
        "queued_for_fill": len(queued),
        "placed_by_fill": placed_jobs,
        "held_after_fill": peak,
        "running_jobs": len(running),
        "held_gpus": held,
        "load": held / n,
    }
    return tuple(running), stats


def fragmentation(index: CapacityIndex) -> dict[str, int]:
    """Hosts wholly free, partly used and full, and wholly free GPUs, from ``index``."""
    host_of = index.topo.domain_of[DomainLevel.HOST]
    hosts = list(dict.fromkeys(host_of.values()))
    per_host = Counter[str]()
    size = Counter[str]()
    for dev, host in host_of.items():
        size[host] += 1
        if index.is_whole(dev):
            per_host[host] += 1
    free_hosts = sum(1 for h in hosts if per_host[h] == size[h])
    full_hosts = sum(1 for h in hosts if per_host[h] == 0)
    return {
        "hosts": len(hosts),
        "hosts_wholly_free": free_hosts,
        "hosts_partly_used": len(hosts) - free_hosts - full_hosts,
        "hosts_full": full_hosts,
        "gpus_wholly_free": sum(per_host.values()),
    }


def make_requests(
    n: int, rng: random.Random, topo: Topology
) -> tuple[list[str], list[Request], list[Request]]:
    """``n`` requests of the mix: their kinds, the placement requests, and the same asking
    for CPU cores and memory too."""
    kinds = [draw_kind(rng) for _ in range(n)]
    specs = {k: make_spec(f"kind-{k.replace('.', '_')}", k) for k in KINDS}
    hosts = {k: make_spec(f"kind-{k.replace('.', '_')}", k, host=True) for k in KINDS}
    return (
        kinds,
        [make_request(f"p{i}", specs[k], topo) for i, k in enumerate(kinds)],
        [make_request(f"h{i}", hosts[k], topo) for i, k in enumerate(kinds)],
    )


def make_queue(
    n: int, rng: random.Random, first_submit: float
) -> tuple[list[JobView], Counter[str]]:
    """``n`` queued jobs of the mix, priorities 0-3, submitted 10 ms apart."""
    jobs: list[JobView] = []
    kinds = Counter[str]()
    for i in range(n):
        kind = draw_kind(rng)
        kinds[kind] += 1
        spec = make_spec(f"q{i}", kind, priority=rng.randrange(4))
        jobs.append(JobView(f"q{i}", spec, JobState.ADMITTED, first_submit + i * 0.01))
    return jobs, kinds


def time_places(
    place: Callable[[Request, CapacityIndex], Placement | None],
    requests: Sequence[Request],
    index: CapacityIndex,
) -> tuple[list[int], int]:
    """Nanoseconds of each ``place`` call (each timed alone), and how many were placed."""
    clock = time.perf_counter_ns
    out: list[int] = []
    placed = 0
    gc.collect()
    for req in requests:
        start = clock()
        got = place(req, index)
        out.append(clock() - start)
        placed += got is not None
    return out, placed


def timer_overhead_ns(n: int = 20_000) -> int:
    """Median of two back-to-back ``perf_counter_ns`` calls (included in every sample)."""
    clock = time.perf_counter_ns
    xs = []
    for _ in range(n):
        a = clock()
        xs.append(clock() - a)
    return int(statistics.median(xs))


def check_placement(
    req: Request, p: Placement, index: CapacityIndex, free: dict[str, float]
) -> None:
    """Sanity check of one placement against the free shares ``free`` (raises)."""
    topo = index.topo
    want = 1 if req.share < 1 else req.count
    if len(p.devices) != want or len(set(p.devices)) != want:
        raise AssertionError(f"{req.job}: {len(p.devices)} devices for {req.what()}")
    if abs(p.share - req.share) > 1e-9:
        raise AssertionError(f"{req.job}: share {p.share} for {req.share}")
    for d in p.devices:
        if free.get(d, 0.0) < p.share - 1e-9:
            raise AssertionError(f"{req.job}: {d} has {free.get(d, 0.0)} free, takes {p.share}")
        if topo.class_of[d].key not in {c.key for c in req.classes}:
            raise AssertionError(f"{req.job}: {d} is not of an eligible class")
    if req.required is not None:
        level = req.required
        doms = {topo.domain_of[level][d] for d in p.devices}
        if len(doms) != 1:
            raise AssertionError(f"{req.job}: spans {len(doms)} {level.value} domains")
    span_doms = {topo.domain_of[p.span][d] for d in p.devices}
    if len(span_doms) != 1:
        raise AssertionError(f"{req.job}: span {p.span.value} but {len(span_doms)} domains")
    if req.needs_host and not (p.hosts and index.host_fits(p.hosts)):
        raise AssertionError(f"{req.job}: hosts {p.hosts} lack the cores or memory")


def check_decision(starts: Sequence[tuple[Request, Placement]], index: CapacityIndex) -> None:
    """Starts in order never over-commit a device (``index`` holds the free shares before)."""
    free = dict(index.free)
    for req, p in starts:
        check_placement(req, p, index, free)
        for d in p.devices:
            free[d] = free.get(d, 0.0) - p.share


def percentile(xs: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0-100) with linear interpolation between closest ranks."""
    s = sorted(xs)
    if len(s) == 1:
        return float(s[0])
    pos = (len(s) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def latency_summary(ns: Sequence[int]) -> dict[str, float]:
    """Median, p90, p99, mean, min and max of per-call samples, in µs."""
    return {
        "median_us": percentile(ns, 50) / 1e3,
        "p90_us": percentile(ns, 90) / 1e3,
        "p99_us": percentile(ns, 99) / 1e3,
        "mean_us": statistics.fmean(ns) / 1e3,
        "min_us": min(ns) / 1e3,
        "max_us": max(ns) / 1e3,
    }


def growth_exponent(xs: Sequence[float], ys: Sequence[float]) -> tuple[float, str]:
    """Least-squares slope of log(y) on log(x) (numpy if installed, else by hand)."""
    lx = [math.log(x) for x in xs]
    ly = [math.log(y) for y in ys]
    try:
        import numpy as np  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        mx, my = statistics.fmean(lx), statistics.fmean(ly)
        num = sum((a - mx) * (b - my) for a, b in zip(lx, ly, strict=True))
        den = sum((a - mx) ** 2 for a in lx)
        return num / den, "by hand"
    return float(np.polyfit(lx, ly, 1)[0]), "numpy.polyfit"


def measure_placement(
    schedulers: dict[str, Scheduler],
    requests: Sequence[Request],
    host_requests: Sequence[Request],
    kinds: Sequence[str],
    index: CapacityIndex,
    repeats: int,
    progress: Progress,
    label: str,
) -> dict[str, Any]:
    """Per-call ``place`` latency of every strategy, interleaved (and best-fit on the
    requests that ask for cores and memory, as :data:`HOST_ROW`); then a sanity check."""
    task = progress.add_task(f"{label}: placement", total=repeats)
    rows = (*STRATEGIES, HOST_ROW)
    place_ns: dict[str, list[list[int]]] = {s: [] for s in rows}
    placed: dict[str, int] = {}
    asked = {**dict.fromkeys(STRATEGIES, requests), HOST_ROW: host_requests}
    strategy = {**{s: s for s in STRATEGIES}, HOST_ROW: "best-fit"}
    for r in range(repeats):
        order = rows if r % 2 == 0 else tuple(reversed(rows))
        for s in order:
            place = schedulers[strategy[s]].placement.place
            ns, placed[s] = time_places(place, asked[s], index)
            place_ns[s].append(ns)
        progress.advance(task)
    free, cpu, mem = dict(index.free), dict(index.cpu), dict(index.mem)
    for s in rows:
        for req in asked[s]:
            p = schedulers[strategy[s]].placement.place(req, index)
            if p is not None:
                check_placement(req, p, index, free)
    if (index.free, index.cpu, index.mem) != (free, cpu, mem):
        raise AssertionError("place() changed the index")
    out: dict[str, Any] = {}
    for s in rows:
        flat = [x for rep in place_ns[s] for x in rep]
        per_kind: dict[str, float] = {}
        for kind in KINDS:
            mine = [rep[i] for rep in place_ns[s] for i, k in enumerate(kinds) if k == kind]
            if mine:
                per_kind[kind] = percentile(mine, 50) / 1e3
        out[s] = {
            **latency_summary(flat),
            "median_per_repeat_us": [percentile(rep, 50) / 1e3 for rep in place_ns[s]],
            "median_per_kind_us": per_kind,
            "placed": placed[s],
            "samples_ns": place_ns[s],
        }
    return out


def measure_decide(
    snapshot: Snapshot,
    queue: Sequence[JobView],
    topo: Topology,
    index: CapacityIndex,
    repeats: int,
    progress: Progress,
    label: str,
) -> dict[str, Any]:
    """Wall time and starts of a whole ``decide`` per ordering, interleaved; sanity check."""
    deciders = {o: Scheduler(o, "best-fit", "none") for o in ORDERINGS}
    for d in deciders.values():
        d.topology(snapshot.fabric)  # the cached topology, as between real decisions
    task = progress.add_task(f"{label}: decide", total=repeats * len(ORDERINGS))
    decide_s: dict[str, list[float]] = {o: [] for o in ORDERINGS}
    starts: dict[str, int] = {}
    for r in range(repeats):
        order = ORDERINGS if r % 2 == 0 else tuple(reversed(ORDERINGS))
        for o in order:
            gc.collect()
            start = time.perf_counter()
            decision = deciders[o].decide(snapshot)
            decide_s[o].append(time.perf_counter() - start)
            if o in starts and starts[o] != len(decision.starts):
                raise AssertionError(f"{o}: {len(decision.starts)} starts, before {starts[o]}")
            starts[o] = len(decision.starts)
            if r == 0:
                reqs = {j.id: make_request(j.id, j.spec, topo) for j in queue}
                check_decision([(reqs[s.job], s.placement) for s in decision.starts], index)
                if len(decision.starts) + len(decision.waiting) != len(queue):
                    raise AssertionError(f"{o}: a queued job is neither started nor waiting")
            del decision
            progress.advance(task)
    out: dict[str, Any] = {}
    for o in ORDERINGS:
        med = statistics.median(decide_s[o])
        out[o] = {
            "median_s": med,
            "min_s": min(decide_s[o]),
            "samples_s": decide_s[o],
            "starts": starts[o],
            "considered_per_s": len(queue) / med,
            "placed_per_s": starts[o] / med,
        }
    return out


def bench_size(
    gpus: int, args: argparse.Namespace, progress: Progress, seed: int
) -> dict[str, Any]:
    """Every measurement on one fabric size; the JSON-ready result."""
    rng = random.Random(seed)
    ref = preset_ref(gpus)
    label = f"{gpus:,} GPUs"
    task = progress.add_task(f"{label}: build, load to {args.load:.0%}", total=1)
    start = time.perf_counter()
    fabric = load_preset(ref)
    fabric_build_s = time.perf_counter() - start
    running, load_stats = preload(fabric, rng, args.fill, args.load)
    base = Snapshot.all_ready(fabric, running, now=1e6)
    progress.advance(task)

    schedulers = {s: Scheduler("fifo", s, "none") for s in STRATEGIES}
    start = time.perf_counter()
    topo = schedulers["best-fit"].topology(fabric)
    topology_build_s = time.perf_counter() - start
    schedulers["first-fit"].topology(fabric)

    task = progress.add_task(f"{label}: index build", total=args.repeats)
    index_s: list[float] = []
    for _ in range(args.repeats):
        gc.collect()
        start = time.perf_counter()
        index = schedulers["best-fit"].capacity(base)
        index_s.append(time.perf_counter() - start)
        progress.advance(task)

    kinds, requests, host_requests = make_requests(args.requests, rng, topo)
    placement = measure_placement(
        schedulers, requests, host_requests, kinds, index, args.repeats, progress, label
    )
    queue, queue_kinds = make_queue(args.queue, random.Random(seed + 1), first_submit=9e5)
    snapshot = Snapshot.all_ready(fabric, running + tuple(queue), now=1e6)
    decide = measure_decide(snapshot, queue, topo, index, args.repeats, progress, label)
    return {
        "gpus": len(fabric.devices),
        "preset": ref,
        "fabric_build_s": fabric_build_s,
        "topology_build_s": topology_build_s,
        "preload": load_stats,
        "fragmentation": fragmentation(index),
        "index_build": {"median_s": statistics.median(index_s), "samples_s": index_s},
        "requests": {"n": len(requests), "kinds": dict(Counter(kinds))},
        "placement": placement,
        "queue": {"n": len(queue), "kinds": dict(queue_kinds)},
        "decide": decide,
    }


def plot(sizes: list[dict[str, Any]], path: Path) -> str | None:
    """Log-log plot of decide time and placement latency vs GPUs; None, or why skipped."""
    try:
        import matplotlib  # type: ignore[import-not-found,unused-ignore]

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        return "matplotlib is not installed in the venv"
    gpus = [s["gpus"] for s in sizes]
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    for o in ORDERINGS:
        left.plot(gpus, [s["decide"][o]["median_s"] * 1e3 for s in sizes], "o-", label=o)
    left.set(xscale="log", yscale="log", xlabel="GPUs", ylabel="decide, ms (median)")
    left.set_title("decide with the queue, best-fit")
    left.legend()
    for st in STRATEGIES:
        right.plot(gpus, [s["placement"][st]["median_us"] for s in sizes], "o-", label=st)
    right.set(xscale="log", yscale="log", xlabel="GPUs", ylabel="place(), µs (median)")
    right.set_title("one placement, 60% loaded")
    right.legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return None


def run(args: argparse.Namespace, console: Console) -> dict[str, Any]:
    """Run every measurement; the JSON-ready result."""
    source = source_state()
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
    )
    overhead = timer_overhead_ns()
    sizes: list[dict[str, Any]] = []
    with Progress(*columns, console=console, transient=True) as progress:
        for i, gpus in enumerate(args.sizes):
            sizes.append(bench_size(gpus, args, progress, args.seed + 1000 * i))
    gpus = [s["gpus"] for s in sizes]
    growth: dict[str, Any] = {}
    if len(sizes) >= 2:
        for o in ORDERINGS:
            slope, how = growth_exponent(gpus, [s["decide"][o]["median_s"] for s in sizes])
            growth[f"decide_{o}"] = slope
        for st in (*STRATEGIES, HOST_ROW):
            slope, how = growth_exponent(gpus, [s["placement"][st]["median_us"] for s in sizes])
            growth[f"placement_{st}"] = slope
        slope, how = growth_exponent(gpus, [s["index_build"]["median_s"] for s in sizes])
        growth["index_build"] = slope
        growth["method"] = how
    ratio: dict[str, Any] | None = None
    target: dict[str, Any] | None = None
    at = next((s for s in sizes if s["gpus"] == TARGET_SIZE), None)
    if at is not None:
        bf, ff = at["placement"]["best-fit"], at["placement"]["first-fit"]
        ratio = {
            "gpus": TARGET_SIZE,
            "best_fit_median_us": bf["median_us"],
            "first_fit_median_us": ff["median_us"],
            "best_over_first": bf["median_us"] / ff["median_us"],
            "host_median_us": at["placement"][HOST_ROW]["median_us"],
            "host_over_plain": at["placement"][HOST_ROW]["median_us"] / bf["median_us"],
        }
        target = {
            "statement": "a placement on a 16k-GPU fabric in under 1 ms median (best-fit)",
            "median_us": bf["median_us"],
            "limit_us": TARGET_US,
            "met": bf["median_us"] < TARGET_US,
        }
    plot_skipped = plot(sizes, args.plot) if len(sizes) >= 2 else "fewer than two sizes"
    return {
        "schema": "accelnet.bench.sched/v1",
        "timestamp": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": shlex.join(sys.orig_argv),
        "argv": sys.argv,
        "parameters": {
            "sizes": args.sizes,
            "gpus_per_host": GPUS_PER_HOST,
            "model": MODEL,
            "queue": args.queue,
            "requests": args.requests,
            "repeats": args.repeats,
            "seed": args.seed,
            "load": args.load,
            "fill": args.fill,
            "mix": {
                "fractional": f"{FRACTIONAL_P:.0%} {MODEL}:0.5",
                "whole": "50% 1 GPU, 20% 2, 20% 4 (half required host), 10% 8 (required nvlink)",
                "preload": "the whole-GPU part only, asking for cores and memory",
                "host": f"every host declares {HOST_CPUS} cores and {HOST_MEMORY_GB} GB; "
                f"the {HOST_ROW} requests ask {CPUS_PER_RANK:g} cores and "
                f"{MEMORY_GB_PER_RANK:g} GB per rank (half for a half share)",
            },
            "orderings": list(ORDERINGS),
            "preemption": "none",
            "timer_overhead_ns": overhead,
        },
        "machine": {
            "cpu_count": os.cpu_count(),
            "python": platform.python_version(),
            "implementation": platform.python_implementation(),
            "platform": platform.platform(),
            "accelnet": version("accelnet"),
        },
        "source": source,
        "sizes": sizes,
        "growth": growth,
        "best_vs_first": ratio,
        "target": target,
        "plot": None if plot_skipped else str(args.plot),
        "plot_skipped": plot_skipped,
    }


def exponent(x: float) -> str:
    """``~O(n^0.31)``."""
    return f"~O(n^{x:.2f})"


def report(result: dict[str, Any], console: Console) -> None:
    """Print the figures as a rich table."""
    p, m, sizes = result["parameters"], result["machine"], result["sizes"]
    growth = result["growth"]
    table = Table(
        title="accelnet scheduler benchmark: fat trees of 8 x H100 hosts, "
        f"{p['load']:.0%} held by running jobs",
        caption=f"medians of {p['repeats']} repeats; place() percentiles over "
        f"{p['requests']:,} calls x {p['repeats']}; decide: {p['queue']:,} queued jobs, "
        f"best-fit, no preemption; {m['cpu_count']} cores, Python {m['python']}; "
        f"src at {src_label(result['source'])}",
    )
    table.add_column("figure")
    for s in sizes:
        table.add_column(f"{s['gpus']:,} GPUs", justify="right")
    if growth:
        table.add_column("growth", justify="right")

    def row(name: str, cells: list[str], slope: float | None = None) -> None:
        extra = [exponent(slope) if slope is not None else ""] if growth else []
        table.add_row(name, *cells, *extra)

    row(
        "held / running jobs",
        [f"{s['preload']['load']:.1%} / {s['preload']['running_jobs']:,}" for s in sizes],
    )
    row(
        "hosts free / partly used",
        [
            f"{s['fragmentation']['hosts_wholly_free']:,} / "
            f"{s['fragmentation']['hosts_partly_used']:,}"
            for s in sizes
        ],
    )
    row(
        "index build",
        [f"{s['index_build']['median_s'] * 1e3:,.2f} ms" for s in sizes],
        growth.get("index_build"),
    )
    for st in (*STRATEGIES, HOST_ROW):
        pl = [s["placement"][st] for s in sizes if st in s["placement"]]
        row(
            f"place() {st} median",
            [f"{x['median_us']:,.2f} µs" for x in pl],
            growth.get(f"placement_{st}"),
        )
        row("  p90 / p99 µs", [f"{x['p90_us']:,.1f} / {x['p99_us']:,.1f}" for x in pl])
        row("  placed", [f"{x['placed']:,} / {p['requests']:,}" for x in pl])
    for o in ORDERINGS:
        dd = [s["decide"][o] for s in sizes]
        row(
            f"decide {o}",
            [f"{x['median_s'] * 1e3:,.0f} ms" for x in dd],
            growth.get(f"decide_{o}"),
        )
        row("  jobs considered/s", [f"{x['considered_per_s']:,.0f}" for x in dd])
        row("  starts", [f"{x['starts']:,}" for x in dd])
        row("  jobs placed/s", [f"{x['placed_per_s']:,.0f}" for x in dd])
    console.print(table)
    ratio, target = result["best_vs_first"], result["target"]
    if ratio is not None:
        console.print(
            f"best-fit / first-fit median place() at {ratio['gpus']:,} GPUs: "
            f"{ratio['best_fit_median_us']:,.2f} / {ratio['first_fit_median_us']:,.2f} µs = "
            f"{ratio['best_over_first']:.2f}x; with CPU and memory in play "
            f"{ratio['host_median_us']:,.2f} µs ({ratio['host_over_plain']:.2f}x)"
        )
    if target is not None:
        verdict, sign = ("MET", "<") if target["met"] else ("NOT MET", ">=")
        console.print(
            f"target {target['statement']}: {verdict} "
            f"(median {target['median_us']:,.2f} µs {sign} {target['limit_us']:,.0f} µs)"
        )
    console.print(
        f"timer overhead {p['timer_overhead_ns']} ns per place() sample (included); "
        f"growth: log-log least-squares slope ({growth.get('method', 'fewer than two sizes')})"
    )
    if result["plot_skipped"]:
        console.print(f"plot skipped: {result['plot_skipped']}")


def parse_sizes(text: str) -> list[int]:
    """``"1024,16384"`` -> ``[1024, 16384]`` (GPUs, each a positive multiple of 8)."""
    out = []
    for part in text.split(","):
        n = int(part.strip().replace("_", ""))
        if n < GPUS_PER_HOST or n % GPUS_PER_HOST:
            raise argparse.ArgumentTypeError(f"{n} is not a positive multiple of 8 GPUs")
        out.append(n)
    return out


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Command-line options."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0] if __doc__ else None)
    parser.add_argument(
        "--sizes", type=parse_sizes, default=[1024, 16_384, 65_536], help="GPUs per fabric"
    )
    parser.add_argument("--queue", type=int, default=10_000, help="queued jobs per decide")
    parser.add_argument("--requests", type=int, default=2000, help="timed place() calls")
    parser.add_argument("--repeats", type=int, default=5, help="repeats of every timing")
    parser.add_argument("--seed", type=int, default=0, help="seed of every random draw")
    parser.add_argument("--load", type=float, default=0.6, help="fraction of GPUs held")
    parser.add_argument(
        "--fill", type=float, default=0.85, help="fraction asked for before jobs finish"
    )
    parser.add_argument("--out", type=Path, default=RESULTS, help="where to write the JSON")
    parser.add_argument("--plot", type=Path, default=PLOT, help="where to write the plot")
    args = parser.parse_args(argv)
    for name in ("queue", "requests", "repeats"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be >= 1")
    if not 0 <= args.load <= args.fill <= 1:
        parser.error("need 0 <= --load <= --fill <= 1")
    return args


def main(argv: Sequence[str] | None = None) -> None:
    """Run the benchmark, print the table, write the JSON."""
    args = parse_args(argv)
    run_and_report(args, run, report, args.out)


if __name__ == "__main__":
    main()
