"""The two things ``accelnet bench comm`` does: benchmark collectives beside the model's
predictions, and calibrate the model's level figures from a ring allreduce sweep. Both
block while the workers run (see :func:`accelnet.commbench.runner.run_bench`)."""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence

from accelnet.comm import CostModel
from accelnet.commbench.calibrate import RingFit, fit_ring_allreduce
from accelnet.commbench.errors import BenchInputError
from accelnet.commbench.plan import BenchPlan
from accelnet.commbench.results import Row, make_rows
from accelnet.commbench.runner import Settings, make_steps, run_bench
from accelnet.commbench.worker import Step


def benchmark(
    plan: BenchPlan,
    steps: Sequence[Step],
    settings: Settings,
    model: CostModel,
    on_step: Callable[[int], None] | None = None,
) -> list[Row]:
    """Run ``steps`` (:func:`make_steps`) and pair every measurement with ``model``'s
    prediction. Raises BenchError if the run fails."""
    return make_rows(plan, run_bench(plan, steps, settings, on_step), model)


def calibration_steps(plan: BenchPlan, sizes: Sequence[int]) -> tuple[Step, ...]:
    """The ring allreduce sweep a calibration measures. BenchInputError if the ring's hops
    are of more than one locality level (one fit cannot tell them apart) or there are
    fewer than 2 sizes."""
    if len(plan.levels) != 1:
        raise BenchInputError(
            "--devices: calibration fits one locality level, but the ring's hops are "
            f"{', '.join(plan.levels)}; choose devices whose neighbours share one level"
        )
    if len(set(sizes)) < 2:
        raise BenchInputError("--sizes: calibration needs at least 2 different sizes")
    return make_steps(["allreduce"], sizes, plan.ranks)


def calibrate(
    plan: BenchPlan,
    sizes: Sequence[int],
    settings: Settings,
    model: CostModel,
    on_step: Callable[[int], None] | None = None,
) -> RingFit:
    """Measure ring allreduce over ``sizes`` and fit alpha and bandwidth for the ring's
    level (:func:`fit_ring_allreduce`, with ``model.launch_us``). Raises BenchInputError
    (see :func:`calibration_steps`) before any process starts, BenchError if the run or
    the fit fails."""
    steps = calibration_steps(plan, sizes)
    found = run_bench(plan, steps, settings, on_step, ring_only=True)
    points = [(m.step.nbytes, statistics.median(m.times_s)) for m in found]
    return fit_ring_allreduce(points, plan.ranks, model.launch_us)
