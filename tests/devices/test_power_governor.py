"""The power governor: within the budget, delays with a reason, optimal against brute force."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from accelnet.devices import DevicePower, DeviceSample, SampleRing
from accelnet.devices.governor import JobLoad, PowerGovernor, PowerPlan, latest_draw
from accelnet.devices.power import cap_speed


def h100s(n: int, host: str = "h") -> list[DevicePower]:
    return [DevicePower.of_model(f"{host}/gpu{i}", "H100-SXM", (200, 700)) for i in range(n)]


def job(name: str, *devices: str, share: float = 1.0, weight: float | None = None) -> JobLoad:
    return JobLoad(name, tuple(devices), share, weight)


def recompute(gov: PowerGovernor, plan: PowerPlan, jobs: list[JobLoad]) -> float:
    """The plan's draw from its caps, by the devices' own model (idle devices: idle)."""
    shares: dict[str, float] = {}
    for j in jobs:
        for d in j.devices:
            shares[d] = shares.get(d, 0.0) + j.share
    return gov.base_w + math.fsum(
        p.draw_w(min(1.0, shares.get(d, 0.0)), plan.caps[d]) for d, p in gov.power.items()
    )


# ----- hand-built -----------------------------------------------------------------------------


def test_an_ample_budget_caps_nothing() -> None:
    gov = PowerGovernor(10_000, h100s(4))
    plan = gov.plan(0.0, [job("a", "h/gpu0", "h/gpu1")], [job("b", "h/gpu2")])
    assert plan.caps == dict.fromkeys(gov.power, 700)
    assert plan.speeds == {"a": 1.0, "b": 1.0} and plan.loss == 0.0
    assert plan.projected_w == 3 * 700 + 70 and plan.floor_w == 3 * 200 + 70
    assert (plan.started, plan.delayed, plan.feasible) == (("b",), {}, True)
    assert plan.capped(gov.power) == {}


def test_identical_devices_share_the_cut_evenly() -> None:
    gov = PowerGovernor(4000, h100s(8))
    plan = gov.plan(5.0, [job("a", *(f"h/gpu{i}" for i in range(4))), job("b", "h/gpu4")],
                    [job("c", "h/gpu5", "h/gpu6"), job("d", "h/gpu7")])  # fmt: skip
    assert plan.time == 5.0 and plan.started == ("c", "d")
    assert plan.caps == dict.fromkeys(gov.power, pytest.approx(500.0))
    assert plan.projected_w == pytest.approx(4000.0) and plan.projected_w <= 4000.0
    assert plan.speeds["a"] == pytest.approx((500 / 700) ** (1 / 3))
    assert plan.capped(gov.power) == plan.caps


def test_a_job_is_delayed_with_a_readable_reason() -> None:
    gov = PowerGovernor(700, h100s(4))
    plan = gov.plan(0.0, [job("run", "h/gpu0", "h/gpu1")], [job("x", "h/gpu2", "h/gpu3")])
    assert plan.started == ()
    assert plan.delayed == {
        "x": "power budget 700 W: 540 W drawn even at the lowest caps, starting job x adds "
        ">= 260 W (2 devices)"
    }
    drawn = {f"h/gpu{i}": w for i, w in enumerate([690.0, 688.0, 70.0, 71.5])}
    with_readings = gov.plan(0.0, [job("run", "h/gpu0", "h/gpu1")], [job("x", "h/gpu2", share=0.5)],
                             drawn=drawn)  # fmt: skip
    assert with_readings.delayed == {}  # 540 + 65 fits
    big = PowerGovernor(2900, h100s(16))
    running = [job(f"r{i}", f"h/gpu{i}") for i in range(12)]
    plan = big.plan(0.0, running, [job("x", "h/gpu12", "h/gpu13")], drawn={"h/gpu0": 650.0})
    # drawn now: 650 W measured, 11 x 700 W busy and 4 x 70 W idle modelled
    assert plan.delayed["x"] == (
        "power budget 2,900 W: 2,680 W drawn even at the lowest caps, starting job x adds "
        ">= 260 W (2 devices); 8,630 W drawn now"
    )
    assert plan.drawn_w == 8630.0 and plan.projected_w <= 2900


def test_a_later_smaller_job_may_start_where_an_earlier_waits() -> None:
    gov = PowerGovernor(700, h100s(4))
    first = [job("big", "h/gpu2", "h/gpu3"), job("small", "h/gpu2", share=0.5)]
    plan = gov.plan(0.0, [job("run", "h/gpu0", "h/gpu1")], first)
    assert plan.started == ("small",) and list(plan.delayed) == ["big"]
    assert "starting job big adds >= 260 W" in plan.delayed["big"]
    assert "(1 device at share 0.5)" not in plan.delayed["big"]
    assert plan.projected_w <= 700
    assert set(plan.speeds) == {"run", "small"}


def test_running_work_over_the_budget_goes_to_the_lowest_caps() -> None:
    gov = PowerGovernor(500, h100s(4))
    plan = gov.plan(0.0, [job("a", "h/gpu0", "h/gpu1")], [job("b", "h/gpu2")])
    assert not plan.feasible
    assert plan.reason == (
        "power budget 500 W cannot be met: the running jobs draw >= 540 W even at the lowest caps"
    )
    assert plan.delayed == {"b": plan.reason + "; nothing starts"}
    assert plan.caps == {"h/gpu0": 200, "h/gpu1": 200, "h/gpu2": 700, "h/gpu3": 700}
    assert plan.projected_w == plan.floor_w == 540


def test_measured_idle_draw_above_the_model_counts() -> None:
    gov = PowerGovernor(900, h100s(2))
    quiet = gov.plan(0.0, [job("a", "h/gpu0")])
    noisy = gov.plan(0.0, [job("a", "h/gpu0")], drawn={"h/gpu1": 250.0, "h/gpu0": 600.0})
    assert quiet.caps["h/gpu0"] == 700 and quiet.projected_w == 770 and quiet.drawn_w is None
    assert noisy.caps["h/gpu0"] == pytest.approx(650.0)  # 900 - 250 measured on the idle one
    assert noisy.projected_w == pytest.approx(900.0) and noisy.drawn_w == 850.0


def test_weights_send_watts_to_the_valuable_job() -> None:
    gov = PowerGovernor(900, h100s(2))
    plan = gov.plan(0.0, [job("cheap", "h/gpu0", weight=1), job("dear", "h/gpu1", weight=1.5)])
    assert plan.caps["h/gpu1"] > plan.caps["h/gpu0"]
    # KKT: equal marginal value per watt, w * d(c^(1/3))/dc, i.e. w / c^(2/3) equal
    c0, c1 = plan.caps["h/gpu0"], plan.caps["h/gpu1"]
    assert 1 / c0 ** (2 / 3) == pytest.approx(1.5 / c1 ** (2 / 3), rel=1e-6)
    assert c0 + c1 == pytest.approx(900.0)


def test_a_device_that_cannot_be_capped_bounds_its_job() -> None:
    fixed = DevicePower("h/gpu1", "H100-SXM", 70, 700, 400, 400)  # limit pinned at 400 W
    gov = PowerGovernor(5000, [*h100s(1), fixed])
    plan = gov.plan(0.0, [job("g", "h/gpu0", "h/gpu1")])
    assert plan.speeds["g"] == pytest.approx(cap_speed(400, 700))
    assert plan.caps == {"h/gpu0": pytest.approx(400.0), "h/gpu1": 400}  # no watt wasted


def test_plans_are_deterministic_and_do_not_depend_on_device_order() -> None:
    devs = [*h100s(3), DevicePower.of_model("h/t4", "T4")]
    jobs = [
        job("a", "h/gpu0", "h/t4"),
        job("b", "h/gpu1", share=0.5),
        job("c", "h/gpu1", share=0.5),
    ]
    one = PowerGovernor(1200, devs).plan(1.0, jobs, [job("d", "h/gpu2")])
    two = PowerGovernor(1200, devs[::-1]).plan(1.0, jobs, [job("d", "h/gpu2")])
    assert (
        one.to_json() == PowerGovernor(1200, devs).plan(1.0, jobs, [job("d", "h/gpu2")]).to_json()
    )
    assert one.caps == pytest.approx(two.caps) and one.speeds == pytest.approx(two.speeds)


def test_bad_input_is_refused() -> None:
    gov = PowerGovernor(1000, h100s(2))
    with pytest.raises(ValueError, match=r"device 'h/gpu7' is not under the power budget"):
        gov.plan(0.0, [job("a", "h/gpu7")])
    with pytest.raises(ValueError, match="job a given twice"):
        gov.plan(0.0, [job("a", "h/gpu0")], [job("a", "h/gpu1")])
    with pytest.raises(ValueError, match="budget_w"):
        PowerGovernor(0, h100s(1))
    with pytest.raises(ValueError, match="given twice"):
        PowerGovernor(100, h100s(1) * 2)
    with pytest.raises(ValueError, match="share"):
        job("a", "h/gpu0", share=0)
    with pytest.raises(ValueError, match="weight"):
        job("a", "h/gpu0", weight=-1)


def test_latest_draw_reads_the_ring() -> None:
    ring = SampleRing(4)
    ring.extend([DeviceSample("a", 1.0, power_w=10.0), DeviceSample("a", 2.0, power_w=12.0),
                 DeviceSample("b", 2.0), DeviceSample("c", 1.0, power_w=3.0)])  # fmt: skip
    assert latest_draw(ring, ["a", "b", "c", "d"]) == {"a": 12.0, "c": 3.0}


def test_thousands_of_devices() -> None:
    n = 4096
    devs = [DevicePower.of_model(f"h{i // 8}/gpu{i % 8}", "H100-SXM", (200, 700)) for i in range(n)]
    jobs = [job(f"j{k}", *(f"h{k}/gpu{i}" for i in range(8))) for k in range(n // 8)]
    plan = PowerGovernor(n * 450, devs).plan(0.0, jobs)
    assert plan.projected_w <= n * 450 and plan.projected_w == pytest.approx(n * 450)


# ----- optimal: against brute force on tiny cases ---------------------------------------------

SMALL = ("T4", "L4", "Jetson-Orin-Nano", "CPU-core")


def brute(gov: PowerGovernor, jobs: list[JobLoad], step: float) -> float:
    """The best sum of weighted speeds on a grid of caps (each device's range, ``step`` W),
    every combination at once (numpy broadcasting: one axis per busy device)."""
    busy = sorted({d for j in jobs for d in j.devices})
    shares = {d: min(1.0, sum(j.share for j in jobs if d in j.devices)) for d in busy}
    draw: np.ndarray = np.zeros(())
    speed: dict[str, np.ndarray] = {}
    for axis, d in enumerate(busy):
        lo, hi = gov.cap_range(d)
        caps = np.unique(np.append(np.arange(lo, hi, step), hi))
        shape = [1] * len(busy)
        shape[axis] = caps.size
        p = gov.power[d]
        draw = draw + np.array([p.draw_w(shares[d], c) for c in caps]).reshape(shape)
        speed[d] = np.array([cap_speed(c, p.max_w) for c in caps]).reshape(shape)
    other = gov.base_w + sum(p.idle_w for d, p in gov.power.items() if d not in shares)
    total: np.ndarray = np.zeros(())
    for j in jobs:
        slowest = speed[j.devices[0]]
        for d in j.devices[1:]:
            slowest = np.minimum(slowest, speed[d])
        total = total + j.value * slowest
    ok = np.broadcast_to(draw + other <= gov.budget_w, np.broadcast(draw, total).shape)
    return float(np.max(np.where(ok, total, -1.0)))


def value(plan: PowerPlan, jobs: list[JobLoad]) -> float:
    return sum(j.value * plan.speeds[j.job] for j in jobs)


CASES = [
    # (device models, jobs as (devices, share, weight), budget)
    (("T4", "T4"), [((0,), 1.0, None), ((1,), 1.0, None)], 80.0),
    (("T4", "L4"), [((0,), 1.0, 1.0), ((1,), 1.0, 3.0)], 90.0),
    (("T4", "L4", "T4"), [((0, 1), 1.0, None), ((2,), 1.0, None)], 130.0),
    (("T4", "L4", "Jetson-Orin-Nano"), [((0,), 1.0, None), ((1, 2), 1.0, 2.0)], 100.0),
    (("L4", "T4"), [((0,), 0.5, None), ((0,), 0.5, None), ((1,), 1.0, None)], 95.0),
    (("T4", "T4", "L4"), [((0,), 0.5, 1.0), ((1,), 1.0, 1.0), ((2,), 0.25, 4.0)], 70.0),
]


@pytest.mark.parametrize(("models", "spec", "budget"), CASES)
def test_optimal_against_brute_force(
    models: tuple[str, ...], spec: list[tuple[tuple[int, ...], float, float | None]], budget: float
) -> None:
    devs = [DevicePower.of_model(f"n/d{i}", m) for i, m in enumerate(models)]
    jobs = [
        job(f"j{k}", *(f"n/d{i}" for i in ds), share=s, weight=w)
        for k, (ds, s, w) in enumerate(spec)
    ]
    gov = PowerGovernor(budget, devs)
    plan = gov.plan(0.0, jobs)
    assert plan.feasible and plan.projected_w <= budget * (1 + 1e-12)
    assert recompute(gov, plan, jobs) == pytest.approx(plan.projected_w)
    grid = brute(gov, jobs, 0.2)
    assert value(plan, jobs) >= grid - 1e-9  # at least as good as every grid point
    assert value(plan, jobs) <= grid + 0.01 * sum(j.value for j in jobs)  # and the grid is fine


# ----- properties, on random cases ------------------------------------------------------------

MODELS = ("H100-SXM", "A100-SXM4-80GB", "V100", "T4", "L4", "MI300X", "CPU-core")


@st.composite
def clusters(draw: st.DrawFn) -> tuple[list[DevicePower], list[JobLoad], list[JobLoad], float]:
    n = draw(st.integers(1, 8))
    devs = []
    for i in range(n):
        m = DevicePower.of_model(f"n/d{i}", draw(st.sampled_from(MODELS)))
        lo = draw(st.floats(0.05, 1.0)) * m.max_w
        hi = draw(st.floats(lo, 1.3 * m.max_w))
        devs.append(DevicePower(m.device, m.model, m.idle_w, m.max_w, lo, max(lo, hi)))
    names = [d.device for d in devs]
    jobs = []
    for k in range(draw(st.integers(0, 6))):
        ds = draw(st.lists(st.sampled_from(names), min_size=1, max_size=3, unique=True))
        share = draw(st.sampled_from([0.25, 0.5, 1.0]))
        weight = draw(st.none() | st.floats(0.1, 10))
        jobs.append(job(f"j{k}", *ds, share=share, weight=weight))
    cut = draw(st.integers(0, len(jobs)))
    budget = draw(st.floats(1.0, sum(d.max_w for d in devs) * 1.2))
    return devs, jobs[:cut], jobs[cut:], budget


@settings(max_examples=400, deadline=None)
@given(clusters())
def test_never_over_the_budget_when_it_can_be_met(
    case: tuple[list[DevicePower], list[JobLoad], list[JobLoad], float],
) -> None:
    devs, running, starting, budget = case
    gov = PowerGovernor(budget, devs)
    plan = gov.plan(0.0, running, starting)
    ran = [*running, *(j for j in starting if j.job in plan.started)]
    assert set(plan.started) | set(plan.delayed) == {j.job for j in starting}
    assert recompute(gov, plan, ran) == pytest.approx(plan.projected_w, rel=1e-9, abs=1e-9)
    assert plan.floor_w <= plan.projected_w + 1e-9
    if plan.feasible:
        assert plan.projected_w <= budget * (1 + 1e-9)
    else:
        assert plan.started == () and plan.floor_w > budget
    for d, cap in plan.caps.items():
        assert gov.power[d].cap_min_w - 1e-9 <= cap <= gov.power[d].cap_max_w + 1e-9
    for j in ran:
        assert 0 < plan.speeds[j.job] <= 1.0
        real = min(cap_speed(plan.caps[d], gov.power[d].max_w) for d in j.devices)
        assert plan.speeds[j.job] == pytest.approx(real)
    for name, why in plan.delayed.items():
        assert why.startswith(f"power budget {budget:,.0f} W")
        assert f"job {name} adds" in why or "cannot be met" in why


@settings(max_examples=200, deadline=None)
@given(clusters(), st.floats(1.0, 2.0))
def test_more_budget_never_costs_speed(
    case: tuple[list[DevicePower], list[JobLoad], list[JobLoad], float], more: float
) -> None:
    devs, running, _, budget = case
    low = PowerGovernor(budget, devs).plan(0.0, running)
    high = PowerGovernor(budget * more, devs).plan(0.0, running)
    if low.feasible:
        assert high.loss <= low.loss + 1e-9 * (1 + low.loss)
