"""The video workload split into decode -> process -> encode finds what detect_motion finds."""

from __future__ import annotations

from pathlib import Path

import pytest

from accelnet.workloads.video import detect_motion
from accelnet.workloads.video_pipeline import video_stages

W, H, FPS, FRAMES = 96, 72, 10, 24


def test_the_three_stages_chained_equal_the_single_job(tmp_path: Path) -> None:
    stages = dict(video_stages(str(tmp_path / "staged"), FRAMES, W, H, FPS, seed=3))
    assert list(stages) == ["decode", "process", "encode"]
    decode, process, encode = stages["decode"](), stages["process"](), stages["encode"]()
    for pixels, truth in decode:
        pixels.flags.writeable = False  # the way a stage receives frames: read-only views
        encode(*process(pixels, truth))
    staged = encode.finish()
    whole = detect_motion(str(tmp_path / "whole"), FRAMES, W, H, FPS, seed=3)
    assert staged["frames_seen"] == FRAMES and staged["workload"] == "video_pipeline"
    for key in ("detections", "frames_with_detections", "recall", "precision", "gif_frames"):
        assert staged[key] == whole[key]
    for name in ("detections.csv", "motion.gif", "strip.png"):
        assert (tmp_path / "staged" / name).read_bytes() == (tmp_path / "whole" / name).read_bytes()


def test_bad_sizes_are_refused_before_anything_runs(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="width and height must be >= 8"):
        video_stages(str(tmp_path / "never"), FRAMES, 4, H, FPS)
    assert not (tmp_path / "never").exists()
