"""Named scheduling policies, each one configuration of the same scheduler core.

``fifo``, ``priority`` (with aging), ``priority-preempt`` and ``fifo-first-fit`` order the
queue; ``sjf``, ``srtf``, ``las``, ``drf``, ``hetero-fair``, ``hetero-jct``, ``min-makespan``,
``finish-time-fair`` and ``energy`` work in rounds (:mod:`accelnet.sched.rounds`);
``hetero-jct-packed`` and ``hetero-fair-packed`` also pack pairs of jobs on the same devices
where that pays (:mod:`accelnet.sched.colocate`). The live controller and the simulator
take the very same objects: ``make_scheduler(name, rates=..., round_s=...)``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from accelnet.sched.colocate import PairRateFn
from accelnet.sched.jobinfo import RateFn, hint_pairs
from accelnet.sched.placement import PlacementStrategy
from accelnet.sched.policies.drf import Drf
from accelnet.sched.policies.energy import Energy
from accelnet.sched.policies.finish_time_fair import FinishTimeFair
from accelnet.sched.policies.hetero_fair import HeteroFair
from accelnet.sched.policies.hetero_jct import HeteroJct
from accelnet.sched.policies.min_makespan import MinMakespan
from accelnet.sched.policies.ranked import Las, Sjf, Srtf
from accelnet.sched.rounds import RoundPolicy, RoundScheduler
from accelnet.sched.scheduler import Scheduler

QUEUE_POLICIES: dict[str, dict[str, Any]] = {
    "fifo": {"ordering": "fifo"},
    "fifo-first-fit": {"ordering": "fifo", "placement": "first-fit"},
    "priority": {"ordering": "priority"},
    "priority-preempt": {"ordering": "priority", "preemption": "priority"},
}
ROUND_POLICIES: dict[str, Callable[[], RoundPolicy]] = {
    "sjf": Sjf,
    "srtf": Srtf,
    "las": Las,
    "drf": Drf,
    "hetero-fair": HeteroFair,
    "hetero-fair-packed": HeteroFair.packed,
    "hetero-jct": HeteroJct,
    "hetero-jct-tail": HeteroJct.tail,
    "hetero-jct-packed": HeteroJct.packed,
    "hetero-jct-tail-packed": lambda: HeteroJct.packed(tail=True),
    "min-makespan": MinMakespan,
    "finish-time-fair": FinishTimeFair,
    "energy": Energy,
}
POLICY_NAMES = (*QUEUE_POLICIES, *ROUND_POLICIES)


def make_scheduler(
    name: str,
    rates: RateFn | None = None,
    round_s: float = 360.0,
    placement: str | PlacementStrategy | None = None,
    colocated: PairRateFn | None = None,
    reserve_after_s: float | None = None,
    min_reallocation_s: float = 0.0,
) -> Scheduler:
    """A fresh scheduler for policy ``name`` (with ``placement``, else the policy's own);
    ``colocated``: pairs' rates for the policies that pack (``*-packed``; default: the
    jobs' ``workload.colocated`` hints); ``reserve_after_s``: hold a domain for a gang
    that waited this long (queue policies, :mod:`accelnet.sched.reserve`);
    ``min_reallocation_s``: a round policy re-solves its allocation at most this often
    (Gavel: 1,920 s; 0: whenever the jobs change). ValueError listing the known policies,
    for ``reserve_after_s`` with a round policy or ``min_reallocation_s`` with a queue
    policy; UnknownNameError listing the placements."""
    if name in QUEUE_POLICIES:
        if min_reallocation_s:
            raise ValueError(
                f"min_reallocation_s applies to the round policies ({', '.join(ROUND_POLICIES)}"
                f"), not to {name!r}, which allocates nothing"
            )
        params = dict(QUEUE_POLICIES[name])
        if placement is not None:
            params["placement"] = placement
        return Scheduler(**params, rates=rates, reserve_after_s=reserve_after_s)
    factory = ROUND_POLICIES.get(name)
    if factory is None:
        raise ValueError(f"unknown policy {name!r}; known: {', '.join(POLICY_NAMES)}")
    if reserve_after_s is not None:
        raise ValueError(
            f"reserve_after_s applies to the queue policies ({', '.join(QUEUE_POLICIES)}), "
            f"not to {name!r}, which plans every round afresh"
        )
    return RoundScheduler(factory(), placement or "best-fit", round_s=round_s, rates=rates,
                          colocated=colocated or hint_pairs,
                          min_reallocation_s=min_reallocation_s)  # fmt: skip
