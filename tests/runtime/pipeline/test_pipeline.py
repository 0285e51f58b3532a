"""Pipeline jobs on real worker processes: stages on different devices, frames through
shared memory, whole and in order, with a latency breakdown; failures clean up."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import psutil
import pytest

import accelnet
from accelnet.runtime.pipeline.stages import Pipeline, Stage, find_report
from accelnet.runtime.sdk import JobFailedError

FRAMES = 30


def note(record: str | None, stage: str) -> None:
    if record is not None:
        Path(record, f"{stage}.pid").write_text(str(os.getpid()))
        Path(record, "shm").write_text(os.environ["ACCELNET_SHM"])


class Source:
    def __init__(self, record: str | None = None) -> None:
        note(record, "source")

    def __iter__(self) -> Iterator[tuple[np.ndarray, dict[str, int]]]:
        for k in range(FRAMES):
            yield np.full((24, 32), k, np.int32), {"k": k}


class AddOne:
    def __init__(self, record: str | None = None, fail_at: int | None = None) -> None:
        self.fail_at = fail_at
        note(record, "add")

    def __call__(self, array: np.ndarray, meta: dict[str, int]) -> tuple[np.ndarray, Any]:
        if meta["k"] == self.fail_at:
            raise ValueError(f"cannot process frame {meta['k']}")
        return array + 1, meta


class Collect:
    def __init__(self, record: str | None = None) -> None:
        note(record, "collect")
        self.seen: list[tuple[int, int, int]] = []

    def __call__(self, array: np.ndarray, meta: dict[str, int]) -> None:
        assert not array.flags.writeable  # read in place, from shared memory
        self.seen.append((meta["k"], int(array.min()), int(array.max())))

    def finish(self) -> dict[str, Any]:
        return {"seen": self.seen, "pid": os.getpid()}


def pipeline(record: str | None = None, fail_at: int | None = None) -> Pipeline:
    return Pipeline([Stage("source", lambda: Source(record)),
                     Stage("add", lambda: AddOne(record, fail_at)),
                     Stage("collect", lambda: Collect(record))], slots=2)  # fmt: skip


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def check_frames(report: dict[str, Any]) -> None:
    assert report["frames"] == FRAMES
    assert report["result"]["seen"] == [(k, k + 1, k + 1) for k in range(FRAMES)]
    lat = report["latency"]
    per = lat["per_frame_ms"]
    for k in range(FRAMES):
        parts = sum(per["compute"][s][k] for s in lat["stages"])
        parts += sum(per["transfer"][h][k] for h in lat["hops"])
        assert parts == pytest.approx(per["total"][k], abs=1e-3)
        assert all(per["transfer"][h][k] >= per["copy"][h][k] >= 0 for h in lat["hops"])


def test_stages_run_on_three_devices_and_frames_arrive_in_order(tmp_path: Path) -> None:
    with accelnet.local(fabric="pcie-4xL4", workdir=tmp_path) as cluster:
        job = cluster.submit_pipeline(pipeline())
        report = find_report(job.result(timeout=60))
        placement = job.record.placement
        sink_log = job.logs(rank=2)  # the timeline in the task's log
    assert "[pipeline] stage collect (rank 2" in sink_log
    assert "[pipeline] transfer source->add: p50 " in sink_log
    assert "[pipeline] per frame: p50 " in sink_log
    assert report is not None and placement is not None
    check_frames(report)
    stages = {s["stage"]: s for s in report["stages"]}
    assert [stages[n]["device"] for n in ("source", "add", "collect")] == list(placement.devices)
    assert len(set(placement.devices)) == 3
    assert [s["frames"] for s in report["stages"]] == [FRAMES] * 3
    assert cluster.backend.live_shm() == []


def test_more_stages_than_devices_still_one_process_per_stage(tmp_path: Path) -> None:
    with accelnet.local(fabric="pcie-4xL4", workdir=tmp_path) as cluster:
        job = cluster.submit_pipeline(pipeline(), accelerators="any:2")
        results = job.result(timeout=60)
    report = find_report(results)
    assert report is not None
    check_frames(report)
    by_stage = {s["stage"]: s for s in report["stages"]}
    assert by_stage["source"]["rank"] == by_stage["collect"]["rank"] == 0
    assert by_stage["add"]["rank"] == 1
    assert by_stage["source"]["device"] != by_stage["add"]["device"]
    assert len({s["pid"] for s in report["stages"]}) == 3  # the source was forked off rank 0
    assert [r["stages"] for r in results] == [["source", "collect"], ["add"]]


def test_a_failing_stage_fails_the_job_and_leaves_no_shared_memory(tmp_path: Path) -> None:
    with accelnet.local(fabric="pcie-4xL4", workdir=tmp_path / "w") as cluster:
        job = cluster.submit_pipeline(pipeline(record=str(tmp_path), fail_at=5),
                                      accelerators="any:2")  # fmt: skip
        with pytest.raises(JobFailedError, match="ValueError: cannot process frame 5"):
            job.result(timeout=60)
        shm = Path((tmp_path / "shm").read_text())
        assert cluster.backend.live_shm() == []
        assert not shm.exists()  # rings, sockets and the folder: all gone
        stages = [int((tmp_path / f"{s}.pid").read_text()) for s in ("source", "add", "collect")]
        assert len(set(stages)) == 3
        deadline = time.monotonic() + 60
        while not gone(stages[0]):  # the source ran in a process forked off rank 0's worker
            assert time.monotonic() < deadline, "the forked source stage outlived its job"
            time.sleep(0.01)


def test_a_pipeline_needs_two_stages_and_at_most_one_device_each() -> None:
    with pytest.raises(ValueError, match="at least two stages"):
        Pipeline([Stage("only", Source)])
    with pytest.raises(ValueError, match="unique identifiers"):
        Pipeline([Stage("a", Source), Stage("a", Collect)])
    with pytest.raises(ValueError, match="runs on 1 to 2 devices, not 3"):
        Pipeline([Stage("a", Source), Stage("b", Collect)]).placement(3)
