"""Reports: the side-by-side table, metrics.json, per-job CSVs and the PNG plots."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from rich.console import Console

from accelnet.sim.metrics import compute
from accelnet.sim.records import Sample
from accelnet.sim.report import CSV_FIELDS, downsample_step, safe_name, table, write_outputs
from tests.sim.test_metrics import fifo_result


def _render(obj: object) -> str:
    console = Console(width=200, record=True, file=None, force_terminal=False)
    with console.capture() as cap:
        console.print(obj)
    return cap.get()


def test_table_one_column_per_policy() -> None:
    results = [fifo_result("fifo"), fifo_result("srtf"), fifo_result("gavel/las")]
    metrics = [compute(r) for r in results]
    tab = table(results, metrics)
    headers = [str(c.header) for c in tab.columns]
    assert headers == ["figure", "unit", "fifo", "srtf", "gavel/las"]
    text = _render(tab)
    for row in ("JCT avg", "makespan lower bound", "makespan / lower bound", "rho max"):
        assert row in text
    assert "utilization V100" in text and "share t1" in text
    assert "24.0" in text  # makespan and its bound
    with pytest.raises(ValueError, match="metrics"):
        table(results, metrics[:1])


def test_table_tells_repeated_policies_apart() -> None:
    a, b = fifo_result("fifo"), fifo_result("fifo")
    b.seed = 7
    tab = table([a, b], [compute(a), compute(b)])
    assert [str(c.header) for c in tab.columns][2:] == ["fifo (seed 0)", "fifo (seed 7)"]


def test_write_outputs(tmp_path: Path) -> None:
    results = [fifo_result("fifo"), fifo_result("las/gavel: v2"), fifo_result("fifo")]
    metrics = [compute(r) for r in results]
    out = tmp_path / "report"
    paths = write_outputs(out, results, metrics)
    names = sorted(p.name for p in paths)
    assert names == sorted(
        [
            "metrics.json",
            "jobs-fifo.csv",
            "jobs-las_gavel_v2.csv",
            "jobs-fifo-seed0.csv",
            "jct_cdf.png",
            "utilization.png",
            "queue.png",
        ]
    )
    assert all(p.parent == out and p.is_file() for p in paths)

    with (out / "metrics.json").open() as fh:
        doc = json.load(fh)
    assert doc["schema"] == "accelnet.sim.report/v1"
    assert [r["policy"] for r in doc["runs"]] == ["fifo", "las/gavel: v2", "fifo"]
    run = doc["runs"][0]
    assert (run["fabric"], run["trace"], run["seed"]) == ("one-v100", "hand", 0)
    assert run["metrics"]["schema"] == "accelnet.sim.metrics/v1"
    assert run["metrics"]["makespan_s"] == 24.0

    with (out / "jobs-fifo.csv").open(newline="") as fh:
        rows = list(csv.reader(fh))
    assert tuple(rows[0]) == CSV_FIELDS
    assert len(rows) == 1 + len(results[0].jobs)
    by_id = {r[0]: dict(zip(CSV_FIELDS, r, strict=True)) for r in rows[1:]}
    assert by_id["b"]["jct"] == "13.0" and by_id["b"]["queueing"] == "8.0"
    assert float(by_id["b"]["rho"]) == pytest.approx(169 / 105, rel=1e-6)
    assert (
        by_id["d"]["end"] == "" and by_id["d"]["rho"] == "" and by_id["d"]["state"] == "unfinished"
    )

    for name in ("jct_cdf.png", "utilization.png", "queue.png"):
        path = out / name
        assert path.stat().st_size > 0
        with Image.open(path) as img:
            assert img.format == "PNG"
            assert img.size[0] > 0 and img.size[1] > 0
            img.verify()


def test_write_outputs_with_no_data(tmp_path: Path) -> None:
    r = fifo_result("empty")
    r.jobs, r.samples = [], []
    paths = write_outputs(tmp_path, [r], [compute(r)])
    assert len(paths) == 5
    with Image.open(tmp_path / "jct_cdf.png") as img:
        assert img.format == "PNG"


def test_write_outputs_long_series(tmp_path: Path) -> None:
    r = fifo_result("long")
    rng = np.random.default_rng(3)
    busy = rng.integers(0, 9, size=50_000)
    r.samples = [Sample(float(i), int(b), 8, 100.0 * int(b), int(b), 0) for i, b in enumerate(busy)]
    r.end = 50_000.0
    paths = write_outputs(tmp_path, [r], [compute(r)])
    assert (tmp_path / "utilization.png") in paths


def test_downsample_keeps_extremes_and_ends() -> None:
    t = np.arange(100_000, dtype=np.float64)
    v = np.zeros_like(t)
    v[12_345] = 9.0  # a single spike
    v[77_777] = -3.0  # a single dip
    v[-1] = 4.0
    ts, vs = downsample_step(t, v, max_points=3000)
    assert len(ts) <= 3001
    assert np.all(np.diff(ts) > 0)
    assert ts[0] == 0.0 and ts[-1] == t[-1] and vs[-1] == 4.0
    assert 9.0 in vs and -3.0 in vs
    assert ts[list(vs).index(9.0)] == 12_345.0
    short_t, short_v = downsample_step(t[:10], v[:10])
    assert len(short_t) == 10 and len(short_v) == 10


@pytest.mark.parametrize(
    ("name", "safe"),
    [("fifo", "fifo"), ("gavel/las: v2", "gavel_las_v2"), ("../..", "policy"), ("a b", "a_b")],
)
def test_safe_name(name: str, safe: str) -> None:
    assert safe_name(name) == safe
