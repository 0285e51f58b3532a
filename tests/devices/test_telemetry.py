"""The pure telemetry parts: samples and their JSON, the ring buffer, downsampled history,
and the poller on an injected clock."""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from accelnet.devices import (
    DeviceSample,
    Downsampler,
    HistoryBucket,
    Sampler,
    SampleRing,
    coarsen,
    downsample,
)
from accelnet.devices.samplers import Poller, run_polling
from accelnet.devices.telemetry import NUMERIC_FIELDS, SAMPLE_SCHEMA

DEVICES = ("n1/gpu0", "n1/gpu1", "n1/cpu0")
finite = st.floats(min_value=-1e6, max_value=1e6, allow_nan=False)
opt_float = st.none() | finite
opt_int = st.none() | st.integers(min_value=0, max_value=2**53)


@st.composite
def samples(draw: Any, device: str | None = None, time: float | None = None) -> DeviceSample:
    """A sample with any mix of readings present."""
    values: dict[str, Any] = {}
    for f in dataclasses.fields(DeviceSample):
        if f.name in ("device", "time", "source", "errors"):
            continue
        if f.name in ("remap_pending", "remap_failed"):
            values[f.name] = draw(st.none() | st.booleans())
        elif f.name in ("throttle_reasons",):
            values[f.name] = draw(st.none() | st.tuples(st.sampled_from(["gpu_idle", "x"])))
        elif f.name == "xid_events":
            values[f.name] = draw(st.none() | st.lists(st.integers(0, 200), max_size=3).map(tuple))
        elif str(f.type).startswith("int"):
            values[f.name] = draw(opt_int)
        else:
            values[f.name] = draw(opt_float)
    return DeviceSample(
        device=device or draw(st.sampled_from(DEVICES)),
        time=time if time is not None else draw(st.floats(0, 1e6)),
        source=draw(st.sampled_from(["nvml", "host", ""])),
        errors=tuple(draw(st.lists(st.sampled_from(["power_w: GpuIsLost", "e"]), max_size=2))),
        **values,
    )


@st.composite
def light_samples(draw: Any, device: str, time: float) -> DeviceSample:
    """A sample with a few readings of each kind (float, int, bool, Xid codes): cheap to
    draw, enough for the ring and the history."""
    return DeviceSample(
        device,
        time,
        power_w=draw(opt_float),
        temperature_c=draw(opt_float),
        ecc_uncorrected=draw(st.none() | st.integers(0, 10**6)),
        remap_pending=draw(st.none() | st.booleans()),
        xid_events=draw(st.none() | st.lists(st.integers(0, 200), max_size=2).map(tuple)),
    )


@st.composite
def timelines(draw: Any) -> list[DeviceSample]:
    """Samples of a few devices, each device's in time order, interleaved."""
    out = []
    for device in DEVICES[: draw(st.integers(1, 3))]:
        gaps = draw(st.lists(st.floats(0, 30), min_size=1, max_size=15))
        t = draw(st.floats(0, 100))
        for gap in gaps:
            t += gap
            out.append(draw(light_samples(device, t)))
    return sorted(out, key=lambda s: s.time)


# ----- samples ------------------------------------------------------------------------------


@given(samples())
def test_a_sample_survives_json(sample: DeviceSample) -> None:
    data = json.loads(json.dumps(sample.to_json()))
    assert data["schema"] == SAMPLE_SCHEMA
    assert DeviceSample.from_json(data) == sample


def test_bad_json_names_the_problem() -> None:
    good = DeviceSample("n1/gpu0", 1.0, power_w=100.0).to_json()
    with pytest.raises(ValueError, match="schema"):
        DeviceSample.from_json({**good, "schema": "other/v9"})
    with pytest.raises(ValueError, match="powr_w"):
        DeviceSample.from_json({**good, "powr_w": 3})
    with pytest.raises(ValueError, match="'power_w' must be float"):
        DeviceSample.from_json({**good, "power_w": "hot"})
    with pytest.raises(ValueError, match="'pcie_gen' must be int"):
        DeviceSample.from_json({**good, "pcie_gen": 4.5})
    with pytest.raises(ValueError, match="'device'"):
        DeviceSample.from_json({**good, "device": None})


def test_numeric_fields_are_every_single_number_field() -> None:
    expected = {
        f.name
        for f in dataclasses.fields(DeviceSample)
        if str(f.type) in ("float | None", "int | None", "bool | None")
    }
    assert set(NUMERIC_FIELDS) == expected
    assert "time" not in NUMERIC_FIELDS and "energy_j" in NUMERIC_FIELDS


# ----- the ring buffer ---------------------------------------------------------------------


@settings(max_examples=100)
@given(timelines(), st.integers(1, 12), st.floats(0, 400), st.floats(0, 400))
def test_ring_keeps_the_last_samples_of_each_device(
    timeline: list[DeviceSample], capacity: int, a: float, b: float
) -> None:
    ring = SampleRing(capacity)
    ring.extend(timeline)
    since, until = min(a, b), max(a, b)
    for device in {s.device for s in timeline}:
        mine = [s for s in timeline if s.device == device]
        kept = mine[-capacity:]
        assert ring.samples(device) == kept
        assert ring.latest(device) == mine[-1]
        assert ring.window(device, since, until) == [s for s in kept if since <= s.time <= until]
        assert ring.window(device, since) == [s for s in kept if since <= s.time]
    assert len(ring) == sum(min(capacity, sum(s.device == d for s in timeline)) for d in DEVICES)
    assert ring.latest("nowhere") is None and ring.window("nowhere", 0) == []


def test_ring_rejects_time_going_back_and_bad_capacity() -> None:
    ring = SampleRing(3)
    ring.append(DeviceSample("d", 5.0))
    ring.append(DeviceSample("d", 5.0))  # equal times are fine
    with pytest.raises(ValueError, match="older"):
        ring.append(DeviceSample("d", 4.0))
    ring.append(DeviceSample("e", 1.0))  # another device has its own order
    with pytest.raises(ValueError):
        SampleRing(0)


# ----- downsampled history -----------------------------------------------------------------


def brute_force(timeline: list[DeviceSample], width: float) -> dict[tuple[str, float], Any]:
    """(device, bucket start) -> (count, {field: (n, min, mean, max)}, xids)."""
    groups: dict[tuple[str, float], list[DeviceSample]] = {}
    for s in timeline:
        groups.setdefault((s.device, math.floor(s.time / width) * width), []).append(s)
    out = {}
    for key, group in groups.items():
        stats = {}
        for name in NUMERIC_FIELDS:
            vals = [float(getattr(s, name)) for s in group if getattr(s, name) is not None]
            if vals:
                stats[name] = (len(vals), min(vals), sum(vals) / len(vals), max(vals))
        xids = tuple(x for s in group for x in (s.xid_events or ()))
        out[key] = (len(group), stats, xids)
    return out


def summary(buckets: list[HistoryBucket]) -> dict[tuple[str, float], Any]:
    return {
        (b.device, b.start): (
            b.samples,
            {k: (s.n, s.min, s.mean, s.max) for k, s in b.stats.items()},
            b.xid_events,
        )
        for b in buckets
    }


def assert_same(got: dict[Any, Any], want: dict[Any, Any]) -> None:
    assert got.keys() == want.keys()
    for key, (n, stats, xids) in want.items():
        g_n, g_stats, g_xids = got[key]
        assert (g_n, g_xids, g_stats.keys()) == (n, xids, stats.keys())
        for name, (k, lo, mean, hi) in stats.items():
            gk, glo, gmean, ghi = g_stats[name]
            assert (gk, glo, ghi) == (k, lo, hi)
            assert gmean == pytest.approx(mean, rel=1e-9, abs=1e-6)


@settings(max_examples=100)
@given(timelines(), st.sampled_from([1.0, 5.0, 10.0, 60.0]))
def test_downsampling_equals_brute_force(timeline: list[DeviceSample], width: float) -> None:
    buckets = downsample(timeline, width)
    assert_same(summary(buckets), brute_force(timeline, width))
    assert sum(b.samples for b in buckets) == len(timeline)
    for b in buckets:
        for name, s in b.stats.items():
            assert s.min <= s.mean + 1e-9 * abs(s.mean) + 1e-6 and s.mean <= s.max + 1e-6, name


@settings(max_examples=100)
@given(timelines(), st.sampled_from([1.0, 2.0, 5.0]), st.sampled_from([1, 2, 3, 12]))
def test_coarsening_equals_downsampling_at_the_wider_width(
    timeline: list[DeviceSample], width: float, factor: int
) -> None:
    fine = downsample(timeline, width)
    assert_same(
        summary(coarsen(fine, width * factor)), summary(downsample(timeline, width * factor))
    )


@given(timelines())
def test_buckets_close_as_time_moves_on_and_survive_json(timeline: list[DeviceSample]) -> None:
    d = Downsampler(10.0)
    closed: list[HistoryBucket] = []
    for s in timeline:
        for b in d.add(s):
            assert b.end <= s.time  # only a later sample of the device closes its bucket
            closed.append(b)
    opened = d.open_buckets()
    assert {b.device for b in opened} == {s.device for s in timeline}
    last = max(s.time for s in timeline)
    early = d.flush(math.floor(last / 10.0) * 10.0)  # ends at or before: none still filling
    assert all(b.end <= last for b in early)
    rest = d.flush()
    assert sorted((b.device, b.start) for b in early + rest) == sorted(
        (b.device, b.start) for b in opened
    )
    for b in closed + early + rest:
        back = HistoryBucket.from_json(json.loads(json.dumps(b.to_json())))
        assert_same(summary([back]), summary([b]))
        assert (back.throttle_reasons, back.errors) == (b.throttle_reasons, b.errors)


def test_history_rejects_the_past_and_bad_widths() -> None:
    d = Downsampler(10.0)
    d.add(DeviceSample("d", 25.0))
    with pytest.raises(ValueError, match="before its open bucket"):
        d.add(DeviceSample("d", 15.0))
    with pytest.raises(ValueError):
        Downsampler(0)
    with pytest.raises(ValueError, match="multiple"):
        coarsen(downsample([DeviceSample("d", 1.0)], 10.0), 15.0)


def test_a_bucket_keeps_xids_throttle_reasons_and_errors() -> None:
    (b,) = downsample(
        [
            DeviceSample("g", 1.0, power_w=100.0, xid_events=(79,), throttle_reasons=("a",)),
            DeviceSample("g", 2.0, power_w=300.0, xid_events=(), throttle_reasons=("b", "a")),
            DeviceSample("g", 3.0, xid_events=(48, 79), errors=("power_w: GpuIsLost",)),
        ],
        60.0,
    )
    assert (b.start, b.end, b.samples) == (0.0, 60.0, 3)
    assert (b.stats["power_w"].n, b.stats["power_w"].mean) == (2, 200.0)
    assert b.xid_events == (79, 48, 79)
    assert b.throttle_reasons == ("a", "b")
    assert b.errors == ("power_w: GpuIsLost",)
    assert "temperature_c" not in b.stats


# ----- the poller --------------------------------------------------------------------------


class Scripted(Sampler):
    """A sampler that answers from a script, and can be told to fail."""

    source = "scripted"

    def __init__(self, devices: tuple[str, ...], fail_at: set[float] | None = None) -> None:
        self._devices = devices
        self.fail_at = fail_at or set()
        self.times: list[float] = []
        self.closed = False

    def devices(self) -> tuple[str, ...]:
        return self._devices

    def sample(self, now: float) -> list[DeviceSample]:
        if now in self.fail_at:
            raise OSError("sensor went away")
        self.times.append(now)
        return [DeviceSample(d, now, self.source, power_w=now) for d in self._devices]

    def close(self) -> None:
        self.closed = True


class FakeTimer:
    """A performance counter that advances by a fixed step per reading."""

    def __init__(self, step: float) -> None:
        self.t, self.step = 0.0, step

    def __call__(self) -> float:
        self.t += self.step
        return self.t


def test_poller_samples_on_its_period_and_skips_missed_slots() -> None:
    s = Scripted(("a", "b"))
    p = Poller([s], period_s=2.0, ring=SampleRing(4), history=Downsampler(10.0))
    for now in (0.0, 1.0, 1.9, 2.0, 3.5, 4.1, 11.0, 11.5, 12.0):
        p.poll(now)
    assert s.times == [0.0, 2.0, 4.1, 11.0, 12.0]
    assert p.skipped == 2  # the slots at 6 and 8 (10 was due when 11 came)
    assert p.next_due == 14.0
    assert p.ring is not None and [x.time for x in p.ring.samples("a")] == [2.0, 4.1, 11.0, 12.0]
    closed = p.take_history()
    assert [(b.device, b.start, b.samples) for b in closed] == [("a", 0.0, 3), ("b", 0.0, 3)]
    assert p.take_history() == []
    assert len(p.take_history(now=20.0)) == 2
    p.close()
    assert s.closed


def test_a_failing_sampler_does_not_stop_the_others() -> None:
    bad, good = Scripted(("x",), fail_at={1.0}), Scripted(("y",))
    p = Poller([bad, good], period_s=1.0)
    assert [x.device for x in p.poll(0.0)] == ["x", "y"]
    assert [x.device for x in p.poll(1.0)] == ["y"]
    assert p.failures() == {"Scripted": (1, "OSError: sensor went away")}


def test_cost_per_device_per_sample_from_the_timer() -> None:
    p = Poller([Scripted(("a", "b", "c", "d"))], period_s=0.5, timer=FakeTimer(0.001))
    for k in range(10):
        p.poll(k * 0.5)
    (cost,) = p.costs()
    assert (cost.rounds, cost.device_samples) == (10, 40)
    assert cost.seconds == pytest.approx(10 * 0.001)  # one timer step per round
    assert cost.per_device_sample_s == pytest.approx(0.001 / 4)
    assert cost.per_device_per_s(0.5) == pytest.approx(0.0005)


def test_the_real_time_loop_sleeps_until_the_next_slot() -> None:
    clock = {"t": 100.0}
    slept: list[float] = []

    def sleep(dt: float) -> None:
        slept.append(dt)
        clock["t"] += dt + 0.01  # wakes a little late, as a real sleep does

    s = Scripted(("a",))
    batches: list[int] = []
    run_polling(
        Poller([s], 1.0), lambda: clock["t"], sleep, 4, lambda got: batches.append(len(got))
    )
    assert batches == [1, 1, 1, 1]
    assert s.times == pytest.approx([100.0, 101.01, 102.01, 103.01])
    assert len(slept) == 3 and all(dt <= 1.0 for dt in slept)


def test_poller_rejects_a_bad_period() -> None:
    with pytest.raises(ValueError):
        Poller([], period_s=0)
