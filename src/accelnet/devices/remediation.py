"""Remediation: what happens to a device that fails its health checks, as one state machine.

The policy is declarative, per device kind (:class:`RemediationPolicy`, YAML; the models are
in :mod:`accelnet.devices.policy` and re-exported here)::

    defaults:
      on_fail: [drain, requeue, reset, probe]   # the default
      max_failures: 3          # within window_s: then OFFLINE
      window_s: 3600
      backoff_s: 10            # between a failed reset/probe and the next try
      warn_action: log         # log | drain | fail
    kinds:
      gpu: {probe_level: 2, checks: {temperature_fail_c: 92}}

``on_fail`` steps, in this order: ``drain`` (no new work), ``requeue`` (stop its jobs now;
they are requeued within their retry budget; without it they run to their end), ``reset``
(recycle the worker; NVIDIA GPUs: ``nvidia-smi --gpu-reset`` where permitted), ``probe`` (a
level-``probe_level`` probe). ``[]`` only reports. A device that passes its probe (or is
reset, without ``probe``) is READY again; one that fails ``max_failures`` times within
``window_s`` (the first failure, and every failed reset or probe) goes OFFLINE until an
operator resets or undrains it. A policy without ``reset`` and ``probe`` leaves a failed
device HELD for an operator.

:class:`Remediator` is the machine: pure, one transition table (:data:`PHASES`); it takes
what happened (a failure, a device gone idle, a reset or probe result, an operator's
request, the time) and returns the :class:`Action` s for the controller to carry out. Every
action carries its cause; the controller records each as an event.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any, Literal

from accelnet.devices.policy import (
    STEP_ORDER,
    KindPolicy,
    PolicyError,
    RemediationPolicy,
    Step,
    load_policy,
    parse_policy,
)
from accelnet.statemachine import Tracked, TransitionTable

__all__ = [  # the policy's names too: one import for the policy and its machine
    "PHASES",
    "STEP_ORDER",
    "Action",
    "ActionKind",
    "Case",
    "KindPolicy",
    "Phase",
    "PolicyError",
    "RefusedError",
    "RemediationPolicy",
    "Remediator",
    "Step",
    "load_policy",
    "parse_policy",
]

# ----- the machine --------------------------------------------------------------------------


class Phase(StrEnum):
    """Where a device is in its remediation."""

    HEALTHY = "healthy"  # in service, nothing to repair
    DRAINING = "draining"  # failed (or to be reset): no new work; its jobs leave
    RESETTING = "resetting"  # worker recycled, GPU reset where permitted
    PROBING = "probing"  # an active probe runs
    BACKOFF = "backoff"  # a reset or probe failed: try again after backoff_s
    HELD = "held"  # out of service until an operator acts
    OFFLINE = "offline"  # failed max_failures times within window_s


_P = Phase
PHASES: TransitionTable[Phase] = TransitionTable(
    "remediation",
    {
        _P.HEALTHY: {
            _P.DRAINING: "a check failed (or an operator asked for a reset): no new work; "
            "its jobs are stopped and requeued (requeue) or finish",
            _P.PROBING: "an operator asked for a probe of the idle device",
            _P.HELD: "an operator drained it, or a warning with warn_action drain: its jobs "
            "finish, no new work",
            _P.OFFLINE: "it failed max_failures times within window_s",
        },
        _P.DRAINING: {
            _P.RESETTING: "its jobs are gone: reset it",
            _P.PROBING: "its jobs are gone; the policy does not reset: probe it",
            _P.HELD: "its jobs are gone and the policy does not repair, or an operator "
            "drained it: it waits for an operator",
        },
        _P.RESETTING: {
            _P.PROBING: "reset done: probe it",
            _P.HEALTHY: "reset done; the policy does not probe: back in service",
            _P.BACKOFF: "the reset failed: try again after backoff_s",
            _P.OFFLINE: "the reset failed, its max_failures-th failure within window_s",
        },
        _P.PROBING: {
            _P.HEALTHY: "the probe passed: back in service",
            _P.BACKOFF: "the probe failed: reset (or probe) again after backoff_s",
            _P.OFFLINE: "the probe failed, its max_failures-th failure within window_s",
        },
        _P.BACKOFF: {
            _P.RESETTING: "backoff over: reset again",
            _P.PROBING: "backoff over; the policy does not reset: probe again",
            _P.HELD: "an operator drained it: no more repair attempts",
        },
        _P.HELD: {
            _P.HEALTHY: "an operator undrained it while its jobs still ran: drain cancelled",
            _P.DRAINING: "an operator reset it while its jobs still run: reset when they end",
            _P.RESETTING: "an operator undrained or reset it: refresh or reset, probe, then use",
        },
        _P.OFFLINE: {
            _P.RESETTING: "an operator reset or undrained it: failures forgotten; reset and "
            "probe before use",
        },
    },
)


class ActionKind(StrEnum):
    """What the controller is to do."""

    FAIL = "fail"  # mark it unhealthy (no new work); stop and requeue its jobs if stop_jobs
    DRAIN = "drain"  # an operator's drain: no new work, its jobs finish
    UNDRAIN = "undrain"  # cancel a drain while its jobs still run
    RESET = "reset"  # reset (hard) or refresh (soft); then call reset_done
    PROBE = "probe"  # run a probe of ``level``; then call probe_done
    READY = "ready"  # back in service
    OFFLINE = "offline"  # out of service until an operator acts; stop and requeue its jobs
    NOTE = "note"  # nothing to do but record it


@dataclass(frozen=True, slots=True)
class Action:
    """One thing for the controller to do, why, and the phase the device is in after it."""

    kind: ActionKind
    device: str
    cause: str
    phase: Phase
    stop_jobs: bool = False
    hard: bool = True
    level: int = 1


class RefusedError(ValueError):
    """An operator's request that the device's phase does not allow; says why."""


Reset = Literal["hard", "soft"] | None


@dataclass(frozen=True, slots=True)
class Case:
    """One device's remediation: its phase (with history), the times of its failures within
    the window, the repair under way (reset kind and whether to probe), the next retry."""

    phase: Tracked[Phase] = field(default_factory=lambda: Tracked(Phase.HEALTHY))
    failures: tuple[float, ...] = ()
    reset: Reset = None
    probe: bool = False
    level: int = 1
    retry_at: float | None = None


class Remediator:
    """The remediation machine of every device; ``policy_of(device)`` gives its policy.

    Inputs are method calls with the time; outputs are actions. Failures are counted only
    when they start a remediation or a reset/probe fails; a check that keeps failing while
    the device is out of service is not counted again. Not thread-safe."""

    def __init__(self, policy_of: Callable[[str], KindPolicy]) -> None:
        self._policy_of = policy_of
        self._cases: dict[str, Case] = {}
        self._backoff: set[str] = set()

    # ----- reading ---------------------------------------------------------------------
    def case(self, device: str) -> Case:
        """The device's remediation record."""
        return self._cases.get(device, Case())

    def phase(self, device: str) -> Phase:
        """The device's phase."""
        return self.case(device).phase.state

    def cases(self) -> Mapping[str, Case]:
        """Every device that has been remediated (others are HEALTHY)."""
        return dict(self._cases)

    def failures(self, device: str, now: float) -> int:
        """The device's failures within its window."""
        window = self._policy_of(device).window_s
        return sum(1 for t in self.case(device).failures if t > now - window)

    # ----- what happened -----------------------------------------------------------------
    def failed(self, device: str, cause: str, now: float, busy: bool) -> list[Action]:
        """A check failed. Starts a remediation of a HEALTHY device; ignored otherwise."""
        case, policy = self.case(device), self._policy_of(device)
        if case.phase.state is not Phase.HEALTHY or not policy.on_fail:
            return []
        case, count = self._count(device, case, now)
        if count >= policy.max_failures:
            return self._offline(device, case, now, f"{cause} ({self._tally(device, count)})")
        reset: Reset = "hard" if "reset" in policy.on_fail else None
        case = replace(case, reset=reset, probe="probe" in policy.on_fail, level=policy.probe_level)
        why = f"{cause} ({self._tally(device, count)})"
        out = [self._go(device, case, Phase.DRAINING, now, why, ActionKind.FAIL,
                        stop_jobs="requeue" in policy.on_fail)]  # fmt: skip
        return out + ([] if busy else self.idle(device, now))

    def warned(self, device: str, cause: str, now: float, busy: bool) -> list[Action]:
        """A check warned: as the policy's ``warn_action`` says (``log``: nothing to do)."""
        action = self._policy_of(device).warn_action
        if action == "fail":
            return self.failed(device, cause, now, busy)
        if action == "drain" and self.phase(device) is Phase.HEALTHY:
            case = self.case(device)
            return [self._go(device, case, Phase.HELD, now, f"warning: {cause}", ActionKind.DRAIN)]
        return []

    def idle(self, device: str, now: float) -> list[Action]:
        """The jobs of a DRAINING device are gone: start its repair."""
        if self.phase(device) is not Phase.DRAINING:
            return []
        return self._repair(device, now, "its jobs are gone")

    def reset_done(self, device: str, ok: bool, detail: str, now: float) -> list[Action]:
        """A reset ended, well or not."""
        case = self.case(device)
        if case.phase.state is not Phase.RESETTING:
            return []
        if not ok:
            return self._setback(device, now, f"reset failed: {detail}")
        if case.probe:
            return [self._go(device, case, Phase.PROBING, now, f"reset done ({detail}); probe it",
                             ActionKind.PROBE, level=case.level)]  # fmt: skip
        return [
            self._go(device, case, Phase.HEALTHY, now, f"reset done: {detail}", ActionKind.READY)
        ]

    def probe_done(self, device: str, passed: bool, detail: str, now: float) -> list[Action]:
        """A probe ended: passed (PASS or WARN) or not (FAIL, no answer, timeout)."""
        case = self.case(device)
        if case.phase.state is not Phase.PROBING:
            return []
        if passed:
            return [self._go(device, case, Phase.HEALTHY, now, f"probe passed: {detail}",
                             ActionKind.READY)]  # fmt: skip
        return self._setback(device, now, f"probe failed: {detail}")

    def due(self, now: float) -> list[Action]:
        """The retries whose backoff is over at ``now``."""
        out: list[Action] = []
        for device in sorted(self._backoff):
            case = self.case(device)
            if case.retry_at is not None and case.retry_at <= now:
                out += self._repair(device, now, "backoff over")
        return out

    # ----- an operator's requests --------------------------------------------------------
    def drain(self, device: str, now: float, reason: str) -> list[Action]:
        """Take the device out of service; its jobs finish. RefusedError while it is being
        reset or probed, or offline."""
        case, phase = self.case(device), self.phase(device)
        if phase is Phase.HEALTHY:
            return [self._go(device, case, Phase.HELD, now, reason, ActionKind.DRAIN)]
        if phase in (Phase.BACKOFF, Phase.DRAINING):
            return [self._go(device, case, Phase.HELD, now, reason, ActionKind.NOTE)]
        if phase is Phase.HELD:
            return []
        raise RefusedError(f"{device} is {phase.value}; " + (
            "use reset or undrain to bring it back" if phase is Phase.OFFLINE
            else "try again once its reset or probe is done"))  # fmt: skip

    def undrain(self, device: str, now: float, busy: bool, reason: str) -> list[Action]:
        """Back into service: a drain with jobs still running is cancelled; an idle HELD or
        OFFLINE device is refreshed and probed first."""
        case, phase = self.case(device), self.phase(device)
        if phase is Phase.HELD and busy:
            return [self._go(device, case, Phase.HEALTHY, now, reason, ActionKind.UNDRAIN)]
        if phase in (Phase.HELD, Phase.OFFLINE):
            return self._operator_repair(device, now, "soft", reason)
        raise RefusedError(f"{device} is {phase.value}: " + (
            "not drained" if phase is Phase.HEALTHY else "it is being repaired"))  # fmt: skip

    def reset(self, device: str, now: float, busy: bool, reason: str) -> list[Action]:
        """Reset and probe the device (after its jobs end, if any run on it)."""
        case, phase = self.case(device), self.phase(device)
        if phase in (Phase.RESETTING, Phase.PROBING):
            raise RefusedError(f"{device} is {phase.value} already")
        level = self._policy_of(device).probe_level
        if phase is Phase.DRAINING:
            self._cases[device] = replace(case, reset="hard", probe=True, level=level)
            return [Action(ActionKind.NOTE, device, f"{reason}: reset once its jobs are gone",
                           phase)]  # fmt: skip
        if busy and phase in (Phase.HEALTHY, Phase.HELD):
            case = replace(case, reset="hard", probe=True, level=level)
            kind = ActionKind.DRAIN if phase is Phase.HEALTHY else ActionKind.NOTE
            return [self._go(device, case, Phase.DRAINING, now,
                             f"{reason}: reset once its jobs are gone", kind)]  # fmt: skip
        if phase is Phase.HEALTHY:
            case = replace(case, reset="hard", probe=True, level=level)
            first = self._go(device, case, Phase.DRAINING, now, reason, ActionKind.DRAIN)
            return [first, *self.idle(device, now)]
        return self._operator_repair(device, now, "hard", reason)

    def probe(self, device: str, now: float, level: int, reason: str) -> list[Action]:
        """Probe an idle HEALTHY device (out of service while it runs). RefusedError in
        another phase (the caller may run a diagnostic probe that changes nothing)."""
        case, phase = self.case(device), self.phase(device)
        if phase is not Phase.HEALTHY:
            raise RefusedError(f"{device} is {phase.value}")
        policy = self._policy_of(device)
        case = replace(case, reset="hard" if "reset" in policy.on_fail else None, probe=True,
                       level=level)  # fmt: skip
        return [self._go(device, case, Phase.PROBING, now, reason, ActionKind.PROBE, level=level)]

    def restore(self, device: str, phase: Phase, now: float, cause: str) -> list[Action]:
        """Adopt a device found out of service when the controller started: HELD (it was
        drained), OFFLINE, or DRAINING (it was unhealthy: repair it)."""
        if self.phase(device) is not Phase.HEALTHY:
            return []
        case = self.case(device)
        if phase is Phase.DRAINING:
            policy = self._policy_of(device)
            reset: Reset = "hard" if "reset" in policy.on_fail else None
            case = replace(case, reset=reset, probe="probe" in policy.on_fail,
                           level=policy.probe_level)  # fmt: skip
            return [self._go(device, case, phase, now, cause, ActionKind.NOTE),
                    *self.idle(device, now)]  # fmt: skip
        return [self._go(device, case, phase, now, cause, ActionKind.NOTE)]

    # ----- inside ------------------------------------------------------------------------
    def _go(self, device: str, case: Case, dst: Phase, at: float, cause: str,
            kind: ActionKind, **extra: Any) -> Action:  # fmt: skip
        tracked = case.phase.to(PHASES, device, dst, at, cause)
        retry_at = case.retry_at if dst is Phase.BACKOFF else None
        self._cases[device] = replace(case, phase=tracked, retry_at=retry_at)
        if dst is Phase.BACKOFF:
            self._backoff.add(device)
        else:
            self._backoff.discard(device)
        return Action(kind, device, cause, dst, **extra)

    def _count(self, device: str, case: Case, now: float) -> tuple[Case, int]:
        window = self._policy_of(device).window_s
        kept = (*(t for t in case.failures if t > now - window), now)
        return replace(case, failures=kept), len(kept)

    def _tally(self, device: str, count: int) -> str:
        p = self._policy_of(device)
        return f"failure {count} of {p.max_failures} within {p.window_s:g} s"

    def _repair(self, device: str, now: float, why: str) -> list[Action]:
        """The first step of the repair under way: reset, probe, or wait for an operator."""
        case = self.case(device)
        if case.reset is not None:
            hard = case.reset == "hard"
            what = "reset it" if hard else "refresh it"
            return [self._go(device, case, Phase.RESETTING, now, f"{why}: {what}",
                             ActionKind.RESET, hard=hard)]  # fmt: skip
        if case.probe:
            return [self._go(device, case, Phase.PROBING, now, f"{why}: probe it",
                             ActionKind.PROBE, level=case.level)]  # fmt: skip
        return [self._go(device, case, Phase.HELD, now,
                         f"{why}; the policy does not repair it: an operator decides",
                         ActionKind.NOTE)]  # fmt: skip

    def _setback(self, device: str, now: float, cause: str) -> list[Action]:
        """A reset or probe failed: count it; OFFLINE at the limit, else retry later (or,
        with nothing to retry, wait for an operator)."""
        case, count = self._count(device, self.case(device), now)
        policy = self._policy_of(device)
        why = f"{cause} ({self._tally(device, count)})"
        if count >= policy.max_failures:
            return self._offline(device, case, now, why)
        case = replace(case, retry_at=now + policy.backoff_s)
        out = [self._go(device, case, Phase.BACKOFF, now,
                        f"{why}; next try in {policy.backoff_s:g} s", ActionKind.FAIL)]  # fmt: skip
        return out + (self.due(now) if policy.backoff_s == 0 else [])

    def _offline(self, device: str, case: Case, now: float, cause: str) -> list[Action]:
        return [self._go(device, case, Phase.OFFLINE, now, cause, ActionKind.OFFLINE,
                         stop_jobs=True)]  # fmt: skip

    def _operator_repair(self, device: str, now: float, reset: Reset, reason: str) -> list[Action]:
        case = self.case(device)
        if case.phase.state is Phase.OFFLINE:
            case = replace(case, failures=())
        case = replace(case, reset=reset, probe=True, level=self._policy_of(device).probe_level)
        self._cases[device] = case
        return self._repair(device, now, reason)
