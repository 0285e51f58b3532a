"""A controller SIGKILLed mid-run and restarted on the same SQLite file: no job lost,
none finished twice, no worker left behind."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil

from accelnet.runtime.control.invariants import check
from accelnet.runtime.control.sqlite_store import SqliteStore
from accelnet.sched import JobState

CONTROLLER = """
import sys
from accelnet.fabric import load_fabric
from accelnet.runtime.clock import SystemClock
from accelnet.runtime.control.controller import Controller
from accelnet.runtime.local.backend import LocalBackend
from accelnet.runtime.control.sqlite_store import SqliteStore
from accelnet.sched import JobSpec

db, work, submit = sys.argv[1], sys.argv[2], sys.argv[3] == "submit"
fabric = load_fabric("pcie-4xL4")
clock = SystemClock()
backend = LocalBackend(fabric.devices, work, clock, emulated=True)
ctl = Controller(fabric, SqliteStore(db), backend, clock, work)
if submit:
    for i in range(12):
        run = f"sleep 0.4; echo $ACCELNET_JOB >> {work}/done.txt"
        ctl.submit(JobSpec.model_validate({"name": f"j{i}", "run": run}), job_id=f"j{i}")
    print("submitted", flush=True)
while not ctl.idle():
    ctl.step(0.05)
backend.close()
print("idle", flush=True)
"""


def _start(db: Path, work: Path, mode: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", CONTROLLER, str(db), str(work), mode],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip


def test_controller_killed_mid_run_loses_nothing_and_finishes_nothing_twice(
    tmp_path: Path,
) -> None:
    db, work = tmp_path / "state.db", tmp_path / "work"
    work.mkdir()
    done = work / "done.txt"
    first = _start(db, work, "submit")
    deadline = time.monotonic() + 60
    while not done.exists() or len(done.read_text().split()) < 3:
        assert first.poll() is None, first.communicate()
        assert time.monotonic() < deadline, "jobs never ran"
        time.sleep(0.05)
    workers = [p.pid for p in psutil.Process(first.pid).children(recursive=True)]
    os.kill(first.pid, signal.SIGKILL)
    first.wait(timeout=30)
    # its workers notice and go (no orphans)
    deadline = time.monotonic() + 60
    while any(psutil.pid_exists(p) and psutil.Process(p).status() != "zombie" for p in workers):
        assert time.monotonic() < deadline, "a worker outlived its controller"
        time.sleep(0.1)
    second = _start(db, work, "resume")
    _out, err = second.communicate(timeout=120)
    assert second.returncode == 0, err
    store = SqliteStore(db)
    jobs = store.jobs()
    assert sorted(j.id for j in jobs) == sorted(f"j{i}" for i in range(12))  # none lost
    assert {j.state for j in jobs} == {JobState.SUCCEEDED}
    for j in jobs:  # each finished exactly once
        assert [e.kind for e in store.events(j.id)].count("job:succeeded") == 1
    ran = done.read_text().split()
    assert set(ran) == {f"j{i}" for i in range(12)}
    requeued = [j.id for j in jobs if any("restarted" in e.detail for e in store.events(j.id))]
    assert requeued, "the kill should have caught some jobs mid-run"
    check(store)  # ended once, no device held twice or left held, retries in budget
