"""``accelnet demo``: the main job. Real work on this machine's devices, shown as it runs.

Four typical workloads run as jobs through the scheduler and the local backend (one worker
process per device): ML inference (digits, batched), graphics rendering (a gang of tiles,
then assembly into a PNG), big-data processing (a gang of partitions, then a merge) and
real-time video (motion detection, frame by frame). ``--fabric mixed-lab`` (or any spec)
runs the same on an emulated fabric whose devices execute on this machine's CPU.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.live import Live
from rich.table import Table
from rich.text import Text

from accelnet.cli.fabric_cmd import fail, load_or_exit, note
from accelnet.cli.render import JOB_STATE_STYLE
from accelnet.runtime.demo import DemoRun, DemoSizes
from accelnet.runtime.sdk import LocalCluster
from accelnet.runtime.store import JobRecord


def _metric(name: str, result: Any) -> str:
    if not isinstance(result, dict | list):
        return ""
    r = result[0] if isinstance(result, list) else result
    picks = {
        "inference": lambda: (
            f"accuracy {r['accuracy']:.3f}, p99 {r['latency_ms']['p99']:.2f} ms/batch"
        ),
        "video-motion": lambda: (
            f"{r['processed_fps']:.0f} fps, p99 {r['latency_ms']['p99']:.1f} ms/frame, "
            f"recall {r['recall']:.2f}"
        ),
        "render-assemble": lambda: f"{r['width']}x{r['height']} px",
        "data-merge": lambda: f"{r['total_rows']:,} rows -> {r['groups']:,} groups",
        "render-tiles": lambda: f"{len(result)} tiles" if isinstance(result, list) else "",
        "data-partitions": lambda: f"{len(result)} partitions" if isinstance(result, list) else "",
    }
    try:
        return picks[name]() if name in picks else ""
    except (KeyError, TypeError, IndexError):
        return ""


def _row(name: str, rec: JobRecord, emulated: bool, output: str, now: float) -> list[Text]:
    devices = ", ".join(rec.placement.devices) if rec.placement else "-"
    if emulated and rec.placement:
        devices += " (emulated)"
    wait = (rec.started_at or now) - rec.submitted_at
    run = ((rec.finished_at or now) - rec.started_at) if rec.started_at else 0.0
    state = rec.state.value
    return [
        Text(name),
        Text(devices),
        Text(f"{max(0.0, wait):.1f} s"),
        Text(f"{max(0.0, run):.1f} s"),
        Text(state, JOB_STATE_STYLE.get(state, "")),
        Text(output if rec.state.value == "succeeded" else (rec.error or "")[:80]),
        Text(_metric(name, rec.result)),
    ]


def _table(run: DemoRun, emulated: bool, title: str) -> Table:
    table = Table(title=title, caption=f"outputs under {run.out}")
    for col in ("job", "devices", "wait", "run time", "outcome", "output", "result"):
        table.add_column(col, overflow="fold")
    now = time.time()
    for name, job in run.jobs.items():
        table.add_row(*_row(name, job.record, emulated, run.outputs.get(name, ""), now))
    return table


def demo(
    fabric: Annotated[
        str | None, typer.Option(help="emulate this fabric (preset or file) on this CPU")
    ] = None,
    out: Annotated[Path, typer.Option(help="where the outputs go")] = Path("accelnet-demo"),
    as_json: Annotated[bool, typer.Option("--json", help="a JSON summary for scripts")] = False,
    quick: Annotated[bool, typer.Option(help="small sizes (seconds)")] = False,
    timeout: Annotated[float, typer.Option(help="give up after this many seconds")] = 600.0,
) -> None:
    """Run inference, rendering, big-data and video jobs on this machine's devices."""
    emulated = fabric is not None and fabric != "local"
    fab = load_or_exit(fabric, "per-core")
    out = out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    small = DemoSizes(requests=500, width=160, height=120, rows=200_000, frames=60)
    sizes = small if quick else DemoSizes()
    console = Console(stderr=as_json)
    kind = "emulated on this machine's CPU" if emulated else "this machine"
    console.print(
        Text.assemble(
            ("accelnet demo", "bold"),
            f" on {fab.name} ({kind}): {len(fab.devices)} devices, outputs in {out}",
        )
    )
    start = time.monotonic()
    with LocalCluster(fab, workdir=out / ".accelnet") as cluster:
        run = DemoRun.start(cluster, out, sizes)
        title = f"jobs on {fab.name}" + (" (emulated)" if emulated else "")
        with Live(_table(run, emulated, title), console=console, refresh_per_second=4) as live:
            while not run.finished():
                if time.monotonic() - start > timeout:
                    fail(f"the demo did not finish within {timeout:g} s", 1)
                time.sleep(0.25)
                live.update(_table(run, emulated, title))
            live.update(_table(run, emulated, title))
        records = {name: job.record for name, job in run.jobs.items()}
    ok = all(r.state.value == "succeeded" for r in records.values())
    elapsed = time.monotonic() - start
    if as_json:
        data = {
            "schema": "accelnet.demo/v1",
            "fabric": fab.name,
            "emulated": emulated,
            "out": str(out),
            "seconds": round(elapsed, 2),
            "jobs": {
                name: {
                    "state": r.state.value,
                    "devices": list(r.placement.devices) if r.placement else [],
                    "wait_s": (r.started_at or r.submitted_at) - r.submitted_at,
                    "run_s": (r.finished_at or 0) - (r.started_at or 0) if r.started_at else 0,
                    "output": str(out / run.outputs[name]) if name in run.outputs else None,
                    "error": r.error,
                }
                for name, r in records.items()
            },
        }
        sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")
    console.print()
    verdict = "all jobs succeeded" if ok else "some jobs failed"
    console.print(Text(f"{verdict} in {elapsed:.1f} s", "green" if ok else "red"))
    if not ok:
        note("logs are under " + str(out / ".accelnet" / "logs"))
        raise typer.Exit(1)
