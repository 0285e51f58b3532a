"""A running service: its replicas as jobs of a cluster, its router, its autoscaler.

:class:`Service` keeps the service's replicas between ``replicas.min`` and ``replicas.max``
as the :class:`~accelnet.serve.autoscale.Autoscaler` asks, on a thread of its own that
ticks every ``tick_s``:

1. Each replica is a job (``<service>.<n>``, :meth:`ServiceSpec.replica`) serving on a port
   the service picked free on 127.0.0.1. Once its job runs and ``GET readiness.path``
   answers 2xx, the router sends it requests; one that is not ready within
   ``readiness.timeout_s`` is cancelled. A replica whose job ended (its process died, its
   device failed) leaves the router; the autoscaler's floor brings a new one. Replicas that
   end before they were ever ready (a command that fails at once) are not restarted in a
   tight loop: the next waits 0.5 s, then twice as long each time, up to a minute
   (``backoff`` events), until one becomes ready. One the
   router could not reach is taken out until it answers its readiness check again.
2. A new replica's device model is :func:`~accelnet.serve.autoscale.pick_model`'s choice
   among the models with a free device (``choose_model=False``: the replica asks for any
   accepted model and the scheduler's placement decides, blind to the service's speed);
   one to remove is the slowest (not ready ones first), taken out of the router first and
   cancelled once its requests in flight are done (or after ``drain_s``): no request is
   cut.
3. ``events`` lists what it did, with times (``scale`` to N, a replica ``ready``, ``gone``).

On the local backend replicas serve on 127.0.0.1; on the Ray backend on their node's
address (``$ACCELNET_BIND``, what ``Backend.address_of`` answers for the replica's host),
where the router and the readiness checks reach them.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import httpx

from accelnet.monitor.source import ServiceInfo
from accelnet.runtime.local.backend import LocalBackend
from accelnet.runtime.local.worker import free_port
from accelnet.sched import JobState
from accelnet.serve.autoscale import (
    Autoscaler,
    ModelFigures,
    Observation,
    catalog_speed,
    pick_model,
)
from accelnet.serve.ownership import listener_uid
from accelnet.serve.router import Replica, Router, Stats
from accelnet.serve.spec import ServiceSpec

if TYPE_CHECKING:
    from accelnet.runtime.sdk import Job, LocalCluster

_PROBE_S = 1.0  # a readiness check's timeout
BACKOFF_S = 0.5  # the first wait after a replica ended before it was ready; doubles
BACKOFF_MAX_S = 60.0


@dataclass(slots=True, eq=False)
class _Rep:
    rid: str
    index: int
    job: Job
    model: str | None
    port: int
    asked_at: float
    version: int = 1
    address: str | None = None  # its node's address, once placed
    squatted: bool = False  # its port was found held by another user's process
    ready: bool = False
    stopping_since: float | None = None
    router_view: Replica | None = None


class Service:
    """See the module docstring. Use as a context manager, or :meth:`start` and
    :meth:`close`."""

    def __init__(
        self,
        cluster: LocalCluster,
        spec: ServiceSpec,
        tick_s: float = 0.2,
        drain_s: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
        choose_model: bool = True,
        on_close: Callable[[], None] | None = None,
    ) -> None:
        self.cluster = cluster
        self._on_close = on_close  # told once the service has stopped
        self.choose_model = choose_model  # False: the scheduler places any accepted model
        self.spec = spec
        self.tick_s = tick_s
        self.drain_s = drain_s
        self._clock = clock
        self.router = Router(spec.name, max_inflight=spec.max_inflight, clock=clock)
        self.autoscaler = Autoscaler(spec)
        self.events: list[tuple[float, str, str]] = []  # (time, what, detail)
        self._reps: dict[str, _Rep] = {}
        self._next = 0
        self._last_target = -1  # the replica count last noted
        self._failures = 0  # replicas in a row that ended before they were ever ready
        self._hold_until = -math.inf  # no new replica before then (crash-loop back-off)
        self.version = 1  # of the spec new replicas are made from (see update)
        self._roll_size = 0  # replicas the service had when its update began
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._probe = httpx.Client(timeout=_PROBE_S)
        self._figures = self._model_figures()
        self.url = ""

    # ----- life ---------------------------------------------------------------------------
    def start(self) -> str:
        """Start the router and the first replicas; the service's URL. Started already (a
        service from :meth:`LocalCluster.serve` used in a ``with``): its URL, nothing more."""
        if self._thread is not None:
            return self.url
        self.url = self.router.start()
        self._clear_leftovers()
        self._scale_to(self.spec.replicas.min)
        self._thread = threading.Thread(target=self._loop, name=f"service-{self.spec.name}",
                                        daemon=True)  # fmt: skip
        self._thread.start()
        return self.url

    def _clear_leftovers(self) -> None:
        """Cancel the replica jobs an earlier run of this service left in the store (the
        server stopped or crashed while it ran: a durable store brings them back with no
        router in front of them); new replicas are numbered after them."""
        name = re.compile(rf"{re.escape(self.spec.name)}\.(\d+)")
        live = [s for s in JobState if not s.is_finished()]
        for rec in self.cluster.store.jobs(live):
            hit = name.fullmatch(rec.spec.name)
            if hit is None or rec.spec.tenant != self.spec.tenant or rec.spec.port is None:
                continue
            self._next = max(self._next, int(hit.group(1)) + 1)
            with contextlib.suppress(Exception):
                self.cluster.cancel(rec.id)
            self._note("gone", f"{rec.spec.name} left by an earlier run: cancelled")

    def close(self) -> None:
        """Stop the replicas and the router; idempotent."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)
            self._thread = None
        with self._lock:
            reps = list(self._reps.values())
            self._reps.clear()
        for rep in reps:
            self.router.remove(rep.rid)
            with contextlib.suppress(Exception):
                rep.job.cancel()
        self.router.close()
        self._probe.close()
        if self._on_close is not None:
            self._on_close()
            self._on_close = None

    def __enter__(self) -> Service:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ----- what it looks like -------------------------------------------------------------
    def replicas(self) -> dict[str, dict[str, object]]:
        """Each replica: its job, model, port, whether it takes requests."""
        with self._lock:
            return {r.rid: {"job": r.job.id, "model": r.model, "port": r.port,
                            "ready": r.ready, "stopping": r.stopping_since is not None}
                    for r in self._reps.values()}  # fmt: skip

    def now(self) -> float:
        """The service's clock (its ``events`` are times on it)."""
        return self._clock()

    def ready_count(self) -> int:
        """Replicas taking requests."""
        return len(self.router.replicas())

    def stats(self, window_s: float | None = None) -> Stats:
        """The router's figures over ``window_s`` (default: the scaling window)."""
        return self.router.stats(window_s or self.spec.scaling.window_s)

    def info(self) -> ServiceInfo:
        """What ``/metrics`` exports of this service (see
        :class:`~accelnet.monitor.source.ServiceInfo`)."""
        totals = self.router.totals()
        st = self.router.stats(self.spec.scaling.window_s)
        replicas: dict[tuple[str, str], int] = {}
        with self._lock:
            for r in self._reps.values():
                state = ("stopping" if r.stopping_since is not None
                         else "ready" if r.ready else "starting")  # fmt: skip
                key = (r.model or "any", state)
                replicas[key] = replicas.get(key, 0) + 1
        return ServiceInfo(self.spec.name, self.spec.tenant, totals.latency, totals.codes,
                           totals.retries, replicas, st.inflight, st.queued)  # fmt: skip

    def update(self, spec: ServiceSpec) -> int:
        """Roll the service onto ``spec`` (a new command, env, device models, goal...; the
        same name): one new replica at a time is started, and once it is ready the oldest
        replica of the old version leaves the router and is cancelled when its requests are
        done, so the service never has fewer ready replicas than before and no request is
        cut. Scaling waits while the update runs. The new version's number;
        :meth:`updating` says whether it is still rolling. ValueError for another name."""
        if spec.name != self.spec.name:
            raise ValueError(f"update of {self.spec.name!r} to a spec named {spec.name!r}")
        with self._lock:
            self.spec = spec
            self.autoscaler = Autoscaler(spec)
            self.router.max_inflight = spec.max_inflight
            self.version += 1
            version = self.version
            live = [r for r in self._reps.values() if r.stopping_since is None]
            self._roll_size = max(len(live), spec.replicas.min, 1)
        self._note("update", f"to version {version}")
        return version

    def updating(self) -> bool:
        """Whether replicas of an older version are still serving."""
        with self._lock:
            return any(r.version != self.version and r.stopping_since is None
                       for r in self._reps.values())  # fmt: skip

    # ----- the loop -----------------------------------------------------------------------
    def _loop(self) -> None:
        while not self._stop.wait(self.tick_s):
            try:
                self.tick()
            except Exception as exc:
                self._note("error", f"{type(exc).__name__}: {exc}")

    def tick(self) -> None:
        """One round: reconcile the replicas with their jobs, then scale."""
        now = self._clock()
        with self._lock:
            reps = list(self._reps.values())
        for rep in reps:
            self._reconcile(rep, now)
        if self.updating():
            self._roll()
            return
        with self._lock:
            live = [r for r in self._reps.values() if r.stopping_since is None]
        st = self.router.stats(self.spec.scaling.window_s)
        last = self.router.last_request_at()
        obs = Observation(now=now, replicas=len(live), ready=sum(r.ready for r in live),
                          mean_inflight=st.mean_inflight, inflight=st.inflight,
                          queued=st.queued, p95_ms=st.p95_ms, last_request_at=last)  # fmt: skip
        target = self.autoscaler.target(obs)
        if target != len(live):
            self._scale_to(target)

    def _reconcile(self, rep: _Rep, now: float) -> None:
        state = rep.job.state
        if state.is_finished():
            self.router.remove(rep.rid)
            with self._lock:
                self._reps.pop(rep.rid, None)
            how = "stopped" if rep.stopping_since is not None else f"ended {state.value}"
            self._note("gone", f"{rep.rid} {how}")
            if rep.stopping_since is None and not rep.ready:
                self._failures += 1  # it never served: back off before the next one
                wait = min(BACKOFF_MAX_S, BACKOFF_S * 2 ** (self._failures - 1))
                self._hold_until = now + wait
                why = f"{self._failures} replicas in a row ended before they were ready"
                self._note("backoff", f"{why}: the next starts in {wait:g} s")
            return
        if rep.stopping_since is not None:
            view = rep.router_view
            drained = view is None or view.inflight <= 0
            if drained or now - rep.stopping_since >= self.drain_s:
                with contextlib.suppress(Exception):
                    rep.job.cancel()
            return
        if state is not JobState.RUNNING:
            return
        view = rep.router_view
        if rep.ready and view is not None and view.up:
            return
        if self._answers(rep):
            if not rep.ready:
                rep.ready = True
                self._failures = 0
                placed = rep.job.record.placement
                rep.model = rep.model or (placed.model if placed is not None else None)
                model = rep.model or "?"
                speed = self._figures[model].speed if model in self._figures else 1.0
                rep.router_view = Replica(rep.rid, f"http://{rep.address}:{rep.port}", model,
                                          speed)  # fmt: skip
                self._note("ready", f"{rep.rid} on {model}")
            assert rep.router_view is not None
            rep.router_view.up = True
            self.router.add(rep.router_view)
        elif not rep.ready and now - rep.asked_at > self.spec.readiness.timeout_s:
            self._note("gone", f"{rep.rid} not ready within {self.spec.readiness.timeout_s:g} s")
            rep.stopping_since = now
            with contextlib.suppress(Exception):
                rep.job.cancel()

    def _answers(self, rep: _Rep) -> bool:
        if rep.address is None:
            placed = rep.job.record.placement
            if placed is None:
                return False
            host = self.cluster.fabric.devices[placed.devices[0]].host
            rep.address = self.cluster.backend.address_of(host)
        url = f"http://{rep.address}:{rep.port}{self.spec.readiness.path}"
        try:
            if not self._probe.get(url).is_success:
                return False
        except httpx.HTTPError:
            return False
        return self._owned(rep)

    def _owned(self, rep: _Rep) -> bool:
        """Whether the process answering on the replica's port runs as the replica's tenant
        (see :mod:`accelnet.serve.ownership`; the local backend only). One that does not is
        never sent a request; the replica is given up when its readiness time runs out."""
        if rep.address != "127.0.0.1" or not isinstance(self.cluster.backend, LocalBackend):
            return True
        user = self.cluster.users.get(self.spec.tenant)
        want = user.uid if user is not None else os.getuid()
        got = listener_uid(rep.port, rep.address)
        if got == want:
            return True
        if not rep.squatted:
            rep.squatted = True
            self._note("error", f"{rep.rid}: port {rep.port} is held by a process of uid "
                                f"{got if got is not None else '?'}, not the tenant's "
                                f"({want}): no request goes there")  # fmt: skip
        return False

    # ----- scaling ------------------------------------------------------------------------
    def _scale_to(self, target: int) -> None:
        with self._lock:
            live = [r for r in self._reps.values() if r.stopping_since is None]
        if target > len(live):
            for _ in range(target - len(live)):
                self._add_replica()
        elif target < len(live):
            for rep in self._surplus(live)[: len(live) - target]:
                rep.stopping_since = self._clock()
                self.router.remove(rep.rid)
        if target != self._last_target:
            self._last_target = target
            self._note("scale", str(target))

    def _roll(self) -> None:
        """One step of an update (one replica of surge, none unavailable): old replicas not
        ready yet go at once; a new replica is started while every new one is ready and the
        new version has fewer than the service had; an old one goes whenever more are ready
        than the service had."""
        with self._lock:
            live = [r for r in self._reps.values() if r.stopping_since is None]
            keep = self._roll_size
        old = sorted((r for r in live if r.version != self.version),
                     key=lambda r: (r.ready, r.index))  # fmt: skip
        new = [r for r in live if r.version == self.version]
        ready = sum(r.ready for r in live)
        for rep in old:
            if not rep.ready or ready > keep:
                rep.stopping_since = self._clock()
                self.router.remove(rep.rid)
                ready -= rep.ready
                self._note("retire", f"{rep.rid} (version {rep.version})")
        still_old = any(r.stopping_since is None for r in old)
        if still_old and len(new) < keep and all(r.ready for r in new):
            self._add_replica()

    def _surplus(self, live: list[_Rep]) -> list[_Rep]:
        """Which replicas go first: not ready ones, then the slowest, the newest first."""

        def key(r: _Rep) -> tuple[bool, float, int]:
            fig = self._figures.get(r.model or "")
            return (r.ready, fig.speed if fig else 0.0, -r.index)

        return sorted(live, key=key)

    def _add_replica(self) -> None:
        if self._clock() < self._hold_until:
            return  # backing off (see _reconcile); a later tick asks again
        port = free_port()
        if port is None:
            self._note("error", "no free port on 127.0.0.1 for a replica")
            return
        model = (pick_model(self.spec, self._free_by_model(), self._measured_figures())
                 if self.choose_model else None)  # fmt: skip
        index = self._next
        self._next += 1
        job = self.cluster.submit_spec(self.spec.replica(index, model, port))
        rep = _Rep(
            f"{self.spec.name}.{index}",
            index,
            job,
            model,
            port,
            self._clock(),
            version=self.version,
        )
        with self._lock:
            self._reps[rep.rid] = rep
        self._note("asked", f"{rep.rid} on {model or 'any'} (port {port})")

    def _free_by_model(self) -> dict[str, int]:
        free = self.cluster.free_by_model()
        with self._lock:  # replicas asked for and not placed yet take devices too
            for r in self._reps.values():
                if r.model is not None and r.job.state in (JobState.PENDING, JobState.ADMITTED):
                    free[r.model] = free.get(r.model, 0) - self.spec.resources.accelerators.count
        return free

    def _model_figures(self) -> dict[str, ModelFigures]:
        out: dict[str, ModelFigures] = {}
        for dev in self.cluster.fabric.devices.values():
            m = dev.model
            if m.name not in out:
                out[m.name] = ModelFigures(m.name, catalog_speed(m) or 1.0, m.max_w)
        return out

    def _measured_figures(self) -> dict[str, ModelFigures]:
        """The catalog's figures with this service's measured service time per model."""
        times: dict[str, list[float]] = {}
        for r in self.router.replicas():
            if r.mean_s is not None:
                times.setdefault(r.model, []).append(r.mean_s)
        out = dict(self._figures)
        for model, ts in times.items():
            if model in out:
                f = out[model]
                out[model] = ModelFigures(f.name, f.speed, f.power_w, sum(ts) / len(ts))
        return out

    def _note(self, what: str, detail: str) -> None:
        with self._lock:
            self.events.append((self._clock(), what, detail))
