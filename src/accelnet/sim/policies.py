"""The scheduling policies the simulator offers: :mod:`accelnet.sched.policies`, with the
simulator's throughput model as the policies' rates (what the live system learns from the
jobs' hints)."""

from __future__ import annotations

from accelnet.sched import JobSpec, Scheduler
from accelnet.sched.colocate import Factors, PairRateFn
from accelnet.sched.jobinfo import RateFn
from accelnet.sched.placement import PlacementStrategy
from accelnet.sched.policies import POLICY_NAMES
from accelnet.sched.policies import make_scheduler as _make
from accelnet.sim.throughput import ThroughputModel

__all__ = ["POLICY_NAMES", "make_scheduler", "model_pairs", "model_rates"]


def model_rates(model: ThroughputModel) -> RateFn:
    """Policies' rates from the throughput model (a gang in one host)."""

    def rate(spec: JobSpec, device_model: str, count: int) -> float:
        try:
            return model.rate(spec.workload.type or "generic", device_model, count)
        except ValueError:  # a model the throughput model cannot rate
            return 0.0

    return rate


def model_pairs(model: ThroughputModel) -> PairRateFn:
    """Packed pairs' rates from the throughput model (its measured co-location factors)."""

    def pair(a: JobSpec, b: JobSpec, device_model: str, count: int) -> Factors | None:
        return model.colocated(a.workload.type or "generic", b.workload.type or "generic",
                               device_model, count)  # fmt: skip

    return pair


def make_scheduler(
    name: str,
    model: ThroughputModel | None = None,
    round_s: float = 360.0,
    placement: str | PlacementStrategy | None = None,
    reserve_after_s: float | None = None,
    min_reallocation_s: float = 0.0,
) -> Scheduler:
    """A fresh scheduler for policy ``name`` (``min_reallocation_s``: see
    :func:`accelnet.sched.policies.make_scheduler`); ValueError listing the known ones
    (UnknownNameError for an unknown placement)."""
    rates = model_rates(model) if model is not None else None
    pairs = model_pairs(model) if model is not None else None
    return _make(name, rates=rates, round_s=round_s, placement=placement, colocated=pairs,
                 reserve_after_s=reserve_after_s,
                 min_reallocation_s=min_reallocation_s)  # fmt: skip
