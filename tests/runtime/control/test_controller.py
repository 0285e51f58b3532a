"""The controller with real worker processes: gangs, retries, cancel, lost workers."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import psutil
import pytest

import accelnet
from accelnet.runtime.control.controller import JobRejectedError
from accelnet.runtime.sdk import JobFailedError
from accelnet.sched import JobSpec, JobState


def env_of_rank() -> dict[str, str]:
    keys = ("ACCELNET_RANK", "ACCELNET_WORLD_SIZE", "ACCELNET_DEVICE", "ACCELNET_DEVICES",
            "CUDA_VISIBLE_DEVICES", "ACCELNET_EMULATED")  # fmt: skip
    return {k: os.environ.get(k, "") for k in keys}


def add(a: int, b: int) -> int:
    return a + b


def test_gang_gets_distinct_devices_and_the_right_environment(tmp_path: Path) -> None:
    with accelnet.local(fabric="pcie-4xL4", workdir=tmp_path) as cluster:
        job = cluster.submit(env_of_rank, accelerators="L4:2", topology={"required": "host"})
        ranks = job.result(timeout=60)
        rec = job.record
    assert rec.state is JobState.SUCCEEDED and rec.placement is not None
    devices = list(rec.placement.devices)
    assert [r["ACCELNET_RANK"] for r in ranks] == ["0", "1"]
    assert [r["ACCELNET_DEVICE"] for r in ranks] == devices
    assert len(set(devices)) == 2
    assert {r["ACCELNET_DEVICES"] for r in ranks} == {",".join(devices)}
    assert {r["ACCELNET_WORLD_SIZE"] for r in ranks} == {"2"}
    # an emulated GPU never sees a real one
    assert {r["CUDA_VISIBLE_DEVICES"] for r in ranks} == {""}
    assert {r["ACCELNET_EMULATED"] for r in ranks} == {"1"}


def test_callable_result_and_entrypoint(tmp_path: Path) -> None:
    with accelnet.local(workdir=tmp_path) as cluster:
        assert cluster.submit(add, 2, 3).result(timeout=60) == 5
        spec = JobSpec.model_validate(
            {"name": "ep", "entrypoint": {"function": "operator:mul", "args": [6, 7]}}
        )
        assert cluster.submit_spec(spec).result(timeout=60) == 42


def test_failing_task_is_retried_then_failed_with_its_log(tmp_path: Path) -> None:
    spec = JobSpec.model_validate(
        {"name": "flaky", "run": "echo trying >&2; exit 3", "max_retries": 1}
    )
    with accelnet.local(workdir=tmp_path) as cluster:
        job = cluster.submit_spec(spec)
        with pytest.raises(JobFailedError, match="rank 0 failed"):
            job.result(timeout=60)
        rec = job.record
        events = [e.kind for e in cluster.store.events(job.id)]
        assert job.logs(stream="err").strip() == "trying"
    assert rec.state is JobState.FAILED
    assert rec.attempts == 2 and rec.failures == 2
    assert "log:" in (rec.error or "") and ".err" in (rec.error or "")
    assert events.count("job:starting") == 2 and events.count("job:admitted") == 2
    assert events[-1] == "job:failed"


def _sleepers(marker: str) -> list[psutil.Process]:
    return [p for p in psutil.process_iter(["cmdline"])
            if marker in " ".join(p.info["cmdline"] or [])]  # fmt: skip


def test_cancel_kills_the_process_tree(tmp_path: Path) -> None:
    marker = f"sleep 1000.{os.getpid()}"
    spec = JobSpec.model_validate({"name": "long", "run": f"{marker} & {marker}; wait"})
    with accelnet.local(workdir=tmp_path) as cluster:
        job = cluster.submit_spec(spec)
        deadline = time.monotonic() + 30
        while job.state is not JobState.RUNNING or len(_sleepers(marker)) < 2:
            assert time.monotonic() < deadline, "the job never ran"
            time.sleep(0.05)
        job.cancel()
        rec = job.wait(timeout=30)
        assert rec.state is JobState.CANCELLED
        deadline = time.monotonic() + 60
        while _sleepers(marker):
            assert time.monotonic() < deadline, "a process of the cancelled job survived"
            time.sleep(0.05)


def wait_and_report(path: str) -> str:
    print("before the kill", flush=True)
    Path(path).write_text(str(os.getpid()))
    time.sleep(30)
    return "slept"


def quick() -> str:
    return "second try"


def test_a_killed_worker_fails_its_task_and_is_replaced(tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    with accelnet.local(workdir=tmp_path / "w") as cluster:
        job = cluster.submit(wait_and_report, str(pid_file), accelerators="any:1")
        deadline = time.monotonic() + 30
        while not pid_file.exists() or not pid_file.read_text():
            assert time.monotonic() < deadline
            time.sleep(0.05)
        os.kill(int(pid_file.read_text()), signal.SIGKILL)  # the worker runs the callable
        rec = job.wait(timeout=30)
        assert rec.state is JobState.FAILED and "lost" in (rec.error or "")
        assert job.logs() == "before the kill\n"  # what it wrote before it died is kept
        # the device is usable again: a new worker runs the next job
        again = cluster.submit(quick, accelerators="any:1")
        assert again.result(timeout=60) == "second try"


def test_rejected_jobs_are_not_stored(tmp_path: Path) -> None:
    with accelnet.local(workdir=tmp_path) as cluster:
        with pytest.raises(JobRejectedError, match="has no H100"):
            cluster.submit(quick, accelerators="H100:1")
        assert cluster.store.jobs() == []


def test_a_drawn_job_id_that_meets_an_earlier_one_is_drawn_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import uuid

    from accelnet.runtime.control import controller as ctl
    from accelnet.runtime.control.store import JobExistsError

    same, other = uuid.UUID("1" * 32), uuid.UUID("2" * 32)
    draws = iter([same, same, other])
    real = uuid.uuid4
    monkeypatch.setattr(ctl.uuid, "uuid4", lambda: next(draws, None) or real())
    spec = JobSpec.model_validate({"name": "t", "run": "true"})
    with accelnet.local(workdir=tmp_path) as cluster:
        first = cluster.submit_spec(spec)
        second = cluster.submit_spec(spec)  # drew the first one's suffix, then another
        assert (first.id, second.id) == ("t-11111111", "t-22222222")
        assert [r.id for r in cluster.store.jobs()] == [first.id, second.id]
        with pytest.raises(JobExistsError):  # an id the caller chose is theirs to change
            cluster.submit_spec(spec, job_id=first.id)


def test_job_files_through_the_sdk(tmp_path: Path) -> None:
    from accelnet.sched.jobfile import JobSpecError

    jobs = tmp_path / "j.yaml"
    jobs.write_text("jobs:\n  - {name: a, run: 'echo a'}\n  - {name: b, run: 'echo b'}\n")
    bad = tmp_path / "bad.yaml"
    bad.write_text("jobs:\n  - {name: a, run: 'echo a'}\n  - {name: b, run: x, gpus: 2}\n")
    with accelnet.local(workdir=tmp_path / "w") as cluster:
        with pytest.raises(JobSpecError, match="gpus: unknown key"):
            cluster.submit_file(bad)
        assert cluster.store.jobs() == []  # nothing submitted from a bad file
        handles = cluster.submit_file(jobs)
        assert [h.wait(timeout=60).state for h in handles] == [JobState.SUCCEEDED] * 2
        assert [h.logs().strip() for h in handles] == ["a", "b"]


def chatty(go: str) -> str:
    print("hello from the task", flush=True)
    while not Path(go).exists():
        time.sleep(0.02)
    return "done"


def test_output_while_running_and_after_and_why_a_job_waits(tmp_path: Path) -> None:
    go = tmp_path / "go"
    with accelnet.local(fabric="pcie-4xL4", workdir=tmp_path / "w") as cluster:
        busy = [cluster.submit(chatty, str(go), accelerators="L4:1") for _ in range(4)]
        queued = cluster.submit(add, 1, 2, accelerators="L4:1")
        deadline = time.monotonic() + 30
        while "hello" not in busy[0].logs():  # read from the running task's spool
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert cluster.reason(queued.id) == "needs 1 x L4; 0 of 4 free"
        assert cluster.reason(busy[0].id) is None
        go.touch()
        assert [b.result(timeout=60) for b in busy] == ["done"] * 4
        assert queued.result(timeout=60) == 3
        assert busy[0].logs() == "hello from the task\n"
        assert busy[0].logs(stream="err") == ""
        assert queued.logs() == "" and queued.logs(stream="err") == ""
        with pytest.raises(ValueError, match="stream"):
            queued.logs(stream="both")
    logs = tmp_path / "w" / "logs"
    assert (logs / f"{busy[0].id}.1.0.out").exists()
    # a task that wrote nothing leaves no file behind (creating files is slow)
    assert not list(logs.glob(f"{queued.id}.*")) and not (logs / f"{busy[0].id}.1.0.err").exists()


def test_a_round_policy_runs_live_on_worker_processes(tmp_path: Path) -> None:
    from accelnet.sched.policies import make_scheduler

    sched = make_scheduler("las", round_s=0.2)
    spec = {"run": "sleep 0.3", "resources": {"accelerators": "L4:1"}}
    with accelnet.local(fabric="pcie-4xL4", workdir=tmp_path, scheduler=sched) as cluster:
        jobs = [cluster.submit_spec(JobSpec.model_validate({"name": f"j{i}", **spec}))
                for i in range(6)]  # fmt: skip
        records = [j.wait(timeout=60) for j in jobs]
    assert all(r.state is JobState.SUCCEEDED for r in records)
    # four devices, six jobs: two waited for a device, and a round scheduler placed them
    assert sorted(r.attempts for r in records) == [1] * 6
    assert all(r.attained and r.attained[0][0] == "L4" for r in records)


@pytest.mark.parametrize("checkpointable", [False, True])
def test_a_round_change_stops_only_a_job_that_keeps_its_work(
    checkpointable: bool, tmp_path: Path
) -> None:
    # issue 23: under srtf a short newcomer is planned before the long running job at the
    # next round (0.3 s); the running job is stopped for it only if it is checkpointable
    from accelnet.sched.policies import make_scheduler

    sched = make_scheduler("srtf", round_s=0.3)
    whole = {"resources": {"accelerators": "L4:4"}, "max_retries": 0}
    with accelnet.local(fabric="pcie-4xL4", workdir=tmp_path, scheduler=sched) as cluster:
        first = cluster.submit_spec(JobSpec.model_validate({
            "name": "first", "run": "sleep 3", "checkpointable": checkpointable,
            "workload": {"duration_s": 600}, **whole,
        }))  # fmt: skip
        deadline = time.monotonic() + 60
        while first.state is not JobState.RUNNING:
            assert time.monotonic() < deadline, "the first job never started"
            time.sleep(0.02)
        second = cluster.submit_spec(JobSpec.model_validate({
            "name": "second", "run": "true", "workload": {"duration_s": 1}, **whole,
        }))  # fmt: skip
        done = second.wait(timeout=60)
        rec = first.wait(timeout=60)
    assert done.state is JobState.SUCCEEDED and rec.state is JobState.SUCCEEDED
    assert done.started_at is not None and rec.finished_at is not None
    if checkpointable:  # stopped for the newcomer, requeued, and run again after it
        assert rec.attempts == 2 and rec.failures == 0
        assert done.started_at < rec.finished_at
    else:  # it kept its devices to its end; the newcomer waited
        assert rec.attempts == 1
        assert done.started_at >= rec.finished_at - 0.05
