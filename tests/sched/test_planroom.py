"""The room a round's plan fills, device by device (``accelnet.sched.planroom``)."""

from __future__ import annotations

import random
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from accelnet.sched.planroom import PlanRoom
from accelnet.sched.roundplan import make_plan
from accelnet.sched.rounds import RoundContext
from tests.sched.test_drf import greedy
from tests.sched.test_policies import contexts


def test_shares_go_best_fit_and_gangs_need_wholly_free_devices() -> None:
    room = PlanRoom({"T4": 2})
    room.take("T4", 1, 0.6)
    room.take("T4", 1, 0.6)  # 0.4 left on each: a third 0.6 does not fit
    assert not room.fits("T4", 1, 0.6) and room.fits("T4", 1, 0.4)
    assert not room.fits("T4", 1, 1.0)  # no wholly free device left
    room.take("T4", 1, 0.3)
    room.take("T4", 1, 0.4)  # best fit: on the device with 0.4 left, not the one with 0.1
    assert room.parts["T4"] == [pytest.approx(0.1)]
    assert not room.fits("T4", 1, 0.2)
    gangs = PlanRoom({"V100": 4})
    assert gangs.fits("V100", 4, 1.0) and not gangs.fits("V100", 5, 1.0)
    gangs.take("V100", 1, 0.5)
    assert not gangs.fits("V100", 4, 1.0) and gangs.fits("V100", 3, 1.0)


def test_running_shares_hold_the_devices_they_are_on() -> None:
    room = PlanRoom({"T4": 3})
    room.hold("T4", [(("t/gpu0",), 0.6), (("t/gpu0",), 0.4), (("t/gpu1",), 0.5)])
    assert room.whole["T4"] == 1 and room.parts["T4"] == [0.5]
    assert room.fits("T4", 1, 0.5) and room.fits("T4", 1, 1.0) and not room.fits("T4", 2, 1.0)


def test_full_means_no_device_and_no_part_is_left() -> None:
    room = PlanRoom({"T4": 1, "V100": 1})
    room.take("V100", 1, 1.0)
    assert not room.full()
    room.take("T4", 1, 0.5)  # half of the T4 is still free
    assert not room.full()
    room.take("T4", 1, 0.5)
    assert room.full()


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(ctx=contexts(), seed=st.integers(0, 1000))
def test_a_plan_reads_no_unit_once_every_device_is_planned(ctx: RoundContext, seed: int) -> None:
    """make_plan stops reading the policy's order once the fabric is planned full, and its
    plan is the greedy plan of the whole order."""
    units = [((j.id,), m) for j in ctx.jobs for m, r in ctx.tput[j.id].items() if r > 0]
    random.Random(seed).shuffle(units)
    read: list[tuple[tuple[str, ...], str]] = []

    def order() -> Iterator[tuple[tuple[str, ...], str]]:
        for unit in units:
            read.append(unit)
            yield unit

    plan, _ = make_plan(ctx, order(), {}, {})
    assert plan == greedy(ctx, [(u[0], m) for u, m in units])
    room = dict(ctx.capacity)
    for k, (unit, model) in enumerate(units):  # where the greedy plan filled the fabric
        if plan.get(unit[0]) == model and room[model] >= ctx.gang[unit[0]]:
            room[model] -= ctx.gang[unit[0]]
            if not any(room.values()):
                assert len(read) == k + 1  # nothing after it was read
                return
    assert len(read) == len(units)  # never full: the whole order was read


@settings(max_examples=80, deadline=None, suppress_health_check=list(HealthCheck))
@given(ctx=contexts(), data=st.data())
def test_the_early_end_of_a_plan_changes_no_plan(
    ctx: RoundContext, data: st.DataObject, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With kept jobs (which may overfill a model), jobs holding half of each device and
    any order, the plan made with the early end equals the plan made reading every unit."""
    units = [((j.id,), m) for j in ctx.jobs for m, r in ctx.tput[j.id].items() if r > 0]
    units = data.draw(st.permutations(units), label="order")
    keep = {}
    for j in ctx.jobs:
        models = sorted(ctx.tput[j.id])
        if models and data.draw(st.booleans(), label=f"keep {j.id}"):
            keep[j.id] = data.draw(st.sampled_from(models), label=f"model of {j.id}")
    for j in ctx.jobs:
        if data.draw(st.integers(0, 3), label=f"half {j.id}") == 0:
            ctx.size[j.id] = ctx.gang[j.id] * 0.5
    early = make_plan(ctx, list(units), dict(keep), {})
    with monkeypatch.context() as m:
        m.setattr(PlanRoom, "full", lambda self: False)
        every = make_plan(ctx, list(units), dict(keep), {})
    assert early == every
