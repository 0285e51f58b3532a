"""Ordering policies: in which order queued jobs are offered devices.

A policy sees the whole snapshot, so round-based policies (time slicing, Gavel's
heterogeneity-aware allocations) fit the same interface: ``time_shares`` may return, per
job, the fraction of time it should get on each device model, and the simulator calls
``decide`` once per round. FIFO and priority return no shares.

A policy whose order is a fixed sort key per job (one that does not change while the job
waits) says so through :meth:`OrderingPolicy.key`: the incremental scheduler then keeps
the queue sorted by it instead of sorting it for every decision. FIFO's key is the
submission time; priority with aging has one too, because every waiting job ages at the
same rate (``priority + (now - submitted) / aging`` orders like
``priority - submitted / aging``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from operator import attrgetter
from typing import Any

from accelnet.sched.jobstate import JobState
from accelnet.sched.registry import Registry
from accelnet.sched.snapshot import JobView, Snapshot


class OrderingPolicy:
    """Orders the queue; pure and deterministic. A policy defines :meth:`key` or
    overrides :meth:`order`."""

    name = "?"

    def key(self, job: JobView) -> Any:
        """A sort key that orders the queue and never changes while the job waits, or None
        if the policy has none (then :meth:`order` is asked for every decision)."""
        return None

    def order(self, snapshot: Snapshot, queued: Sequence[JobView]) -> list[JobView]:
        """``queued`` (ADMITTED jobs) in the order they should be offered devices (by
        :meth:`key` unless a policy overrides this)."""
        return sorted(queued, key=self.key)

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

    def key(self, job: JobView) -> Any:
        """Submission time, then job id."""
        return _FIFO_KEY(job)


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

    def key(self, job: JobView) -> Any:
        """Highest ``priority - submitted_at / aging_s`` first (the same order as the
        effective priority at any moment), then FIFO."""
        return (job.submitted_at / self.aging_s - job.priority, job.submitted_at, job.id)


ORDERINGS: Registry[OrderingPolicy] = Registry(
    "ordering policy", {"fifo": Fifo, "priority": PriorityAging}
)


def queued_jobs(snapshot: Snapshot) -> list[JobView]:
    """The jobs waiting for devices."""
    return [j for j in snapshot.jobs if j.state is JobState.ADMITTED]
