"""Device care: health checks and remediation, stepped by the controller's reconcile loop.

:class:`DeviceCare` attaches to a :class:`~accelnet.runtime.control.controller.Controller`; every
:meth:`~accelnet.runtime.control.controller.Controller.apply` steps it (in the controller's thread,
before the decision). A step:

- starts and ends injected faults that are due (:mod:`accelnet.devices.faults`);
- at once: workers that died on their own (a backend that
  :class:`~accelnet.runtime.backend.SupportsWorkers`), before the decision can place work
  on their device;
- every ``check_period_s``: silent workers (missed heartbeats), active ``fail`` faults,
  devices a release-refresh left UNHEALTHY, jobs that did not stop in time (their worker is
  killed), probes past their time;
- every ``sample_period_s``: telemetry through the samplers, judged by the passive checks
  and handed to the ``listeners`` (energy per job, the telemetry history kept in the store);
- hands each finding to the :class:`~accelnet.devices.health.HealthBoard` (changes become
  ``health:*`` events) and each FAIL/WARN to the pure
  :class:`~accelnet.devices.remediation.Remediator`, whose actions it carries out through
  the controller (device lifecycle, stopping jobs) and the backend (resets, probes as
  payload tasks in the device's own worker, so a hung device cannot hang the controller);
- answers operators' requests: from the SDK (a queue, any thread) and, with
  ``store_requests``, ``device:request`` events another process (``accelnet device``)
  appended to the store, answered with ``device:answer`` events.

Every remediation step is an event ``remedy:<action>`` (``<device> <phase>: <cause>``);
jobs moved off a failing device get a ``job:moved`` event; injected faults ``fault:<kind>``.
"""

from __future__ import annotations

import queue
from collections import deque
from collections.abc import Iterable, Sequence
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any, Protocol

import cloudpickle

from accelnet.devices import DeviceState
from accelnet.devices.faults import Fault, FaultSchedule, Injected, WorkerFaults
from accelnet.devices.health import (
    Finding,
    HealthBoard,
    Status,
    check_heartbeat,
    check_lost,
    check_sample,
    worst,
)
from accelnet.devices.probes import judge, no_answer, run_probe
from accelnet.devices.remediation import (
    Action,
    ActionKind,
    KindPolicy,
    Phase,
    RemediationPolicy,
    Remediator,
)
from accelnet.devices.samplers.poller import Poller
from accelnet.devices.telemetry import DeviceSample, Sampler, SampleRing
from accelnet.fabric.model import DeviceKind
from accelnet.runtime.backend import (
    SupportsRefresh,
    SupportsWorkers,
    TaskEvent,
    TaskEventKind,
    TaskSpec,
)
from accelnet.runtime.care.device_view import DeviceStatus
from accelnet.runtime.care.requests import Answer, OperatorRequests, ProbeRun, Request
from accelnet.runtime.local.runas import SERVICE_TENANT

__all__ = ["Answer", "DeviceCare", "SampleListener"]

if TYPE_CHECKING:
    from accelnet.runtime.control.controller import Controller


class SampleListener(Protocol):
    """What else wants every round of telemetry samples (in the controller's thread)."""

    def observe(self, samples: list[DeviceSample], now: float) -> None:
        """One round of samples, taken at ``now``; must not block."""


_SETTLED = (Phase.HEALTHY, Phase.HELD, Phase.BACKOFF, Phase.OFFLINE)
_S = DeviceState


class DeviceCare(OperatorRequests):
    """Watches and repairs a controller's devices (see the module docstring).

    ``policy``: the remediation policy (default: :class:`RemediationPolicy()`);
    ``samplers``: telemetry samplers for the passive checks (none: heartbeats, faults and
    probes only); ``faults``: injected faults, timed from now. Attaches itself to
    ``controller``. Everything but :meth:`request` and :meth:`inject` runs in the
    controller's thread (or under the lock that guards the controller).
    """

    def __init__(
        self,
        controller: Controller,
        policy: RemediationPolicy | None = None,
        *,
        samplers: Sequence[Sampler] = (),
        sample_period_s: float = 2.0,
        check_period_s: float = 0.25,
        faults: Iterable[Fault] = (),
        store_requests: bool = False,
        request_period_s: float = 0.5,
    ) -> None:
        self._ctl = controller
        self._clock = controller.clock
        self._store = controller.store
        self._backend = controller.backend
        self._fabric = controller.fabric
        self.policy = policy or RemediationPolicy()
        self._policies = {k: self.policy.for_kind(k) for k in DeviceKind}
        self.machine = Remediator(self.policy_of)
        self.board = HealthBoard()
        now = self._clock.now()
        self.faults = FaultSchedule(faults, now)
        backend = self._backend
        self._workers = backend if isinstance(backend, SupportsWorkers) else None
        self._signals = WorkerFaults(self._workers.worker_pid) if self._workers else None
        self.poller = (
            Poller(list(samplers), sample_period_s, ring=SampleRing(64)) if samplers else None
        )
        self._prev: dict[str, DeviceSample] = {}
        self._base: dict[str, DeviceSample] = {}
        self._probes: dict[str, ProbeRun] = {}
        self._probe_seq = 0
        self._draining: set[str] = set()
        self._stopping: dict[str, float] = {}  # device -> when its jobs are killed
        self._waiters: dict[str, list[Future[Answer]]] = {}  # answered when it settles
        self._probe_waiters: dict[str, list[Future[Answer]]] = {}  # for its next probe
        self._flagged: dict[str, set[str]] = {"heartbeat": set(), "fault": set(),
                                              "controller": set()}  # fmt: skip
        self._requests: queue.SimpleQueue[Request] = queue.SimpleQueue()
        self._check_period = check_period_s
        self._next_check = now
        self._store_requests = store_requests
        self._request_period = request_period_s
        self._next_request = now
        self._seen = 0
        self.listeners: list[SampleListener] = []
        controller.care = self
        self._adopt(now)
        if store_requests:
            self._pending_store_requests()

    # ----- public ----------------------------------------------------------------------
    def policy_of(self, device: str) -> KindPolicy:
        """The effective policy of ``device`` (by its kind)."""
        return self._policies[self._fabric.devices[device].kind]

    def statuses(self) -> list[DeviceStatus]:
        """Every device now: lifecycle state, phase, health, jobs, latest sample."""
        now = self._clock.now()
        states = self._ctl.device_states()
        ring = self.poller.ring if self.poller is not None else None
        out = []
        for dev, d in self._fabric.devices.items():
            findings = tuple(self.board.findings(dev))
            out.append(DeviceStatus(
                dev, d.kind.value, d.model.name, states[dev].value,
                self.machine.phase(dev).value, worst(f.status for f in findings), findings,
                tuple(self._ctl.jobs_on(dev)), ring.latest(dev) if ring is not None else None,
                self.machine.failures(dev, now),
            ))  # fmt: skip
        return out

    def close(self) -> None:
        """End throttles and hangs, close the samplers."""
        if self._signals is not None:
            self._signals.close()
        if self.poller is not None:
            self.poller.close()

    # ----- the step --------------------------------------------------------------------
    def step(self) -> None:
        """One pass (see the module docstring); called by ``Controller.apply``."""
        now = self._clock.now()
        self._take_requests(now)
        self._faults(now)
        if self._workers is not None:
            self._check_losses(now)  # at once: before the next decision places work there
        if now >= self._next_check:
            self._next_check = now + self._check_period
            self._check_heartbeats(now)
            self._check_fail_faults(now)
            self._check_lifecycle(now)
            self._check_stopping(now)
            self._check_probes(now)
        if self.poller is not None and self.poller.due(now):
            samples = self.poller.poll(now)
            for s in samples:
                self._check_sample(s)
            for listener in self.listeners:
                listener.observe(samples, now)
        for dev in sorted(self._draining):
            if not self._ctl.jobs_on(dev):
                self._run(self.machine.idle(dev, now))
        self._run(self.machine.due(now))

    def on_task_event(self, ev: TaskEvent) -> None:
        """A probe's news: judge it, tell the machine, answer who asked."""
        probe = self._probes.get(ev.task_id)
        if probe is None or ev.kind is TaskEventKind.STARTED:
            return
        del self._probes[ev.task_id]
        dev, now = probe.device, ev.at
        if ev.kind is TaskEventKind.SUCCEEDED:
            findings = judge(dev, ev.result, now, now - probe.launched)
        else:
            findings = [no_answer(dev, f"{ev.kind.value}: {ev.error or ev.exit_code}", now)]
        status = worst(f.status for f in findings)
        summary = "; ".join(f"{f.check} {f.status.value}: {f.value}" for f in findings)
        self._store.log(None, now, f"probe:{status.value}", f"{dev} level {probe.level}: {summary}")
        self._health(dev, "probe", findings, now, act=False)
        answer = Answer(status is not Status.FAIL, f"probe level {probe.level} {status.value}: "
                        f"{summary}", tuple(findings))  # fmt: skip
        for fut in probe.waiters:
            fut.set_result(answer)
        if not probe.diagnostic:
            self._run(self.machine.probe_done(dev, answer.ok, summary, now))

    # ----- checks ------------------------------------------------------------------------
    def _faults(self, now: float) -> None:
        for inj in self.faults.begin(now):
            done = self._signals.apply(inj) if self._signals is not None else "no workers"
            self._store.log(None, now, f"fault:{inj.fault.kind}", f"{inj.device}: "
                            f"{inj.evidence()}: {done}")  # fmt: skip
            if inj.fault.kind in ("fail", "slow"):
                self._flagged["fault"].add(inj.device)
                active = self.faults.active(inj.device)
                found = [i.finding(now) for i in active if i.seq != inj.seq]
                self._health(inj.device, "fault", [*found, inj.finding(now)], now)
        for inj in self.faults.end(now):
            self._end_fault(inj, now)

    def _end_fault(self, inj: Injected, now: float) -> None:
        done = "over"
        if self._signals is not None and inj.fault.kind in ("slow", "hang"):
            done = self._signals.undo(inj.device, inj.fault.kind)
        self._store.log(None, now, "fault:end", f"{inj.device}: {inj.evidence()}: {done}")

    def _check_fail_faults(self, now: float) -> None:
        if self._signals is not None:
            self._signals.follow()
        flagged = self._flagged["fault"]
        for dev in sorted(flagged):
            found = [i.finding(now) for i in self.faults.active(dev)]
            self._health(dev, "fault", found, now)
            if not found:
                flagged.discard(dev)

    def _check_losses(self, now: float) -> None:
        """Workers that died on their own. One that died running a task is the task's doing
        (a job may end its own process however it likes: ``os._exit``, ``os.abort``, a
        segfault, ``kill -9 $PPID``): its attempt fails, and the device stays in service;
        its next worker starts afresh, and the refresh when the device is next free must
        find it answering. An idle worker that dies, or one a ``kill`` fault killed, is the
        device's: a health finding (``worker_lost``)."""
        assert self._workers is not None
        for loss in self._workers.take_losses():
            injected = self._signals is not None and self._signals.killed(loss.pid)
            if loss.task is not None and not injected:
                self._store.log(None, now, "worker:lost", f"{loss.device}: worker pid "
                                f"{loss.pid} {loss.how} while running a task: that task "
                                "failed; the device stays in service")  # fmt: skip
                continue
            lost = check_lost(loss.device, loss.at, loss.how, self._checks(loss.device), loss.pid)
            if lost is not None:
                self._flagged["heartbeat"].add(loss.device)
                self._health(loss.device, "heartbeat", [lost], now)

    def _check_heartbeats(self, now: float) -> None:
        """Silent workers FAIL (and are killed: hung, they serve no one). A heartbeat
        finding clears when the device has a worker that beats again."""
        if self._workers is None:
            return
        found: dict[str, list[Finding]] = {}
        beats = self._workers.heartbeats()
        for dev, (last, pid) in beats.items():
            silent = check_heartbeat(dev, last, now, self._checks(dev), pid)
            if silent is not None:
                if self.policy_of(dev).on_fail:  # hung, it serves no one (report-only: kept)
                    self._workers.kill_worker(dev, silent.value)
                found[dev] = [silent]
        flagged = self._flagged["heartbeat"]
        for dev in sorted(flagged | set(found)):
            if dev in found:
                flagged.add(dev)
                self._health(dev, "heartbeat", found[dev], now)
            elif dev in beats:
                flagged.discard(dev)
                self._health(dev, "heartbeat", [], now)

    def _check_sample(self, s: DeviceSample) -> None:
        dev = s.device
        if dev not in self._fabric.devices:
            return
        base = self._base.setdefault(dev, s)
        findings = check_sample(s, self._checks(dev), self._prev.get(dev), base)
        self._prev[dev] = s
        self._health(dev, "telemetry", findings, s.time)

    def _check_lifecycle(self, now: float) -> None:
        """A device the controller found unhealthy itself (its refresh failed)."""
        flagged = self._flagged["controller"]
        for dev, state in self._ctl.device_states().items():
            if state is _S.UNHEALTHY and self.machine.phase(dev) is Phase.HEALTHY:
                flagged.add(dev)
                f = Finding(dev, "refresh", Status.FAIL, now, "controller", "refresh failed")
                self._health(dev, "controller", [f], now)
            elif dev in flagged and state is not _S.UNHEALTHY:
                flagged.discard(dev)
                self._health(dev, "controller", [], now)

    def _check_stopping(self, now: float) -> None:
        for dev, deadline in sorted(self._stopping.items()):
            if not self._ctl.jobs_on(dev):
                del self._stopping[dev]
            elif now >= deadline and self._workers is not None:
                del self._stopping[dev]
                grace = self.policy_of(dev).stop_grace_s
                self._workers.kill_worker(dev, f"its jobs did not stop within {grace:g} s")

    def _check_probes(self, now: float) -> None:
        for tid, probe in list(self._probes.items()):
            if now < probe.deadline:
                continue
            probe.deadline = now + self._check_period * 40  # once in a while, until it ends
            if self._workers is not None:
                self._workers.kill_worker(probe.device, "probe timed out")
            else:
                self._backend.cancel(tid)

    def _checks(self, dev: str) -> Any:
        return self.policy_of(dev).checks

    def _health(
        self, dev: str, source: str, findings: list[Finding], now: float, act: bool = True
    ) -> None:
        """Record what changed; hand a FAIL (or a new WARN) to the machine."""
        changes = self.board.update(dev, source, findings, now)
        for f in changes:
            self._store.log(None, now, f"health:{f.status.value}", f.text())
        if not act:
            return
        fails = [f for f in findings if f.status is Status.FAIL]
        busy = bool(self._ctl.jobs_on(dev))
        if fails:
            cause = "; ".join(f.text() for f in fails[:3])
            self._run(self.machine.failed(dev, cause, now, busy))
            return
        warns = [f for f in changes if f.status is Status.WARN]
        if warns:
            self._run(self.machine.warned(dev, "; ".join(f.text() for f in warns[:3]), now, busy))

    # ----- actions -----------------------------------------------------------------------
    def _run(self, actions: Iterable[Action]) -> None:
        todo = deque(actions)
        while todo:
            a = todo.popleft()
            now = self._clock.now()
            self._store.log(None, now, f"remedy:{a.kind.value}", f"{a.device} {a.phase.value}: "
                            f"{a.cause}")  # fmt: skip
            todo.extend(self._do(a, now))
            if a.phase is Phase.DRAINING:
                self._draining.add(a.device)
            else:
                self._draining.discard(a.device)
            if a.phase in _SETTLED and a.kind is not ActionKind.NOTE:
                ok = a.phase is Phase.HEALTHY or (
                    a.phase is Phase.HELD and a.kind is ActionKind.DRAIN
                )
                for fut in self._waiters.pop(a.device, []):
                    fut.set_result(Answer(ok, f"{a.phase.value}: {a.cause}",
                                          tuple(self.board.findings(a.device))))  # fmt: skip

    def _do(self, a: Action, now: float) -> list[Action]:
        ctl, dev = self._ctl, a.device
        state = ctl.device_states()[dev]
        kind = a.kind
        if kind in (ActionKind.FAIL, ActionKind.OFFLINE):
            if a.stop_jobs:
                self._move_jobs(dev, a.cause, now)
            if state is not _S.OFFLINE and (a.stop_jobs or state is not _S.UNHEALTHY):
                ctl.fail_device(dev, a.cause, requeue=a.stop_jobs)
            if kind is ActionKind.OFFLINE and state is not _S.OFFLINE:
                ctl.set_device(dev, _S.OFFLINE, a.cause)
        elif kind is ActionKind.DRAIN:
            if state is _S.ALLOCATED:
                ctl.set_device(dev, _S.DRAINING, a.cause)
            elif state in (_S.READY, _S.REFRESHING, _S.UNHEALTHY):
                ctl.set_device(dev, _S.DRAINED, a.cause)
        elif kind is ActionKind.UNDRAIN and state is _S.DRAINING:
            ctl.set_device(dev, _S.ALLOCATED, a.cause)
        elif kind is ActionKind.RESET:
            self._out_of_service(dev, state, a.cause)
            ok, detail = self._reset(dev, a.hard)
            return self.machine.reset_done(dev, ok, detail, self._clock.now())
        elif kind is ActionKind.PROBE:
            self._out_of_service(dev, state, a.cause)
            self._launch_probe(dev, a.level, diagnostic=False)
        elif kind is ActionKind.READY and state in (_S.REFRESHING, _S.UNKNOWN):
            ctl.set_device(dev, _S.READY, a.cause)
        return []

    def _move_jobs(self, dev: str, cause: str, now: float) -> None:
        jobs = self._ctl.jobs_on(dev)
        for job in jobs:
            self._store.log(job, now, "job:moved", f"off {dev}: {cause}")
        if jobs:
            self._stopping[dev] = now + self.policy_of(dev).stop_grace_s

    def _out_of_service(self, dev: str, state: DeviceState, cause: str) -> None:
        """Before a reset or probe: nothing may be placed on the device meanwhile."""
        if state in (_S.READY, _S.UNHEALTHY, _S.DRAINED):
            self._ctl.set_device(dev, _S.REFRESHING, cause)
        elif state is _S.OFFLINE:
            self._ctl.set_device(dev, _S.UNKNOWN, cause)

    def _reset(self, dev: str, hard: bool) -> tuple[bool, str]:
        for inj in self.faults.reset(dev):
            self._end_fault(inj, self._clock.now())
        self._prev.pop(dev, None)
        if hard and self._workers is not None:
            return self._workers.reset(dev, hardware=self.policy_of(dev).gpu_reset)
        if isinstance(self._backend, SupportsRefresh):
            return self._backend.refresh(dev)
        return True, "the backend has nothing to reset"

    def _launch_probe(self, dev: str, level: int, diagnostic: bool) -> None:
        self._probe_seq += 1
        tid = f"probe-{self._probe_seq}"
        policy = self.policy_of(dev)
        failing = self.faults.failing(dev)
        inject = failing.evidence() if failing is not None else None
        timeout = policy.probe_timeout_s + (policy.stress_s if level >= 2 else 0.0)
        payload = cloudpickle.dumps((run_probe, (level, policy.stress_s, inject), {}))
        now = self._clock.now()
        probe = ProbeRun(dev, level, now, now + timeout + 30.0, diagnostic)
        probe.waiters += self._probe_waiters.pop(dev, [])
        self._probes[tid] = probe
        spec = TaskSpec(tid, tid, 0, 1, dev, (dev,), payload=payload, timeout_s=timeout,
                        log_dir=str(self._ctl.workdir / "probes"),
                        tenant=SERVICE_TENANT)  # the service's own  # fmt: skip
        try:
            self._backend.launch(spec)
        except (RuntimeError, ValueError, KeyError) as exc:
            self.on_task_event(TaskEvent(tid, TaskEventKind.FAILED, now, error=str(exc)))

    def _adopt(self, now: float) -> None:
        """Devices out of service when the controller started: drained ones stay HELD,
        offline ones OFFLINE, unhealthy ones (and any left unknown mid-repair) are
        repaired."""
        restored = {_S.DRAINED: Phase.HELD, _S.OFFLINE: Phase.OFFLINE,
                    _S.UNHEALTHY: Phase.DRAINING, _S.UNKNOWN: Phase.DRAINING}  # fmt: skip
        for dev, state in sorted(self._ctl.device_states().items()):
            phase = restored.get(state)
            if phase is not None:
                why = f"found {state.value} when the controller started"
                self._run(self.machine.restore(dev, phase, now, why))
