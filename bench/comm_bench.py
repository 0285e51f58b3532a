"""The collective benchmark against the cost model, before and after calibration.

On this machine's devices (default: its first two CPU cores, gloo): a ring allreduce sweep
fits the model's alpha and bandwidth for the devices' locality level (what
``accelnet bench comm --calibrate`` does), then a second, separate run measures allreduce
and allgather over the same sizes (what ``accelnet bench comm`` does). Every size is
``--repeats`` timed blocks of ``--iters`` calls after ``--warmup`` calls; a row's time is
the median block (each block's time is the slowest rank's mean). Each row's measured busbw
is divided by the calibrated model's prediction and by the uncalibrated one (the fabric's
figures); the report gives the median ratio by size band (small < 64K <= medium < 4M <=
large) and the worst factor ``max(r, 1/r)``.

The defaults (blocks of 5 calls, median of 15) keep a row's figure clear of this shared
VM's bursts, which would spoil most of nccl-tests' longer blocks (``--iters 20``).

Run: ``.venv/bin/python bench/comm_bench.py [--sizes 1K..64M --iters 5 --repeats 15]
[--no-pin] [--out FILE]``; writes ``bench/results/comm_bench.json`` (or ``--out``) and
the calibration beside it (``comm_bench_calibration.json``).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.text import Text

from accelnet.comm import CostModel
from accelnet.commbench import Settings, calibrate, make_steps, parse_sizes, plan_bench, run_bench
from accelnet.commbench.affinity import machine_info, physical_cores
from accelnet.commbench.report import rows_table, summary_lines
from accelnet.commbench.results import Row, make_rows, summarize
from accelnet.fabric.discovery import discover
from benchutil import source_state, src_label, write_json

RESULTS = Path(__file__).resolve().parent / "results"


def calibration_path(out: Path) -> Path:
    """Where the calibration of a run written to ``out`` goes (beside it)."""
    return out.with_name(f"{out.stem}_calibration.json")


def run(args: argparse.Namespace, console: Console) -> tuple[dict[str, Any], list[Row], list[Row]]:
    """Calibrate, then measure; the result document and the rows beside the calibrated
    and the uncalibrated model."""
    local = discover("per-core").fabric
    plan = plan_bench(local, args.devices.split(","), local, physical_cores(), pin=not args.no_pin)
    sizes = parse_sizes(args.sizes, args.factor)
    settings = Settings(args.warmup, args.iters, args.repeats)
    load_before = os.getloadavg()
    t0 = time.perf_counter()
    with console.status("calibrating (ring allreduce sweep)"):
        fit = calibrate(plan, sizes, settings, CostModel())
    cal = fit.calibration(plan.levels[0], f"bench/comm_bench.py on {machine_info()['host']}")
    cal.save(calibration_path(args.out))
    t1 = time.perf_counter()
    with console.status("measuring allreduce and allgather"):
        found = run_bench(plan, make_steps(["allreduce", "allgather"], sizes, plan.ranks), settings)
    t2 = time.perf_counter()
    calibrated = make_rows(plan, found, CostModel(calibration=cal))
    raw = make_rows(plan, found, CostModel())
    result = {
        "schema": "accelnet.bench.comm/v1",
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "source": source_state(),
        "machine": machine_info(),
        "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        "backend": plan.backend,
        "devices": list(plan.comm.ranks),
        "pinned": {b.device: list(b.cpus) for b in plan.bindings},
        "level": plan.levels[0],
        "fit": fit.to_json(),
        "calibration": cal.to_json(),
        "seconds": {"calibration": t1 - t0, "benchmark": t2 - t1},
        "loadavg": {"before": list(load_before), "after": list(os.getloadavg())},
        "rows": [
            {**c.to_json(), "uncalibrated_ratio": r.ratio}
            for c, r in zip(calibrated, raw, strict=True)
        ],
        "summary": {"calibrated": summarize(calibrated), "uncalibrated": summarize(raw)},
    }
    return result, calibrated, raw


def report(result: dict[str, Any], calibrated: list[Row], raw: list[Row], console: Console) -> None:
    """Print the fit, the rows beside the calibrated model, and the summaries."""
    m, fit = result["machine"], result["fit"]
    console.print(
        Text(
            f"# {result['backend']} on {', '.join(result['devices'])} ({result['level']}); "
            f"{m['host']}: {m['cores']} cores; {src_label(result['source'])}; "
            f"calibration {result['seconds']['calibration']:.0f} s, "
            f"benchmark {result['seconds']['benchmark']:.0f} s; load average "
            f"{result['loadavg']['before'][0]:.2f} before, "
            f"{result['loadavg']['after'][0]:.2f} after\n"
            f"# fit: alpha {fit['alpha_us']:.2f} us, B {fit['bandwidth_gbps']:.3f} GB/s "
            f"(launch {fit['launch_us']:g} us); the fit's own worst factor "
            f"{fit['worst_factor']:.2f}"
        )
    )
    for name in ("allreduce", "allgather"):
        console.print(rows_table([r for r in calibrated if r.collective == name], name))
    for line in summary_lines(calibrated):
        console.print(Text("calibrated   " + line))
    for line in summary_lines(raw):
        console.print(Text("uncalibrated " + line))
    worst = max(max(r.ratio, 1 / r.ratio) for r in calibrated)
    med = statistics.median(r.ratio for r in calibrated)
    console.print(Text(f"calibrated: median ratio {med:.2f}, worst factor {worst:.2f}"))


def main() -> None:
    """Parse arguments, run, write the JSON, print the report."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--devices", default="cpu0,cpu1")
    ap.add_argument("--sizes", default="1K..64M")
    ap.add_argument("--factor", type=int, default=2)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--no-pin", action="store_true", help="do not pin workers to their cores")
    ap.add_argument("--out", type=Path, default=RESULTS / "comm_bench.json")
    args = ap.parse_args()
    RESULTS.mkdir(parents=True, exist_ok=True)
    console = Console()
    if not console.is_terminal:  # piped or logged: do not wrap wide tables at 80 columns
        console = Console(width=max(console.width, 132))
    result, calibrated, raw = run(args, console)
    write_json(result, args.out)
    report(result, calibrated, raw, console)
    console.print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
