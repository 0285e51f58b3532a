"""Fabric benchmark: build a 16,384-GPU fat tree and route between random device pairs.

What is measured, all in one run so that the ratios are side by side on the same machine:

1. **Build**: wall time of ``load_preset("fat-tree:hosts=N,gpus_per_host=8")`` (spec
   generation, validation, layout and fabric assembly), median and min over ``--repeats``
   builds. Peak memory of one build (``tracemalloc`` peak, MiB) is taken in a separate pass,
   because tracing slows Python down and would distort the timings.
2. **Routes**: ``fabric.route(a, b)`` over ``--lookups`` uniformly random device pairs drawn
   once with ``random.Random(--seed)``. Each repeat builds a fresh fabric, so the first pass
   starts with empty router caches (*cold*); a second pass over the same pairs is *warm*. A
   *mixed* set of pairs, half of them two distinct devices of one host, gets the same
   cold/warm treatment on another fresh fabric. Figures are look-ups per second, medians over
   repeats.
3. **Baseline**: one flat ``networkx.Graph`` of the whole fabric (every host-internal and
   external link, weight = latency in µs; its build time is reported apart) and
   ``networkx.shortest_path(G, a, b, weight=...)`` on the first ``--nx-pairs`` of the same
   uniform pairs. The ratio is accelnet look-ups/s over networkx look-ups/s. As a sanity
   check (not a test), accelnet's routes for those pairs must have the pair's endpoints and a
   positive bottleneck bandwidth; how often its latency equals networkx's least latency is
   reported too (accelnet picks the widest path first, so they may differ).

Run from the project root::

    .venv/bin/python bench/fabric_bench.py [--hosts 2048] [--lookups 100000] [--repeats 5]
                                           [--seed 0] [--nx-pairs 2000]

It prints a table and writes ``bench/results/fabric.json`` (every per-repeat sample, the
medians, the ratios, the command line and the machine). Garbage collection is left on, as in
real use, but a full collection runs before each timed section.
"""

from __future__ import annotations

import argparse
import gc
import os
import platform
import random
import shlex
import statistics
import sys
import time
import tracemalloc
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from importlib.metadata import version
from itertools import pairwise
from pathlib import Path
from typing import Any

import networkx as nx
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from accelnet.fabric import Fabric, load_preset
from benchutil import run_and_report, source_state, src_label

RESULTS = Path(__file__).resolve().parent / "results" / "fabric.json"
WEIGHT = "latency_us"
MIB = 1024.0 * 1024.0

Pair = tuple[str, str]


@dataclass
class Samples:
    """Per-repeat samples of every timed figure (seconds, or look-ups per second)."""

    build_s: list[float] = field(default_factory=list)
    uniform_cold_per_s: list[float] = field(default_factory=list)
    uniform_warm_per_s: list[float] = field(default_factory=list)
    mixed_cold_per_s: list[float] = field(default_factory=list)
    mixed_warm_per_s: list[float] = field(default_factory=list)
    nx_per_s: list[float] = field(default_factory=list)


def preset_ref(hosts: int, gpus_per_host: int) -> str:
    """The generator reference of the fabric under test."""
    return f"fat-tree:hosts={hosts},gpus_per_host={gpus_per_host}"


def uniform_pairs(fabric: Fabric, n: int, rng: random.Random) -> list[Pair]:
    """``n`` pairs of devices drawn uniformly and independently (a pair may repeat a device)."""
    ids = list(fabric.devices)
    return [(ids[rng.randrange(len(ids))], ids[rng.randrange(len(ids))]) for _ in range(n)]


def mixed_pairs(fabric: Fabric, n: int, rng: random.Random) -> list[Pair]:
    """``n`` pairs, exactly half of them two distinct devices of one host, shuffled."""
    same: list[Pair] = []
    hosts = [h for h in fabric.hosts if len(h.device_ids) > 1]
    for _ in range(n // 2):
        host = hosts[rng.randrange(len(hosts))]
        a, b = rng.sample(host.device_ids, 2)
        same.append((a, b))
    pairs = same + uniform_pairs(fabric, n - len(same), rng)
    rng.shuffle(pairs)
    return pairs


def timed_build(ref: str) -> tuple[Fabric, float]:
    """Build the fabric after a full collection; the fabric and the seconds it took."""
    gc.collect()
    start = time.perf_counter()
    fabric = load_preset(ref)
    return fabric, time.perf_counter() - start


def build_peak_mib(ref: str) -> tuple[float, float]:
    """Peak and retained traced memory (MiB) of one build, measured with ``tracemalloc``."""
    gc.collect()
    tracemalloc.start()
    try:
        fabric = load_preset(ref)
        current, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    del fabric
    return peak / MIB, current / MIB


def lookups_per_s(route: Callable[[str, str], object], pairs: Sequence[Pair]) -> float:
    """Look-ups per second of ``route`` over ``pairs`` (one pass, wall clock)."""
    gc.collect()
    start = time.perf_counter()
    for a, b in pairs:
        route(a, b)
    return len(pairs) / (time.perf_counter() - start)


def flat_graph(fabric: Fabric) -> tuple[nx.Graph[str], int]:
    """The whole fabric as one ``networkx.Graph`` and how many parallel links were merged."""
    graph: nx.Graph[str] = nx.Graph()
    for host in fabric.hosts:
        graph.add_nodes_from(host.node_id(n) for n in host.layout.node_names)
    graph.add_nodes_from(fabric.switches)
    merged = 0
    for link in fabric.links():
        data = graph.get_edge_data(link.a, link.b)
        if data is not None:
            merged += 1
            if data[WEIGHT] <= link.latency_us:
                continue
        graph.add_edge(link.a, link.b, **{WEIGHT: link.latency_us})
    return graph, merged


def nx_route(graph: nx.Graph[str]) -> Callable[[str, str], list[str]]:
    """A least-latency look-up on ``graph`` with the same call shape as ``fabric.route``."""

    def route(a: str, b: str) -> list[str]:
        path: list[str] = nx.shortest_path(graph, a, b, weight=WEIGHT)
        return path

    return route


def check_against_nx(fabric: Fabric, graph: nx.Graph[str], pairs: Sequence[Pair]) -> int:
    """Sanity check (raises AssertionError, even under ``-O``); latency agreements."""
    agree = 0
    for a, b in pairs:
        route = fabric.route(a, b)
        path: list[str] = nx.shortest_path(graph, a, b, weight=WEIGHT)
        if (route.src, route.dst, route.nodes[0], route.nodes[-1]) != (a, b, a, b):
            raise AssertionError(f"route {a} -> {b} has endpoints {route.nodes[0]}, {route.dst}")
        if (path[0], path[-1]) != (a, b):
            raise AssertionError(f"networkx path {a} -> {b} has endpoints {path[0]}, {path[-1]}")
        if not route.bandwidth_gbps > 0:
            raise AssertionError(f"route {a} -> {b} has bottleneck {route.bandwidth_gbps} GB/s")
        nx_latency = sum(graph[x][y][WEIGHT] for x, y in pairwise(path))
        if abs(nx_latency - route.latency_us) <= 1e-9 * max(1.0, nx_latency):
            agree += 1
    return agree


def median(xs: Sequence[float]) -> float:
    """Median of a non-empty sample."""
    return statistics.median(xs)


def run(args: argparse.Namespace, console: Console) -> dict[str, Any]:
    """Run every measurement; the JSON-ready result."""
    ref = preset_ref(args.hosts, args.gpus_per_host)
    samples = Samples()
    source = source_state()

    # Reference fabric (untimed; also warms imports): the pairs and the networkx graph.
    reference = load_preset(ref)
    rng = random.Random(args.seed)
    uniform = uniform_pairs(reference, args.lookups, rng)
    mixed = mixed_pairs(reference, args.lookups, rng)
    nx_pairs = uniform[: args.nx_pairs]
    counts = {
        "hosts": len(reference.hosts),
        "devices": len(reference.devices),
        "network_switches": len(reference.switches),
        "external_links": len(reference.external_links),
    }

    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=console, transient=True) as progress:
        task = progress.add_task("build", total=args.repeats)
        for _ in range(args.repeats):
            fabric, seconds = timed_build(ref)
            samples.build_s.append(seconds)
            del fabric
            progress.advance(task)

        task = progress.add_task("build peak memory (tracemalloc)", total=1)
        peak_mib, retained_mib = build_peak_mib(ref)
        progress.advance(task)

        task = progress.add_task("route look-ups", total=args.repeats)
        for _ in range(args.repeats):
            fabric = load_preset(ref)
            samples.uniform_cold_per_s.append(lookups_per_s(fabric.route, uniform))
            samples.uniform_warm_per_s.append(lookups_per_s(fabric.route, uniform))
            fabric = load_preset(ref)
            samples.mixed_cold_per_s.append(lookups_per_s(fabric.route, mixed))
            samples.mixed_warm_per_s.append(lookups_per_s(fabric.route, mixed))
            del fabric
            progress.advance(task)

        task = progress.add_task("networkx graph", total=1)
        gc.collect()
        start = time.perf_counter()
        graph, merged = flat_graph(reference)
        nx_build_s = time.perf_counter() - start
        progress.advance(task)

        task = progress.add_task("networkx shortest_path", total=args.repeats)
        nx_lookup = nx_route(graph)
        for _ in range(args.repeats):
            samples.nx_per_s.append(lookups_per_s(nx_lookup, nx_pairs))
            progress.advance(task)

        task = progress.add_task("sanity check vs networkx", total=1)
        agree = check_against_nx(reference, graph, nx_pairs)
        progress.advance(task)

    medians = {name: median(values) for name, values in asdict(samples).items()}
    medians["build_min_s"] = min(samples.build_s)
    ratios = {
        "warm_over_networkx": medians["uniform_warm_per_s"] / medians["nx_per_s"],
        "cold_over_networkx": medians["uniform_cold_per_s"] / medians["nx_per_s"],
    }
    return {
        "schema": "accelnet.bench.fabric/v1",
        "timestamp": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": shlex.join(sys.orig_argv),
        "argv": sys.argv,
        "parameters": {
            "preset": ref,
            "hosts": args.hosts,
            "gpus_per_host": args.gpus_per_host,
            "lookups": args.lookups,
            "repeats": args.repeats,
            "seed": args.seed,
            "nx_pairs": len(nx_pairs),
            "mixed_same_host_fraction": (args.lookups // 2) / args.lookups,
        },
        "machine": {
            "cpu_count": os.cpu_count(),
            "python": platform.python_version(),
            "implementation": platform.python_implementation(),
            "platform": platform.platform(),
            "accelnet": version("accelnet"),
            "networkx": version("networkx"),
        },
        "source": source,
        "fabric": counts,
        "memory": {"build_peak_mib": peak_mib, "build_retained_mib": retained_mib},
        "networkx": {
            "graph_build_s": nx_build_s,
            "nodes": graph.number_of_nodes(),
            "edges": graph.number_of_edges(),
            "merged_parallel_links": merged,
            "latency_agreement": agree,
        },
        "samples": asdict(samples),
        "medians": medians,
        "ratios": ratios,
    }


def report(result: dict[str, Any], console: Console) -> None:
    """Print the figures as a rich table."""
    p, m, med = result["parameters"], result["machine"], result["medians"]
    net, mem, counts = result["networkx"], result["memory"], result["fabric"]
    table = Table(
        title=f"accelnet fabric benchmark: {p['preset']} "
        f"({counts['devices']:,} devices, {counts['hosts']:,} hosts)",
        caption=f"medians of {p['repeats']} repeats, measured side by side in one run; "
        f"{m['cpu_count']} cores, Python {m['python']}, networkx {m['networkx']}; "
        f"src at {src_label(result['source'])}",
    )
    table.add_column("figure")
    table.add_column("value", justify="right")
    table.add_column("notes")
    table.add_row(
        "build (median)",
        f"{med['build_s'] * 1e3:,.1f} ms",
        f"min {med['build_min_s'] * 1e3:,.1f} ms",
    )
    table.add_row(
        "build peak memory",
        f"{mem['build_peak_mib']:,.1f} MiB",
        f"tracemalloc, separate pass; {mem['build_retained_mib']:,.1f} MiB retained",
    )
    lookups = f"{p['lookups']:,} pairs"
    table.add_row(
        "route, uniform, cold", f"{med['uniform_cold_per_s']:,.0f} /s", f"{lookups}, fresh fabric"
    )
    table.add_row(
        "route, uniform, warm", f"{med['uniform_warm_per_s']:,.0f} /s", "second pass, same pairs"
    )
    table.add_row(
        "route, mixed, cold", f"{med['mixed_cold_per_s']:,.0f} /s", f"{lookups}, 50% same host"
    )
    table.add_row(
        "route, mixed, warm", f"{med['mixed_warm_per_s']:,.0f} /s", "second pass, same pairs"
    )
    table.add_row(
        "networkx graph build",
        f"{net['graph_build_s'] * 1e3:,.1f} ms",
        f"{net['nodes']:,} nodes, {net['edges']:,} edges (not in look-up time)",
    )
    table.add_row(
        "networkx shortest_path",
        f"{med['nx_per_s']:,.0f} /s",
        f"first {p['nx_pairs']:,} uniform pairs, weight=latency",
    )
    table.add_row(
        "ratio warm / networkx", f"{result['ratios']['warm_over_networkx']:,.1f}x", "uniform pairs"
    )
    table.add_row(
        "ratio cold / networkx", f"{result['ratios']['cold_over_networkx']:,.1f}x", "uniform pairs"
    )
    table.add_row(
        "sanity check",
        "passed",
        f"endpoints and bandwidth > 0 on {p['nx_pairs']:,} pairs; "
        f"latency equals networkx's on {net['latency_agreement']:,}",
    )
    console.print(table)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Command-line options."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0] if __doc__ else None)
    parser.add_argument("--hosts", type=int, default=2048, help="hosts in the fat tree")
    parser.add_argument("--gpus-per-host", type=int, default=8, help="GPUs per host")
    parser.add_argument("--lookups", type=int, default=100_000, help="route look-ups per pass")
    parser.add_argument("--repeats", type=int, default=5, help="repeats of every timing")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random pairs")
    parser.add_argument(
        "--nx-pairs", type=int, default=2000, help="pairs for the networkx baseline"
    )
    parser.add_argument("--out", type=Path, default=RESULTS, help="where to write the JSON")
    args = parser.parse_args(argv)
    for name in ("hosts", "gpus_per_host", "lookups", "repeats", "nx_pairs"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1")
    args.nx_pairs = min(args.nx_pairs, args.lookups)
    return args


def main(argv: Sequence[str] | None = None) -> None:
    """Run the benchmark, print the table, write the JSON."""
    args = parse_args(argv)
    run_and_report(args, run, report, args.out)


if __name__ == "__main__":
    main()
