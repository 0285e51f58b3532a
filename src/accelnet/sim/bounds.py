"""A lower bound on the makespan from the allocation LP (the fluid relaxation).

For the jobs that arrive at or after time ``tau``, no schedule finishes before
``tau + T*``, where ``T*`` is the smallest makespan of the *fluid* problem: every job may be
split over models and time freely (time fractions ``x[j][m]``, at most all of a job's time,
no model over-committed, each gang at its best, one-host rate) and starts at ``tau``. That
is :class:`~accelnet.sched.policies.min_makespan.MinMakespan`'s LP, ``T* = 1 / theta``. The
bound is the largest ``tau - first arrival + T*`` over a few values of ``tau`` (the first
arrival and arrival-time quantiles). It ignores gang integrality and round boundaries, so
it is never above a real schedule's makespan.
"""

from __future__ import annotations

from collections.abc import Sequence

from accelnet.fabric import Fabric
from accelnet.sched import JobState, JobView
from accelnet.sched.jobinfo import JobInfo, RateFn
from accelnet.sched.policies.min_makespan import MinMakespan
from accelnet.sched.rounds import RoundContext
from accelnet.sim.workload import SimJob

MAX_JOBS = 5000  # larger traces skip the bound (one LP per point would cost too much)


def makespan_lp(
    fabric: Fabric, jobs: Sequence[SimJob], rates: RateFn, points: int = 8
) -> float | None:
    """The LP bound (seconds from the first arrival), or None for no or too many jobs."""
    if not jobs or len(jobs) > MAX_JOBS:
        return None
    capacity: dict[str, int] = {}
    for d in fabric.devices.values():
        capacity[d.model.name] = capacity.get(d.model.name, 0) + 1
    arrivals = sorted(j.arrival for j in jobs)
    first = arrivals[0]
    taus = sorted({arrivals[int(i * (len(arrivals) - 1) / max(1, points - 1))]
                   for i in range(points)})  # fmt: skip
    best = 0.0
    for tau in taus:
        later = [j for j in jobs if j.arrival >= tau]
        views = [JobView(j.id, j.spec(), JobState.ADMITTED, j.arrival) for j in later]
        ctx = RoundContext.of(views, capacity, JobInfo(tau, rates))
        theta = MinMakespan().theta(ctx)
        if theta is not None and theta > 0:
            best = max(best, tau - first + 1.0 / theta)
    return best or None
