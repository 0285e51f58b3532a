"""The controller: a reconcile loop from events to decisions to processes.

Each :meth:`Controller.step` takes the backend's task events, updates jobs and devices
through their transition tables (the store records every change), and, when anything
changed, builds a snapshot, asks the scheduler for a decision and applies it: devices are
allocated through the device lifecycle and tasks launched on the backend; preempted jobs'
tasks are cancelled. Time comes from the injected clock; there is no simulation branch.

A job of N devices runs as N tasks (ranks). It succeeds when every rank succeeds; when one
fails the others are cancelled and the job is requeued while its retry budget lasts,
after its retry backoff (``JobSpec.retry``: exponential, with jitter; the time is stored
as the job's ``retry_at``, so it holds across a restart): until then the scheduler does
not see it.
Released devices are refreshed (scratch cleaned, worker checked) before reuse. A job that
consumes earlier jobs' outputs (``inputs``) is held, PENDING, until they have succeeded
(:mod:`accelnet.runtime.control.inputs`), and fails if one of them fails or is cancelled.

This module holds the controller (start-up recovery, the public calls, scheduling, the
launch path and the task events that settle each attempt); its device tracking is in
:mod:`accelnet.runtime.control.devices`, its runs (an attempt's tasks and accounting)
in :mod:`accelnet.runtime.control.runs`.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from accelnet.devices import DeviceState
from accelnet.fabric import Fabric
from accelnet.monitor.timing import (
    QUEUE_WAIT_BUCKETS,
    AttemptTally,
    DecisionTimer,
    TenantHistograms,
)
from accelnet.runtime.backend import (
    Backend,
    SupportsHandoff,
    SupportsLiveLogs,
    SupportsMembership,
    SupportsProgress,
    TaskEvent,
    TaskEventKind,
    TaskSpec,
)
from accelnet.runtime.clock import Clock
from accelnet.runtime.control.devices import DeviceBook
from accelnet.runtime.control.fate import fate, requeue
from accelnet.runtime.control.inputs import InputGate, resolve, verdict
from accelnet.runtime.control.retry_waits import RetryWaits
from accelnet.runtime.control.runs import (
    Attempt,
    account_for,
    anchor,
    payload_of,
    rank_specs,
    setup_specs,
    world_size,
)
from accelnet.runtime.control.store import JobExistsError, JobRecord, Store, StoreError
from accelnet.sched import JobSpec, JobState, Placement, Scheduler, Tenant
from accelnet.sched.reasons import OutcomeCode, Reason, WaitCode, make_reason
from accelnet.sched.request import rejection
from accelnet.sched.session import Session
from accelnet.sched.shortcuts import Reasons

if TYPE_CHECKING:
    from accelnet.runtime.care.power import PowerHook
    from accelnet.runtime.control.nccl_tuning import NcclTuning

_ID_TRIES = 8  # draws of a job id suffix before giving up (each 32 random bits)
_LIVE = (JobState.ADMITTED, JobState.STARTING, JobState.RUNNING, JobState.PREEMPTING)
# logged (durably) when a job holding devices is cancelled, before its tasks are stopped: a
# controller that restarts before they have ended cancels the job instead of requeueing it
LOST_AT_RESTART = "lost when the controller restarted"  # in the events of such requeues
# how the error of a job failed by the crash-loop guard (``_requeue_lost``) starts
HELD_AFTER_DEATHS = "not run again: the controller died"
CANCEL_REQUESTED = "job:cancel-requested"


class JobRejectedError(ValueError):
    """A job the fabric can never run; names the spec key and value."""


class Care(Protocol):
    """What watches and repairs the devices (:class:`accelnet.runtime.care.device_care.DeviceCare`):
    stepped in every reconcile pass, before the decision; handed the events of the tasks
    it launched itself (probes)."""

    def step(self) -> None:
        """Check, remediate, act on requests; may change devices through the controller."""

    def on_task_event(self, ev: TaskEvent) -> None:
        """An event of a task the controller did not launch."""


class Controller:
    """Runs jobs on a fabric through a backend; one thread calls :meth:`step`."""

    def __init__(
        self,
        fabric: Fabric,
        store: Store,
        backend: Backend,
        clock: Clock,
        workdir: str | Path,
        scheduler: Scheduler | None = None,
        tenants: dict[str, Tenant] | None = None,
    ) -> None:
        self.fabric = fabric
        self.store = store
        self.backend = backend
        self.clock = clock
        self.workdir = Path(workdir)
        self.log_dir = self.workdir / "logs"  # <job>.<attempt>.<rank>.out|err (made by backends)
        self.scheduler = scheduler or Scheduler()
        self.tenants = dict(tenants or {})
        self.topology = self.scheduler.topology(fabric)
        self._reasons: Mapping[str, Reason] = {}  # written by the last decision
        self.again_at: float | None = None  # decide again then, even if nothing happens
        self._runs: dict[str, Attempt] = {}
        self._tasks: dict[str, tuple[str, int]] = {}
        self._dirty = True
        # device states and holders (the scheduler's session is told of each change)
        self._book = DeviceBook(store, backend, clock, self._tell_session)
        self._devices = self._book.states
        # live jobs (queued or holding devices), kept in step with the store: the store is
        # written through on every change and read only at start-up
        self._live: dict[str, JobRecord] = {}
        # the scheduler's state, kept by the events themselves (no rescan per decision)
        self.session = Session(self.scheduler, fabric, {}, self.tenants)
        self.decision_timer = DecisionTimer()  # scheduler decision durations (/metrics)
        # queue waits per tenant (/metrics), each observed once, when its attempt starts;
        # when each queued job became ready to start (admitted, requeued, backoff over)
        self.queue_waits = TenantHistograms(QUEUE_WAIT_BUCKETS)
        self.attempts = AttemptTally()  # attempts ended per tenant and outcome, run times
        self._queued_since: dict[str, float] = {}
        if isinstance(backend, SupportsProgress):
            self.session.progress = backend.progress
        self._holders = self._book.holders  # device -> jobs holding it
        self._gate = InputGate()  # jobs held until their input jobs succeed
        self._backoff = RetryWaits()  # requeued failed jobs -> when they may start
        self.care: Care | None = None  # device health and remediation, if attached
        self.power: PowerHook | None = None  # energy per job, a power budget (care/power.py)
        # gangs of NVIDIA GPUs ranked by ring, NCCL's variables: where tasks really run
        # (attached by LocalCluster; the simulator's controller has none)
        self.nccl: NcclTuning | None = None
        self._recover()

    # ----- start-up -----------------------------------------------------------------
    def _recover(self) -> None:
        """Reconcile with the store after a (re)start: devices come back through a refresh;
        jobs that were running when the last controller died are requeued, or cancelled if
        a cancel of theirs had been accepted."""
        now = self._started = self.clock.now()
        known = self.store.devices()
        self._book.recover(self.fabric.devices, known, now)
        for rec in self.store.jobs(_LIVE):
            self._keep(rec)
        cancelled = {e.job for e in self.store.events_since(0, [CANCEL_REQUESTED])}
        for rec in self.store.jobs([JobState.STARTING, JobState.RUNNING, JobState.PREEMPTING]):
            if rec.id in cancelled:
                self._transition(rec.id, JobState.CANCELLED, now, "cancelled (accepted before "
                             "the controller restarted)", finished_at=now,
                             outcome=OutcomeCode.CANCELLED)  # fmt: skip
                continue
            self._requeue_lost(rec, now)
        for rec in self.store.jobs([JobState.PENDING]):
            self._admit_or_hold(self._keep(rec), now)

    def _requeue_lost(self, rec: JobRecord, now: float) -> None:
        """A job that was running when the last controller died: requeued. The first such
        loss is free (the job was a bystander); each later one spends a retry, and a job
        out of retries ends FAILED: a job that kills the controller (or dies with it every
        time) is not started again and again, so the service comes back."""
        deaths = 1 + sum(LOST_AT_RESTART in e.detail for e in self.store.events(rec.id))
        if deaths == 1:
            self._transition(rec.id, JobState.ADMITTED, now, f"requeued: {LOST_AT_RESTART}",
                             placement=None, outcome=OutcomeCode.CONTROLLER_RESTART)  # fmt: skip
            return
        failures = rec.failures + 1
        error = (f"{LOST_AT_RESTART} ({deaths} times while it ran; every time after the "
                 "first spends a retry)")  # fmt: skip
        if failures <= rec.spec.max_retries:
            end = requeue(rec, now, failures, error, OutcomeCode.CONTROLLER_RESTART, backoff=True)
            self._transition(rec.id, end.state, now, end.cause, **end.changes)
            return
        error = (f"{HELD_AFTER_DEATHS} {deaths} times while this job ran "
                 "(it may be what stops it); resubmit it to run it again")  # fmt: skip
        self._transition(rec.id, JobState.FAILED, now, error, failures=failures, error=error,
                         finished_at=now, outcome=OutcomeCode.CONTROLLER_RESTART)  # fmt: skip

    # ----- public -------------------------------------------------------------------
    def submit(self, spec: JobSpec, payload: bytes | None = None, job_id: str | None = None) -> str:
        """Accept a job (durably) and admit it, or hold it until its input jobs succeed;
        JobRejectedError if the fabric can never run it or an input names no known job
        (nothing is stored then). Returns the job id."""
        never = rejection(spec, self.topology)
        if never is not None:
            raise JobRejectedError(
                f"job {spec.name}: {never.key} = {never.value!r}: {never.message}"
            )
        try:
            inputs = resolve(spec, self.store)
        except LookupError as exc:
            raise JobRejectedError(f"job {spec.name}: {exc.args[0]}") from None
        now = self.clock.now()
        for _ in range(_ID_TRIES):
            jid = job_id or f"{spec.name}-{uuid.uuid4().hex[:8]}"
            rec = JobRecord(jid, spec, JobState.PENDING, now, payload=payload, inputs=inputs)
            try:
                with self.store.batch():  # stored and admitted in one commit
                    self.store.add(rec)
                    self._admit_or_hold(self._keep(rec), now)
            except JobExistsError:
                if job_id is not None:  # the caller's own id: theirs to change
                    raise
                continue  # a drawn suffix met an earlier job's (1 in 4e9 per pair): again
            return jid
        raise JobExistsError(f"job {spec.name}: no free id after {_ID_TRIES} draws")

    def cancel(self, job_id: str) -> None:
        """Cancel a job: queued ones at once, running ones by stopping their tasks (the
        request is recorded first, so that it outlives a restart of the controller; a job
        already being stopped, preempted or off a failed device, ends cancelled too)."""
        rec = self._live.get(job_id) or self.store.get(job_id)
        now = self.clock.now()
        if rec.state in (JobState.PENDING, JobState.ADMITTED):
            self._transition(job_id, JobState.CANCELLED, now, "cancelled", finished_at=now,
                             outcome=OutcomeCode.CANCELLED)  # fmt: skip
        elif rec.state.holds_devices():
            run = self._runs.get(job_id)
            if run is not None and run.cancel == "cancelled":
                return  # asked before
            self.store.log(job_id, now, CANCEL_REQUESTED, "stopping its tasks")
            if run is not None and run.cancel is not None:
                run.cancel = "cancelled"  # its tasks are being stopped already
            self._stop(job_id, "cancelled")
        self._dirty = True

    def step(self, timeout: float = 0.05) -> bool:
        """One reconcile pass; waits up to ``timeout`` for task events. True if anything
        changed."""
        return self.apply(self.backend.poll(timeout))

    def apply(self, events: list[TaskEvent]) -> bool:
        """Apply task events, then decide again if anything changed (no waiting: callers
        that share the controller with other threads poll the backend outside their lock
        and call this under it). Its writes reach the store as one batch (one commit)."""
        with self.store.batch():
            return self._apply(events)

    def _apply(self, events: list[TaskEvent]) -> bool:
        if isinstance(self.backend, SupportsMembership):  # machines first: their tasks' LOST
            for change in self.backend.take_node_changes():  # events find them OFFLINE
                self._book.node_change(change)
                self._dirty = True
        for ev in events:
            self._on_event(ev)
        if self.care is not None:
            self.care.step()
        if self._backoff:
            self._release_backoffs(self.clock.now())
        if self.again_at is not None and self.clock.now() >= self.again_at:
            self._dirty = True  # a job's wait ran out (Decision.again_at, a retry backoff)
        changed = bool(events) or self._dirty
        if self._dirty:
            self._dirty = False
            self._schedule()
        return changed

    def fail_device(self, dev: str, cause: str, requeue: bool = True) -> None:
        """A device failed (a health check, an injected fault): it becomes UNHEALTHY and
        takes no new work (already UNHEALTHY: it stays); the jobs on it are stopped and
        requeued within their retry budget (the failure counts against it), or, without
        ``requeue``, left to finish."""
        now = self.clock.now()
        self._book.fail(dev, now, cause)
        self._dirty = True
        if not requeue:
            return
        for jid in sorted(self._holders.get(dev, ())):
            run = self._runs.get(jid)
            if run is None or run.cancel is not None:
                continue  # already being stopped (cancelled, preempted): that stands
            run.failed(f"device {dev} failed: {cause}", OutcomeCode.DEVICE_FAILED)
            self._stop(jid, f"device {dev} failed")

    def repair_device(self, dev: str, cause: str) -> None:
        """Remediation of an UNHEALTHY (or drained) device: refresh and probe it; it is
        READY again if that works."""
        self._book.repair(dev, self.clock.now(), cause)
        self._dirty = True

    def set_device(self, dev: str, state: DeviceState, cause: str) -> None:
        """Move a device to ``state`` (IllegalTransitionError if the device table does not
        allow it), recorded with ``cause``; decide again."""
        self._book.set(dev, state, self.clock.now(), cause)
        self._dirty = True

    def jobs_on(self, dev: str) -> list[str]:
        """The jobs holding (a share of) ``dev`` now, sorted."""
        return sorted(self._holders.get(dev, ()))

    def reason(self, job_id: str) -> Reason | None:
        """Why a queued job is waiting (None if it is not queued)."""
        inputs = self._gate.reason(job_id, self._state_of)
        if inputs is not None:
            return make_reason(inputs, WaitCode.AWAITING_INPUTS)
        at = self._backoff.get(job_id)
        if at is not None:
            rec = self._live[job_id]
            return make_reason(f"retry backoff after failure {rec.failures} of its "
                          f"{rec.spec.max_retries} retries: may start at {at:.3f} (in "
                          f"{max(0.0, at - self.clock.now()):.3g} s)", WaitCode.RETRY_BACKOFF,
                          {"at": at, "failures": rec.failures})  # fmt: skip
        power = None if self.power is None else self.power.reason(job_id)
        if power is not None:  # delayed by the power budget
            return make_reason(power, WaitCode.POWER_BUDGET)
        found = self._reasons.get(job_id)
        return found if found is not None else self.session.reason(job_id)

    def log_path(self, job_id: str, attempt: int, rank: int, stream: str) -> Path:
        """Where a task's ``stream`` (``out``/``err``) is: its log file once it has ended or,
        while it runs on a backend that can say, the file it is being written to."""
        task_id = f"{job_id}.{attempt}.{rank}"
        final = self.log_dir / f"{task_id}.{stream}"
        if isinstance(self.backend, SupportsLiveLogs) and not final.exists():
            live = self.backend.live_log(task_id, stream)
            if live is not None:
                return live
        return final

    def device_states(self) -> dict[str, DeviceState]:
        """Every device's current state."""
        return {d: t.state for d, t in self._devices.items()}

    def live(self) -> int:
        """How many jobs are queued or running."""
        return len(self._live)

    def idle(self) -> bool:
        """No job is queued or running."""
        return not self._live

    def wake(self) -> None:
        """Something outside changed (a submission from another thread): decide again."""
        self._dirty = True

    def _tell_session(self, dev: str, state: DeviceState) -> None:
        """A device's new state, for the scheduler's session (the current one: it can be
        replaced: :meth:`accelnet.api.port.LocalClusterPort.set_scheduler`)."""
        self.session.set_device(dev, state)

    def _keep(self, rec: JobRecord) -> JobRecord:
        """Track a live job and give the scheduler its view (made once per change), unless
        it waits out a retry backoff (then the scheduler sees it when that ends)."""
        self._live[rec.id] = rec
        if (
            rec.retry_at is not None
            and rec.state is JobState.ADMITTED
            and rec.retry_at > self.clock.now()
        ):
            self._backoff.set(rec.id, rec.retry_at)
            self.session.drop(rec.id)
            return rec
        self._backoff.pop(rec.id)
        self.session.put(rec.view())
        return rec

    def _transition(
        self, jid: str, to: JobState, at: float, cause: str, **changes: Any
    ) -> JobRecord:
        """Store the transition (durably), then keep the live view in step."""
        rec = self.store.transition(jid, to, at, cause, **changes)
        if to is JobState.ADMITTED:  # its wait starts (after its retry backoff, if any)
            self._queued_since[jid] = max(at, rec.retry_at or at)
        if to.is_finished():
            self._queued_since.pop(jid, None)
            self._live.pop(jid, None)
            self._backoff.pop(jid)
            self.session.drop(jid)
            self._gate.forget(jid)
            for waiter in self._gate.waiters(jid):
                self._admit_or_hold(self._live[waiter], at)
            return rec
        return self._keep(rec)

    def _state_of(self, job_id: str) -> JobState | None:
        rec = self._live.get(job_id)
        if rec is not None:
            return rec.state
        try:
            return self.store.get(job_id).state
        except StoreError:
            return None

    def _observe_wait(self, rec: JobRecord, now: float) -> None:
        """The wait that ends with this start, observed once. A job queued before this
        controller started (recovered): from its submission if it never ran, else from the
        recovery or the end of its retry backoff, the later (its requeue time is not
        stored)."""
        since = self._queued_since.pop(rec.id, None)
        if since is None:  # recovered: a retry's wait starts when its backoff ends
            since = (
                rec.submitted_at if rec.attempts == 0 else max(self._started, rec.retry_at or 0.0)
            )
        self.queue_waits.observe(rec.spec.tenant, max(0.0, now - since))

    # ----- scheduling ---------------------------------------------------------------
    def _admit(self, jid: str, now: float, cause: str = "admitted") -> None:
        self._transition(jid, JobState.ADMITTED, now, cause)
        self._dirty = True

    def _admit_or_hold(self, rec: JobRecord, now: float) -> None:
        """A PENDING job: admit it if its inputs have succeeded, fail it if one failed,
        else hold it (logging what it waits for, when that is new)."""
        if not rec.inputs:
            self._admit(rec.id, now)
            return
        v = verdict(rec.inputs, self._state_of)
        if v.ready or v.failed:
            self._gate.forget(rec.id)
        if v.ready:
            self._admit(rec.id, now, f"admitted: {v.text}")
        elif v.failed:
            self._transition(rec.id, JobState.FAILED, now, v.text, error=v.text, finished_at=now,
                             outcome=OutcomeCode.INPUT_FAILED)  # fmt: skip
        elif not self._gate.holds(rec.id):
            self._gate.hold(rec.id, rec.inputs)
            self.store.log(rec.id, now, "job:held", v.text)

    def _schedule(self) -> None:
        now = self.clock.now()
        with self.decision_timer.measure():
            decision = self.session.decide(now)
        waiting = decision.waiting
        # the reasons of a full fabric's queue tail are not kept (reason() asks the session)
        # and the decision is let go before the session changes, so that it never copies
        # the queue for it
        self._reasons = waiting.eager if isinstance(waiting, Reasons) else waiting
        starts, preemptions, nominations = (
            decision.starts, decision.preemptions, decision.nominations
        )  # fmt: skip
        self.again_at = decision.again_at
        first = self._backoff.first()  # wake up when the first retry backoff runs out
        if first is not None:
            self.again_at = first if self.again_at is None else min(self.again_at, first)
        del decision, waiting
        by_id = self._live
        for p in preemptions:
            self._stop(p.job, f"preempted: {p.reason}")
            self._transition(p.job, JobState.PREEMPTING, now, p.reason)
        for jid, devices in nominations.items():
            if by_id[jid].nominated != devices:
                self._keep(self.store.update(jid, nominated=devices))
        if self.power is not None:  # the power budget may delay starts, caps devices
            starts = tuple(self.power.admit(starts, now))
        for s in starts:
            self._launch(by_id[s.job], s.placement, now)
        if self.power is not None:
            self.power.launched(now)

    def _launch(self, rec: JobRecord, placement: Placement, now: float) -> None:
        self._book.allocate(rec.id, placement.devices, now, placement.share)
        attempt = rec.attempts + 1
        self._observe_wait(rec, now)
        self._transition(
            rec.id, JobState.STARTING, now, f"placed on {placement.where()}",
            placement=placement, attempts=attempt, nominated=(), retry_at=None,
        )  # fmt: skip
        nccl = self.nccl
        ring = nccl.ring(placement.devices) if nccl and nccl.applies(placement.devices) else None
        ranked = placement if ring is None else replace(placement, devices=ring)
        devices = self.fabric.devices
        hosts = [devices[d].host for d in ranked.devices]
        beside = None
        if not placement.devices:  # a CPU-only job: its one task, on its host
            hosts = [placement.hosts[0][0]]
            beside = anchor(self.fabric, hosts[0])
        run = self._runs[rec.id] = Attempt(attempt, world_size(rec, hosts), launched=now)
        if self.power is not None:
            self.power.started(rec, placement, attempt, now)
        if rec.inputs and isinstance(self.backend, SupportsHandoff):
            where = self.backend.output_location
            self.store.log(rec.id, now, "job:inputs", "; ".join(
                f"{alias} = outputs of {job} at {where(job)} (by reference)"
                for alias, job in rec.inputs))  # fmt: skip
        specs = rank_specs(rec, run, ranked, payload_of(rec), self.log_dir, hosts, beside)
        if nccl is not None and ring is not None:  # NCCL's variables for each task's host
            for spec in specs:
                spec.rendezvous.update(nccl.env(ring, devices[spec.device].host))
        setup = setup_specs(rec, run, ranked, self.log_dir, hosts, beside)
        if setup:  # the ranks start once setup has succeeded on every host
            run.pending = specs
            for host, spec in setup.items():
                run.setup[spec.task_id] = host
                self._tasks[spec.task_id] = (rec.id, -1)
            for spec in setup.values():
                self.backend.launch(spec)
            return
        self._start_ranks(rec.id, specs)

    def _start_ranks(self, jid: str, specs: list[TaskSpec]) -> None:
        for spec in specs:
            self._tasks[spec.task_id] = (jid, spec.rank)
        for spec in specs:
            self.backend.launch(spec)

    def _stop(self, jid: str, why: str) -> None:
        run = self._runs.get(jid)
        if run is None or run.cancel is not None:
            return
        run.cancel = why
        for spec in run.pending:  # never started: ended as far as the attempt goes
            run.ended[spec.rank] = TaskEventKind.CANCELLED
        run.pending = []
        for tid in run.setup:
            self.backend.cancel(tid)
        for rank in range(run.world):
            if rank not in run.ended:
                self.backend.cancel(run.task_id(jid, rank))

    # ----- task events --------------------------------------------------------------
    def _on_event(self, ev: TaskEvent) -> None:
        where = self._tasks.get(ev.task_id)
        if where is None:
            if self.care is not None:  # a probe, or a task of an attempt already settled
                self.care.on_task_event(ev)
            return
        jid, rank = where
        run = self._runs[jid]
        rec = self._live[jid]
        now = ev.at
        self.store.log(jid, now, f"task:{ev.kind.value}", f"{ev.task_id}"
                       + (f": {ev.error}" if ev.error else ""))  # fmt: skip
        if rank < 0:
            self._on_setup_event(ev, rec, run)
            return
        if ev.kind is TaskEventKind.STARTED:
            run.started.add(rank)
            if len(run.started) == run.world and rec.state is JobState.STARTING:
                self._transition(jid, JobState.RUNNING, now, "every rank started",
                                      started_at=now)  # fmt: skip
            return
        run.ended[rank] = ev.kind
        del self._tasks[ev.task_id]
        if ev.kind is TaskEventKind.SUCCEEDED:
            run.results[rank] = ev.result
        elif run.error is None and ev.kind is not TaskEventKind.CANCELLED:
            log = self.log_dir / f"{ev.task_id}.err"
            run.failed(f"rank {rank} {ev.kind.value}: {ev.error or ev.exit_code} (log: {log})",
                       _failure(ev))  # fmt: skip
            self._stop(jid, "another rank failed")
        if run.settled():
            self._settle(self._live[jid], run, now)

    def _on_setup_event(self, ev: TaskEvent, rec: JobRecord, run: Attempt) -> None:
        """An event of a setup task: when the last one succeeds the ranks start; when one
        fails the attempt fails with its log (the other hosts' setup is stopped)."""
        if ev.kind is TaskEventKind.STARTED:
            return
        host = run.setup.pop(ev.task_id)
        del self._tasks[ev.task_id]
        stopped = ev.kind is TaskEventKind.CANCELLED and run.cancel is not None
        if ev.kind is not TaskEventKind.SUCCEEDED and not stopped and run.error is None:
            log = self.log_dir / f"{ev.task_id}.err"
            run.failed(f"setup on {host} {ev.kind.value}: {ev.error or ev.exit_code} "
                       f"(log: {log})", OutcomeCode.SETUP_FAILED)  # fmt: skip
            self._stop(rec.id, "setup failed")
        if not run.setup and run.pending and run.cancel is None:
            specs, run.pending = run.pending, []
            self._start_ranks(rec.id, specs)
        elif run.settled():
            self._settle(rec, run, ev.at)

    def _settle(self, rec: JobRecord, run: Attempt, now: float) -> None:
        """Every rank of the attempt has ended: decide the job's fate, free its devices."""
        del self._runs[rec.id]
        placement = rec.placement
        if rec.state is JobState.STARTING:  # ended before every rank reported STARTED
            rec = self._transition(rec.id, JobState.RUNNING, now, "ranks ended while starting")
        end = fate(rec, run, now)  # accelnet.runtime.control.fate: the rule, a pure function
        outcome = end.changes.get("outcome")
        self.attempts.ended(rec.spec.tenant, str(outcome or end.state.value), now - run.launched)
        acct = account_for(rec, run, now, end.succeeded, self.backend, self.power)
        self._transition(rec.id, end.state, now, end.cause, **end.changes, **acct)
        if placement is not None:
            self._book.release(rec.id, placement, now)
        self._dirty = True

    def _release_backoffs(self, now: float) -> None:
        """Jobs whose retry backoff has run out: the scheduler sees them again."""
        for jid in self._backoff.due(now):
            self.session.put(self._live[jid].view())
            self._dirty = True


def _failure(ev: TaskEvent) -> OutcomeCode:
    """The outcome code of a rank's unsuccessful end."""
    if ev.kind is TaskEventKind.LOST:
        return OutcomeCode.WORKER_LOST
    return OutcomeCode.TIMED_OUT if ev.timed_out else OutcomeCode.TASK_FAILED
