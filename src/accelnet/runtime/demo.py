"""The demo workload mix: inference, rendering, big data and video, run as real jobs.

Render and data are gangs (one task per device, each doing its share, told by
``ACCELNET_RANK``/``ACCELNET_WORLD_SIZE``), followed by a one-device job that assembles
their parts. Everything writes under one output folder.
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


def inference(out_dir: str, requests: int) -> dict[str, Any]:
    """Serve digits predictions on this task's device."""
    from accelnet.workloads.inference import serve_digits

    return serve_digits(out_dir, device=_rank()[2], requests=requests)


def render_band(out_dir: str, width: int, height: int) -> dict[str, Any]:
    """Render this rank's band of the scene."""
    from accelnet.workloads.render import render_tile

    rank, world, device = _rank()
    return render_tile(out_dir, rank, world, width=width, height=height, device=device)


def render_assemble(out_dir: str, world: int, width: int, height: int) -> dict[str, Any]:
    """Stitch the bands into render.png."""
    from accelnet.workloads.render import assemble

    return assemble(out_dir, world, width=width, height=height)


def data_partition(out_dir: str, rows: int) -> dict[str, Any]:
    """Aggregate this rank's partition of the table."""
    from accelnet.workloads.data import aggregate_partition

    rank, world, device = _rank()
    return aggregate_partition(out_dir, rank, world, rows=rows, device=device)


def data_merge(out_dir: str, world: int) -> dict[str, Any]:
    """Merge the partial aggregates."""
    from accelnet.workloads.data import merge

    return merge(out_dir, world)


def video(out_dir: str, frames: int) -> dict[str, Any]:
    """Detect motion in a generated stream on this task's device."""
    from accelnet.workloads.video import detect_motion

    return detect_motion(out_dir, frames=frames, device=_rank()[2])


@dataclass(frozen=True, slots=True)
class DemoSizes:
    """How much work each workload does."""

    requests: int = 4000
    width: int = 480
    height: int = 320
    rows: int = 4_000_000
    frames: int = 240


@dataclass
class DemoRun:
    """The demo's jobs, submitted in waves: the gangs' followers come when they finish."""

    cluster: LocalCluster
    out: Path
    sizes: DemoSizes
    world: int
    jobs: dict[str, Job]
    outputs: dict[str, str]

    @classmethod
    def start(cls, cluster: LocalCluster, out: Path, sizes: DemoSizes) -> DemoRun:
        """Submit the first wave."""
        world = max(1, min(4, len(cluster.fabric.devices)))
        gang = f"any:{world}"
        s = sizes
        run = cls(cluster, out, sizes, world, {}, {})
        run._go("inference", inference, str(out / "inference"), s.requests,
                outputs="inference/report.json")  # fmt: skip
        run._go("render-tiles", render_band, str(out / "render"), s.width, s.height,
                accelerators=gang)  # fmt: skip
        run._go("data-partitions", data_partition, str(out / "data"), s.rows, accelerators=gang)
        run._go("video-motion", video, str(out / "video"), s.frames, outputs="video/motion.gif")
        return run

    def _go(self, name: str, fn: Any, *args: Any, accelerators: str = "any:1",
            outputs: str | None = None) -> None:  # fmt: skip
        self.jobs[name] = self.cluster.submit(fn, *args, accelerators=accelerators, name=name)
        if outputs:
            self.outputs[name] = outputs

    def advance(self) -> None:
        """Submit the followers whose gang has succeeded (call repeatedly)."""
        w, s = self.world, self.sizes
        followers = {
            "render-tiles": ("render-assemble", render_assemble,
                             (str(self.out / "render"), w, s.width, s.height), "render/render.png"),
            "data-partitions": ("data-merge", data_merge, (str(self.out / "data"), w),
                                "data/summary.json"),
        }  # fmt: skip
        for gang, (name, fn, args, output) in followers.items():
            if name in self.jobs or gang not in self.jobs:
                continue
            if self.jobs[gang].state.value == "succeeded":
                self._go(name, fn, *args, outputs=output)

    def finished(self) -> bool:
        """Every submitted job is finished and no follower is still to come."""
        self.advance()
        return all(j.state.is_finished() for j in self.jobs.values())
