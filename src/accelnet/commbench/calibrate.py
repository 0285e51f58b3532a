"""Fit the cost model's per-level latency and bandwidth to measured ring allreduce times.

The model prices a ring allreduce of ``n`` bytes on ``p`` ranks whose hops share one
calibrated level as ``T = launch + 2(p-1) * alpha + 2(p-1)/p * n / B``
(:mod:`accelnet.comm.cost`). Given measured ``(n, T)`` points, :func:`fit_ring_allreduce`
solves for ``alpha >= 0`` and ``B > 0`` by least squares on that same formula, with each
point weighted by ``1 / T`` (relative errors), so that a 1K message and a 64M one count
alike; the model's ``launch`` stays as it is. Pure.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from accelnet.comm import Calibration, LevelFit
from accelnet.commbench.errors import BenchError, BenchInputError

GB = 1e9


def ring_allreduce_time(
    nbytes: float, ranks: int, alpha_us: float, bandwidth_gbps: float, launch_us: float
) -> float:
    """Seconds the model gives a ring allreduce on one calibrated level."""
    p = ranks
    return (launch_us + 2 * (p - 1) * alpha_us) * 1e-6 + 2 * (p - 1) / p * nbytes / (
        bandwidth_gbps * GB
    )


@dataclass(frozen=True, slots=True)
class FitPoint:
    """A measured point and the fitted formula's time for it."""

    nbytes: float
    time_s: float
    fitted_s: float

    @property
    def ratio(self) -> float:
        """Fitted over measured time (= measured over fitted bandwidth)."""
        return self.fitted_s / self.time_s


@dataclass(frozen=True)
class RingFit:
    """Fitted ``alpha`` (us per step) and ``B`` (GB/s per rank each way) with the points."""

    alpha_us: float
    bandwidth_gbps: float
    ranks: int
    launch_us: float
    points: tuple[FitPoint, ...]

    @property
    def worst_factor(self) -> float:
        """The largest ``max(r, 1/r)`` of the points' ratios: how far the fit strays."""
        return max(max(p.ratio, 1 / p.ratio) for p in self.points)

    def calibration(self, level: str, source: str = "") -> Calibration:
        """A :class:`Calibration` with this fit for locality level ``level``."""
        return Calibration({level: LevelFit(self.alpha_us, self.bandwidth_gbps)}, source)

    def to_json(self) -> dict[str, Any]:
        """JSON form (part of the ``--calibrate --json`` document)."""
        return {
            "alpha_us": self.alpha_us,
            "bandwidth_gbps": self.bandwidth_gbps,
            "ranks": self.ranks,
            "launch_us": self.launch_us,
            "worst_factor": self.worst_factor,
            "points": [
                {"bytes": p.nbytes, "time_us": p.time_s * 1e6, "fitted_us": p.fitted_s * 1e6}
                for p in self.points
            ],
        }


def fit_ring_allreduce(
    points: Sequence[tuple[float, float]], ranks: int, launch_us: float
) -> RingFit:
    """Fit ``alpha`` and ``B`` to ``(bytes, seconds)`` points (see the module docstring).

    Raises BenchInputError with fewer than 2 distinct sizes or fewer than 2 ranks, and
    BenchError when the times do not grow with the size (no positive bandwidth fits).
    """
    if ranks < 2:
        raise BenchInputError(f"--devices: calibration needs at least 2 ranks, got {ranks}")
    if len({n for n, _ in points}) < 2:
        raise BenchInputError("--sizes: calibration needs at least 2 different sizes")
    if any(t <= 0 or n <= 0 for n, t in points):
        raise BenchError("calibration: every point needs a positive size and time")
    p = ranks
    x1 = 2.0 * (p - 1)  # multiplies alpha (seconds)
    suu = suv = svv = suw = svw = 0.0
    for n, t in points:
        u, v = x1 / t, 2.0 * (p - 1) / p * (n / GB) / t  # v multiplies 1/B (s per GB)
        w = (t - launch_us * 1e-6) / t
        suu, suv, svv = suu + u * u, suv + u * v, svv + v * v
        suw, svw = suw + u * w, svw + v * w
    det = suu * svv - suv * suv  # > 0: two distinct sizes make u and v independent
    alpha = (suw * svv - svw * suv) / det
    inv_bw = (suu * svw - suv * suw) / det
    if inv_bw > 0 and alpha < 0:  # the constrained optimum lies on alpha = 0
        alpha, inv_bw = 0.0, svw / svv
    if inv_bw <= 0:
        raise BenchError(
            "calibration: the measured times do not grow with the size, so no bandwidth "
            "fits; measure larger sizes (--sizes 1K..64M)"
        )
    alpha_us, bw = alpha * 1e6, 1.0 / inv_bw
    fitted = tuple(
        FitPoint(n, t, ring_allreduce_time(n, p, alpha_us, bw, launch_us)) for n, t in points
    )
    return RingFit(alpha_us, bw, p, launch_us, fitted)
