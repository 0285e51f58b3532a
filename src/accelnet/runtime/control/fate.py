"""How an attempt's end decides its job's fate: a pure function of the job's record and
the attempt (no store, no backend, no clock), so the rule reads in one place and is tested
alone. The controller applies the :class:`Fate` (one state transition with its changes)
after adding the attempt's accounting.

The rule, in order:

1. every rank succeeded: SUCCEEDED, with the rank's result (a list for several ranks);
2. the job was cancelled: CANCELLED;
3. it was preempted and nothing failed: ADMITTED again (no retry spent);
4. otherwise a failure: ADMITTED again after the job's retry backoff while retries are
   left (at once, with no backoff, when a device failed under it: not the job's doing),
   else FAILED with the first error.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from accelnet.runtime.backend import TaskEventKind
from accelnet.runtime.control.runs import Attempt
from accelnet.runtime.control.store import JobRecord
from accelnet.sched import JobState
from accelnet.sched.reasons import OutcomeCode


@dataclass(frozen=True)
class Fate:
    """The transition an attempt's end makes: to ``state``, recorded with ``cause``,
    setting the record's fields in ``changes`` (``outcome`` among them: the code of how
    the attempt ended, :class:`~accelnet.sched.reasons.OutcomeCode`)."""

    state: JobState
    cause: str
    changes: Mapping[str, Any]

    @property
    def outcome(self) -> OutcomeCode:
        return OutcomeCode(self.changes["outcome"])

    @property
    def succeeded(self) -> bool:
        return self.state is JobState.SUCCEEDED


def requeue(
    rec: JobRecord, now: float, failures: int, error: str, code: OutcomeCode, backoff: bool
) -> Fate:
    """A failed attempt (its ``error``, of ``code``) with retries left (``failures``
    counts it): ADMITTED again, to start after the spec's backoff
    (:meth:`accelnet.sched.spec.RetrySpec.delay`) or, without ``backoff``, at once."""
    delay = rec.spec.retry.delay(failures, rec.id) if backoff else 0.0
    at = now + delay if delay > 0 else None
    when = f", in {delay:.3g} s" if at is not None else ""
    return Fate(
        JobState.ADMITTED,
        f"requeued (retry {failures} of {rec.spec.max_retries}{when}): {error}",
        {"placement": None, "failures": failures, "error": error, "retry_at": at, "outcome": code},
    )


def fate(rec: JobRecord, run: Attempt, now: float) -> Fate:
    """The fate of job ``rec`` when every task of its attempt ``run`` has ended at ``now``
    (the rule is the module docstring's)."""
    if all(k is TaskEventKind.SUCCEEDED for k in run.ended.values()):
        ranks = [run.results[r] for r in range(run.world)]
        result = ranks[0] if run.world == 1 else ranks
        # an earlier attempt's error is in the events, not the job's error any more
        changes = {"result": result, "finished_at": now, "error": None,
                   "outcome": OutcomeCode.SUCCEEDED}  # fmt: skip
        return Fate(JobState.SUCCEEDED, "every rank succeeded", changes)
    if run.cancel == "cancelled":
        return Fate(JobState.CANCELLED, "cancelled",
                    {"finished_at": now, "outcome": OutcomeCode.CANCELLED})  # fmt: skip
    if rec.state is JobState.PREEMPTING and run.error is None:
        return Fate(JobState.ADMITTED, "requeued after preemption",
                    {"placement": None, "outcome": OutcomeCode.PREEMPTED})  # fmt: skip
    failures = rec.failures + 1
    error = run.error or "stopped"
    code = run.failure or OutcomeCode.TASK_FAILED
    if failures <= rec.spec.max_retries:
        return requeue(rec, now, failures, error, code, backoff=not run.device_failed)
    changes = {"failures": failures, "error": error, "finished_at": now, "outcome": code}
    return Fate(JobState.FAILED, error, changes)
