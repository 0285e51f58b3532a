"""Jobs that consume earlier jobs' outputs, on real worker processes: held until their
inputs succeed, handed the inputs' files in place, failed when an input fails."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

import accelnet
from accelnet.runtime.control.controller import JobRejectedError
from accelnet.runtime.control.inputs import InputGate, verdict
from accelnet.runtime.local.handoff import input_dirs, output_dir
from accelnet.runtime.sdk import Job, JobFailedError
from accelnet.sched import JobSpec, JobState


def produce(release: str) -> dict[str, object]:
    """Waits for the test to let it finish, then writes a file into its output folder."""
    while not os.path.exists(release):
        time.sleep(0.005)
    path = output_dir() / "frames.bin"
    path.write_bytes(b"\x01" * 4096)
    st = path.stat()
    return {"path": str(path), "inode": (st.st_dev, st.st_ino)}


def consume() -> dict[str, object]:
    found = {}
    for alias, folder in input_dirs().items():
        path = folder / "frames.bin"
        st = path.stat()
        found[alias] = {"path": str(path), "inode": (st.st_dev, st.st_ino),
                        "bytes": len(path.read_bytes())}  # fmt: skip
    return found


def boom() -> None:
    raise ValueError("the input job broke")


def wait_state(job: Job, state: JobState) -> None:
    deadline = time.monotonic() + 30
    while job.state is not state:
        assert time.monotonic() < deadline, f"{job} never became {state.value}"
        time.sleep(0.01)


def test_a_consumer_is_held_then_reads_the_inputs_files_in_place(tmp_path: Path) -> None:
    release = tmp_path / "release"
    with accelnet.local(workdir=tmp_path / "w") as cluster:
        up = cluster.submit(produce, str(release), name="frames")
        down = cluster.submit(consume, inputs={"frames": up}, name="count")
        wait_state(up, JobState.RUNNING)
        assert down.state is JobState.PENDING
        assert cluster.reason(down.id) == f"waits for job {up.id} (running)"
        release.touch()
        got = down.result(timeout=30)
        made = up.result(timeout=30)
        events = [(e.kind, e.detail) for e in cluster.store.events(down.id)]
    assert got["frames"]["path"] == made["path"]
    assert got["frames"]["inode"] == made["inode"]  # the very file: handed, not copied
    assert got["frames"]["bytes"] == 4096
    assert Path(made["path"]).parent == up.output
    kinds = [k for k, _ in events]
    assert kinds[:3] == ["job:pending", "job:held", "job:admitted"]
    assert dict(events)["job:admitted"] == f"admitted: inputs ready: frames from {up.id}"
    handed = dict(events)["job:inputs"]
    assert handed == f"frames = outputs of {up.id} at {up.output} (by reference)"


def test_a_failed_input_fails_its_consumers_down_the_chain(tmp_path: Path) -> None:
    release = tmp_path / "release"
    with accelnet.local(workdir=tmp_path / "w") as cluster:
        bad = cluster.submit(boom)
        mid = cluster.submit(consume, inputs={"x": bad}, name="mid")
        last = cluster.submit(consume, inputs={"y": mid}, name="last")
        held = cluster.submit(produce, str(release))
        cancelled = cluster.submit(consume, inputs={"x": held}, name="cancelled-input")
        with pytest.raises(JobFailedError, match=f"input x: job {bad.id} failed"):
            mid.result(timeout=30)
        with pytest.raises(JobFailedError, match=f"input y: job {mid.id} failed"):
            last.result(timeout=30)
        held.cancel()
        with pytest.raises(JobFailedError, match=f"input x: job {held.id} cancelled"):
            cancelled.result(timeout=30)
        late = cluster.submit(consume, inputs={"x": bad}, name="late")  # after the failure
        assert late.wait(timeout=30).state is JobState.FAILED
        assert mid.record.attempts == 0  # never ran
        deadline = time.monotonic() + 60
        while not cluster.controller.idle():  # nothing left hanging
            assert time.monotonic() < deadline
            time.sleep(0.01)


def test_an_unknown_input_is_rejected_and_nothing_is_stored(tmp_path: Path) -> None:
    spec = JobSpec.model_validate({"name": "c", "run": "true", "inputs": {"data": "missing"}})
    with accelnet.local(workdir=tmp_path) as cluster:
        with pytest.raises(JobRejectedError, match=r"job c: inputs\.data = 'missing': no job"):
            cluster.submit_spec(spec)
        assert cluster.store.jobs() == []
        # by name: the job of that name submitted last
        first = cluster.submit_spec(JobSpec.model_validate({"name": "missing", "run": "true"}))
        second = cluster.submit_spec(JobSpec.model_validate({"name": "missing", "run": "true"}))
        job = cluster.submit_spec(spec)
        job.result(timeout=30)
        assert job.record.inputs == (("data", second.id),) and first.id != second.id


def test_held_jobs_survive_a_controller_restart_on_the_same_store(tmp_path: Path) -> None:
    release, db = tmp_path / "release", tmp_path / "state.db"
    with accelnet.local(workdir=tmp_path / "w", db=db) as cluster:
        up = cluster.submit(produce, str(release), name="frames")
        down = cluster.submit(consume, inputs={"frames": up}, name="count")
        wait_state(up, JobState.RUNNING)
        up_id, down_id = up.id, down.id
    # the controller is gone; a new one on the same file: the producer is requeued and the
    # consumer still held for it
    with accelnet.local(workdir=tmp_path / "w", db=db) as cluster:
        down = cluster.job(down_id)
        assert down.state is JobState.PENDING
        assert down.record.inputs == (("frames", up_id),)
        assert cluster.reason(down_id) in (f"waits for job {up_id} (admitted)",
                                           f"waits for job {up_id} (starting)",
                                           f"waits for job {up_id} (running)")  # fmt: skip
        release.touch()
        assert down.result(timeout=30)["frames"]["bytes"] == 4096


def test_the_gate_judges_by_the_inputs_states() -> None:
    states = {"a": JobState.SUCCEEDED, "b": JobState.RUNNING, "c": JobState.ADMITTED}
    v = verdict((("x", "a"), ("y", "b"), ("z", "c")), states.get)
    assert not v.ready and not v.failed
    assert v.text == "waits for jobs b (running), c (admitted)"
    assert verdict((("x", "a"),), states.get).ready
    gone = verdict((("x", "nope"),), states.get)
    assert gone.failed and gone.text == "input x: job nope is unknown"
    gate = InputGate()
    gate.hold("d", (("x", "b"), ("y", "c")))
    assert gate.holds("d") and list(gate.waiters("b")) == ["d"]
    assert gate.reason("d", states.get) == "waits for jobs b (running), c (admitted)"
    gate.forget("d")
    assert not gate.holds("d") and list(gate.waiters("b")) == []
    assert gate.reason("d", states.get) is None
