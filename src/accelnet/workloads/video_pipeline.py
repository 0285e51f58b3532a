"""The video workload as three stages: decode -> process -> encode.

The same work as :func:`~accelnet.workloads.video.detect_motion`, split so that each
part can run in a process (and on a device) of its own, with frames streamed between
them:

- :class:`Decode` (the source): the synthetic camera stream, frame by frame: ``(pixels,
  truth boxes)``;
- :class:`Process`: motion detection, ``(pixels, truth) -> (pixels, (truth, boxes))``;
- :class:`Encode` (the sink): scores and annotates each frame; ``finish()`` writes
  ``motion.gif``, ``strip.png``, ``detections.csv`` and ``report.json`` (a
  :class:`~accelnet.workloads.video.MotionRecorder`) and returns the summary.

:func:`video_stages` gives the three as ``(name, make)`` pairs: ``make()`` builds the
stage where it runs. Nothing here knows about processes or shared memory; the runtime's
pipeline (:mod:`accelnet.runtime.pipeline.stages`) does.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from typing import Any

from accelnet.workloads._common import Summary
from accelnet.workloads.video import (
    Box,
    Gray,
    MotionDetector,
    MotionRecorder,
    check_stream,
    synthetic_stream,
)


class Decode:
    """The stream's frames: ``(pixels, truth)`` pairs, generated as they are pulled."""

    def __init__(self, frames: int, width: int, height: int, fps: int, seed: int = 0) -> None:
        self.frames = synthetic_stream(frames, width, height, fps, seed)

    def __iter__(self) -> Iterator[tuple[Gray, tuple[Box, ...]]]:
        return ((f.pixels, f.truth) for f in self.frames)


class Process:
    """Motion detection, one frame per call (stateful: the running background)."""

    def __init__(self, width: int, height: int, fps: int) -> None:
        self.detector = MotionDetector(width, height, fps)

    def __call__(
        self, pixels: Gray, truth: tuple[Box, ...]
    ) -> tuple[Gray, tuple[tuple[Box, ...], list[Box]]]:
        return pixels, (truth, self.detector.process(pixels))


class Encode:
    """Scores and annotates frames as they come; writes the outputs at the end."""

    def __init__(
        self, out_dir: str, frames: int, width: int, height: int, fps: int, device: str = "cpu"
    ) -> None:
        self.recorder = MotionRecorder(out_dir, frames, width, height, fps)
        self.device = device
        self.index = 0

    def __call__(self, pixels: Gray, meta: tuple[tuple[Box, ...], list[Box]]) -> None:
        truth, boxes = meta
        self.recorder.add(self.index, pixels, tuple(truth), list(boxes))
        self.index += 1

    def finish(self) -> Summary:
        """Write the files; the summary (``frames_seen``: frames that arrived)."""
        return self.recorder.finish(
            {"workload": "video_pipeline", "device": self.device, "frames_seen": self.index}
        )


def video_stages(
    out_dir: str,
    frames: int = 240,
    width: int = 320,
    height: int = 240,
    fps: int = 30,
    seed: int = 0,
    device: str = "cpu",
) -> list[tuple[str, Callable[[], Any]]]:
    """``[("decode", make), ("process", make), ("encode", make)]``; ``device`` is the
    encoder's, recorded in its summary. ValueError at once for bad sizes."""
    check_stream(frames, width, height, fps)
    return [
        ("decode", functools.partial(Decode, frames, width, height, fps, seed)),
        ("process", functools.partial(Process, width, height, fps)),
        ("encode", functools.partial(Encode, out_dir, frames, width, height, fps, device)),
    ]
