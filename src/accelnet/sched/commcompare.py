"""Communication-aware placement against topology-blind ones, as the model predicts them.

:func:`compare_placements` places one allreduce-heavy gang on a fabric (some devices
possibly held already) with ``comm-aware``, ``best-fit`` and ``first-fit``, and with a
*topology-oblivious* scheduler that, by labels only, takes any acceptable model with room and
any free devices of it (the median over seeded draws). Each is scored by the predicted
allreduce bus bandwidth and step time on its devices (ranks in ring order).
"""

from __future__ import annotations

import random
import statistics
from dataclasses import dataclass
from typing import Any

from accelnet.comm import Communicator, CostModel
from accelnet.comm.ring import ring_order
from accelnet.fabric import Fabric
from accelnet.sched.capacity import CapacityIndex
from accelnet.sched.placement import PLACEMENTS
from accelnet.sched.request import make_request
from accelnet.sched.spec import JobSpec
from accelnet.sched.topology import Topology


@dataclass(frozen=True)
class Placed:
    """One strategy's devices and the predicted allreduce on them."""

    strategy: str
    devices: tuple[str, ...]
    algorithm: str
    time_s: float
    busbw_gbps: float

    def to_json(self) -> dict[str, Any]:
        """JSON form."""
        return {
            "strategy": self.strategy,
            "devices": list(self.devices),
            "algorithm": self.algorithm,
            "allreduce_s": self.time_s,
            "busbw_gbps": self.busbw_gbps,
        }


def probe_spec(accelerators: str, nbytes: float) -> JobSpec:
    """The spec of an allreduce-heavy gang: ``accelerators`` (``any:4``, ``H100:4``...) that
    communicates ``nbytes`` per step."""
    return JobSpec.model_validate(
        {
            "name": "probe",
            "run": "true",
            "resources": {"accelerators": accelerators},
            "workload": {"category": "training", "bytes_per_step": nbytes},
        }
    )


def compare_placements(
    fabric: Fabric,
    accelerators: str,
    nbytes: float,
    busy: int = 0,
    trials: int = 101,
    seed: int = 0,
    model: CostModel | None = None,
) -> list[Placed]:
    """Each strategy's placement of the gang, ``busy`` random devices held first (seeded);
    the oblivious one (an acceptable model with room drawn at random, then free devices of
    it at random) is the draw with the median bus bandwidth over ``trials`` draws.
    ValueError if the gang cannot be placed or ``busy`` is out of range."""
    model = model or CostModel()
    spec = probe_spec(accelerators, nbytes)
    topo = Topology(fabric)
    req = make_request("probe", spec, topo)
    devices = list(topo.order)
    if not 0 <= busy < len(devices):
        raise ValueError(f"busy must be in 0..{len(devices) - 1}, got {busy}")
    rng = random.Random(seed)
    held = set(rng.sample(devices, busy))
    free = {d: (0.0 if d in held else 1.0) for d in devices}

    memo: dict[tuple[str, ...], Placed] = {}

    def priced(name: str, devs: tuple[str, ...]) -> Placed:
        found = memo.get(devs)
        if found is None:
            comm = ring_order(Communicator(fabric, devs), model, exact_limit=6)
            est = model.estimate(comm, "allreduce", nbytes)
            found = Placed(name, comm.ranks, est.algorithm.value, est.time_s, est.busbw_gbps)
            memo[devs] = found
        return Placed(name, found.devices, found.algorithm, found.time_s, found.busbw_gbps)

    out = []
    for name in ("comm-aware", "best-fit", "first-fit"):
        placed = PLACEMENTS.create(name).place(req, CapacityIndex(topo, dict(free)))
        if placed is None:
            raise ValueError(f"{accelerators} does not fit on {fabric.name} with {busy} busy")
        out.append(priced(name, placed.devices))
    models = {c.model.name for c in req.classes}
    pool = [d for d in devices if free[d] > 0 and fabric.devices[d].model.name in models]
    by_model: dict[str, list[str]] = {}
    for d in pool:
        by_model.setdefault(fabric.devices[d].model.name, []).append(d)
    fits = sorted(m for m, ds in by_model.items() if len(ds) >= req.count)
    draws = []
    for _ in range(trials if fits else 0):
        # by labels only: any acceptable model with room, any of its free devices
        chosen = by_model[rng.choice(fits)]
        draws.append(priced("oblivious", tuple(sorted(rng.sample(chosen, req.count)))))
    if draws:
        median = statistics.median_low(p.busbw_gbps for p in draws)
        out.append(next(p for p in draws if p.busbw_gbps == median))
    return out
