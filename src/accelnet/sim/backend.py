"""The simulated backend: tasks take virtual time, as long as their work needs.

The controller launches a job as one task per rank, exactly as on the local backend. Each
rank reports STARTED at once; when the whole gang is launched the job runs at the rate the
throughput model gives its job type on its devices (their model, their number, whether they
share one host), and every rank ends together when the work is done. A job stopped before
the end (preempted, cancelled, its device failed) keeps the work it did if it is
checkpointable and loses it otherwise. A checkpointable job that is stopped first saves its
state: its ranks end (and its devices free) ``checkpoint_s`` later. Every start after the
first costs ``restart_s`` of warm-up (loading the checkpoint, rebuilding state) before
progress resumes.

A job asking for a share of a device (``T4:0.5``) runs at that share of the device's rate
and draws that share of its dynamic power. Two whole-device jobs the scheduler *packed* on
the same devices (space sharing: each placed with a share below 1 of devices it asked for
whole) run at the rates the throughput model measured for that pair together
(:meth:`~accelnet.sim.throughput.ThroughputModel.colocated`), each at its rate alone once
the other has gone, and at their placement's share of it where the pair was not measured;
both jobs are repriced whenever one of them starts or stops.

With ``spread_penalty`` off, a gang spread over hosts runs at the one-host rate, as Gavel's
simulator assumes (it never reads the table's ``*_unconsolidated`` figures). A device that
fails (:meth:`SimBackend.fail_device`) stops its jobs at once: no checkpoint is saved on it;
progress up to that moment is kept by a checkpointable job (it is taken to checkpoint
continuously), lost by another.

The backend keeps each job's accounting (time and device-seconds held, energy, first start)
for the simulation's report, and the power the fabric draws. It never reads a clock of its
own: time is the shared :class:`~accelnet.runtime.clock.ManualClock` the engine moves.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from accelnet.fabric import Fabric
from accelnet.runtime.backend import Backend, SupportsProgress, TaskEvent, TaskEventKind, TaskSpec
from accelnet.runtime.clock import ManualClock
from accelnet.sched import JobSpec
from accelnet.sim.commsim import CommSim
from accelnet.sim.throughput import ThroughputModel


@dataclass(slots=True)
class JobUse:
    """What a job used, over all its attempts."""

    first_start: float | None = None
    run_s: float = 0.0
    device_s: dict[str, float] = field(default_factory=dict)
    energy_j: float = 0.0
    done_work: float = 0.0  # steps kept (checkpointed) so far


@dataclass(slots=True)
class _SimAttempt:
    job: str
    tasks: list[str]
    devices: tuple[str, ...]
    world: int
    started: float
    rate: float = 0.0
    warmup: float = 0.0
    finish: float | None = None  # set once the whole gang is launched
    model: str = ""
    power_w: float = 0.0  # drawn by the gang while it runs
    saving_from: float | None = None  # stopped at; saving its checkpoint until its ranks end
    began: bool = False  # the whole gang was launched and ran
    share: float = 1.0  # of each device
    failed: bool = False  # one of its devices failed: it saves nothing
    banked: float = 0.0  # steps done in this attempt before ``since``
    since: float = 0.0  # ``rate`` applies from here (the end of the warm-up, or a change)
    base_rate: float = 0.0  # the table's rate, before communication under contention
    packed: bool = False  # a whole-device job sharing its devices (space sharing)
    colo: float = 1.0  # the fraction of base_rate it keeps beside the job it shares with


class SimBackend(Backend, SupportsProgress):
    """Runs tasks in virtual time (see the module docstring)."""

    def __init__(
        self,
        fabric: Fabric,
        clock: ManualClock,
        rates: ThroughputModel,
        spec_of: Callable[[str], JobSpec],
        restart_s: float = 30.0,
        power_caps: Mapping[str, float] | None = None,
        checkpoint_s: float = 0.0,
        spread_penalty: bool = True,
        comm: CommSim | None = None,
    ) -> None:
        """``spec_of`` gives a job's spec by id (the engine reads its store);
        ``power_caps``: device id -> cap in W (else the device's own limit, if below its
        model's maximum); ``comm``: price communicating gangs with the communication model
        under contention (:mod:`accelnet.sim.commsim`) instead of the table's spread
        penalty."""
        if restart_s < 0:
            raise ValueError(f"restart_s must be >= 0, got {restart_s}")
        if checkpoint_s < 0:
            raise ValueError(f"checkpoint_s must be >= 0, got {checkpoint_s}")
        self.checkpoint_s = checkpoint_s
        self.spread_penalty = spread_penalty
        self.comm = comm
        self._stopping: list[tuple[float, int, str]] = []  # (when, seq, task): saving first
        self.fabric = fabric
        self.clock = clock
        self.rates = rates
        self.spec_of = spec_of
        self.restart_s = restart_s
        self.use: dict[str, JobUse] = {}
        self._runs: dict[str, _SimAttempt] = {}  # job -> its current attempt
        self._task_job: dict[str, str] = {}
        self._events: list[TaskEvent] = []
        self._heap: list[tuple[float, int, str]] = []  # (finish time, seq, job)
        self._seq = 0
        self._caps: dict[str, float] = {}
        for dev in fabric.devices.values():
            cap = (power_caps or {}).get(dev.id)
            if cap is None and 0 < dev.power_limit_w < dev.model.max_w:
                cap = dev.power_limit_w
            if cap is not None:
                self._caps[dev.id] = cap
        self._idle_w = {d.id: rates.power_w(d.model.name, False) for d in fabric.devices.values()}
        self.busy: dict[str, float] = {}  # device -> share of it in use by running jobs
        self._shared_on: dict[str, list[str]] = {}  # device -> jobs holding a share of it
        self.running = 0  # jobs running now
        self.busy_by_model: dict[str, int] = {}
        self.power_w = sum(self._idle_w.values())  # the fabric's draw now

    # ----- the Backend contract -------------------------------------------------------
    def launch(self, task: TaskSpec) -> None:
        """Start a rank; the gang runs once all its ranks are launched."""
        now = self.clock.now()
        run = self._runs.get(task.job_id)
        if run is None:
            run = self._runs[task.job_id] = _SimAttempt(
                task.job_id, [], task.devices, task.world, now, share=task.share
            )
        run.tasks.append(task.task_id)
        self._task_job[task.task_id] = task.job_id
        self._events.append(TaskEvent(task.task_id, TaskEventKind.STARTED, now))
        if len(run.tasks) == run.world:
            self._begin(run, now)

    def cancel(self, task_id: str) -> None:
        """Stop a rank; the gang's attempt ends when every rank is stopped (after its
        checkpoint is saved, if it makes one)."""
        job = self._task_job.get(task_id)
        if job is None:
            return  # ended already
        run = self._runs[job]
        now = self.clock.now()
        running = run.finish is not None or run.saving_from is not None
        if (
            self.checkpoint_s > 0
            and running
            and not run.failed
            and self.spec_of(job).checkpointable
        ):
            if run.saving_from is None:
                run.saving_from = now  # progress stops here; the devices stay busy saving
                run.finish = None
                if self.comm is not None and job in self.comm:
                    self.comm.remove(job)  # saving a checkpoint: no more gradient traffic
                    self._reprice(now)
            self._seq += 1
            heapq.heappush(self._stopping, (now + self.checkpoint_s, self._seq, task_id))
            return
        self._stop(task_id, now)

    def _stop(self, task_id: str, now: float) -> None:
        job = self._task_job.pop(task_id, None)
        if job is None:
            return
        self._events.append(TaskEvent(task_id, TaskEventKind.CANCELLED, now, error="cancelled"))
        run = self._runs[job]
        if not any(t in self._task_job for t in run.tasks):
            self._end(run, now, completed=False)

    def poll(self, timeout: float) -> list[TaskEvent]:
        """Events due by now (never waits: the engine moves the clock)."""
        self._collect(self.clock.now())
        events, self._events = self._events, []
        return events

    def close(self) -> None:
        """Nothing to release."""

    def progress(self, job_id: str) -> float | None:
        """Steps kept so far: the finished attempts' and the running one's (exact)."""
        use = self.use.get(job_id)
        if use is None:
            return 0.0
        run = self._runs.get(job_id)
        done = use.done_work
        if (
            run is not None
            and run.began
            and (run.finish is not None or run.saving_from is not None)
        ):
            total = self.spec_of(job_id).workload.total_steps or 0.0
            done = min(total, done + _attempt_steps(run, self.clock.now()))
        return done

    # ----- for the engine -------------------------------------------------------------
    def fail_device(self, dev: str) -> None:
        """``dev`` failed: its jobs can save nothing on it; those saving a checkpoint there
        stop now (their CANCELLED events come with the next poll)."""
        now = self.clock.now()
        for run in list(self._runs.values()):
            if dev in run.devices:
                run.failed = True
                if run.saving_from is not None:
                    for task in run.tasks:
                        self._stop(task, now)

    def charge_running(self, now: float) -> None:
        """Account the running attempts up to ``now`` (a simulation stopped early)."""
        for run in self._runs.values():
            if run.began:
                use = self.use[run.job]
                held = now - run.started
                use.run_s += held
                use.device_s[run.model] = use.device_s.get(run.model, 0.0) + held * run.world
                use.energy_j += held * run.power_w

    def next_time(self) -> float | None:
        """When the next running job finishes or a stopping one has saved, if any."""
        heap = self._heap
        while heap:
            t, _, job = heap[0]
            run = self._runs.get(job)
            if run is not None and run.finish == t:
                break
            heapq.heappop(heap)  # a stale entry: that attempt was stopped
        times = [x[0][0] for x in (heap, self._stopping) if x]
        return min(times) if times else None

    def pending(self) -> bool:
        """Whether events are waiting to be polled."""
        return bool(self._events)

    # ----- internals ------------------------------------------------------------------
    def _begin(self, run: _SimAttempt, now: float) -> None:
        spec = self.spec_of(run.job)
        devs = [self.fabric.devices[d] for d in run.devices]
        model = devs[0].model.name
        consolidated = not self.spread_penalty or len({d.host for d in devs}) == 1
        caps = [self._caps[d] for d in run.devices if d in self._caps]
        cap = min(caps) if caps else None
        run.model = model
        run.began = True
        asked = spec.resources.accelerators.share
        run.share = share = min(run.share, asked)  # of each device, as placed
        run.packed = asked >= 1 and share < 1
        nbytes = spec.workload.bytes_per_step or 0.0
        talks = self.comm is not None and nbytes > 0 and run.world > 1 and share >= 1
        if talks:
            consolidated = True  # the communication model prices the spread instead
        run.rate = asked * self.rates.rate(spec.workload.type or "generic", model, run.world,
                                           consolidated, cap)  # fmt: skip
        run.base_rate = run.rate
        if not run.rate > 0:  # the engine never places a gang where it cannot run
            raise ValueError(
                f"job {run.job}: {spec.workload.type or 'generic'} runs at 0 steps/s on "
                f"{run.world} x {model}: it cannot run there"
            )
        use = self.use.setdefault(run.job, JobUse())
        if use.first_start is None:
            use.first_start = now
        else:
            run.warmup = self.restart_s
        run.since = now + run.warmup
        left = max(0.0, (spec.workload.total_steps or 0.0) - use.done_work)
        run.finish = now + run.warmup + left / run.rate
        busy_w = self.rates.power_w(model, True, cap)
        run.power_w = busy_w * run.world * share
        for d in run.devices:
            before = self.busy.get(d, 0.0)
            self.busy[d] = before + share
            if not before:
                self.busy_by_model[model] = self.busy_by_model.get(model, 0) + 1
            self.power_w += (busy_w - self._idle_w[d]) * share
        self.running += 1
        self._seq += 1
        heapq.heappush(self._heap, (run.finish, self._seq, run.job))
        if talks:
            assert self.comm is not None
            self.comm.add(run.job, run.devices, nbytes)
            self._reprice(now)
        if share < 1:
            for d in run.devices:
                self._shared_on.setdefault(d, []).append(run.job)
            self._recolocate(run.devices, now)

    def _reprice(self, now: float) -> None:
        """Communicating gangs' rates after one started or stopped (links shared anew)."""
        assert self.comm is not None
        for job in self.comm.changed():
            run = self._runs.get(job)
            if run is not None:
                self._retime(run, now)

    def _recolocate(self, devices: tuple[str, ...], now: float) -> None:
        """Packed jobs' rates on ``devices`` after a job holding a share of one of them
        started or stopped: a packed job alone keeps its whole rate; one sharing all of its
        devices with one other packed job the pair's measured fraction; otherwise (not
        measured, several others, or a job holding a fractional share beside it) its
        placement's share."""
        jobs = {j for d in devices for j in self._shared_on.get(d, ())}
        for job in sorted(jobs):
            run = self._runs[job]
            if not run.packed:
                continue  # a fractional share runs at its share of the rate, always
            mates = {m for d in run.devices for m in self._shared_on.get(d, ()) if m != job}
            run.colo = 1.0
            if len(mates) == 1:
                mate = self._runs[next(iter(mates))]
                factors = None
                if mate.packed and set(mate.devices) == set(run.devices):
                    factors = self.rates.colocated(
                        self.spec_of(job).workload.type or "generic",
                        self.spec_of(mate.job).workload.type or "generic",
                        run.model, run.world,
                    )  # fmt: skip
                run.colo = factors[0] if factors is not None else run.share
            elif mates:
                run.colo = run.share
            self._retime(run, now)

    def _retime(self, run: _SimAttempt, now: float) -> None:
        """Set a running attempt's rate from its base, co-location and communication: the
        work done so far is banked and its finish moves."""
        if run.finish is None or run.saving_from is not None:
            return
        rate = run.base_rate * run.colo
        if self.comm is not None and run.job in self.comm:
            rate = 1.0 / (1.0 / rate + self.comm.extra_s(run.job))
        if abs(rate - run.rate) <= 1e-12 * rate:
            return
        if now > run.since:
            run.banked += (now - run.since) * run.rate
            run.since = now
        run.rate = rate
        total = self.spec_of(run.job).workload.total_steps or 0.0
        left = max(0.0, total - self.use[run.job].done_work - run.banked)
        run.finish = run.since + left / rate
        self._seq += 1
        heapq.heappush(self._heap, (run.finish, self._seq, run.job))

    def _collect(self, now: float) -> None:
        stopping = self._stopping
        while stopping and stopping[0][0] <= now:
            t, _, task = heapq.heappop(stopping)
            self._stop(task, t)
        heap = self._heap
        while heap and heap[0][0] <= now:
            t, _, job = heapq.heappop(heap)
            run = self._runs.get(job)
            if run is None or run.finish != t:
                continue
            self._end(run, t, completed=True)
            for task in run.tasks:
                self._task_job.pop(task, None)
                self._events.append(TaskEvent(task, TaskEventKind.SUCCEEDED, t, exit_code=0))

    def _end(self, run: _SimAttempt, now: float, completed: bool) -> None:
        """The attempt is over: account what it used and what it kept."""
        del self._runs[run.job]
        if not run.began:
            return  # stopped before the whole gang was launched: it never ran
        self.running -= 1
        talked = self.comm is not None and run.job in self.comm
        if talked:
            assert self.comm is not None
            self.comm.remove(run.job)
        use = self.use[run.job]
        held = now - run.started
        use.run_s += held
        use.device_s[run.model] = use.device_s.get(run.model, 0.0) + held * run.world
        use.energy_j += held * run.power_w
        spec = self.spec_of(run.job)
        total = spec.workload.total_steps or 0.0
        if completed:
            use.done_work = total
        elif spec.checkpointable:
            use.done_work = min(total, use.done_work + _attempt_steps(run, now))
        each = run.power_w / run.world  # busy draw of this job on one device
        for d in run.devices:
            left = self.busy.get(d, 0.0) - run.share
            if left > 1e-9:
                self.busy[d] = left
            else:
                self.busy.pop(d, None)
                self.busy_by_model[run.model] -= 1
            self.power_w -= each - self._idle_w[d] * run.share
        if talked:
            self._reprice(now)
        if run.share < 1:
            for d in run.devices:
                on = self._shared_on[d]
                on.remove(run.job)
                if not on:
                    del self._shared_on[d]
            self._recolocate(run.devices, now)


def _attempt_steps(run: _SimAttempt, now: float) -> float:
    """Steps the running (or saving) attempt has done by ``now``: none while warming up or
    saving its checkpoint."""
    upto = run.saving_from if run.saving_from is not None else now
    return run.banked + max(0.0, upto - run.since) * run.rate
