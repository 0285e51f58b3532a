"""Energy accounting: what each device used, and which job (or nobody) used it.

An :class:`EnergyMeter` is fed :class:`~accelnet.devices.telemetry.DeviceSample` s in time
order (per device) and told which jobs hold which devices when (:class:`JobHold`: job,
devices, the share of each, start, end). Between two samples of a device its energy is

1. the difference of its energy counter (``energy_j``: NVML's total energy, RAPL) when both
   samples have one and it did not go down;
2. else the trapezoid of the two power readings (``power_w``);
3. else one power reading times the interval;
4. else, when the counter went down (a driver reload resets it to 0), the later reading:
   the energy since the reset, a lower bound;
5. else nothing is known: the interval is a *gap* (0 J, its seconds in ``unmeasured_s``).

Within an interval, power is taken to move linearly between the two power readings (when
both exist; else to be constant), so a job that holds the device for part of the interval
gets the energy of that part. A job holding ``share`` of a device gets that share of the
device's energy while it holds it (shares adding up past 1 are scaled down to 1); what no
job holds goes to *idle*. By construction, per device, the jobs' energy plus idle equals the
device's total (up to float rounding).

Attribution is settled lazily: an interval is attributed (and forgotten) once it is
``settle_s`` older than its device's newest sample, or at :meth:`EnergyMeter.commit`; until
then holds may still start or end inside it (the controller learns of a job's end a little
after it happens). A hold that changes time already settled raises ValueError.

:func:`model_job_energy` gives a job's energy from the power model (catalog idle/max W,
utilization, share) when nothing was measured; :meth:`EnergyMeter.job` fills a job's
unmeasured time the same way. A :class:`JobEnergy` says which part was measured and which
modelled. Pure: no I/O, no clock; times are the samples' and the caller's.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal, Self

from accelnet.devices.power import DevicePower
from accelnet.devices.telemetry import DeviceSample

__all__ = ["IDLE", "EnergyMeter", "EnergyReport", "JobEnergy", "JobHold", "model_job_energy"]

IDLE: Final = "idle"
"""The name energy nobody held goes under in reports."""

Source = Literal["measured", "modelled", "mixed", "none"]
_EPS: Final = 1e-9


@dataclass(frozen=True, slots=True)
class JobHold:
    """Job ``job`` holds ``devices`` (device, share in (0, 1]) from ``start`` to ``end``
    (None: still holding). Raises ValueError for no devices, a device twice, a share out of
    range or an end before the start."""

    job: str
    devices: tuple[tuple[str, float], ...]
    start: float
    end: float | None = None
    tenant: str | None = None

    def __post_init__(self) -> None:
        names = [d for d, _ in self.devices]
        if not names or len(set(names)) != len(names):
            raise ValueError(f"job {self.job}: devices must be distinct and not empty: {names}")
        for d, share in self.devices:
            if not (0 < share <= 1):
                raise ValueError(f"job {self.job}: share of {d} must be in (0, 1], got {share}")
        if not math.isfinite(self.start) or (self.end is not None and self.end < self.start):
            raise ValueError(f"job {self.job}: bad interval [{self.start}, {self.end}]")

    @classmethod
    def on(
        cls,
        job: str,
        devices: Iterable[str] | Mapping[str, float],
        start: float,
        end: float | None = None,
        *,
        share: float = 1.0,
        tenant: str | None = None,
    ) -> Self:
        """A hold of ``devices`` (ids, each at ``share``; or device -> share)."""
        pairs = (
            tuple((d, float(s)) for d, s in devices.items())
            if isinstance(devices, Mapping)
            else tuple((d, float(share)) for d in devices)
        )
        return cls(job, pairs, float(start), end, tenant)


@dataclass(frozen=True, slots=True)
class JobEnergy:
    """A job's energy (J): ``measured_j`` from telemetry, ``modelled_j`` from the power model
    for the device-seconds nothing measured (``unmeasured_s`` of ``held_s``; without a model
    they stay unaccounted). ``by_device`` splits the total."""

    job: str
    measured_j: float
    modelled_j: float
    held_s: float
    unmeasured_s: float
    by_device: dict[str, float] = field(default_factory=dict)
    tenant: str | None = None

    @property
    def joules(self) -> float:
        """Measured plus modelled energy."""
        return self.measured_j + self.modelled_j

    @property
    def source(self) -> Source:
        """``measured`` (all held time measured), ``modelled`` (none), ``mixed``, or
        ``none`` (neither measured nor modelled)."""
        if self.held_s > 0 and self.unmeasured_s <= _EPS * self.held_s:
            return "measured"
        if self.modelled_j > 0:
            return "mixed" if self.measured_j > 0 else "modelled"
        return "measured" if self.measured_j > 0 else "none"

    def describe(self) -> str:
        """``"12.3 kJ measured"``, ``"4.1 kJ modelled"``, ``"9 kJ (8 measured + 1 modelled)"``."""
        if self.source == "mixed":
            return (
                f"{_kj(self.joules)} kJ ({_kj(self.measured_j)} measured + "
                f"{_kj(self.modelled_j)} modelled)"
            )
        gap = ""
        if self.source == "measured" and self.unmeasured_s > _EPS * max(self.held_s, 1.0):
            gap = f", {self.unmeasured_s:.0f} device-s unmeasured"
        return f"{_kj(self.joules)} kJ {self.source}{gap}"

    def to_json(self) -> dict[str, Any]:
        """JSON-ready figures (J, s)."""
        return {
            "job": self.job,
            "tenant": self.tenant,
            "joules": self.joules,
            "measured_j": self.measured_j,
            "modelled_j": self.modelled_j,
            "source": self.source,
            "held_s": self.held_s,
            "unmeasured_s": self.unmeasured_s,
            "by_device": dict(self.by_device),
        }


def model_job_energy(
    job: str,
    devices: Iterable[DevicePower],
    seconds: float,
    *,
    share: float = 1.0,
    util: float = 1.0,
    caps: Mapping[str, float] | None = None,
    tenant: str | None = None,
) -> JobEnergy:
    """A job's energy from the power model alone: on each device ``share`` of its draw at
    utilization ``util`` (0..1; 1 = busy, the simulator's assumption) under its cap in
    ``caps``, for ``seconds``. Labelled ``modelled``."""
    if seconds < 0 or not (0 < share <= 1) or not (0 <= util <= 1):
        raise ValueError(f"job {job}: need seconds >= 0, 0 < share <= 1, 0 <= util <= 1")
    caps = caps or {}
    by = {p.device: seconds * share * p.draw_w(1.0, caps.get(p.device), util) for p in devices}
    held = seconds * len(by)
    return JobEnergy(job, 0.0, sum(by.values()), held, held, by, tenant)


@dataclass(frozen=True, slots=True)
class EnergyReport:
    """The meter's figures (J): per job, per device (total and idle), per tenant (jobs that
    named one), and per device the seconds no reading covered."""

    by_job: dict[str, float]
    by_device: dict[str, float]
    idle_by_device: dict[str, float]
    by_tenant: dict[str, float]
    unmeasured_s: dict[str, float]

    @property
    def total_j(self) -> float:
        """Every device's energy."""
        return math.fsum(self.by_device.values())

    @property
    def idle_j(self) -> float:
        """Energy no job held."""
        return math.fsum(self.idle_by_device.values())

    def to_json(self) -> dict[str, Any]:
        """JSON-ready figures; ``by_job`` includes :data:`IDLE`."""
        return {
            "total_j": self.total_j,
            "by_job": {**self.by_job, IDLE: self.idle_j},
            "by_device": dict(self.by_device),
            "idle_by_device": dict(self.idle_by_device),
            "by_tenant": dict(self.by_tenant),
            "unmeasured_s": dict(self.unmeasured_s),
        }


@dataclass(slots=True)
class _Seg:
    """One interval between two samples of a device, and what it used."""

    t0: float
    t1: float
    joules: float
    p0: float | None
    p1: float | None
    measured: bool

    def part(self, u: float, v: float) -> float:
        """Energy of ``[u, v]`` within the interval (linear power between p0 and p1)."""
        dt = self.t1 - self.t0
        if not self.measured or v <= u:
            return 0.0
        p0, p1 = self.p0, self.p1
        if p0 is not None and p1 is not None and p0 >= 0 and p1 >= 0 and max(p0, p1) > 0:
            # Scaled by the larger reading so that neither the sum nor its half can
            # underflow (p0=0, p1=5e-324 made the divisor 0) or overflow.
            top = max(p0, p1)
            a, b = p0 / top, p1 / top
            mean = a + (b - a) * ((u + v) / 2 - self.t0) / dt
            return self.joules * (v - u) * mean / (dt * (a + b) / 2)
        return self.joules * (v - u) / dt


@dataclass(slots=True)
class _Totals:
    device: dict[str, float] = field(default_factory=dict)
    idle: dict[str, float] = field(default_factory=dict)
    gap_s: dict[str, float] = field(default_factory=dict)
    job: dict[str, dict[str, float]] = field(default_factory=dict)  # job -> device -> J
    job_s: dict[str, dict[str, float]] = field(default_factory=dict)  # measured s held

    def copy(self) -> _Totals:
        return _Totals(
            dict(self.device),
            dict(self.idle),
            dict(self.gap_s),
            {j: dict(v) for j, v in self.job.items()},
            {j: dict(v) for j, v in self.job_s.items()},
        )


@dataclass(slots=True)
class _Dev:
    last: DeviceSample | None = None
    pending: list[_Seg] = field(default_factory=list)
    settled: float = -math.inf  # attributed up to here
    jobs: list[str] = field(default_factory=list)  # jobs with a hold on it not yet settled


class EnergyMeter:
    """Per-device energy and its attribution to jobs (see the module docstring).

    ``settle_s`` (None: only at :meth:`commit`) is how late a hold may start or end after
    the device's newest sample. Not thread-safe.
    """

    def __init__(self, *, settle_s: float | None = 60.0) -> None:
        if settle_s is not None and not settle_s >= 0:
            raise ValueError(f"settle_s must be >= 0 or None, got {settle_s!r}")
        self._settle = settle_s
        self._devs: dict[str, _Dev] = {}
        self._holds: dict[str, JobHold] = {}
        self._done = _Totals()

    # ----- input ---------------------------------------------------------------------------
    def add(self, sample: DeviceSample) -> None:
        """Account ``sample``; ValueError if older than its device's newest."""
        dev = self._dev(sample.device)
        last = dev.last
        if last is not None and sample.time < last.time:
            raise ValueError(
                f"sample of {sample.device} at {sample.time} is older than the latest ({last.time})"
            )
        if last is not None and sample.time > last.time:
            dev.pending.append(_segment(last, sample))
        dev.last = sample
        if self._settle is not None:
            self._commit_dev(sample.device, dev, sample.time - self._settle)

    def extend(self, samples: Iterable[DeviceSample]) -> None:
        """:meth:`add` each of ``samples`` in order."""
        for s in samples:
            self.add(s)

    def hold(self, hold: JobHold) -> None:
        """Record (or replace) ``hold``. ValueError if it would change settled time."""
        old = self._holds.get(hold.job)
        since = hold.start if old is None else _first_change(old, hold)
        names = {d for d, _ in hold.devices} | {d for d, _ in (old.devices if old else ())}
        for d in sorted(names):
            settled = self._dev(d).settled
            if since < settled:
                raise ValueError(
                    f"job {hold.job}: the energy of {d} is settled up to {settled}; a hold "
                    f"cannot change it from {since} (report holds within settle_s)"
                )
        if old is not None:
            for d, _ in old.devices:
                jobs = self._devs[d].jobs
                if hold.job in jobs:
                    jobs.remove(hold.job)
        self._holds[hold.job] = hold
        for d, _ in hold.devices:
            self._devs[d].jobs.append(hold.job)

    def start(
        self,
        job: str,
        devices: Iterable[str] | Mapping[str, float],
        now: float,
        *,
        share: float = 1.0,
        tenant: str | None = None,
    ) -> None:
        """``job`` holds ``devices`` from ``now`` (see :meth:`JobHold.on`)."""
        self.hold(JobHold.on(job, devices, now, share=share, tenant=tenant))

    def stop(self, job: str, now: float) -> None:
        """``job`` released its devices at ``now``; KeyError for an unknown job."""
        h = self._holds[job]
        self.hold(JobHold(h.job, h.devices, h.start, now, h.tenant))

    def commit(self, until: float) -> None:
        """Attribute every interval that ends by ``until`` and forget it."""
        for name, dev in self._devs.items():
            self._commit_dev(name, dev, until)

    def forget(self, job: str) -> None:
        """Drop a finished job's figures once reported (its energy stays in the devices'
        totals and idle does not grow). ValueError while it has unsettled time."""
        h = self._holds.get(job)
        if h is not None and any(job in self._devs[d].jobs for d, _ in h.devices):
            raise ValueError(f"job {job} has energy not yet settled; commit first")
        self._holds.pop(job, None)
        self._done.job.pop(job, None)
        self._done.job_s.pop(job, None)

    # ----- answers -------------------------------------------------------------------------
    def report(self) -> EnergyReport:
        """Every figure, settled and not."""
        t = self._totals()
        by_job = {j: math.fsum(t.job.get(j, {}).values()) for j in self._holds}
        tenants: dict[str, float] = {}
        for j, e in by_job.items():
            h = self._holds.get(j)
            if h is not None and h.tenant is not None:
                tenants[h.tenant] = tenants.get(h.tenant, 0.0) + e
        return EnergyReport(by_job, t.device, t.idle, tenants, t.gap_s)

    def job(
        self,
        job: str,
        now: float | None = None,
        *,
        power: Mapping[str, DevicePower] | None = None,
        util: float = 1.0,
        caps: Mapping[str, float] | None = None,
    ) -> JobEnergy:
        """``job``'s energy. Its held time runs to its end, else ``now``, else its devices'
        newest samples; the part no sample covered is filled from ``power`` (device ->
        figures) at ``util`` under ``caps`` where given (see :func:`model_job_energy`).
        KeyError for a job the meter does not know."""
        h = self._holds[job]
        got, covered = self._job_totals(job, [d for d, _ in h.devices])
        caps = caps or {}
        by: dict[str, float] = {}
        held = gap = modelled = 0.0
        for d, share in h.devices:
            last = self._devs[d].last
            until = h.end if h.end is not None else now
            if until is None:
                until = last.time if last is not None else h.start
            span = max(0.0, until - h.start)
            miss = max(0.0, span - covered.get(d, 0.0))
            fill = 0.0
            if power is not None and d in power and miss > 0:
                fill = miss * share * power[d].draw_w(1.0, caps.get(d), util)
            by[d] = got.get(d, 0.0) + fill
            held, gap, modelled = held + span, gap + miss, modelled + fill
        measured = math.fsum(got.values())
        return JobEnergy(job, measured, modelled, held, gap, by, h.tenant)

    # ----- internals -----------------------------------------------------------------------
    def _dev(self, name: str) -> _Dev:
        dev = self._devs.get(name)
        if dev is None:
            dev = self._devs[name] = _Dev()
        return dev

    def _job_totals(
        self, job: str, devices: Iterable[str]
    ) -> tuple[dict[str, float], dict[str, float]]:
        """``job``'s energy (J) and measured seconds per device, settled plus pending: the
        pending intervals of ``devices`` only, never a copy of every job's figures (a job's
        end costs O(its devices' pending intervals), not O(jobs ever metered))."""
        pending = _Totals()
        for name in devices:
            dev = self._devs[name]
            for seg in dev.pending:
                self._attribute(name, dev, seg, pending)
        got = dict(self._done.job.get(job, {}))
        for d, e in pending.job.get(job, {}).items():
            got[d] = got.get(d, 0.0) + e
        covered = dict(self._done.job_s.get(job, {}))
        for d, x in pending.job_s.get(job, {}).items():
            covered[d] = covered.get(d, 0.0) + x
        return got, covered

    def _totals(self, devices: Iterable[str] | None = None) -> _Totals:
        """Settled figures plus the pending intervals of ``devices`` (None: all)."""
        t = self._done.copy()
        for name in self._devs if devices is None else devices:
            dev = self._devs[name]
            for seg in dev.pending:
                self._attribute(name, dev, seg, t)
        return t

    def _commit_dev(self, name: str, dev: _Dev, until: float) -> None:
        n = 0
        while n < len(dev.pending) and dev.pending[n].t1 <= until:
            self._attribute(name, dev, dev.pending[n], self._done)
            dev.settled = dev.pending[n].t1
            n += 1
        if n:
            del dev.pending[:n]
            dev.jobs = [j for j in dev.jobs if (e := self._holds[j].end) is None or e > dev.settled]

    def _attribute(self, name: str, dev: _Dev, seg: _Seg, t: _Totals) -> None:
        holds = []
        for j in dev.jobs:
            h = self._holds[j]
            if h.start < seg.t1 and (h.end is None or h.end > seg.t0):
                holds.append((h, dict(h.devices)[name]))
        cuts = {seg.t0, seg.t1}
        for h, _ in holds:
            cuts.update(x for x in (h.start, h.end) if x is not None and seg.t0 < x < seg.t1)
        points = sorted(cuts)
        left = seg.joules if seg.measured else 0.0
        total = idle = 0.0
        for k, (u, v) in enumerate(itertools.pairwise(points)):
            e = left if k == len(points) - 2 else seg.part(u, v)
            left -= e
            active = [(h, s) for h, s in holds if h.start <= u and (h.end is None or h.end >= v)]
            shares = sum(s for _, s in active)
            scale = 1.0 / max(1.0, shares)
            for h, s in active:
                part = e * s * scale
                total += part
                jd = t.job.setdefault(h.job, {})
                jd[name] = jd.get(name, 0.0) + part
                if seg.measured:
                    js = t.job_s.setdefault(h.job, {})
                    js[name] = js.get(name, 0.0) + (v - u)
            share_idle = e * max(0.0, 1.0 - shares)
            idle += share_idle
            total += share_idle
        t.device[name] = t.device.get(name, 0.0) + total
        t.idle[name] = t.idle.get(name, 0.0) + idle
        if not seg.measured:
            t.gap_s[name] = t.gap_s.get(name, 0.0) + (seg.t1 - seg.t0)
        else:
            t.gap_s.setdefault(name, 0.0)


def _segment(a: DeviceSample, b: DeviceSample) -> _Seg:
    """The energy between samples ``a`` and ``b`` of one device (rules 1-5)."""
    dt = b.time - a.time
    pa, pb, ea, eb = a.power_w, b.power_w, a.energy_j, b.energy_j
    if ea is not None and eb is not None and eb >= ea:
        return _Seg(a.time, b.time, eb - ea, pa, pb, True)
    if pa is not None and pb is not None:
        return _Seg(a.time, b.time, (pa + pb) / 2 * dt, pa, pb, True)
    if pa is not None or pb is not None:
        p = pa if pa is not None else pb
        return _Seg(a.time, b.time, (p or 0.0) * dt, None, None, True)
    if eb is not None and ea is not None:  # the counter went down: reset to 0 meanwhile
        return _Seg(a.time, b.time, eb, None, None, True)
    return _Seg(a.time, b.time, 0.0, None, None, False)


def _first_change(old: JobHold, new: JobHold) -> float:
    """The earliest time at which ``new`` attributes differently from ``old``."""
    if old.devices != new.devices or old.start != new.start:
        return min(old.start, new.start)
    if old.end == new.end:
        return math.inf
    ends = [x for x in (old.end, new.end) if x is not None]
    return min(ends)


def _kj(joules: float) -> str:
    return f"{joules / 1000:,.3g}" if joules < 1e6 else f"{joules / 1000:,.0f}"
