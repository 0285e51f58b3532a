"""A round policy's re-allocation interval (``min_reallocation_s``, Gavel's
``minimum_time_between_allocation_resets``): the allocation is solved anew only when the
jobs changed, at most once per interval; meanwhile the last one stands."""

from __future__ import annotations

from typing import Any

import pytest

from accelnet.devices import DeviceState
from accelnet.fabric import load_fabric
from accelnet.sched import Snapshot
from accelnet.sched.colocate import PackedAllocation
from accelnet.sched.policies import make_scheduler as sched_make
from accelnet.sched.policies.hetero_fair import HeteroFair
from accelnet.sched.rounds import Allocation, RoundContext, RoundPolicy, RoundScheduler
from accelnet.sim.engine import Simulation
from accelnet.sim.policies import make_scheduler
from accelnet.sim.throughput import ThroughputModel
from accelnet.sim.traces import stream_trace

from .test_rounds import (
    K80,
    V100,
    V100_K80,
    VIA,
    Decider,
    fabric,
    job,
    models_started,
    rates_of,
    running,
)

TABLE = {n: {"V100": 4.0, "K80": 1.0} for n in ("a", "b", "c")}


class Counting(HeteroFair):
    """hetero-fair, counting its solves and the jobs each was for."""

    def __init__(self) -> None:
        super().__init__()
        self.solves: list[set[str]] = []

    def allocate(self, ctx: RoundContext) -> Allocation:
        self.solves.append({j.id for j in ctx.jobs})
        return super().allocate(ctx)


@VIA
def test_without_an_interval_every_change_of_the_jobs_is_solved_anew(via_session: bool) -> None:
    policy = Counting()
    decide = Decider(RoundScheduler(policy, round_s=100.0, rates=rates_of(TABLE)), V100_K80,
                     via_session)  # fmt: skip
    a = job("a", 0.0)
    d = decide(1.0, [a])
    decide(2.0, [running(a, V100_K80, d, 1.0), job("b", 2.0)])
    assert policy.solves == [{"a"}, {"a", "b"}]


@VIA
def test_with_an_interval_the_last_allocation_stands_until_it_is_due(via_session: bool) -> None:
    policy = Counting()
    sched = RoundScheduler(policy, round_s=100.0, rates=rates_of(TABLE), min_reallocation_s=1000.0)
    decide = Decider(sched, V100_K80, via_session)
    a = job("a", 0.0)
    d = decide(1.0, [a])
    assert policy.solves == [{"a"}] and models_started(d) == {"a": "V100"}
    ra = running(a, V100_K80, d, 1.0)
    # b arrives: not solved again, and b has no allocation, yet it takes the K80 nobody
    # allocated uses (work conservation)
    d = decide(2.0, [ra, job("b", 2.0)])
    assert policy.solves == [{"a"}]
    assert models_started(d) == {"b": "K80"}
    assert d.time_shares is not None and set(d.time_shares) == {"a"}
    rb = running(job("b", 2.0), V100_K80, d, 2.0)
    # a new round before the interval is due: the allocation stands (b still has none)
    decide(150.0, [ra, rb])
    assert policy.solves == [{"a"}]
    # the jobs changed since the last solve and the interval has passed: solved for both
    decide(1500.0, [ra, rb])
    assert policy.solves == [{"a"}, {"a", "b"}]
    # a ends before the next solve is due: its allocation is dropped, nothing is solved
    d = decide(1600.0, [rb])
    assert policy.solves == [{"a"}, {"a", "b"}]
    assert d.time_shares is not None and set(d.time_shares) == {"b"}
    # c arrives once the interval has passed again: solved for b and c
    d = decide(2600.0, [rb, job("c", 2600.0)])
    assert policy.solves[-1] == {"b", "c"} and len(policy.solves) == 3
    rc = running(job("c", 2600.0), V100_K80, d, 2600.0)
    # rounds go by with the same jobs: never solved again (Gavel's rule), however long
    for t in (3700.0, 5000.0, 9000.0):
        decide(t, [rb, rc])
    assert len(policy.solves) == 3


class Pairs(RoundPolicy):
    """Allocates a and b packed on the V100 (a fixed answer)."""

    name = "pairs"
    packs = True

    def allocate(self, ctx: RoundContext) -> Allocation:
        return PackedAllocation({"c": {"K80": 1.0}}, {("a", "b"): {"V100": 1.0}})


def test_a_standing_packed_allocation_drops_a_pair_with_a_member_gone() -> None:
    sched = RoundScheduler(Pairs(), round_s=100.0, rates=rates_of(TABLE), min_reallocation_s=1e6)
    decide = Decider(sched, V100_K80, via_session=True)
    a, b, c = job("a", 0.0), job("b", 0.0), job("c", 0.0)
    d = decide(1.0, [a, b, c])
    assert set(models_started(d)) == {"a", "b", "c"}
    # b is gone (cancelled before it ran on): the pair goes with it, the rest stands
    ra = running(a, V100_K80, d, 1.0)
    rc = running(c, V100_K80, d, 1.0)
    d = decide(2.0, [ra, rc])
    assert d.time_shares is not None and set(d.time_shares) == {"c"}
    x = sched._x  # the standing allocation itself
    assert isinstance(x, PackedAllocation) and x.pairs == {} and set(x.alone) == {"c"}


def test_the_interval_is_for_round_policies_and_not_negative() -> None:
    with pytest.raises(ValueError, match="min_reallocation_s applies to the round policies"):
        sched_make("fifo", min_reallocation_s=60.0)
    with pytest.raises(ValueError, match="min_reallocation_s must be >= 0"):
        sched_make("hetero-fair", min_reallocation_s=-1.0)
    with pytest.raises(ValueError, match="min_reallocation_s must be >= 0"):
        sched_make("hetero-fair", min_reallocation_s=float("nan"))
    made = sched_make("hetero-fair", min_reallocation_s=1920.0)
    assert isinstance(made, RoundScheduler) and made.min_reallocation_s == 1920.0


def _run(interval: float) -> tuple[Any, int]:
    model = ThroughputModel.gavel()
    sched = make_scheduler("hetero-fair", model, min_reallocation_s=interval)
    assert isinstance(sched, RoundScheduler)
    policy = Counting()
    sched.policy = policy
    stream = stream_trace("gavel-gen:n=60,lam=600,seed=3", model, 3)
    result = Simulation(load_fabric("gavel-48"), stream.jobs, sched, model, seed=3).run()
    return result, len(policy.solves)


def test_in_the_simulator_an_interval_solves_less_and_every_job_still_ends() -> None:
    (every, solves_every), (gavel, solves_gavel) = _run(0.0), _run(1920.0)
    assert len(every.jobs) == len(gavel.jobs) == 60
    assert all(j.end is not None for j in gavel.jobs)
    assert solves_gavel < solves_every / 2


def test_a_job_that_leaves_and_comes_back_is_solved_for_when_due() -> None:
    # b waits out a retry backoff (hidden from the scheduler) and comes back: the jobs are
    # the same as at the last solve, but the allocation had dropped b, so it is stale
    policy = Counting()
    sched = RoundScheduler(policy, round_s=100.0, rates=rates_of(TABLE), min_reallocation_s=1000.0)
    a, b = job("a", 0.0), job("b", 0.0)
    sched.decide(Snapshot.all_ready(V100_K80, (a, b), 1.0))
    sched.decide(Snapshot.all_ready(V100_K80, (a,), 3.0))  # b away: dropped, not solved
    d = sched.decide(Snapshot.all_ready(V100_K80, (a, b), 500.0))  # back, not yet due
    assert len(policy.solves) == 1 and d.time_shares is not None and set(d.time_shares) == {"a"}
    d = sched.decide(Snapshot.all_ready(V100_K80, (a, b), 1500.0))  # due: solved for both
    assert policy.solves[-1] == {"a", "b"} and len(policy.solves) == 2
    assert d.time_shares is not None and set(d.time_shares) == {"a", "b"}


def test_a_model_that_is_gone_is_solved_without_at_once() -> None:
    # the V100 drains before the interval is due: a standing allocation on it would plan
    # jobs onto devices that are not there (and hetero-jct-packed's pairs raised KeyError)
    policy = Counting()
    sched = RoundScheduler(policy, round_s=100.0, rates=rates_of(TABLE), min_reallocation_s=1e6)
    a, b = job("a", 0.0), job("b", 0.0)
    first = sched.decide(Snapshot.all_ready(V100_K80, (a, b), 1.0))
    assert first.time_shares is not None and "V100" in str(first.time_shares)
    drained = {V100: DeviceState.DRAINING, K80: DeviceState.READY}
    d = sched.decide(Snapshot(V100_K80, 150.0, drained, (a, b)))
    assert len(policy.solves) == 2
    assert d.time_shares is not None and "V100" not in str(d.time_shares)


def test_hetero_jct_packed_plans_under_a_standing_allocation_after_a_drain() -> None:
    from accelnet.sched.policies.hetero_jct import HeteroJct

    def pairs(x: Any, y: Any, model: str, count: int) -> tuple[float, float]:
        return (0.9, 0.9)

    two = fabric(("v", "2xV100"), ("k", "2xK80"))
    sched = RoundScheduler(HeteroJct.packed(), round_s=100.0, rates=rates_of(TABLE),
                           colocated=pairs, min_reallocation_s=1e6)  # fmt: skip
    jobs = (job("a", 0.0, steps=1e6), job("b", 0.0, steps=1e6), job("c", 0.0, steps=1e6))
    sched.decide(Snapshot.all_ready(two, jobs, 1.0))
    states = dict.fromkeys(two.devices, DeviceState.READY)
    states.update({d: DeviceState.DRAINING for d in two.devices if d.startswith("v/")})
    d = sched.decide(Snapshot(two, 150.0, states, jobs))  # no KeyError
    assert all(s.placement.model == "K80" for s in d.starts)
