"""Operators' requests to :class:`~accelnet.runtime.care.device_care.DeviceCare`: drain, undrain,
reset and probe a device, inject and clear faults; from the SDK (a queue: any thread may
ask, the controller's thread carries it out) and, with ``store_requests``, from other
processes through the store (``device:request`` events, answered with ``device:answer``).
A request is answered (a :class:`concurrent.futures.Future`) when it is done: a reset or
an undrain when the device has settled, a probe with its findings.
"""

from __future__ import annotations

import json
import queue
from collections.abc import Iterable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from accelnet.devices import DeviceState
from accelnet.devices.faults import Fault, FaultSchedule, Injected
from accelnet.devices.health import Finding
from accelnet.devices.remediation import Action, Phase, RefusedError, Remediator
from accelnet.fabric import Fabric
from accelnet.runtime.clock import Clock
from accelnet.runtime.control.store import Store

if TYPE_CHECKING:
    from accelnet.runtime.control.controller import Controller

OPS = ("drain", "undrain", "reset", "probe")
_S = DeviceState
Request = tuple[str, str, dict[str, Any], "Future[Answer]"]


@dataclass(frozen=True, slots=True)
class Answer:
    """The outcome of an operator's request: ok or not, what happened, and (probes) the
    findings."""

    ok: bool
    detail: str
    findings: tuple[Finding, ...] = ()

    def to_json(self) -> dict[str, Any]:
        """JSON-ready data."""
        return {"ok": self.ok, "detail": self.detail,
                "findings": [f.to_json() for f in self.findings]}  # fmt: skip


@dataclass(slots=True)
class ProbeRun:
    """A probe in flight: its device, level, times, and who waits for its answer."""

    device: str
    level: int
    launched: float
    deadline: float
    diagnostic: bool  # an operator's probe of a device out of service: changes nothing
    waiters: list[Future[Answer]] = field(default_factory=list)


class OperatorRequests:
    """The request half of :class:`~accelnet.runtime.care.device_care.DeviceCare` (mixed in)."""

    _ctl: Controller
    _clock: Clock
    _store: Store
    _fabric: Fabric
    machine: Remediator
    faults: FaultSchedule
    _requests: queue.SimpleQueue[Request]
    _probes: dict[str, ProbeRun]
    _probe_waiters: dict[str, list[Future[Answer]]]
    _waiters: dict[str, list[Future[Answer]]]
    _store_requests: bool
    _request_period: float
    _next_request: float
    _seen: int

    if TYPE_CHECKING:

        def _run(self, actions: Iterable[Action]) -> None: ...
        def _launch_probe(self, dev: str, level: int, diagnostic: bool) -> None: ...
        def _end_fault(self, inj: Injected, now: float) -> None: ...

    def request(self, op: str, device: str, **args: Any) -> Future[Answer]:
        """An operator's ``drain`` / ``undrain`` / ``reset`` / ``probe`` (``level=``,
        ``reason=``) of ``device``, carried out at the next step; thread-safe. The future
        is answered when it is done (a reset or probe: when the device has settled)."""
        if op not in OPS:
            raise ValueError(f"unknown device operation {op!r}; valid: {', '.join(OPS)}")
        fut: Future[Answer] = Future()
        self._requests.put((op, device, dict(args), fut))
        return fut

    def inject(self, fault: Fault) -> Future[Answer]:
        """Schedule ``fault`` (``fault.at`` seconds from the next step); thread-safe."""
        fut: Future[Answer] = Future()
        self._requests.put(("inject", fault.device, {"fault": fault}, fut))
        return fut

    def clear_faults(self, device: str) -> Future[Answer]:
        """End ``device``'s injected faults (and drop its scheduled ones); thread-safe."""
        fut: Future[Answer] = Future()
        self._requests.put(("clear", device, {}, fut))
        return fut

    def _take_requests(self, now: float) -> None:
        """Carry out what was asked since the last step (the store: every
        ``request_period_s``)."""
        while not self._requests.empty():
            self._execute(*self._requests.get_nowait(), now)
        if self._store_requests and now >= self._next_request:
            self._next_request = now + self._request_period
            for ev in self._store.events_since(self._seen, ("device:request",)):
                self._seen = max(self._seen, ev.seq)
                self._store_request(ev.seq, ev.detail, now)

    def _execute(
        self, op: str, dev: str, args: dict[str, Any], fut: Future[Answer], now: float
    ) -> None:
        if dev not in self._fabric.devices:
            known = ", ".join(sorted(self._fabric.devices)[:8])
            fut.set_result(Answer(False, f"unknown device {dev!r}; known: {known}"))
            return
        reason = str(args.get("reason") or f"operator: {op}")
        busy = self._ctl.jobs_on(dev)
        try:
            if op in ("undrain", "reset") and any(p.device == dev for p in self._probes.values()):
                raise RefusedError(f"{dev} is being probed; try again when the probe is done")
            if op == "inject":
                inj = self.faults.add(args["fault"], now)
                fut.set_result(Answer(True, f"scheduled: {inj.evidence()}"))
            elif op == "clear":
                ended = self.faults.clear(dev)
                for inj in ended:
                    self._end_fault(inj, now)
                fut.set_result(Answer(True, f"{len(ended)} fault(s) ended"))
            elif op == "drain":
                self._run(self.machine.drain(dev, now, reason))
                after = f"; {len(busy)} job(s) finish first: {', '.join(busy)}" if busy else ""
                fut.set_result(Answer(True, f"drained{after}"))
            elif op == "undrain":
                if busy and self._ctl.device_states()[dev] is not _S.DRAINING:
                    raise RefusedError(f"{dev} is unhealthy and still runs {', '.join(busy)}; "
                                       "undrain it once they end")  # fmt: skip
                self._settle_later(dev, fut, self.machine.undrain(dev, now, bool(busy), reason))
            elif op == "reset":
                self._settle_later(dev, fut, self.machine.reset(dev, now, bool(busy), reason))
            else:
                self._probe_request(dev, int(args.get("level", 1)), reason, bool(busy), fut, now)
        except RefusedError as exc:
            fut.set_result(Answer(False, str(exc)))

    def _settle_later(self, dev: str, fut: Future[Answer], actions: list[Action]) -> None:
        """Answer ``fut`` when the device settles (now, if these actions settle it)."""
        self._waiters.setdefault(dev, []).append(fut)
        self._run(actions)
        phase = self.machine.phase(dev)
        if not fut.done() and phase not in (Phase.RESETTING, Phase.PROBING, Phase.BACKOFF):
            self._waiters[dev].remove(fut)
            fut.set_result(Answer(True, f"{phase.value}: " + "; ".join(a.cause for a in actions)))

    def _probe_request(
        self, dev: str, level: int, reason: str, busy: bool, fut: Future[Answer], now: float
    ) -> None:
        phase = self.machine.phase(dev)
        if busy:
            raise RefusedError(f"{dev} runs {', '.join(self._ctl.jobs_on(dev))}; drain it or "
                               "wait for them to end (or use reset)")  # fmt: skip
        if any(p.device == dev for p in self._probes.values()):
            raise RefusedError(f"{dev} is being probed already")
        if phase is Phase.HEALTHY:
            self._probe_waiters[dev] = [fut]
            self._run(self.machine.probe(dev, now, level, reason))
        elif phase in (Phase.HELD, Phase.OFFLINE, Phase.BACKOFF):
            self._store.log(None, now, "remedy:note", f"{dev} {phase.value}: {reason} "
                            f"(diagnostic probe level {level}; changes nothing)")  # fmt: skip
            self._probe_waiters[dev] = [fut]
            self._launch_probe(dev, level, diagnostic=True)
        else:
            raise RefusedError(f"{dev} is {phase.value}; try again when it has settled")

    def _pending_store_requests(self) -> None:
        """Requests in the store that no controller answered (made while none ran)."""
        found = self._store.events_since(0, ("device:request", "device:answer"))
        answered = set()
        for ev in found:
            if ev.kind == "device:answer":
                try:
                    answered.add(int(json.loads(ev.detail)["request"]))
                except (ValueError, KeyError, TypeError):
                    continue
        now = self._clock.now()
        for ev in found:
            if ev.kind == "device:request":
                self._seen = max(self._seen, ev.seq)
                if ev.seq not in answered:
                    self._store_request(ev.seq, ev.detail, now)

    def _store_request(self, seq: int, detail: str, now: float) -> None:
        fut: Future[Answer] = Future()

        def answer(done: Future[Answer]) -> None:
            a = done.result()
            data = {"request": seq, **a.to_json()}
            self._store.log(None, self._clock.now(), "device:answer", json.dumps(data))

        fut.add_done_callback(answer)
        try:
            req = json.loads(detail)
            op, dev = str(req["op"]), str(req["device"])
            if op not in OPS:
                raise ValueError(f"unknown operation {op!r}")
        except (ValueError, KeyError, TypeError) as exc:
            fut.set_result(Answer(False, f"malformed request: {exc}"))
            return
        self._execute(op, dev, {k: v for k, v in req.items() if k not in ("op", "device")}, fut,
                      now)  # fmt: skip
