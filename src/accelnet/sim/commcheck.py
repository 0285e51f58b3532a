"""The communication model against Gavel's measurements: consolidated and spread gangs.

Gavel's throughput table measures most multi-GPU jobs twice: with the gang in one server
(``v100``, ...) and spread over servers (``v100_unconsolidated``, ...). The communication
model predicts the ratio of the two from first principles: a step of a consolidated gang
is its measured time; spreading it replaces one allreduce of the gradient inside a server
(:data:`REFERENCE_HOSTS`, Gavel's kinds of server) with one across ``gavel-48``'s servers
(10GbE, one GPU each); ``overlap`` of the communication hides behind computation::

    step_spread = step_one_host + (1 - overlap) * (allreduce_spread - allreduce_one_host)

:func:`check` compares predicted and measured ratios; :func:`fit_overlap` fits the one free
parameter on part of the entries, so it can be tested on the rest.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from accelnet.comm import Communicator, CostModel
from accelnet.fabric import Fabric, load_fabric
from accelnet.fabric.build import build_fabric, parse_spec
from accelnet.sim.gradients import gradient_bytes

REFERENCE_HOSTS: Mapping[str, dict[str, Any]] = {
    # AWS p3.16xlarge: 8 V100 SXM2 in the hybrid cube mesh (a DGX-1's board)
    "v100": {"name": "v100-server", "devices": "8xV100", "nvlink": "cube-mesh", "sockets": 2,
             "pcie_switches": 4, "pcie_type": "PCIe3x16", "smp_type": "QPI"},
    # 8 P100 PCIe on two sockets, two PCIe switches
    "p100": {"name": "p100-server", "devices": "8xP100", "sockets": 2, "pcie_switches": 2,
             "pcie_type": "PCIe3x16", "smp_type": "QPI"},
    # AWS p2.8xlarge: 4 K80 boards (8 GK210), a PCIe switch per board
    "k80": {"name": "k80-server", "devices": "8xK80", "sockets": 2, "pcie_switches": 4,
            "pcie_type": "PCIe3x16", "smp_type": "QPI"},
}  # fmt: skip


@dataclass(frozen=True)
class Entry:
    """One job measured both ways (steps/s)."""

    worker: str  # Gavel's worker type: v100, p100, k80
    job_type: str
    count: int
    one_host: float
    spread: float

    @property
    def measured(self) -> float:
        """Spread over one-host throughput, as measured."""
        return self.spread / self.one_host


@dataclass(frozen=True)
class Prediction:
    """The model's ratio for one entry."""

    entry: Entry
    predicted: float

    @property
    def factor(self) -> float:
        """How far off, as a factor >= 1."""
        return math.exp(abs(math.log(self.predicted / self.entry.measured)))


def entries(doc: Mapping[str, Any]) -> list[Entry]:
    """Every (worker, job type, count >= 2) that Gavel's table (``doc``, its JSON) measured
    both ways, for job types whose gradient size is known; sorted."""
    out = []
    for worker in REFERENCE_HOSTS:
        one, spread = doc.get(worker, {}), doc.get(f"{worker}_unconsolidated", {})
        for key, row in spread.items():
            if key not in one:
                continue
            job_type, count = _key(key)
            if count < 2 or gradient_bytes(job_type) is None:
                continue
            a, b = _rate(one[key]), _rate(row)
            if a > 0 and b > 0:
                out.append(Entry(worker, job_type, count, a, b))
    return sorted(out, key=lambda e: (e.worker, e.job_type, e.count))


def _key(key: str) -> tuple[str, int]:
    inner = key.strip()[1:-1]
    name, _, count = inner.rpartition(",")
    return name.strip().strip("'\""), int(count)


def _rate(value: Any) -> float:
    return float(value["null"] if isinstance(value, Mapping) else value)


class Checker:
    """Allreduce times on the reference servers and on ``gavel-48``, computed once."""

    def __init__(self, model: CostModel | None = None) -> None:
        self.model = model or CostModel()
        self.servers: dict[str, Fabric] = {
            w: build_fabric(parse_spec({"name": spec["name"], "hosts": [spec]}, spec["name"]))
            for w, spec in REFERENCE_HOSTS.items()
        }
        self.cluster = load_fabric("gavel-48")
        self._times: dict[tuple[str, str, int, bool], float] = {}

    def allreduce_s(self, worker: str, job_type: str, count: int, spread: bool) -> float:
        """One gradient allreduce of ``job_type`` on ``count`` GPUs of ``worker``."""
        key = (worker, job_type, count, spread)
        found = self._times.get(key)
        if found is None:
            fabric = self.cluster if spread else self.servers[worker]
            devices = [d.id for d in fabric.devices.values()
                       if d.model.name.lower().startswith(worker)][:count]  # fmt: skip
            nbytes = gradient_bytes(job_type) or 0.0
            found = self.model.estimate(Communicator(fabric, devices), "allreduce", nbytes).time_s
            self._times[key] = found
        return found

    def predict(self, entry: Entry, overlap: float) -> Prediction:
        """The model's spread/one-host ratio for ``entry``."""
        step = 1.0 / entry.one_host
        extra = self.allreduce_s(entry.worker, entry.job_type, entry.count, True)
        extra -= self.allreduce_s(entry.worker, entry.job_type, entry.count, False)
        spread_step = max(step, step + (1.0 - overlap) * extra)
        return Prediction(entry, step / spread_step)


def check(checker: Checker, items: Iterable[Entry], overlap: float) -> list[Prediction]:
    """Predictions for ``items``."""
    return [checker.predict(e, overlap) for e in items]


def summary(preds: Sequence[Prediction]) -> dict[str, float]:
    """Geometric-mean, median and 90th-percentile error factors, and the share of entries
    within 1.5x."""
    logs = sorted(math.log(p.factor) for p in preds)
    if not logs:
        return {"n": 0}
    p90 = logs[min(len(logs) - 1, int(0.9 * len(logs)))]
    return {
        "n": len(logs),
        "geomean_factor": math.exp(statistics.fmean(logs)),
        "median_factor": math.exp(statistics.median(logs)),
        "p90_factor": math.exp(p90),
        "within_1_5x": sum(x <= math.log(1.5) for x in logs) / len(logs),
    }


def fit_overlap(checker: Checker, items: Sequence[Entry], steps: int = 20) -> float:
    """The overlap in [0, 0.95] (grid of ``steps``) with the least geometric-mean error."""
    grid = [i * 0.95 / steps for i in range(steps + 1)]
    return min(grid, key=lambda f: summary(check(checker, items, f))["geomean_factor"])
