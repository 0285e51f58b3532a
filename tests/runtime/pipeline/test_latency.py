"""The latency breakdown: compute per stage and transfer per hop add up to the total."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from accelnet.runtime.pipeline.latency import breakdown, hop_names, plot


def stamps(frames: int, stages: int, seed: int = 0) -> np.ndarray:
    """Increasing start <= end <= acquired <= published <= next start, per frame."""
    rng = np.random.default_rng(seed)
    steps = rng.uniform(0.0001, 0.01, size=(frames, stages * 4))
    t = np.cumsum(steps, axis=1) + np.arange(frames)[:, None] * 0.05
    return t.reshape(frames, stages, 4)


def test_parts_add_up_to_the_total() -> None:
    names = ["decode", "process", "encode"]
    result = breakdown(stamps(50, 3), names)
    json.dumps(result, allow_nan=False)
    per = result["per_frame_ms"]
    assert result["hops"] == hop_names(names) == ["decode->process", "process->encode"]
    for k in range(50):
        parts = sum(per["compute"][s][k] for s in names)
        parts += sum(per["transfer"][h][k] for h in result["hops"])
        assert parts == pytest.approx(per["total"][k], abs=1e-3)
        for h in result["hops"]:
            assert per["copy"][h][k] + per["wait"][h][k] == pytest.approx(per["transfer"][h][k],
                                                                         abs=1e-3)  # fmt: skip
            assert per["copy"][h][k] > 0 and per["wait"][h][k] > 0
    summary = result["summary_ms"]
    assert summary["total"]["p50"] <= summary["total"]["p95"] <= summary["total"]["max"]
    assert summary["compute_total"]["mean"] + summary["transfer_total"]["mean"] == pytest.approx(
        summary["total"]["mean"], abs=1e-2
    )


def test_shapes_are_checked_and_empty_streams_are_fine(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="for 2 stages"):
        breakdown(stamps(3, 3), ["a", "b"])
    empty = breakdown(np.zeros((0, 2, 4)), ["a", "b"])
    assert empty["frames"] == 0 and empty["summary_ms"]["total"]["p50"] == 0.0
    plot(breakdown(stamps(20, 2), ["a", "b"]), tmp_path / "l.png")
    assert (tmp_path / "l.png").read_bytes()[:4] == b"\x89PNG"
