"""Outcome and waiting codes on real worker processes and a real SQLite file: how each
attempt ended (``JobRecord.outcome``) and why a queued job waits (``reason.code``), as a
client branches on them; the outcomes survive a reopen of the store."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

from accelnet.runtime import sdk
from accelnet.runtime.control.sqlite_store import SqliteStore
from accelnet.sched import JobState
from accelnet.sched.reasons import OutcomeCode, WaitCode, code_of

FABRIC = "examples/fabrics/l4-pair.yaml"


def fine() -> str:
    return "ok"


def boom() -> None:
    raise RuntimeError("boom")


def sleepy() -> None:
    time.sleep(60)


def killed() -> None:
    os.kill(os.getpid(), signal.SIGKILL)  # the worker process dies under its task


def test_each_end_has_its_code_and_the_store_keeps_them(tmp_path: Path) -> None:
    db = tmp_path / "jobs.db"
    with sdk.local(FABRIC, workdir=tmp_path / "w", db=db) as cluster:
        ok = cluster.submit(fine, name="ok")
        failed = cluster.submit(boom, name="failed", max_retries=0)
        late = cluster.submit(sleepy, name="late", timeout_s=0.5, max_retries=0)
        lost = cluster.submit(killed, name="lost", max_retries=0)
        after = cluster.submit(fine, name="after", inputs={"x": failed})
        for job in (ok, failed, late, lost, after):
            job.wait(120)
        got = {j.id: j.record.outcome for j in (ok, failed, late, lost, after)}
    assert got == {
        ok.id: OutcomeCode.SUCCEEDED,
        failed.id: OutcomeCode.TASK_FAILED,
        late.id: OutcomeCode.TIMED_OUT,
        lost.id: OutcomeCode.WORKER_LOST,
        after.id: OutcomeCode.INPUT_FAILED,
    }
    store = SqliteStore(db)  # as a restarted controller or the API reads them
    try:
        assert {j: store.get(j).outcome for j in got} == got
    finally:
        store.close()


def test_queued_jobs_say_why_as_codes(tmp_path: Path) -> None:
    with sdk.local(FABRIC, workdir=tmp_path / "w") as cluster:
        retry = cluster.submit(boom, name="retry", max_retries=2,
                               retry={"backoff_s": 600.0, "jitter": 0.0})  # fmt: skip
        deadline = time.monotonic() + 60
        while retry.record.failures < 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert retry.record.outcome is OutcomeCode.TASK_FAILED
        assert retry.state is JobState.ADMITTED  # retried: the failure's code stays visible
        upstream = cluster.submit(sleepy, name="up", timeout_s=60)
        while upstream.state is not JobState.RUNNING and time.monotonic() < deadline:
            time.sleep(0.05)
        down = cluster.submit(fine, name="down", inputs={"x": upstream})
        whole = cluster.submit(fine, name="whole", accelerators="L4:4")  # one L4 is busy
        while code_of(cluster.reason(whole.id)) is WaitCode.AWAITING_ADMISSION:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        codes = {j.id: code_of(cluster.reason(j.id)) for j in (retry, down, whole)}
        assert codes == {
            retry.id: WaitCode.RETRY_BACKOFF,
            down.id: WaitCode.AWAITING_INPUTS,
            whole.id: WaitCode.NO_CAPACITY,
        }
        whole_reason = cluster.reason(whole.id)
        assert whole_reason is not None and not whole_reason.unresolvable
        for job in (retry, upstream, down, whole):
            job.cancel()
        assert whole.wait(30).outcome is OutcomeCode.CANCELLED
        assert upstream.wait(30).outcome is OutcomeCode.CANCELLED
