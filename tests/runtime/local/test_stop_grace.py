"""A stopped task's grace (issue 23 item 5): SIGTERM, then its job's ``stop_grace_s`` for
the whole process group to save its work, then SIGKILL. ``/bin/sh`` (dash) does not exec a
command's last program, so the shell dies of SIGTERM at once while the program it started
is still checkpointing: the grace must be the group's, not the shell's."""

from __future__ import annotations

import sys
import textwrap
import time
from pathlib import Path

from accelnet.runtime.backend import TaskEventKind, TaskSpec
from accelnet.runtime.clock import ManualClock
from accelnet.runtime.local.backend import LocalBackend
from accelnet.sched import JobSpec
from accelnet.sched.spec import CHECKPOINT_GRACE_S, stop_grace
from tests.runtime.backend_contract import T0, until
from tests.runtime.local.test_local_backend import DEVICES, GPU0

SAVER = textwrap.dedent(
    """
    import signal, sys, time
    def saving(*_):
        time.sleep(float(sys.argv[2]))  # writing a checkpoint
        open(sys.argv[1], "w").write("saved")
        sys.exit(143)
    signal.signal(signal.SIGTERM, saving)
    open(sys.argv[1] + ".up", "w").write("up")
    time.sleep(60)
    """
)


def _stop_one(tmp: Path, grace: float, saving_s: float) -> tuple[bool, float]:
    """Start the saver behind a shell, stop it with ``grace``; whether it saved, and how
    long the stop took."""
    script, marker = tmp / "saver.py", tmp / "saved"
    script.write_text(SAVER)
    b = LocalBackend(DEVICES, tmp / "work", ManualClock(T0), emulated=True, kill_grace_s=0.1)
    try:
        # two commands: the shell stays the parent (dash execs only a lone command)
        cmd = f"{sys.executable} {script} {marker} {saving_s}; echo never"
        b.launch(TaskSpec("t", "job", 0, 1, GPU0, (GPU0,), command=cmd, grace_s=grace,
                          log_dir=str(tmp / "logs")))  # fmt: skip
        end = time.monotonic() + 30
        while not (tmp / "saved.up").exists():
            assert time.monotonic() < end, "the saver never started"
            b.poll(0.05)
        t0 = time.monotonic()
        b.cancel("t")
        events = until(b, lambda evs: any(e.kind is TaskEventKind.CANCELLED for e in evs))
        took = time.monotonic() - t0
        assert [e.kind for e in events if e.task_id == "t"][-1] is TaskEventKind.CANCELLED
    finally:
        b.close()
    return marker.exists(), took


def test_a_stopped_program_behind_a_shell_gets_the_whole_grace_to_save(tmp_path: Path) -> None:
    saved, took = _stop_one(tmp_path, grace=20.0, saving_s=0.5)
    assert saved  # before the fix: SIGKILLed as soon as its shell died
    assert took < 15.0  # and not held for the whole grace once it is done


def test_a_program_still_saving_when_the_grace_ends_is_killed(tmp_path: Path) -> None:
    saved, _ = _stop_one(tmp_path, grace=0.3, saving_s=30.0)
    assert not saved


def test_checkpointable_jobs_get_thirty_seconds_unless_they_say() -> None:
    def spec(**fields: object) -> JobSpec:
        return JobSpec.model_validate({"name": "j", "run": "true", **fields})

    assert stop_grace(spec(checkpointable=True)) == CHECKPOINT_GRACE_S == 30.0
    assert stop_grace(spec()) is None  # the backend's own (1 s)
    assert stop_grace(spec(stop_grace_s=5)) == 5.0
    assert stop_grace(spec(checkpointable=True, stop_grace_s=0)) == 0.0
