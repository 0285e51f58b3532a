"""Preemption cost in one decision on a full 16,384-GPU fabric.

The fabric (``fat-tree:hosts=2048,gpus_per_host=8``) is full of 1-GPU jobs of priority 0.
Measured, each a whole ``Scheduler("priority", "best-fit", "priority").decide``:

- ``wins``: 200 queued 8-GPU jobs of priority 5 that must fit in one NVLink domain: each
  preempts a host's eight 1-GPU jobs (victim search succeeds 200 times);
- ``hopeless``: 2,000 queued jobs of priority 0: nobody may be preempted (each search ends
  at the arithmetic check, and identical shapes are answered from the decision's memo);
- ``none``: the ``wins`` queue with preemption off, as the baseline.

Run: ``.venv/bin/python bench/preempt_bench.py [--repeats 3]``; writes
``bench/results/preempt.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

from rich.console import Console
from rich.progress import track
from rich.table import Table

from accelnet.fabric import DomainLevel, load_preset
from accelnet.sched import JobSpec, JobState, JobView, Placement, Scheduler, Snapshot


def _queue(n: int, priority: int, acc: str, topo: str | None) -> tuple[JobView, ...]:
    spec: dict[str, object] = {"name": "q", "run": "x", "priority": priority,
                               "resources": {"accelerators": acc}}  # fmt: skip
    if topo:
        spec["topology"] = {"required": topo}
    js = JobSpec.model_validate(spec)
    return tuple(JobView(f"q{i}", js, JobState.ADMITTED, 1e6 + i) for i in range(n))


def main() -> None:
    """Measure and print; write JSON."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    fabric = load_preset("fat-tree:hosts=2048,gpus_per_host=8")
    low = JobSpec.model_validate({"name": "r", "run": "x", "resources": {"accelerators": "H100:1"}})
    running = tuple(
        JobView(f"r{i}", low, JobState.RUNNING, float(i), started_at=float(i),
                placement=Placement((d,), 1.0, "H100-SXM", DomainLevel.NVLINK))
        for i, d in enumerate(fabric.devices)
    )  # fmt: skip
    prio = Scheduler("priority", "best-fit", "priority")
    cases = {
        "wins": (prio, _queue(200, 5, "H100:8", "nvlink")),
        "hopeless": (prio, _queue(2000, 0, "H100:8", "nvlink")),
        "none": (Scheduler("priority", "best-fit", "none"), _queue(200, 5, "H100:8", "nvlink")),
    }
    results: dict[str, dict[str, object]] = {}
    for name, (sched, queue) in cases.items():
        snap = Snapshot.all_ready(fabric, running + queue, now=2e6)
        sched.decide(snap)  # warm the topology cache
        samples, preempted = [], 0
        for _ in track(range(args.repeats), description=name, transient=True):
            t = time.perf_counter()
            d = sched.decide(snap)
            samples.append(time.perf_counter() - t)
            preempted = len(d.preemptions)
        wins = len(d.nominations)
        med = statistics.median(samples)
        results[name] = {"queued": len(queue), "median_s": med, "samples_s": samples,
                         "preemptions": preempted, "jobs_with_victims": wins,
                         "ms_per_queued_job": 1e3 * med / len(queue)}  # fmt: skip
    table = Table(title="preemption in one decide, 16,384 GPUs full of priority-0 1-GPU jobs")
    for col in ("case", "queued", "decide (median)", "per queued job", "jobs with victims",
                "preemptions"):  # fmt: skip
        table.add_column(col, justify="right")
    for name, r in results.items():
        table.add_row(name, str(r["queued"]), f"{r['median_s'] * 1e3:.0f} ms",
                      f"{r['ms_per_queued_job']:.2f} ms", str(r["jobs_with_victims"]),
                      str(r["preemptions"]))  # fmt: skip
    Console().print(table)
    commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                            check=False).stdout.strip()  # fmt: skip
    out = Path(__file__).resolve().parent / "results" / "preempt.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({
        "schema": "accelnet.bench.preempt/v1",
        "timestamp": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": " ".join([".venv/bin/python", *sys.argv]),
        "cpu_count": os.cpu_count(), "commit": commit, "repeats": args.repeats,
        "results": results,
    }, indent=2))  # fmt: skip
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
