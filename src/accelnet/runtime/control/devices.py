"""The controller's device tracking: every device's state, through the device lifecycle.

Each change goes through the device transition table, is written to the store and told to
the scheduler's session; released devices are refreshed on the backend before reuse.
Internal to :class:`~accelnet.runtime.control.controller.Controller`, which owns one
:class:`DeviceBook` (called from its thread only).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from accelnet.devices import (
    DEVICE_TRANSITIONS,
    DeviceState,
    allocate,
    fail,
    recover,
    release,
)
from accelnet.devices import refreshed as refresh_done
from accelnet.runtime.backend import Backend, NodeChange, SupportsRefresh
from accelnet.runtime.clock import Clock
from accelnet.runtime.control.store import Store
from accelnet.sched import Placement
from accelnet.statemachine import Tracked

RESTART_LET_GO = "holders let go when the controller restarted"
"""The cause of the device event a restart writes for every device the log may show held."""


class DeviceBook:
    """``states``: every device's tracked state; ``holders``: device -> jobs holding (a
    share of) it. ``tell(dev, state)`` passes each new state on to the scheduler's
    session."""

    def __init__(
        self,
        store: Store,
        backend: Backend,
        clock: Clock,
        tell: Callable[[str, DeviceState], None],
    ) -> None:
        self.store = store
        self.backend = backend
        self.clock = clock
        self._tell = tell
        self.states: dict[str, Tracked[DeviceState]] = {}
        self.holders: dict[str, set[str]] = {}  # device -> jobs holding it

    def recover(self, devices: Iterable[str], known: Mapping[str, DeviceState], now: float) -> None:
        """After a (re)start: devices the store does not know are discovered READY; those
        that were allocated, draining or refreshing come back through a refresh. No job
        holds a device after a restart (the jobs that ran are requeued or ended): every
        device the log may show held gets an event saying so (:data:`RESTART_LET_GO`), so
        an audit replaying the log drops its holders even where no refresh follows (an
        unhealthy device) or the refresh fails."""
        for dev in devices:
            state = known.get(dev)
            if state is None:
                self.track(dev, Tracked(DeviceState.UNKNOWN))
                self.set(dev, DeviceState.READY, now, "discovered")
            elif state in (DeviceState.ALLOCATED, DeviceState.DRAINING, DeviceState.REFRESHING):
                self.track(dev, Tracked(DeviceState.REFRESHING))
                self.store.set_device(dev, DeviceState.REFRESHING, now, RESTART_LET_GO)
                self.refresh(dev)
                if state is DeviceState.DRAINING and self.states[dev].state is DeviceState.READY:
                    self.set(dev, DeviceState.DRAINED, now, "drained before the restart")
            else:
                self.track(dev, Tracked(state))
                if state not in (DeviceState.READY, DeviceState.UNKNOWN):
                    self.store.set_device(dev, state, now, RESTART_LET_GO)

    def track(self, dev: str, rec: Tracked[DeviceState]) -> None:
        """A device's new state, for the controller and the scheduler's session."""
        self.states[dev] = rec
        self._tell(dev, rec.state)

    def set(self, dev: str, state: DeviceState, at: float, cause: str) -> None:
        """Move ``dev`` to ``state`` (IllegalTransitionError if the table does not allow
        it), recorded with ``cause``."""
        self.track(dev, self.states[dev].to(DEVICE_TRANSITIONS, dev, state, at, cause))
        self.store.set_device(dev, state, at, cause)

    def allocate(self, jid: str, devices: Iterable[str], now: float, share: float = 1.0) -> None:
        """Job ``jid`` holds ``devices`` (``share`` of each: all of it by default). A share
        below 1 is written into the event (``allocated to J (share 0.5)``), so an audit
        replaying the log knows it even after the job is placed anew."""
        cause = f"allocated to {jid}" if share >= 1.0 else f"allocated to {jid} (share {share:g})"
        for dev in devices:
            self.holders.setdefault(dev, set()).add(jid)
            self.track(dev, allocate(self.states[dev], dev, now, jid))
            self.store.set_device(dev, DeviceState.ALLOCATED, now, cause)

    def release(self, jid: str, placement: Placement, now: float) -> None:
        """Job ``jid`` lets go of its devices; those no other job holds are refreshed."""
        for dev in placement.devices:
            holders = self.holders.get(dev, set())
            holders.discard(jid)
            if holders:  # another job still holds a share of it: recorded, no change
                self.store.set_device(dev, self.states[dev].state, now, f"{jid} released it")
                continue
            rec = release(self.states[dev], dev, now, jid)
            self.track(dev, rec)
            self.store.set_device(dev, rec.state, now, f"{jid} released it")
            if rec.state is DeviceState.REFRESHING:
                self.refresh(dev)

    def refresh(self, dev: str) -> None:
        """Refresh ``dev`` on the backend (if it can); READY if that worked."""
        ok, detail = True, "nothing to refresh"
        if isinstance(self.backend, SupportsRefresh):
            ok, detail = self.backend.refresh(dev)
        now = self.clock.now()
        rec = refresh_done(self.states[dev], dev, now, ok, detail)
        self.track(dev, rec)
        self.store.set_device(dev, rec.state, now, detail)

    def fail(self, dev: str, now: float, cause: str) -> None:
        """``dev`` failed: UNHEALTHY (already UNHEALTHY: it stays)."""
        if self.states[dev].state is not DeviceState.UNHEALTHY:
            self.track(dev, fail(self.states[dev], dev, now, cause))
            self.store.set_device(dev, DeviceState.UNHEALTHY, now, cause)

    def node_change(self, change: NodeChange) -> None:
        """A machine went away (its devices OFFLINE; its tasks end LOST, which requeues
        their jobs within their retry budget) or is up (OFFLINE devices: UNKNOWN, READY)."""
        for dev in change.devices:
            state = self.states[dev].state
            if not change.up and state is not DeviceState.OFFLINE:
                self.set(dev, DeviceState.OFFLINE, change.at, change.cause)
            elif change.up and state is DeviceState.OFFLINE:
                self.set(dev, DeviceState.UNKNOWN, change.at, change.cause)
                self.set(dev, DeviceState.READY, change.at, change.cause)

    def repair(self, dev: str, now: float, cause: str) -> None:
        """Remediation of an UNHEALTHY (or drained) device: refresh and probe it."""
        self.track(dev, recover(self.states[dev], dev, now, cause))
        self.store.set_device(dev, DeviceState.REFRESHING, now, cause)
        self.refresh(dev)
