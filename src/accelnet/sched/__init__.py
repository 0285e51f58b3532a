"""Task management: job specs, the job lifecycle, and the scheduler (pure decisions).

from accelnet.sched import Scheduler, Snapshot
decision = Scheduler("priority", "best-fit", "priority").decide(snapshot)
"""

from accelnet.sched.jobstate import JOB_TRANSITIONS, JobState
from accelnet.sched.ordering import ORDERINGS, OrderingPolicy
from accelnet.sched.placement import PLACEMENTS, PlacementStrategy
from accelnet.sched.preemption import PREEMPTIONS, PreemptionRule
from accelnet.sched.scheduler import Scheduler
from accelnet.sched.snapshot import (
    Decision,
    JobView,
    Placement,
    Preempt,
    Snapshot,
    Start,
    Tenant,
)
from accelnet.sched.spec import JobSpec

__all__ = [
    "JOB_TRANSITIONS",
    "ORDERINGS",
    "PLACEMENTS",
    "PREEMPTIONS",
    "Decision",
    "JobSpec",
    "JobState",
    "JobView",
    "OrderingPolicy",
    "Placement",
    "PlacementStrategy",
    "Preempt",
    "PreemptionRule",
    "Scheduler",
    "Snapshot",
    "Start",
    "Tenant",
]
