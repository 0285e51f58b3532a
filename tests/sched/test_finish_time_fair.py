"""``finish-time-fair`` on contexts solved by hand, its invariants on random ones
(hypothesis), and through the simulator."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from accelnet.fabric import Fabric
from accelnet.fabric.build import build_fabric, parse_spec
from accelnet.sched import JobSpec, JobState, JobView
from accelnet.sched.policies.finish_time_fair import (
    FinishTimeFair,
    finish_time_ratios,
    ratios_of,
)
from accelnet.sched.policies.min_makespan import remaining_steps
from accelnet.sched.rounds import Allocation, RoundContext, RoundScheduler
from accelnet.sim.engine import Simulation
from accelnet.sim.policies import model_rates
from accelnet.sim.throughput import ThroughputModel
from accelnet.sim.workload import SimJob

from .conftest import round_context

Table = Mapping[str, Mapping[str, float]]  # job -> model -> steps/s on one device


def view(
    name: str, *, gang: int = 1, t: float = 0.0, steps: float | None = None, done: float = 0.0
) -> JobView:
    """A queued job submitted at ``t`` with ``done`` of its ``steps`` (None: unknown)."""
    workload: dict[str, Any] = {} if steps is None else {"total_steps": steps}
    spec = JobSpec.model_validate(
        {"name": name, "run": "x", "resources": {"accelerators": f"any:{gang}"},
         "workload": workload}
    )  # fmt: skip
    return JobView(name, spec, JobState.ADMITTED, t, done=done)


def context(
    jobs: list[JobView], table: Table, capacity: Mapping[str, int], now: float = 10.0
) -> RoundContext:
    """See :func:`round_context` (rates from ``table``)."""
    return round_context(jobs, table, capacity, now)


def even_split(ctx: RoundContext) -> Allocation:
    """Every model's devices split evenly among the jobs; a job's time fractions on the
    models it may use scaled down to sum to at most 1 (Themis's isolated share)."""
    n = len(ctx.jobs)
    out: dict[str, dict[str, float]] = {}
    for job in ctx.jobs:
        gang = ctx.gang[job.id]
        time = {m: ctx.capacity[m] / n / gang for m in ctx.tput[job.id]}
        total = sum(time.values())
        out[job.id] = {m: t / max(1.0, total) for m, t in time.items()}
    return out


def share(x: Allocation, job: str, model: str) -> float:
    return x.get(job, {}).get(model, 0.0)


# ----- hand-solved ------------------------------------------------------------------


def test_one_device_equalises_the_ratios_of_jobs_with_different_work() -> None:
    # one device at 1 step/s; a has 100 steps left, b 300; both waited e = 10 s, none done.
    # Equal share: half the device, 0.5 steps/s, so t_iso = 200 s (a) and 600 s (b).
    # With a on x and b on 1 - x: rho_a = (10 + 100/x)/200, rho_b = (10 + 300/(1-x))/600;
    # rho_a falls and rho_b rises with x, so the max is least where they meet:
    # 3(10 + 100/x) = 10 + 300/(1-x)  <=>  x^2 + 29x - 15 = 0  <=>  x = (sqrt(901) - 29)/2.
    ctx = context([view("a", steps=100), view("b", steps=300)],
                  {"a": {"X": 1.0}, "b": {"X": 1.0}}, {"X": 1})  # fmt: skip
    x = FinishTimeFair().allocate(ctx)
    best = (math.sqrt(901) - 29) / 2
    rho = (10 + 100 / best) / 200
    assert share(x, "a", "X") == pytest.approx(best, abs=1e-4)
    assert share(x, "b", "X") == pytest.approx(1 - best, abs=1e-4)
    got = finish_time_ratios(ctx, x)
    assert got["a"] == pytest.approx(rho, rel=1e-5)
    assert got["b"] == pytest.approx(rho, rel=1e-5)
    # the even split leaves a behind: (10 + 200)/200 = 1.05
    assert max(finish_time_ratios(ctx, even_split(ctx)).values()) == pytest.approx(1.05)


def test_the_job_that_waited_longer_gets_more_of_the_device() -> None:
    # the same work (100 steps at 1 step/s, t_iso = 200 s), a submitted at 0, b at now = 20:
    # (20 + 100/x)/200 = (100/(1-x))/200  <=>  x^2 + 9x - 5 = 0  <=>  x = (sqrt(101) - 9)/2
    ctx = context([view("a", steps=100), view("b", steps=100, t=20.0)],
                  {"a": {"X": 1.0}, "b": {"X": 1.0}}, {"X": 1}, now=20.0)  # fmt: skip
    x = FinishTimeFair().allocate(ctx)
    best = (math.sqrt(101) - 9) / 2
    assert share(x, "a", "X") == pytest.approx(best, abs=1e-4)
    assert share(x, "b", "X") == pytest.approx(1 - best, abs=1e-4)


def test_heterogeneity_aware_shares_beat_the_even_split() -> None:
    # a: 4 steps/s on X, 1 on Y, 100 of 200 steps done; b: 2 on X, 1 on Y, 100 steps, none
    # done; both submitted now (e = 0). Equal shares (half of each model): a 2.5, b 1.5, so
    # t_iso = 200/2.5 = 80 s (a) and 100/1.5 (b); rho_a = 1.25/T_a and rho_b = 1.5/T_b.
    # With a = (u on X, 1-u on Y), b = (1-u, u): 1.25/(1+3u) = 1.5/(2-u) at u = 4/23, rho =
    # 23/28. Dual weights 4/23 (a) and 12/23 (b), price 12/23 on X, 0 on Y, time prices
    # 4/23 and 12/23 bound 1/rho by 28/23, and every price but Y's is positive, so both
    # jobs' time and X are used fully: u = 4/23 is the only optimum. The even split
    # (u = 1/2) gives b 1.5 steps/s: rho_b = 1.
    table = {"a": {"X": 4.0, "Y": 1.0}, "b": {"X": 2.0, "Y": 1.0}}
    ctx = context([view("a", t=10.0, steps=200, done=100), view("b", t=10.0, steps=100)],
                  table, {"X": 1, "Y": 1})  # fmt: skip
    x = FinishTimeFair().allocate(ctx)
    u = 4 / 23
    for job, model, want in (("a", "X", u), ("a", "Y", 1 - u), ("b", "X", 1 - u),
                             ("b", "Y", u)):  # fmt: skip
        assert share(x, job, model) == pytest.approx(want, abs=1e-4), (job, model)
    assert max(finish_time_ratios(ctx, x).values()) == pytest.approx(23 / 28, rel=1e-5)
    even = finish_time_ratios(ctx, even_split(ctx))
    assert even == pytest.approx({"a": 0.5, "b": 1.0})


def test_the_isolated_time_counts_the_whole_gang() -> None:
    # two devices of X, three jobs: a is a gang of 2 (2 steps/s together), b and c one
    # device each (1 step/s). Equal share: 2/3 of a device each; a's gang can hold both
    # devices 1/3 of the time, so it runs at 2 * 1/3 steps/s, as fast as b and c on their
    # 2/3 (equal_share's 1/3 per device, times the gang). t_iso = (done + left) / (2/3);
    # c's unknown work is remaining_steps' estimate.
    jobs = [view("a", gang=2, steps=50, done=10), view("b", steps=30), view("c")]
    table = {"a": {"X": 1.0}, "b": {"X": 1.0}, "c": {"X": 1.0}}
    ctx = context(jobs, table, {"X": 2})
    terms = ratios_of(ctx)
    left = remaining_steps(ctx)
    assert terms.pairs.jobs == ["a", "b", "c"]
    assert terms.fair == pytest.approx([2 / 3, 2 / 3, 2 / 3])
    assert terms.left == pytest.approx([40, 30, left["c"]])
    assert terms.iso == pytest.approx(np.array([50, 30, left["c"]]) / (2 / 3))
    assert terms.elapsed == pytest.approx([10, 10, 10])


def test_a_job_that_can_run_nowhere_is_left_out() -> None:
    table: dict[str, dict[str, float]] = {"a": {"X": 1.0}, "b": {"X": 2.0}, "c": {"X": 0.0}}
    ctx = context([view("a", steps=10), view("b", steps=10), view("c", steps=10)], table,
                  {"X": 1})  # fmt: skip
    x = FinishTimeFair().allocate(ctx)
    assert "c" not in x and set(finish_time_ratios(ctx, x)) == {"a", "b"}
    assert sum(share(x, j, "X") for j in "ab") == pytest.approx(1.0, abs=1e-6)


def test_bad_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="rel_gap"):
        FinishTimeFair(rel_gap=0.0)
    with pytest.raises(ValueError, match="max_iter"):
        FinishTimeFair(max_iter=0)


# ----- invariants on random contexts -------------------------------------------------


@st.composite
def contexts(draw: st.DrawFn) -> RoundContext:
    """2..8 jobs of gangs 1..3 on 1..3 models of 1..4 devices, some rates missing or zero,
    some work unknown, submitted up to 100 s ago with some work done."""
    models = ["M0", "M1", "M2"][: draw(st.integers(1, 3))]
    capacity = {m: draw(st.integers(1, 4)) for m in models}
    jobs, table = [], {}
    for i in range(draw(st.integers(2, 8))):
        name = f"j{i}"
        steps = draw(st.one_of(st.none(), st.floats(1.0, 1e5)))
        done = draw(st.floats(0.0, 1.0)) * (steps if steps is not None else 100.0)
        jobs.append(view(name, gang=draw(st.integers(1, 3)), t=draw(st.floats(0.0, 100.0)),
                         steps=steps, done=done))  # fmt: skip
        rates = st.one_of(st.floats(0.01, 100.0), st.just(0.0))
        table[name] = {m: draw(rates) for m in models if draw(st.integers(0, 3))}
    return context(jobs, table, capacity, now=100.0)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ctx=contexts())
def test_allocations_are_feasible_and_no_less_fair_than_the_even_split(
    ctx: RoundContext,
) -> None:
    x = FinishTimeFair().allocate(ctx)
    used = dict.fromkeys(ctx.models, 0.0)
    for j, shares in x.items():
        assert sum(shares.values()) <= 1 + 1e-6, (j, shares)
        for m, value in shares.items():
            assert value >= 0
            assert ctx.tput[j].get(m, 0.0) > 0, (j, m, value)
            used[m] += ctx.gang[j] * value
    for m, total in used.items():
        assert total <= ctx.capacity[m] + 1e-6, (m, total)
    mine = finish_time_ratios(ctx, x)
    even = finish_time_ratios(ctx, even_split(ctx))
    assert set(mine) == set(even)
    if mine:
        assert max(mine.values()) <= max(even.values()) * (1 + 1e-5), (mine, even)


# ----- through the simulator ---------------------------------------------------------

# "toy" runs 2 steps/s on a V100 and 1 on a K80, linearly in the gang
TOY = ThroughputModel(
    {"v100": {"toy": {1: 2.0, 2: 4.0}}, "k80": {"toy": {1: 1.0, 2: 2.0}}}, reference="V100"
)


def fabric() -> Fabric:
    spec: dict[str, Any] = {
        "name": "ftf",
        "switches": [{"name": "leaf", "kind": "leaf"}],
        "hosts": [{"name": "v", "devices": "2xV100", "nics": "IB-EDR", "network": "leaf"},
                  {"name": "k", "devices": "2xK80", "nics": "IB-EDR", "network": "leaf"}],
    }  # fmt: skip
    return build_fabric(parse_spec(spec, "<ftf>"))


def test_every_job_finishes_in_the_simulator() -> None:
    sched = RoundScheduler(FinishTimeFair(), round_s=60.0, rates=model_rates(TOY))
    jobs = [
        SimJob("a", 0.0, "toy", 1, 600),
        SimJob("b", 0.0, "toy", 2, 900),
        SimJob("c", 30.0, "toy", 1, 200),
        SimJob("d", 45.0, "toy", 1, 400),
        SimJob("e", 100.0, "toy", 2, 300),
        SimJob("f", 200.0, "toy", 1, 100),
    ]
    result = Simulation(fabric(), jobs, sched, TOY).run()
    assert {o.id: o.state for o in result.jobs} == dict.fromkeys("abcdef", "succeeded")
    used = {m for o in result.jobs for m in o.device_s}
    assert used == {"V100", "K80"}
