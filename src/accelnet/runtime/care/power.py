"""Power and energy in the live system: the controller's power hook.

:class:`PowerCare` attaches to a :class:`~accelnet.runtime.control.controller.Controller` (as
``controller.power``) and, as a listener, to its device care's telemetry. It keeps:

- **energy per job** (:class:`~accelnet.runtime.care.energy_book.EnergyBook`): each attempt is
  metered from when its gang takes its devices to when it ends, however it ends (success,
  failure, preemption, cancel, a device failure); the controller stores the sum of the
  attempts on the job record (``JobRecord.energy``, :meth:`JobEnergy.to_json`);
- with a **power budget**, the :class:`~accelnet.devices.governor.PowerGovernor`: before the
  controller acts on a decision's starts, :meth:`admit` plans. Starts the plan delays do not
  launch; the governor's reason becomes the job's waiting reason (``power:delay`` event,
  once per job). Caps that go down are set before the launches, caps that go up after
  (:meth:`launched`), changes under 1 W skipped; every change is a ``power:cap`` event.
  Caps go through a :class:`~accelnet.devices.power.PowerControl` per device: NVML for
  NVIDIA GPUs where it answers, else an :class:`EmulatedPowerControl` that records them
  (CPU and emulated devices: the cap is reported, not enforced). A
  :class:`PowerLimitError` (no root, unsupported) is a ``power:error`` event and pins that
  device's cap range to its limit in force; the plan is made again without it. While jobs
  are delayed, every telemetry round asks the controller to decide again (measured draw
  may have fallen).

At :meth:`close` the caps this controller lowered are set back to their defaults. Not
thread-safe: the controller's thread (or the lock guarding the controller) calls it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any, Final, Protocol

from accelnet.devices.energy import JobEnergy
from accelnet.devices.governor import JobLoad, PowerGovernor, PowerPlan
from accelnet.devices.power import (
    DevicePower,
    EmulatedPowerControl,
    PowerControl,
    PowerLimitError,
    PowerLimits,
)
from accelnet.devices.telemetry import DeviceSample, SamplerUnavailableError
from accelnet.fabric import Fabric
from accelnet.fabric.model import DeviceKind
from accelnet.runtime.care.energy_book import EnergyBook, add_energy, energy_from_json
from accelnet.runtime.control.store import JobRecord, Store
from accelnet.sched import Placement
from accelnet.sched.snapshot import Start

__all__ = ["PowerCare", "PowerHook", "default_controls"]

MIN_CHANGE_W: Final = 1.0
"""Cap changes smaller than this are not made."""
_REPLANS: Final = 4


class PowerHook(Protocol):
    """What the controller calls about power (:class:`PowerCare`)."""

    def admit(self, starts: Sequence[Start], now: float) -> Sequence[Start]:
        """The starts that may launch now (caps lowered for them); the rest wait."""

    def launched(self, now: float) -> None:
        """The admitted starts are launched: raise the caps that go up."""

    def started(self, rec: JobRecord, placement: Placement, attempt: int, now: float) -> None:
        """Attempt ``attempt`` of ``rec`` took the devices of ``placement``."""

    def ended(self, rec: JobRecord, attempt: int, now: float) -> dict[str, Any] | None:
        """The attempt ended: the job's energy so far (its record's, plus this attempt's)."""

    def reason(self, job_id: str) -> str | None:
        """Why the power budget holds a job back (None: it does not)."""


def default_controls(
    fabric: Fabric, emulated: bool, control: PowerControl | None = None
) -> tuple[dict[str, PowerControl], list[PowerControl]]:
    """A power control for every device of ``fabric``: ``control``'s devices by it; on a
    real (not emulated) fabric, NVIDIA GPUs through NVML where it answers; the rest through
    an :class:`EmulatedPowerControl` at catalog figures. Also the controls made here (to
    close)."""
    controls: dict[str, PowerControl] = {}
    made: list[PowerControl] = []
    if control is not None:
        controls.update(dict.fromkeys(control.devices(), control))
    elif not emulated:
        gpus = [d for d in fabric.devices.values()
                if d.kind is DeviceKind.GPU and d.model.vendor == "nvidia"]  # fmt: skip
        if gpus:
            from accelnet.devices.samplers.nvml_power import NvmlPowerControl  # noqa: PLC0415

            with contextlib.suppress(SamplerUnavailableError, ImportError):
                nvml = NvmlPowerControl(gpus)
                made.append(nvml)
                controls.update(dict.fromkeys(nvml.devices(), nvml))
    rest = [DevicePower.of(d) for d in fabric.devices.values() if d.id not in controls]
    if rest:
        em = EmulatedPowerControl(rest)
        made.append(em)
        controls.update(dict.fromkeys(em.devices(), em))
    return controls, made


class PowerCare:
    """Energy per job and, with ``budget_w``, the power budget (see the module docstring).

    ``controls``: device -> its :class:`PowerControl` (see :func:`default_controls`; needed
    only with a budget); ``owned``: controls to close with this; ``base_w``: the draw the
    budget covers besides the devices; ``wake``: asks the controller to decide again.
    """

    def __init__(
        self,
        fabric: Fabric,
        store: Store,
        *,
        budget_w: float | None = None,
        controls: Mapping[str, PowerControl] | None = None,
        owned: Sequence[PowerControl] = (),
        base_w: float = 0.0,
        settle_s: float = 30.0,
        wake: Callable[[], None] | None = None,
    ) -> None:
        self._store = store
        self.controls = dict(controls or {})
        self._owned = list(owned)
        self._wake = wake
        limits = {d: self._limits(d) for d in fabric.devices}
        self.power = {d.id: DevicePower.of(d, limits[d.id]) for d in fabric.devices.values()}
        self.book = EnergyBook(self.power, settle_s=settle_s)
        self.budget_w = budget_w
        self._base_w = base_w
        self.governor: PowerGovernor | None = None
        if budget_w is not None:
            missing = sorted(set(fabric.devices) - set(self.controls))
            if missing:
                raise ValueError(f"no power control for {missing[:8]}: see default_controls")
            self.governor = PowerGovernor(budget_w, self.power.values(), base_w=base_w)
        self._caps: dict[str, float] = {}  # device -> limit in force
        for d, lim in limits.items():
            known = lim.limit_w if lim is not None else None
            self._caps[d] = known if known is not None else self.power[d].cap_max_w
        self._default = dict(self._caps)
        self._top = {d: p.cap_max_w for d, p in self.power.items()}  # before any pinning
        self._running: dict[str, JobLoad] = {}
        self._attempt: dict[str, int] = {}
        self._delayed: dict[str, str] = {}
        self._drawn: dict[str, float] = {}
        self._pending: PowerPlan | None = None
        self._over = ""
        self.plans = 0

    # ----- the controller's hook -----------------------------------------------------------
    def admit(self, starts: Sequence[Start], now: float) -> Sequence[Start]:
        """See :class:`PowerHook`; without a budget, every start."""
        if self.governor is None:
            return starts
        loads = [  # a CPU-only job draws on no device this governs: never delayed
            JobLoad(s.job, s.placement.devices, s.placement.share)
            for s in starts
            if s.placement.devices
        ]
        plan = self._plan(now, loads)
        for _ in range(_REPLANS):  # a refused cap pins its device: plan again without it
            if self._apply(plan, now, lower=True):
                break
            plan = self._plan(now, loads)
        self._pending = plan
        for job, why in plan.delayed.items():
            if job not in self._delayed:
                self._store.log(job, now, "power:delay", why)
        self._delayed = dict(plan.delayed)
        if not plan.feasible and plan.reason != self._over:
            self._store.log(None, now, "power:over", plan.reason)
        self._over = plan.reason
        return [s for s in starts if s.job not in plan.delayed]

    def launched(self, now: float) -> None:
        """See :class:`PowerHook`."""
        plan, self._pending = self._pending, None
        if plan is not None:
            self._apply(plan, now, lower=False)

    def started(self, rec: JobRecord, placement: Placement, attempt: int, now: float) -> None:
        """See :class:`PowerHook`."""
        devices = placement.devices
        if not devices:  # a CPU-only job: no device's energy to account
            return
        self._running[rec.id] = JobLoad(rec.id, devices, placement.share)
        self._attempt[rec.id] = attempt
        self.book.start(f"{rec.id}#{attempt}", rec.id, devices, now, share=placement.share,
                        tenant=rec.spec.tenant)  # fmt: skip

    def ended(self, rec: JobRecord, attempt: int, now: float) -> dict[str, Any] | None:
        """See :class:`PowerHook`."""
        self._running.pop(rec.id, None)
        self._attempt.pop(rec.id, None)
        try:
            this = self.book.stop(f"{rec.id}#{attempt}", now, self._caps)
        except KeyError:
            return rec.energy
        return add_energy(self._stored(rec), this, rec.id).to_json()

    def reason(self, job_id: str) -> str | None:
        """See :class:`PowerHook`."""
        return self._delayed.get(job_id)

    # ----- telemetry -----------------------------------------------------------------------
    def observe(self, samples: list[DeviceSample], now: float) -> None:
        """A round of samples (a :class:`~accelnet.runtime.care.device_care.SampleListener`)."""
        for s in samples:
            if s.power_w is not None and s.device in self.power:
                self._drawn[s.device] = s.power_w
        self.book.observe(samples)
        if self._delayed and self._wake is not None:
            self._wake()

    # ----- reports -------------------------------------------------------------------------
    def job_energy(self, rec: JobRecord, now: float) -> JobEnergy | None:
        """``rec``'s energy: its stored attempts' plus, while it runs, the current one's."""
        stored = self._stored(rec)
        attempt = self._attempt.get(rec.id)
        live = None
        if attempt is not None:
            live = self.book.current(f"{rec.id}#{attempt}", now, self._caps)
        return stored if live is None else add_energy(stored, live, rec.id)

    def caps(self) -> dict[str, float]:
        """Device -> its limit in force, for devices capped below their maximum (with a
        budget; empty without)."""
        if self.governor is None:
            return {}
        return {d: c for d, c in self._caps.items() if c < self._top[d] - MIN_CHANGE_W / 2}

    def device_energy(self, now: float) -> dict[str, float]:
        """Per device: the energy of the jobs run on it since this controller started (J)."""
        return self.book.by_device(now, self._caps)

    def close(self, now: float) -> None:
        """Set the caps this controller lowered back to their defaults; close the controls
        it made. Idempotent."""
        if self.governor is not None:
            for d, cap in sorted(self._caps.items()):
                default = self._default[d]
                if cap < default - MIN_CHANGE_W / 2:
                    self._set(d, default, now, "the controller closed: back to the default")
        for c in self._owned:
            c.close()
        self._owned = []

    # ----- internals -----------------------------------------------------------------------
    def _limits(self, device: str) -> PowerLimits | None:
        control = self.controls.get(device)
        if control is None:
            return None
        try:
            return control.limits(device)
        except (PowerLimitError, KeyError):
            return None

    def _stored(self, rec: JobRecord) -> JobEnergy | None:
        if rec.energy is None:
            return None
        try:
            return energy_from_json(rec.energy)
        except (KeyError, TypeError, ValueError):
            return None

    def _plan(self, now: float, loads: list[JobLoad]) -> PowerPlan:
        assert self.governor is not None
        self.plans += 1
        return self.governor.plan(now, list(self._running.values()), loads, self._drawn)

    def _apply(self, plan: PowerPlan, now: float, lower: bool) -> bool:
        """Make the plan's cap changes that go down (``lower``) or up; False if one was
        refused (its device is pinned then)."""
        n = len(plan.speeds)
        why = (f"power budget {plan.budget_w:,.0f} W, {n} job{'s' if n != 1 else ''} running, "
               f"projected {plan.projected_w:,.0f} W")  # fmt: skip
        for d, planned in sorted(plan.caps.items()):
            cap = round(planned, 3)  # whole mW, as NVML sets them
            change = cap - self._caps[d]
            if abs(change) < MIN_CHANGE_W or (change < 0) != lower:
                continue
            if not self._set(d, cap, now, why):
                return False
        return True

    def _set(self, device: str, watts: float, now: float, why: str) -> bool:
        old = self._caps[device]
        try:
            limits = self.controls[device].set_limit(device, watts)
        except PowerLimitError as exc:
            self._pin(device, now, exc)
            return False
        new = limits.limit_w if limits.limit_w is not None else watts
        self._caps[device] = new
        self._store.log(None, now, "power:cap", f"{device}: {_w(new)} W (was {_w(old)} W): {why}")
        return True

    def _pin(self, device: str, now: float, exc: PowerLimitError) -> None:
        """The device's cap cannot change: the governor keeps it at its limit from now on."""
        limit = self._caps[device]
        p = self.power[device]
        self.power[device] = replace(p, cap_min_w=limit, cap_max_w=limit)
        assert self.budget_w is not None
        self.governor = PowerGovernor(self.budget_w, self.power.values(), base_w=self._base_w)
        self._store.log(None, now, "power:error",
                        f"{device}: {exc}; its cap stays at {_w(limit)} W")  # fmt: skip


def _w(value: float) -> str:
    return f"{value:,.0f}" if abs(value - round(value)) < 0.05 else f"{value:,.1f}"
