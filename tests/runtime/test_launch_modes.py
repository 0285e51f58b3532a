"""Per-host launch, setup and workdir (issue 23 items 2 and 3), on real worker processes:
a job launched per host runs one process on each host of its gang (``torchrun`` there
starts the host's ranks and meets the other hosts); ``setup`` runs once per host before the
ranks and fails the attempt with its log; the ranks start in ``workdir``."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from accelnet.runtime.local.taskenv import host_launch_env
from accelnet.runtime.sdk import LocalCluster
from accelnet.sched import JobSpec, JobState
from tests.runtime.local.test_rendezvous import TRAIN

ROOT = Path(__file__).resolve().parents[2]
PAIR = str(ROOT / "examples" / "fabrics" / "l4-pair.yaml")  # 2 hosts x 2 L4


def _job(**fields: Any) -> JobSpec:
    return JobSpec.model_validate({"resources": {"accelerators": "L4:4"}, **fields})


def test_host_launch_env_gives_torchrun_its_options_and_no_per_rank_names() -> None:
    env = host_launch_env(1, ["node0", "node1"], 2)
    assert (env["PET_NNODES"], env["PET_NODE_RANK"], env["PET_NPROC_PER_NODE"]) == ("2", "1", "2")
    assert env["NODE_RANK"] == env["GROUP_RANK"] == env["ACCELNET_NODE_RANK"] == "1"
    assert env["ACCELNET_HOSTS"] == "node0,node1" and env["ACCELNET_NUM_NODES"] == "2"
    assert not {"RANK", "WORLD_SIZE", "LOCAL_RANK"} & set(env)  # the launcher's to give


def test_launch_setup_and_workdir_are_checked_in_the_spec() -> None:
    with pytest.raises(ValueError, match="launch"):
        _job(name="j", run="true", launch="per-rack")
    with pytest.raises(ValueError, match="setup"):
        _job(name="j", run="true", setup="   ")
    with pytest.raises(ValueError, match="workdir"):
        _job(name="j", run="true", workdir="a\x00b")
    ok = _job(name="j", run="true", launch="per-host", setup="true", workdir="sub")
    assert ok.launch.value == "per-host" and ok.workdir == "sub"


# the script of tests/runtime/local/test_rendezvous.py: an unmodified torch.distributed program
TORCHRUN_SCRIPT = TRAIN


@pytest.mark.slow
def test_a_job_launched_per_host_runs_torchrun_once_per_host(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    script = tmp_path / "allreduce.py"
    script.write_text(TORCHRUN_SCRIPT)
    out = tmp_path / "out"
    out.mkdir()
    setup = 'echo "host $ACCELNET_NODE_RANK of $ACCELNET_NUM_NODES" > "setup-$ACCELNET_NODE_RANK"'
    spec = _job(
        name="ddp",
        launch="per-host",
        setup=setup,
        workdir=str(out),
        run=f"{sys.executable} -m torch.distributed.run {script} {out}",
        timeout_s=240,
    )
    with LocalCluster(PAIR, workdir=tmp_path / "work") as cluster:
        job = cluster.submit_spec(spec)
        rec = job.wait(300)
        assert rec.state is JobState.SUCCEEDED, rec.error
        events = [e.detail for e in cluster.store.events(job.id)]
        log_dir = tmp_path / "work" / "logs"
    ranks = [json.loads((out / f"rank{r}.json").read_text()) for r in range(4)]
    assert {r["world"] for r in ranks} == {4}
    assert [r["sum"] for r in ranks] == [10.0] * 4  # 1+2+3+4, reduced across both hosts
    assert sorted((r["group_rank"], r["local_rank"]) for r in ranks) == [
        (0, 0), (0, 1), (1, 0), (1, 1),
    ]  # fmt: skip
    by_node = {r["group_rank"]: r["host_devices"] for r in ranks}
    assert by_node == {0: "node0/gpu0,node0/gpu1", 1: "node1/gpu0,node1/gpu1"}
    assert {r["cwd"] for r in ranks} == {str(out)}  # workdir
    # one process per host: two rank tasks (0 and 1), each one's setup before it
    started = [d for d in events if d.startswith(f"{job.id}.1.")]
    assert any(d.startswith(f"{job.id}.1.0") for d in started)
    assert any(d.startswith(f"{job.id}.1.1") for d in started)
    assert not any(d.startswith(f"{job.id}.1.2") for d in started)
    assert (out / "setup-0").read_text() == "host 0 of 2\n"
    assert (out / "setup-1").read_text() == "host 1 of 2\n"
    assert not (log_dir / f"{job.id}.1.setup-0.err").exists()  # wrote nothing there


def test_setup_runs_once_per_host_before_any_rank(tmp_path: Path) -> None:
    work = tmp_path / "wd"
    work.mkdir()
    setup = (
        'sleep 0.3; echo "$ACCELNET_NODE_RANK" >> setups; date +%s.%N > "done-$ACCELNET_NODE_RANK"'
    )
    run = 'cat setups | sort | tr "\\n" " " > "seen-$ACCELNET_RANK"; pwd > "cwd-$ACCELNET_RANK"'
    with LocalCluster(PAIR, workdir=tmp_path / "work") as cluster:
        job = cluster.submit_spec(_job(name="s", setup=setup, run=run, workdir=str(work)))
        rec = job.wait(120)
        assert rec.state is JobState.SUCCEEDED, rec.error
    assert sorted(work.joinpath("setups").read_text().split()) == ["0", "1"]  # once per host
    for rank in range(4):  # every rank saw both hosts' setup done, and started in workdir
        assert work.joinpath(f"seen-{rank}").read_text().split() == ["0", "1"]
        assert work.joinpath(f"cwd-{rank}").read_text().strip() == str(work)


def test_a_failing_setup_fails_the_attempt_with_its_log_and_no_rank_runs(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    spec = _job(name="bad", setup="echo 'pip: no such package' >&2; exit 7",
                run=f"touch {marker}", max_retries=1, retry={"backoff_s": 0})  # fmt: skip
    with LocalCluster(PAIR, workdir=tmp_path / "work") as cluster:
        job = cluster.submit_spec(spec)
        rec = job.wait(120)
        events = cluster.store.events(job.id)
    assert rec.state is JobState.FAILED and rec.failures == 2  # each attempt's setup failed
    assert rec.error is not None and "setup on node" in rec.error and "failed" in rec.error
    log = Path(rec.error.split("(log: ")[1].rstrip(")"))
    assert log.name.startswith(f"{job.id}.2.setup-") and "no such package" in log.read_text()
    assert not marker.exists()
    assert not any(e.kind == "task:started" and ".setup-" not in e.detail for e in events)


def test_a_missing_workdir_fails_the_task_naming_the_folder(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-folder"
    with LocalCluster(PAIR, workdir=tmp_path / "work") as cluster:
        job = cluster.submit_spec(
            JobSpec.model_validate({"name": "w", "run": "true", "workdir": str(missing)})
        )
        rec = job.wait(60)
    assert rec.state is JobState.FAILED and rec.error is not None
    assert str(missing) in rec.error


def test_a_job_cancelled_during_setup_starts_no_rank(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    spec = _job(name="c", setup="sleep 30", run=f"touch {marker}")
    with LocalCluster(PAIR, workdir=tmp_path / "work") as cluster:
        job = cluster.submit_spec(spec)
        deadline = time.monotonic() + 60
        while not any(e.kind == "task:started" for e in cluster.store.events(job.id)):
            assert time.monotonic() < deadline, "setup never started"
            time.sleep(0.05)
        job.cancel()
        rec = job.wait(60)
        holders = [cluster.controller.jobs_on(d) for d in cluster.fabric.devices]
    assert rec.state is JobState.CANCELLED and not marker.exists()
    assert holders == [[]] * 4  # every device given back
