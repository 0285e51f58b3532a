"""A round's plan when every job runs (``accelnet.sched.roundplan.standing_plan``): the plan
:func:`make_plan` makes, found without making it, or None."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from accelnet.sched.policies import ROUND_POLICIES
from accelnet.sched.policies.ranked import Las, Sjf, Srtf
from accelnet.sched.roundplan import leads_home, make_plan, running_plan, standing_plan
from accelnet.sched.rounds import Allocation, RoundContext, RoundPolicy, Window
from accelnet.sched.shortcuts import Walk
from accelnet.sched.snapshot import Decision, Tenant
from tests.sched.conftest import round_context
from tests.sched.test_policies import view

Unit = tuple[tuple[str, ...], str]


@st.composite
def running(draw: st.DrawFn) -> tuple[RoundContext, list[Unit]]:
    """2..8 running jobs of gangs 1..3 on 1..3 models (sometimes more than a model holds),
    each with rates on some other models, and an order of their (job, model) units that
    often puts each job's own model first."""
    models = ["M0", "M1", "M2"][: draw(st.integers(1, 3))]
    jobs, table = [], {}
    load = dict.fromkeys(models, 0)
    for i in range(draw(st.integers(2, 8))):
        name, gang, on = f"j{i}", draw(st.integers(1, 3)), draw(st.sampled_from(models))
        jobs.append(view(name, gang=gang, t=float(i), steps=1e4, running_on=on, started=0.0))
        table[name] = {m: draw(st.floats(0.01, 10.0)) for m in models if draw(st.booleans())}
        table[name][on] = 0.0 if draw(st.integers(0, 9)) == 0 else draw(st.floats(0.01, 10.0))
        load[on] += gang
    capacity = {m: max(1, load[m] + draw(st.integers(-1, 3))) for m in models}
    ctx = round_context(jobs, table, capacity)
    units: list[Unit] = [((j.id,), m) for j in jobs for m, r in ctx.tput[j.id].items() if r > 0]
    rng = random.Random(draw(st.integers(0, 10**6)))
    rng.shuffle(units)
    if draw(st.booleans()):  # each job's own model before its others (as most rounds)
        own = {j.id: j.placement.model for j in jobs if j.placement is not None}
        units.sort(key=lambda u: u[1] != own[u[0][0]])
        rng.shuffle(units)
        first: dict[str, int] = {}
        for k, (unit, model) in enumerate(units):
            if model == own[unit[0]]:
                first.setdefault(unit[0], k)
        units.sort(key=lambda u: (u[1] != own[u[0][0]], first.get(u[0][0], 0)))
    return ctx, units


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(case=running(), data=st.data())
def test_a_standing_plan_is_the_plan_whichever_jobs_are_kept(
    case: tuple[RoundContext, list[Unit]], data: st.DataObject
) -> None:
    ctx, units = case
    standing = standing_plan(ctx, units)
    if standing is None:
        return
    assert standing == {j.id: j.placement.model for j in ctx.jobs if j.placement}
    for _ in range(3):  # a round keeps some jobs (not checkpointable, near their end)
        kept = data.draw(st.lists(st.sampled_from([j.id for j in ctx.jobs]), unique=True))
        keep = {jid: standing[jid] for jid in kept}
        plan, mates = make_plan(ctx, units, keep, {})
        assert plan == standing and mates == {}


@settings(max_examples=100, deadline=None, suppress_health_check=list(HealthCheck))
@given(case=running())
def test_between_rounds_every_running_job_keeps_its_model(
    case: tuple[RoundContext, list[Unit]],
) -> None:
    ctx, units = case
    standing = standing_plan(ctx, None)
    if standing is None:
        return
    keep = {j.id: j.placement.model for j in ctx.jobs if j.placement}
    assert make_plan(ctx, units, keep, {}) == (standing, {})


class _Gavel(RoundPolicy):
    """Gavel's order, as the policies that do not change it (hetero-fair, ...) use it."""

    def allocate(self, ctx: RoundContext) -> Allocation:
        raise AssertionError("not asked")


class _Reordered(_Gavel):
    def order(self, ctx: RoundContext, x: Allocation) -> list[tuple[str, str]]:
        return list(reversed(super().order(ctx, x)))


@st.composite
def shares(draw: st.DrawFn) -> tuple[RoundContext, Allocation]:
    """Running jobs with time received on their models in an accounting window (none,
    some, equal) and an allocation with zeros, ties and models never received."""
    ctx, _ = draw(running())
    window = Window(1920.0)
    window.opened = window.last = 0.0
    for job in ctx.jobs:
        for model in ctx.tput[job.id]:
            if draw(st.booleans()):
                window.time[(job.id, model)] = draw(st.sampled_from([0.0, 1.0, 2.5, 5.0]))
    ctx.window = window
    ctx.info.now = 10.0
    x = {j.id: {m: draw(st.sampled_from([0.0, 1e-12, 0.25, 0.5, 1.0])) for m in ctx.tput[j.id]}
         for j in ctx.jobs if draw(st.integers(0, 4))}  # fmt: skip
    return ctx, x


@settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck))
@given(case=shares())
def test_each_jobs_first_unit_found_without_the_sort_is_its_first_in_gavels_order(
    case: tuple[RoundContext, Allocation],
) -> None:
    """``first_units`` (what a round whose plan may stand reads) gives each job the unit
    it has first in the full order, ties included; and a plan leads home by either."""
    ctx, x = case
    for policy in (_Gavel(), _Reordered(), Las(), Srtf(), Sjf()):
        order = policy.order_units(ctx, x)
        firsts = policy.first_units(ctx, x)
        want: dict[tuple[str, ...], str] = {}
        for unit, model in order:
            want.setdefault(unit, model)
        got: dict[tuple[str, ...], str] = {}
        for unit, model in firsts:
            got.setdefault(unit, model)
        assert got == want
        plan = running_plan(ctx)
        if plan is not None:
            assert leads_home(plan, firsts) == leads_home(plan, order)


TIMELESS = sorted(name for name, make in ROUND_POLICIES.items() if make().timeless)


def test_the_policies_that_keep_their_allocation_through_rounds() -> None:
    assert TIMELESS == ["drf", "hetero-fair", "hetero-fair-packed", "las", "sjf", "srtf"]


def _now_and_later() -> tuple[RoundContext, RoundContext]:
    """The same jobs and devices early, and much later: other work done (some jobs nearly
    done), other service, other times received in the window."""
    jobs = [view(f"j{i}", gang=1 + i % 2, t=float(i), steps=1e5, done=100.0 * i,
                 attained=(("V100", 50.0 * i),), running_on="V100" if i < 3 else None,
                 started=5.0) for i in range(6)]  # fmt: skip
    table = {j.id: {"V100": 3.0 + k, "P100": 2.0, "K80": 1.0 + k / 10} for k, j in enumerate(jobs)}
    capacity = {"V100": 3, "P100": 2, "K80": 4}
    now = round_context(jobs, table, capacity, now=100.0)
    now.window = Window(1920.0)
    later = [replace(j, done=99_000.0 if k % 3 == 0 else j.done + 500.0,
                     attained=(("P100", 9000.0 * k),)) for k, j in enumerate(jobs)]  # fmt: skip
    then = round_context(later, table, capacity, now=50_000.0)
    then.window = Window(1920.0)
    then.window.time = {(j.id, "K80"): 300.0 for j in jobs}
    return now, then


@pytest.mark.parametrize("name", sorted(ROUND_POLICIES))
def test_a_timeless_policys_allocation_reads_neither_the_time_nor_the_progress(name: str) -> None:
    """A policy that says its allocation does not read the time (its rounds may keep it,
    see ``RoundScheduler._stands``) gives the same allocation much later, with other work
    done and other times received; policies that read them give another here (so the
    contexts differ where a policy could see it)."""
    now, then = _now_and_later()
    same = ROUND_POLICIES[name]().allocate(now) == ROUND_POLICIES[name]().allocate(then)
    if name in TIMELESS:
        assert same
    elif name in ("finish-time-fair", "hetero-jct", "min-makespan"):
        assert not same


def _three() -> tuple[RoundContext, list[Unit]]:
    """a (2 GPUs) and b (1) on X, c (1) on Y; X has 3 devices, Y 2."""
    jobs = [view("a", gang=2, running_on="X", started=0.0), view("b", running_on="X", started=0.0),
            view("c", running_on="Y", started=0.0)]  # fmt: skip
    table = {"a": {"X": 2.0, "Y": 1.0}, "b": {"X": 1.0, "Y": 3.0}, "c": {"X": 1.0, "Y": 1.0}}
    ctx = round_context(jobs, table, {"X": 3, "Y": 2})
    own: list[Unit] = [(("b",), "X"), (("a",), "X"), (("c",), "Y"), (("b",), "Y"), (("a",), "Y")]
    return ctx, own


def test_a_plan_that_keeps_everyone_is_found_and_one_that_moves_a_job_is_not() -> None:
    ctx, own = _three()
    assert standing_plan(ctx, own) == {"a": "X", "b": "X", "c": "Y"}
    assert make_plan(ctx, own, {}, {})[0] == {"a": "X", "b": "X", "c": "Y"}
    moved = [(("b",), "Y"), *own]  # b's first unit is Y: the plan moves it there
    assert standing_plan(ctx, moved) is None
    assert make_plan(ctx, moved, {}, {})[0]["b"] == "Y"


def test_no_standing_plan_where_room_or_quotas_may_refuse_a_running_job() -> None:
    ctx, own = _three()
    ctx.capacity["X"] = 2  # a device of X is down: a and b no longer fit together
    assert standing_plan(ctx, own) is None
    assert "a" not in make_plan(ctx, own, {}, {})[0]
    ctx, own = _three()
    ctx.tenants = {"default": Tenant("default", quota={"X": 1})}
    assert standing_plan(ctx, own) is None  # a's tenant may hold 1 X: the plan drops it
    assert "a" not in make_plan(ctx, own, {}, {})[0]
    ctx, own = _three()
    ctx.tenants = {"other": Tenant("other")}  # the jobs' tenant is not known: never planned
    assert standing_plan(ctx, own) is None
    assert make_plan(ctx, own, {}, {})[0] == {}
    ctx, own = _three()
    assert standing_plan(ctx, own[:-3]) is None  # c has no unit: the plan leaves it out


def test_no_standing_plan_where_the_order_puts_a_pair_or_a_job_cannot_run_where_it_is() -> None:
    ctx, own = _three()
    assert standing_plan(ctx, [(("a", "b"), "X"), *own]) is None  # a packed pair first
    ctx.tput["c"]["Y"] = 0.0  # c runs nowhere on Y now: the plan passes its Y unit by
    assert standing_plan(ctx, own) is None
    assert make_plan(ctx, [*own, (("c",), "X")], {}, {})[0].get("c") != "Y"


@pytest.mark.parametrize(
    ("policy", "tenants", "realloc", "quiet"),
    [
        ("hetero-fair", None, 0.0, True),  # its allocation does not read the time
        ("hetero-jct", "weights", 0.0, False),  # it does: every round is planned
        ("las", None, 0.0, True),
        ("drf", "quota", 0.0, False),  # a quota: every plan is made
        ("hetero-jct", None, 1920.0, True),  # Gavel's interval: allocations are kept
        ("min-makespan", "weights", 1920.0, True),
    ],
)
def test_a_simulation_decides_the_same_with_and_without_standing_plans(
    policy: str, tenants: str | None, realloc: float, quiet: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every decision of a small simulation (its starts and stops, in order) and every
    job's outcome are the same when each plan is made (standing plans and rounds that
    stand without a context turned off); and plans did stand, rounds too where they may."""
    from accelnet.fabric.build import build_fabric, parse_spec
    from accelnet.sched import rounds
    from accelnet.sim.engine import Simulation
    from accelnet.sim.policies import make_scheduler
    from accelnet.sim.throughput import ThroughputModel
    from accelnet.sim.traces import load_trace

    model = ThroughputModel.gavel()
    hosts = [{"name": f"{m.lower()}-{{i:02d}}", "count": 2, "devices": f"{g}x{m}",
              "nics": "1xEth-10G", "network": "leaf0"}
             for m, g in (("V100", 2), ("P100", 2), ("K80", 4))]  # fmt: skip
    spec = {"name": "g", "switches": [{"name": "leaf0", "kind": "leaf"}], "hosts": hosts}
    fab = build_fabric(parse_spec(spec, "g"), "g")
    jobs, _ = load_trace("gavel-gen:n=30,lam=900,seed=3", model, 3)
    ten = {
        None: None,
        "weights": {"default": Tenant("default", weight=2.0)},
        "quota": {"default": Tenant("default", quota={"V100": 2})},
    }[tenants]
    stood, rounds_stood = [0], [0]
    stands = rounds.RoundScheduler._stands

    def counted(ctx: RoundContext) -> dict[str, str] | None:
        found = running_plan(ctx)
        stood[0] += found is not None
        return found

    def counted_round(self: rounds.RoundScheduler, *args: object) -> bool:
        found = stands(self, *args)  # type: ignore[arg-type]
        rounds_stood[0] += found
        return found

    def run() -> tuple[list[tuple[str, str]], list[tuple[object, ...]]]:
        sched = make_scheduler(policy, model, min_reallocation_s=realloc)
        log: list[tuple[str, str]] = []
        walk = sched.walk

        def logged(w: Walk) -> Decision:
            d = walk(w)
            log.append((repr(d.starts), repr(d.preemptions)))
            return d

        sched.walk = logged  # type: ignore[method-assign]
        res = Simulation(fab, jobs, sched, model, tenants=ten, restart_s=30.0).run()
        return log, [(o.id, o.state, o.first_start, o.end, o.preemptions) for o in res.jobs]

    monkeypatch.setattr(rounds, "running_plan", counted)
    monkeypatch.setattr(rounds.RoundScheduler, "_stands", counted_round)
    with_standing = run()
    assert stood[0] > 0 or tenants == "quota"  # (a quota: every plan is made)
    assert (rounds_stood[0] > 0) == quiet
    monkeypatch.setattr(rounds, "running_plan", lambda ctx: None)  # no plan ever stands
    assert run() == with_standing


@pytest.mark.parametrize("name", ["hetero-fair", "finish-time-fair", "min-makespan", "hetero-jct"])
def test_a_round_after_every_job_left_and_came_back_is_planned_anew(name: str) -> None:
    """Decisions on snapshots: two jobs run, a decision with no job at all, then the same
    job views again. The jobs changed since the last plan, so the round after is planned
    (with a re-allocation interval the allocation is stale and re-solved when due), as when
    rounds never stand."""
    from accelnet.sched import JobState, Snapshot, rounds
    from tests.sched.test_rounds import fabric, job, rates_of

    fab = fabric(("v", "1xV100"), ("k", "1xK80"))
    table = {"a": {"V100": 3.0, "K80": 1.0}, "b": {"V100": 1.0, "K80": 2.0}}

    def run(quiet: bool) -> list[tuple[object, ...]]:
        sched = rounds.RoundScheduler(ROUND_POLICIES[name](), round_s=10.0,
                                      rates=rates_of(table), min_reallocation_s=100.0)  # fmt: skip
        if not quiet:
            sched._stands = lambda *args: False  # type: ignore[method-assign]
        views = [job(n, 0.0, steps=1e6) for n in "ab"]
        first = sched.decide(Snapshot.all_ready(fab, tuple(views), now=0.0))
        placed = {s.job: s.placement for s in first.starts}
        running = tuple(replace(v, state=JobState.RUNNING, placement=placed[v.id],
                                started_at=0.0, attempts=1) for v in views)  # fmt: skip
        sched.decide(Snapshot.all_ready(fab, running, now=10.0))
        sched.decide(Snapshot.all_ready(fab, (), now=11.0))
        out: list[tuple[object, ...]] = []
        for t in (20.0, 120.0):
            d = sched.decide(Snapshot.all_ready(fab, running, now=t))
            out.append((d.starts, d.preemptions, d.time_shares, sched._stale, sched._solved_at))
        return out

    assert run(quiet=True) == run(quiet=False)
