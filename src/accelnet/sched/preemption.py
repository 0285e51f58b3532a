"""Preemption rules: which running jobs to stop so that a more important one can start.

``priority``: a job may preempt jobs of strictly lower priority, and only when that makes
it fit. Victims are tried in the order that loses least work: checkpointable jobs first,
then the lowest priority, then the most recently started; the set is then pruned to the
jobs whose devices are really needed. ``none`` never preempts.

A rule prepares a :class:`VictimSearch` once per decision (sorting the running jobs and
counting what each priority could free), so a long queue of waiting jobs costs a
logarithmic check each, not a scan of every running job.
"""

from __future__ import annotations

import bisect
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


class VictimSearch(ABC):
    """Finds victims for one job at a time within one decision; remembers who is taken."""

    @abstractmethod
    def victims(
        self, job: JobView, req: Request, index: CapacityIndex, placement: PlacementStrategy
    ) -> list[JobView] | None:
        """Jobs to preempt so that ``job`` fits (not chosen before in this decision), or
        None. Leaves ``index`` as it found it."""


class PreemptionRule(ABC):
    """Prepares a victim search for one decision, or None if it never preempts."""

    name = "?"

    @abstractmethod
    def start(self, running: Sequence[JobView]) -> VictimSearch | None:
        """A search over ``running`` (jobs holding devices) for this decision."""


class NoPreemption(PreemptionRule):
    """Never preempts."""

    name = "none"

    def start(self, running: Sequence[JobView]) -> VictimSearch | None:
        """None: nothing to search."""
        return None


class _PrioritySearch(VictimSearch):
    def __init__(self, running: Sequence[JobView]) -> None:
        self._order = sorted(
            (v for v in running if v.state is JobState.RUNNING and v.placement is not None),
            key=lambda v: (not v.spec.checkpointable, v.priority, -(v.started_at or 0.0), v.id),
        )
        # per model: priorities ascending and the devices all jobs up to each could free
        per: dict[str, list[tuple[int, int]]] = {}
        for v in self._order:
            assert v.placement is not None
            per.setdefault(v.placement.model, []).append((v.priority, len(v.placement.devices)))
        self._prio: dict[str, list[int]] = {}
        self._cum: dict[str, list[int]] = {}
        for model, items in per.items():
            items.sort()
            self._prio[model] = [p for p, _ in items]
            total, cum = 0, []
            for _, n in items:
                total += n
                cum.append(total)
            self._cum[model] = cum
        self._taken: set[str] = set()

    def _freeable(self, model: str, below: int) -> int:
        prios = self._prio.get(model)
        if not prios:
            return 0
        i = bisect.bisect_left(prios, below)
        return self._cum[model][i - 1] if i else 0

    def victims(
        self, job: JobView, req: Request, index: CapacityIndex, placement: PlacementStrategy
    ) -> list[JobView] | None:
        if not req.classes:
            return None
        models = {c.model.name for c in req.classes}
        if req.share >= 1:
            free = sum(index.total_whole(c.key) for c in req.classes)
            if free + sum(self._freeable(m, job.priority) for m in models) < req.count:
                return None  # even every lower-priority job together would not make room
        mark = index.mark()
        chosen: list[JobView] = []
        for v in self._order:
            assert v.placement is not None
            if v.priority >= job.priority or v.placement.model not in models:
                continue
            if v.id in self._taken:
                continue
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
            index.take_all(v.placement.devices, v.placement.share)
            if placement.place(req, index) is None:
                index.rollback(inner)
            else:
                chosen.remove(v)
        index.rollback(mark)
        self._taken.update(v.id for v in chosen)
        return chosen


class PriorityPreemption(PreemptionRule):
    """Lower-priority jobs make way for higher ones; checkpointable victims first."""

    name = "priority"

    def start(self, running: Sequence[JobView]) -> VictimSearch | None:
        """A search over the RUNNING jobs, sorted once."""
        return _PrioritySearch(running)


PREEMPTIONS: Registry[PreemptionRule] = Registry(
    "preemption rule", {"none": NoPreemption, "priority": PriorityPreemption}
)
