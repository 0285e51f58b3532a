"""Benchmark rows beside the cost model's predictions, their summary, and the JSON document
(schema ``accelnet.comm-bench/v1``). Pure.

Sizes, ``algbw`` and ``busbw`` follow nccl-tests: ``algbw = bytes / time`` and
``busbw = algbw * 2(p-1)/p`` (allreduce) or ``* (p-1)/p`` (allgather). ``ratio`` is the
measured busbw over the predicted one (= predicted time over measured time): below 1, the
machine is slower than the model says.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from accelnet.comm import Calibration, Collective, CostModel, Estimate, busbw_factor
from accelnet.commbench.plan import Backend, BenchPlan
from accelnet.commbench.runner import Measurement, Settings

SCHEMA = "accelnet.comm-bench/v1"
DTYPE = "float"  # float32, as nccl-tests names it
SMALL_MAX = 64 << 10  # size bands of the summary: small < 64K <= medium < 4M <= large
MEDIUM_MAX = 4 << 20


def prediction_algorithm(backend: Backend) -> str | None:
    """The algorithm predictions use: ``ring`` for gloo (its allreduce and allgather are
    rings); the model's fastest (None) for NCCL, whose tuner picks per size too."""
    return "ring" if backend == "gloo" else None


@dataclass(frozen=True)
class Row:
    """One collective at one size: measured (median over repeats) and predicted."""

    collective: str
    nbytes: int
    count: int
    ranks: int
    times_s: tuple[float, ...]
    predicted: Estimate

    @property
    def time_s(self) -> float:
        """Median over repeats of the per-iteration time (slowest rank)."""
        return statistics.median(self.times_s)

    @property
    def algbw_gbps(self) -> float:
        """Bytes over time, GB/s."""
        return self.nbytes / self.time_s / 1e9

    @property
    def busbw_gbps(self) -> float:
        """algbw times nccl-tests' bus factor, GB/s."""
        return self.algbw_gbps * busbw_factor(Collective(self.collective), self.ranks)

    @property
    def ratio(self) -> float:
        """Measured busbw over predicted busbw."""
        return self.busbw_gbps / self.predicted.busbw_gbps

    def to_json(self) -> dict[str, Any]:
        """One entry of the document's ``rows``."""
        return {
            "collective": self.collective,
            "bytes": self.nbytes,
            "count": self.count,
            "type": DTYPE,
            "time_us": self.time_s * 1e6,
            "times_us": [t * 1e6 for t in self.times_s],
            "algbw_gbps": self.algbw_gbps,
            "busbw_gbps": self.busbw_gbps,
            "predicted_algorithm": self.predicted.algorithm.value,
            "predicted_us": self.predicted.time_s * 1e6,
            "predicted_busbw_gbps": self.predicted.busbw_gbps,
            "ratio": self.ratio,
        }


def make_rows(plan: BenchPlan, measurements: Sequence[Measurement], model: CostModel) -> list[Row]:
    """Rows for ``measurements``, each with the model's prediction on ``plan.comm``."""
    algorithm = prediction_algorithm(plan.backend)
    return [
        Row(
            m.step.collective,
            m.step.nbytes,
            m.step.count,
            plan.ranks,
            m.times_s,
            model.estimate(plan.comm, m.step.collective, m.step.nbytes, algorithm),
        )
        for m in measurements
    ]


def band(nbytes: int) -> str:
    """``small`` (< 64K), ``medium`` (< 4M) or ``large``."""
    return "small" if nbytes < SMALL_MAX else "medium" if nbytes < MEDIUM_MAX else "large"


def factor(ratio: float) -> float:
    """How far a ratio is from 1, either way: ``max(r, 1/r)``."""
    return max(ratio, 1 / ratio)


def summarize(rows: Sequence[Row]) -> dict[str, dict[str, Any]]:
    """Per collective and size band (and ``all``): rows, median ratio and worst factor."""
    groups: dict[str, dict[str, list[float]]] = {}
    for r in rows:
        by_band = groups.setdefault(r.collective, {})
        by_band.setdefault(band(r.nbytes), []).append(r.ratio)
        by_band.setdefault("all", []).append(r.ratio)
    return {
        coll: {
            name: {
                "rows": len(ratios),
                "median_ratio": statistics.median(ratios),
                "worst_factor": max(factor(x) for x in ratios),
            }
            for name, ratios in by_band.items()
        }
        for coll, by_band in groups.items()
    }


def bench_json(
    plan: BenchPlan,
    rows: Sequence[Row],
    settings: Settings,
    model: CostModel,
    machine: Mapping[str, Any],
) -> dict[str, Any]:
    """The ``--json`` document (schema ``accelnet.comm-bench/v1``, docs/comm-bench.md)."""
    calibration: Calibration | None = model.calibration
    return {
        "schema": SCHEMA,
        "fabric": plan.comm.fabric.name,
        "machine": dict(machine),
        "backend": plan.backend,
        "ranks": plan.ranks,
        "devices": list(plan.comm.ranks),
        "levels": list(plan.levels),
        "pinned": {b.device: list(b.cpus) for b in plan.bindings if b.cpus},
        "warmup": settings.warmup,
        "iters": settings.iters,
        "repeats": settings.repeats,
        "model": {
            "algorithm": prediction_algorithm(plan.backend),
            "launch_us": model.launch_us,
            "step_us": model.step_us,
            "efficiency": model.efficiency,
        },
        "calibration": calibration.to_json() if calibration is not None else None,
        "rows": [r.to_json() for r in rows],
        "summary": summarize(rows),
    }
