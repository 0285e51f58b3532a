"""The calibration fit recovers alpha and bandwidth from times the model itself produces
(pure: no processes), and refuses data no bandwidth fits."""

from __future__ import annotations

import math

import pytest

from accelnet.comm import Calibration, Communicator, CostModel, LevelFit
from accelnet.commbench import BenchError, BenchInputError, fit_ring_allreduce
from accelnet.commbench.calibrate import ring_allreduce_time
from accelnet.fabric import load_fabric

SIZES = [1 << k for k in range(10, 27, 2)]


def _model_times(
    comm: Communicator, level: str, alpha_us: float, bw: float
) -> tuple[CostModel, list[tuple[float, float]]]:
    model = CostModel(calibration=Calibration({level: LevelFit(alpha_us, bw)}))
    times = [(n, model.estimate(comm, "allreduce", n, "ring").time_s) for n in SIZES]
    return model, times


@pytest.mark.parametrize(
    ("preset", "ranks", "alpha_us", "bw"),
    [("pcie-4xL4", 2, 40.0, 1.5), ("dgx-h100", 4, 3.0, 20.0), ("dgx-h100", 8, 0.0, 300.0)],
)
def test_fit_recovers_the_models_own_figures(
    preset: str, ranks: int, alpha_us: float, bw: float
) -> None:
    fabric = load_fabric(preset)
    comm = Communicator(fabric, [f"gpu{i}" for i in range(ranks)])
    level = comm.route(0, 1).level.name
    assert all(comm.route(k, (k + 1) % ranks).level.name == level for k in range(ranks))
    model, times = _model_times(comm, level, alpha_us, bw)
    fit = fit_ring_allreduce(times, ranks, model.launch_us)
    assert fit.alpha_us == pytest.approx(alpha_us, rel=1e-9)
    assert fit.bandwidth_gbps == pytest.approx(bw, rel=1e-9)
    assert fit.worst_factor == pytest.approx(1.0, abs=1e-9)
    # and the model with the fitted calibration predicts the same times
    refit = CostModel(calibration=fit.calibration(level))
    for n, t in times:
        assert refit.estimate(comm, "allreduce", n, "ring").time_s == pytest.approx(t, rel=1e-9)
    assert Calibration.from_json(fit.calibration(level, "x").to_json()).levels[level] == (
        LevelFit(fit.alpha_us, fit.bandwidth_gbps)
    )


def test_formula_matches_the_model() -> None:
    comm = Communicator(load_fabric("pcie-4xL4"), ["gpu0", "gpu1", "gpu2"])
    level = comm.route(0, 1).level.name
    model, times = _model_times(comm, level, 7.0, 3.0)
    for n, t in times:
        assert ring_allreduce_time(n, 3, 7.0, 3.0, model.launch_us) == pytest.approx(t)


def test_noise_is_tolerated_and_alpha_stays_non_negative() -> None:
    # small messages a little faster than the launch overhead: alpha would go negative
    times = [(n, 4e-6 + n / 2e9) for n in SIZES]
    fit = fit_ring_allreduce(times, 2, launch_us=5.0)
    assert fit.alpha_us == 0.0
    assert fit.bandwidth_gbps == pytest.approx(2.0, rel=0.05)
    assert fit.worst_factor < 1.3
    exact = [(n, ring_allreduce_time(n, 2, 40.0, 1.5, 5.0)) for n in SIZES]
    noisy = [(n, t * (1.3 if i % 2 else 0.8)) for i, (n, t) in enumerate(exact)]
    fit = fit_ring_allreduce(noisy, 2, launch_us=5.0)
    assert fit.alpha_us >= 0 and math.isfinite(fit.bandwidth_gbps)
    assert 1.0 < fit.worst_factor < 2.0


def test_times_that_do_not_grow_have_no_bandwidth() -> None:
    flat = [(n, 1e-3 * (2 - i / 10)) for i, n in enumerate(SIZES)]  # shrinking with size
    with pytest.raises(BenchError, match="do not grow with the size"):
        fit_ring_allreduce(flat, 2, launch_us=5.0)


def test_needs_two_sizes_and_two_ranks() -> None:
    with pytest.raises(BenchInputError, match="--sizes: calibration needs at least 2"):
        fit_ring_allreduce([(1024, 1e-4), (1024, 2e-4)], 2, 5.0)
    with pytest.raises(BenchInputError, match="--devices"):
        fit_ring_allreduce([(1024, 1e-4), (2048, 2e-4)], 1, 5.0)
