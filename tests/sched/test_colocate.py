"""Packed pairs realised by the round scheduler: both jobs on the same devices at half a
share each, a running job stopped only to be packed anew, a mate joining a packed job
whose partner left, quotas charged by halves; and the packed LP checked by hand."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

import numpy as np
import pytest

from accelnet.fabric.build import build_fabric, parse_spec
from accelnet.sched import Decision, JobSpec, JobState, JobView, Snapshot, Tenant
from accelnet.sched.colocate import PackedAllocation, current_mates
from accelnet.sched.policies.hetero_jct import HeteroJct
from accelnet.sched.rounds import Allocation, RoundContext, RoundPolicy, RoundScheduler

from .test_rounds import VIA, Decider, fabric, job, rates_of, running

TWO_V100 = fabric(("v", "2xV100"))
RATES = rates_of({n: {"V100": 1.0} for n in "abcdx"})


def pair_rates(a: JobSpec, b: JobSpec, model: str, count: int) -> tuple[float, float] | None:
    """Every pair keeps 0.8 of its rate on a V100 except with d (does not fit)."""
    return None if "d" in (a.name, b.name) else (0.8, 0.8)


class Packs(RoundPolicy):
    """Packs the pairs it is told to, each on the V100, and runs the rest alone."""

    name = "packs"
    packs = True

    def __init__(self, pairs: list[tuple[str, str]], alone: Sequence[str] = ()) -> None:
        self.pairs, self.alone = pairs, list(alone)
        self.seen: RoundContext | None = None

    def allocate(self, ctx: RoundContext) -> Allocation:
        self.seen = ctx
        return PackedAllocation({j: {"V100": 1.0} for j in self.alone},
                                {p: {"V100": 1.0} for p in self.pairs})  # fmt: skip

    def order_units(self, ctx: RoundContext, x: Allocation) -> list[tuple[tuple[str, ...], str]]:
        return [*((p, "V100") for p in self.pairs), *(((j,), "V100") for j in self.alone)]


def placements(d: Decision) -> dict[str, tuple[tuple[str, ...], float]]:
    return {s.job: (s.placement.devices, s.placement.share) for s in d.starts}


@VIA
def test_a_planned_pair_starts_on_the_same_devices_at_half_each(via_session: bool) -> None:
    policy = Packs([("a", "b")], alone=["c"])
    sched = RoundScheduler(policy, round_s=100.0, rates=RATES, colocated=pair_rates)
    decide = Decider(sched, TWO_V100, via_session)
    d = decide(0.0, [job("a", 0.0), job("b", 0.0), job("c", 0.0), job("d", 0.0)])
    got = placements(d)
    assert set(got) == {"a", "b", "c"}  # d: not planned, no room left
    assert got["a"] == got["b"] and got["a"][1] == 0.5
    assert got["c"][1] == 1.0 and got["c"][0] != got["a"][0]  # the other V100, whole
    assert sched._mate == {"a": "b", "b": "a"}
    assert policy.seen is not None and policy.seen.colocated is not None
    assert policy.seen.colocated("a", "b", "V100") == (0.8, 0.8)
    assert policy.seen.colocated("a", "d", "V100") is None


def test_a_policy_that_does_not_pack_gets_no_pair_rates() -> None:
    class Alone(Packs):
        packs = False

    policy = Alone([], alone=["a"])
    RoundScheduler(policy, round_s=100.0, rates=RATES, colocated=pair_rates).decide(
        Snapshot.all_ready(TWO_V100, (job("a", 0.0),), 0.0)
    )
    assert policy.seen is not None and policy.seen.colocated is None


def test_a_job_running_whole_stops_at_the_round_to_be_packed() -> None:
    policy = Packs([], alone=["a"])
    sched = RoundScheduler(policy, round_s=100.0, rates=RATES, colocated=pair_rates)
    a, b = job("a", 0.0), job("b", 50.0)
    first = sched.decide(Snapshot.all_ready(TWO_V100, (a,), 0.0))
    a_run = running(a, TWO_V100, first, 0.0)
    assert a_run.placement is not None and a_run.placement.share == 1.0
    policy.pairs, policy.alone = [("a", "b")], []
    # mid-round: running jobs keep their plans, so a cannot be packed with b yet
    mid = sched.decide(Snapshot.all_ready(TWO_V100, (a_run, b), 50.0))
    assert not mid.preemptions and not mid.starts
    # the next round stops a, to start the two together: b places the pair on the V100 a
    # does not hold, and a joins it there once requeued
    nxt = sched.decide(Snapshot.all_ready(TWO_V100, (a_run, b), 100.0))
    assert [(p.job, p.reason) for p in nxt.preemptions] == [("a", "packs round: packed anew")]
    assert a_run.placement is not None
    (free,) = {d for d in TWO_V100.devices} - set(a_run.placement.devices)
    assert placements(nxt) == {"b": ((free,), 0.5)}
    b_run = running(b, TWO_V100, nxt, 100.0)
    # while a is being stopped, nobody else takes the half kept for it
    d = job("d", 101.0, acc="V100:0.5")
    policy.alone = ["d"]
    stopping = replace(a_run, state=JobState.PREEMPTING)
    mid = sched.decide(Snapshot.all_ready(TWO_V100, (stopping, b_run, d), 101.0))
    assert "d" not in placements(mid)
    requeued = replace(a_run, state=JobState.ADMITTED, placement=None)
    last = sched.decide(Snapshot.all_ready(TWO_V100, (requeued, b_run), 102.0))
    assert placements(last) == {"a": ((free,), 0.5)}


def test_a_new_mate_joins_a_packed_job_whose_partner_left() -> None:
    policy = Packs([("a", "b")])
    sched = RoundScheduler(policy, round_s=100.0, rates=RATES, colocated=pair_rates)
    a, b, c = job("a", 0.0), job("b", 0.0), job("c", 10.0)
    first = sched.decide(Snapshot.all_ready(TWO_V100, (a, b), 0.0))
    a_run = running(a, TWO_V100, first, 0.0)
    assert current_mates([a_run, running(b, TWO_V100, first, 0.0)]) == {"a": "b", "b": "a"}
    policy.pairs = [("a", "c")]  # b has ended; c arrives
    d = sched.decide(Snapshot.all_ready(TWO_V100, (a_run, c), 10.0))
    assert not d.preemptions  # a keeps running: c takes the free half of its device
    assert a_run.placement is not None
    assert placements(d) == {"c": (a_run.placement.devices, 0.5)}
    # and at the next round a, packed with the mate it is planned with, keeps running
    c_run = running(c, TWO_V100, d, 10.0)
    assert not sched.decide(Snapshot.all_ready(TWO_V100, (a_run, c_run), 100.0)).preemptions


def test_a_pair_of_one_tenant_counts_one_device_against_its_quota() -> None:
    policy = Packs([("a", "b")], alone=["c"])
    sched = RoundScheduler(policy, round_s=100.0, rates=RATES, colocated=pair_rates)
    views = [replace(job(n, 0.0), spec=job(n, 0.0).spec.model_copy(update={"tenant": "t"}))
             for n in "abc"]  # fmt: skip
    tenants = {"t": Tenant("t", quota={"V100": 1})}
    d = sched.decide(Snapshot.all_ready(TWO_V100, tuple(views), 0.0, tenants=tenants))
    assert set(placements(d)) == {"a", "b"}  # the pair fits the quota of one V100; c not


def test_a_job_whose_mate_left_holds_half_its_devices_against_the_quota() -> None:
    # a runs packed, its mate gone; b (same tenant, quota one V100) joins it: 0.5 + 0.5
    policy = Packs([("a", "x")])
    sched = RoundScheduler(policy, round_s=100.0, rates=RATES, colocated=pair_rates)
    a, x = (replace(v, spec=v.spec.model_copy(update={"tenant": "t"}))
            for v in (job("a", 0.0), job("x", 0.0)))  # fmt: skip
    tenants = {"t": Tenant("t", quota={"V100": 1})}
    first = sched.decide(Snapshot.all_ready(TWO_V100, (a, x), 0.0, tenants=tenants))
    a_run = running(a, TWO_V100, first, 0.0)
    b = replace(job("b", 10.0), spec=job("b", 10.0).spec.model_copy(update={"tenant": "t"}))
    policy.pairs = [("a", "b")]
    for now in (10.0, 100.0):  # between rounds and at the next round
        d = sched.decide(Snapshot.all_ready(TWO_V100, (a_run, b), now, tenants=tenants))
        assert a_run.placement is not None
        assert placements(d) == {"b": (a_run.placement.devices, 0.5)}, now
        assert not d.preemptions


# ----- the packed LP, by hand ------------------------------------------------------------


def ctx_of(left: Mapping[str, float], factors: tuple[float, float]) -> RoundContext:
    from accelnet.sched.jobinfo import JobInfo

    views = [job(n, 0.0, steps) for n, steps in left.items()]
    ctx = RoundContext.of(views, {"V100": 1}, JobInfo(0.0, RATES))
    return replace(ctx, colocated=lambda a, b, m: factors)


@pytest.mark.parametrize(
    ("factors", "packed"),
    [
        # a: 100 steps left, b: 200, 1 step/s each on the one V100. a alone completes
        # 1/100 of a job a second; the pair completes 0.8/100 + 0.8/200 = 0.012: packed
        ((0.8, 0.8), True),
        # 0.6/100 + 0.6/200 = 0.009 < 0.01: a alone
        ((0.6, 0.6), False),
    ],
)
def test_the_packed_lp_packs_when_the_pair_completes_more(
    factors: tuple[float, float], packed: bool
) -> None:
    x = HeteroJct.packed().allocate(ctx_of({"a": 100.0, "b": 200.0}, factors))
    assert isinstance(x, PackedAllocation)
    if packed:
        assert x.pairs == {("a", "b"): {"V100": pytest.approx(1.0)}}
        assert not x.alone
        assert x["a"] == x["b"] == {"V100": pytest.approx(1.0)}
    else:
        assert not x.pairs
        assert x.alone == {"a": {"V100": pytest.approx(1.0)}}
    assert np.isclose(
        sum(sum(v.values()) for v in x.pairs.values())
        + sum(sum(v.values()) for v in x.alone.values()),
        1.0,
    )  # one device: one unit of time


def test_packing_and_the_guard_do_not_combine() -> None:
    with pytest.raises(ValueError, match="guard and packing"):
        HeteroJct(guard=0.5, packs=True)


def test_live_pair_rates_come_from_both_jobs_hints() -> None:
    from accelnet.sched.jobinfo import hint_pairs

    def spec(colocated: dict[str, float]) -> JobSpec:
        return JobSpec.model_validate({"name": "j", "run": "x",
                                       "workload": {"colocated": colocated}})  # fmt: skip

    a, b, none = spec({"V100": 0.7}), spec({"tesla-v100": 0.6, "A100": 0.9}), spec({})
    assert hint_pairs(a, b, "V100", 1) == (0.7, 0.6)  # an alias names the model
    assert hint_pairs(b, a, "V100", 2) == (0.6, 0.7)
    assert hint_pairs(a, b, "A100", 1) is None  # a gave no figure for an A100
    assert hint_pairs(a, none, "V100", 1) is None
    with pytest.raises(ValueError, match="less than or equal to 1"):
        spec({"V100": 1.5})


@pytest.mark.parametrize(
    ("factors", "packed"),
    [
        # one V100, a and b alike: apart, each gets half of it (level 1 over its equal
        # share); together each keeps 0.8 of its rate all the time: level 1.6, packed
        ((0.8, 0.8), True),
        # together each keeps 0.4 < 0.5: apart is fairer
        ((0.4, 0.4), False),
    ],
)
def test_hetero_fair_packed_packs_when_every_job_gains(
    factors: tuple[float, float], packed: bool
) -> None:
    from accelnet.sched.policies.hetero_fair import HeteroFair

    x = HeteroFair.packed().allocate(ctx_of({"a": 100.0, "b": 200.0}, factors))
    if packed:
        assert isinstance(x, PackedAllocation)
        assert x.pairs == {("a", "b"): {"V100": pytest.approx(1.0)}}
    else:
        assert not getattr(x, "pairs", {})
        assert x["a"]["V100"] == pytest.approx(0.5) and x["b"]["V100"] == pytest.approx(0.5)


def test_pairs_rank_among_jobs_alone_by_gavels_priority() -> None:
    # the default order puts a unit never served first: the pair (never served together)
    # before c (alone, never served either, but later in the queue)
    ctx = ctx_of({"a": 100.0, "b": 200.0, "c": 50.0}, (0.8, 0.8))
    x = PackedAllocation({"c": {"V100": 0.5}}, {("a", "b"): {"V100": 0.5}})
    units = RoundPolicy.order_units(HeteroJctLike(), ctx, x)
    assert units[:2] == [(("a", "b"), "V100"), (("c",), "V100")]


class HeteroJctLike(RoundPolicy):
    """A policy with the default orders."""

    def allocate(self, ctx: RoundContext) -> Allocation:
        return {}


# -- a pair's devices suit both members (found by review; each failed before the fix) ------

SMALL_AND_BIG_V100 = build_fabric(parse_spec({
    "name": "mem",
    "switches": [{"name": "leaf", "kind": "leaf"}],
    "hosts": [{"name": n, "devices": {"model": "V100", "count": 1, "memory_gb": gb},
               "nics": "IB-EDR", "network": "leaf"} for n, gb in (("small", 16), ("big", 32))],
}, "<mem>"))  # fmt: skip


def test_a_pair_is_placed_where_both_members_requests_allow() -> None:
    fab = SMALL_AND_BIG_V100
    (big,) = {d for d, dev in fab.devices.items() if dev.memory_gb >= 30}
    sched = RoundScheduler(Packs([("a", "b")]), round_s=100.0, rates=RATES, colocated=pair_rates)
    a = job("a", 0.0, acc="V100:1")
    b = replace(job("b", 0.0), spec=JobSpec.model_validate({
        "name": "b", "run": "x", "checkpointable": True,
        "resources": {"accelerators": "V100:1", "min_memory_gb": 30},
    }))  # fmt: skip
    d = sched.decide(Snapshot.all_ready(fab, (a, b), 0.0))
    # b asked for 30 GB: the pair goes to the 32 GB V100, not the 16 GB one a alone allows
    assert placements(d) == {"a": ((big,), 0.5), "b": ((big,), 0.5)}


class PacksOn(RoundPolicy):
    """Packs the pairs it is told to, each on its model."""

    name = "packs-on"
    packs = True

    def __init__(self, units: list[tuple[tuple[str, str], str]]) -> None:
        self.units = units

    def allocate(self, ctx: RoundContext) -> Allocation:
        return PackedAllocation({}, {p: {m: 1.0} for p, m in self.units})

    def order_units(self, ctx: RoundContext, x: Allocation) -> list[tuple[tuple[str, ...], str]]:
        return list(self.units)


def test_a_joiner_never_joins_a_job_that_is_moving_to_another_model() -> None:
    fab = fabric(("v", "1xV100"), ("k", "1xK80"))
    rates = rates_of({n: {"V100": 1.0, "K80": 1.0} for n in "acx"})
    policy = PacksOn([(("a", "x"), "K80")])
    sched = RoundScheduler(policy, round_s=100.0, rates=rates, colocated=pair_rates)
    a, x = job("a", 0.0), job("x", 0.0)
    a_run = running(a, fab, sched.decide(Snapshot.all_ready(fab, (a, x), 0.0)), 0.0)
    assert a_run.placement is not None and a_run.placement.model == "K80"
    # x has ended; c (V100 only) arrives; the next round packs a with c on the V100
    policy.units = [(("a", "c"), "V100")]
    c = job("c", 50.0, acc="V100:1")
    d = sched.decide(Snapshot.all_ready(fab, (a_run, c), 100.0))
    assert [p.job for p in d.preemptions] == ["a"]  # a moves to the V100
    # c places the pair on the V100 (it used to join a on the K80 a was leaving)
    assert {s.job: s.placement.model for s in d.starts} == {"c": "V100"}


def test_the_half_planned_for_a_joiner_is_kept_for_it() -> None:
    policy = Packs([("b", "x")])
    sched = RoundScheduler(policy, round_s=100.0, rates=RATES, colocated=pair_rates)
    b, x = job("b", 0.0, acc="V100:1"), job("x", 0.0, acc="V100:1")
    b_run = running(b, TWO_V100, sched.decide(Snapshot.all_ready(TWO_V100, (b, x), 0.0)), 0.0)
    # x has ended; d (half a V100, earlier in the queue) and c (to join b) arrive
    policy.pairs, policy.alone = [("b", "c")], ["d"]
    f, c = job("d", 5.0, acc="V100:0.5"), job("c", 6.0, acc="V100:1")
    d = sched.decide(Snapshot.all_ready(TWO_V100, (b_run, f, c), 10.0))
    assert b_run.placement is not None
    # c joins b; d takes the other V100 (it used to take b's free half: c then waited
    # round after round beside an idle V100)
    got = placements(d)
    assert got["c"] == (b_run.placement.devices, 0.5)
    assert got["d"][0] != b_run.placement.devices


def test_a_waiting_reason_names_no_other_tenants_job() -> None:
    fab = SMALL_AND_BIG_V100

    def big(name: str, t: float, tenant: str = "default") -> JobView:
        body = {"name": name, "run": "x", "checkpointable": True, "tenant": tenant,
                "resources": {"accelerators": "V100:1", "min_memory_gb": 30}}  # fmt: skip
        return replace(job(name, t), spec=JobSpec.model_validate(body))

    policy = Packs([], alone=["d"])
    sched = RoundScheduler(policy, round_s=100.0, rates=RATES, colocated=pair_rates)
    d = big("d", 0.0)
    d_run = running(d, fab, sched.decide(Snapshot.all_ready(fab, (d,), 0.0)), 0.0)
    policy.pairs = [("a", "x")]
    a, x = job("a", 1.0, acc="V100:1"), job("x", 1.0, acc="V100:1")
    a_run = running(a, fab, sched.decide(Snapshot.all_ready(fab, (d_run, a, x), 1.0)), 1.0)
    assert a_run.placement is not None and a_run.placement.devices == ("small/gpu0",)
    # x has ended; c, another tenant's, is planned beside a but needs 30 GB: it waits, and
    # its reason does not name a
    policy.pairs = [("a", "c")]
    c = big("c", 10.0, tenant="other")
    out = sched.decide(Snapshot.all_ready(fab, (d_run, a_run, c), 10.0))
    assert out.waiting["c"] == "planned packed with a job: waiting for its devices"


def test_hetero_fair_packed_keeps_an_answer_only_for_the_same_jobs_and_pair_rates() -> None:
    from accelnet.sched.policies.hetero_fair import HeteroFair

    def with_rates(
        ctx: RoundContext, factors: tuple[float, float], source: object | None
    ) -> RoundContext:
        return replace(ctx, colocated=lambda a, b, m: factors, pair_source=source)

    policy = HeteroFair.packed()
    base = ctx_of({"a": 100.0, "b": 200.0}, (0.8, 0.8))
    good, bad = object(), object()  # two sources of pair rates (a scheduler's function)
    first = policy.allocate(with_rates(base, (0.8, 0.8), good))
    assert isinstance(first, PackedAllocation) and first.pairs
    apart = policy.allocate(with_rates(base, (0.4, 0.4), bad))  # another source: solved
    assert not getattr(apart, "pairs", {}) and policy._packs_solved.hits == 0
    again = policy.allocate(with_rates(base, (0.8, 0.8), good))  # the same question: kept
    assert policy._packs_solved.hits == 1
    assert isinstance(again, PackedAllocation) and again is not first
    assert again == first and again.pairs == first.pairs
    # another job in b's place (same id, another spec): solved anew
    other = replace(base, jobs=[base.jobs[0], job("b", 0.0, 200.0)])
    policy.allocate(with_rates(other, (0.8, 0.8), good))
    assert policy._packs_solved.hits == 1
    # without a source (rates that may change from call to call) nothing is kept
    loose = HeteroFair.packed()
    assert getattr(loose.allocate(with_rates(base, (0.8, 0.8), None)), "pairs", {})
    assert not getattr(loose.allocate(with_rates(base, (0.4, 0.4), None)), "pairs", {})
    assert loose._packs_solved.hits == loose._packs_solved.misses == 0
