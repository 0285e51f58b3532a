"""Energy accounting: exact on hand-built cases, conserved on random ones (hypothesis)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from accelnet.devices import (
    IDLE,
    DevicePower,
    DeviceSample,
    EnergyMeter,
    JobEnergy,
    JobHold,
    model_job_energy,
)
from accelnet.devices.energy import _Seg
from accelnet.sim.throughput import ThroughputModel


def s(device: str, t: float, p: float | None = None, e: float | None = None) -> DeviceSample:
    return DeviceSample(device, t, power_w=p, energy_j=e)


def constant(
    device: str, watts: float, until: int, *, power: bool = True, counter: bool = True
) -> list[DeviceSample]:
    """One sample a second from 0 to ``until`` of a device drawing ``watts``."""
    return [
        s(device, t, watts if power else None, 1e6 + watts * t if counter else None)
        for t in range(until + 1)
    ]


# ----- exact figures ----------------------------------------------------------------------


@pytest.mark.parametrize(("power", "counter"), [(True, False), (False, True), (True, True)])
def test_constant_power_counter_and_trapezoid_agree(power: bool, counter: bool) -> None:
    m = EnergyMeter()
    m.extend(constant("a", 100.0, 10, power=power, counter=counter))
    r = m.report()
    assert r.by_device == {"a": pytest.approx(1000.0)}
    assert r.idle_by_device == {"a": pytest.approx(1000.0)}
    assert r.unmeasured_s == {"a": 0.0}


def test_a_ramp_is_integrated_exactly_and_split_along_it() -> None:
    # power 0 -> 100 W over 10 s, two samples only: the job holding [5, 10] used 375 J of 500
    m = EnergyMeter()
    m.start("j", ["a"], 5.0)
    m.extend([s("a", 0.0, 0.0), s("a", 10.0, 100.0)])
    assert m.report().by_device["a"] == pytest.approx(500.0)
    assert m.job("j").measured_j == pytest.approx(375.0)
    # the counter gives the total; the power readings still shape the split
    c = EnergyMeter()
    c.start("j", ["a"], 5.0)
    c.extend([s("a", 0.0, 0.0, 0.0), s("a", 10.0, 100.0, 600.0)])
    assert c.job("j").measured_j == pytest.approx(600.0 * 0.75)


def test_a_share_gets_its_share_and_the_rest_is_idle() -> None:
    m = EnergyMeter()
    m.start("half", ["a", "b"], 0.0, share=0.5, tenant="t1")
    m.extend(constant("a", 200.0, 10))
    m.extend(constant("b", 100.0, 10))
    j = m.job("half")
    assert j.by_device == {"a": pytest.approx(1000.0), "b": pytest.approx(500.0)}
    assert (j.measured_j, j.modelled_j, j.source) == (pytest.approx(1500.0), 0.0, "measured")
    r = m.report()
    assert r.idle_j == pytest.approx(1500.0) and r.total_j == pytest.approx(3000.0)
    assert r.by_tenant == {"t1": pytest.approx(1500.0)}
    assert r.to_json()["by_job"] == {"half": pytest.approx(1500.0), IDLE: pytest.approx(1500.0)}


def test_overlapping_jobs_inside_one_interval() -> None:
    # 100 W for 10 s, sampled only at 0 and 10. A holds [0, 6] whole, B [4, 10] half:
    # [0, 4] A 400; [4, 6] shares 1.5 -> A 2/3, B 1/3 of 200; [6, 10] B 200, idle 200.
    m = EnergyMeter()
    m.hold(JobHold.on("A", ["a"], 0.0, 6.0))
    m.hold(JobHold.on("B", {"a": 0.5}, 4.0, 10.0))
    m.extend([s("a", 0.0, 100.0), s("a", 10.0, 100.0)])
    r = m.report()
    assert r.by_job == {"A": pytest.approx(400 + 200 * 2 / 3), "B": pytest.approx(200 / 3 + 200)}
    assert r.idle_by_device == {"a": pytest.approx(200.0)}
    assert math.fsum(r.by_job.values()) + r.idle_j == pytest.approx(r.total_j)


def test_a_counter_reset_falls_back_to_power_then_to_the_new_reading() -> None:
    m = EnergyMeter()
    m.extend([s("a", 0, 100, 5000), s("a", 1, 100, 5100), s("a", 2, 100, 40), s("a", 3, 100, 140)])
    assert m.report().by_device["a"] == pytest.approx(300.0)
    n = EnergyMeter()
    n.extend([s("b", 0, None, 5000), s("b", 1, None, 5100), s("b", 2, None, 40)])
    assert n.report().by_device["b"] == pytest.approx(100 + 40)  # 40 J since the reset


def test_one_power_reading_and_gaps() -> None:
    m = EnergyMeter()
    m.extend([s("a", 0, 100), s("a", 1), s("a", 2), s("a", 4, 50)])
    r = m.report()
    assert r.by_device["a"] == pytest.approx(100 + 0 + 100)  # [0,1] 100 W; [1,2] gap; [2,4] 50 W
    assert r.unmeasured_s == {"a": 1.0}


def test_unmeasured_time_is_modelled_when_a_model_is_given() -> None:
    h100 = {"a": DevicePower.of_model("a", "H100-SXM")}
    m = EnergyMeter()
    m.start("j", ["a"], 0.0, share=0.5)
    m.extend([s("a", 10, 300), s("a", 20, 300)])  # nothing before 10 s
    bare = m.job("j")
    assert (bare.measured_j, bare.unmeasured_s, bare.source) == (1500.0, 10.0, "measured")
    assert bare.describe() == "1.5 kJ measured, 10 device-s unmeasured"
    filled = m.job("j", power=h100)
    assert filled.modelled_j == pytest.approx(10 * 0.5 * 700)
    assert (filled.source, filled.joules) == ("mixed", pytest.approx(1500 + 3500))
    assert filled.describe() == "5 kJ (1.5 measured + 3.5 modelled)"
    # running on: up to now, the tail after the newest sample is modelled too, at util and cap
    later = m.job("j", now=30.0, power=h100, util=0.5, caps={"a": 400})
    assert later.modelled_j == pytest.approx((10 + 10) * 0.5 * (70 + 0.5 * 330))
    assert later.held_s == 30.0


def test_a_job_with_no_samples_is_modelled() -> None:
    m = EnergyMeter()
    m.hold(JobHold.on("j", ["a", "b"], 0.0, 100.0))
    p = {d: DevicePower.of_model(d, "T4") for d in ("a", "b")}
    j = m.job("j", power=p)
    assert (j.source, j.measured_j, j.modelled_j) == ("modelled", 0.0, 2 * 100 * 70)
    assert j.describe() == "14 kJ modelled"
    assert m.job("j").source == "none"


def test_model_job_energy_is_the_simulators_accounting() -> None:
    # SimBackend: a job's energy = held * busy_w(model, cap) * world * share
    rates = ThroughputModel.gavel()
    devs = [DevicePower.of_model(f"h/gpu{i}", "V100") for i in range(4)]
    j = model_job_energy("j", devs, 3600.0, share=0.5, caps={d.device: 200 for d in devs})
    assert j.joules == pytest.approx(3600 * rates.power_w("V100", True, 200) * 4 * 0.5)
    assert (j.source, j.held_s, j.unmeasured_s) == ("modelled", 4 * 3600, 4 * 3600)
    assert j.to_json()["source"] == "modelled"
    with pytest.raises(ValueError, match="share"):
        model_job_energy("j", devs, 10, share=0)


# ----- settling -----------------------------------------------------------------------------


def test_holds_may_end_late_within_the_settle_window_only() -> None:
    m = EnergyMeter(settle_s=5.0)
    m.start("j", ["a"], 0.0)
    m.extend(constant("a", 100.0, 8))  # [0, 3] settled (8 - 5)
    m.stop("j", 4.0)  # learnt late, but inside the window
    assert m.job("j").measured_j == pytest.approx(400.0)
    with pytest.raises(ValueError, match="settled up to 3"):
        m.stop("j", 2.0)
    with pytest.raises(ValueError, match="settled up to 3"):
        m.start("k", ["a"], 1.0)
    m.commit(8.0)
    assert m.job("j").measured_j == pytest.approx(400.0)
    assert m.report().idle_j == pytest.approx(400.0)
    m.forget("j")
    assert "j" not in m.report().by_job and m.report().total_j == pytest.approx(800.0)


def test_bad_input_is_refused() -> None:
    m = EnergyMeter()
    m.add(s("a", 5.0, 1.0))
    with pytest.raises(ValueError, match="older than the latest"):
        m.add(s("a", 4.0, 1.0))
    with pytest.raises(ValueError, match="share"):
        JobHold.on("j", ["a"], 0.0, share=1.5)
    with pytest.raises(ValueError, match="distinct"):
        JobHold.on("j", ["a", "a"], 0.0)
    with pytest.raises(ValueError, match="bad interval"):
        JobHold.on("j", ["a"], 5.0, 4.0)
    with pytest.raises(KeyError):
        m.stop("nobody", 1.0)
    with pytest.raises(ValueError, match="settle_s"):
        EnergyMeter(settle_s=-1)


def test_job_energy_labels() -> None:
    assert JobEnergy("j", 0.0, 0.0, 0.0, 0.0).source == "none"
    assert JobEnergy("j", 2e9, 0.0, 10.0, 0.0).describe() == "2,000,000 kJ measured"


# ----- conservation, on random cases ----------------------------------------------------------

DEVICES = ("a", "b", "c")


@st.composite
def histories(draw: st.DrawFn) -> tuple[list[DeviceSample], list[JobHold]]:
    samples: list[DeviceSample] = []
    for d in DEVICES:
        t, e = 0.0, draw(st.floats(0, 1e6))
        for _ in range(draw(st.integers(0, 12))):
            t += draw(st.sampled_from([0.0, 0.25, 1.0, 2.5, 7.0]))
            e += draw(st.floats(0, 5000))
            if draw(st.integers(0, 9)) == 0:
                e = draw(st.floats(0, 100))  # the counter was reset
            p = draw(st.none() | st.floats(0, 1000))
            samples.append(s(d, t, p, draw(st.none() | st.just(e))))
    holds = []
    for k in range(draw(st.integers(0, 5))):
        devs = draw(st.lists(st.sampled_from(DEVICES), min_size=1, max_size=3, unique=True))
        shares = {d: draw(st.sampled_from([0.25, 0.5, 1.0])) for d in devs}
        start = draw(st.floats(-5, 60))
        end = draw(st.none() | st.floats(start, 80))
        holds.append(JobHold.on(f"j{k}", shares, start, end, tenant=f"t{k % 2}"))
    samples.sort(key=lambda x: x.time)  # interleave the devices in time order
    return samples, holds


@pytest.mark.parametrize(
    ("p0", "p1"), [(0.0, 5e-324), (5e-324, 0.0), (5e-324, 5e-324), (1e308, 1e308), (0.0, 1e308)]
)
def test_a_part_of_an_interval_with_extreme_readings_is_finite_and_adds_up(
    p0: float, p1: float
) -> None:
    # Hypothesis found p0=0, p1=5e-324: the guard p0 + p1 > 0 passed and the divisor
    # (p0 + p1) / 2 underflowed to 0 (ZeroDivisionError).
    seg = _Seg(t0=0.0, t1=1.0, joules=10.0, p0=p0, p1=p1, measured=True)
    a, b = seg.part(0.0, 0.5), seg.part(0.5, 1.0)
    assert math.isfinite(a) and math.isfinite(b) and a >= 0 and b >= 0
    assert a + b == pytest.approx(10.0)


def run(samples: list[DeviceSample], holds: list[JobHold], settle: float | None) -> EnergyMeter:
    m = EnergyMeter(settle_s=settle)
    for h in holds:
        m.hold(h)
    m.extend(samples)
    return m


@settings(max_examples=300, deadline=None)
@given(histories())
def test_jobs_plus_idle_equal_each_devices_total(
    case: tuple[list[DeviceSample], list[JobHold]],
) -> None:
    samples, holds = case
    m = run(samples, holds, None)
    r = m.report()
    bare = run(samples, [], None).report()
    for d, total in r.by_device.items():
        jobs = math.fsum(m.job(h.job).by_device.get(d, 0.0) for h in holds)
        assert jobs + r.idle_by_device[d] == pytest.approx(total, rel=1e-9, abs=1e-6)
        assert total == pytest.approx(bare.by_device[d], rel=1e-9, abs=1e-6)  # holds move none
        assert r.idle_by_device[d] >= -1e-9
    assert math.fsum(r.by_job.values()) + r.idle_j == pytest.approx(r.total_j, rel=1e-9, abs=1e-6)
    assert math.fsum(r.by_tenant.values()) == pytest.approx(
        math.fsum(r.by_job.values()), rel=1e-9, abs=1e-6
    )
    for h in holds:  # a job never gets more than its share of a device's energy
        j = m.job(h.job)
        assert j.measured_j >= -1e-9 and j.unmeasured_s <= j.held_s + 1e-9
        for d, share in h.devices:
            assert j.by_device[d] <= share * r.by_device.get(d, 0.0) + 1e-6


@settings(max_examples=200, deadline=None)
@given(histories(), st.sampled_from([0.0, 1.0, 10.0]))
def test_settling_early_changes_nothing(
    case: tuple[list[DeviceSample], list[JobHold]], settle: float
) -> None:
    samples, holds = case
    lazy = run(samples, holds, None)
    eager = run(samples, holds, settle)
    a, b = lazy.report(), eager.report()
    for key in a.by_job:
        assert b.by_job[key] == pytest.approx(a.by_job[key], rel=1e-9, abs=1e-6)
    for d in a.by_device:
        assert b.by_device[d] == pytest.approx(a.by_device[d], rel=1e-9, abs=1e-6)
        assert b.idle_by_device[d] == pytest.approx(a.idle_by_device[d], rel=1e-9, abs=1e-6)
    assert b.unmeasured_s == pytest.approx(a.unmeasured_s)
    for h in holds:
        assert eager.job(h.job).unmeasured_s == pytest.approx(lazy.job(h.job).unmeasured_s)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.floats(0, 2000), min_size=2, max_size=30), st.floats(0.1, 10))
def test_a_steady_counter_gives_its_difference(steps: list[float], dt: float) -> None:
    e, samples = 0.0, []
    for k, x in enumerate(steps):
        e += x
        samples.append(s("a", k * dt, None, e))
    m = EnergyMeter()
    m.extend(samples)
    assert m.report().total_j == pytest.approx(e - steps[0], rel=1e-9, abs=1e-6)


# ----- cost -------------------------------------------------------------------------------


class _OverBudgetError(Exception):
    pass


def test_each_job_end_costs_its_own_intervals_not_every_job_of_the_window(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # 5,000 jobs of 10 ms one after the other on one device sampled every second, all within
    # the settle window (60 s), each job's figure asked for as it ends (as the controller
    # does): the work, counted in pieces of intervals integrated, stays a few per job. The
    # quadratic meter cut every pending interval at every hold in it at every job end
    # (about 2 x 5,000^2 / 2 pieces); it fails here at once, by count, not by time.
    jobs, per_second = 5000, 100
    budget = 10 * jobs
    count = 0
    part = _Seg.part

    def counted(seg: _Seg, u: float, v: float) -> float:
        nonlocal count
        count += 1
        if count > budget:
            raise _OverBudgetError(f"more than {budget} pieces integrated for {jobs} jobs")
        return part(seg, u, v)

    monkeypatch.setattr(_Seg, "part", counted)
    m = EnergyMeter(settle_s=60.0)
    m.add(s("a", 0.0, 100.0))
    for k in range(jobs):
        t = k / per_second
        if k and k % per_second == 0:
            m.add(s("a", t, 100.0))
        m.start(f"j{k}", ["a"], t + 0.001)
        m.stop(f"j{k}", t + 0.009)
        e = m.job(f"j{k}")
        assert e.held_s == pytest.approx(0.008)
    m.add(s("a", jobs / per_second, 100.0))
    assert count <= budget, count
    # and the figures are right: 100 W for 8 ms is 0.8 J each, the rest idle
    r = m.report()
    assert r.by_job["j0"] == pytest.approx(0.8) and r.by_job[f"j{jobs - 1}"] == pytest.approx(0.8)
    assert math.fsum(r.by_job.values()) == pytest.approx(0.8 * jobs)
    assert r.idle_by_device["a"] + math.fsum(r.by_job.values()) == pytest.approx(r.by_device["a"])
    assert r.by_device["a"] == pytest.approx(100.0 * jobs / per_second)
    assert m.job("j4999").measured_j == pytest.approx(0.8)
