"""The demo workload mix: training, inference, rendering, big data and video, as real jobs.

Training is a gang running :mod:`accelnet.workloads.ddp_digits`, a plain PyTorch DDP
script, as a shell command per rank: accelnet gives each rank torchrun's variables and a
checkpoint folder; its loss is read from rank 0's log while it runs and plotted at the end
(``training/loss.png``). It needs PyTorch (the ``torch`` extra): without it the job is
skipped, and the demo says how to get it.

Render and data are gangs (one task per device, each doing its share, told by
``ACCELNET_RANK``/``ACCELNET_WORLD_SIZE``) writing their parts to their job's output
folder; a one-device job consumes each gang's outputs (``inputs``), so it is held until
its gang has succeeded and reads the parts where the gang wrote them. Video is a pipeline
job: decode -> process -> encode, each stage a process of its own on the gang's devices,
frames streamed through shared memory, paced like a live camera; its per-frame latency is
broken down into compute and transfer (``video/latency.json``, ``video/latency.png``).
Every final output goes under one folder.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shlex
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from accelnet.runtime.sdk import Job, LocalCluster
from accelnet.sched import JobSpec

TRAINING = "training"
NO_TORCH = "needs PyTorch: pip install 'accelnet[torch]'"


def _rank() -> tuple[int, int, str]:
    return (
        int(os.environ["ACCELNET_RANK"]),
        int(os.environ["ACCELNET_WORLD_SIZE"]),
        os.environ.get("ACCELNET_DEVICE", "cpu"),
    )


def _input(alias: str) -> str:
    from accelnet.runtime.local.handoff import input_dirs

    return str(input_dirs()[alias])


def inference(out_dir: str, requests: int) -> dict[str, Any]:
    """Serve digits predictions on this task's device."""
    from accelnet.workloads.inference import serve_digits

    return serve_digits(out_dir, device=_rank()[2], requests=requests)


def render_band(width: int, height: int) -> dict[str, Any]:
    """Render this rank's band of the scene into the job's output folder."""
    from accelnet.runtime.local.handoff import output_dir
    from accelnet.workloads.render import render_tile

    rank, world, device = _rank()
    return render_tile(str(output_dir()), rank, world, width=width, height=height, device=device)


def render_assemble(out_dir: str, world: int, width: int, height: int) -> dict[str, Any]:
    """Stitch the bands (input ``tiles``, read in place) into render.png."""
    from accelnet.workloads.render import assemble

    return assemble(out_dir, world, width=width, height=height, in_dir=_input("tiles"))


def data_partition(rows: int) -> dict[str, Any]:
    """Aggregate this rank's partition of the table into the job's output folder."""
    from accelnet.runtime.local.handoff import output_dir
    from accelnet.workloads.data import aggregate_partition

    rank, world, device = _rank()
    return aggregate_partition(str(output_dir()), rank, world, rows=rows, device=device)


def data_merge(out_dir: str, world: int) -> dict[str, Any]:
    """Merge the partial aggregates (input ``partitions``, read in place)."""
    from accelnet.workloads.data import merge

    return merge(out_dir, world, in_dir=_input("partitions"))


def video_pipeline(out_dir: str, frames: int, fps: int, realtime: bool) -> dict[str, Any]:
    """This rank's stages of the video pipeline; the sink's rank also writes the latency
    breakdown (latency.json, latency.png)."""
    from accelnet.runtime.pipeline.latency import plot
    from accelnet.runtime.pipeline.stages import Pipeline, Stage
    from accelnet.workloads._common import write_json
    from accelnet.workloads.video_pipeline import video_stages

    stages = [Stage(n, m) for n, m in video_stages(out_dir, frames=frames, fps=fps)]
    result = Pipeline(stages, source_fps=fps if realtime else None).run_task()
    report = result["report"]
    if report is not None:
        write_json(Path(out_dir) / "latency.json", report["latency"])
        plot(report["latency"], Path(out_dir) / "latency.png",
             f"video pipeline: per-frame latency ({frames} frames)")  # fmt: skip
    return result


@dataclass(frozen=True, slots=True)
class DemoSizes:
    """How much work each workload does."""

    requests: int = 4000
    width: int = 480
    height: int = 320
    rows: int = 4_000_000
    frames: int = 60
    fps: int = 30  # the video pipeline's camera: frames are paced at this rate
    realtime: bool = True
    train_steps: int = 300


def training_steps(log: str) -> list[tuple[int, float]]:
    """(step, loss) of each ``step`` line of a :mod:`~accelnet.workloads.ddp_digits` log."""
    out = []
    for line in log.splitlines():
        if line.startswith('{"event": "step"'):
            try:
                event = json.loads(line)
                out.append((int(event["step"]), float(event["loss"])))
            except (ValueError, KeyError, TypeError):
                continue  # a line cut short while it is written
    return out


def plot_training(steps: list[tuple[int, float]], path: Path, title: str) -> Path:
    """The loss curve as a PNG at ``path`` (matplotlib's object API: no global state)."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6, 3.5))
    ax = fig.add_subplot()
    ax.plot([s for s, _ in steps], [loss for _, loss in steps], lw=1.2)
    ax.set_yscale("log")
    ax.set_xlabel("step")
    ax.set_ylabel("training loss (global batch)")
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    return path


@dataclass
class DemoRun:
    """The demo's jobs, all submitted at once (followers wait for their inputs)."""

    cluster: LocalCluster
    out: Path
    sizes: DemoSizes
    world: int
    jobs: dict[str, Job]
    outputs: dict[str, str]
    skipped: dict[str, str] = field(default_factory=dict)  # job -> why it did not run

    @classmethod
    def start(cls, cluster: LocalCluster, out: Path, sizes: DemoSizes) -> DemoRun:
        """Submit every job."""
        devices = len(cluster.fabric.devices)
        world = max(1, min(4, devices))
        gang = f"any:{world}"
        s = sizes
        run = cls(cluster, out, sizes, world, {}, {})
        # first: the widest job, while every device is free; its stages share memory, so
        # they run on one machine (which matters on a fabric of several, e.g. on Ray)
        most = max(len(h.device_ids) for h in cluster.fabric.hosts)
        run._go("video-pipeline", video_pipeline, str(out / "video"), s.frames, s.fps,
                s.realtime, accelerators=f"any:{max(1, min(3, most))}",
                outputs="video/motion.gif", topology={"required": "host"})  # fmt: skip
        run._train(gang)  # then the training gang, checkpointable
        run._go("inference", inference, str(out / "inference"), s.requests,
                outputs="inference/report.json")  # fmt: skip
        run._go("render-tiles", render_band, s.width, s.height, accelerators=gang)
        run._go("data-partitions", data_partition, s.rows, accelerators=gang)
        run._go("render-assemble", render_assemble, str(out / "render"), world, s.width,
                s.height, inputs={"tiles": run.jobs["render-tiles"]},
                outputs="render/render.png")  # fmt: skip
        run._go("data-merge", data_merge, str(out / "data"), world,
                inputs={"partitions": run.jobs["data-partitions"]},
                outputs="data/summary.json")  # fmt: skip
        return run

    def _go(self, name: str, fn: Any, *args: Any, accelerators: str = "any:1",
            outputs: str | None = None, inputs: dict[str, Job] | None = None,
            **spec: Any) -> None:  # fmt: skip
        self.jobs[name] = self.cluster.submit(
            fn, *args, accelerators=accelerators, name=name, inputs=inputs, **spec
        )
        if outputs:
            self.outputs[name] = outputs

    def _train(self, gang: str) -> None:
        """The training gang: the DDP script as a command on each rank, checkpointable."""
        if importlib.util.find_spec("torch") is None:
            self.skipped[TRAINING] = NO_TORCH
            return
        steps = self.sizes.train_steps
        metrics = self.out / TRAINING / "metrics.json"
        command = (f"{shlex.quote(sys.executable)} -m accelnet.workloads.ddp_digits "
                   f"--steps {steps} --out {shlex.quote(str(metrics))}")  # fmt: skip
        spec = JobSpec.model_validate({
            "name": TRAINING, "resources": {"accelerators": gang}, "run": command,
            "checkpointable": True, "max_retries": 1,
            "workload": {"category": "training", "total_steps": steps},
        })  # fmt: skip
        self.jobs[TRAINING] = self.cluster.submit_spec(spec)
        self.outputs[TRAINING] = f"{TRAINING}/loss.png"

    def training_progress(self) -> list[tuple[int, float]]:
        """(step, loss) of the training job so far, from its rank 0's log (empty before)."""
        job = self.jobs.get(TRAINING)
        if job is None:
            return []
        try:
            return training_steps(job.logs(0))
        except OSError:
            return []

    def training_metrics(self) -> dict[str, Any] | None:
        """The training job's final metrics (None until it has written them)."""
        try:
            data = json.loads((self.out / TRAINING / "metrics.json").read_text())
        except (OSError, ValueError):
            return None
        return data if isinstance(data, dict) else None

    def finish_training(self) -> Path | None:
        """Plot the training job's loss curve (None if it has no steps)."""
        steps = self.training_progress()
        if not steps:
            return None
        title = f"DDP on {self.world} device{'s' if self.world > 1 else ''}: digits MLP"
        return plot_training(steps, self.out / TRAINING / "loss.png", title)

    def finished(self) -> bool:
        """Every job is finished."""
        return all(j.state.is_finished() for j in self.jobs.values())


@dataclass
class ServiceDemo:
    """The demo's inference service: the digits classifier behind a router, a short load
    ramp from ``clients`` threads, then idle: the replicas grow with the load and shrink
    after it (``accelnet.serve``)."""

    service: Any
    clients: int
    ramp_s: float
    codes: list[int] = field(default_factory=list)
    peak: int = 0
    phase: str = "starting"
    _threads: list[Any] = field(default_factory=list)
    _stop_at: float = 0.0

    @classmethod
    def start(cls, cluster: LocalCluster, ramp_s: float, clients: int = 4) -> ServiceDemo:
        """Start the service (at most 3 replicas, as many as the fabric has devices)."""
        most = max(1, min(3, len(cluster.fabric.devices)))
        spec = {
            "name": "digits-service",
            "run": f"{shlex.quote(sys.executable)} -m accelnet.workloads.digits_service",
            "resources": {"accelerators": "any:1"},
            "replicas": {"min": 1, "max": most},
            "goal": {"p95_ms": 250, "target_inflight": 1},
            "scaling": {"up_s": 0.5, "down_s": 1.5, "window_s": 2.0},
        }
        return cls(cluster.serve(spec), clients, ramp_s)

    def ready(self) -> bool:
        """Whether the first replica answers."""
        return bool(self.service.ready_count())

    def ramp(self) -> None:
        """Start the load: each client sends requests one after another until the ramp ends."""
        self._stop_at = time.monotonic() + self.ramp_s
        self.phase = "load"

        def client(i: int) -> None:
            with httpx.Client(timeout=30) as h:
                k = 0
                while time.monotonic() < self._stop_at:
                    r = h.get(f"{self.service.url}/predict", params={"index": i * 10_000 + k})
                    self.codes.append(r.status_code)
                    k += 1

        self._threads = [threading.Thread(target=client, args=(i,), daemon=True)
                         for i in range(self.clients)]  # fmt: skip
        for t in self._threads:
            t.start()

    def tick(self) -> dict[str, Any]:
        """What to show now: phase, replicas by model, requests/s, p50/p95, failures."""
        if self.phase == "load" and not any(t.is_alive() for t in self._threads):
            self.phase = "idle"
        ready = self.service.ready_count()
        self.peak = max(self.peak, ready)
        st = self.service.stats(2.0)
        models: dict[str, int] = {}
        for r in self.service.router.replicas():
            models[r.model] = models.get(r.model, 0) + 1
        return {"phase": self.phase, "replicas": ready, "models": models,
                "rate": st.rate, "p50_ms": st.p50_ms, "p95_ms": st.p95_ms,
                "requests": len(self.codes),
                "failed": sum(1 for c in self.codes if c != 200)}  # fmt: skip

    def summary(self) -> dict[str, Any]:
        """The figures the demo reports at the end."""
        st = self.service.stats(self.ramp_s + 30.0)
        return {"requests": len(self.codes), "failed": sum(1 for c in self.codes if c != 200),
                "peak_replicas": self.peak, "replicas_now": self.service.ready_count(),
                "p50_ms": st.p50_ms, "p95_ms": st.p95_ms,
                "events": [f"{w} {d}" for _, w, d in self.service.events]}  # fmt: skip

    def close(self) -> None:
        """Stop the service and its replicas."""
        self.service.close()
