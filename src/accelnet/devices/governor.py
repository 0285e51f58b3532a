"""The power governor: per-device caps that keep a cluster under its power budget.

A :class:`PowerGovernor` knows the budget (W), the devices' power figures
(:class:`~accelnet.devices.power.DevicePower`: idle and busy draw, allowed cap range) and a
fixed ``base_w`` the budget must also cover (hosts, network). Asked for a
:meth:`~PowerGovernor.plan` with the running jobs, the jobs about to start and, optionally,
the devices' draw now (their latest samples), it answers a :class:`PowerPlan`:

- which starting jobs may start and which must wait, with a reason. A job waits when, even
  with every device at its lowest cap, starting it would take the projected draw over the
  budget ("power budget 3,000 W: 2,850 W drawn even at the lowest caps, starting job x
  adds >= 400 W"). Jobs are taken in the order given, each on top of those before it that
  may start (a later, smaller job may start where an earlier one waits);
- a cap for every device, chosen to keep the projected draw within the budget at the least
  loss of throughput.

**The model** is the simulator's (:mod:`accelnet.devices.power`): a device with busy share
``s`` under cap ``c`` draws ``idle + s * (min(c, max) - idle)`` (a cap below idle saves
nothing) and runs at ``max(0.3, (c / max) ** (1/3))`` of its speed; a job runs at the speed
of its slowest device (a gang waits for its slowest member, as in
:class:`~accelnet.sim.backend.SimBackend`). A device nobody holds draws its idle figure, or
its measured draw if higher. The projection is an upper bound while devices draw at most
their catalog ``max_w`` (pass a measured figure as ``max_w`` where it is lower). Caps are
kept at or above ``max(cap_min, idle, 0.3**3 * max)``: below, the model claims savings at
no cost in speed, which no real device gives.

**The optimum.** Maximise ``sum_j w_j t_j`` (``w_j``: the job's weight, by default its
devices times its share; ``t_j``: its speed) subject to the budget and each cap in its
range. A job at speed ``t`` needs each device ``d`` capped at ``max(lo_d, max_d * t**3)``,
so its draw is a convex function of ``t`` and the problem is a separable concave one: at
the optimum every job not at a bound has the same marginal speed per watt (the KKT
conditions). The governor finds that price of a watt by bisection (each job's best speed at
a price is closed-form, piece by piece), so the answer is exact for the model, not an
approximation, and takes milliseconds for thousands of devices (4,096 GPUs: ~20 ms).
``tests/devices/test_power_governor.py`` checks it against brute force. Jobs that share a
device (fractions of one GPU) are governed together, at one speed: exact when they share
all their devices, a feasible but possibly not optimal plan when they overlap only in
part. Deterministic; no I/O, no clock reads (the caller passes ``now``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import numpy as np

from accelnet.devices.power import DVFS_FLOOR, DevicePower, cap_speed
from accelnet.devices.telemetry import SampleRing

__all__ = ["JobLoad", "PowerGovernor", "PowerPlan", "latest_draw"]

_TOL: Final = 1e-9


@dataclass(frozen=True, slots=True)
class JobLoad:
    """A job on ``devices`` (distinct), on ``share`` (0, 1] of each; ``weight`` (> 0) is
    what a unit of its speed is worth (None: ``len(devices) * share``, device-equivalents)."""

    job: str
    devices: tuple[str, ...]
    share: float = 1.0
    weight: float | None = None

    def __post_init__(self) -> None:
        if not self.devices or len(set(self.devices)) != len(self.devices):
            raise ValueError(f"job {self.job}: devices must be distinct and not empty")
        if not 0 < self.share <= 1:
            raise ValueError(f"job {self.job}: share must be in (0, 1], got {self.share}")
        if self.weight is not None and not (math.isfinite(self.weight) and self.weight > 0):
            raise ValueError(f"job {self.job}: weight must be finite and > 0, got {self.weight}")

    @property
    def value(self) -> float:
        """The weight, or its default."""
        return self.weight if self.weight is not None else len(self.devices) * self.share


@dataclass(frozen=True, slots=True)
class PowerPlan:
    """The governor's answer (W). ``caps`` holds a limit for every device (its
    ``cap_max_w`` where it need not be capped); ``speeds`` the modelled speed of each job
    that runs (1.0 = uncapped); ``projected_w`` the draw under the caps, ``floor_w`` under
    the lowest caps, ``drawn_w`` the measured draw now (None without readings); ``started``
    the starting jobs that may start, ``delayed`` the others with a reason. ``feasible`` is
    False when the running jobs alone exceed the budget at the lowest caps (``reason``
    says by how much): then every device is at its lowest cap and nothing starts."""

    time: float
    budget_w: float
    caps: dict[str, float]
    speeds: dict[str, float]
    projected_w: float
    floor_w: float
    drawn_w: float | None
    started: tuple[str, ...]
    delayed: dict[str, str]
    feasible: bool
    reason: str
    loss: float

    def capped(self, power: Mapping[str, DevicePower]) -> dict[str, float]:
        """The caps below each device's ``cap_max_w``."""
        return {d: c for d, c in self.caps.items() if c < power[d].cap_max_w}

    def to_json(self) -> dict[str, Any]:
        """JSON-ready figures."""
        return {
            "time": self.time,
            "budget_w": self.budget_w,
            "projected_w": self.projected_w,
            "floor_w": self.floor_w,
            "drawn_w": self.drawn_w,
            "feasible": self.feasible,
            "reason": self.reason,
            "loss": self.loss,
            "caps": dict(self.caps),
            "speeds": dict(self.speeds),
            "started": list(self.started),
            "delayed": dict(self.delayed),
        }


def latest_draw(ring: SampleRing, devices: Iterable[str]) -> dict[str, float]:
    """Device -> the power of its newest sample, for devices whose newest sample has one."""
    out: dict[str, float] = {}
    for d in devices:
        s = ring.latest(d)
        if s is not None and s.power_w is not None:
            out[d] = s.power_w
    return out


class PowerGovernor:
    """Caps and start decisions under ``budget_w`` (see the module docstring).

    ``devices`` are the devices under the budget; ``base_w`` the rest of the draw the budget
    covers (hosts, network). Immutable after construction; make a new one for a new budget.
    """

    def __init__(
        self,
        budget_w: float,
        devices: Iterable[DevicePower],
        *,
        base_w: float = 0.0,
    ) -> None:
        if not (math.isfinite(budget_w) and budget_w > 0):
            raise ValueError(f"budget_w must be a finite number of W > 0, got {budget_w!r}")
        if not (math.isfinite(base_w) and base_w >= 0):
            raise ValueError(f"base_w must be a finite number of W >= 0, got {base_w!r}")
        self.budget_w = float(budget_w)
        self.base_w = float(base_w)
        self.power: dict[str, DevicePower] = {}
        for p in devices:
            if p.device in self.power:
                raise ValueError(f"device {p.device} given twice")
            self.power[p.device] = p

    # ----- the figures of one device ---------------------------------------------------------
    def cap_range(self, device: str) -> tuple[float, float]:
        """The caps the governor may choose for ``device``: ``[lo, hi]`` (see the module)."""
        p = self.power[device]
        hi = min(p.cap_max_w, p.max_w)
        lo = max(p.cap_min_w, p.idle_w, DVFS_FLOOR**3 * p.max_w)
        return min(lo, hi), hi

    def _draw(self, device: str, share: float, cap: float, drawn: Mapping[str, float]) -> float:
        p = self.power[device]
        if share <= 0:
            return max(p.idle_w, drawn.get(device, 0.0))
        return p.draw_w(min(1.0, share), cap)

    def _floor(self, shares: Mapping[str, float], drawn: Mapping[str, float]) -> float:
        return self.base_w + math.fsum(
            self._draw(d, shares.get(d, 0.0), self.cap_range(d)[0], drawn) for d in self.power
        )

    # ----- the plan ------------------------------------------------------------------------
    def plan(
        self,
        now: float,
        running: Sequence[JobLoad],
        starting: Sequence[JobLoad] = (),
        drawn: Mapping[str, float] | None = None,
    ) -> PowerPlan:
        """Decide which of ``starting`` may start and cap every device (see the module).
        ``drawn``: device -> W now (:func:`latest_draw`). Raises ValueError for a job on a
        device the governor does not know, or a job given twice."""
        drawn = drawn or {}
        self._check(running, starting)
        shares: dict[str, float] = {}
        for job in running:
            _add(shares, job)
        floor = self._floor(shares, drawn)
        budget = self.budget_w
        feasible = floor <= budget * (1 + _TOL)
        now_w = self._drawn_now(drawn, shares)
        reason = ""
        started: list[str] = []
        delayed: dict[str, str] = {}
        if not feasible:
            reason = (
                f"power budget {_w(budget)} W cannot be met: the running jobs draw >= "
                f"{_w(floor)} W even at the lowest caps"
            )
            delayed = {j.job: f"{reason}; nothing starts" for j in starting}
        else:
            for job in starting:
                trial = dict(shares)
                _add(trial, job)
                more = self._floor(trial, drawn)
                if more > budget * (1 + _TOL):
                    delayed[job.job] = self._delay_reason(job, floor, more, now_w)
                else:
                    shares, floor = trial, more
                    started.append(job.job)
        jobs = [*running, *(j for j in starting if j.job in started)]
        caps = self._caps(jobs, shares, drawn) if feasible else self._lowest(shares)
        speeds = {
            j.job: min(cap_speed(caps[d], self.power[d].max_w) for d in j.devices) for j in jobs
        }
        projected = self.base_w + math.fsum(
            self._draw(d, shares.get(d, 0.0), caps[d], drawn) for d in self.power
        )
        return PowerPlan(
            time=now,
            budget_w=budget,
            caps=caps,
            speeds=speeds,
            projected_w=projected,
            floor_w=floor,
            drawn_w=now_w,
            started=tuple(started),
            delayed=delayed,
            feasible=feasible,
            reason=reason,
            loss=math.fsum(j.value * (1 - speeds[j.job]) for j in jobs),
        )

    def _check(self, running: Sequence[JobLoad], starting: Sequence[JobLoad]) -> None:
        seen: set[str] = set()
        for job in (*running, *starting):
            if job.job in seen:
                raise ValueError(f"job {job.job} given twice")
            seen.add(job.job)
            for d in job.devices:
                if d not in self.power:
                    known = sorted(self.power)
                    raise ValueError(
                        f"job {job.job}: device {d!r} is not under the power budget; known: "
                        f"{known[:8]}{' ...' if len(known) > 8 else ''}"
                    )

    def _drawn_now(self, drawn: Mapping[str, float], shares: Mapping[str, float]) -> float | None:
        """The measured draw; the model (uncapped) for devices without a reading."""
        if not drawn:
            return None
        return self.base_w + math.fsum(
            drawn[d] if d in drawn else self._draw(d, shares.get(d, 0.0), p.cap_max_w, {})
            for d, p in self.power.items()
        )

    def _delay_reason(self, job: JobLoad, floor: float, more: float, now_w: float | None) -> str:
        n = len(job.devices)
        where = f"{n} device{'s' if n > 1 else ''}" + (
            f" at share {job.share:g}" if job.share < 1 else ""
        )
        text = (
            f"power budget {_w(self.budget_w)} W: {_w(floor)} W drawn even at the lowest caps, "
            f"starting job {job.job} adds >= {_w(more - floor)} W ({where})"
        )
        return text + (f"; {_w(now_w)} W drawn now" if now_w is not None else "")

    def _lowest(self, shares: Mapping[str, float]) -> dict[str, float]:
        return {
            d: self.cap_range(d)[0] if shares.get(d, 0.0) > 0 else p.cap_max_w
            for d, p in self.power.items()
        }

    def _caps(
        self, jobs: Sequence[JobLoad], shares: Mapping[str, float], drawn: Mapping[str, float]
    ) -> dict[str, float]:
        """Every device's cap: the water-filling of the module docstring."""
        caps = {d: p.cap_max_w for d, p in self.power.items()}
        units = _units(jobs)
        if not units:
            return caps
        devs = [d for _, ds in units for d in ds]
        unit_of = np.repeat(np.arange(len(units)), [len(ds) for _, ds in units])
        p = [self.power[d] for d in devs]
        s = np.array([min(1.0, shares[d]) for d in devs])
        peak = np.array([x.max_w for x in p])
        idle = np.array([x.idle_w for x in p])
        rng = np.array([self.cap_range(d) for d in devs])
        lo, hi = rng[:, 0], rng[:, 1]
        busy = set(devs)
        fixed = self.base_w + math.fsum(
            self._draw(d, 0.0, 0.0, drawn) for d in self.power if d not in busy
        )
        room = self.budget_w - fixed - float(idle @ (1 - s))
        fill = _WaterFill(
            unit_of, np.array([w for w, _ in units]), s, peak, np.maximum(lo, idle), lo, hi
        )
        t = fill.speeds(room)
        want = np.maximum(lo, peak * t[unit_of] ** 3)
        for d, c, top in zip(devs, np.minimum(want, hi), hi, strict=True):
            caps[d] = self.power[d].cap_max_w if c >= top * (1 - _TOL) else float(c)
        return caps


class _WaterFill:
    """``max sum_u W_u t_u`` s.t. ``sum_d s_d max(base_d, B_d t_u(d)**3) <= room``, each
    ``t_u`` within what its devices' caps allow: the KKT point, by bisection on the price
    ``lam`` of a watt. At a given price a unit's best speed solves ``W_u / lam = P_u'(t)``,
    ``P_u'(t) = 3 t**2 * S_u(t)`` with ``S_u(t)`` the ``s_d B_d`` of its devices above their
    lowest cap at ``t`` (a step function: the pieces between those thresholds)."""

    def __init__(
        self, unit_of: Any, weight: Any, s: Any, peak: Any, base: Any, lo: Any, hi: Any
    ) -> None:
        self.unit_of, self.weight, self.s, self.peak, self.base = unit_of, weight, s, peak, base
        n = len(weight)
        speed_lo = np.maximum(DVFS_FLOOR, (lo / peak) ** (1 / 3))
        speed_hi = np.maximum(DVFS_FLOOR, (hi / peak) ** (1 / 3))
        self.t_lo = np.full(n, np.inf)
        self.t_hi = np.full(n, np.inf)
        np.minimum.at(self.t_lo, unit_of, speed_lo)
        np.minimum.at(self.t_hi, unit_of, speed_hi)
        tau = (base / peak) ** (1 / 3)  # speed at which a device leaves its lowest cap
        # per unit: points t_lo = p_0 <= p_1 <= ... <= t_hi, and S on each piece
        per: list[list[tuple[float, float]]] = [[] for _ in range(n)]
        for u, x, sb in zip(unit_of, tau, s * peak, strict=True):
            per[u].append((float(x), float(sb)))
        width = max(len({x for x, _ in steps}) for steps in per) + 1
        self.points = np.repeat(self.t_hi[:, None], width + 1, axis=1)
        self.slope = np.zeros((n, width))  # S on each piece
        for u, steps in enumerate(per):
            lo_u, hi_u = self.t_lo[u], self.t_hi[u]
            self.points[u, 0] = lo_u
            acc = 0.0
            k = 0
            for x in sorted({x for x, _ in steps}):
                acc += sum(sb for y, sb in steps if y == x)
                k += 1
                self.points[u, k] = min(max(x, lo_u), hi_u)
                self.slope[u, k] = acc
            self.slope[u, k + 1 :] = acc

    def power(self, t: Any) -> float:
        """``sum_d s_d max(base_d, B_d t**3)`` at unit speeds ``t``."""
        return float(self.s @ np.maximum(self.base, self.peak * t[self.unit_of] ** 3))

    def at(self, lam: float) -> Any:
        """Every unit's best speed when a watt costs ``lam``."""
        y = self.weight / lam
        with np.errstate(divide="ignore"):
            free = np.sqrt(y[:, None] / (3 * self.slope))
        left, right = self.points[:, :-1], self.points[:, 1:]
        return np.asarray(self.points[:, 0] + np.sum(np.clip(free, left, right) - left, axis=1))

    def speeds(self, room: float) -> Any:
        """The units' speeds that use at most ``room`` W, at the least loss."""
        if self.power(self.t_hi) <= room:
            return self.t_hi
        if self.power(self.t_lo) >= room:
            return self.t_lo
        positive = self.slope[self.slope > 0]
        lam_lo = float(np.min(self.weight)) / (6 * float(np.max(self.slope[:, -1])))
        lam_hi = (
            2
            * float(np.max(self.weight))
            / (3 * float(np.min(positive)) * float(np.min(self.t_lo)) ** 2)
        )
        for _ in range(200):
            mid = math.sqrt(lam_lo * lam_hi)
            if self.power(self.at(mid)) > room:
                lam_lo = mid
            else:
                lam_hi = mid
            if lam_hi <= lam_lo * (1 + 1e-15):
                break
        return self.at(lam_hi)


def _units(jobs: Sequence[JobLoad]) -> list[tuple[float, list[str]]]:
    """Jobs joined by the devices they share (union-find): (summed weight, devices), in
    the order of each unit's first job; devices sorted."""
    parent: dict[str, str] = {}

    def root(x: str) -> str:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for job in jobs:
        key = f"job:{job.job}"
        parent.setdefault(key, key)
        for d in job.devices:
            parent.setdefault(d, d)
            parent[root(d)] = root(key)
    order: dict[str, tuple[float, set[str]]] = {}
    for job in jobs:
        r = root(f"job:{job.job}")
        w, ds = order.get(r, (0.0, set()))
        order[r] = (w + job.value, ds | set(job.devices))
    return [(w, sorted(ds)) for w, ds in order.values()]


def _add(shares: dict[str, float], job: JobLoad) -> None:
    for d in job.devices:
        shares[d] = shares.get(d, 0.0) + job.share


def _w(value: float) -> str:
    return f"{value:,.0f}"
