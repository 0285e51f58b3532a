"""The device lifecycle: one transition table, after Ray autoscaler v2's instance table.

A device is UNKNOWN until discovery or a probe says otherwise; READY devices are allocated
to jobs (ALLOCATED while any share of them is in use); released devices are REFRESHED
(worker recycled, scratch cleaned) before the next job gets them. Draining lets running work
finish and admits no new work; UNHEALTHY devices wait for remediation; OFFLINE ones are gone.
"""

from __future__ import annotations

from enum import StrEnum

from accelnet.statemachine import Tracked, TransitionTable


class DeviceState(StrEnum):
    """Where a device is in its life."""

    UNKNOWN = "unknown"
    READY = "ready"
    ALLOCATED = "allocated"
    REFRESHING = "refreshing"
    DRAINING = "draining"
    DRAINED = "drained"
    UNHEALTHY = "unhealthy"
    OFFLINE = "offline"

    def schedulable(self) -> bool:
        """Whether new work may be placed on the device (READY, or ALLOCATED with room)."""
        return self in (DeviceState.READY, DeviceState.ALLOCATED)


_S = DeviceState
DEVICE_TRANSITIONS: TransitionTable[DeviceState] = TransitionTable(
    "device",
    {
        _S.UNKNOWN: {
            _S.READY: "discovered and probed healthy",
            _S.UNHEALTHY: "discovered but failed its probe",
            _S.OFFLINE: "discovery lost it before it was ready",
        },
        _S.READY: {
            _S.ALLOCATED: "the scheduler placed work on it",
            _S.REFRESHING: "an operator asked for a reset or a probe (out of service meanwhile)",
            _S.DRAINED: "drained while idle: nothing to wait for",
            _S.UNHEALTHY: "a health check failed",
            _S.OFFLINE: "its node or worker went away",
        },
        _S.ALLOCATED: {
            _S.REFRESHING: "its last job released it; clean before reuse",
            _S.DRAINING: "drain requested while jobs still run on it",
            _S.UNHEALTHY: "a health check failed under load (its jobs are requeued)",
            _S.OFFLINE: "its node or worker went away (its jobs are requeued)",
        },
        _S.REFRESHING: {
            _S.READY: "refresh done: worker recycled, scratch cleaned",
            _S.DRAINED: "refresh done, and a drain was requested meanwhile",
            _S.UNHEALTHY: "refresh failed",
            _S.OFFLINE: "its node or worker went away",
        },
        _S.DRAINING: {
            _S.ALLOCATED: "drain cancelled while jobs still run on it",
            _S.DRAINED: "the last job on it finished",
            _S.UNHEALTHY: "a health check failed while draining",
            _S.OFFLINE: "its node or worker went away",
        },
        _S.DRAINED: {
            _S.REFRESHING: "undrained or reset by an operator: refresh and probe first",
            _S.UNHEALTHY: "a health check failed",
            _S.OFFLINE: "its node or worker went away",
        },
        _S.UNHEALTHY: {
            _S.REFRESHING: "remediation: reset it and probe again",
            _S.DRAINED: "an operator takes it out of service",
            _S.OFFLINE: "its node or worker went away",
        },
        _S.OFFLINE: {
            _S.UNKNOWN: "seen again; probe before use",
        },
    },
)


Device = Tracked[DeviceState]


def _go(rec: Device, device: str, dst: DeviceState, at: float, cause: str) -> Device:
    return rec.to(DEVICE_TRANSITIONS, device, dst, at, cause)


def allocate(rec: Device, device: str, at: float, job: str) -> Device:
    """A job is placed on the device (a shared device that is already ALLOCATED stays)."""
    if rec.state is DeviceState.ALLOCATED:
        return rec
    return _go(rec, device, DeviceState.ALLOCATED, at, f"allocated to {job}")


def release(rec: Device, device: str, at: float, job: str, last: bool = True) -> Device:
    """A job left the device; after the last one it is refreshed (or, if draining, drained).
    A device that failed or went away meanwhile stays as it is: leaving it does not heal it."""
    if not last or rec.state in (DeviceState.UNHEALTHY, DeviceState.OFFLINE, DeviceState.DRAINED):
        return rec
    if rec.state is DeviceState.DRAINING:
        return _go(rec, device, DeviceState.DRAINED, at, f"{job} left; drain complete")
    return _go(rec, device, DeviceState.REFRESHING, at, f"{job} released it")


def refreshed(rec: Device, device: str, at: float, ok: bool, detail: str = "") -> Device:
    """A refresh (worker recycled, scratch cleaned, probe run) finished, well or not."""
    if ok:
        return _go(rec, device, DeviceState.READY, at, detail or "refreshed and probed")
    return _go(rec, device, DeviceState.UNHEALTHY, at, detail or "refresh failed")


def drain(rec: Device, device: str, at: float, cause: str) -> Device:
    """Admit no new work: idle devices are drained at once, busy ones when their jobs end."""
    if rec.state is DeviceState.ALLOCATED:
        return _go(rec, device, DeviceState.DRAINING, at, cause)
    return _go(rec, device, DeviceState.DRAINED, at, cause)


def fail(rec: Device, device: str, at: float, cause: str) -> Device:
    """A health check failed (its jobs, if any, are requeued by the controller)."""
    return _go(rec, device, DeviceState.UNHEALTHY, at, cause)


def recover(rec: Device, device: str, at: float, cause: str = "remediation") -> Device:
    """Start remediation of an unhealthy or drained device: refresh and probe it."""
    return _go(rec, device, DeviceState.REFRESHING, at, cause)
