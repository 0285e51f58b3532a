"""Preemption rules: which running jobs to stop so that a more important one can start.

``priority``: a job may preempt jobs of strictly lower priority, and only when that makes
it fit. Victims are tried in the order that loses least work: checkpointable jobs first,
then the lowest priority, then the most recently started; the set is then pruned to the
jobs whose devices are really needed. ``none`` never preempts.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence

from accelnet.sched.capacity import CapacityIndex
from accelnet.sched.jobstate import JobState
from accelnet.sched.placement import PlacementStrategy
from accelnet.sched.registry import Registry
from accelnet.sched.request import Request
from accelnet.sched.snapshot import JobView


def release(index: CapacityIndex, job: JobView) -> None:
    """What-if: give the job's devices back to ``index`` (roll back to undo)."""
    assert job.placement is not None
    for dev in job.placement.devices:
        if dev in index.topo.class_of:
            index.give(dev, job.placement.share)


class PreemptionRule(ABC):
    """Chooses victims for a job that does not fit; leaves ``index`` as it found it."""

    name = "?"

    @abstractmethod
    def victims(
        self,
        job: JobView,
        req: Request,
        index: CapacityIndex,
        running: Sequence[JobView],
        placement: PlacementStrategy,
    ) -> list[JobView] | None:
        """Jobs to preempt so that ``job`` fits, or None if no allowed set makes it fit."""


class NoPreemption(PreemptionRule):
    """Never preempts."""

    name = "none"

    def victims(
        self,
        job: JobView,
        req: Request,
        index: CapacityIndex,
        running: Sequence[JobView],
        placement: PlacementStrategy,
    ) -> list[JobView] | None:
        """Always None."""
        return None


class PriorityPreemption(PreemptionRule):
    """Lower-priority jobs make way for higher ones; checkpointable victims first."""

    name = "priority"

    def victims(
        self,
        job: JobView,
        req: Request,
        index: CapacityIndex,
        running: Sequence[JobView],
        placement: PlacementStrategy,
    ) -> list[JobView] | None:
        """See :class:`PreemptionRule`."""
        if not req.classes:
            return None
        models = {c.model.name for c in req.classes}
        candidates = sorted(
            (
                v
                for v in running
                if v.state is JobState.RUNNING
                and v.placement is not None
                and v.priority < job.priority
                and v.placement.model in models
            ),
            key=lambda v: (
                not v.spec.checkpointable,
                v.priority,
                -(v.started_at or 0.0),
                v.id,
            ),
        )
        freeable = sum(len(v.placement.devices) for v in candidates if v.placement)
        free = sum(index.total_whole(c.key) for c in req.classes)
        if req.share >= 1 and freeable + free < req.count:
            return None  # even every candidate together would not make room
        mark = index.mark()
        chosen: list[JobView] = []
        for v in candidates:
            release(index, v)
            chosen.append(v)
            if placement.place(req, index) is not None:
                break
        else:
            index.rollback(mark)
            return None
        # prune: drop victims whose devices the job turns out not to need
        for v in list(reversed(chosen[:-1])):
            inner = index.mark()
            assert v.placement is not None
            try:
                index.take_all(v.placement.devices, v.placement.share)
            except ValueError:
                index.rollback(inner)
                continue
            if placement.place(req, index) is None:
                index.rollback(inner)
            else:
                chosen.remove(v)
        index.rollback(mark)
        return chosen


PREEMPTIONS: Registry[PreemptionRule] = Registry(
    "preemption rule", {"none": NoPreemption, "priority": PriorityPreemption}
)
