"""The alpha-beta (Hockney) cost of collectives over the fabric's real routes.

A phase of concurrent flows costs ``steps * (alpha + max_f bytes_f / rate_f)``, or, when
pipelined, ``depth * alpha + max_f bytes_f / rate_f``. ``alpha`` is the slowest flow's route
latency plus a per-step overhead; ``rate_f`` is the flow's max-min fair share of every link
direction it crosses, with the phase's other flows and any *background* flows (other jobs'
traffic) competing (:mod:`accelnet.comm.flows`). A collective costs a launch overhead plus
its phases. So a ring whose two hops cross one NIC in the same direction runs at half that
NIC's speed, and a job whose ring shares a spine link with another job slows down.

Like NCCL's tuner, :meth:`CostModel.estimate` prices every algorithm that applies and picks
the fastest for the message size: trees and halving-doubling win small messages
(``O(log p)`` latency), rings and hierarchical rings win large ones.

A :class:`Calibration` replaces the fabric's figures for routes of a given locality level
with measured ones (``accelnet bench comm --calibrate``): the per-step latency and each
rank's send and receive bandwidth. That is how the model is fitted to a software stack
(gloo over loopback, NCCL over PCIe) that does not reach the wire's speed.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path as FilePath
from typing import Any
from weakref import WeakKeyDictionary

from accelnet.comm.algorithms import ALGORITHMS, Algorithm, Collective, Phase, busbw_factor, phases
from accelnet.comm.communicator import CommError, Communicator
from accelnet.comm.flows import Path, Traffic, max_min_rates
from accelnet.fabric import Fabric


@dataclass(frozen=True, slots=True)
class LevelFit:
    """Measured figures for one locality level: per-step latency (us) and per-rank
    bandwidth each way (GB/s)."""

    alpha_us: float
    bandwidth_gbps: float


@dataclass(frozen=True)
class Calibration:
    """Fitted figures by locality level name (``PCIE_HOST``, ``NVLINK``, ...)."""

    levels: Mapping[str, LevelFit]
    source: str = ""

    def to_json(self) -> dict[str, Any]:
        """JSON form (schema ``accelnet.comm-calibration/v1``)."""
        return {
            "schema": "accelnet.comm-calibration/v1",
            "source": self.source,
            "levels": {
                k: {"alpha_us": v.alpha_us, "bandwidth_gbps": v.bandwidth_gbps}
                for k, v in self.levels.items()
            },
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any], where: str = "calibration") -> Calibration:
        """Parse :meth:`to_json` output; CommError naming the key at fault."""
        if data.get("schema") != "accelnet.comm-calibration/v1":
            raise CommError(f"{where}: schema must be 'accelnet.comm-calibration/v1'")
        levels = {}
        for name, fit in dict(data.get("levels") or {}).items():
            try:
                alpha, bw = float(fit["alpha_us"]), float(fit["bandwidth_gbps"])
            except (KeyError, TypeError, ValueError):
                raise CommError(
                    f"{where}: levels.{name} needs numbers alpha_us and bandwidth_gbps, got {fit!r}"
                ) from None
            if alpha < 0 or bw <= 0:
                raise CommError(f"{where}: levels.{name}: alpha_us >= 0 and bandwidth_gbps > 0")
            levels[name] = LevelFit(alpha, bw)
        return cls(levels, str(data.get("source", "")))

    def save(self, path: FilePath) -> None:
        """Write the JSON form to ``path``."""
        path.write_text(json.dumps(self.to_json(), indent=2) + "\n")

    @classmethod
    def load(cls, path: FilePath) -> Calibration:
        """Read a file written by :meth:`save`; CommError naming the file if it is bad."""
        try:
            data = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as e:
            raise CommError(f"{path}: cannot read a calibration: {e}") from None
        return cls.from_json(data, str(path))


@dataclass(frozen=True, slots=True)
class Estimate:
    """A collective's predicted time and bandwidths (nccl-tests' definitions:
    ``algbw = bytes / time``, ``busbw = algbw * factor``), in seconds and GB/s."""

    collective: Collective
    algorithm: Algorithm
    nbytes: float
    ranks: int
    time_s: float
    latency_s: float  # the alpha part
    bandwidth_s: float  # the bytes part

    @property
    def algbw_gbps(self) -> float:
        """Bytes over time, GB/s."""
        return self.nbytes / self.time_s / 1e9 if self.time_s > 0 else float("inf")

    @property
    def busbw_gbps(self) -> float:
        """algbw times the collective's bus factor, GB/s."""
        return self.algbw_gbps * busbw_factor(self.collective, self.ranks)

    def to_json(self) -> dict[str, Any]:
        """JSON form (part of ``accelnet.comm-estimate/v1``)."""
        return {
            "collective": self.collective.value,
            "algorithm": self.algorithm.value,
            "bytes": self.nbytes,
            "ranks": self.ranks,
            "time_s": self.time_s,
            "latency_s": self.latency_s,
            "bandwidth_s": self.bandwidth_s,
            "algbw_gbps": self.algbw_gbps,
            "busbw_gbps": self.busbw_gbps,
        }


@dataclass
class CostModel:
    """Prices collectives on communicators (see the module docstring).

    ``step_us``: software overhead per step on top of the route latency; ``launch_us``: per
    collective; ``efficiency``: the fraction of link bandwidth a transport reaches (1 = the
    wire). A calibrated level replaces the route's latency, ``step_us`` and the bandwidth
    (and so ``efficiency``) for its routes; ``launch_us`` still applies.
    """

    step_us: float = 1.0
    launch_us: float = 5.0
    efficiency: float = 1.0
    calibration: Calibration | None = None
    _paths: WeakKeyDictionary[Fabric, dict[tuple[str, str], Path]] = field(
        default_factory=WeakKeyDictionary, repr=False
    )
    _lanes: WeakKeyDictionary[Fabric, dict[int, int]] = field(
        default_factory=WeakKeyDictionary, repr=False
    )

    def path(self, comm: Communicator, i: int, j: int) -> Path:
        """The path flows from rank ``i`` to rank ``j`` take, as the model sees it (cached
        per fabric; change the model's figures on a new model, not this one)."""
        a, b = comm.ranks[i], comm.ranks[j]
        cache = self._paths.setdefault(comm.fabric, {})
        found = cache.get((a, b))
        if found is not None:
            return found
        route = comm.route(i, j)
        level = route.level.name
        fit = self.calibration.levels.get(level) if self.calibration else None
        if fit is not None:
            # measured figures: each rank's sending and receiving side (at this level) is
            # the bottleneck
            cap = fit.bandwidth_gbps * 1e9
            hops = ((a, level, a, 0), (level, b, b, 0))
            found = Path(hops, (cap, cap), fit.alpha_us * 1e-6)
        else:
            base = Path.of(route, self._lanes_of(comm.fabric))
            caps = tuple(c * self.efficiency for c in base.capacity)
            found = Path(base.hops, caps, base.latency_s + self.step_us * 1e-6)
        cache[(a, b)] = found
        return found

    def _lanes_of(self, fabric: Fabric) -> dict[int, int]:
        """``id(link) -> lane`` for the fabric's parallel network links."""
        found = self._lanes.get(fabric)
        if found is None:
            seen: dict[tuple[str, str], int] = {}
            found = {}
            for link in fabric.external_links:
                key = (link.a, link.b)
                lane = seen.get(key, 0)
                seen[key] = lane + 1
                if lane:
                    found[id(link)] = lane
            self._lanes[fabric] = found
        return found

    def phase_time(
        self, comm: Communicator, phase: Phase, background: Traffic | Sequence[Path] = ()
    ) -> tuple[float, float]:
        """(latency part, bandwidth part) of one phase, with ``background`` flows competing."""
        if not phase.flows:
            return 0.0, 0.0
        paths = [self.path(comm, i, j) for i, j, _ in phase.flows]
        # flows that share no link with the phase change its rates only at second order,
        # which the model leaves out: pricing stays cheap with hundreds of running rings
        rates = max_min_rates([*paths, *as_traffic(background).touching(paths)])
        alpha = max(p.latency_s for p in paths)
        beta = max(
            (size / rate if rate > 0 else float("inf"))
            for (_, _, size), rate in zip(phase.flows, rates, strict=False)
        )
        if phase.pipelined:
            return phase.depth * alpha, beta
        return phase.steps * alpha, phase.steps * beta

    def price(
        self,
        comm: Communicator,
        collective: Collective,
        nbytes: float,
        algorithm: Algorithm,
        background: Traffic | Sequence[Path] = (),
    ) -> Estimate | None:
        """The estimate for one algorithm; None if it does not apply."""
        plan = phases(algorithm, collective, comm, nbytes)
        if plan is None:
            return None
        lat = self.launch_us * 1e-6 if plan else 0.0
        bw = 0.0
        for phase in plan:
            a, b = self.phase_time(comm, phase, background)
            lat += a
            bw += b
        return Estimate(collective, algorithm, float(nbytes), comm.size, lat + bw, lat, bw)

    def estimates(
        self,
        comm: Communicator,
        collective: Collective | str,
        nbytes: float,
        background: Traffic | Sequence[Path] = (),
    ) -> list[Estimate]:
        """Every applicable algorithm's estimate, fastest first."""
        coll = _collective(collective)
        if nbytes < 0:
            raise CommError(f"message size must be >= 0 bytes, got {nbytes}")
        background = as_traffic(background)
        out = [
            e
            for alg in ALGORITHMS[coll]
            if (e := self.price(comm, coll, nbytes, alg, background)) is not None
        ]
        return sorted(out, key=lambda e: (e.time_s, e.algorithm.value))

    def estimate(
        self,
        comm: Communicator,
        collective: Collective | str,
        nbytes: float,
        algorithm: Algorithm | str | None = None,
        background: Traffic | Sequence[Path] = (),
    ) -> Estimate:
        """The estimate with ``algorithm``, or with the fastest one for this size (None)."""
        coll = _collective(collective)
        background = as_traffic(background)
        if algorithm is None:
            return self.estimates(comm, coll, nbytes, background)[0]
        alg = _algorithm(algorithm)
        e = self.price(comm, coll, nbytes, alg, background)
        if e is None:
            raise CommError(
                f"algorithm {alg.value!r} does not apply to {coll.value} on {comm.size} ranks "
                f"over {len(comm.hosts())} host(s); applicable: "
                + ", ".join(x.algorithm.value for x in self.estimates(comm, coll, nbytes))
            )
        return e

    def flows_of(
        self, comm: Communicator, collective: Collective | str, nbytes: float
    ) -> list[Path]:
        """The paths of the phase that takes longest (alone) in the fastest algorithm: what
        this communicator puts on the links most of the time it communicates (the
        background it is for other jobs)."""
        best = self.estimate(comm, collective, nbytes)
        plan = phases(best.algorithm, best.collective, comm, nbytes) or []
        if not plan:
            return []
        phase = max(plan, key=lambda ph: sum(self.phase_time(comm, ph)))
        return [self.path(comm, i, j) for i, j, _ in phase.flows]


def as_traffic(background: Traffic | Sequence[Path]) -> Traffic:
    """``background`` indexed (as it is, if it already is)."""
    return background if isinstance(background, Traffic) else Traffic(background)


def _collective(value: Collective | str) -> Collective:
    try:
        return Collective(value)
    except ValueError:
        known = ", ".join(c.value for c in Collective)
        raise CommError(f"unknown collective {value!r}; known: {known}") from None


def _algorithm(value: Algorithm | str) -> Algorithm:
    try:
        return Algorithm(value)
    except ValueError:
        known = ", ".join(a.value for a in Algorithm)
        raise CommError(f"unknown algorithm {value!r}; known: {known}") from None
