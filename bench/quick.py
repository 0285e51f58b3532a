"""Quick regression check (under 2 minutes): the key figures of the runtime, the scheduler
and the simulator at reduced sizes, compared with the ones recorded last time.

Run it before a change to ``runtime/``, ``sched/`` or ``sim/`` lands::

    .venv/bin/python bench/quick.py            # measure, compare with bench/results/quick.json
    .venv/bin/python bench/quick.py --record   # ... and record these figures as the new ones

Figures (each the median of ``--repeats``, side by side where there is a reference):

- **dispatch vs Ray**: accelnet's tasks/s over Ray's on 2,000 trivial tasks, accelnet with
  its default settings (bench/dispatch_bench.py's runs, alternating); without Ray installed,
  accelnet's tasks/s alone;
- **decisions/s**: the incremental scheduler's decisions per second of its own time, one
  after every job end, on 16,384 GPUs with 10,000 jobs of 100 tenants queued (bench/
  scale_bench.py's steady state, FIFO);
- **Philly 82k**: the whole Philly table (82,247 jobs) on 2,048 V100s, FIFO: wall seconds
  (bench/sim_scale_bench.py; skipped when ``../shared/data`` is absent);
- **routes vs networkx**: route look-ups/s on a 1,024-GPU fat tree over networkx's
  shortest paths on the same graph (bench/fabric_bench.py).

A figure that got worse by more than ``--tolerance`` (default 30 %) than the recorded one
is flagged and the exit status is 1. Ratios (dispatch vs Ray, routes vs networkx) travel
between machines; absolute figures (decisions/s, Philly seconds) are only comparable on the
machine that recorded them, which the JSON names.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

import dispatch_bench
import fabric_bench
import sim_scale_bench
from benchutil import source_state, src_label, write_json

RESULTS = Path(__file__).resolve().parent / "results" / "quick.json"


@dataclass(frozen=True)
class Figure:
    """One figure: its key, what it is, its unit, and whether higher is better."""

    key: str
    label: str
    unit: str
    higher_is_better: bool = True


FIGURES = (
    Figure("dispatch_vs_ray", "dispatch, accelnet / Ray tasks/s (trivial tasks)", "x"),
    Figure("dispatch_tasks_per_s", "dispatch, accelnet tasks/s (default settings)", "/s"),
    Figure("decisions_per_s", "decisions/s, 16,384 GPUs, 10k queued, 100 tenants", "/s"),
    Figure("philly_wall_s", "Philly 82k on 2,048 V100s, FIFO: wall", "s", False),
    Figure("routes_vs_nx", "route look-ups, accelnet / networkx (1,024 GPUs)", "x"),
)


def dispatch(repeats: int, tasks: int) -> dict[str, float]:
    """accelnet (default settings) and, where installed, Ray, alternating: tasks/s."""
    ours, theirs = [], []
    with_ray = dispatch_bench.ray_version() is not None
    with tempfile.TemporaryDirectory(prefix="accelnet-quick-") as tmp:
        for i in range(repeats):
            r = dispatch_bench.run_accelnet(tasks, None, 20, 600.0, Path(tmp) / f"a{i}")
            ours.append(r.tasks_per_s)
            if with_ray:
                theirs.append(dispatch_bench.run_ray(tasks, os.cpu_count() or 1, 20).tasks_per_s)
    out = {"dispatch_tasks_per_s": statistics.median(ours)}
    if theirs:
        out["dispatch_vs_ray"] = statistics.median(a / b for a, b in zip(ours, theirs, strict=True))
    return out


def decisions(repeats: int) -> dict[str, float]:
    """The scheduler's decisions/s in steady state (scale_bench: a decision after every job
    end, FIFO) on 16,384 GPUs with 10,000 jobs of 100 tenants queued."""
    import scale_bench
    from accelnet.fabric import load_fabric

    fabric = load_fabric(scale_bench.preset_ref(16_384))
    runs = []
    for seed in range(repeats):
        session, running, work, _ = scale_bench.build(fabric, "fifo", 10_000, seed, tenants=100)
        runs.append(scale_bench.steady(session, running, work, 1, 1.0)["decisions_per_s"])
    return {"decisions_per_s": statistics.median(runs)}


def philly() -> dict[str, float]:
    """The whole Philly table on 2,048 V100s, FIFO: wall seconds (skipped without data)."""
    if not sim_scale_bench.PHILLY.exists():
        return {}
    r = sim_scale_bench.philly_point(2048, 1.0, 1, 0, "fifo")
    return {"philly_wall_s": float(r["wall_s"])}


def routes(repeats: int) -> dict[str, float]:
    """Route look-ups/s over networkx's on a 1,024-GPU fat tree (median of ``repeats``)."""
    fabric, _ = fabric_bench.timed_build(fabric_bench.preset_ref(128, 8))
    rng = random.Random(0)
    pairs = fabric_bench.uniform_pairs(fabric, 20_000, rng)
    graph, _ = fabric_bench.flat_graph(fabric)
    nx_route = fabric_bench.nx_route(graph)
    ratios = []
    for _ in range(repeats):
        ours = fabric_bench.lookups_per_s(fabric.route, pairs)
        theirs = fabric_bench.lookups_per_s(nx_route, pairs[:300])
        ratios.append(ours / theirs)
    return {"routes_vs_nx": statistics.median(ratios)}


def compare(now: dict[str, float], then: dict[str, float], tolerance: float) -> dict[str, str]:
    """Per figure: "ok", "worse" (by more than ``tolerance``), "new" or "not measured"."""
    out = {}
    for f in FIGURES:
        if f.key not in now:
            out[f.key] = "not measured"
        elif f.key not in then:
            out[f.key] = "new"
        else:
            change = now[f.key] / then[f.key]
            worse = change < 1 - tolerance if f.higher_is_better else change > 1 + tolerance
            out[f.key] = "worse" if worse else "ok"
    return out


def run(args: argparse.Namespace, console: Console) -> dict[str, Any]:
    """Measure every figure; the JSON-ready result (with the comparison)."""
    figures: dict[str, float] = {}
    steps: Sequence[tuple[str, Callable[[], dict[str, float]]]] = (
        ("dispatch", lambda: dispatch(args.repeats, args.tasks)),
        ("decisions", lambda: decisions(args.repeats)),
        ("Philly 82k", philly),
        ("routes", lambda: routes(args.repeats)),
    )
    with console.status("") as status:
        for name, step in steps:
            status.update(f"quick: {name}")
            figures.update(step())
    recorded = json.loads(args.baseline.read_text()) if args.baseline.exists() else {}
    then = recorded.get("figures", {})
    return {
        "benchmark": "quick",
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "source": source_state(),
        "machine": {
            "cores": os.cpu_count(),
            "python": platform.python_version(),
            "node": platform.node(),
        },
        "figures": figures,
        "recorded": {
            "figures": then,
            "when": recorded.get("when"),
            "source": recorded.get("source"),
        },
        "verdicts": compare(figures, then, args.tolerance),
        "tolerance": args.tolerance,
    }


def report(result: dict[str, Any], console: Console) -> None:
    """The table: each figure now, as recorded, and the verdict."""
    rec = result["recorded"]
    table = Table(
        title="Quick regression check",
        caption=f"now: src at {src_label(result['source'])}; recorded: "
        f"{rec['when'] or 'nothing yet'}; worse = by more than {result['tolerance']:.0%}",
    )
    for col in ("figure", "now", "recorded", "verdict"):
        table.add_column(col, justify="left" if col in ("figure", "verdict") else "right")
    for f in FIGURES:
        now, then = result["figures"].get(f.key), rec["figures"].get(f.key)
        fmt = "{:,.2f}" if f.unit in ("x", "s") else "{:,.0f}"
        table.add_row(
            f.label,
            "-" if now is None else fmt.format(now) + f.unit,
            "-" if then is None else fmt.format(then) + f.unit,
            result["verdicts"][f.key],
        )
    console.print(table)


def main(argv: Sequence[str] | None = None) -> None:
    """Measure, compare, print; ``--record`` writes the figures as the new reference."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--tasks", type=int, default=2000, help="dispatch tasks per run")
    p.add_argument("--tolerance", type=float, default=0.30)
    p.add_argument("--baseline", type=Path, default=RESULTS, help="the recorded figures")
    p.add_argument("--record", action="store_true", help="write these figures as the new ones")
    args = p.parse_args(argv)
    console = Console()
    result = run(args, console)
    report(result, console)
    if args.record:
        write_json(result, args.baseline)
        console.print(f"recorded in {args.baseline}")
    sys.exit(1 if "worse" in result["verdicts"].values() else 0)


if __name__ == "__main__":
    main()
