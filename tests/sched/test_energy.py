"""The ``energy`` round policy: hand-solved contexts, random ones (hypothesis), and the
simulator end to end against ``hetero-fair``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from accelnet.fabric import DomainLevel, Fabric
from accelnet.fabric.build import build_fabric, parse_spec
from accelnet.sched import JobSpec, JobState, JobView, Placement
from accelnet.sched.policies.energy import Energy, PowerTable, allocation_power
from accelnet.sched.policies.hetero_fair import HeteroFair
from accelnet.sched.rounds import Allocation, RoundContext, RoundPolicy, RoundScheduler
from accelnet.sim.engine import Simulation
from accelnet.sim.metrics import compute
from accelnet.sim.policies import model_rates
from accelnet.sim.records import SimResult
from accelnet.sim.throughput import ThroughputModel
from accelnet.sim.workload import SimJob

from .conftest import round_context

Table = Mapping[str, Mapping[str, float]]  # job -> model -> steps/s on one device
# catalog draws (idle, busy): V100 40/300 W, P100 30/250 W, T4 10/70 W, K80 25/150 W


def view(
    name: str,
    *,
    gang: int = 1,
    steps: float | None = None,
    deadline: float | None = None,
    running_on: str | None = None,
) -> JobView:
    workload: dict[str, Any] = {} if steps is None else {"total_steps": steps}
    spec = JobSpec.model_validate(
        {"name": name, "run": "x", "resources": {"accelerators": f"any:{gang}"},
         "workload": workload, "deadline": deadline}
    )  # fmt: skip
    if running_on is None:
        return JobView(name, spec, JobState.ADMITTED, 0.0)
    devices = tuple(f"{running_on}/gpu{i}" for i in range(gang))
    placement = Placement(devices, 1.0, running_on, DomainLevel.HOST)
    return JobView(name, spec, JobState.RUNNING, 0.0, started_at=0.0, placement=placement)


def context(
    jobs: list[JobView], table: Table, capacity: Mapping[str, int], now: float = 0.0
) -> RoundContext:
    """See :func:`round_context` (rates from ``table``)."""
    return round_context(jobs, table, capacity, now)


def share(x: Allocation, job: str, model: str) -> float:
    return x.get(job, {}).get(model, 0.0)


def speed(ctx: RoundContext, x: Allocation, job: str) -> float:
    return sum(ctx.tput[job][m] * s for m, s in x.get(job, {}).items())


def planned(ctx: RoundContext, policy: RoundPolicy, x: Allocation) -> dict[str, str]:
    """The round scheduler's plan from scratch: each job takes its first pair with room."""
    room, plan = dict(ctx.capacity), {}
    for jid, model in policy.order(ctx, x):
        if jid not in plan and room[model] >= ctx.gang[jid]:
            plan[jid] = model
            room[model] -= ctx.gang[jid]
    return plan


# ----- choice of model --------------------------------------------------------------


@pytest.mark.parametrize("p100_rate", [1.0, 0.95])
def test_a_job_goes_to_the_frugal_model_when_it_is_as_fast_or_nearly(p100_rate: float) -> None:
    # V100: 40 W idle + 260 W busy; P100: 30 + 220. Floor 70 W. Per unit of work:
    # V100 (70 + 260) / 1 = 330 J; P100 (70 + 220) / 0.95 = 305 J (290 J at 1.0).
    # At 0.95 a policy that maximises progress would take the V100.
    ctx = context([view("a")], {"a": {"V100": 1.0, "P100": p100_rate}}, {"V100": 1, "P100": 1})
    x = Energy().allocate(ctx)
    assert share(x, "a", "P100") == pytest.approx(1.0, abs=1e-6)
    assert share(x, "a", "V100") == pytest.approx(0.0, abs=1e-6)


def test_without_slack_progress_comes_first() -> None:
    ctx = context([view("a")], {"a": {"V100": 1.0, "P100": 0.95}}, {"V100": 1, "P100": 1})
    x = Energy(slack=0.0).allocate(ctx)
    assert share(x, "a", "V100") == pytest.approx(1.0, abs=1e-4)


def test_a_frugal_model_does_not_leave_a_useful_device_idle() -> None:
    # two jobs, one device of each model: running both costs (70 + 260 + 220) / 1.95 =
    # 282 J per unit, less than the P100 alone (305): the floor is spread over more work
    table = {"a": {"V100": 1.0, "P100": 0.95}, "b": {"V100": 1.0, "P100": 0.95}}
    ctx = context([view("a"), view("b")], table, {"V100": 1, "P100": 1})
    x = Energy().allocate(ctx)
    assert sum(share(x, j, "V100") for j in "ab") == pytest.approx(1.0, abs=1e-6)
    assert sum(share(x, j, "P100") for j in "ab") == pytest.approx(1.0, abs=1e-6)


def test_pairs_the_allocation_leaves_out_are_not_filled() -> None:
    ctx = context([view("a"), view("b")], {"a": {"V100": 1.0, "P100": 1.0},
                                           "b": {"V100": 1.0, "P100": 1.0}},
                  {"V100": 1, "P100": 1})  # fmt: skip
    x = {"a": {"P100": 1.0}}
    assert Energy().order(ctx, x) == [("a", "P100")]


# ----- power budget -----------------------------------------------------------------


def test_a_budget_for_one_job_at_a_time_is_kept_and_used() -> None:
    # two V100s: floor 80 W, each busy one +260 W; 340 W lets one of them be busy
    table = {"a": {"V100": 1.0}, "b": {"V100": 1.0}}
    ctx = context([view("a"), view("b")], table, {"V100": 2})
    policy = Energy(power_budget_w=340.0)
    x = policy.allocate(ctx)
    assert allocation_power(ctx, x) <= 340.0 + 1e-6
    assert speed(ctx, x, "a") + speed(ctx, x, "b") == pytest.approx(1.0, abs=1e-6)
    plan = planned(ctx, policy, x)  # the realised round: one job, not both
    assert len(plan) == 1
    assert allocation_power(ctx, {j: {m: 1.0} for j, m in plan.items()}) <= 340.0 + 1e-9
    assert len(planned(ctx, Energy(), Energy().allocate(ctx))) == 2  # without a budget


def test_the_plan_counts_what_is_running_against_the_budget() -> None:
    table = {"a": {"V100": 1.0}, "b": {"V100": 1.0}}
    ctx = context([view("a", running_on="V100"), view("b")], table, {"V100": 2})
    assert Energy(power_budget_w=340.0).order(ctx, {"b": {"V100": 1.0}}) == []


def test_a_budget_below_the_idle_floor_allocates_nothing() -> None:
    ctx = context([view("a")], {"a": {"V100": 1.0}}, {"V100": 2})
    assert PowerTable.of(ctx).floor(ctx) == 80.0
    assert Energy(power_budget_w=79.0).allocate(ctx) == {}


# ----- deadlines --------------------------------------------------------------------


def test_a_tight_deadline_gets_its_rate() -> None:
    # a runs on the V100 only; b on a T4 (10 W idle, +60 W busy) as fast as on the V100.
    # Floor 50 W. b alone on the T4 costs (50 + 60) / 1 = 110 J per unit of work, both
    # (50 + 260 + 60) / 2 = 185 J: allowed to halve progress, the policy parks a. With
    # 100 steps left and 125 s to its deadline, a needs 0.8 steps/s, and gets them.
    table = {"a": {"V100": 1.0}, "b": {"V100": 1.0, "T4": 1.0}}
    jobs = [view("a", steps=100, deadline=125.0), view("b", steps=1000)]
    ctx = context(jobs, table, {"V100": 1, "T4": 1})
    policy = Energy(deadline_weight=1.0, slack=0.6)
    assert policy.required_rates(ctx) == pytest.approx({"a": 0.8})
    assert speed(ctx, policy.allocate(ctx), "a") >= 0.8 * (1 - 1e-5)
    free = context([view("a", steps=100), jobs[1]], table, {"V100": 1, "T4": 1})
    assert speed(free, Energy(slack=0.6).allocate(free), "a") < 1e-6  # without the deadline


def test_deadlines_that_cannot_all_be_met_get_the_same_share_of_their_need() -> None:
    # one V100, both need 1 step/s (and a missed deadline asks for the best rate)
    table = {"a": {"V100": 1.0}, "b": {"V100": 1.0}, "c": {"V100": 1.0}}
    jobs = [view("a", steps=100, deadline=100.0), view("b", steps=10, deadline=0.0), view("c")]
    ctx = context(jobs, table, {"V100": 1}, now=10.0)
    policy = Energy(deadline_weight=1.0)
    assert policy.required_rates(ctx) == pytest.approx({"a": 1.0, "b": 1.0})
    x = policy.allocate(ctx)
    assert speed(ctx, x, "a") >= 0.5 * (1 - 1e-5)
    assert speed(ctx, x, "b") >= 0.5 * (1 - 1e-5)


def test_constructor_checks_its_arguments() -> None:
    for bad in ({"power_budget_w": 0.0}, {"deadline_weight": -1.0}, {"slack": 1.0}):
        with pytest.raises(ValueError):
            Energy(**bad)


# ----- invariants on random contexts ------------------------------------------------

MODELS = ("V100", "P100", "T4", "K80")


@st.composite
def contexts(draw: st.DrawFn) -> tuple[RoundContext, float | None]:
    models = draw(st.lists(st.sampled_from(MODELS), min_size=1, max_size=4, unique=True))
    capacity = {m: draw(st.integers(1, 4)) for m in models}
    jobs: list[JobView] = []
    table: dict[str, dict[str, float]] = {}
    for i in range(draw(st.integers(1, 6))):
        name = f"j{i}"
        deadline = draw(st.none() | st.floats(0.0, 2000.0))
        jobs.append(view(name, gang=draw(st.integers(1, 2)), steps=draw(st.floats(1.0, 1e4)),
                         deadline=deadline))  # fmt: skip
        table[name] = {m: draw(st.floats(0.1, 10.0)) for m in models if draw(st.booleans())}
    ctx = context(jobs, table, capacity, now=100.0)
    floor = PowerTable.of(ctx).floor(ctx)
    budget = draw(st.none() | st.floats(floor * 0.9, floor + 2000.0))
    return ctx, budget


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(contexts(), st.floats(0.0, 0.5))
def test_allocations_are_feasible(case: tuple[RoundContext, float | None], slack: float) -> None:
    ctx, budget = case
    policy = Energy(power_budget_w=budget, slack=slack)
    x = policy.allocate(ctx)
    used = dict.fromkeys(ctx.models, 0.0)
    for jid, row in x.items():
        assert sum(row.values()) <= 1 + 1e-6
        for model, s in row.items():
            assert s >= 0 and ctx.tput[jid].get(model, 0.0) > 0
            used[model] += s * ctx.gang[jid]
    for model, total in used.items():
        assert total <= ctx.capacity[model] * (1 + 1e-6) + 1e-9
    if budget is not None:
        floor = PowerTable.of(ctx).floor(ctx)
        if budget < floor:
            assert x == {}
        else:
            assert allocation_power(ctx, x) <= budget * (1 + 1e-6)
            plan = planned(ctx, policy, x)
            assert allocation_power(ctx, {j: {m: 1.0} for j, m in plan.items()}) <= budget * (
                1 + 1e-6
            )


# ----- end to end -------------------------------------------------------------------

# "toy" runs 1 step/s on a V100 and 0.95 on a P100, which draws 50 W less when busy
TOYS = ThroughputModel({"v100": {"toy": {1: 1.0}}, "p100": {"toy": {1: 0.95}}}, reference="V100")


def mixed() -> Fabric:
    spec: dict[str, Any] = {
        "name": "mixed",
        "switches": [{"name": "leaf", "kind": "leaf"}],
        "hosts": [
            {"name": "v", "devices": "1xV100", "nics": "IB-EDR", "network": "leaf"},
            {"name": "p", "devices": "1xP100", "nics": "IB-EDR", "network": "leaf"},
        ],
    }
    return build_fabric(parse_spec(spec, "<test>"))


TRACE = [
    SimJob("a", 0, "toy", 1, 500),
    SimJob("b", 800, "toy", 1, 400),
    SimJob("c", 1500, "toy", 1, 700),
    SimJob("d", 1600, "toy", 1, 300),
    SimJob("e", 3000, "toy", 1, 600),
]


def simulate(policy: RoundPolicy) -> SimResult:
    sched = RoundScheduler(policy, rates=model_rates(TOYS))
    return Simulation(mixed(), TRACE, sched, TOYS, restart_s=0).run()


def test_end_to_end_energy_beats_hetero_fair_when_a_frugal_model_is_nearly_as_fast() -> None:
    energy, fair = simulate(Energy()), simulate(HeteroFair())
    assert all(o.state == "succeeded" for o in energy.jobs)
    assert all(o.state == "succeeded" for o in fair.jobs)
    assert compute(energy).energy_j < compute(fair).energy_j


def test_end_to_end_the_draw_stays_within_the_budget() -> None:
    # floor 70 W; 330 W lets one device be busy (either), never both
    result = simulate(Energy(power_budget_w=330.0))
    assert all(o.state == "succeeded" for o in result.jobs)
    assert max(s.power_w for s in result.samples) <= 330.0 + 1e-6
    assert max(s.busy for s in result.samples) == 1
