"""Ordering policies: in which order queued jobs are offered devices.

A policy sees the whole snapshot, so round-based policies (time slicing, Gavel's
heterogeneity-aware allocations) fit the same interface: ``time_shares`` may return, per
job, the fraction of time it should get on each device model, and the simulator calls
``decide`` once per round. FIFO and priority return no shares.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from operator import attrgetter

from accelnet.sched.jobstate import JobState
from accelnet.sched.registry import Registry
from accelnet.sched.snapshot import JobView, Snapshot


class OrderingPolicy(ABC):
    """Orders the queue; pure and deterministic."""

    name = "?"

    @abstractmethod
    def order(self, snapshot: Snapshot, queued: Sequence[JobView]) -> list[JobView]:
        """``queued`` (ADMITTED jobs) in the order they should be offered devices."""

    def time_shares(self, snapshot: Snapshot) -> Mapping[str, Mapping[str, float]] | None:
        """Gavel-style allocation (job -> model -> fraction of time), or None."""
        return None

    def effective_priority(self, snapshot: Snapshot, job: JobView) -> float:
        """The priority used to compare jobs (preemption uses the spec's own)."""
        return float(job.priority)


_FIFO_KEY = attrgetter("submitted_at", "id")


class Fifo(OrderingPolicy):
    """First submitted, first offered (ties by job id). Jobs that do not fit are skipped,
    so smaller jobs behind them may start (as Gavel's FIFO does)."""

    name = "fifo"

    def order(self, snapshot: Snapshot, queued: Sequence[JobView]) -> list[JobView]:
        """See :class:`OrderingPolicy`."""
        return sorted(queued, key=_FIFO_KEY)


class PriorityAging(OrderingPolicy):
    """Highest priority first; a waiting job gains one priority level per ``aging_s``
    seconds in the queue, so low priorities are not starved. Ties: FIFO."""

    name = "priority"

    def __init__(self, aging_s: float = 3600.0) -> None:
        if aging_s <= 0:
            raise ValueError(f"aging_s must be > 0, got {aging_s}")
        self.aging_s = aging_s

    def effective_priority(self, snapshot: Snapshot, job: JobView) -> float:
        """Priority plus one per ``aging_s`` waited."""
        return job.priority + max(0.0, snapshot.now - job.submitted_at) / self.aging_s

    def order(self, snapshot: Snapshot, queued: Sequence[JobView]) -> list[JobView]:
        """See :class:`OrderingPolicy`."""
        return sorted(
            queued,
            key=lambda j: (-self.effective_priority(snapshot, j), j.submitted_at, j.id),
        )


ORDERINGS: Registry[OrderingPolicy] = Registry(
    "ordering policy", {"fifo": Fifo, "priority": PriorityAging}
)


def queued_jobs(snapshot: Snapshot) -> list[JobView]:
    """The jobs waiting for devices."""
    return [j for j in snapshot.jobs if j.state is JobState.ADMITTED]
