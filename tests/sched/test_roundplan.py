"""A round's plan when every job runs (``accelnet.sched.roundplan.standing_plan``): the plan
:func:`make_plan` makes, found without making it, or None."""

from __future__ import annotations

import random

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from accelnet.sched.roundplan import make_plan, standing_plan
from accelnet.sched.rounds import RoundContext
from accelnet.sched.snapshot import Tenant
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
    units = [((j.id,), m) for j in jobs for m, r in ctx.tput[j.id].items() if r > 0]
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


def _three() -> tuple[RoundContext, list[Unit]]:
    """a (2 GPUs) and b (1) on X, c (1) on Y; X has 3 devices, Y 2."""
    jobs = [view("a", gang=2, running_on="X", started=0.0), view("b", running_on="X", started=0.0),
            view("c", running_on="Y", started=0.0)]  # fmt: skip
    table = {"a": {"X": 2.0, "Y": 1.0}, "b": {"X": 1.0, "Y": 3.0}, "c": {"X": 1.0, "Y": 1.0}}
    ctx = round_context(jobs, table, {"X": 3, "Y": 2})
    own = [(("b",), "X"), (("a",), "X"), (("c",), "Y"), (("b",), "Y"), (("a",), "Y")]
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
