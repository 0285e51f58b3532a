"""Communication of running gangs in the simulator, link contention included.

With the communication model on, a multi-device job that says what it communicates per
step (workload hint ``bytes_per_step``) runs at ``1 / (1/r + extra)``, where ``r`` is the
throughput table's rate for its gang *in one host* (the table measures communication on a
server's own links) and ``extra`` is how much longer its allreduce takes on its actual
devices, among the traffic of every other communicating job, than on the first host of the
fabric that holds such a gang alone (:mod:`accelnet.comm`). A gang spread over hosts pays
the network; two gangs sharing a NIC or an uplink both slow down; when one ends the other
speeds up again. This replaces the table's fixed ``*_unconsolidated`` penalty.
"""

from __future__ import annotations

from dataclasses import dataclass

from accelnet.comm import Communicator, CostModel, Path
from accelnet.comm.flows import LinkDir
from accelnet.fabric import Fabric

OVERLAP = 0.85
"""Communication hidden behind computation, fitted on half of Gavel's consolidated vs spread
measurements and checked on the other half (:mod:`accelnet.sim.commcheck`, BENCHMARKS.md)."""


@dataclass
class _Gang:
    comm: Communicator
    nbytes: float
    reference_s: float
    flows: list[Path]
    links: frozenset[LinkDir]
    extra_s: float | None = None  # cached until a gang sharing a link comes or goes


class CommSim:
    """The communicating gangs running now and their extra step time (module docstring)."""

    def __init__(
        self, fabric: Fabric, model: CostModel | None = None, overlap: float = OVERLAP
    ) -> None:
        """``overlap``: the fraction of a step's communication hidden behind its
        computation (data-parallel training overlaps the allreduce with the backward
        pass); ValueError outside [0, 1)."""
        if not 0.0 <= overlap < 1.0:
            raise ValueError(f"overlap must be in [0, 1), got {overlap}")
        self.fabric = fabric
        self.model = model or CostModel()
        self.overlap = overlap
        self._gangs: dict[str, _Gang] = {}
        self._refs: dict[tuple[str, int, float], float] = {}
        self._dirty: set[str] = set()

    def __contains__(self, job: str) -> bool:
        return job in self._gangs

    def jobs(self) -> list[str]:
        """The communicating gangs running now."""
        return list(self._gangs)

    def add(self, job: str, devices: tuple[str, ...], nbytes: float) -> None:
        """``job`` starts communicating ``nbytes`` per step on ``devices``."""
        comm = Communicator(self.fabric, devices)
        model_name = self.fabric.devices[devices[0]].model.name
        ref = self.reference_s(model_name, len(devices), nbytes)
        flows = self.model.flows_of(comm, "allreduce", nbytes)
        links = frozenset(h for p in flows for h in p.hops)
        self._gangs[job] = _Gang(comm, nbytes, ref, flows, links)
        self._touch(links)

    def remove(self, job: str) -> None:
        """``job`` stopped (no-op if it was not communicating)."""
        gang = self._gangs.pop(job, None)
        self._dirty.discard(job)
        if gang is not None:
            self._touch(gang.links)

    def _touch(self, links: frozenset[LinkDir]) -> None:
        """A gang with ``links`` came or went: every gang linked to it through a chain of
        shared links may now get a different share (max-min sharing is global), so the
        whole connected group is re-priced."""
        group = set(links)
        joined: set[str] = set()
        grown = True
        while grown:
            grown = False
            for name, gang in self._gangs.items():
                if name not in joined and (gang.extra_s is None or gang.links & group):
                    joined.add(name)
                    group |= gang.links
                    grown = True
        for name in joined:
            self._gangs[name].extra_s = None
        self._dirty |= joined

    def changed(self) -> list[str]:
        """The gangs whose extra step time may have changed since the last call (linked,
        through shared links, to a gang that came or went)."""
        out = sorted(self._dirty)
        self._dirty.clear()
        return out

    def extra_s(self, job: str) -> float:
        """Seconds per step ``job`` spends communicating, not hidden, beyond its one-host
        reference, with every other gang's traffic on the links."""
        gang = self._gangs[job]
        if gang.extra_s is None:
            background = [p for o, g in self._gangs.items() if o != job for p in g.flows]
            est = self.model.estimate(gang.comm, "allreduce", gang.nbytes, background=background)
            gang.extra_s = max(0.0, est.time_s - gang.reference_s) * (1.0 - self.overlap)
        return gang.extra_s

    def reference_s(self, model_name: str, count: int, nbytes: float) -> float:
        """The allreduce alone on the first host with ``count`` devices of ``model_name``
        (what the throughput table's one-host rate already includes); 0 if no host has
        that many."""
        key = (model_name, count, nbytes)
        found = self._refs.get(key)
        if found is None:
            found = 0.0
            for host in self.fabric.hosts:
                same = [d for d in host.device_ids
                        if self.fabric.devices[d].model.name == model_name]  # fmt: skip
                if len(same) >= count:
                    comm = Communicator(self.fabric, same[:count])
                    found = self.model.estimate(comm, "allreduce", nbytes).time_s
                    break
            self._refs[key] = found
        return found
