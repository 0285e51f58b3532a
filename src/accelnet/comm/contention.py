"""Link contention between jobs: concurrent communicators divide the links they share.

Every job's communicator puts the flows of its collective's busiest phase on the links
(:meth:`CostModel.flows_of`). When several jobs communicate at once, all their flows share
each link direction max-min fairly, so a job's collective is priced with the other jobs'
flows as background, and its training step slows by the difference:
``step = compute + (1 - overlap) * collective``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from accelnet.comm.algorithms import Collective
from accelnet.comm.communicator import Communicator
from accelnet.comm.cost import CostModel, Estimate
from accelnet.comm.flows import LinkDir, Path, capacities, max_min_rates


@dataclass(frozen=True)
class CommJob:
    """A job that runs ``collective`` of ``nbytes`` on ``comm`` every step, after
    ``compute_s`` of computation (``overlap``: the fraction of communication hidden
    behind computation)."""

    name: str
    comm: Communicator
    nbytes: float
    collective: Collective | str = Collective.ALLREDUCE
    compute_s: float = 0.0
    overlap: float = 0.0


@dataclass(frozen=True)
class Slowdown:
    """One job's collective alone and among the others, and its step times."""

    job: str
    alone: Estimate
    shared: Estimate
    step_alone_s: float
    step_shared_s: float

    @property
    def factor(self) -> float:
        """Shared step time over step time alone (>= 1)."""
        return self.step_shared_s / self.step_alone_s if self.step_alone_s > 0 else 1.0


def step_time(job: CommJob, est: Estimate) -> float:
    """Compute plus the communication not hidden behind it."""
    return job.compute_s + (1.0 - job.overlap) * est.time_s


def contended(model: CostModel, jobs: Sequence[CommJob]) -> dict[str, Slowdown]:
    """Every job's step time alone and while all of ``jobs`` communicate at once;
    ValueError if two jobs share a name."""
    _unique(jobs)
    flows = {job.name: model.flows_of(job.comm, job.collective, job.nbytes) for job in jobs}
    out = {}
    for job in jobs:
        background = [p for other in jobs if other.name != job.name for p in flows[other.name]]
        alone = model.estimate(job.comm, job.collective, job.nbytes)
        shared = model.estimate(job.comm, job.collective, job.nbytes, background=background)
        out[job.name] = Slowdown(job.name, alone, shared, step_time(job, alone),
                                 step_time(job, shared))  # fmt: skip
    return out


@dataclass(frozen=True)
class LinkShare:
    """One link direction: its capacity and each job's share of it (bytes/s)."""

    link: LinkDir
    capacity: float
    shares: dict[str, float]

    @property
    def used(self) -> float:
        """The sum of the shares."""
        return sum(self.shares.values())


def link_shares(model: CostModel, jobs: Sequence[CommJob]) -> list[LinkShare]:
    """How the jobs' busiest phases share every link direction they cross, all at once;
    links crossed by more than one job first, busiest first; ValueError if two jobs share
    a name."""
    _unique(jobs)
    owners: list[str] = []
    paths: list[Path] = []
    for job in jobs:
        for p in model.flows_of(job.comm, job.collective, job.nbytes):
            owners.append(job.name)
            paths.append(p)
    rates = max_min_rates(paths)
    caps = capacities(paths)
    table: dict[LinkDir, dict[str, float]] = {}
    for owner, path, rate in zip(owners, paths, rates, strict=True):
        for hop in path.hops:
            by_job = table.setdefault(hop, {})
            by_job[owner] = by_job.get(owner, 0.0) + rate
    out = [LinkShare(hop, caps[hop], shares) for hop, shares in table.items()]
    return sorted(out, key=lambda s: (-len(s.shares), -s.used / s.capacity, s.link))


def _unique(jobs: Sequence[CommJob]) -> None:
    names = [j.name for j in jobs]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ValueError(f"job names must be unique; given twice: {', '.join(twice)}")
