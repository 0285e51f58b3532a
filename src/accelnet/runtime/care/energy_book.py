"""Energy per job in the live system: telemetry through an :class:`EnergyMeter`, the power
model where nothing was measured.

:class:`EnergyBook` is fed every round of telemetry samples (by the controller's device
care) and told when a job's attempt takes its devices and gives them back. At the end of an
attempt it answers a :class:`~accelnet.devices.energy.JobEnergy`:

- on devices that have been sampled, the meter's figure: the energy counter or the power
  readings between samples (``measured``); the held time no reading covered (a sampler that
  gives no power, such as the emulated one or a CPU without readable RAPL) is filled from
  the catalog power model (``modelled``);
- on devices never sampled (no sampler for them, health checks off), the power model
  alone, for the attempt's duration.

The model's utilization is the mean of the utilization readings of the attempt's devices
while it held them, or 1 (busy, the simulator's assumption) when none was taken (an
attempt shorter than a sampling period). Caps are those in force when the attempt ends.

Attempts are metered under their own key (``job#attempt``) and added up per job
(:func:`add_energy`); a finished attempt is forgotten by the meter once its time is
settled. Not thread-safe: the controller's thread (or its lock) owns it.
"""

from __future__ import annotations

import contextlib
import math
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from accelnet.devices.energy import EnergyMeter, JobEnergy, model_job_energy
from accelnet.devices.power import DevicePower
from accelnet.devices.telemetry import DeviceSample

__all__ = ["EnergyBook", "add_energy", "energy_from_json"]

_MAX_FORGET: Final = 10_000  # attempts waiting to be forgotten by the meter, at most


def energy_from_json(data: Mapping[str, Any]) -> JobEnergy:
    """A :class:`JobEnergy` from its :meth:`~JobEnergy.to_json` form (derived keys such as
    ``joules`` and ``source`` are recomputed); KeyError or ValueError if a figure is missing
    or not a number."""
    return JobEnergy(
        str(data["job"]),
        float(data["measured_j"]),
        float(data["modelled_j"]),
        float(data["held_s"]),
        float(data["unmeasured_s"]),
        {str(k): float(v) for k, v in dict(data.get("by_device") or {}).items()},
        None if data.get("tenant") is None else str(data["tenant"]),
    )


def add_energy(a: JobEnergy | None, b: JobEnergy, job: str | None = None) -> JobEnergy:
    """``a`` and ``b`` together (two attempts of a job, or two sets of its devices), named
    ``job`` (default: ``b``'s)."""
    if a is None:
        if job is None or job == b.job:
            return b
        a = JobEnergy(job, 0.0, 0.0, 0.0, 0.0)
    by = dict(a.by_device)
    for d, j in b.by_device.items():
        by[d] = by.get(d, 0.0) + j
    return JobEnergy(
        job or b.job,
        a.measured_j + b.measured_j,
        a.modelled_j + b.modelled_j,
        a.held_s + b.held_s,
        a.unmeasured_s + b.unmeasured_s,
        by,
        b.tenant if b.tenant is not None else a.tenant,
    )


@dataclass(slots=True)
class _Hold:
    job: str
    devices: tuple[str, ...]
    share: float
    start: float
    tenant: str | None
    metered: tuple[str, ...] = ()  # the devices the meter has samples of
    util_sum: float = 0.0
    util_n: int = 0
    end: float | None = None

    @property
    def util(self) -> float:
        """Mean utilization (0..1) of its devices while held; 1 without readings."""
        return self.util_sum / self.util_n / 100.0 if self.util_n else 1.0


@dataclass(slots=True)
class _Totals:
    by_device: dict[str, float] = field(default_factory=dict)  # ended attempts, J

    def add(self, e: JobEnergy) -> None:
        for d, j in e.by_device.items():
            self.by_device[d] = self.by_device.get(d, 0.0) + j


class EnergyBook:
    """Per-attempt energy from samples and the power model (see the module docstring).

    ``power``: the devices' power figures, by id (devices not in it are left out of every
    figure); ``settle_s``: how late (s of sample time) an attempt's start or end may be
    reported after its devices' newest sample.
    """

    def __init__(self, power: Mapping[str, DevicePower], *, settle_s: float = 30.0) -> None:
        self.power = dict(power)
        self.meter = EnergyMeter(settle_s=settle_s)
        self._sampled: set[str] = set()
        self._holds: dict[str, _Hold] = {}
        self._holding: dict[str, set[str]] = {}  # device -> keys of attempts holding it
        self._forget: deque[str] = deque()
        self._ended = _Totals()

    # ----- input ---------------------------------------------------------------------------
    def observe(self, samples: Iterable[DeviceSample]) -> None:
        """One round of samples: to the meter; utilization to the attempts that hold each
        device. A sample out of order for its device is skipped."""
        for s in samples:
            if s.device not in self.power:
                continue
            try:
                self.meter.add(s)
            except ValueError:
                continue
            self._sampled.add(s.device)
            u = s.utilization_pct
            if u is not None and math.isfinite(u):
                for key in self._holding.get(s.device, ()):
                    h = self._holds[key]
                    h.util_sum += min(100.0, max(0.0, u))
                    h.util_n += 1
        self._forget_settled()

    def start(
        self,
        key: str,
        job: str,
        devices: Sequence[str],
        now: float,
        *,
        share: float = 1.0,
        tenant: str | None = None,
    ) -> None:
        """Attempt ``key`` of ``job`` holds ``share`` of each of ``devices`` from ``now``."""
        devs = tuple(d for d in devices if d in self.power)
        hold = _Hold(job, devs, share, now, tenant)
        metered = tuple(d for d in devs if d in self._sampled)
        if metered:
            try:
                self.meter.start(key, metered, now, share=share, tenant=tenant)
                hold.metered = metered
            except ValueError:  # settled time: model it instead
                pass
        self._holds[key] = hold
        for d in devs:
            self._holding.setdefault(d, set()).add(key)

    def stop(self, key: str, now: float, caps: Mapping[str, float] | None = None) -> JobEnergy:
        """Attempt ``key`` gave its devices back at ``now``: its energy (under ``caps``).
        KeyError for an unknown attempt."""
        h = self._holds.pop(key)
        for d in h.devices:
            self._holding.get(d, set()).discard(key)
        h.end = now
        if h.metered:
            with contextlib.suppress(ValueError):
                self.meter.stop(key, now)
        e = self._energy(key, h, now, caps)
        if h.metered:
            self._forget.append(key)
            while len(self._forget) > _MAX_FORGET:
                self._forget.popleft()
        self._ended.add(e)
        return e

    # ----- answers -------------------------------------------------------------------------
    def current(
        self, key: str, now: float, caps: Mapping[str, float] | None = None
    ) -> JobEnergy | None:
        """A running attempt's energy so far; None for one the book does not hold."""
        h = self._holds.get(key)
        return None if h is None else self._energy(key, h, now, caps)

    def running(self) -> list[str]:
        """The keys of the attempts holding devices now."""
        return list(self._holds)

    def by_device(self, now: float, caps: Mapping[str, float] | None = None) -> dict[str, float]:
        """Per device: the energy of the attempts that ended on it plus of those running
        (J), since the book was made."""
        out = dict(self._ended.by_device)
        for key, h in self._holds.items():
            for d, j in self._energy(key, h, now, caps).by_device.items():
                out[d] = out.get(d, 0.0) + j
        return out

    # ----- internals -----------------------------------------------------------------------
    def _energy(
        self, key: str, h: _Hold, now: float, caps: Mapping[str, float] | None
    ) -> JobEnergy:
        util = h.util
        total: JobEnergy | None = None
        if h.metered:
            try:
                total = self.meter.job(key, now, power=self.power, util=util, caps=caps)
            except (KeyError, ValueError):
                total = None
        measured = h.metered if total is not None else ()
        rest = [self.power[d] for d in h.devices if d not in measured]
        until = h.end if h.end is not None else now
        if rest:
            modelled = model_job_energy(key, rest, max(0.0, until - h.start), share=h.share,
                                        util=util, caps=caps, tenant=h.tenant)  # fmt: skip
            total = add_energy(total, modelled, key)
        if total is None:
            total = JobEnergy(key, 0.0, 0.0, 0.0, 0.0, tenant=h.tenant)
        return JobEnergy(h.job, total.measured_j, total.modelled_j, total.held_s,
                         total.unmeasured_s, dict(total.by_device), h.tenant)  # fmt: skip

    def _forget_settled(self) -> None:
        kept: deque[str] = deque()
        while self._forget:
            key = self._forget.popleft()
            try:
                self.meter.forget(key)
            except ValueError:  # not settled yet
                kept.append(key)
        self._forget = kept
