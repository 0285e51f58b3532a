"""``detect_motion``: moving objects are found where the stream put them, frame by frame."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from PIL import Image, ImageSequence

from accelnet.workloads.video import Box, MotionDetector, detect_motion, synthetic_stream

W, H, FPS, FRAMES = 128, 96, 10, 40


def iou(a: Box, b: Box) -> float:
    w = max(0, min(a[2], b[2]) - max(a[0], b[0]))
    h = max(0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = w * h
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / union


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_boxes_sit_on_the_moving_objects(seed: int) -> None:
    detector = MotionDetector(W, H, FPS)
    found = missed = stray = 0
    for frame in synthetic_stream(FRAMES, W, H, FPS, seed):
        boxes = detector.process(frame.pixels)
        assert frame.pixels.shape == (H, W) and frame.pixels.dtype == np.uint8
        if frame.index < FPS:
            # first second: the background is still being learnt, and where an object stood
            # in the first frame may still merge with it into one box
            continue
        for truth in frame.truth:
            if any(iou(truth, b) > 0.3 for b in boxes):
                found += 1
            else:
                missed += 1
        stray += sum(all(iou(t, b) == 0 for t in frame.truth) for b in boxes)
    assert found / (found + missed) > 0.9
    assert stray <= 2


def test_a_stream_without_motion_has_no_detections() -> None:
    frame = next(iter(synthetic_stream(1, W, H, FPS, seed=0)))
    detector = MotionDetector(W, H, FPS)
    rng = np.random.default_rng(0)
    for _ in range(10):
        noisy = frame.pixels.astype(float) + rng.normal(0, 5, frame.pixels.shape)
        assert detector.process(np.clip(noisy, 0, 255).astype(np.uint8)) == []


def test_detect_motion_reports_and_writes_its_files(tmp_path: Path) -> None:
    summary = detect_motion(str(tmp_path), frames=FRAMES, width=W, height=H, fps=FPS, seed=0)
    json.dumps(summary, allow_nan=False)
    assert summary["frames_with_detections"] >= 0.8 * FRAMES
    assert summary["recall"] > 0.9 and summary["precision"] > 0.9
    assert summary["processed_fps"] > 0
    lat = summary["latency_ms"]
    assert 0 <= lat["p50"] <= lat["p99"] <= lat["max"]

    files = summary["files"]
    with Image.open(tmp_path / files["gif"]) as gif:
        assert gif.size == (W, H)
        frames = sum(1 for _ in ImageSequence.Iterator(gif))
    assert frames == summary["gif_frames"] == len(range(0, FRAMES, summary["gif_step"]))
    assert summary["gif_bytes"] == (tmp_path / files["gif"]).stat().st_size < 2_000_000
    with Image.open(tmp_path / files["strip"]) as strip:
        assert strip.height == H and strip.width > 8 * W
    with (tmp_path / files["detections"]).open(newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == summary["detections"]
    assert all(0 <= int(r["x0"]) < int(r["x1"]) <= W for r in rows)
    assert json.loads((tmp_path / files["report"]).read_text()) == summary


def test_detections_are_deterministic(tmp_path: Path) -> None:
    for name in ("a", "b"):
        detect_motion(str(tmp_path / name), frames=20, width=64, height=48, fps=10, seed=5)
    a = (tmp_path / "a" / "detections.csv").read_text()
    assert a == (tmp_path / "b" / "detections.csv").read_text()
    assert (tmp_path / "a" / "motion.gif").read_bytes() == (
        tmp_path / "b" / "motion.gif"
    ).read_bytes()


def test_gif_is_subsampled_to_stay_small(tmp_path: Path) -> None:
    summary = detect_motion(str(tmp_path), frames=150, width=160, height=120, fps=30)
    assert summary["gif_step"] > 1
    assert summary["gif_bytes"] < 2_000_000


@pytest.mark.parametrize("kwargs", [{"frames": 0}, {"fps": 0}, {"width": 4}, {"height": 2}])
def test_rejects_bad_sizes(tmp_path: Path, kwargs: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        detect_motion(str(tmp_path / "never"), **kwargs)
    assert not (tmp_path / "never").exists()
