"""``accelnet demo``: the four workloads as real jobs, followers fed by their gangs'
outputs, the video as a pipeline on different devices with its latency broken down."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from accelnet.cli.main import app
from accelnet.fabric import load_fabric

runner = CliRunner()


def test_demo_runs_all_four_workloads_and_breaks_down_the_video_latency(tmp_path: Path) -> None:
    out = tmp_path / "demo"
    result = runner.invoke(
        app, ["demo", "--quick", "--out", str(out), "--json"], env={"COLUMNS": "200"}
    )
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["schema"] == "accelnet.demo/v1" and not data["emulated"]
    jobs = data["jobs"]
    assert {j: v["state"] for j, v in jobs.items()} == dict.fromkeys(
        ["inference", "render-tiles", "data-partitions", "render-assemble", "data-merge",
         "video-pipeline"], "succeeded",
    )  # fmt: skip
    for rel in ("inference/report.json", "render/render.png", "data/summary.json",
                "video/motion.gif", "video/strip.png", "video/latency.json",
                "video/latency.png"):  # fmt: skip
        assert (out / rel).stat().st_size > 0
    assert len(jobs["render-tiles"]["devices"]) == len(set(jobs["render-tiles"]["devices"]))
    # the followers read their gang's parts where the gang wrote them, not in the out folder
    assert not list((out / "render").glob("tile_*.npy"))
    assert not list((out / "data").glob("part_*.parquet"))

    pipeline = data["pipeline"]
    devices = len(load_fabric(None).devices)
    assert list(pipeline["stages"]) == ["decode", "process", "encode"]
    assert len(set(pipeline["stages"].values())) == min(3, devices)  # >= 2 on this machine
    assert set(pipeline["stages"].values()) == set(jobs["video-pipeline"]["devices"])
    lat = pipeline["latency_ms"]
    assert set(lat["compute"]) == {"decode", "process", "encode"}
    assert set(lat["transfer"]) == {"decode->process", "process->encode"}
    per = json.loads((out / "video" / "latency.json").read_text())["per_frame_ms"]
    assert len(per["total"]) == pipeline["frames"] == 30
    for k in range(pipeline["frames"]):
        parts = sum(v[k] for v in per["compute"].values()) + sum(
            v[k] for v in per["transfer"].values()
        )
        assert abs(parts - per["total"][k]) < 1e-3
    assert "per-frame latency" in result.stderr and "transfer decode->process" in result.stderr
