"""Round scheduling realised as decisions: plans onto allocated models, preemption only at
round boundaries, work conservation; through snapshots, a Session and the simulator."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import pytest

from accelnet.devices import DeviceState
from accelnet.fabric import Fabric
from accelnet.sched import Decision, JobSpec, JobState, JobView, Snapshot
from accelnet.sched.policies.hetero_fair import HeteroFair
from accelnet.sched.policies.ranked import Las, Sjf, Srtf
from accelnet.sched.rounds import (
    Allocation,
    RoundContext,
    RoundPolicy,
    RoundScheduler,
    StopCost,
)
from accelnet.sched.session import Session
from accelnet.sim.engine import Simulation
from accelnet.sim.policies import make_scheduler
from accelnet.sim.throughput import ThroughputModel
from accelnet.sim.workload import SimJob

from .conftest import hosts_fabric

V100, K80 = "v/gpu0", "k/gpu0"


def fabric(*hosts: tuple[str, str]) -> Fabric:
    """One host per (name, devices) on one leaf."""
    return hosts_fabric("rounds", *hosts)


V100_K80 = fabric(("v", "1xV100"), ("k", "1xK80"))
ONE_V100 = fabric(("v", "1xV100"))


def rates_of(table: Mapping[str, Mapping[str, float]]) -> Any:
    """Steps/s from ``table`` (job name -> model -> one device), times the gang."""

    def rate(spec: JobSpec, model: str, count: int) -> float:
        return table[spec.name].get(model, 0.0) * count

    return rate


def job(
    name: str, t: float, steps: float | None = None, acc: str = "any:1", checkpointable: bool = True
) -> JobView:
    body: dict[str, Any] = {"name": name, "run": "x", "checkpointable": checkpointable,
                            "resources": {"accelerators": acc}}  # fmt: skip
    if steps is not None:
        body["workload"] = {"total_steps": steps}
    return JobView(name, JobSpec.model_validate(body), JobState.ADMITTED, t)


def running(view: JobView, fab: Fabric, start: Decision, at: float) -> JobView:
    """``view`` RUNNING where ``start`` placed it, since ``at``."""
    (placed,) = [s.placement for s in start.starts if s.job == view.id]
    assert all(d in fab.devices for d in placed.devices)
    return replace(view, state=JobState.RUNNING, placement=placed, started_at=at, attempts=1)


class Decider:
    """Decisions on a list of job views, through full snapshots or through a Session."""

    def __init__(self, sched: RoundScheduler, fab: Fabric, via_session: bool) -> None:
        self.sched, self.fab = sched, fab
        self.session = (
            Session(sched, fab, dict.fromkeys(fab.devices, DeviceState.READY))
            if via_session
            else None
        )
        self.known: set[str] = set()

    def __call__(self, now: float, jobs: Sequence[JobView]) -> Decision:
        if self.session is None:
            return self.sched.decide(Snapshot.all_ready(self.fab, tuple(jobs), now))
        for gone in self.known - {j.id for j in jobs}:
            self.session.drop(gone)
        for j in jobs:
            self.session.put(j)
        self.known = {j.id for j in jobs}
        return self.session.decide(now)


VIA = pytest.mark.parametrize("via_session", [False, True], ids=["snapshot", "session"])


def models_started(d: Decision) -> dict[str, str]:
    return {s.job: s.placement.model for s in d.starts}


# ----- plans follow the allocation ---------------------------------------------------


@VIA
def test_jobs_start_on_the_models_their_allocation_gives_them(via_session: bool) -> None:
    # a is 4x faster on the V100, b equally fast on both: hetero-fair gives a the V100 and
    # b the K80, although b is first in the queue (and would take the V100 under fifo)
    table = {"a": {"V100": 4.0, "K80": 1.0}, "b": {"V100": 1.0, "K80": 1.0}}
    sched = RoundScheduler(HeteroFair(), round_s=100.0, rates=rates_of(table))
    decide = Decider(sched, V100_K80, via_session)
    d = decide(1.0, [job("b", 0.0), job("a", 1.0)])
    assert models_started(d) == {"a": "V100", "b": "K80"}
    assert {s.job: s.placement.devices for s in d.starts} == {"a": (V100,), "b": (K80,)}
    assert d.preemptions == ()
    assert d.time_shares is not None
    assert d.time_shares["a"] == pytest.approx({"V100": 1.0})
    assert d.time_shares["b"] == pytest.approx({"K80": 1.0})


@VIA
def test_a_job_allowed_only_on_one_model_is_planned_only_there(via_session: bool) -> None:
    # b may run only on the K80, so the V100 goes to a even though b comes first
    table = {"a": {"V100": 1.0, "K80": 1.0}, "b": {"V100": 5.0, "K80": 1.0}}
    sched = RoundScheduler(Srtf(), round_s=100.0, rates=rates_of(table))
    decide = Decider(sched, V100_K80, via_session)
    d = decide(1.0, [job("b", 0.0, steps=10, acc="K80:1"), job("a", 1.0, steps=1000)])
    assert models_started(d) == {"a": "V100", "b": "K80"}


# ----- preemption only at round boundaries -------------------------------------------


@VIA
def test_preemption_happens_only_when_a_round_begins(via_session: bool) -> None:
    table = {"long": {"V100": 1.0}, "short": {"V100": 1.0}}
    sched = RoundScheduler(Srtf(), round_s=100.0, rates=rates_of(table))
    decide = Decider(sched, ONE_V100, via_session)
    long = job("long", 0.0, steps=10_000)
    first = decide(10.0, [long])
    long = running(long, ONE_V100, first, 10.0)
    assert decide(110.0, [long]).preemptions == ()  # round 1 begins: long keeps its device

    # short (100 s) arrives in round 1: srtf ranks it before long (9,860 s left), but
    # between rounds a new plan only fills free devices
    short = job("short", 150.0, steps=100)
    for now in (150.0, 170.0, 199.9):
        d = decide(now, [long, short])
        assert d.preemptions == () and d.starts == (), now
        assert "not planned" in d.waiting["short"]

    # round 2 begins at 200: long is not in the new plan and is stopped; short waits for
    # its device
    d = decide(200.0, [long, short])
    assert [p.job for p in d.preemptions] == ["long"]
    assert "srtf" in d.preemptions[0].reason
    assert d.starts == ()
    assert "planned on V100" in d.waiting["short"]

    # while long saves its work the device is still held: nothing starts, nothing more stops
    stopping = replace(long, state=JobState.PREEMPTING)
    d = decide(200.5, [stopping, short])
    assert d.preemptions == () and d.starts == ()

    # long is requeued with the work it kept; the device goes to short, not back to long
    requeued = replace(long, state=JobState.ADMITTED, placement=None, started_at=None,
                       done=190.0, attained=(("V100", 190.0),))  # fmt: skip
    d = decide(201.0, [requeued, short])
    assert models_started(d) == {"short": "V100"}
    assert "long" in d.waiting


@VIA
@pytest.mark.parametrize(
    ("checkpointable", "cost"),
    [(False, StopCost()), (True, StopCost(restart_s=20_000.0))],
    ids=["not-checkpointable", "stop-costs-more-than-is-left"],
)
def test_a_round_does_not_stop_a_job_that_would_lose_by_it(
    checkpointable: bool, cost: StopCost, via_session: bool
) -> None:
    # as test_preemption_happens_only_when_a_round_begins, but long would lose all its
    # work (not checkpointable), or has less left (9,810 s) than a stop costs: it keeps
    # its device through round 2 and short waits for it
    table = {"long": {"V100": 1.0}, "short": {"V100": 1.0}}
    sched = RoundScheduler(Srtf(), round_s=100.0, rates=rates_of(table), stop_cost=cost)
    decide = Decider(sched, ONE_V100, via_session)
    long = job("long", 0.0, steps=10_000, checkpointable=checkpointable)
    long = running(long, ONE_V100, decide(10.0, [long]), 10.0)
    short = job("short", 150.0, steps=100)
    for now in (200.0, 300.0, 1000.0):
        d = decide(now, [long, short])
        assert d.preemptions == () and d.starts == (), now
        assert "not planned" in d.waiting["short"]


def test_a_stop_costs_the_jobs_grace_and_a_restart() -> None:
    spec = job("a", 0.0).spec  # checkpointable: 30 s to save by default
    assert StopCost().of(spec) == 60.0
    assert StopCost(restart_s=5.0, checkpoint_s=1.0).of(spec) == 6.0
    graced = spec.model_copy(update={"stop_grace_s": 120.0})
    assert StopCost().of(graced) == 150.0


@VIA
def test_a_running_job_still_planned_keeps_its_devices_at_a_new_round(via_session: bool) -> None:
    table = {"a": {"V100": 1.0, "K80": 1.0}, "b": {"V100": 1.0, "K80": 1.0}}
    sched = RoundScheduler(Srtf(), round_s=100.0, rates=rates_of(table))
    decide = Decider(sched, V100_K80, via_session)
    a, b = job("a", 0.0, steps=500), job("b", 0.0, steps=1000)
    d = decide(0.0, [a, b])
    assert len(d.starts) == 2
    a, b = running(a, V100_K80, d, 0.0), running(b, V100_K80, d, 0.0)
    for now in (100.0, 200.0, 300.0):
        d = decide(now, [a, b])
        assert d.preemptions == () and d.starts == (), now


def test_a_job_whose_model_is_drained_does_not_starve_the_others() -> None:
    table = {"a": {"V100": 1.0}, "b": {"V100": 2.0}, "c": {"K80": 1.0}}
    sched = RoundScheduler(HeteroFair(), round_s=100.0, rates=rates_of(table))
    devices = {V100: DeviceState.READY, K80: DeviceState.DRAINING}
    jobs = (job("a", 0.0), job("b", 0.0), job("c", 0.0, acc="K80:1"))
    d = sched.decide(Snapshot(V100_K80, 1.0, devices, jobs))
    assert d.time_shares is not None
    # without c, a and b share the V100 equally (normalised levels 2 x_a = 2 x_b)
    for j in ("a", "b"):
        assert d.time_shares.get(j, {}).get("V100", 0.0) == pytest.approx(0.5, abs=1e-5), j


# ----- work conservation -------------------------------------------------------------


class OnlyA(RoundPolicy):
    """Allocates the V100 to ``a`` and nothing to anyone else."""

    name = "only-a"

    def allocate(self, ctx: RoundContext) -> Allocation:
        return {"a": {"V100": 1.0}}


@VIA
def test_a_job_without_allocation_gets_a_device_no_allocated_job_can_use(
    via_session: bool,
) -> None:
    # b has X = 0 everywhere and comes first in the queue; it must not take the V100 that
    # a is allocated, but the K80, which no allocated job wants, must not sit idle
    table = {"a": {"V100": 4.0, "K80": 1.0}, "b": {"V100": 4.0, "K80": 1.0}}
    sched = RoundScheduler(OnlyA(), round_s=100.0, rates=rates_of(table))
    decide = Decider(sched, V100_K80, via_session)
    d = decide(1.0, [job("b", 0.0), job("a", 1.0)])
    assert models_started(d) == {"a": "V100", "b": "K80"}


@VIA
def test_a_job_without_allocation_still_runs_alone(via_session: bool) -> None:
    table = {"b": {"V100": 4.0, "K80": 1.0}}
    sched = RoundScheduler(OnlyA(), round_s=100.0, rates=rates_of(table))
    decide = Decider(sched, V100_K80, via_session)
    d = decide(1.0, [job("b", 0.0)])
    assert models_started(d) == {"b": "V100"}  # its fastest model


# ----- non-preemptive sjf ------------------------------------------------------------


@VIA
@pytest.mark.parametrize(("policy", "stops"), [(Sjf(), False), (Srtf(), True)],
                         ids=["sjf", "srtf"])  # fmt: skip
def test_sjf_never_preempts_a_running_job(
    via_session: bool, policy: RoundPolicy, stops: bool
) -> None:
    table = {"long": {"V100": 1.0}, "short": {"V100": 1.0}}
    sched = RoundScheduler(policy, round_s=100.0, rates=rates_of(table))
    decide = Decider(sched, ONE_V100, via_session)
    long = job("long", 0.0, steps=10_000)
    long = running(long, ONE_V100, decide(10.0, [long]), 10.0)
    short = job("short", 60.0, steps=100)
    preempted = []
    for now in (60.0, 100.0, 200.0, 300.0):
        d = decide(now, [long, short])
        assert "short" not in models_started(d)
        preempted += [p.job for p in d.preemptions]
        if preempted:
            break
    # the control: srtf stops long at the first round boundary after short arrives
    assert preempted == (["long"] if stops else [])
    if not stops:  # long ends: short starts at once, mid-round
        assert models_started(decide(350.0, [short])) == {"short": "V100"}


# ----- through the simulator ---------------------------------------------------------

TOY = ThroughputModel({"v100": {"toy": {1: 1.0, 2: 2.0}}}, reference="V100")


def test_las_lets_a_short_job_overtake_a_long_one_in_the_simulator() -> None:
    # one V100; long (20,000 s of work) starts at 0; short (500 s) arrives at 100. Both sit
    # in LAS queue 0 until long has had 3,600 device-seconds, and FIFO within a queue keeps
    # long running; at the round boundary at 3,600 s (round_s 360) long drops to queue 1
    # and short takes the device: it ends long before long does.
    sched = make_scheduler("las", TOY)
    assert isinstance(sched, RoundScheduler) and isinstance(sched.policy, Las)
    jobs = [SimJob("long", 0.0, "toy", 1, 20_000), SimJob("short", 100.0, "toy", 1, 500)]
    result = Simulation(ONE_V100, jobs, sched, TOY).run()
    out = {o.id: o for o in result.jobs}
    assert all(o.state == "succeeded" for o in out.values())
    short, long = out["short"], out["long"]
    assert short.first_start is not None and short.end is not None and long.end is not None
    assert 3600.0 <= short.first_start < 3600.0 + 360.0
    assert short.end < long.end
    assert long.preemptions == 1 and short.preemptions == 0
    assert long.first_start == 0.0


def test_fifo_keeps_the_short_job_behind_the_long_one_in_the_simulator() -> None:
    # the control for the LAS test: the same trace under fifo
    jobs = [SimJob("long", 0.0, "toy", 1, 20_000), SimJob("short", 100.0, "toy", 1, 500)]
    result = Simulation(ONE_V100, jobs, make_scheduler("fifo", TOY), TOY).run()
    out = {o.id: o for o in result.jobs}
    assert out["short"].first_start == out["long"].end == 20_000.0


def test_round_plans_keep_tenants_within_their_quotas() -> None:
    from accelnet.sched import Tenant

    fab = fabric(("v", "2xV100"), ("k", "2xK80"))
    table = {f"{t}{i}": {"V100": 4.0, "K80": 1.0} for t in "ab" for i in range(3)}
    sched = RoundScheduler(HeteroFair(), round_s=100, rates=rates_of(table))
    jobs = []
    for i in range(3):
        for t in "ab":
            v = job(f"{t}{i}", float(i), 100.0)
            jobs.append(replace(v, spec=v.spec.model_copy(update={"tenant": t})))
    tenants = {"a": Tenant("a", quota={"V100": 1}), "b": Tenant("b", quota={"*": 2})}
    decision = sched.decide(Snapshot.all_ready(fab, tuple(jobs), now=1.0, tenants=tenants))
    used: dict[tuple[str, str], int] = {}
    for s in decision.starts:
        tenant = s.job[0]
        used[tenant, s.placement.model] = used.get((tenant, s.placement.model), 0) + 1
    assert used.get(("a", "V100"), 0) <= 1  # even with a V100 left idle
    assert sum(n for (t, _), n in used.items() if t == "b") <= 2
    assert decision.starts  # quotas limit, they do not stop everything
    stranger = replace(jobs[0], id="c0", spec=jobs[0].spec.model_copy(update={"tenant": "c"}))
    table["c0"] = table["a0"]
    lone = sched.decide(Snapshot.all_ready(fab, (stranger,), now=500.0, tenants=tenants))
    assert lone.starts == ()  # a tenant that is not known does not run


@VIA
def test_between_rounds_an_idle_faster_device_takes_a_running_job(via_session: bool) -> None:
    # a and b are both 4x faster on the V100; a gets it, b the K80. When a ends mid-round
    # nothing queued wants the V100, so b moves there instead of it idling until t=100
    table = {"a": {"V100": 4.0, "K80": 1.0}, "b": {"V100": 4.0, "K80": 1.0}}
    sched = RoundScheduler(Srtf(), round_s=100.0, rates=rates_of(table))
    decide = Decider(sched, V100_K80, via_session)
    a, b = job("a", 0.0, 40.0), job("b", 0.0, 4000.0)
    first = decide(0.0, [a, b])
    assert models_started(first) == {"a": "V100", "b": "K80"}
    b_run = running(b, V100_K80, first, 0.0)
    mid = decide(10.0, [b_run])  # a finished at t=10
    assert [(p.job, p.reason) for p in mid.preemptions] == [("b", "srtf: moved to idle V100")]
    again = decide(10.0, [replace(b_run, state=JobState.ADMITTED, placement=None)])
    assert models_started(again) == {"b": "V100"}
    # not when the move would not pay: b has less than a round's work left on the K80
    sched2 = RoundScheduler(Srtf(), round_s=100.0, rates=rates_of(table))
    decide2 = Decider(sched2, V100_K80, via_session)
    short_b = job("b", 0.0, 50.0)
    first2 = decide2(0.0, [a, short_b])
    mid2 = decide2(10.0, [running(short_b, V100_K80, first2, 0.0)])
    assert mid2.preemptions == ()
    # its work not known: over one round (100 s) 4x faster saves 75 s; a stop that costs
    # 60 s (30 s grace, 30 s restart) pays, one that costs 80 s does not; one that loses
    # the job's work never does
    for cost, checkpointable, moves in ((StopCost(), True, True),
                                        (StopCost(restart_s=50.0), True, False),
                                        (StopCost(), False, False)):  # fmt: skip
        sched4 = RoundScheduler(Srtf(), round_s=100.0, rates=rates_of(table), stop_cost=cost)
        decide4 = Decider(sched4, V100_K80, via_session)
        open_b = job("b", 0.0, checkpointable=checkpointable)
        first4 = decide4(0.0, [a, open_b])
        mid4 = decide4(10.0, [running(open_b, V100_K80, first4, 0.0)])
        assert bool(mid4.preemptions) is moves, (cost, checkpointable)
    # and never with upgrades off
    sched3 = RoundScheduler(Srtf(), round_s=100.0, rates=rates_of(table), upgrade=None)
    decide3 = Decider(sched3, V100_K80, via_session)
    first3 = decide3(0.0, [a, b])
    assert decide3(10.0, [running(b, V100_K80, first3, 0.0)]).preemptions == ()


@VIA
def test_a_non_preemptive_policy_never_moves_a_running_job(via_session: bool) -> None:
    table = {"a": {"V100": 4.0, "K80": 1.0}, "b": {"V100": 4.0, "K80": 1.0}}
    sched = RoundScheduler(Sjf(), round_s=100.0, rates=rates_of(table))
    decide = Decider(sched, V100_K80, via_session)
    a, b = job("a", 0.0, 40.0), job("b", 0.0, 4000.0)
    first = decide(0.0, [a, b])
    assert models_started(first) == {"a": "V100", "b": "K80"}
    # a ends; the V100 idles, but sjf does not stop b to move it there
    assert decide(10.0, [running(b, V100_K80, first, 0.0)]).preemptions == ()


# ----- regressions found in review --------------------------------------------------


def test_two_half_device_jobs_share_one_device() -> None:
    t4 = fabric(("t", "1xT4"))
    table = {"a": {"T4": 1.0}, "b": {"T4": 1.0}}
    for policy in (HeteroFair(), Srtf()):
        sched = RoundScheduler(policy, round_s=100.0, rates=rates_of(table))
        jobs = (job("a", 0.0, 1000.0, "T4:0.5"), job("b", 0.0, 1000.0, "T4:0.5"))
        d = sched.decide(Snapshot.all_ready(t4, jobs, 1.0))
        assert sorted(s.job for s in d.starts) == ["a", "b"], policy.name


def test_a_gang_that_can_never_fit_is_not_planned_and_moves_nobody() -> None:
    fab = fabric(("v1", "1xV100"), ("v2", "1xV100"), ("k", "1xK80"))
    table = {"d": {"V100": 1.0}, "a": {"V100": 4.0, "K80": 1.0}}
    sched = RoundScheduler(Srtf(), round_s=100.0, rates=rates_of(table))
    d_view = job("d", 0.0, 50.0, "V100:2")
    d_view = replace(d_view, spec=d_view.spec.model_copy(
        update={"topology": type(d_view.spec.topology)(required="host")}))  # fmt: skip
    a = job("a", 0.0, 100_000.0)
    first = sched.decide(Snapshot.all_ready(fab, (d_view, a), 0.0))
    assert {s.job: s.placement.model for s in first.starts} == {"a": "V100"}
    assert first.waiting["d"].startswith("can never run here")
    a_run = running(a, fab, first, 0.0)
    for t in (10.0, 100.0, 110.0, 200.0):  # a keeps its V100: no back-and-forth
        assert sched.decide(Snapshot.all_ready(fab, (d_view, a_run), t)).preemptions == ()


def test_no_moves_onto_idle_devices_under_quotas() -> None:
    from accelnet.sched import Tenant

    table = {"a": {"V100": 4.0, "K80": 1.0}, "b": {"V100": 4.0, "K80": 1.0}}
    sched = RoundScheduler(Srtf(), round_s=100.0, rates=rates_of(table))
    tenants = {"default": Tenant("default", quota={"V100": 1})}
    a, b = job("a", 0.0, 40.0), job("b", 0.0, 4000.0)
    first = sched.decide(Snapshot.all_ready(V100_K80, (a, b), 0.0, tenants=tenants))
    b_run = running(b, V100_K80, first, 0.0)
    mid = sched.decide(Snapshot.all_ready(V100_K80, (b_run,), 10.0, tenants=tenants))
    assert mid.preemptions == ()


# -- shares are planned where they fit, device by device (found by review) ------------------


def test_a_share_is_planned_only_where_a_device_has_room_for_it() -> None:
    # two T4s; three 0.6 shares (shortest first) and a 0.4 share: only two 0.6 shares fit
    # at once (one per T4), and the 0.4 fits beside either; counted as one pool of 2.0,
    # the plan took the third 0.6 (0.2 left) and left the 0.4 unplanned
    fab = fabric(("t", "2xT4"))
    table = {n: {"T4": 1.0} for n in "abcd"}
    jobs = (job("a", 0.0, 100.0, "T4:0.6"), job("b", 0.0, 200.0, "T4:0.6"),
            job("c", 0.0, 300.0, "T4:0.6"), job("d", 0.0, 400.0, "T4:0.4"))  # fmt: skip
    sched = RoundScheduler(Srtf(), round_s=100.0, rates=rates_of(table))
    d = sched.decide(Snapshot.all_ready(fab, jobs, 1.0))
    assert sorted(s.job for s in d.starts) == ["a", "b", "d"], dict(d.waiting)
    assert "not planned" in d.waiting["c"]
    # mid-round, the running shares stay on their devices: a newcomer of 0.4 fits beside
    # the 0.6 alone on its T4 (a and d share the other one); c still does not fit
    run = [running(j, fab, d, 1.0) for j in jobs if j.id in ("a", "b", "d")]
    e = job("e", 2.0, 50.0, "T4:0.4")
    sched.rates = rates_of({**table, "e": {"T4": 1.0}})
    nxt = sched.decide(Snapshot.all_ready(fab, (*run, jobs[2], e), 2.0))
    ((started, placed),) = [(s.job, s.placement) for s in nxt.starts]
    b_dev = next(j.placement.devices for j in run if j.id == "b" and j.placement)
    assert started == "e" and placed.devices == b_dev
