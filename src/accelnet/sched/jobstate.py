"""The job lifecycle: one transition table, requeue paths included."""

from __future__ import annotations

from enum import StrEnum

from accelnet.statemachine import TransitionTable


class JobState(StrEnum):
    """Where a job is in its life."""

    PENDING = "pending"  # accepted, not yet admitted (or held until its input jobs succeed)
    ADMITTED = "admitted"  # may run; waits in the queue for devices
    STARTING = "starting"  # devices allocated, tasks launching
    RUNNING = "running"
    PREEMPTING = "preempting"  # asked to stop so that a more important job can run
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"

    def is_finished(self) -> bool:
        """SUCCEEDED, FAILED or CANCELLED: nothing will happen to the job any more."""
        return self in _FINISHED

    def holds_devices(self) -> bool:
        """STARTING, RUNNING or PREEMPTING: the job's devices are not free."""
        return self in _HOLDING


_J = JobState
_FINISHED = frozenset({_J.SUCCEEDED, _J.FAILED, _J.CANCELLED})
_HOLDING = frozenset({_J.STARTING, _J.RUNNING, _J.PREEMPTING})
JOB_TRANSITIONS: TransitionTable[JobState] = TransitionTable(
    "job",
    {
        _J.PENDING: {
            _J.ADMITTED: "the fabric can ever run it and its input jobs have succeeded",
            _J.FAILED: "rejected, or a job whose outputs it consumes failed or was cancelled",
            _J.CANCELLED: "cancelled before admission",
        },
        _J.ADMITTED: {
            _J.STARTING: "the scheduler placed it on devices",
            _J.CANCELLED: "cancelled while queued",
            _J.FAILED: "its deadline passed while queued",
        },
        _J.STARTING: {
            _J.RUNNING: "every task of the gang started",
            _J.ADMITTED: "requeued: a launch failed, retries left",
            _J.FAILED: "a launch failed, no retries left",
            _J.CANCELLED: "cancelled while starting",
        },
        _J.RUNNING: {
            _J.SUCCEEDED: "every task exited 0",
            _J.FAILED: "a task failed, no retries left",
            _J.ADMITTED: "requeued: a task or its device failed, retries left",
            _J.PREEMPTING: "the scheduler needs its devices for a more important job",
            _J.CANCELLED: "cancelled while running",
        },
        _J.PREEMPTING: {
            _J.ADMITTED: "stopped (checkpointed if it can) and requeued",
            _J.SUCCEEDED: "finished before it could be stopped",
            _J.FAILED: "failed while stopping, no retries left",
            _J.CANCELLED: "cancelled while stopping",
        },
    },
)
