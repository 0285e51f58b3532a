"""Space sharing in rounds: two whole-device jobs packed on the same devices.

Gavel (OSDI'20, section 3.1) extends its allocations from single jobs to *job
combinations*: two jobs that share the same GPUs at once each run at a measured fraction of
their rate alone, and on a V100 most pairs together do 1.1-1.65x the work of one job. A
round policy that packs (:attr:`RoundPolicy.packs`) returns a :class:`PackedAllocation`:
the time each pair should spend together on each model, beside each job's own shares.

The round scheduler realises a planned pair on one set of devices: both jobs are placed on
the same devices, each with a share of 1/2 (so the capacity index, the controller and the
invariants see one full device), and both run together. The rates come from a
:data:`PairRateFn` (the simulator's throughput model; a live system without measured pairs
packs nothing). A job's *mate* is the job it runs packed with now.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace

from accelnet.fabric import DomainLevel
from accelnet.sched.jobstate import JobState
from accelnet.sched.request import Request
from accelnet.sched.snapshot import JobView
from accelnet.sched.spec import JobSpec
from accelnet.sched.topology import LEVELS, Topology

Factors = tuple[float, float]
PairRateFn = Callable[[JobSpec, JobSpec, str, int], Factors | None]
"""(spec a, spec b, device model, gang size) -> the fractions of their rates alone a and b
keep while sharing the gang's devices; None: not measured, or they do not fit together."""

PACKED_SHARE = 0.5  # each member's share of every device of a packed pair


class PackedAllocation(dict[str, dict[str, float]]):
    """An allocation (job -> model -> fraction of time, counting time spent packed too)
    with ``alone``: each job's time by itself, and ``pairs``: (job a, job b) -> model ->
    fraction of time the two spend together."""

    def __init__(
        self,
        singles: Mapping[str, Mapping[str, float]],
        pairs: Mapping[tuple[str, str], Mapping[str, float]],
    ) -> None:
        super().__init__()
        self.alone = {jid: dict(shares) for jid, shares in singles.items()}
        for jid, shares in singles.items():
            self[jid] = dict(shares)
        for (a, b), shares in pairs.items():
            for jid in (a, b):
                mine = self.setdefault(jid, {})
                for model, value in shares.items():
                    mine[model] = min(1.0, mine.get(model, 0.0) + value)
        self.pairs = {key: dict(v) for key, v in pairs.items()}


def packable(job: JobView) -> bool:
    """Whether a job may be packed: it asks for whole devices."""
    return job.spec.resources.accelerators.share >= 1


def is_packed(job: JobView) -> bool:
    """Whether a running job was placed packed (a share below the whole devices it asked)."""
    p = job.placement
    return p is not None and packable(job) and p.share < 1


def current_mates(running: Iterable[JobView]) -> dict[str, str]:
    """Each packed job that runs (or starts) beside exactly one other packed job on the same
    devices -> that job."""
    on: dict[frozenset[str], list[str]] = {}
    for job in running:
        if job.state in (JobState.STARTING, JobState.RUNNING) and is_packed(job):
            assert job.placement is not None
            on.setdefault(frozenset(job.placement.devices), []).append(job.id)
    mates: dict[str, str] = {}
    for ids in on.values():
        if len(ids) == 2:
            mates[ids[0]], mates[ids[1]] = ids[1], ids[0]
    return mates


def _tighter(a: DomainLevel | None, b: DomainLevel | None) -> DomainLevel | None:
    return min((lv for lv in (a, b) if lv is not None), key=LEVELS.index, default=None)


def pair_request(req: Request, other: Request) -> Request:
    """The request that places a pair: ``req`` (the placing member's) narrowed to the
    device classes ``other`` (its mate's) accepts too, within the tighter of their required
    domains: both run on the devices it gets."""
    keys = {c.key for c in other.classes}
    both = req.narrowed([i for i, c in enumerate(req.classes) if c.key in keys])
    return replace(both, required=_tighter(req.required, other.required))


def accepts(req: Request, devices: tuple[str, ...], topo: Topology) -> bool:
    """Whether ``req`` may run on ``devices`` another job was placed on (to join it): each
    of a class it accepts, all within its required domain."""
    keys = {c.key for c in req.classes}
    if any(topo.class_of[d].key not in keys for d in devices):
        return False
    return req.required is None or LEVELS.index(topo.span(devices)) <= LEVELS.index(req.required)
