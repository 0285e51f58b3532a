"""On a shared Ray cluster accelnet's GPUs are taken in Ray's own view (issue 26 item 11):
Ray Train, Ray Serve or anyone's Ray task is never given a GPU accelnet runs; and accelnet's
agents and the launches of its tasks show in Ray's own state (its dashboard)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from accelnet.runtime.clock import ManualClock
from accelnet.runtime.ray.connect import RayOptions
from accelnet.runtime.sdk import LocalCluster
from accelnet.sched import JobSpec, JobState
from tests.runtime.ray.clusters import connected_cluster

ray = pytest.importorskip("ray", reason="the Ray backend needs the ray extra")
pytestmark = pytest.mark.ray


@pytest.fixture(scope="module")
def cluster() -> Iterator[Any]:
    # Ray counts g0's GPUs; its dashboard runs (on 127.0.0.1: the state API needs it)
    yield from connected_cluster({"g0": "2xL4", "c0": "1xT4"}, gpus={"g0": 2}, dashboard=True)


def _gpus_free() -> float:
    return float(ray.available_resources().get("GPU", 0))


def _until(check: Any, what: str, limit: float = 30.0) -> None:
    end = time.monotonic() + limit  # Ray's resource view follows with a short lag
    while not check():
        assert time.monotonic() < end, what
        time.sleep(0.2)


def test_agents_hold_accelnets_gpus_while_it_runs_and_let_go_at_close(
    cluster: Any, tmp_path: Path
) -> None:
    assert ray.cluster_resources().get("GPU") == 2 and _gpus_free() == 2
    options = RayOptions(address=cluster.address, kill_grace_s=0.5)
    with options.connect(None, tmp_path / "work", ManualClock(0.0)) as backend:
        assert backend.hosts() == {"g0": True, "c0": True}
        _until(lambda: _gpus_free() == 0, "g0's agent holds its 2 GPUs in Ray's view")
        # a Ray task that asks for a GPU is not given one of accelnet's
        probe = ray.remote(num_gpus=1, num_cpus=0)(ray.get_gpu_ids).remote()
        ready, _ = ray.wait([probe], timeout=3.0)
        assert ready == []
        names = set(ray.util.list_named_actors())
        assert {n.split("/")[1] for n in names if n.startswith("accelnet-agent/")} == {
            "g0", "c0"}  # fmt: skip
        assert not [n for n in backend.notes if "Ray gave" in n]  # Ray's ids are accelnet's
    _until(lambda: _gpus_free() == 1, "closed: the GPUs are Ray's again (the probe took one)")
    assert sorted(ray.get(probe, timeout=30)) in ([0], [1])
    # hold_gpus=False leaves them free in Ray's view (a second accelnet, knowingly)
    free = RayOptions(address=cluster.address, kill_grace_s=0.5, hold_gpus=False)
    with free.connect(None, tmp_path / "work2", ManualClock(0.0)) as backend:
        assert backend.hosts() == {"g0": True, "c0": True}
        assert _gpus_free() == 2


def test_accelnets_task_launches_are_named_in_rays_state(cluster: Any, tmp_path: Path) -> None:
    from ray.util.state import list_tasks

    options = RayOptions(address=cluster.address, kill_grace_s=0.5, hold_gpus=False)
    with LocalCluster(workdir=tmp_path / "work", ray=options) as c:
        spec = JobSpec.model_validate({"name": "seen-in-ray", "run": "true"})
        rec = c.submit_spec(spec, job_id="seen-in-ray").wait(120)
        assert rec.state is JobState.SUCCEEDED, rec.error
    want = "accelnet: seen-in-ray.1.0"
    end = time.monotonic() + 60  # Ray's task events reach its state API in batches
    while True:
        names = {
            t.name for t in list_tasks(filters=[("name", "=", want)], raise_on_missing_output=False)
        }
        if want in names:
            break
        assert time.monotonic() < end, names
        time.sleep(1.0)
