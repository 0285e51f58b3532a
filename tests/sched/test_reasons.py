"""Typed waiting reasons (accelnet.sched.reasons): every way a job waits has its code and
the facts its text was written from; "can never run here" is told apart from "does not fit
now"."""

from __future__ import annotations

import pickle

from accelnet.fabric import Fabric
from accelnet.sched import JobState, Scheduler, Snapshot, Tenant
from accelnet.sched.policies.hetero_fair import HeteroFair
from accelnet.sched.reasons import OutcomeCode, Reason, WaitCode, code_of, make_reason
from accelnet.sched.rounds import RoundScheduler

from .conftest import job, on
from .test_reserve import busy
from .test_rounds import ONE_V100, rates_of
from .test_rounds import job as round_job


def decide(fabric: Fabric, *jobs, sched: Scheduler | None = None, now: float = 0.0, **kw):  # type: ignore[no-untyped-def]
    snap = Snapshot.all_ready(fabric, tuple(jobs), now=now, tenants=kw.get("tenants"))
    return (sched or Scheduler()).decide(snap)


def test_never_fits_is_unresolvable_and_no_capacity_is_not(lab: Fabric) -> None:
    d = decide(lab, job("j", "T4:5"))
    never = d.waiting["j"]
    assert isinstance(never, Reason) and never.code is WaitCode.NEVER_FITS
    assert never.unresolvable and never.facts["detail"] in never
    t4s = job("busy", "T4:2", devices=("t/gpu0", "t/gpu1"))
    d = decide(lab, t4s, job("j", "T4:3"))
    assert code_of(d.waiting["j"]) is WaitCode.NO_CAPACITY
    assert not d.waiting["j"].unresolvable  # type: ignore[attr-defined]


def test_quota_codes_and_the_classes_a_quota_took_away(lab: Fabric) -> None:
    tenants = {"v": Tenant("v", quota={"H100": 8}), "w": Tenant("w")}
    running = job("busy", "H100:6", devices=on("a", *range(6)), tenant="v")
    d = decide(lab, running, job("more", "H100:4", tenant="v"), tenants=tenants)
    over = d.waiting["more"]
    assert code_of(over) is WaitCode.OVER_QUOTA and over.facts == {"tenant": "v"}  # type: ignore[attr-defined]
    # H100 taken away by the quota, T4 busy: it waits for capacity, the quota noted
    both = job("both", {"any_of": ["H100", "T4"], "count": 4}, tenant="v", t=1)
    t4s = job("t4s", "T4:4", devices=("t/gpu0", "t/gpu1", "t/gpu2", "t/gpu3"), tenant="w")
    d = decide(lab, running, t4s, both, tenants=tenants)
    waits = d.waiting["both"]
    assert isinstance(waits, Reason) and waits.code is WaitCode.NO_CAPACITY
    assert waits.facts == {"over_quota": "H100-SXM 8 (6 in use)"}
    d = decide(lab, job("x", "T4:1", tenant="nobody"), tenants=tenants)
    assert code_of(d.waiting["x"]) is WaitCode.UNKNOWN_TENANT and d.waiting["x"].unresolvable  # type: ignore[attr-defined]


def test_preempting_then_awaiting_release_with_how_many(lab: Fabric) -> None:
    prio = Scheduler("priority", preemption="priority")
    big = [job(f"big-{h}", "H100:8", devices=on(h, *range(8)), priority=100) for h in "ab"]
    low = job("low", "H100:2", devices=on("c", 0, 1), priority=0, started=1)
    hi = job("hi", "H100:4", t=5, priority=50, topology={"required": "nvlink"})
    d = decide(lab, *big, low, hi, sched=prio)
    first = d.waiting["hi"]
    assert isinstance(first, Reason) and first.code is WaitCode.PREEMPTING
    assert first.facts == {"victims": 1}
    stopping = job("low", "H100:2", devices=on("c", 0, 1), state=JobState.PREEMPTING)
    hi2 = job("hi", "H100:4", t=5, priority=50, topology={"required": "nvlink"},
              nominated=d.nominations["hi"])  # fmt: skip
    then = decide(lab, *big, stopping, hi2, sched=prio).waiting["hi"]
    assert isinstance(then, Reason) and then.code is WaitCode.AWAITING_RELEASE
    assert then.facts == {"devices": 2}


def test_a_held_domain_says_where_and_how_much(lab: Fabric) -> None:
    smalls = [job(f"s{i}", "H100:1", t=10.0 + i) for i in range(3)]
    d = decide(lab, *busy(lab, 2, 1), job("big", "H100:8", t=0.0), *smalls,
               sched=Scheduler(reserve_after_s=600.0), now=1_000.0)  # fmt: skip
    held = d.waiting["big"]
    assert isinstance(held, Reason) and held.code is WaitCode.DOMAIN_HELD
    assert held.facts == {"devices": 2, "domain": "a"}
    assert all(code_of(d.waiting[s]) is WaitCode.NO_CAPACITY for s in ("s1", "s2"))


def test_pending_jobs_await_admission(lab: Fabric) -> None:
    d = decide(lab, job("p", "T4:1", state=JobState.PENDING))
    assert code_of(d.waiting["p"]) is WaitCode.AWAITING_ADMISSION


def test_round_policies_say_not_planned() -> None:
    table = {"a": {"V100": 4.0}, "b": {"V100": 1.0}}
    sched = RoundScheduler(HeteroFair(), round_s=100.0, rates=rates_of(table))
    d = sched.decide(Snapshot.all_ready(ONE_V100, (round_job("a", 0.0), round_job("b", 1.0)), 1.0))
    assert [s.job for s in d.starts] == ["a"]  # max-min fair on one GPU: a this round
    assert code_of(d.waiting["b"]) is WaitCode.NOT_PLANNED


def test_a_reason_keeps_its_code_and_facts_through_notes_and_pickling() -> None:
    r = make_reason("needs 2 x T4; 0 of 4 free", WaitCode.NO_CAPACITY, {"over_quota": "x"})
    noted = r.noted("it waits for one host (topology.wait_s)", level_wait="host")
    assert noted.code is WaitCode.NO_CAPACITY
    assert noted.facts == {"over_quota": "x", "level_wait": "host"}
    moved = r.recoded(WaitCode.PREEMPTING, "preempting j1", victims=1)
    assert moved == "needs 2 x T4; 0 of 4 free; preempting j1"
    assert moved.code is WaitCode.PREEMPTING and r.code is WaitCode.NO_CAPACITY
    back = pickle.loads(pickle.dumps(moved))
    assert back == moved and back.code is moved.code and back.facts == moved.facts
    assert code_of("plain text") is None and code_of(None) is None


def test_codes_are_stable_strings() -> None:
    # clients compare against these strings: renaming one breaks them (docs/api.md)
    assert {c.value for c in WaitCode} >= {"never_fits", "no_capacity", "over_quota"}
    assert {c for c in WaitCode if c.unresolvable} == {
        WaitCode.NEVER_FITS,
        WaitCode.UNKNOWN_TENANT,
    }
    assert {c.value for c in OutcomeCode} >= {"succeeded", "timed_out", "worker_lost"}
