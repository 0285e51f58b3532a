"""The simulator's store: the in-memory store that tells the engine when a job ends, and
can forget it then.

A simulation records each job's outcome the moment the job ends (:class:`SimStore` calls
``on_end`` with its final record and how many times it was preempted). With ``forget``
on, the store then drops the job's record and keeps no event log at all (device changes
included): what a million-job simulation would otherwise hold for every job it ever ran
(a :class:`~accelnet.sched.JobSpec` and a dozen events each). The controller reads only
live jobs from the store while it runs, so forgetting ended ones changes nothing it does.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from accelnet.runtime.control.store import JobRecord, MemoryStore
from accelnet.sched import JobState

EndHook = Callable[[JobRecord, int], None]
"""Called with a job's final record and its preemption count when it ends."""


class SimStore(MemoryStore):
    """A :class:`MemoryStore` that reports ended jobs to ``on_end`` (and, with ``forget``,
    drops them and keeps no event log)."""

    def __init__(self, on_end: EndHook, forget: bool = False) -> None:
        super().__init__()
        self.on_end = on_end
        self.forget = forget
        self._preempted: dict[str, int] = {}  # live job -> times it was preempted

    def transition(
        self, job_id: str, to: JobState, at: float, cause: str, **changes: Any
    ) -> JobRecord:
        """See :meth:`MemoryStore.transition`; an ended job is reported (and forgotten)."""
        rec = super().transition(job_id, to, at, cause, **changes)
        if to is JobState.PREEMPTING:
            self._preempted[job_id] = self._preempted.get(job_id, 0) + 1
        elif to.is_finished():
            self.on_end(rec, self._preempted.pop(job_id, 0))
            if self.forget:
                with self._lock:
                    del self._jobs[job_id]
                    for key in ((None, rec.spec.name), (rec.spec.tenant, rec.spec.name)):
                        if self._named.get(key) == job_id:
                            del self._named[key]
                    self._by_job.pop(job_id, None)
        return rec

    def preemptions(self, job_id: str) -> int:
        """How many times a live job has been preempted so far."""
        return self._preempted.get(job_id, 0)

    def _append_event(self, job_id: str | None, at: float, kind: str, detail: str) -> None:
        if not self.forget:
            super()._append_event(job_id, at, kind, detail)
