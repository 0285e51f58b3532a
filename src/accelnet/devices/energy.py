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

import bisect
import heapq
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
class _Steps:
    """A segment cut at every start and end of a hold inside it: per piece, its energy
    (the last piece takes what is left, so the pieces add up to the segment's), the
    sum of the shares held in it (0.0 exactly where nothing is held)."""

    points: list[float]
    energy: list[float]
    shares: list[float]

    def piece_range(self, u: float, v: float) -> range:
        """The pieces within ``[u, v]`` (both cut points of this segment)."""
        return range(bisect.bisect_left(self.points, u), bisect.bisect_left(self.points, v))


@dataclass(slots=True)
class _Seg:
    """One interval between two samples of a device, what it used, and the holds that
    overlap it (job -> share), with its pieces once asked for (dropped when they change)."""

    t0: float
    t1: float
    joules: float
    p0: float | None
    p1: float | None
    measured: bool
    holds: dict[str, float] = field(default_factory=dict)
    steps: _Steps | None = None

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

    def clip(self, h: JobHold) -> tuple[float, float] | None:
        """The part of ``h`` within this interval; None if they do not overlap."""
        if h.start < self.t1 and (h.end is None or h.end > self.t0):
            return max(h.start, self.t0), self.t1 if h.end is None else min(h.end, self.t1)
        return None

    def pieces(self, holds: Mapping[str, JobHold]) -> _Steps:
        """The segment's pieces (built once per change of its holds): O(m log m) for m
        holds, plus the shares held in each piece."""
        if self.steps is not None:
            return self.steps
        spans = {j: c for j in self.holds if (c := self.clip(holds[j])) is not None}
        points = sorted({self.t0, self.t1, *(x for c in spans.values() for x in c)})
        at = {x: k for k, x in enumerate(points)}
        starts: dict[int, list[str]] = {}
        ends: dict[int, list[str]] = {}
        for j, (u, v) in spans.items():
            if u < v:
                starts.setdefault(at[u], []).append(j)
                ends.setdefault(at[v], []).append(j)
        active: dict[str, float] = {}
        left = self.joules if self.measured else 0.0
        energy, shares = [], []
        for k, (u, v) in enumerate(itertools.pairwise(points)):
            for j in ends.get(k, ()):
                del active[j]
            for j in starts.get(k, ()):
                active[j] = self.holds[j]
            e = left if k == len(points) - 2 else self.part(u, v)
            left -= e
            energy.append(e)
            shares.append(math.fsum(active.values()) if active else 0.0)
        self.steps = _Steps(points, energy, shares)
        return self.steps

    def job_part(
        self, h: JobHold, share: float, holds: Mapping[str, JobHold]
    ) -> tuple[float, float]:
        """``h``'s energy (J) in this interval and the seconds of it measured."""
        span = self.clip(h)
        if span is None or span[0] >= span[1]:
            return 0.0, 0.0
        st = self.pieces(holds)
        joules = seconds = 0.0
        for k in st.piece_range(*span):
            joules += st.energy[k] * share / max(1.0, st.shares[k])
            seconds += st.points[k + 1] - st.points[k]
        return joules, seconds if self.measured else 0.0


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
    pending: list[_Seg] = field(default_factory=list)  # contiguous, in time order
    starts: list[float] = field(default_factory=list)  # their t0, for bisect
    settled: float = -math.inf  # attributed up to here
    jobs: set[str] = field(default_factory=set)  # jobs with a hold on it not yet settled
    ends: list[tuple[float, str]] = field(default_factory=list)  # heap: ends of those holds
    tail: dict[str, float] = field(default_factory=dict)  # holds reaching past ``last``

    def overlapping(self, u: float, v: float | None) -> list[_Seg]:
        """The pending intervals that ``[u, v]`` (v None: open) may overlap."""
        k = max(0, bisect.bisect_right(self.starts, u) - 1)
        out = []
        while k < len(self.pending) and (v is None or self.pending[k].t0 < v):
            if self.pending[k].t1 > u:
                out.append(self.pending[k])
            k += 1
        return out


class EnergyMeter:
    """Per-device energy and its attribution to jobs (see the module docstring).

    ``settle_s`` (None: only at :meth:`commit`) is how late a hold may start or end after
    the device's newest sample. Not thread-safe.

    Cost: each interval between samples keeps the holds that overlap it, and is cut into
    pieces once per change of them; a hold that starts and ends after its device's newest
    sample (the live case) touches no interval until the next sample. A job's figure costs
    O(the intervals it overlaps), whatever the number of jobs in the settle window.
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
            seg = _segment(last, sample)
            for j, share in dev.tail.items():
                if seg.clip(self._holds[j]) is not None:
                    seg.holds[j] = share
            dev.pending.append(seg)
            dev.starts.append(seg.t0)
        dev.last = sample
        if dev.tail:
            dev.tail = {j: s for j, s in dev.tail.items() if _reaches(self._holds[j], sample.time)}
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
        was = dict(old.devices) if old is not None else {}
        now = dict(hold.devices)
        names = set(was) | set(now)
        for d in sorted(names):
            settled = self._dev(d).settled
            if since < settled:
                raise ValueError(
                    f"job {hold.job}: the energy of {d} is settled up to {settled}; a hold "
                    f"cannot change it from {since} (report holds within settle_s)"
                )
        self._holds[hold.job] = hold
        for d in names:
            self._place(d, self._devs[d], hold.job, old, was.get(d), hold, now.get(d))

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
        got, covered = self._job_totals(h)
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

    def _place(
        self,
        name: str,
        dev: _Dev,
        job: str,
        old: JobHold | None,
        was: float | None,
        new: JobHold,
        share: float | None,
    ) -> None:
        """Move ``job``'s hold of device ``name`` from ``old`` (at share ``was``; None: it
        did not hold it) to ``new`` (at ``share``) in the device's pending intervals, its
        tail and its set of unsettled jobs. Only the intervals where the two differ change."""
        spans = [
            (h.start, h.end)
            for h, s in ((old, was), (new, share))
            if h is not None and s is not None
        ]
        if spans:
            u = min(a for a, _ in spans)
            ends = [b for _, b in spans if b is not None]
            v = max(ends) if len(ends) == len(spans) else None
            for seg in dev.overlapping(u, v):
                before = seg.clip(old) if old is not None and was is not None else None
                after = seg.clip(new) if share is not None else None
                if (before, was) == (after, share):
                    continue
                if after is None or share is None:
                    seg.holds.pop(job, None)
                else:
                    seg.holds[job] = share
                seg.steps = None
        if share is None:
            dev.tail.pop(job, None)
            dev.jobs.discard(job)
            return
        if dev.last is None or _reaches(new, dev.last.time):
            dev.tail[job] = share
        else:
            dev.tail.pop(job, None)
        dev.jobs.add(job)
        if new.end is not None:
            heapq.heappush(dev.ends, (new.end, job))

    def _job_totals(self, h: JobHold) -> tuple[dict[str, float], dict[str, float]]:
        """The hold's job's energy (J) and measured seconds per device, settled plus
        pending: only the pending intervals its hold overlaps."""
        got = dict(self._done.job.get(h.job, {}))
        covered = dict(self._done.job_s.get(h.job, {}))
        for name, share in h.devices:
            for seg in self._devs[name].overlapping(h.start, h.end):
                if h.job in seg.holds:
                    e, x = seg.job_part(h, share, self._holds)
                    got[name] = got.get(name, 0.0) + e
                    covered[name] = covered.get(name, 0.0) + x
        return got, covered

    def _totals(self) -> _Totals:
        """Settled figures plus every pending interval."""
        t = self._done.copy()
        for name, dev in self._devs.items():
            for seg in dev.pending:
                self._attribute(name, seg, t)
        return t

    def _commit_dev(self, name: str, dev: _Dev, until: float) -> None:
        n = 0
        while n < len(dev.pending) and dev.pending[n].t1 <= until:
            self._attribute(name, dev.pending[n], self._done)
            dev.settled = dev.pending[n].t1
            n += 1
        if n:
            del dev.pending[:n]
            del dev.starts[:n]
            while dev.ends and dev.ends[0][0] <= dev.settled:
                end, job = heapq.heappop(dev.ends)
                h = self._holds.get(job)
                if h is not None and h.end == end:  # (else a replaced hold's old end)
                    dev.jobs.discard(job)

    def _attribute(self, name: str, seg: _Seg, t: _Totals) -> None:
        """Add ``seg``'s energy to ``t``: each hold its part, the rest to idle."""
        st = seg.pieces(self._holds)
        total = 0.0
        for j, share in seg.holds.items():
            e, x = seg.job_part(self._holds[j], share, self._holds)
            total += e
            jd = t.job.setdefault(j, {})
            jd[name] = jd.get(name, 0.0) + e
            if seg.measured:
                js = t.job_s.setdefault(j, {})
                js[name] = js.get(name, 0.0) + x
        idle = math.fsum(e * max(0.0, 1.0 - s) for e, s in zip(st.energy, st.shares, strict=True))
        t.device[name] = t.device.get(name, 0.0) + total + idle
        t.idle[name] = t.idle.get(name, 0.0) + idle
        if not seg.measured:
            t.gap_s[name] = t.gap_s.get(name, 0.0) + (seg.t1 - seg.t0)
        else:
            t.gap_s.setdefault(name, 0.0)


def _reaches(h: JobHold, t: float) -> bool:
    """Whether ``h`` may overlap time after ``t`` (open, or ending after it)."""
    return h.end is None or h.end > t


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
