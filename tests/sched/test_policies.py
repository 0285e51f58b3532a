"""Round policies on contexts small enough to solve by hand, and their invariants on random
ones (hypothesis)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from accelnet.fabric import DomainLevel
from accelnet.sched import JobSpec, JobState, JobView, Placement, Scheduler, Snapshot
from accelnet.sched.jobinfo import JobInfo
from accelnet.sched.policies import POLICY_NAMES, QUEUE_POLICIES, ROUND_POLICIES, make_scheduler
from accelnet.sched.policies.hetero_fair import HeteroFair, equal_share
from accelnet.sched.policies.hetero_jct import HeteroJct
from accelnet.sched.policies.min_makespan import MinMakespan
from accelnet.sched.policies.ranked import Las, Sjf, Srtf
from accelnet.sched.rounds import Allocation, RoundContext, RoundPolicy, RoundScheduler, StopCost

from .conftest import hosts_fabric, round_context

Table = Mapping[str, Mapping[str, float]]  # job -> model -> steps/s on one device


def view(
    name: str,
    *,
    gang: int = 1,
    t: float = 0.0,
    steps: float | None = None,
    duration: float | None = None,
    done: float = 0.0,
    attained: tuple[tuple[str, float], ...] = (),
    running_on: str | None = None,
    started: float | None = None,
) -> JobView:
    workload: dict[str, Any] = {}
    if steps is not None:
        workload["total_steps"] = steps
    if duration is not None:
        workload["duration_s"] = duration
    spec = JobSpec.model_validate(
        {"name": name, "run": "x", "resources": {"accelerators": f"any:{gang}"},
         "workload": workload}
    )  # fmt: skip
    if running_on is None:
        return JobView(name, spec, JobState.ADMITTED, t, done=done, attained=attained)
    devices = tuple(f"{running_on}/gpu{i}" for i in range(gang))
    placement = Placement(devices, 1.0, running_on, DomainLevel.HOST)
    return JobView(name, spec, JobState.RUNNING, t, started_at=started, placement=placement,
                   done=done, attained=attained)  # fmt: skip


def context(
    jobs: list[JobView], table: Table, capacity: Mapping[str, int], now: float = 10.0
) -> RoundContext:
    """See :func:`round_context` (rates from ``table``)."""
    return round_context(jobs, table, capacity, now)


def speed(ctx: RoundContext, x: Allocation, job: str) -> float:
    return sum(ctx.tput[job][m] * share for m, share in x.get(job, {}).items())


ONE_EACH = {"X": 1, "Y": 1}


# ----- hetero-fair ------------------------------------------------------------------


def test_hetero_fair_gives_each_job_the_model_it_is_relatively_best_on() -> None:
    # a: 4 steps/s on X, 1 on Y; b: 1 on both. Equal shares (half of each model): a 2.5,
    # b 1. b can never exceed 1 (all its time at rate 1), so the best min level is 1, for
    # b with all of its time. Among those, the second stage maximises the total: b on Y
    # leaves X to a (a at 4/2.5 = 1.6); b on X would leave a only Y (0.4 < 1).
    table = {"a": {"X": 4.0, "Y": 1.0}, "b": {"X": 1.0, "Y": 1.0}}
    ctx = context([view("a"), view("b")], table, ONE_EACH)
    assert equal_share(ctx) == pytest.approx({"a": 2.5, "b": 1.0})
    x = HeteroFair().allocate(ctx)
    assert x.get("a", {}).get("X", 0.0) == pytest.approx(1.0, abs=1e-6)
    assert x.get("a", {}).get("Y", 0.0) == pytest.approx(0.0, abs=1e-6)
    assert x.get("b", {}).get("X", 0.0) == pytest.approx(0.0, abs=1e-6)
    assert x.get("b", {}).get("Y", 0.0) == pytest.approx(1.0, abs=1e-6)


def test_hetero_fair_splits_when_both_prefer_the_same_model() -> None:
    # a: 4 on X, 1 on Y (equal share 2.5); b: 2 on X, 1 on Y (equal share 1.5). With
    # a = (u on X, 1-u on Y) and b = (1-u on X, u on Y): a's level (1+3u)/2.5 and b's
    # (2-u)/1.5 meet at u = 1/2, level 1. Duals (0.4, 0, 1/7, 3/7) for (x_X, x_Y, p_a, p_b)
    # and weights (5/14, 9/14) bound the level by 1, so 1 is the optimum and u = 1/2 the
    # only allocation reaching it.
    table = {"a": {"X": 4.0, "Y": 1.0}, "b": {"X": 2.0, "Y": 1.0}}
    ctx = context([view("a"), view("b")], table, ONE_EACH)
    fair = equal_share(ctx)
    assert fair == pytest.approx({"a": 2.5, "b": 1.5})
    x = HeteroFair().allocate(ctx)
    level = min(speed(ctx, x, j) / fair[j] for j in ("a", "b"))
    # the second stage keeps the level to within 1e-6 (relative) of the first's optimum
    assert 1.0 - 2e-6 <= level <= 1.0 + 1e-9
    for j in ("a", "b"):
        for m in ("X", "Y"):
            assert x[j][m] == pytest.approx(0.5, abs=1e-5), (j, m)


def test_hetero_fair_identical_jobs_share_both_models_equally() -> None:
    # equal shares: (3 + 1) / 2 = 2 each; the total rate is at most 3 + 1 = 4, so the
    # level is at most 1 and reaching it needs both models and both jobs' time used fully
    # and both at 2 steps/s: 3u + (1-u) = 2 => u = 1/2 on each model
    table = {"a": {"X": 3.0, "Y": 1.0}, "b": {"X": 3.0, "Y": 1.0}}
    ctx = context([view("a"), view("b")], table, ONE_EACH)
    x = HeteroFair().allocate(ctx)
    for j in ("a", "b"):
        assert speed(ctx, x, j) == pytest.approx(2.0, abs=1e-5)
        for m in ("X", "Y"):
            assert x[j][m] == pytest.approx(0.5, abs=1e-5), (j, m)


# ----- min-makespan -----------------------------------------------------------------


def test_min_makespan_reaches_the_fluid_optimum() -> None:
    # a: 400 steps, 100 done (300 left), 4/s on X, 1/s on Y; b: 150 steps, 2/s on X, 1/s on Y.
    # a = (u on X, 1-u on Y), b = (1-u on X, u on Y): a runs at 1+3u, b at 2-u; both end
    # together when 300/(1+3u) = 150/(2-u) => u = 3/5: a at 2.8, b at 1.4, T = 750/7.
    # LP duals (weights 2/5, 3/5 on the jobs) prove no allocation does better.
    table = {"a": {"X": 4.0, "Y": 1.0}, "b": {"X": 2.0, "Y": 1.0}}
    ctx = context([view("a", steps=400, done=100), view("b", steps=150)], table, ONE_EACH)
    theta = MinMakespan().theta(ctx)
    assert theta is not None
    best = 750 / 7
    assert 1 / theta == pytest.approx(best, rel=1e-6)
    x = MinMakespan().allocate(ctx)
    for j, left in (("a", 300.0), ("b", 150.0)):
        assert speed(ctx, x, j) >= left / best * (1 - 2e-6), j
    assert x["a"]["X"] == pytest.approx(0.6, abs=1e-5)
    assert x["b"]["Y"] == pytest.approx(0.6, abs=1e-5)


def test_min_makespan_uses_the_work_left_not_the_total() -> None:
    # same rates, but a has done 250 of its 400 steps: 150 left each. With a = (u on X,
    # 1-u on Y), b = (1-u on X, u on Y): 150/(1+3u) = 150/(2-u) => u = 1/4, both at 1.75
    # steps/s, T = 600/7 (duals: weights 1/4, 3/4). Counting a's total would give 750/7.
    table = {"a": {"X": 4.0, "Y": 1.0}, "b": {"X": 2.0, "Y": 1.0}}
    ctx = context([view("a", steps=400, done=250), view("b", steps=150)], table, ONE_EACH)
    theta = MinMakespan().theta(ctx)
    assert theta is not None
    assert 1 / theta == pytest.approx(600 / 7, rel=1e-6)


# ----- hetero-jct -------------------------------------------------------------------


def test_hetero_jct_gives_the_fast_model_to_the_short_job() -> None:
    # both 4x faster on X; the completion-rate objective (rate / steps left) is
    # 4/100 + 1/10000 with the short job on X and 1/100 + 4/10000 the other way round
    table = {"long": {"X": 4.0, "Y": 1.0}, "short": {"X": 4.0, "Y": 1.0}}
    jobs = [view("long", steps=10000), view("short", steps=100, t=5.0)]
    ctx = context(jobs, table, ONE_EACH)
    x = HeteroJct().allocate(ctx)
    assert x["short"] == pytest.approx({"X": 1.0})
    assert x["long"] == pytest.approx({"Y": 1.0})
    # and the realisation offers X to the short job first...
    assert HeteroJct().order(ctx, x)[0] == ("short", "X")
    # ...unless the long job is the makespan's critical path and that is protected
    assert HeteroJct.tail().order(ctx, x)[:2] == [("long", "X"), ("short", "X")]


def test_hetero_jct_allocates_jobs_with_billions_of_steps_left() -> None:
    """Progress terms of a rate over billions of steps (1e-9) are under HiGHS's dual
    tolerance: unscaled, the LP saw every cost as zero and allocated nothing (in a
    simulation, two long jobs then swapped models at every round). a is 2x faster on Y, b
    1.1x: a takes Y and b X (1/3e9 * 2 + 1/1e9 against 1/3e9 + 1.1/1e9)."""
    table = {"a": {"X": 1.0, "Y": 2.0}, "b": {"X": 1.0, "Y": 1.1}}
    ctx = context([view("a", steps=3e9), view("b", steps=1e9)], table, ONE_EACH)
    x = HeteroJct().allocate(ctx)
    assert x["a"] == pytest.approx({"Y": 1.0}) and x["b"] == pytest.approx({"X": 1.0})


@pytest.mark.parametrize("left", [1.0, 1e-3, 1e-9])
def test_hetero_jct_allocates_long_jobs_beside_a_nearly_finished_one(left: float) -> None:
    """A job about to end has a huge progress term (a rate over what it has left): scaled
    so that term is 1, the long jobs' terms fell under HiGHS's tolerance and they got
    nothing although devices were free. Every job here gets a device."""
    table = {"z": {"X": 20.0, "Y": 20.0}, "a": {"X": 1.0, "Y": 2.0}, "b": {"X": 1.0, "Y": 1.1}}
    jobs = [view("z", steps=left), view("a", steps=3e6), view("b", steps=1e6)]
    x = HeteroJct().allocate(context(jobs, table, {"X": 2, "Y": 1}))
    assert x["a"] == pytest.approx({"Y": 1.0}) and x["b"] == pytest.approx({"X": 1.0})
    assert x["z"] == pytest.approx({"X": 1.0})


# ----- ranked policies --------------------------------------------------------------

RANKED_TABLE = {
    name: {"V100": 4.0, "P100": 2.0, "K80": 1.0} for name in ("a", "b", "c", "d", "e", "f")
}
RANKED_TABLE["c"] = {"V100": 1.0, "K80": 3.0}  # faster on K80; no P100
MODELS = {"V100": 1, "P100": 1, "K80": 1}


def models_of(order: list[tuple[str, str]]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for j, m in order:
        out.setdefault(j, []).append(m)
    return out


def jobs_of(order: list[tuple[str, str]]) -> list[str]:
    return list(dict.fromkeys(j for j, _ in order))


def test_las_orders_by_attained_service_queue_then_arrival() -> None:
    jobs = [
        view("a", t=0.0, attained=(("V100", 4000.0),)),  # queue 1 (1 to 10 GPU-hours)
        view("b", t=5.0),  # queue 0
        view("c", t=1.0, attained=(("V100", 3000.0), ("K80", 500.0))),  # 3500: queue 0
        view("d", t=-1.0, attained=(("P100", 40000.0),)),  # queue 2, oldest of all
        # the current attempt counts: 100 s done + 3500 s running (since 400, now 3900)
        view("e", t=0.5, attained=(("V100", 100.0),), running_on="V100", started=400.0),
        # service is device-seconds: 1850 s on a gang of 2 is 3700, queue 1
        view("f", t=9.0, gang=2, attained=(("V100", 3700.0),)),
    ]
    ctx = context(jobs, RANKED_TABLE, {"V100": 2, "P100": 2, "K80": 2}, now=3900.0)
    order = Las().order(ctx, Las().allocate(ctx))
    assert jobs_of(order) == ["c", "b", "a", "e", "f", "d"]
    assert models_of(order)["a"] == ["V100", "P100", "K80"]
    assert models_of(order)["c"] == ["K80", "V100"]


def test_srtf_orders_by_remaining_time_on_the_fastest_model() -> None:
    jobs = [
        view("a", t=0.0, steps=400),  # 100 s at 4/s
        view("b", t=1.0, steps=2000, done=1800),  # 200 left: 50 s
        view("c", t=2.0, steps=360),  # 120 s on K80 at 3/s (360 s on V100)
        view("d", t=3.0, duration=130),  # only a duration estimate: 130 s
        view("e", t=4.0),  # nothing known: last
        view("f", t=5.0, steps=400),  # ties a: arrival breaks it
    ]
    ctx = context(jobs, RANKED_TABLE, MODELS)
    order = Srtf().order(ctx, Srtf().allocate(ctx))
    assert jobs_of(order) == ["b", "a", "f", "c", "d", "e"]
    assert models_of(order)["c"] == ["K80", "V100"]
    assert models_of(order)["b"] == ["V100", "P100", "K80"]


def test_sjf_orders_by_estimated_total_time_not_what_is_left() -> None:
    jobs = [
        view("a", t=0.0, steps=400),  # 100 s
        view("b", t=1.0, steps=2000, done=1800),  # 500 s in all, though 50 s are left
        view("c", t=2.0, steps=360),  # 120 s on K80
        view("d", t=3.0, duration=130),
        view("e", t=4.0),
    ]
    ctx = context(jobs, RANKED_TABLE, MODELS)
    order = Sjf().order(ctx, Sjf().allocate(ctx))
    assert jobs_of(order) == ["a", "c", "d", "b", "e"]
    assert all(ms[0] == ("K80" if j == "c" else "V100") for j, ms in models_of(order).items())
    assert not Sjf().preemptive and Srtf().preemptive and Las().preemptive


def test_ranked_policies_offer_no_model_a_job_cannot_run_on() -> None:
    table = {"a": {"V100": 2.0, "P100": 0.0}, "b": {"K80": 1.0}}
    ctx = context([view("a", steps=10), view("b", steps=10)], table, MODELS)
    for policy in (Las(), Srtf(), Sjf()):
        assert policy.order(ctx, policy.allocate(ctx)) == [("a", "V100"), ("b", "K80")]


# ----- invariants on random contexts -------------------------------------------------

LP_POLICIES: list[RoundPolicy] = [HeteroFair(), MinMakespan(), HeteroJct(), HeteroJct(0.5)]


@st.composite
def contexts(draw: st.DrawFn, idle_jobs: bool = True) -> RoundContext:
    """2..8 jobs of gangs 1..3 on 1..3 models of 1..4 devices, some rates missing or zero,
    some work unknown; ``idle_jobs``: jobs that can run nowhere now may be among them."""
    models = ["M0", "M1", "M2"][: draw(st.integers(1, 3))]
    capacity = {m: draw(st.integers(1, 4)) for m in models}
    jobs, table = [], {}
    for i in range(draw(st.integers(2, 8))):
        name = f"j{i}"
        steps = draw(st.one_of(st.none(), st.floats(1.0, 1e5)))
        gang = draw(st.integers(1, 3))
        jobs.append(view(name, gang=gang, t=float(i), steps=steps))
        rates = st.one_of(st.floats(0.01, 100.0), st.just(0.0))
        table[name] = {m: draw(rates) for m in models if draw(st.integers(0, 3))}
        if not idle_jobs:  # at least one positive rate on a model with room for the gang
            fits = [m for m in models if capacity[m] >= gang]
            if not fits:
                capacity[models[0]] = gang
                fits = [models[0]]
            table[name][draw(st.sampled_from(fits))] = draw(st.floats(0.01, 100.0))
    ctx = context(jobs, table, capacity)
    if draw(st.booleans()):
        ctx.weights = {j.id: draw(st.floats(0.1, 10.0)) for j in jobs}
    return ctx


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), which=st.integers(0, len(LP_POLICIES) - 1))
def test_lp_allocations_are_feasible(data: st.DataObject, which: int) -> None:
    policy = LP_POLICIES[which]
    ctx = data.draw(contexts(), label="ctx")
    x = policy.allocate(ctx)
    used = dict.fromkeys(ctx.models, 0.0)
    for j, shares in x.items():
        assert j in ctx.gang
        assert sum(shares.values()) <= 1 + 1e-6, (j, shares)
        for m, share in shares.items():
            assert share >= 0
            assert ctx.tput[j].get(m, 0.0) > 0, (j, m, share)  # only where it runs
            used[m] += ctx.gang[j] * share
    for m, total in used.items():
        assert total <= ctx.capacity[m] + 1e-6, (m, total)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ctx=contexts(idle_jobs=False))
def test_hetero_fair_gives_every_job_at_least_its_equal_share_level(ctx: RoundContext) -> None:
    # the equal share is itself feasible, so the max-min level (throughput over the equal
    # share's, over the weight) is at least that of the equal share: 1 / weight or more
    x = HeteroFair().allocate(ctx)
    fair = equal_share(ctx)
    runnable = [j.id for j in ctx.jobs if fair[j.id] > 0]
    levels = [speed(ctx, x, j) / fair[j] / ctx.weights.get(j, 1.0) for j in runnable]
    floor = min(1.0 / ctx.weights.get(j, 1.0) for j in runnable)
    assert min(levels) >= floor * (1 - 1e-5), (x, fair)


def test_a_job_that_can_run_nowhere_does_not_void_fairness_for_the_others() -> None:
    # a: 1 step/s on X, b: 2; c can run nowhere now (say, its only model is drained).
    # Between a and b alone, max-min fairness splits X in half (levels 3x_a = 3x_b).
    table: dict[str, dict[str, float]] = {"a": {"X": 1.0}, "b": {"X": 2.0}, "c": {}}
    ctx = context([view("a"), view("b", t=1.0), view("c", t=2.0)], table, {"X": 1})
    x = HeteroFair().allocate(ctx)
    assert x.get("a", {}).get("X", 0.0) == pytest.approx(0.5, abs=1e-5)
    assert x.get("b", {}).get("X", 0.0) == pytest.approx(0.5, abs=1e-5)


@pytest.mark.parametrize("policy", [MinMakespan(), HeteroJct()], ids=lambda p: p.name)
def test_a_job_with_only_zero_rates_does_not_crash_the_policy(policy: RoundPolicy) -> None:
    # the simulator's rates are 0 for a job type its throughput model cannot rate: the
    # remaining-time estimate must not divide by that rate
    table = {"a": {"X": 0.0}, "b": {"X": 2.0}}
    ctx = context([view("a", steps=100), view("b", steps=100, t=1.0)], table, {"X": 1})
    x = policy.allocate(ctx)
    assert x.get("b", {}).get("X", 0.0) == pytest.approx(1.0, abs=1e-5)
    assert "a" not in x


# ----- make_scheduler ---------------------------------------------------------------


@pytest.mark.parametrize("name", POLICY_NAMES)
def test_every_policy_name_builds(name: str) -> None:
    sched = make_scheduler(name, round_s=60.0)
    assert isinstance(sched, Scheduler)
    if name in ROUND_POLICIES:
        assert isinstance(sched, RoundScheduler)
        assert sched.policy.name == name and sched.round_s == 60.0
    else:
        assert name in QUEUE_POLICIES and not isinstance(sched, RoundScheduler)


def test_make_scheduler_gives_fresh_objects() -> None:
    a, b = make_scheduler("las"), make_scheduler("las")
    assert a is not b
    assert isinstance(a, RoundScheduler) and isinstance(b, RoundScheduler)
    assert a.policy is not b.policy


def test_an_unknown_policy_name_lists_the_known_ones() -> None:
    with pytest.raises(ValueError, match="unknown policy 'gavel'") as err:
        make_scheduler("gavel")
    for name in POLICY_NAMES:
        assert name in str(err.value)


def test_round_s_must_be_positive() -> None:
    with pytest.raises(ValueError, match="round_s must be > 0"):
        make_scheduler("las", round_s=0.0)


def test_a_decisions_job_info_reads_each_jobs_progress_once() -> None:
    """A round reads a job's remaining work from several places (the policy's LP, its
    order, the stop checks); the progress behind it is read once per decision."""
    reads: list[str] = []

    def progress(job_id: str) -> float:
        reads.append(job_id)
        return 40.0

    job = view("a", steps=100.0, running_on="h")
    info = JobInfo(10.0, lambda spec, model, n: 2.0, progress)
    assert info.remaining(job) == 60.0
    assert info.remaining_s(job, "h") == 30.0  # 60 steps at 2 steps/s
    assert info.remaining(job) == 60.0
    assert reads == ["a"]
    later = JobInfo(20.0, lambda spec, model, n: 2.0, progress)  # the next decision
    assert later.remaining(job) == 60.0 and reads == ["a", "a"]


def test_hetero_jct_moves_a_running_job_only_where_the_gain_outlasts_a_stop() -> None:
    """a runs on X; b, queued, is 5 % faster on X than on Y. Free stops: the LP moves a to
    Y and gives X to b (2.05 against 2.0 in progress). A stop of 30 s in a 360 s round
    costs a 8 % of its round: a stays and b takes Y. (The jobs list Y before X: the
    context's models are in another order than their rates.)"""
    a = view("a", steps=1000.0, running_on="X", started=0.0)
    b = view("b", steps=1000.0)
    ctx = context([a, b], {"a": {"Y": 1.0, "X": 1.0}, "b": {"Y": 1.0, "X": 1.05}},
                  {"X": 1, "Y": 1})  # fmt: skip
    ctx.round_s = 360.0
    assert ctx.models == ["X", "Y"] and list(ctx.tput["a"]) == ["Y", "X"]
    free = HeteroJct().allocate(ctx)
    assert free["a"].get("Y", 0.0) > 0.99 and free["b"].get("X", 0.0) > 0.99
    paid = HeteroJct().allocate(replace(ctx, stop_s={"a": 30.0}))
    assert paid["a"].get("X", 0.0) > 0.99 and paid["b"].get("Y", 0.0) > 0.99


def test_a_long_stop_grace_does_not_pin_a_job_to_its_model() -> None:
    """The stop cost counts up to one round: a job whose stop would cost hours still moves
    where the gain is over twice its stay (b is 3x faster on X)."""
    a = view("a", steps=1000.0, running_on="X", started=0.0)
    b = view("b", steps=1000.0)
    ctx = context([a, b], {"a": {"X": 1.0, "Y": 1.0}, "b": {"X": 3.0, "Y": 1.0}},
                  {"X": 1, "Y": 1})  # fmt: skip
    ctx.round_s = 360.0
    x = HeteroJct().allocate(replace(ctx, stop_s={"a": 36_000.0}))
    assert x["a"].get("Y", 0.0) > 0.99 and x["b"].get("X", 0.0) > 0.99


def test_a_round_context_knows_what_a_stop_costs_each_running_job() -> None:
    """The contexts a round scheduler builds carry each running checkpointable job's stop
    cost (what its policies weigh a move against); a queued job, or one a round can never
    stop, has none."""
    fab = hosts_fabric("stop", ("h0", "2xV100"))
    spec = JobSpec.model_validate({"name": "r", "run": "x", "checkpointable": True,
                                   "resources": {"accelerators": "V100:1"}})  # fmt: skip
    stuck = spec.model_copy(update={"name": "s", "checkpointable": False})
    placed = Placement(("h0/gpu0",), 1.0, "V100", DomainLevel.HOST)
    jobs = (
        JobView("r", spec, JobState.RUNNING, 0.0, started_at=0.0, placement=placed),
        JobView("s", stuck, JobState.RUNNING, 0.0, started_at=0.0,
                placement=replace(placed, devices=("h0/gpu1",))),
        JobView("q", spec.model_copy(update={"name": "q"}), JobState.ADMITTED, 0.0),
    )  # fmt: skip
    seen: list[RoundContext] = []

    class Spy(RoundPolicy):
        def allocate(self, ctx: RoundContext) -> Allocation:
            seen.append(ctx)
            return {}

    sched = RoundScheduler(Spy(), stop_cost=StopCost(restart_s=40.0, checkpoint_s=5.0))
    sched.decide(Snapshot.all_ready(fab, jobs, 1.0, {}))
    assert seen and seen[-1].stop_s == {"r": 45.0}
