"""The demo workload mix: inference, rendering, big data and video, run as real jobs.

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

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from accelnet.runtime.sdk import Job, LocalCluster


def _rank() -> tuple[int, int, str]:
    return (
        int(os.environ["ACCELNET_RANK"]),
        int(os.environ["ACCELNET_WORLD_SIZE"]),
        os.environ.get("ACCELNET_DEVICE", "cpu"),
    )


def _input(alias: str) -> str:
    from accelnet.runtime.handoff import input_dirs

    return str(input_dirs()[alias])


def inference(out_dir: str, requests: int) -> dict[str, Any]:
    """Serve digits predictions on this task's device."""
    from accelnet.workloads.inference import serve_digits

    return serve_digits(out_dir, device=_rank()[2], requests=requests)


def render_band(width: int, height: int) -> dict[str, Any]:
    """Render this rank's band of the scene into the job's output folder."""
    from accelnet.runtime.handoff import output_dir
    from accelnet.workloads.render import render_tile

    rank, world, device = _rank()
    return render_tile(str(output_dir()), rank, world, width=width, height=height, device=device)


def render_assemble(out_dir: str, world: int, width: int, height: int) -> dict[str, Any]:
    """Stitch the bands (input ``tiles``, read in place) into render.png."""
    from accelnet.workloads.render import assemble

    return assemble(out_dir, world, width=width, height=height, in_dir=_input("tiles"))


def data_partition(rows: int) -> dict[str, Any]:
    """Aggregate this rank's partition of the table into the job's output folder."""
    from accelnet.runtime.handoff import output_dir
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
    from accelnet.runtime.latency import plot
    from accelnet.runtime.pipeline import Pipeline, Stage
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


@dataclass
class DemoRun:
    """The demo's jobs, all submitted at once (followers wait for their inputs)."""

    cluster: LocalCluster
    out: Path
    sizes: DemoSizes
    world: int
    jobs: dict[str, Job]
    outputs: dict[str, str]

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

    def finished(self) -> bool:
        """Every job is finished."""
        return all(j.state.is_finished() for j in self.jobs.values())
