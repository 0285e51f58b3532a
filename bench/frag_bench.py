"""Fragmentation benchmark: best-fit, first-fit and frag-aware on one stream of jobs.

The fabric is ``fat-tree:hosts=128,gpus_per_host=8`` (1,024 H100 GPUs; one NVLink domain
per host). For every seed a stream of ``--arrivals`` jobs is drawn once: Poisson arrivals
at the rate that offers ``--load`` (95%) of the GPUs, exponential run times (mean 1 time
unit), shapes drawn from the typical mix of :mod:`accelnet.sched.packing` by its weights
(30% ``0.25`` of a GPU, 20% ``0.5``, 25% 1 GPU, 10% 2 GPUs, 10% 4, 5% 8; gangs of 2 or more
``topology.required: nvlink``, as data-parallel jobs ask). Each strategy plays the *same*
stream on its own empty :class:`CapacityIndex`: finished jobs give their devices back, then
the arrival is placed at once with ``strategy.place`` or **rejected** (there is no queue,
so the states of the strategies drift apart only by their choices). Figures, after the
first ``--warmup`` arrivals:

* **usable fraction**, sampled every ``--every`` arrivals and averaged over the samples:
  :func:`accelnet.sched.packing.usable_fraction`, the free capacity the typical mix can
  still use divided by the free capacity, each shape weighted by its weight. For one shape:
  (jobs of that shape that could still be placed, each shape alone, x its size) / free
  capacity, where a gang of ``c`` counts ``floor(wholly free / c)`` per NVLink domain and a
  share ``s`` counts ``floor(free share / s)`` per device. (frag-aware maximises this very
  quantity per placement, so the rejection counts below are the neutral check.)
* **failed despite capacity**: rejected arrivals for which the free capacity in total
  (free shares summed) was at least what the job asks (count x share): placements lost to
  fragmentation, not to a full fabric. Also all rejections, and the whole hosts free.
* **place() time** per arrival (``time.perf_counter_ns`` around the call alone; placed or
  not): median and p99 over the seed's arrivals.

Medians over ``--seeds`` seeds of every per-seed figure; strategies run interleaved (the
order rotates per seed). A sanity check outside the timings: every placement has the asked
number of distinct devices of the class, each with the share free, inside one NVLink
domain when required.

Run from the project root::

    .venv/bin/python bench/frag_bench.py [--seeds 5] [--arrivals 100000] [--load 0.95]

It prints a table and writes ``bench/results/frag.json`` (parameters, per-seed figures and
usable-fraction series, medians, the git commit and whether ``src/`` has changes).
"""

from __future__ import annotations

import argparse
import gc
import heapq
import os
import platform
import random
import shlex
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib.metadata import version
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from accelnet.fabric import DomainLevel, load_preset
from accelnet.sched.capacity import SHARE_UNITS, CapacityIndex, units
from accelnet.sched.packing import TYPICAL_MIX, free_capacity, usable_fraction
from accelnet.sched.placement import PLACEMENTS, PlacementStrategy
from accelnet.sched.request import Request
from accelnet.sched.topology import Topology
from benchutil import run_and_report, source_state, src_label

RESULTS = Path(__file__).resolve().parent / "results" / "frag.json"
PRESET = "fat-tree:hosts=128,gpus_per_host=8"
STRATEGIES = ("best-fit", "first-fit", "frag-aware")


@dataclass(frozen=True, slots=True)
class Arrival:
    """One job of the stream: when it arrives, its shape (index into the mix), run time."""

    at: float
    shape: int
    runs: float


def make_stream(n: int, rng: random.Random, gpus: int, load: float) -> list[Arrival]:
    """``n`` arrivals offering ``load`` of ``gpus`` (mean run time 1)."""
    weights = [t.weight for t in TYPICAL_MIX]
    mean_gpus = sum(t.weight * t.count * t.share for t in TYPICAL_MIX) / sum(weights)
    rate = load * gpus / mean_gpus
    shapes = rng.choices(range(len(TYPICAL_MIX)), weights=weights, k=n)
    out: list[Arrival] = []
    now = 0.0
    for shape in shapes:
        now += rng.expovariate(rate)
        out.append(Arrival(now, shape, rng.expovariate(1.0)))
    return out


def make_requests(topo: Topology) -> list[Request]:
    """One placement request per shape of the mix (gangs of >= 2 require NVLink)."""
    classes = tuple(topo.classes.values())
    return [
        Request(
            f"shape{i}",
            classes,
            t.count,
            t.share,
            DomainLevel.NVLINK if t.count > 1 else None,
            None,
        )
        for i, t in enumerate(TYPICAL_MIX)
    ]


def hosts_whole(index: CapacityIndex) -> int:
    """Hosts whose every GPU is wholly free."""
    topo = index.topo
    return sum(
        1
        for node in topo.nodes_at[3]
        if sum(index.whole_free(c, node) for c in topo.classes) == len(topo.children[node])
    )


def percentile(xs: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0-100), linear between closest ranks."""
    s = sorted(xs)
    pos = (len(s) - 1) * q / 100.0
    lo = int(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def play(
    strategy: PlacementStrategy,
    topo: Topology,
    stream: Sequence[Arrival],
    requests: Sequence[Request],
    args: argparse.Namespace,
) -> dict[str, Any]:
    """One strategy on one stream: the per-seed figures (see the module docstring)."""
    index = CapacityIndex(topo, dict.fromkeys(topo.class_of, 1.0))
    gpus = len(topo.class_of)
    leaving: list[tuple[float, int, tuple[str, ...], int]] = []
    clock = time.perf_counter_ns
    place_ns: list[int] = []
    samples: list[dict[str, float]] = []
    shapes = len(requests)
    rejected, despite, placed = [0] * shapes, [0] * shapes, [0] * shapes
    gc.collect()
    for i, a in enumerate(stream):
        while leaving and leaving[0][0] <= a.at:
            _, _, devs, used = heapq.heappop(leaving)
            for d in devs:
                index.reset(d, index.free.get(d, 0) + used, True)
        req = requests[a.shape]
        start = clock()
        got = strategy.place(req, index)
        took = clock() - start
        counted = i >= args.warmup
        if got is None:
            asked = req.count * req.share
            if counted:
                rejected[a.shape] += 1
                despite[a.shape] += free_capacity(index) >= asked - 1e-9
        else:
            used = units(got.share)
            check(req, got.devices, used, index)
            for d in got.devices:
                index.reset(d, index.free[d] - used, True)
            heapq.heappush(leaving, (a.at + a.runs, i, got.devices, used))
            placed[a.shape] += counted
        if counted:
            place_ns.append(took)
            if (i - args.warmup) % args.every == 0:
                free = free_capacity(index)
                samples.append(
                    {
                        "arrival": i,
                        "usable_fraction": usable_fraction(index),
                        "free_fraction": free / gpus,
                        "hosts_whole": hosts_whole(index),
                    }
                )
    return {
        "usable_fraction": statistics.fmean(s["usable_fraction"] for s in samples),
        "free_fraction": statistics.fmean(s["free_fraction"] for s in samples),
        "hosts_whole": statistics.fmean(s["hosts_whole"] for s in samples),
        "rejected": sum(rejected),
        "failed_despite_capacity": sum(despite),
        "placed": sum(placed),
        "per_shape": {
            f"{t.count}x{t.share:g}": {"placed": p, "rejected": r, "despite_capacity": d}
            for t, p, r, d in zip(TYPICAL_MIX, placed, rejected, despite, strict=True)
        },
        "place_median_us": percentile(place_ns, 50) / 1e3,
        "place_p99_us": percentile(place_ns, 99) / 1e3,
        "samples": samples,
    }


def check(req: Request, devices: tuple[str, ...], used: int, index: CapacityIndex) -> None:
    """Sanity check of one placement before it is applied (raises AssertionError)."""
    topo = index.topo
    want = 1 if req.share < 1 else req.count
    if len(devices) != want or len(set(devices)) != want:
        raise AssertionError(f"{len(devices)} devices for {req.what()}")
    for d in devices:
        if index.free.get(d, 0) < used or topo.class_of[d] not in req.classes:
            raise AssertionError(f"{d} cannot take {used}/{SHARE_UNITS} for {req.what()}")
    if req.required is not None and len({topo.domain_of[req.required][d] for d in devices}) > 1:
        raise AssertionError(f"{req.what()} spans {req.required.value} domains")


def run(args: argparse.Namespace, console: Console) -> dict[str, Any]:
    """Every seed, every strategy; the JSON-ready result."""
    source = source_state()
    fabric = load_preset(PRESET)
    topo = Topology(fabric)
    requests = make_requests(topo)
    strategies = {s: PLACEMENTS.create(s) for s in STRATEGIES}
    per_seed: dict[str, list[dict[str, Any]]] = {s: [] for s in STRATEGIES}
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
    )
    started = time.perf_counter()
    with Progress(*columns, console=console, transient=True) as progress:
        task = progress.add_task("seeds x strategies", total=args.seeds * len(STRATEGIES))
        for k in range(args.seeds):
            seed = args.seed + k
            stream = make_stream(args.arrivals, random.Random(seed), len(fabric.devices), args.load)
            order = STRATEGIES[k % 3 :] + STRATEGIES[: k % 3]
            for s in order:
                per_seed[s].append(
                    {"seed": seed, **play(strategies[s], topo, stream, requests, args)}
                )
                progress.advance(task)
    keys = (
        "usable_fraction",
        "free_fraction",
        "hosts_whole",
        "rejected",
        "failed_despite_capacity",
        "placed",
        "place_median_us",
        "place_p99_us",
    )
    medians = {
        s: {k: statistics.median(r[k] for r in per_seed[s]) for k in keys} for s in STRATEGIES
    }
    # paired by seed (same stream): failed-despite-capacity minus best-fit's
    paired = {
        s: [
            a["failed_despite_capacity"] - b["failed_despite_capacity"]
            for a, b in zip(per_seed[s], per_seed["best-fit"], strict=True)
        ]
        for s in STRATEGIES
        if s != "best-fit"
    }
    return {
        "schema": "accelnet.bench.frag/v1",
        "timestamp": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": shlex.join(sys.orig_argv),
        "parameters": {
            "preset": PRESET,
            "gpus": len(fabric.devices),
            "seeds": args.seeds,
            "first_seed": args.seed,
            "arrivals": args.arrivals,
            "warmup": args.warmup,
            "every": args.every,
            "offered_load": args.load,
            "mix": [{"count": t.count, "share": t.share, "weight": t.weight} for t in TYPICAL_MIX],
            "required": "nvlink for gangs of 2 or more",
            "run_time": "exponential, mean 1",
        },
        "machine": {
            "cpu_count": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
            "accelnet": version("accelnet"),
        },
        "source": source,
        "wall_s": time.perf_counter() - started,
        "medians": medians,
        "failed_minus_best_fit_per_seed": paired,
        "per_seed": per_seed,
    }


def report(result: dict[str, Any], console: Console) -> None:
    """Print the medians as a rich table."""
    p, m, med = result["parameters"], result["machine"], result["medians"]
    counted = p["arrivals"] - p["warmup"]
    table = Table(
        title=f"fragmentation: {p['gpus']:,} GPUs ({p['preset']}), offered load "
        f"{p['offered_load']:.0%}, {counted:,} arrivals counted per seed",
        caption=f"medians over {p['seeds']} seeds; {m['cpu_count']} cores, Python "
        f"{m['python']}; src at {src_label(result['source'])}; {result['wall_s']:.0f} s",
    )
    table.add_column("figure")
    for s in STRATEGIES:
        table.add_column(s, justify="right")
    rows = (
        ("usable fraction of free capacity", lambda x: f"{x['usable_fraction']:.3f}"),
        ("failed despite free capacity", lambda x: f"{x['failed_despite_capacity']:,.0f}"),
        ("rejected (all)", lambda x: f"{x['rejected']:,.0f}"),
        ("placed", lambda x: f"{x['placed']:,.0f}"),
        ("free GPUs (mean)", lambda x: f"{x['free_fraction']:.1%}"),
        ("whole hosts free (mean)", lambda x: f"{x['hosts_whole']:.1f}"),
        ("place() median", lambda x: f"{x['place_median_us']:.1f} µs"),
        ("place() p99", lambda x: f"{x['place_p99_us']:.1f} µs"),
    )
    for name, cell in rows:
        table.add_row(name, *(cell(med[s]) for s in STRATEGIES))
    paired = result["failed_minus_best_fit_per_seed"]
    table.add_row(
        "  failed - best-fit's, per seed",
        "",
        *(" ".join(f"{d:+d}" for d in paired[s]) for s in STRATEGIES[1:]),
    )
    console.print(table)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Command-line options."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0] if __doc__ else None)
    parser.add_argument("--seeds", type=int, default=5, help="streams (medians over them)")
    parser.add_argument("--seed", type=int, default=0, help="the first seed")
    parser.add_argument("--arrivals", type=int, default=100_000, help="jobs per stream")
    parser.add_argument("--warmup", type=int, default=2_000, help="arrivals not counted")
    parser.add_argument("--every", type=int, default=1_000, help="arrivals between samples")
    parser.add_argument("--load", type=float, default=0.95, help="offered load (of GPUs)")
    parser.add_argument("--out", type=Path, default=RESULTS, help="where to write the JSON")
    args = parser.parse_args(argv)
    if args.seeds < 1 or args.every < 1 or not 0 <= args.warmup < args.arrivals:
        parser.error("need --seeds >= 1, --every >= 1 and 0 <= --warmup < --arrivals")
    if args.load <= 0:
        parser.error("--load must be > 0")
    return args


def main(argv: Sequence[str] | None = None) -> None:
    """Run the benchmark, print the table, write the JSON."""
    args = parse_args(argv)
    run_and_report(args, run, report, args.out)


if __name__ == "__main__":
    main()
