"""The training acceptance of issue 23: accelnet.workloads.ddp_digits, a real PyTorch DDP job
(CPU, gloo), as a 4-rank gang over the two hosts of examples/fabrics/l4-pair.yaml,
launched per device and per host (torchrun): loss falls, accuracy is high, and the weights
equal a single process's for the same seed and global batch; preempted by a more
important job, it resumes from its checkpoint and does no step twice."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from accelnet.runtime.sdk import LocalCluster
from accelnet.sched import JobSpec, JobState, Scheduler

pytest.importorskip("torch")
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "src" / "accelnet" / "workloads" / "ddp_digits.py"  # a plain script
PAIR = str(ROOT / "examples" / "fabrics" / "l4-pair.yaml")  # 2 hosts x 2 L4
STEPS = 120
# float sums in another order (4 shards' gradients averaged vs one batch's): the same
# weights to about 1e-8 relative; a resumed gang's first step rebuilds DDP's buckets
RTOL = 1e-5


def _metrics(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())


def run_single(folder: Path) -> dict[str, Any]:
    """One plain process, the same seed and global batch: its metrics."""
    out = folder / "metrics.json"
    subprocess.run([sys.executable, str(SCRIPT), "--steps", str(STEPS), "--out", str(out)],
                   check=True, capture_output=True, timeout=300)  # fmt: skip
    return _metrics(out)


@pytest.fixture
def single(ddp_single: dict[str, Any]) -> dict[str, Any]:
    return ddp_single  # one run for the session (tests/runtime/conftest.py)


def _job(name: str, out: Path, launch: str, extra: str = "", **fields: Any) -> JobSpec:
    program = f"{SCRIPT} --steps {STEPS} --out {out} {extra}"
    run = (
        f"{sys.executable} -m torch.distributed.run {program}"
        if launch == "per-host"
        else f"{sys.executable} {program}"
    )
    return JobSpec.model_validate({
        "name": name, "resources": {"accelerators": "L4:4"}, "launch": launch, "run": run,
        "checkpointable": True, "timeout_s": 600, **fields,
    })  # fmt: skip


@pytest.mark.parametrize("launch", ["per-device", "per-host"])
def test_ddp_over_two_hosts_learns_and_matches_one_process(
    launch: str, single: dict[str, Any], tmp_path: Path
) -> None:
    out = tmp_path / "metrics.json"
    with LocalCluster(PAIR, workdir=tmp_path / "work") as cluster:
        job = cluster.submit_spec(_job("ddp", out, launch))
        rec = job.wait(600)
        assert rec.state is JobState.SUCCEEDED, rec.error
        log = cluster.controller.log_path(job.id, 1, 0, "out")
        hosts = {d.split("/")[0] for d in rec.placement.devices} if rec.placement else set()
    assert hosts == {"node0", "node1"}
    got = _metrics(out)
    assert got["world"] == 4 and got["steps"] == STEPS
    assert got["test_accuracy"] >= 0.9
    assert got["param_norm"] == pytest.approx(single["param_norm"], rel=RTOL)
    assert got["final_loss"] == pytest.approx(single["final_loss"], rel=1e-3)
    if launch == "per-device":  # rank 0's own log: the loss fell
        steps = [json.loads(x) for x in log.read_text().splitlines() if '"step"' in x]
        assert steps[-1]["loss"] < steps[0]["loss"] / 10


def preempted_once(
    launch: str, tmp_path: Path, ray: Any = None
) -> tuple[dict[str, Any], list[str], Path]:
    """The job, preempted mid-run by a more important one, and resumed: its metrics, its
    rank 0's stdout lines of each attempt, and its log folder. On ``PAIR``, or on the Ray
    cluster of ``ray`` (RayOptions) if given."""
    out = tmp_path / "metrics.json"
    sched = Scheduler("priority", preemption="priority")
    fabric = None if ray is not None else PAIR
    with LocalCluster(fabric, workdir=tmp_path / "work", scheduler=sched, ray=ray) as cluster:
        # the first attempt sleeps 0.05 s a step, so that the preemption finds it mid-run;
        # the resumed one runs at full speed (the steps' arithmetic is the same)
        sleep = '$([ "$ACCELNET_ATTEMPT" = 1 ] && echo 0.05 || echo 0)'
        low = cluster.submit_spec(_job(
            "low", out, launch, f"--step-sleep {sleep} --checkpoint-every 10", priority=0,
        ))  # fmt: skip
        deadline = time.monotonic() + 300
        while True:  # until it has checkpointed a few times
            live = cluster.controller.log_path(low.id, 1, 0, "out")  # written to meanwhile
            lines = live.read_text().splitlines() if live.exists() else []
            if sum('"step"' in x for x in lines) >= 35:
                break
            assert not low.state.is_finished(), "it ended before it could be preempted"
            assert time.monotonic() < deadline, "the job never got going"
            time.sleep(0.1)
        high = cluster.submit_spec(JobSpec.model_validate({
            "name": "high", "priority": 10, "resources": {"accelerators": "L4:4"},
            "run": "true",
        }))  # fmt: skip
        assert high.wait(300).state is JobState.SUCCEEDED
        rec = low.wait(600)
        assert rec.state is JobState.SUCCEEDED, rec.error
        assert rec.attempts == 2 and rec.failures == 0  # preempted: not a failure
        logs = [cluster.controller.log_path(low.id, a, 0, "out") for a in (1, 2)]
    return _metrics(out), [p.read_text() for p in logs], logs[0].parent


@pytest.mark.parametrize("launch", ["per-device"])
def test_a_preempted_ddp_job_resumes_from_its_checkpoint(
    launch: str, single: dict[str, Any], tmp_path: Path
) -> None:
    got, (first, second), _ = preempted_once(launch, tmp_path)
    assert_resumed(got, first, second, single)


def assert_resumed(got: dict[str, Any], first: str, second: str, single: dict[str, Any]) -> None:
    """The run stopped where it had got to, resumed there, ran every step once and ended
    with a single process's weights."""
    events = [json.loads(x) for x in first.splitlines() if x.startswith("{")]
    stopped = next(e for e in events if e["event"] == "preempted")["step"]
    last = max(e["step"] for e in events if e["event"] == "step")
    assert stopped == last  # it stopped where it had got to, with a checkpoint there
    again = [json.loads(x) for x in second.splitlines() if x.startswith("{")]
    start = next(e for e in again if e["event"] == "start")
    assert (start["resumed_from"], start["attempt"]) == (stopped, 2)
    assert got["resumed_from"] == stopped
    assert got["steps_run_this_attempt"] == STEPS - stopped  # nothing run twice or skipped
    assert got["steps"] == STEPS
    assert got["param_norm"] == pytest.approx(single["param_norm"], rel=RTOL)
