"""``accelnet demo``: the main job. Real work on this machine's devices, shown as it runs.

Five typical workloads run as jobs through the scheduler and the local backend (one worker
process per device): ML training (a PyTorch DDP gang, its loss shown live; skipped without
the torch extra), ML inference (digits, batched), graphics rendering (a gang of tiles,
then a job that consumes them and assembles a PNG), big-data processing (a gang of
partitions, then a merge that consumes them) and real-time video (a pipeline job: decode ->
process -> encode on different devices, frames through shared memory; its per-frame
latency is printed broken down into compute and transfer). ``--fabric mixed-lab`` (or any
spec) runs the same on an emulated fabric whose devices execute on this machine's CPU.
"""

from __future__ import annotations

import importlib.util
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

from accelnet.cli.fabric_cmd import load_or_exit
from accelnet.cli.output import fail, note
from accelnet.cli.ray_opts import ADDRESS_HELP, BACKEND_HELP, ray_backend
from accelnet.cli.render import JOB_STATE_STYLE
from accelnet.runtime.care.energy_book import energy_from_json
from accelnet.runtime.control.store import JobRecord
from accelnet.runtime.demo import TRAINING, DemoRun, DemoSizes, ServiceDemo
from accelnet.runtime.pipeline.stages import find_report
from accelnet.runtime.ray.connect import RayOptions
from accelnet.runtime.ray.local_cluster import LOCAL_CLUSTER
from accelnet.runtime.sdk import LocalCluster


def _pipeline_metric(result: Any) -> str:
    report = find_report(result)
    if report is None:
        return ""
    lat = report["latency"]["summary_ms"]
    return (
        f"{report['frames']} frames at {report['fps']:.0f} fps, p50 {lat['total']['p50']:.1f} ms"
        f" = compute {lat['compute_total']['p50']:.1f} + transfer "
        f"{lat['transfer_total']['p50']:.2f} ms, recall {report['result']['recall']:.2f}"
    )


def _training_metric(run: DemoRun, rec: JobRecord) -> str:
    """Live: the step and loss rank 0 reached; at the end: the final loss and accuracy."""
    done = run.training_metrics() if rec.state.value == "succeeded" else None
    if done is not None:
        return (f"{done['steps']} steps, loss {done['final_loss']:.4f}, "
                f"test accuracy {done['test_accuracy']:.3f}")  # fmt: skip
    steps = run.training_progress() if rec.started_at is not None else []
    if not steps:
        return ""
    step, loss = steps[-1]
    return f"step {step}/{run.sizes.train_steps}, loss {loss:.4f}"


def _metric(name: str, result: Any) -> str:
    if name == "video-pipeline":
        return _pipeline_metric(result)
    if not isinstance(result, dict | list):
        return ""
    r = result[0] if isinstance(result, list) else result
    picks = {
        "inference": lambda: (
            f"accuracy {r['accuracy']:.3f}, p99 {r['latency_ms']['p99']:.2f} ms/batch"
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


def _row(
    name: str,
    rec: JobRecord,
    emulated: bool,
    output: str,
    now: float,
    why: str | None,
    metric: str,
) -> list[Text]:
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
        Text(energy_from_json(rec.energy).describe() if rec.energy else "-"),
        Text(state, JOB_STATE_STYLE.get(state, "")),
        Text(output if state == "succeeded" else (rec.error or why or "")[:80]),
        Text(metric),
    ]


def _table(run: DemoRun, emulated: bool, title: str) -> Table:
    table = Table(title=title, caption=f"outputs under {run.out}")
    for col in ("job", "devices", "wait", "run time", "energy", "outcome", "output", "result"):
        table.add_column(col, overflow="fold")
    now = time.time()
    for name, job in run.jobs.items():
        why = run.cluster.reason(job.id)
        rec = job.record
        metric = _training_metric(run, rec) if name == TRAINING else _metric(name, rec.result)
        table.add_row(*_row(name, rec, emulated, run.outputs.get(name, ""), now, why, metric))
    for name, skipped in run.skipped.items():
        table.add_row(Text(name), *(Text("-") for _ in range(4)), Text("skipped", "yellow"),
                      Text(skipped), Text(""))  # fmt: skip
    return table


def _breakdown_table(report: dict[str, Any]) -> Table:
    """Per-frame latency of the pipeline: compute per stage, transfer per hop."""
    lat = report["latency"]["summary_ms"]
    devices = {s["stage"]: s["device"] for s in report["stages"]}
    table = Table(title=f"video pipeline: per-frame latency over {report['frames']} frames (ms)")
    for col in ("part", "device", "p50", "p95", "mean"):
        table.add_column(col, justify="left" if col in ("part", "device") else "right")

    def add(part: str, device: str, s: dict[str, float], style: str = "") -> None:
        figures = (Text(f"{s[k]:.3f}", style) for k in ("p50", "p95", "mean"))
        table.add_row(Text(part, style), Text(device), *figures)

    hops = report["latency"]["hops"]
    for i, stage in enumerate(report["latency"]["stages"]):
        add(f"compute {stage}", devices.get(stage, ""), lat["compute"][stage])
        if i < len(hops):
            hop = hops[i]
            add(f"transfer {hop}", "shared memory", lat["transfer"][hop])
            add("  of which copy", "", lat["copy"][hop], "dim")
    add("compute (all stages)", "", lat["compute_total"], "bold")
    add("transfer (all hops)", "", lat["transfer_total"], "bold")
    add("total", "", lat["total"], "bold")
    return table


def _service_row(now: dict[str, Any]) -> Table:
    table = Table(title="inference service: digits classifier behind accelnet's router")
    for col in ("phase", "replicas", "devices", "requests/s", "p50", "p95", "requests", "failed"):
        table.add_column(col, justify="left" if col in ("phase", "devices") else "right")

    def ms(v: float | None) -> str:
        return "-" if v is None else f"{v:.1f} ms"

    models = ", ".join(f"{n} x {m}" for m, n in sorted(now["models"].items())) or "-"
    table.add_row(now["phase"], str(now["replicas"]), models, f"{now['rate']:.0f}",
                  ms(now["p50_ms"]), ms(now["p95_ms"]), str(now["requests"]),
                  Text(str(now["failed"]), "red" if now["failed"] else ""))  # fmt: skip
    return table


def _service_phase(
    cluster: LocalCluster, console: Console, ramp_s: float, start: float, timeout: float
) -> dict[str, Any]:
    """The inference service: a load ramp, the replicas growing with it and shrinking
    after, shown live; its summary."""
    demo = ServiceDemo.start(cluster, ramp_s)
    try:
        with Live(_service_row(demo.tick()), console=console, refresh_per_second=4) as live:
            while not demo.ready():
                if time.monotonic() - start > timeout:
                    fail(f"the demo did not finish within {timeout:g} s", 1)
                time.sleep(0.1)
                live.update(_service_row(demo.tick()))
            demo.ramp()
            idle_since: float | None = None
            while True:
                now = demo.tick()
                live.update(_service_row(now))
                if now["phase"] == "idle":
                    idle_since = idle_since or time.monotonic()
                    if now["replicas"] <= 1 or time.monotonic() - idle_since > 15:
                        break
                time.sleep(0.25)
        return demo.summary()
    finally:
        demo.close()


DEMO_MODULES = ("sklearn", "polars", "PIL", "threadpoolctl", "matplotlib", "uvicorn",
                "fastapi")  # fmt: skip
"""What the demo's workloads, its service and its plots import (the ``demo`` extra)."""


def _training_json(run: DemoRun, plot: Path | None) -> dict[str, Any] | None:
    if TRAINING not in run.jobs:
        return None
    steps = run.training_progress()
    return {"metrics": run.training_metrics(), "loss_plot": str(plot) if plot else None,
            "first_loss": steps[0][1] if steps else None,
            "last_loss": steps[-1][1] if steps else None}  # fmt: skip


def demo(
    fabric: Annotated[
        str | None, typer.Option(help="emulate this fabric (preset or file) on this CPU")
    ] = None,
    out: Annotated[Path, typer.Option(help="where the outputs go")] = Path("accelnet-demo"),
    as_json: Annotated[bool, typer.Option("--json", help="a JSON summary for scripts")] = False,
    quick: Annotated[bool, typer.Option(help="small sizes, a 4 s load ramp (seconds)")] = False,
    timeout: Annotated[float, typer.Option(help="give up after this many seconds")] = 600.0,
    backend: Annotated[str, typer.Option(help=BACKEND_HELP)] = "local",
    ray_address: Annotated[str | None, typer.Option(help=ADDRESS_HELP + " (the default)")] = None,
) -> None:
    """Run inference, rendering, big-data and video jobs on this machine's devices (or a
    Ray cluster's)."""
    missing = [m for m in DEMO_MODULES if importlib.util.find_spec(m) is None]
    if missing:  # the workloads import them in their workers: say so here, not there
        fail(f"the demo needs the 'demo' extra ({', '.join(missing)} not installed): "
             "pip install 'accelnet[demo]'", 1)  # fmt: skip
    with ray_backend(backend, ray_address, LOCAL_CLUSTER) as ray:
        _demo(fabric, out, as_json, quick, timeout, ray)


def _demo(
    fabric: str | None,
    out: Path,
    as_json: bool,
    quick: bool,
    timeout: float,
    ray: RayOptions | None,
) -> None:
    emulated = ray is not None or (fabric is not None and fabric != "local")
    fab = load_or_exit(fabric, "per-core") if ray is None or fabric is not None else None
    out = out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    small = DemoSizes(requests=500, width=160, height=120, rows=200_000, frames=30,
                      train_steps=100)  # fmt: skip
    shown: dict[str, Any] | None = None
    sizes = small if quick else DemoSizes()
    console = Console(stderr=as_json)
    kind = "emulated on this machine's CPU" if emulated else "this machine"
    start = time.monotonic()
    with LocalCluster(fab, workdir=out / ".accelnet", ray=ray) as cluster:
        fab = cluster.fabric
        if ray is not None:
            kind = f"a Ray cluster of {len(fab.hosts)} nodes at {ray.address}"
        console.print(
            Text.assemble(
                ("accelnet demo", "bold"),
                f" on {fab.name} ({kind}): {len(fab.devices)} devices, outputs in {out}",
            )
        )
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
        loss_plot = run.finish_training()
        service = _service_phase(cluster, console, 4.0 if quick else 12.0, start, timeout)
    ok = all(r.state.value == "succeeded" for r in records.values()) and not service["failed"]
    report = find_report(records["video-pipeline"].result)
    if report is not None:
        console.print()
        console.print(_breakdown_table(report))
        lat = report["latency"]["summary_ms"]
        shown = {
            "stages": {s["stage"]: s["device"] for s in report["stages"]},
            "frames": report["frames"],
            "fps": round(report["fps"], 2),
            "source_fps": report["source_fps"],
            "latency_ms": {k: lat[k] for k in ("total", "compute_total", "transfer_total",
                                               "compute", "transfer", "copy", "wait")},
            "files": {"per_frame": str(out / "video" / "latency.json"),
                      "plot": str(out / "video" / "latency.png")},
        }  # fmt: skip
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
                    "energy": r.energy,
                }
                for name, r in records.items()
            },
            "pipeline": shown,
            "training": _training_json(run, loss_plot),
            "service": service,
            "skipped": run.skipped,
        }
        sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")
    console.print()
    verdict = "all jobs succeeded" if ok else "some jobs failed"
    console.print(Text(f"{verdict} in {elapsed:.1f} s", "green" if ok else "red"))
    if not ok:
        note("logs are under " + str(out / ".accelnet" / "logs"))
        raise typer.Exit(1)
