"""Distributed training through accelnet (issue 23): launch overhead against torchrun, the
cost of a preemption, and the measured step time against ``accelnet.comm``'s prediction.

The job is :mod:`accelnet.workloads.ddp_digits` (PyTorch DDP, gloo, CPU) on every device of
this machine's fabric (its cores, at most 4), with checkpoints every 25 steps, run

- **launch**: the same number of steps (sized to ``--seconds`` of training from a short
  calibration run) three ways, interleaved, ``--repeats`` times: ``torchrun --standalone
  --nproc-per-node W`` directly, and through accelnet (a LocalCluster already up, the
  default settings) per device (one task per rank) and per host (``launch: per-host``, the
  same torchrun command). The figure is each accelnet run's wall time (submission to the
  job's end) over the torchrun run's beside it (process start to exit), minus one: the
  median over the repeats. Also: the time from launch to the first step, each way.
- **preemption**: the job, slowed to ~20 steps/s (``--step-sleep``), preempted by a more
  important one-command job on the same devices (``priority`` policy): its cost is the stop
  (the preemption decision, SIGTERM, to the last rank's exit, a checkpoint saved on the way)
  plus the restart (the resumed attempt's start to its first step), with the other job's
  run between them left out; also the steps lost (run again), which must be 0.
- **prediction**: the step time measured in the per-device runs (median interval between
  rank 0's steps) against ``step = compute + allreduce(gradients) + allreduce(loss, flag)``,
  with compute measured by one process on one rank's shard of the global batch and the
  collectives priced by ``accelnet.comm`` calibrated on these devices (``accelnet bench
  comm --calibrate``, gloo over loopback).

Run: ``.venv/bin/python bench/train_bench.py [--seconds 60] [--repeats 3]``; writes
``bench/results/train.json``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from accelnet.comm import Calibration, Communicator, CostModel
from accelnet.fabric import Fabric, load_fabric
from accelnet.runtime.sdk import LocalCluster
from accelnet.sched import JobSpec, JobState, Scheduler
from benchutil import run_and_report, source_state, src_label

OUT = Path(__file__).resolve().parent / "results" / "train.json"
MODULE = "accelnet.workloads.ddp_digits"
GLOBAL_BATCH = 64
STATS_BYTES = 16  # the per-step allreduce of (loss, stop flag), float64


def events(text: str) -> list[dict[str, Any]]:
    """The JSON event lines of a ddp_digits output."""
    out = []
    for line in text.splitlines():
        if line.startswith("{"):
            try:
                out.append(json.loads(line))
            except ValueError:
                continue
    return out


def step_times(evs: list[dict[str, Any]]) -> list[float]:
    """When each step ended (rank 0's ``t``), in order."""
    return [e["t"] for e in evs if e["event"] == "step"]


def median_interval(ts: list[float]) -> float:
    gaps = [b - a for a, b in itertools.pairwise(ts)]
    return statistics.median(gaps) if gaps else float("nan")


def torchrun(world: int, steps: int, work: Path, extra: tuple[str, ...] = ()) -> dict[str, Any]:
    """One ``torchrun --standalone`` run; its wall time and rank 0's events."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
           f"--nproc-per-node={world}", "-m", MODULE, "--steps", str(steps),
           "--checkpoint-dir", str(work / "ckpt"), *extra]  # fmt: skip
    t0 = time.time()
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=3600, check=False)
    t1 = time.time()
    if done.returncode != 0:
        raise RuntimeError(f"torchrun failed ({done.returncode}): {done.stderr[-2000:]}")
    evs = events(done.stdout)
    return {"wall_s": t1 - t0, "first_step_s": step_times(evs)[0] - t0, "events": evs}


def one_process(steps: int, batch: int) -> list[dict[str, Any]]:
    """One plain process (no collectives) on a batch of ``batch``: its events."""
    cmd = [sys.executable, "-m", MODULE, "--steps", str(steps), "--global-batch", str(batch)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=True)
    return events(done.stdout)


def through_accelnet(cluster: LocalCluster, world: int, steps: int, launch: str) -> dict[str, Any]:
    """One job through ``cluster``: submission to end, and rank 0's events."""
    launcher = "-m torch.distributed.run " if launch == "per-host" else ""  # torchrun
    run = f"{sys.executable} {launcher}-m {MODULE} --steps {steps}"
    spec = JobSpec.model_validate({
        "name": f"ddp-{launch}", "resources": {"accelerators": f"any:{world}"},
        "launch": launch, "run": run, "checkpointable": True, "timeout_s": 3600,
    })  # fmt: skip
    job = cluster.submit_spec(spec)
    rec = job.wait(3600)
    if rec.state is not JobState.SUCCEEDED:
        raise RuntimeError(f"{launch}: {rec.state.value}: {rec.error}")
    assert rec.finished_at is not None
    evs = events(job.logs(0))
    return {"wall_s": rec.finished_at - rec.submitted_at,
            "first_step_s": step_times(evs)[0] - rec.submitted_at, "events": evs,
            "devices": list(rec.placement.devices) if rec.placement else []}  # fmt: skip


def measure_launch(args: Any, fabric: Fabric, world: int, progress: Progress) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        probe = torchrun(world, 200, Path(tmp) / "probe")
        per_step = median_interval(step_times(probe["events"]))
        steps = max(100, round(args.seconds / per_step))
        modes = ("torchrun", "per-device", "per-host")
        runs: dict[str, list[dict[str, Any]]] = {m: [] for m in modes}
        task = progress.add_task("launch: torchrun vs accelnet", total=args.repeats * 3)
        t0 = time.monotonic()
        with LocalCluster(fabric, workdir=Path(tmp) / "work") as cluster:
            start_s = time.monotonic() - t0
            for r in range(args.repeats):
                for k in range(3):
                    mode = modes[(r + k) % 3]  # rotated: no mode always runs first
                    if mode == "torchrun":
                        got = torchrun(world, steps, Path(tmp) / f"t{r}")
                    else:
                        got = through_accelnet(cluster, world, steps, mode)
                    runs[mode].append(got)
                    progress.advance(task)
    ratios = {
        m: [a["wall_s"] / t["wall_s"] - 1 for a, t in zip(runs[m], runs["torchrun"], strict=True)]
        for m in ("per-device", "per-host")
    }
    return {
        "steps": steps,
        "probe_step_s": per_step,
        "cluster_start_s": start_s,
        "wall_s": {m: [x["wall_s"] for x in v] for m, v in runs.items()},
        "first_step_s": {m: [x["first_step_s"] for x in v] for m, v in runs.items()},
        "step_s": {
            m: [median_interval(step_times(x["events"])) for x in v] for m, v in runs.items()
        },
        "overhead": {m: {"samples": v, "median": statistics.median(v)} for m, v in ratios.items()},
        "devices": runs["per-device"][0]["devices"],
    }


def measure_preemption(args: Any, fabric: Fabric, world: int, progress: Progress) -> dict[str, Any]:
    samples = []
    task = progress.add_task("preemption: stop and resume", total=args.repeats)
    for _ in range(args.repeats):
        with tempfile.TemporaryDirectory() as tmp:
            sched = Scheduler("priority", preemption="priority")
            with LocalCluster(fabric, workdir=Path(tmp) / "work", scheduler=sched) as cluster:
                samples.append(_preempt_once(cluster, world))
        progress.advance(task)
    keys = ("stop_s", "restart_s", "cost_s", "sigterm_to_resumed_step_s", "lost_steps",
            "step_s")  # fmt: skip
    return {"samples": samples,
            "median": {k: statistics.median(s[k] for s in samples) for k in keys}}  # fmt: skip


def _preempt_once(cluster: LocalCluster, world: int) -> dict[str, Any]:
    low = cluster.submit_spec(JobSpec.model_validate({
        "name": "low", "priority": 0, "resources": {"accelerators": f"any:{world}"},
        "run": f"{sys.executable} -m {MODULE} --steps 100000 --step-sleep 0.05 "
               "--checkpoint-every 50",
        "checkpointable": True, "timeout_s": 600,
    }))  # fmt: skip
    deadline = time.monotonic() + 300
    while len(step_times(events(low.logs(0)))) < 120:  # past two checkpoints
        if time.monotonic() > deadline or low.state.is_finished():
            raise RuntimeError(f"the job did not get going: {low.record.error}")
        time.sleep(0.05)
    high = cluster.submit_spec(JobSpec.model_validate({
        "name": "high", "priority": 10, "resources": {"accelerators": f"any:{world}"},
        "run": "true",
    }))  # fmt: skip
    if high.wait(300).state is not JobState.SUCCEEDED:
        raise RuntimeError("the preempting job failed")
    while low.record.attempts < 2 or not step_times(events(low.logs(0))):
        if time.monotonic() > deadline or low.state.is_finished():
            raise RuntimeError(f"the job did not resume: {low.record.error}")
        time.sleep(0.05)
    first = events(cluster.controller.log_path(low.id, 1, 0, "out").read_text())
    second = events(low.logs(0))
    low.cancel()
    evs = cluster.controller.store.events(low.id)
    preempting = next(e.at for e in evs if e.kind == "job:preempting")
    stopped = max(e.at for e in evs if e.kind.startswith("task:") and e.kind != "task:started"
                  and e.detail.rsplit(".", 2)[-2] == "1")  # attempt 1's ranks ending  # fmt: skip
    starting = [e.at for e in evs if e.kind == "job:starting"][1]
    resumed = next(e for e in second if e["event"] == "start")["resumed_from"]
    last_before = max(e["step"] for e in first if e["event"] == "step")
    first_step = step_times(second)[0]
    return {
        "stop_s": stopped - preempting,
        "restart_s": first_step - starting,
        "cost_s": (stopped - preempting) + (first_step - starting),
        "sigterm_to_resumed_step_s": first_step - preempting,
        "lost_steps": last_before - resumed,
        "step_s": median_interval(step_times(first)),
    }


def calibrate(devices: list[str], work: Path) -> Calibration:
    """``accelnet bench comm --calibrate`` on ``devices`` (up to three tries: a fit on a
    busy machine can fail); RuntimeError with its output if none succeeds."""
    out = work / "calibration.json"
    names = ",".join(d.split("/")[-1] for d in devices)
    cmd = [str(Path(sys.executable).parent / "accelnet"), "bench", "comm", "--calibrate",
           "--devices", names, "--sizes", "1K..1M", "--out", str(out)]  # fmt: skip
    tail = ""
    for _ in range(3):
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=900, check=False)
        if done.returncode == 0:
            return Calibration.from_json(json.loads(out.read_text()), str(out))
        tail = (done.stdout + done.stderr)[-2000:]
    raise RuntimeError(f"calibration failed three times: {tail}")


def measure_prediction(
    fabric: Fabric, world: int, progress: Progress, work: Path
) -> dict[str, Any]:
    """The calibrated model's step time for the gang (before the launch runs, which give
    the measured one: see :func:`predicted_against`)."""
    task = progress.add_task("prediction: calibrate, compute", total=2)
    devices = list(fabric.devices)[:world]
    cal = calibrate(devices, work)
    progress.advance(task)
    shard = one_process(400, GLOBAL_BATCH // world)
    compute_s = median_interval(step_times(shard))
    progress.advance(task)
    from accelnet.workloads.ddp_digits import HIDDEN, build_model  # imports torch

    model = build_model(0, 64, 10)
    grad_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    cost = CostModel(calibration=cal)
    comm = Communicator(fabric, devices)
    grads = cost.estimate(comm, "allreduce", grad_bytes)
    stats = cost.estimate(comm, "allreduce", STATS_BYTES)
    return {
        "devices": devices,
        "calibration": cal.to_json(),
        "hidden": HIDDEN,
        "gradient_bytes": grad_bytes,
        "compute_s": compute_s,
        "allreduce_gradients_s": grads.time_s,
        "allreduce_stats_s": stats.time_s,
        "predicted_step_s": compute_s + grads.time_s + stats.time_s,
    }


def predicted_against(predict: dict[str, Any], launch: dict[str, Any]) -> dict[str, Any]:
    """The prediction beside the step time the per-device runs measured."""
    measured = statistics.median(launch["step_s"]["per-device"])
    if launch["devices"] and sorted(launch["devices"]) != sorted(predict["devices"]):
        raise RuntimeError(f"the runs used {launch['devices']}, the model {predict['devices']}")
    return {**predict, "measured_step_s": measured,
            "ratio": measured / predict["predicted_step_s"]}  # fmt: skip


def run(args: Any, console: Console) -> dict[str, Any]:
    fabric = load_fabric(None)
    world = min(4, len(fabric.devices))
    with Progress(console=console, transient=True) as progress, \
            tempfile.TemporaryDirectory() as tmp:  # fmt: skip
        predict = measure_prediction(fabric, world, progress, Path(tmp))
        launch = measure_launch(args, fabric, world, progress)
        preempt = measure_preemption(args, fabric, world, progress)
        predict = predicted_against(predict, launch)
    return {"source": source_state(), "cpus": os.cpu_count(), "world": world,
            "fabric": fabric.name, "seconds": args.seconds, "repeats": args.repeats,
            "launch": launch, "preemption": preempt, "prediction": predict}  # fmt: skip


def report(r: dict[str, Any], console: Console) -> None:
    lau, pre, pred = r["launch"], r["preemption"]["median"], r["prediction"]
    med = statistics.median
    t = Table(title=f"DDP digits, {r['world']} ranks on {r['fabric']}, {lau['steps']} steps "
                    f"({src_label(r['source'])}; medians of {r['repeats']})")  # fmt: skip
    for col in ("launch", "wall", "first step after launch", "step", "overhead vs torchrun"):
        t.add_column(col, justify="left" if col == "launch" else "right")
    for mode in ("torchrun", "per-device", "per-host"):
        over = lau["overhead"].get(mode)
        t.add_row(mode, f"{med(lau['wall_s'][mode]):.2f} s",
                  f"{med(lau['first_step_s'][mode]):.2f} s",
                  f"{1e3 * med(lau['step_s'][mode]):.2f} ms",
                  "-" if over is None else f"{100 * over['median']:+.1f} %")  # fmt: skip
    console.print(t)
    console.print(
        f"preemption: stop {pre['stop_s']:.2f} s + restart {pre['restart_s']:.2f} s = "
        f"{pre['cost_s']:.2f} s ({pre['cost_s'] / pre['step_s']:.0f} steps of "
        f"{1e3 * pre['step_s']:.0f} ms); SIGTERM to resumed first step "
        f"{pre['sigterm_to_resumed_step_s']:.2f} s; steps lost {pre['lost_steps']:.0f}"
    )
    console.print(
        f"step time: measured {1e3 * pred['measured_step_s']:.3f} ms, predicted "
        f"{1e3 * pred['predicted_step_s']:.3f} ms (compute {1e3 * pred['compute_s']:.3f} + "
        f"allreduce {pred['gradient_bytes']:,} B {1e3 * pred['allreduce_gradients_s']:.3f} + "
        f"{STATS_BYTES} B {1e3 * pred['allreduce_stats_s']:.3f}): ratio {pred['ratio']:.2f}"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=60.0, help="training time per run")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    run_and_report(args, run, report, args.out)


if __name__ == "__main__":
    main()
