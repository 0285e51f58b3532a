"""Invariants of a store and its event log, checked after the fact (chaos tests, audits).

:func:`violations` reads a :class:`~accelnet.runtime.control.store.Store` (job records and the
event log) and returns every broken promise with the job (or device) and the evidence;
:func:`check` raises AssertionError listing them all. Pure reads: safe on a live store,
though a store being written may show a transient gap between a device event and the job
transition that follows it (use ``quiescent=False`` then).

The promises:

- **ended once**: a finished job has exactly one terminal event (``job:succeeded``,
  ``job:failed`` or ``job:cancelled``) and a live one none; no event names an unknown job.
- **devices**: replaying the log, no device is allocated to jobs whose shares add up to
  more than the whole device, and when the log ends no device is held by a finished job
  (nor, with ``quiescent``, is any device ALLOCATED without a job holding it).
- **retry budget**: ``failures <= max_retries + 1`` and at most ``max_retries``
  "requeued (retry ...)" events; ``attempts >= failures``.
- **events match states**: every job's record state is the state of its last
  ``job:<state>`` event (a state change without an event would show here).
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass

from accelnet.devices import DeviceState
from accelnet.runtime.control.devices import RESTART_LET_GO
from accelnet.runtime.control.store import Event, JobRecord, Store
from accelnet.sched import JobState

_TERMINAL = {f"job:{s.value}" for s in JobState if s.is_finished()}
_STATE_KINDS = {f"job:{s.value}": s for s in JobState}
_EPS = 1e-9
# a device's allocation event: "allocated to J" (all of it) or "allocated to J (share S)"
_ALLOCATED = re.compile(r"allocated to (\S+?)(?: \(share ([0-9.eE+-]+)\))?")


@dataclass(frozen=True, slots=True)
class Violation:
    """One broken invariant: which (``ended-once``, ``devices``, ``retry-budget``,
    ``events-match-states``), the job or device it concerns, and the evidence."""

    invariant: str
    subject: str
    evidence: str

    def __str__(self) -> str:
        return f"[{self.invariant}] {self.subject}: {self.evidence}"


def violations(store: Store, quiescent: bool = True) -> list[Violation]:
    """Every violation found in ``store`` (empty when all invariants hold). ``quiescent``:
    nothing is being written (also checks that no ALLOCATED device is unheld)."""
    jobs = {r.id: r for r in store.jobs()}
    events = store.events()
    by_job: dict[str, list[Event]] = defaultdict(list)
    for e in events:
        if e.job is not None:
            by_job[e.job].append(e)
    out: list[Violation] = []
    for jid in sorted(set(by_job) - set(jobs)):
        out.append(Violation("ended-once", jid, f"{len(by_job[jid])} events of an unknown job"))
    for rec in jobs.values():
        evs = by_job.get(rec.id, [])
        out += _ended_once(rec, evs)
        out += _retry_budget(rec, evs)
        out += _events_match(rec, evs)
    out += _devices(store, jobs, events, quiescent)
    return out


def check(store: Store, quiescent: bool = True) -> None:
    """Raise AssertionError naming every violation; return None when all hold."""
    found = violations(store, quiescent)
    if found:
        lines = "\n".join(f"  {v}" for v in found)
        raise AssertionError(f"{len(found)} invariant violation(s):\n{lines}")


def _ended_once(rec: JobRecord, evs: list[Event]) -> list[Violation]:
    ends = [f"#{e.seq} {e.kind}" for e in evs if e.kind in _TERMINAL]
    if rec.state.is_finished() and len(ends) != 1:
        return [Violation("ended-once", rec.id, f"{rec.state.value} with terminal events {ends}")]
    if not rec.state.is_finished() and ends:
        return [Violation("ended-once", rec.id, f"live ({rec.state.value}) yet ended: {ends}")]
    return []


def _retry_budget(rec: JobRecord, evs: list[Event]) -> list[Violation]:
    out = []
    budget = rec.spec.max_retries
    if rec.failures > budget + 1:
        out.append(Violation("retry-budget", rec.id,
                             f"{rec.failures} failures, max_retries {budget}"))  # fmt: skip
    retries = [e.seq for e in evs if e.detail.startswith("requeued (retry")]
    if len(retries) > budget:
        text = f"{len(retries)} retries (events {retries}), max_retries {budget}"
        out.append(Violation("retry-budget", rec.id, text))
    if rec.attempts < rec.failures:
        out.append(Violation("retry-budget", rec.id,
                             f"{rec.failures} failures in {rec.attempts} attempts"))  # fmt: skip
    return out


def _events_match(rec: JobRecord, evs: list[Event]) -> list[Violation]:
    states = [e for e in evs if e.kind in _STATE_KINDS]
    if not states:
        return [Violation("events-match-states", rec.id, f"{rec.state.value} with no state event")]
    last = states[-1]
    if _STATE_KINDS[last.kind] is not rec.state:
        text = f"record says {rec.state.value}, last event #{last.seq} {last.kind}"
        return [Violation("events-match-states", rec.id, text)]
    return []


def _devices(
    store: Store, jobs: dict[str, JobRecord], events: list[Event], quiescent: bool
) -> list[Violation]:
    """Replay the device events: who holds each device, and whether they may."""
    out: list[Violation] = []
    holders: dict[str, set[str]] = defaultdict(set)
    shares: dict[tuple[str, str], float] = {}  # (device, job): the share it was allocated
    # a log written before allocations named their share below 1: the job's record says it
    legacy = not any(e.kind == "device:allocated" and "(share " in e.detail for e in events)

    def share(dev: str, jid: str) -> float:
        if not legacy:
            return shares.get((dev, jid), 1.0)
        rec = jobs.get(jid)
        return 1.0 if rec is None or rec.placement is None else rec.placement.share

    for e in events:
        if e.kind.startswith("device:"):
            dev, _, cause = e.detail.partition(": ")
            if e.kind == "device:allocated" and cause.startswith("allocated to "):
                found = _ALLOCATED.fullmatch(cause)
                jid = (found.group(1) if found else cause.removeprefix("allocated to ")).strip()
                shares[dev, jid] = float(found.group(2)) if found and found.group(2) else 1.0
                held = holders[dev]
                if held and sum(share(dev, j) for j in held | {jid}) > 1 + _EPS:
                    out.append(Violation("devices", dev,
                                         f"event #{e.seq}: allocated to {jid} while held by "
                                         f"{sorted(held)}"))  # fmt: skip
                held.add(jid)
            elif cause.endswith(" released it"):
                holders[dev].discard(cause.removesuffix(" released it"))
            elif e.kind == f"device:{DeviceState.READY.value}" or cause == RESTART_LET_GO:
                holders[dev].clear()  # a ready device holds nothing, nor one after a restart
        elif e.job is not None and e.detail.startswith("requeued: lost when the controller"):
            for held in holders.values():
                held.discard(e.job)  # the restarted controller refreshes its devices
    for dev, held in sorted(holders.items()):
        done = sorted(j for j in held if j in jobs and jobs[j].state.is_finished())
        if done:
            out.append(Violation("devices", dev, f"still held by finished job(s) {done}"))
    if quiescent:
        holding = {
            d for r in jobs.values() if r.state.holds_devices() and r.placement
            for d in r.placement.devices
        }  # fmt: skip
        for dev, state in sorted(store.devices().items()):
            if state is DeviceState.ALLOCATED and dev not in holding:
                out.append(Violation("devices", dev, "ALLOCATED but no live job holds it"))
    return out
