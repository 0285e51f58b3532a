"""LP policies on long queues solve over classes of jobs alike (accelnet.sched.policies.lp
.group): the same optimum as one column per job, a valid allocation for every member, and
for hetero-jct a class's time handed to its members one after the other."""

from __future__ import annotations

import random

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from accelnet.sched.policies import hetero_jct, lp, min_makespan
from accelnet.sched.policies.hetero_jct import HeteroJct
from accelnet.sched.policies.min_makespan import MinMakespan, remaining_steps
from accelnet.sched.rounds import Allocation, RoundContext
from tests.sched.test_policies import context, speed, view

MODELS = ("X", "Y", "Z")


def queue(seed: int, jobs: int, kinds: int) -> RoundContext:
    """``jobs`` queued jobs of ``kinds`` kinds (rates, gang, work), on three models."""
    rng = random.Random(seed)
    shapes = []
    for _ in range(kinds):
        rates = {m: round(rng.uniform(0.5, 8.0), 2) for m in MODELS if rng.random() < 0.8}
        shapes.append((rates or {"X": 1.0}, rng.choice((1, 1, 2, 4)), rng.choice((500, 4000))))
    views, table = [], {}
    for i in range(jobs):
        rates, gang, steps = shapes[rng.randrange(kinds)]
        views.append(view(f"j{i}", gang=gang, t=float(i), steps=float(steps)))
        table[f"j{i}"] = rates
    return context(views, table, {"X": 24, "Y": 16, "Z": 8})


def valid(ctx: RoundContext, x: Allocation) -> None:
    for jid, share in x.items():
        assert sum(share.values()) <= 1 + 1e-6, jid
    for m in MODELS:
        used = sum(ctx.gang[j] * s.get(m, 0.0) for j, s in x.items())
        assert used <= ctx.capacity[m] + 1e-6, m


def progress(ctx: RoundContext, x: Allocation, gang_weight: float = 1.0) -> float:
    left = remaining_steps(ctx)
    return sum(speed(ctx, x, j) / left[j] / ctx.gang[j] ** gang_weight for j in x)


def per_job(monkeypatch: pytest.MonkeyPatch) -> None:
    for mod in (lp, min_makespan, hetero_jct):
        monkeypatch.setattr(mod, "CLASSES_ABOVE", 10**9, raising=False)


@settings(max_examples=8, deadline=None, suppress_health_check=list(HealthCheck))
@given(seed=st.integers(0, 10**6), kinds=st.integers(1, 6))
def test_classes_reach_the_per_job_optimum(seed: int, kinds: int) -> None:
    ctx = queue(seed, lp.CLASSES_ABOVE + 40, kinds)
    grouped = lp.group(ctx, remaining_steps(ctx))
    assert len(grouped.ctx.jobs) <= kinds  # the LP is over classes
    theta = MinMakespan().theta(ctx)
    x_mm = MinMakespan().allocate(ctx)
    x_jct = HeteroJct().allocate(ctx)
    with pytest.MonkeyPatch.context() as mp:
        per_job(mp)
        theta_1 = MinMakespan().theta(ctx)
        x_jct_1 = HeteroJct().allocate(ctx)
    assert theta is not None and theta_1 is not None
    assert theta == pytest.approx(theta_1, rel=1e-5)
    valid(ctx, x_mm)
    valid(ctx, x_jct)
    left = remaining_steps(ctx)
    for job in ctx.jobs:  # every member of every class keeps the makespan's rate
        assert speed(ctx, x_mm, job.id) >= left[job.id] * theta * (1 - 1e-4), job.id
    assert progress(ctx, x_jct) == pytest.approx(progress(ctx, x_jct_1), rel=1e-5)


def test_hetero_jct_runs_jobs_alike_one_after_the_other() -> None:
    ctx = queue(7, lp.CLASSES_ABOVE + 100, 3)
    x = HeteroJct().allocate(ctx)
    grouped = lp.group(ctx, remaining_steps(ctx))
    for ids in grouped.members.values():
        totals = [sum(x.get(j, {}).values()) for j in ids]
        assert totals == sorted(totals, reverse=True)  # earlier members first
        assert sum(1 for t in totals if 1e-6 < t < 1 - 1e-6) <= len(MODELS)  # few partial
    # and the realisation has them to offer: the LP's total progress is kept
    assert progress(ctx, x) > 0


def test_a_short_queue_is_solved_job_by_job() -> None:
    ctx = queue(3, 50, 2)
    x = HeteroJct().allocate(ctx)
    with pytest.MonkeyPatch.context() as mp:
        per_job(mp)
        assert HeteroJct().allocate(ctx) == x


def test_group_splits_classes_by_work_left() -> None:
    ctx = queue(5, 30, 1)
    left = {j.id: float(i % 2) for i, j in enumerate(ctx.jobs)}
    grouped = lp.group(ctx, left)
    assert len(grouped.members) == 2
    assert np.array_equal(sorted(len(m) for m in grouped.members.values()), [15, 15])
