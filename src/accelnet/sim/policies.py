"""The scheduling policies the simulator offers: :mod:`accelnet.sched.policies`, with the
simulator's throughput model as the policies' rates (what the live system learns from the
jobs' hints)."""

from __future__ import annotations

from accelnet.fabric import Fabric
from accelnet.sched import JobSpec, Scheduler
from accelnet.sched.colocate import Factors, PairRateFn
from accelnet.sched.placement import PlacementStrategy
from accelnet.sched.policies import POLICY_NAMES
from accelnet.sched.policies import make_scheduler as _make
from accelnet.sim.throughput import ThroughputModel

__all__ = [
    "POLICY_NAMES",
    "ModelRates",
    "make_scheduler",
    "model_pairs",
    "model_rates",
    "most_on_a_host",
]


def most_on_a_host(fabric: Fabric) -> dict[str, int]:
    """Per device model, the most devices of it that one host of ``fabric`` has."""
    per_host: dict[tuple[str, str], int] = {}
    for d in fabric.devices.values():
        per_host[d.host, d.model.name] = per_host.get((d.host, d.model.name), 0) + 1
    most: dict[str, int] = {}
    for (_, name), k in per_host.items():
        most[name] = max(k, most.get(name, 0))
    return most


class ModelRates:
    """Policies' rates from the throughput model: a gang in one host (as Gavel's policies
    rate it), or, once :meth:`on` a fabric, the rate the gang can get there: spread over
    hosts (Gavel's ``*_unconsolidated`` figures) on a device model none of whose hosts
    holds that many devices. A policy that took every gang for one host's would misjudge
    what a spread gang does and how long it has left on such a fabric. With ``comm``
    (the simulator's communication model), a gang that communicates (``bytes_per_step``)
    keeps one host's rate: the communication model prices its spread, as the run does."""

    def __init__(
        self,
        model: ThroughputModel,
        most_on_a_host: dict[str, int] | None = None,
        comm: bool = False,
    ) -> None:
        self.model = model
        self.most_on_a_host = most_on_a_host  # None: every gang in one host
        self.comm = comm

    def __call__(self, spec: JobSpec, device_model: str, count: int) -> float:
        most = self.most_on_a_host
        consolidated = most is None or most.get(device_model, 0) >= count
        if not consolidated and self.comm and (spec.workload.bytes_per_step or 0) > 0:
            consolidated = True  # the communication model prices its spread
        try:
            return self.model.rate(spec.workload.type or "generic", device_model, count,
                                   consolidated)  # fmt: skip
        except ValueError:  # a model the throughput model cannot rate
            return 0.0

    def on(self, fabric: Fabric, comm: bool = False) -> ModelRates:
        """These rates on ``fabric`` (``comm``: with the communication model): a gang
        larger than every host's devices of a model is rated spread there."""
        return ModelRates(self.model, most_on_a_host(fabric), comm)

    def plain(self) -> ModelRates:
        """These rates on no fabric: every gang in one host."""
        return ModelRates(self.model)


def model_rates(model: ThroughputModel) -> ModelRates:
    """Policies' rates from the throughput model (a gang in one host; see
    :class:`ModelRates`)."""
    return ModelRates(model)


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
