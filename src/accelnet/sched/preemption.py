"""Preemption rules: which running jobs to stop so that a more important one can start.

``priority``: a job may preempt jobs of strictly lower priority, and only when that makes
it fit. Victims are tried lowest priority first, then checkpointable before not (they lose
least work), then the most recently started; the set is then pruned to the jobs whose
devices are really needed. Devices that cannot be scheduled (draining, unhealthy) never
count as freed. ``none`` never preempts.

A rule prepares a :class:`VictimSearch` once per decision (sorting the running jobs and
counting what each priority could free), so a long queue of waiting jobs costs a
logarithmic check each, not a scan of every running job.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Collection

from accelnet.fabric import DomainLevel
from accelnet.sched.capacity import SHARE_UNITS, CapacityIndex
from accelnet.sched.jobstate import JobState
from accelnet.sched.placement import PlacementStrategy
from accelnet.sched.registry import Registry
from accelnet.sched.request import Request
from accelnet.sched.snapshot import JobView


def release(index: CapacityIndex, job: JobView) -> None:
    """What-if: give the job's schedulable devices back to ``index`` (roll back to undo)."""
    assert job.placement is not None
    index.release(job.placement)


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
    def start(self, running: Collection[JobView]) -> VictimSearch | None:
        """A search over ``running`` (jobs holding devices) for this decision."""


class NoPreemption(PreemptionRule):
    """Never preempts."""

    name = "none"

    def start(self, running: Collection[JobView]) -> VictimSearch | None:
        """None: nothing to search."""
        return None


class _PrioritySearch(VictimSearch):
    def __init__(self, running: Collection[JobView]) -> None:
        self._order = sorted(
            (v for v in running if v.state is JobState.RUNNING and v.placement is not None),
            key=lambda v: (v.priority, not v.spec.checkpointable, -(v.started_at or 0.0), v.id),
        )
        self._taken: set[str] = set()
        # request shape -> highest priority for which no victims were found (failures only
        # get more certain within a decision: capacity only shrinks, victims only go)
        self._failed: dict[tuple[object, ...], int] = {}

    def victims(
        self, job: JobView, req: Request, index: CapacityIndex, placement: PlacementStrategy
    ) -> list[JobView] | None:
        if not req.classes and not req.cpu_only:
            return None
        shape = (tuple(c.key for c in req.classes), req.count, req.share, req.required,
                 req.preferred, req.counts, req.cpus, req.memory_gb, req.per_host)  # fmt: skip
        if self._failed.get(shape, -(10**9)) >= job.priority:
            return None
        found = self._search(job, req, index, placement)
        if found is None:
            self._failed[shape] = max(job.priority, self._failed.get(shape, -(10**9)))
        else:
            self._taken.update(v.id for v in found)
        return found

    def _search(
        self, job: JobView, req: Request, index: CapacityIndex, placement: PlacementStrategy
    ) -> list[JobView] | None:
        topo = index.topo
        keys = {c.key for c in req.classes}
        models = {c.model.name for c in req.classes}
        host_bound = req.needs_host and bool(topo.limited_hosts)
        candidates = [
            v
            for v in self._order
            if v.priority < job.priority
            and v.id not in self._taken
            and v.placement is not None
            and (v.placement.model in models or (host_bound and bool(v.placement.hosts)))
        ]
        if not candidates:
            return None
        if req.cpu_only or host_bound:  # cores and memory may be what is short: try in order
            return _release_until_placed(candidates, job, req, index, placement)
        # Arithmetic first: per domain of the level the job must fit in, what is free now
        # and what the candidates there could free. Only domains where that reaches the
        # gang are searched, and place() runs only once the released devices could suffice.
        level = req.required or DomainLevel.FABRIC
        dmap = topo.domain_of[level]
        need = req.count * req.share
        free: dict[str, float] = {}
        for dev, have in index.free.items():
            if topo.class_of[dev].key in keys:
                free[dmap[dev]] = free.get(dmap[dev], 0.0) + have / SHARE_UNITS
        gain: dict[str, float] = {}
        for v in candidates:
            assert v.placement is not None
            for dev in v.placement.devices:
                if dev in index.schedulable and topo.class_of[dev].key in keys:
                    gain[dmap[dev]] = gain.get(dmap[dev], 0.0) + v.placement.share
        viable = {d for d in gain if free.get(d, 0.0) + gain[d] >= need - 1e-9}
        if not viable:
            return None
        mark = index.mark()
        chosen: list[JobView] = []
        released: dict[str, float] = {}
        for v in candidates:
            assert v.placement is not None
            doms = {dmap[d] for d in v.placement.devices} & viable
            if not doms:
                continue
            release(index, v)
            chosen.append(v)
            for dev in v.placement.devices:
                if dev in index.schedulable and topo.class_of[dev].key in keys:
                    released[dmap[dev]] = released.get(dmap[dev], 0.0) + v.placement.share
            if not any(free.get(d, 0.0) + released.get(d, 0.0) >= need - 1e-9 for d in doms):
                continue
            if placement.place(req, index) is not None:
                break
        else:
            index.rollback(mark)
            return None
        return _pruned(chosen, req, index, placement, mark)


def _release_until_placed(
    candidates: list[JobView],
    job: JobView,
    req: Request,
    index: CapacityIndex,
    placement: PlacementStrategy,
) -> list[JobView] | None:
    """Victims for a job that asks for host cores or memory (or only them): candidates
    released in order until it fits, then those it turns out not to need kept (no domain
    arithmetic: the room that is short may be a host's, not a device's)."""
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
    return _pruned(chosen, req, index, placement, mark)


def _pruned(
    chosen: list[JobView],
    req: Request,
    index: CapacityIndex,
    placement: PlacementStrategy,
    mark: int,
) -> list[JobView]:
    """``chosen`` (all released since ``mark``, the job fitting with the last) less the
    victims whose room the job turns out not to need; ``index`` rolled back to ``mark``."""
    for v in list(reversed(chosen[:-1])):
        inner = index.mark()
        hold(index, v)
        if placement.place(req, index) is None:
            index.rollback(inner)
        else:
            chosen.remove(v)
    index.rollback(mark)
    return chosen


def hold(index: CapacityIndex, job: JobView) -> None:
    """Undo :func:`release` for one job (its schedulable devices are used again)."""
    assert job.placement is not None
    index.hold(job.placement, schedulable_only=True)


class PriorityPreemption(PreemptionRule):
    """Lower-priority jobs make way for higher ones; checkpointable victims first."""

    name = "priority"

    def start(self, running: Collection[JobView]) -> VictimSearch | None:
        """A search over the RUNNING jobs, sorted once."""
        return _PrioritySearch(running)


PREEMPTIONS: Registry[PreemptionRule] = Registry(
    "preemption rule", {"none": NoPreemption, "priority": PriorityPreemption}
)
