"""``serve_digits``: a real classifier, served in timed batches, with its files."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path
from typing import Any

import pytest

from accelnet.workloads.inference import serve_digits


def test_serves_accurate_predictions_and_writes_its_files(tmp_path: Path) -> None:
    out = tmp_path / "new" / "dir"  # created on demand
    summary = serve_digits(str(out), device="cuda:1", batch_size=32, requests=200, seed=3)

    assert summary["accuracy"] > 0.9
    assert summary["stream_accuracy"] > 0.9
    assert summary["device"] == "cuda:1"
    assert summary["requests"] == 200
    assert summary["batches"] == math.ceil(200 / 32)
    lat = summary["latency_ms"]
    assert 0 < lat["p50"] <= lat["p99"] <= lat["max"]
    assert summary["throughput_per_s"] > 0
    json.dumps(summary, allow_nan=False)  # JSON-serialisable, no NaN/inf

    with (out / summary["files"]["predictions"]).open(newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 200
    assert [int(r["request"]) for r in rows] == list(range(200))
    assert {int(r["batch"]) for r in rows} == set(range(summary["batches"]))
    hits = sum(r["label"] == r["predicted"] for r in rows)
    assert hits / 200 == pytest.approx(summary["stream_accuracy"])
    assert all(0.0 < float(r["confidence"]) <= 1.0 for r in rows)

    report = json.loads((out / summary["files"]["report"]).read_text())
    assert len(report.pop("batch_latency_ms")) == summary["batches"]
    assert report == summary


def test_predictions_are_deterministic_for_a_seed(tmp_path: Path) -> None:
    a = serve_digits(str(tmp_path / "a"), batch_size=50, requests=120, seed=7)
    b = serve_digits(str(tmp_path / "b"), batch_size=50, requests=120, seed=7)
    assert a["accuracy"] == b["accuracy"]
    text = (tmp_path / "a" / "predictions.csv").read_text()
    assert text == (tmp_path / "b" / "predictions.csv").read_text()


@pytest.mark.parametrize("kwargs", [{"batch_size": 0}, {"requests": 0}])
def test_rejects_empty_batches_and_streams(tmp_path: Path, kwargs: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match=next(iter(kwargs))):
        serve_digits(str(tmp_path), **kwargs)
