"""How many replicas a service should have, and on which device model the next one goes.

Pure: the service manager feeds an :class:`Observation` per tick (from its router's window
and its replica table) and gets a target count back; time comes in the observation.

- **Need** = the load over ``goal.target_inflight``, rounded up, where the load is the mean
  number of requests in flight over the window (Little's law: rate x mean latency) or, if
  more, the requests in flight and queued now. With a ``p95_ms`` goal, a window p95 above
  80 % of it asks for one replica more than there are: the service grows *before* the goal
  is broken.
- **Up** at once to the need (all the missing replicas together) once the need has lasted
  ``scaling.up_s``; **down** one replica at a time, each after the surplus has lasted
  ``scaling.down_s`` (hysteresis: a dip does not shed capacity a burst needs back).
- **To zero** only with ``replicas.min: 0``, after ``scaling.idle_s`` without a request; a
  request then waits in the router's bounded queue while the first replica starts.

:func:`pick_model` chooses a new replica's device model: of the models with a free device,
the one that meets the latency goal at the least power per request (the catalog's power and
speed, scaled by service times measured on the models the service already runs on), else the
fastest. (When it shrinks, the service removes replicas on the slowest devices first.)
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from accelnet.fabric.model import DeviceModel, Precision
from accelnet.serve.spec import ServiceSpec

HEADROOM = 0.8  # scale up when p95 passes this fraction of the goal
SERVICE_SHARE = 0.5  # a model meets the goal if its service time is at most this share of it


@dataclass(frozen=True, slots=True)
class Observation:
    """What the service looks like at ``now``."""

    now: float
    replicas: int  # asked for and not ended (starting or ready)
    ready: int
    mean_inflight: float  # over the window
    inflight: int  # now
    queued: int  # waiting for a replica now
    p95_ms: float | None  # over the window
    last_request_at: float | None


class Autoscaler:
    """Keeps the timers of the hysteresis between ticks (see the module docstring)."""

    def __init__(self, spec: ServiceSpec) -> None:
        self.spec = spec
        self._need_since: float | None = None
        self._surplus_since: float | None = None

    def need(self, obs: Observation) -> int:
        """Replicas the load asks for now (before the bounds and the timers)."""
        load = max(obs.mean_inflight, float(obs.inflight + obs.queued))
        need = math.ceil(load / self.spec.goal.target_inflight - 1e-9) if load > 0 else 0
        goal = self.spec.goal.p95_ms
        if goal is not None and obs.p95_ms is not None and obs.p95_ms > HEADROOM * goal:
            need = max(need, obs.replicas + 1)
        if obs.queued > 0 or obs.inflight > 0:
            need = max(need, 1)
        return need

    def target(self, obs: Observation) -> int:
        """How many replicas the service should have now."""
        r = self.spec.replicas
        s = self.spec.scaling
        idle = obs.last_request_at is None or obs.now - obs.last_request_at >= s.idle_s
        floor = r.min if (r.min > 0 or idle) else 1
        need = min(r.max, max(floor, self.need(obs)))
        have = obs.replicas
        if need > have:
            self._surplus_since = None
            if self._need_since is None:
                self._need_since = obs.now
            if obs.now - self._need_since >= s.up_s or have < floor:
                self._need_since = None
                return need
            return have
        self._need_since = None
        if need < have:
            if self._surplus_since is None:
                self._surplus_since = obs.now
            if obs.now - self._surplus_since >= s.down_s:
                self._surplus_since = obs.now  # the next one waits as long again
                return have - 1
            return have
        self._surplus_since = None
        return have


def catalog_speed(model: DeviceModel) -> float:
    """A device model's speed for serving: its catalog FP16 peak, else FP32 (TFLOP/s; 0.0
    if it has neither)."""
    return model.tflops(Precision.FP16) or model.tflops(Precision.FP32)


@dataclass(frozen=True, slots=True)
class ModelFigures:
    """A device model as the placement of a replica sees it."""

    name: str
    speed: float  # relative (catalog peak throughput)
    power_w: float  # drawn when busy (catalog)
    measured_s: float | None = None  # mean service time of this service's replicas on it


def service_time(model: ModelFigures, others: Sequence[ModelFigures]) -> float | None:
    """The model's service time per request: measured on it, else scaled by speed from a
    model where it was measured; None if nothing was measured yet."""
    if model.measured_s is not None:
        return model.measured_s
    for other in others:
        if other.measured_s is not None and model.speed > 0:
            return other.measured_s * other.speed / model.speed
    return None


def pick_model(
    spec: ServiceSpec, free: Mapping[str, int], figures: Mapping[str, ModelFigures]
) -> str | None:
    """The device model for a new replica (None: no accepted model has a free device). Of
    the models with a free device: those whose service time meets the goal (at most half of
    ``p95_ms``; with nothing measured or no goal, all), and of them the one with the least
    energy per request (power x service time, or power / speed before any measurement);
    if none meets the goal, the fastest."""
    allowed = spec.models()
    cands = [figures[m] for m, n in free.items()
             if n > 0 and m in figures and (not allowed or m in allowed)]  # fmt: skip
    if not cands:
        return None
    known = list(figures.values())
    goal = spec.goal.p95_ms

    def meets(m: ModelFigures) -> bool:
        t = service_time(m, known)
        return goal is None or t is None or t * 1e3 <= SERVICE_SHARE * goal

    def energy(m: ModelFigures) -> float:
        t = service_time(m, known)
        return m.power_w * t if t is not None else m.power_w / max(m.speed, 1e-12)

    ok = [m for m in cands if meets(m)]
    if ok:
        return min(ok, key=lambda m: (energy(m), m.name)).name
    return max(cands, key=lambda m: (m.speed, m.name)).name
