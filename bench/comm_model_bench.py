"""The communication model: checked against Gavel's measurements, and what communication-
aware placement gains over a topology-oblivious scheduler.

1. **Gavel's consolidated vs spread figures.** For every multi-GPU job Gavel measured both
   in one server and spread over servers (``accelnet.sim.commcheck``), the model predicts
   the ratio. The one free parameter (the share of communication hidden behind compute)
   is fitted on every other entry and the error reported on the rest (held out), by
   worker type too.
2. **Placement.** An allreduce-heavy gang (256 MiB per step) placed by ``comm-aware``,
   ``best-fit`` and a label-only (topology-oblivious) scheduler on ``dgx-h100`` (one box),
   a pod of four (``dgx-h100:hosts=4``, some GPUs busy) and ``mixed-lab``; predicted
   allreduce bus bandwidth, medians over ``--seeds`` draws of the busy devices.

Run from the project root (needs ``../shared/data/gavel``)::

    .venv/bin/python bench/comm_model_bench.py [--seeds 11]

It prints tables and writes ``bench/results/comm_model.json``. About 20 s.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections import defaultdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from accelnet.fabric import load_fabric
from accelnet.sched.commcompare import compare_placements
from accelnet.sim.commcheck import Checker, check, entries, fit_overlap, summary
from benchutil import run_and_report, source_state, src_label

ROOT = Path(__file__).resolve().parent
GAVEL = ROOT.parent.parent / "shared" / "data" / "gavel" / "simulation_throughputs.json"
RESULTS = ROOT / "results" / "comm_model.json"
CASES = [  # fabric, gang, busy devices
    ("dgx-h100", "H100:4", 0),
    ("dgx-h100", "H100:4", 2),
    ("dgx-h100:hosts=4", "H100:4", 8),
    ("dgx-h100:hosts=4", "H100:4", 16),
    ("dgx-h100:hosts=4", "H100:8", 8),
    ("mixed-lab", "any:4", 0),
    ("mixed-lab", "any:4", 3),
]


def gavel_check() -> dict[str, Any]:
    """Part 1: fit on even entries, report on odd ones."""
    items = entries(json.loads(GAVEL.read_text()))
    checker = Checker()
    train, test = items[0::2], items[1::2]
    overlap = fit_overlap(checker, train)
    held = check(checker, test, overlap)
    by_worker: dict[str, list[Any]] = defaultdict(list)
    for p in held:
        by_worker[p.entry.worker].append(p)
    return {
        "entries": len(items),
        "overlap": overlap,
        "held_out": summary(held),
        "train": summary(check(checker, train, overlap)),
        "no_overlap_all": summary(check(checker, items, 0.0)),
        "held_out_by_worker": {w: summary(ps) for w, ps in sorted(by_worker.items())},
        "examples": [
            {"worker": p.entry.worker, "job_type": p.entry.job_type, "count": p.entry.count,
             "measured": p.entry.measured, "predicted": p.predicted}
            for p in held[::12]
        ],
    }  # fmt: skip


def placements(seeds: int, progress: Progress) -> list[dict[str, Any]]:
    """Part 2: median busbw per strategy over seeded busy draws."""
    out = []
    task = progress.add_task("placements", total=len(CASES) * seeds)
    for fabric_name, gang, busy in CASES:
        fabric = load_fabric(fabric_name)
        per: dict[str, list[float]] = defaultdict(list)
        for seed in range(seeds):
            for p in compare_placements(fabric, gang, 256 << 20, busy, trials=51, seed=seed):
                per[p.strategy].append(p.busbw_gbps)
            progress.advance(task)
        med = {k: statistics.median(v) for k, v in per.items()}
        ratios = [a / b for a, b in zip(per["comm-aware"], per["oblivious"], strict=True)]
        out.append({
            "fabric": fabric_name, "gang": gang, "busy": busy, "seeds": seeds,
            "busbw_gbps": med, "comm_aware_over_oblivious": statistics.median(ratios),
            "comm_aware_over_best_fit": statistics.median(
                a / b for a, b in zip(per["comm-aware"], per["best-fit"], strict=True)),
        })  # fmt: skip
    return out


def run(args: argparse.Namespace, console: Console) -> dict[str, Any]:
    if not GAVEL.exists():
        sys.exit(f"{GAVEL} is missing: the bench needs Gavel's throughput table")
    with Progress(console=console) as progress:
        task = progress.add_task("Gavel's consolidated vs spread figures", total=1)
        gavel = gavel_check()
        progress.advance(task)
        placed = placements(args.seeds, progress)
    return {
        "benchmark": "comm_model",
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "source": source_state(),
        "gavel": gavel,
        "placement": placed,
    }


def report(result: dict[str, Any], console: Console) -> None:
    g = result["gavel"]
    title = (
        f"spread/one-server throughput, model vs Gavel ({g['entries']} entries; "
        f"overlap {g['overlap']:.3f} fitted on half) — {src_label(result['source'])}"
    )
    t = Table(title=title)
    for col in ("entries", "n", "geomean x", "median x", "p90 x", "within 1.5x"):
        t.add_column(col, justify="right")
    rows = [("held out", g["held_out"]), ("fitted half", g["train"]),
            ("all, no overlap", g["no_overlap_all"])]  # fmt: skip
    rows += [(f"held out, {w}", s) for w, s in g["held_out_by_worker"].items()]
    for name, s in rows:
        t.add_row(name, str(s["n"]), f"{s['geomean_factor']:.2f}", f"{s['median_factor']:.2f}",
                  f"{s['p90_factor']:.2f}", f"{s['within_1_5x']:.0%}")  # fmt: skip
    console.print(t)
    t = Table(title="allreduce of 256 MiB per step: predicted busbw (GB/s), medians over seeds")
    for col in (
        "fabric",
        "gang",
        "busy",
        "comm-aware",
        "best-fit",
        "first-fit",
        "oblivious",
        "aware / oblivious",
    ):
        t.add_column(col, justify="right")
    for row in result["placement"]:
        b = row["busbw_gbps"]
        t.add_row(row["fabric"], row["gang"], str(row["busy"]),
                  *(f"{b[k]:,.1f}" for k in ("comm-aware", "best-fit", "first-fit", "oblivious")),
                  f"{row['comm_aware_over_oblivious']:.2f}x")  # fmt: skip
    console.print(t)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=11, help="draws of the busy devices")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    run_and_report(args, run, report, args.out)


if __name__ == "__main__":
    main()
