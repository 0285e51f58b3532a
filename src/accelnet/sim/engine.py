"""The simulation loop: arrivals, failures and job ends drive the live controller in
virtual time.

Event-driven: the clock jumps to the next thing that happens (a job arrives, a running job
finishes, a device fails or is repaired, a scheduling round begins) and the controller
handles it exactly as it would live: the same :class:`Controller`, the same
:class:`~accelnet.sched.Scheduler` (any ordering, placement and preemption policy), the
same device lifecycle and retry rules. Only the backend (:class:`SimBackend`), the clock
(a :class:`ManualClock`) and the store (a :class:`MemoryStore`) differ. Policies that want
rounds (time slicing, Gavel-style allocations) get a decision at every multiple of
``round_s``.

Traces stream: ``jobs`` may be any iterable in arrival order (a generator reading a file,
say), pulled one job ahead of the clock; a list or tuple is sorted first, as before. Each
job's outcome goes into a compact :class:`~accelnet.sim.columns.JobTable` the moment it
ends, and the fabric's samples into a :class:`~accelnet.sim.columns.SampleTable`; with
``forget_finished`` the store, the backend and the engine then let the ended job go, so
memory grows by a few hundred bytes per job of the trace (its table row, its id, two samples
or so), not by its spec and its event log.
"""

from __future__ import annotations

import heapq
import random
import resource
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path

from accelnet.devices import DeviceState
from accelnet.fabric import Fabric
from accelnet.runtime.clock import ManualClock
from accelnet.runtime.control.controller import Controller, JobRejectedError
from accelnet.runtime.control.store import JobRecord
from accelnet.sched import JobSpec, JobState, Scheduler, Tenant
from accelnet.sched.request import named_models
from accelnet.sched.rounds import RoundScheduler, StopCost
from accelnet.sim.backend import SimBackend
from accelnet.sim.bounds import MAX_JOBS, jct_lp, makespan_lp
from accelnet.sim.columns import JobTable, SampleTable
from accelnet.sim.commsim import CommSim
from accelnet.sim.policies import ModelRates, model_rates, most_on_a_host
from accelnet.sim.records import SimResult
from accelnet.sim.store import SimStore
from accelnet.sim.throughput import ThroughputModel
from accelnet.sim.workload import DeviceFailure, SimJob

_END_STATES = {
    JobState.SUCCEEDED: "succeeded",
    JobState.FAILED: "failed",
    JobState.CANCELLED: "cancelled",
}
INF = float("inf")
_Fault = tuple[float, int, str, str]  # (time, order, "fail" or "repair", device)


class Simulation:
    """One simulated run of ``jobs`` on ``fabric`` under ``scheduler``."""

    def __init__(
        self,
        fabric: Fabric,
        jobs: Iterable[SimJob],
        scheduler: Scheduler,
        rates: ThroughputModel,
        failures: Sequence[DeviceFailure] = (),
        round_s: float | None = None,
        restart_s: float = 30.0,
        checkpoint_s: float = 0.0,
        spread_penalty: bool = True,
        comm_model: bool = False,
        tenants: Mapping[str, Tenant] | None = None,
        power_caps: Mapping[str, float] | None = None,
        seed: int = 0,
        policy: str = "",
        trace: str = "",
        samples: bool = True,
        forget_finished: bool = False,
        total: int | None = None,
        jct_bound: bool = False,
    ) -> None:
        """``jobs``: a list or tuple (sorted here by arrival, then id) or any other
        iterable in arrival order (ties in its order), read lazily; a job id seen twice is
        a ValueError. ``forget_finished``: drop each ended job's record, events and spec
        once its outcome is recorded (the store keeps no event log then); results are the
        same. ``total``: how many jobs a stream holds, if known (for progress). A round
        scheduler is told the stop costs this run charges (``restart_s``,
        ``checkpoint_s``: :class:`~accelnet.sched.rounds.StopCost`); a scheduler rating
        jobs with the throughput model (:class:`~accelnet.sim.policies.ModelRates`) is told
        this fabric, so that with ``spread_penalty`` a gang no host can hold is rated spread,
        as it runs here (with ``comm_model``, a communicating gang keeps one host's rate:
        the communication model prices its spread)."""
        if round_s is not None and not round_s > 0:
            raise ValueError(f"round_s must be > 0, got {round_s}")
        self.fabric = fabric
        self.jobs: list[SimJob] | None = None  # the sorted jobs, when given as a sequence
        if isinstance(jobs, list | tuple):
            self.jobs = sorted(jobs, key=lambda j: (j.arrival, j.id))
            self.total: int | None = len(self.jobs)
            seen: set[str] = set()
            for j in self.jobs:
                if j.id in seen:
                    raise ValueError(f"job id {j.id!r} appears twice in the trace")
                seen.add(j.id)
            self._source: Iterator[SimJob] = iter(self.jobs)
        else:
            self.total = total
            self._source = iter(jobs)
        self._seen: set[str] = set()  # ids arrived so far (a stream's duplicates)
        self._next: SimJob | None = next(self._source, None)  # the next arrival
        self._first: list[SimJob] = []  # the first MAX_JOBS + 1 jobs (for the LP bound)
        self.scheduler = scheduler
        if isinstance(scheduler, RoundScheduler):  # its stops cost what this run charges
            scheduler.stop_cost = StopCost(restart_s=restart_s, checkpoint_s=checkpoint_s)
        if isinstance(scheduler.rates, ModelRates):  # its gangs rated as this run runs them
            plain = scheduler.rates.plain()
            scheduler.rates = plain.on(fabric, comm_model) if spread_penalty else plain
        self.rates = rates
        # a round-based policy gets a decision at every round boundary
        self.round_s = round_s if round_s is not None else getattr(scheduler, "round_s", None)
        self.seed = seed
        self.policy = policy or scheduler.ordering.name
        self.trace = trace
        self.keep_samples = samples
        self.jct_bound = jct_bound  # compute the LP bound on the average JCT at the end
        self.forget = forget_finished
        self.clock = ManualClock(0.0)
        self.store = SimStore(self._ended, forget=forget_finished)
        self._specs: dict[str, JobSpec] = {}
        self.backend = SimBackend(
            fabric, self.clock, rates, self._spec_of, restart_s=restart_s,
            power_caps=power_caps, checkpoint_s=checkpoint_s, spread_penalty=spread_penalty,
            comm=CommSim(fabric) if comm_model else None,
        )  # fmt: skip
        self.comm_model = comm_model
        self.spread_penalty = spread_penalty
        self.controller = Controller(
            fabric,
            self.store,
            self.backend,
            self.clock,
            Path("sim"),
            scheduler,
            dict(tenants or {}),
        )
        self._failures = self._place_failures(failures)
        self._skipped: set[int] = set()  # failures that found their device down already
        self.rejected: dict[str, str] = {}  # job -> why the fabric can never run it
        self.events = 0
        self.decisions = 0
        self.arrived = 0  # jobs taken from the trace so far
        self.outcomes = JobTable(sorted(self._capacity()))
        self.samples = SampleTable()
        self._row: dict[str, int] = {}  # live job -> its row of the outcomes
        self._best = _BestRates(fabric, rates, spread_penalty)

    def _spec_of(self, job_id: str) -> JobSpec:
        return self._specs[job_id]

    def _place_failures(self, failures: Sequence[DeviceFailure]) -> list[_Fault]:
        """(time, order, "fail"/"repair", device) events; random devices drawn (seeded).
        A failure's repair has the order after it (``2i`` and ``2i + 1``)."""
        rng = random.Random(self.seed)
        devices = sorted(self.fabric.devices)
        heap: list[_Fault] = []
        for i, f in enumerate(sorted(failures, key=lambda f: f.at)):
            dev = f.device if f.device is not None else rng.choice(devices)
            if dev not in self.fabric.devices:
                raise ValueError(f"failure {i}: unknown device {dev!r}")
            heapq.heappush(heap, (f.at, 2 * i, "fail", dev))
            if f.repair_s is not None:
                heapq.heappush(heap, (f.at + f.repair_s, 2 * i + 1, "repair", dev))
        return heap

    # ----- the loop -------------------------------------------------------------------
    def run(
        self, until: float | None = None, progress: Callable[[int, int], None] | None = None
    ) -> SimResult:
        """Simulate until every job has ended (or ``until`` seconds of virtual time);
        ``progress(finished, total)`` is called now and then."""
        t0 = time.perf_counter()
        controller, backend, clock = self.controller, self.backend, self.clock
        next_round = self.round_s if self.round_s is not None else INF
        last_report = 0.0
        while self._next is not None or not controller.idle():
            t_arrival = self._next.arrival if self._next is not None else INF
            t_end = backend.next_time()
            t_fault = self._failures[0][0] if self._failures else INF
            t = min(t_arrival, INF if t_end is None else t_end, t_fault)
            again = controller.again_at  # a wait that runs out changes a decision too
            if again is not None and again > clock.now():  # each job's are a fixed few
                t = min(t, again)
            if t == INF:
                break  # nothing more can happen (jobs that can never start stay queued)
            t = min(t, next_round)  # rounds only while something else may still happen
            if until is not None and t > until:
                break
            clock.set(t)
            self._arrive(t)
            self._settle()  # what ends at t ends before a fault at t can touch it
            while self._failures and self._failures[0][0] <= t:
                _, order, what, dev = heapq.heappop(self._failures)
                self._fault(order, what, dev)
            if t >= next_round:
                controller.wake()  # a round: decide again even if nothing happened
                while next_round <= t:
                    next_round += self.round_s or INF
            self._settle()
            if self.keep_samples:
                self._sample(t)
            if progress is not None and time.perf_counter() - last_report > 0.2:
                last_report = time.perf_counter()
                progress(self.arrived - controller.live(), self._total())
        if progress is not None:
            progress(self.arrived - controller.live(), self._total())
        if until is not None and clock.now() < until:
            clock.set(until)
            if self.keep_samples:
                self._sample(until)
        backend.charge_running(clock.now())  # attempts still running, up to the end
        self._unfinished()
        notes = [f"rejected {jid}: {why}" for jid, why in list(self.rejected.items())[:5]]
        if len(self.rejected) > 5:
            notes.append(f"... and {len(self.rejected) - 5} more jobs rejected")
        packs = self._packs()
        result = SimResult(
            policy=self.policy,
            fabric=self.fabric.name,
            trace=self.trace,
            seed=self.seed,
            jobs=self.outcomes,
            samples=self.samples,
            capacity=self._capacity(),
            end=clock.now(),
            wall_s=time.perf_counter() - t0,
            events=self.events,
            decisions=self.decisions,
            peak_rss_mb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            notes=notes,
            makespan_lp_s=None if packs else makespan_lp(self.fabric, self._first,
                                                         model_rates(self.rates)),
            jct_lp_s=self._jct_bound(packs),
            pair_gain=self.rates.max_pair_gain() if packs else 1.0,
        )  # fmt: skip
        if packs:
            result.notes.append(
                "bounds: a policy that packs jobs on shared devices does more than one job's "
                f"work per device (up to {result.pair_gain:.2f}x here): the makespan bound's "
                "area term allows for that, and the fluid-LP bounds (which do not) are left out"
            )
        return result

    def _packs(self) -> bool:
        """Whether the policy may pack two jobs on the same devices (space sharing)."""
        return bool(getattr(getattr(self.scheduler, "policy", None), "packs", False))

    def _jct_bound(self, packs: bool) -> float | None:
        """The LP bound on the average JCT, if asked for, the trace is not too long and the
        policy does not pack jobs (the bound does not hold for packed schedules)."""
        if not self.jct_bound or len(self._first) > MAX_JOBS or packs:
            return None
        return jct_lp(self.fabric, self._first, model_rates(self.rates))

    def _total(self) -> int:
        return self.arrived if self.total is None else max(self.total, self.arrived)

    def _arrive(self, t: float) -> None:
        """Submit the jobs that arrive by ``t`` (pulling the trace one job ahead)."""
        while self._next is not None and self._next.arrival <= t:
            job = self._next
            self._next = nxt = next(self._source, None)
            if nxt is not None and nxt.arrival < job.arrival:
                raise ValueError(
                    f"the trace is not in arrival order: job {nxt.id!r} arrives at "
                    f"{nxt.arrival:g} s, after job {job.id!r} at {job.arrival:g} s"
                )
            self._admit(job)

    def _admit(self, job: SimJob) -> None:
        """A job arrives: a row of the outcomes, then the controller has it (or the
        fabric can never run it)."""
        if job.id in self._seen:
            raise ValueError(f"job id {job.id!r} appears twice in the trace")
        self._seen.add(job.id)
        self.arrived += 1
        if len(self._first) <= MAX_JOBS:
            self._first.append(job)
        row = self._add_row(job)
        spec = self._specs[job.id] = job.spec()
        try:
            self._row[job.id] = row
            # not on a model where its gang was measured at 0 steps/s
            spec = self._specs[job.id] = self._best.feasible(job, spec)
            self.controller.submit(spec, job_id=job.id)
        except JobRejectedError as exc:  # the fabric can never run it: say so, go on
            self.rejected[job.id] = str(exc)
            self.outcomes.settle(row, "rejected")
            del self._row[job.id]
            if self.forget:
                del self._specs[job.id]

    def _add_row(self, job: SimJob) -> int:
        return self.outcomes.add(
            job.id, job.job_type, job.tenant, job.gpus, job.arrival, job.work, job.weight,
            job.priority, job.deadline, self._best.alone_s(job),
        )  # fmt: skip

    def _ended(self, rec: JobRecord, preemptions: int) -> None:
        """A job ended (the store says so): its outcome, final; then let it go."""
        row = self._row.pop(rec.id)
        self._record(row, rec, preemptions)
        if self.forget:
            del self._specs[rec.id]
            self.backend.use.pop(rec.id, None)

    def _record(self, row: int, rec: JobRecord, preemptions: int) -> None:
        state = _END_STATES.get(rec.state, "unfinished")
        self.outcomes.settle(
            row, state, end=rec.finished_at if state != "unfinished" else None,
            attempts=rec.attempts, failures=rec.failures, preemptions=preemptions,
        )  # fmt: skip
        u = self.backend.use.get(rec.id)
        if u is not None:
            self.outcomes.use(row, u.first_start, u.run_s, u.device_s, u.energy_j)

    def _unfinished(self) -> None:
        """At the end: the jobs still queued or running as they stand, and the trace's
        jobs that had not arrived (rows of their own, unfinished)."""
        for jid, row in self._row.items():
            self._record(row, self.store.get(jid), self.store.preemptions(jid))
        while self._next is not None:
            job, self._next = self._next, next(self._source, None)
            if len(self._first) <= MAX_JOBS:
                self._first.append(job)
            self._add_row(job)

    def _settle(self) -> None:
        """Apply what the backend reports at the current time, deciding again, until
        nothing more happens (launches report STARTED at once)."""
        while True:
            events = self.backend.poll(0.0)
            self.events += len(events)
            if not self.controller.apply(events):
                return
            self.decisions += 1

    def _fault(self, order: int, what: str, dev: str) -> None:
        """A failure (even ``order``) or its repair (the next odd one). A failure that
        finds its device down already changes nothing, and neither does its repair."""
        state = self.controller.device_states()[dev]
        if what == "fail":
            if state in (DeviceState.UNHEALTHY, DeviceState.OFFLINE):
                self._skipped.add(order)
                return
            self.backend.fail_device(dev)
            self.controller.fail_device(dev, "injected failure")
        elif order - 1 not in self._skipped and state is DeviceState.UNHEALTHY:
            self.controller.repair_device(dev, "repaired")

    def _sample(self, t: float) -> None:
        backend = self.backend
        self.samples.add(
            t, len(backend.busy), len(self.fabric.devices), backend.power_w,
            self.controller.session.queued(), backend.running, backend.busy_by_model,
        )  # fmt: skip

    def _capacity(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for d in self.fabric.devices.values():
            out[d.model.name] = out.get(d.model.name, 0) + 1
        return out


class _BestRates:
    """Each job's run time alone on the fabric's best devices for its gang (memoised)."""

    def __init__(self, fabric: Fabric, rates: ThroughputModel, spread_penalty: bool) -> None:
        self.rates = rates
        self.spread_penalty = spread_penalty
        total: dict[str, int] = {}
        for d in fabric.devices.values():
            total[d.model.name] = total.get(d.model.name, 0) + 1
        self.total = total
        self.most_on_a_host = most_on_a_host(fabric)
        self._memo: dict[tuple[str, int], float] = {}
        self._zero: dict[tuple[str, int], frozenset[str]] = {}

    def feasible(self, job: SimJob, spec: JobSpec) -> JobSpec:
        """``spec`` without the device models where the job's gang was measured at 0 steps/s
        (it cannot run there: it does not fit): an ``any`` request lists the others,
        fastest first (as ``any`` orders them); a request that lists models (a catalog
        family counts as its members here) lists the fabric's models it matches, less
        those, in its own order; JobRejectedError naming the request when none is left.
        Unchanged where no model it may use is zero."""
        acc = spec.resources.accelerators
        if acc.count == 0:
            return spec  # CPU-only
        if not acc.models:
            zero = self._zero_models(job.job_type, acc.count)
            if not zero:
                return spec
            names = [m for m, n in self.total.items() if n >= acc.count and m not in zero]
            names.sort(key=lambda m: -(self._rate(job.job_type, m, acc.count) or 0.0))
            sizes: list[int] = []
        else:
            per_name = acc.counts or (acc.count,) * len(acc.models)
            pairs = [(m, n) for name, n in zip(acc.models, per_name, strict=True)
                     for m in named_models(name, self.total) if m in self.total]  # fmt: skip
            zero = frozenset(m for m, n in pairs if m in self._zero_models(job.job_type, n))
            if not zero:
                return spec
            kept = list(dict.fromkeys((m, n) for m, n in pairs if m not in zero))
            names, sizes = [m for m, _ in kept], [n for _, n in kept] if acc.counts else []
        if not names:
            raise JobRejectedError(
                f"job {spec.name}: resources.accelerators = {acc.describe()}: {job.job_type} "
                f"runs at 0 steps/s (measured: it does not fit) on {', '.join(sorted(zero))}, "
                f"and no other model it may use here has room for its gang"
            )
        body = spec.model_dump(mode="json", exclude_unset=True)
        wanted = acc.model_dump(mode="json", exclude_unset=True)
        wanted.update(models=names, count=min(sizes) if sizes else acc.count,
                      prefer=acc.prefer.value)  # fmt: skip
        if sizes:
            wanted["counts"] = sizes
        body["resources"]["accelerators"] = wanted
        return JobSpec.model_validate(body)

    def _rate(
        self, job_type: str, model: str, count: int, consolidated: bool = True
    ) -> float | None:
        """The throughput model's rate (None: a model it cannot rate)."""
        try:
            return self.rates.rate(job_type, model, count, consolidated)
        except ValueError:
            return None

    def _zero_models(self, job_type: str, count: int) -> frozenset[str]:
        """The fabric's models (with ``count`` devices) where ``count`` devices run
        ``job_type`` at 0 steps/s (memoised)."""
        key = (job_type, count)
        found = self._zero.get(key)
        if found is None:
            found = self._zero[key] = frozenset(
                model
                for model, n in self.total.items()  # a model it cannot rate is left as it is
                if n >= count and (r := self._rate(job_type, model, count)) is not None and r <= 0
            )
        return found

    def alone_s(self, job: SimJob) -> float:
        key = (job.job_type, job.gpus)
        rate = self._memo.get(key)
        if rate is None:
            rate = 0.0
            for model, count in self.total.items():
                if count < job.gpus:
                    continue
                consolidated = not self.spread_penalty or self.most_on_a_host[model] >= job.gpus
                r = self._rate(job.job_type, model, job.gpus, consolidated)
                rate = max(rate, r or 0.0)  # a model the throughput model cannot rate: none
            self._memo[key] = rate
        return job.work / rate if rate > 0 else INF
