"""A large gang under a steady stream of small jobs (issue 22): plain backfill starves it;
a reservation (``reserve_after_s``) starts it within a bound; a locality wait
(``topology.wait_s``) keeps a gang on one host instead of spreading it."""

from __future__ import annotations

from typing import Any

import pytest

from accelnet.sched import Scheduler
from accelnet.sim.engine import Simulation
from accelnet.sim.records import JobOutcome
from accelnet.sim.throughput import ThroughputModel
from accelnet.sim.workload import DeviceFailure, SimJob, prefer_one_host

from .test_engine import fabric  # two hosts of four V100s here

# "toy" runs 1 step/s per V100 in one host; a gang spread over hosts runs at half that
RATES = ThroughputModel(
    {"v100": {"toy": {1: 1.0, 2: 2.0, 3: 3.0, 4: 4.0}}},
    reference="V100",
    unconsolidated={"v100": {"toy": {2: 1.0, 3: 1.5, 4: 2.0}}},
)
SMALL_S = 100.0  # each small job runs 100 s on one GPU
EVERY_S = 10.0  # and one arrives every 10 s: 10 GPUs' worth of work on 8, the queue grows
LAST_SMALL = 20_000.0
GANG_AT = 1_000.0


def stream(gang_work: float = 400.0) -> list[SimJob]:
    small = [
        SimJob(f"s{i:05d}", i * EVERY_S, "toy", 1, SMALL_S)
        for i in range(int(LAST_SMALL / EVERY_S) + 1)
    ]
    return [*small, SimJob("gang", GANG_AT, "toy", 4, gang_work)]


def run(jobs: list[SimJob], **sched: Any) -> dict[str, JobOutcome]:
    sim = Simulation(fabric(2, 4), jobs, Scheduler(**sched), RATES, forget_finished=True)
    return {o.id: o for o in sim.run().jobs}


def test_plain_backfill_starves_a_gang_while_small_jobs_keep_coming() -> None:
    gang = run(stream())["gang"]
    assert gang.first_start is not None
    # every GPU that frees up goes to a small job behind the gang: it starts only once
    # the small jobs stop coming
    assert gang.first_start > LAST_SMALL


@pytest.mark.parametrize("after_s", [0.0, 300.0, 2_000.0])
def test_a_reservation_starts_the_gang_within_a_bound(after_s: float) -> None:
    out = run(stream(), reserve_after_s=after_s)
    gang = out["gang"]
    assert gang.first_start is not None and gang.state == "succeeded"
    # the jobs ahead of it in the queue at its arrival start first (FIFO), then a host is
    # held once it has waited after_s: its running jobs end within SMALL_S
    ahead = max(o.first_start or 0.0 for o in out.values() if o.arrival < GANG_AT)
    bound = max(ahead, GANG_AT + after_s) + SMALL_S + EVERY_S
    assert gang.first_start <= bound
    # it ran on one host (the held one), at the one-host rate: 400 steps at 4 steps/s
    assert gang.run_s == pytest.approx(100.0)
    # and the small jobs went on running meanwhile, on the other host
    during = [o for o in out.values() if o.id != "gang" and GANG_AT < (o.first_start or 0.0)
              < gang.first_start]  # fmt: skip
    assert during


def test_a_reservation_waits_for_its_time() -> None:
    # held only once it has waited reserve_after_s: until then it backfills as before
    out = run(stream(), reserve_after_s=5_000.0)
    gang = out["gang"]
    assert gang.first_start is not None
    assert GANG_AT + 5_000.0 <= gang.first_start <= GANG_AT + 5_000.0 + SMALL_S + EVERY_S


def test_a_locality_wait_keeps_a_gang_on_one_host() -> None:
    # x and y hold 3 of each host's 4 GPUs; y ends at 200 s. The 2-GPU gang arriving at
    # 1 s finds one free GPU on each host: spread, it starts at once at half the rate;
    # waiting for one host, it starts when y ends, at the full rate, and ends sooner
    jobs = [
        SimJob("x", 0.0, "toy", 3, 3_000.0),  # 1,000 s on host 0
        SimJob("y", 0.0, "toy", 3, 600.0),  # 200 s on host 1
        SimJob("gang", 1.0, "toy", 2, 1_000.0),
    ]  # fmt: skip
    spread = run(jobs)["gang"]
    kept = run(list(prefer_one_host(jobs, 10_000.0)))["gang"]
    assert spread.first_start == pytest.approx(1.0)
    assert spread.run_s == pytest.approx(1_000.0)  # 1,000 steps at 1 step/s, spread
    assert kept.first_start == pytest.approx(200.0)
    assert kept.run_s == pytest.approx(500.0)  # at 2 steps/s, on one host
    assert kept.end is not None and spread.end is not None and kept.end < spread.end


def test_a_locality_wait_ends_and_the_gang_spreads() -> None:
    # no host frees up for long: once wait_s is over it takes the spread placement, at
    # that moment, though nothing else happens then
    jobs = [
        SimJob("x", 0.0, "toy", 3, 30_000.0),  # 10,000 s on each host
        SimJob("y", 0.0, "toy", 3, 30_000.0),
        SimJob("gang", 1.0, "toy", 2, 400.0),
    ]  # fmt: skip
    gang = run(list(prefer_one_host(jobs, 300.0)))["gang"]
    assert gang.first_start == pytest.approx(301.0)
    assert gang.run_s == pytest.approx(400.0)  # spread: 1 step/s


def test_a_locality_wait_is_checked() -> None:
    with pytest.raises(ValueError, match="locality wait"):
        list(prefer_one_host([SimJob("g", 0.0, "toy", 2, 1.0)], -1.0))


def test_a_locality_wait_ends_though_nothing_else_is_left_to_happen() -> None:
    # one GPU of each host has failed for good: no event will ever come; the gang's wait
    # for one host runs out at 301 s and it starts spread
    faults = [DeviceFailure(0.0, "h0/gpu0", None), DeviceFailure(0.0, "h1/gpu0", None)]
    jobs = list(prefer_one_host([SimJob("gang", 1.0, "toy", 4, 400.0)], 300.0))
    sim = Simulation(fabric(2, 4), jobs, Scheduler(), RATES, failures=faults, forget_finished=True)
    gang = {o.id: o for o in sim.run().jobs}["gang"]
    assert gang.first_start == pytest.approx(301.0)
