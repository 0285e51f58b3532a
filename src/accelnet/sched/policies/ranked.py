"""Policies that rank jobs instead of solving for an allocation: ``las``, ``srtf``, ``sjf``.

Each orders the active jobs, and every job offers its models fastest first, so the round
mechanism gives each job the fastest model with room when its turn comes.

- ``las``: Tiresias's two-dimensional least attained service. A job's service is GPUs x
  time received (device-seconds). Jobs sit in discretised queues by that service:
  thresholds of 1, 10 and 100 GPU-hours, so queue 0 holds jobs under an hour. Lower queues
  go first, FIFO within a queue; no knowledge of durations is needed. Preemptive at round
  boundaries. A long job drops to a lower priority, so new short jobs overtake it.
- ``srtf``: shortest remaining time first (on the job's fastest model), preemptive at round
  boundaries. Needs work estimates (total steps, or a duration).
- ``sjf``: shortest job first by its estimated total run time, not preemptive: a started job
  runs to its end.
"""

from __future__ import annotations

from collections.abc import Callable

from accelnet.sched.rounds import Allocation, RoundContext, RoundPolicy
from accelnet.sched.snapshot import JobView

LAS_THRESHOLDS_S = (3600.0, 36000.0, 360000.0)  # device-seconds: 1, 10, 100 GPU-hours


class _Ranked(RoundPolicy):
    """Orders jobs by :meth:`key`; each job's models fastest first."""

    timeless = True  # no allocation

    def allocate(self, ctx: RoundContext) -> Allocation:
        """No allocation: the order is the policy."""
        return {}

    def key(self, ctx: RoundContext, job: JobView) -> tuple[float, ...]:
        """Smaller first."""
        raise NotImplementedError

    def order(self, ctx: RoundContext, x: Allocation) -> list[tuple[str, str]]:
        """Jobs by :meth:`key` (then queue order), each with its models fastest first."""
        jobs = sorted(enumerate(ctx.jobs), key=lambda p: (*self.key(ctx, p[1]), p[0]))
        out = []
        for _, job in jobs:
            rates = ctx.tput[job.id]
            out += [(job.id, m) for m in sorted(rates, key=lambda m: -rates[m]) if rates[m] > 0]
        return out

    def first_units(self, ctx: RoundContext, x: Allocation) -> list[tuple[tuple[str, ...], str]]:
        """Each job's first unit in :meth:`order`, whatever its key: its fastest model (the
        first of equal rates), found without the keys or the sort."""
        if type(self).order is not _Ranked.order:
            return self.order_units(ctx, x)
        out: list[tuple[tuple[str, ...], str]] = []
        for job in ctx.jobs:
            rates = ctx.tput[job.id]
            best = max((m for m in rates if rates[m] > 0), key=rates.__getitem__, default=None)
            if best is not None:
                out.append(((job.id,), best))
        return out


def _best_time(
    ctx: RoundContext, job: JobView, left: Callable[[JobView, str], float | None]
) -> float:
    times = [t for m in ctx.tput[job.id] if (t := left(job, m)) is not None]
    return min(times) if times else float("inf")


class Las(_Ranked):
    """Tiresias 2D-LAS with discretised queues (see the module docstring)."""

    name = "las"
    rotates = True  # time-slices by time received (see RoundPolicy.rotates)

    def key(self, ctx: RoundContext, job: JobView) -> tuple[float, ...]:
        """(queue, submission time)."""
        service = ctx.info.attained_s(job)
        queue = sum(1 for t in LAS_THRESHOLDS_S if service >= t)
        return (float(queue), job.submitted_at)


class Srtf(_Ranked):
    """Shortest remaining time first, preemptive (see the module docstring)."""

    name = "srtf"

    def key(self, ctx: RoundContext, job: JobView) -> tuple[float, ...]:
        """(remaining seconds on its fastest model, submission time)."""
        return (_best_time(ctx, job, ctx.info.remaining_s), job.submitted_at)


class Sjf(_Ranked):
    """Shortest (estimated) job first, not preemptive (see the module docstring)."""

    name = "sjf"
    preemptive = False

    def key(self, ctx: RoundContext, job: JobView) -> tuple[float, ...]:
        """(estimated total seconds on its fastest model, submission time)."""
        total = job.spec.workload.total_steps

        def whole(j: JobView, model: str) -> float | None:
            if total is None:
                return j.spec.workload.duration_s
            rate = ctx.tput[j.id].get(model, 0.0)
            return total / rate if rate > 0 else None

        return (_best_time(ctx, job, whole), job.submitted_at)
