"""``accelnet demo``: the five workloads as real jobs, followers fed by their gangs'
outputs, the video as a pipeline on different devices with its latency broken down, the
training gang's loss falling (and the job skipped, saying why, without PyTorch)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from accelnet.cli.main import app
from accelnet.fabric import load_fabric
from accelnet.runtime import demo as demo_mod
from accelnet.runtime.demo import NO_TORCH, TRAINING, DemoRun, DemoSizes, training_steps
from accelnet.runtime.sdk import LocalCluster

runner = CliRunner()


def test_demo_runs_all_five_workloads_and_breaks_down_the_video_latency(tmp_path: Path) -> None:
    pytest.importorskip("torch")
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
         "video-pipeline", "training"], "succeeded",
    )  # fmt: skip
    train = data["training"]
    assert train["metrics"]["steps"] == 100 and train["metrics"]["test_accuracy"] >= 0.85
    assert train["metrics"]["world"] == len(jobs["training"]["devices"])
    assert train["last_loss"] < train["first_loss"] / 5  # it learned
    assert data["skipped"] == {}
    # the inference service: a load ramp makes it ask for a second replica, no request
    # fails, and it is back to one once the load has stopped
    service = data["service"]
    assert service["requests"] > 0 and service["failed"] == 0
    assert "scale 2" in service["events"] and service["replicas_now"] == 1
    assert service["p95_ms"] is not None
    for rel in ("training/loss.png", "training/metrics.json", "inference/report.json",
                "render/render.png", "data/summary.json", "video/motion.gif", "video/strip.png",
                "video/latency.json", "video/latency.png"):  # fmt: skip
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


def test_training_steps_are_read_from_a_log_being_written() -> None:
    log = (
        '{"event": "start", "rank": 0}\n{"event": "step", "step": 1, "loss": 2.5}\n'
        'noise\n{"event": "step", "step": 2, "loss": 1.25}\n{"event": "step", "st'
    )
    assert training_steps(log) == [(1, 2.5), (2, 1.25)]  # the line cut short is left out


def test_without_pytorch_the_training_job_is_skipped_and_says_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = demo_mod.importlib.util.find_spec
    monkeypatch.setattr(demo_mod.importlib.util, "find_spec",
                        lambda name, *a: None if name == "torch" else real(name, *a))  # fmt: skip
    with LocalCluster("pcie-4xL4", workdir=tmp_path / "work") as cluster:
        run = DemoRun(cluster, tmp_path, DemoSizes(), 2, {}, {})
        run._train("any:2")
        assert run.jobs == {} and run.skipped == {TRAINING: NO_TORCH}
        assert cluster.controller.store.jobs() == []  # nothing was submitted
        assert run.finish_training() is None
