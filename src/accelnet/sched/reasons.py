"""Typed reasons: why a job waits (:class:`WaitCode`) and how its last attempt ended
(:class:`OutcomeCode`).

A waiting reason is a :class:`Reason`: its display text (it *is* that ``str``, so every
place that shows or logs it is unchanged) with a ``code`` clients branch on and the
``facts`` the text was written from. Codes tell "can never run here"
(:attr:`WaitCode.NEVER_FITS`, unresolvable: resubmit it changed) from "does not fit now"
(:attr:`WaitCode.NO_CAPACITY`), as Kubernetes tells ``UnschedulableAndUnresolvable`` from
``Unschedulable``. The code names the cause that decides the wait; notes added later
(a topology wait, a quota note) keep it. docs/api.md lists the codes.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from types import MappingProxyType
from typing import Any, ClassVar

_NO_FACTS: Mapping[str, Any] = MappingProxyType({})


class WaitCode(StrEnum):
    """Why a queued job waits."""

    AWAITING_ADMISSION = "awaiting_admission"  # accepted, not yet admitted
    AWAITING_INPUTS = "awaiting_inputs"  # the jobs whose outputs it consumes have not succeeded
    RETRY_BACKOFF = "retry_backoff"  # after a failure, until its retry backoff ends
    POWER_BUDGET = "power_budget"  # starting it would exceed the cluster's power budget
    NEVER_FITS = "never_fits"  # no device of this fabric can ever run it (unresolvable)
    UNKNOWN_TENANT = "unknown_tenant"  # its tenant is not one of the cluster's (unresolvable)
    OVER_QUOTA = "over_quota"  # its tenant's quota is used up
    NO_CAPACITY = "no_capacity"  # it does not fit in what is free now
    AWAITING_DECISION = "awaiting_decision"  # it fits what is free: the next decision decides
    PREEMPTING = "preempting"  # lower-priority jobs are being stopped to make room for it
    AWAITING_RELEASE = "awaiting_release"  # jobs preempted for it have not let go yet
    DOMAIN_HELD = "domain_held"  # it waited long: devices are held for it as they free up
    NOT_PLANNED = "not_planned"  # a round-based policy did not plan it for this round
    PLANNED = "planned"  # planned for this round; its devices are not free yet

    @property
    def unresolvable(self) -> bool:
        """Whether waiting will never help (the job must be changed or cancelled)."""
        return self in (WaitCode.NEVER_FITS, WaitCode.UNKNOWN_TENANT)


class OutcomeCode(StrEnum):
    """How a job's latest attempt ended (its final outcome once the job has finished)."""

    SUCCEEDED = "succeeded"  # every rank succeeded
    CANCELLED = "cancelled"  # cancelled on request
    TASK_FAILED = "task_failed"  # a rank exited non-zero or raised
    TIMED_OUT = "timed_out"  # a rank ran past its ``timeout_s``
    WORKER_LOST = "worker_lost"  # the process running a rank died (killed, out of memory)
    SETUP_FAILED = "setup_failed"  # the job's ``setup`` failed on a host
    DEVICE_FAILED = "device_failed"  # a device under it failed (not the job's doing)
    PREEMPTED = "preempted"  # stopped for a job of higher priority or by its policy; requeued
    INPUT_FAILED = "input_failed"  # a job whose outputs it consumes failed or was cancelled
    CONTROLLER_RESTART = "controller_restart"  # the controller died while it ran


class Reason(str):
    """A waiting reason: the display text, with its :class:`WaitCode` and facts; made by
    :func:`make_reason` (or :func:`never_fits`, :func:`no_capacity`).

    Each code has subclasses of its own with ``code`` as a class attribute, one without an
    instance dict for reasons without facts: such a reason costs no more to make than its
    text (one is made for every job that does not fit, on the per-decision path)."""

    __slots__ = ()
    code: ClassVar[WaitCode]
    facts: Mapping[str, Any] = _NO_FACTS

    def __reduce__(self) -> tuple[Any, ...]:
        return (make_reason, (str(self), self.code, dict(self.facts)))

    def noted(self, note: str, **facts: Any) -> Reason:
        """This reason with ``note`` added to its text (and ``facts`` to its facts); the
        code stays."""
        return self.recoded(self.code, note, **facts)

    def recoded(self, code: WaitCode, note: str, **facts: Any) -> Reason:
        """This reason with ``note`` added, now for ``code`` (e.g. a job that did not fit
        and now preempts others)."""
        return make_reason(f"{self}; {note}", code, {**self.facts, **facts})

    @property
    def unresolvable(self) -> bool:
        return self.code.unresolvable


def _kind(code: WaitCode, with_facts: bool) -> type[Reason]:
    body: dict[str, Any] = {"code": code, "__module__": __name__}
    if not with_facts:
        body["__slots__"] = ()
    return type(f"Reason_{code.value}", (Reason,), body)


_PLAIN = {c: _kind(c, False) for c in WaitCode}
_WITH_FACTS = {c: _kind(c, True) for c in WaitCode}
_NO_CAPACITY = _PLAIN[WaitCode.NO_CAPACITY]


def make_reason(text: str, code: WaitCode, facts: Mapping[str, Any] | None = None) -> Reason:
    """A waiting reason: ``text`` for people, ``code`` to branch on, ``facts`` it was
    written from."""
    if not facts:
        return _PLAIN[code](text)
    made = _WITH_FACTS[code](text)
    made.facts = MappingProxyType(dict(facts))
    return made


AWAITING_ADMISSION = make_reason("waiting for admission", WaitCode.AWAITING_ADMISSION)
AWAITING_DECISION = make_reason(
    "fits what is free now: waiting for the scheduler's next decision",
    WaitCode.AWAITING_DECISION,
)


def never_fits(message: str) -> Reason:
    """The reason of a job no device of the fabric can ever run (``message``: why)."""
    return make_reason(f"can never run here: {message}", WaitCode.NEVER_FITS, {"detail": message})


def no_capacity(explained: str, over: str = "") -> Reason:
    """The reason of a job that does not fit now (``explained``: what it needs and what
    is free); ``over``: the classes its tenant's quota took away, if any."""
    if not over:
        return _NO_CAPACITY(explained)
    return make_reason(
        f"{explained}; over quota: {over}", WaitCode.NO_CAPACITY, {"over_quota": over}
    )


def code_of(reason: str | None) -> WaitCode | None:
    """The code of a waiting reason (None for none, or for untyped text)."""
    return reason.code if isinstance(reason, Reason) else None
