"""Crash points: the controller SIGKILLed at *every* durable write of a workload, once just
before the write commits and once just after, then restarted on the same SQLite file.

    python bench/crash_points_bench.py                        # every write, both phases
    python bench/crash_points_bench.py --phases after --limit 40 --seed 2

A reference run of a small, varied, seeded workload counts its durable writes (T): the
outermost store transactions, each one state change (a submission, a job transition, a
device transition, a task event). Then, for each N in 1..T and each phase, a fresh run of
the same workload on its own database uses :class:`CrashStore`, which SIGKILLs its own
process at write N: ``before`` (the statements ran, COMMIT did not: the write must vanish)
or ``after`` (COMMIT returned: the write is durable and nothing after it happened). It
notes which write that was (its event kinds) in a side file first. A normal controller then
starts on the file, resubmits the planned jobs the store lacks (a submission acknowledged
before the kill must be there; one not acknowledged may be resubmitted), re-issues a cancel
that was not acknowledged, runs the queue dry and audits the store: every acknowledged job
present exactly once, every job finished as planned, no invariant violated
(:func:`accelnet.runtime.control.invariants.violations`), no device left ALLOCATED.

The workload (fabric ``pcie-4xL4``, 4 emulated devices, local backend, priority ordering
with priority preemption): single-device jobs, a 2-device gang, a job that fails once then
succeeds on a retry, one that always fails (FAILED after its retry), one held until another
job's output exists (``inputs``), one cancelled while it runs, one whose device is failed
under it (``Controller.fail_device``; requeued, the device repaired), and a second stage of
four jobs filling the fabric that a higher-priority job then preempts one of.

Each run is a child forked from this process (imports paid once); up to ``--parallel``
points run at once. Timing differences between runs may shift which write is number N;
the report counts the distinct kinds of write covered. Prints a table and writes JSON to
``bench/results/crash_points_bench.json``. Also imported by
``tests/runtime/control/test_crash_points.py`` at a reduced size (``--workload small``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import shutil
import signal
import statistics
import sys
import time
import traceback
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import psutil

from accelnet.devices import DeviceState
from accelnet.devices.history import HistoryBucket
from accelnet.fabric import load_fabric
from accelnet.runtime.clock import SystemClock
from accelnet.runtime.control.controller import Controller
from accelnet.runtime.control.invariants import violations
from accelnet.runtime.control.sqlite_store import SqliteStore
from accelnet.runtime.control.store import JobRecord
from accelnet.runtime.local.backend import LocalBackend
from accelnet.sched import JobSpec, JobState, Scheduler
from benchutil import outlive

FABRIC = "pcie-4xL4"
PHASES = ("before", "after")
CANCEL, FAULT, PREEMPTOR = "k0", "f0", "p0"  # the jobs the script acts on
RESULTS = Path(__file__).parent / "results"


# ----- the store that dies ------------------------------------------------------------------
class CrashStore(SqliteStore):
    """A :class:`SqliteStore` that counts its outermost write transactions and, at number
    ``kill_at`` (0: never), SIGKILLs its own process ``before`` COMMIT or ``after`` it,
    having appended what that write was (one JSON line) to ``notes``. With ``kind``, it
    counts only the writes of that kind (:func:`label`): ``kill_at`` 2 and kind
    ``job:running`` die at the second start of a job. With ``log_all`` every write is
    noted (the reference run)."""

    def __init__(
        self,
        path: str | Path,
        kill_at: int,
        phase: str,
        notes: Path,
        kind: str | None = None,
        log_all: bool = False,
    ) -> None:
        if phase not in PHASES:
            raise ValueError(f"phase {phase!r}: one of {PHASES}")
        self.kill_at, self.phase, self.kind, self.log_all = kill_at, phase, kind, log_all
        self.writes = 0
        self.hits = 0  # writes of ``kind``
        self._depth = 0
        self._what: list[tuple[str | None, str, str]] = []  # (job, kind, detail) of this write
        self._notes = os.open(notes, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        super().__init__(path)

    def _tx(self) -> Any:  # the base class names its private _Transaction
        return _CrashTransaction(self, super()._tx())

    def _insert_event(self, job_id: str | None, at: float, kind: str, detail: str) -> None:
        self._what.append((job_id, kind, detail))
        super()._insert_event(job_id, at, kind, detail)

    def _write(self, record: JobRecord, event: tuple[float, str, str] | None) -> None:
        if event is None:
            self._what.append((record.id, "job:update", "record updated, no event"))
        super()._write(record, event)

    def add_history(self, buckets: Iterable[HistoryBucket]) -> None:
        """See :class:`SqliteStore` (noted as a ``history`` write)."""
        self._what.append((None, "history", "telemetry buckets"))
        super().add_history(buckets)

    def current(self) -> str:
        """The kind of the write under way (its events' labels)."""
        return " + ".join(dict.fromkeys(label(k, d) for _, k, d in self._what)) or "?"

    def note(self, killed: bool) -> dict[str, Any]:
        """What the current write is (and, when ``killed``, the process's children)."""
        row: dict[str, Any] = {
            "n": self.writes,
            "phase": self.phase,
            "label": self.current(),
            "events": [[j, k, d[:160]] for j, k, d in self._what],
        }
        if killed:
            row["at"] = time.time()
            kids = psutil.Process().children(recursive=True)
            row["workers"] = [[p.pid, p.create_time()] for p in kids]  # (pids get reused)
        os.write(self._notes, (json.dumps(row) + "\n").encode())
        return row

    def die(self) -> None:
        """Note this write and SIGKILL this process (no cleanup of any kind)."""
        self.note(killed=True)
        os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(60)  # the signal is delivered before this returns


class _CrashTransaction:
    def __init__(self, store: CrashStore, inner: Any) -> None:
        self._store = store
        self._inner = inner

    def __enter__(self) -> None:
        self._inner.__enter__()  # takes the store's lock: the counting below is under it
        s = self._store
        s._depth += 1
        if s._depth == 1:
            s.writes += 1

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        s = self._store
        outer = s._depth == 1
        s._depth -= 1
        chosen = False
        if outer and exc_type is None:
            if s.kind is None:
                chosen = s.writes == s.kill_at
            elif s.current() == s.kind:
                s.hits += 1
                chosen = s.hits == s.kill_at
        if chosen and s.phase == "before":
            s.die()  # statements executed, COMMIT never sent
        self._inner.__exit__(exc_type, exc, tb)
        if chosen:
            s.die()  # COMMIT returned
        if outer:
            if exc_type is None and s.log_all:
                s.note(killed=False)
            s._what = []  # (what a method notes before its transaction begins is kept)


_QUALIFIERS = (
    ("requeued (retry", "requeue: retry"),
    ("requeued after preemption", "requeue: preempted"),
    ("requeued: lost", "requeue: lost at restart"),
    ("submitted", "submitted"),
    ("ranks ended while starting", "ranks ended while starting"),
)


def label(kind: str, detail: str) -> str:
    """A write's kind as the report counts it: the event kind, with the cause for the kinds
    that mean more than one thing (``job:admitted (requeue: retry)``)."""
    if kind in ("job:admitted", "job:pending", "job:running"):
        for prefix, name in _QUALIFIERS:
            if detail.startswith(prefix):
                return f"{kind} ({name})"
    return kind


# ----- the workload ------------------------------------------------------------------------
@dataclass(frozen=True)
class Planned:
    """One job of the workload: its spec, the stage that submits it, how it must end."""

    spec: dict[str, Any]
    stage: int
    outcome: str  # a JobState value

    @property
    def name(self) -> str:
        return str(self.spec["name"])


MARKS = "@MARKS@"  # in a planned command: the point's own folder of marks


def workload(size: str, seed: int, retry_backoff_s: float | None = None) -> list[Planned]:
    """The scripted workload, ``full`` or ``small`` (no second stage, no input job: a
    gang, a fault, a retry, a plain failure and a cancel), seeded: task lengths and the
    order of the first stage's submissions. ``retry_backoff_s``: the first retry wait of
    the jobs that fail on their own (``RetrySpec.backoff_s``; None: its default)."""
    rng = random.Random(seed)
    retry = {} if retry_backoff_s is None else {"retry": {"backoff_s": retry_backoff_s}}

    def nap() -> str:
        return rng.choice(["0.05", "0.1", "0.15"])

    once = f"if [ -e {MARKS}/r0 ]; then sleep {nap()}; else touch {MARKS}/r0; exit 3; fi"
    first = [
        Planned(
            {"name": "a0", "run": f'mkdir -p "$ACCELNET_OUTPUT"; sleep {nap()}'}, 1, "succeeded"
        ),
        Planned(
            {"name": "g0", "run": f"sleep {nap()}", "resources": {"accelerators": "any:2"}},
            1,
            "succeeded",
        ),
        Planned({"name": "r0", "run": once, "max_retries": 2, **retry}, 1, "succeeded"),
        Planned({"name": "x0", "run": "exit 4", "max_retries": 1, **retry}, 1, "failed"),
        Planned({"name": FAULT, "run": "sleep 0.5", "max_retries": 2}, 1, "succeeded"),
    ]
    first.append(Planned({"name": CANCEL, "run": "sleep 3", "priority": 5}, 1, "cancelled"))
    if size == "small":
        rng.shuffle(first)
        return first
    first.append(Planned({"name": "a1", "run": f"sleep {nap()}"}, 1, "succeeded"))
    rng.shuffle(first)
    first.append(  # after its input job, whatever the order
        Planned(
            {"name": "d0", "run": 'test -d "$ACCELNET_INPUT_SRC"', "inputs": {"src": "a0"}},
            1,
            "succeeded",
        ),
    )
    second = [
        Planned({"name": f"l{i}", "run": "sleep 0.6", "checkpointable": i == 0}, 2, "succeeded")
        for i in range(4)
    ]
    third = [Planned({"name": PREEMPTOR, "run": f"sleep {nap()}", "priority": 10}, 3, "succeeded")]
    return first + second + third


def _scheduler() -> Scheduler:
    return Scheduler("priority", "best-fit", "priority")


def _controller(store: SqliteStore, work: Path) -> tuple[Controller, LocalBackend]:
    fabric = load_fabric(FABRIC)
    clock = SystemClock()
    backend = LocalBackend(fabric.devices, str(work), clock, emulated=True, kill_grace_s=0.5)
    return Controller(fabric, store, backend, clock, str(work), scheduler=_scheduler()), backend


class _Acks:
    """The acknowledgements a crashed life gave: ``submit NAME``, ``cancel NAME``."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def write(self, what: str, name: str) -> None:
        with self.path.open("a") as f:
            f.write(f"{what} {name}\n")

    def read(self, what: str) -> set[str]:
        if not self.path.exists():
            return set()
        pairs = (line.split() for line in self.path.read_text().splitlines())
        return {p[1] for p in pairs if len(p) == 2 and p[0] == what}


def drive(ctl: Controller, plan: list[Planned], acks: _Acks, deadline: float) -> None:
    """Run the workload's script to the end: submit stage 1; cancel ``k0`` once it runs;
    fail ``f0``'s device once it runs and repair the device once ``f0`` has left it; when
    stage 1 is done submit stage 2 and, once all of it runs, stage 3 (the preemptor)."""
    store = ctl.store

    def submit(stage: int) -> None:
        for p in plan:
            if p.stage == stage:
                ctl.submit(JobSpec.model_validate(p.spec), job_id=p.name)
                acks.write("submit", p.name)

    def state(name: str) -> JobState:
        return store.get(name).state

    names = {p.name for p in plan}
    stage, cancelled, faulted = 1, CANCEL not in names, FAULT not in names
    repaired = faulted
    broken: str | None = None
    submit(1)
    while time.monotonic() < deadline:
        ctl.step(0.02)
        if not cancelled and state(CANCEL) is JobState.RUNNING:
            ctl.cancel(CANCEL)
            acks.write("cancel", CANCEL)
            cancelled = True
        if not faulted:
            rec = store.get(FAULT)
            if rec.state.is_finished():
                faulted = repaired = True  # it never got to run long enough: no fault
            elif rec.state is JobState.RUNNING and rec.placement is not None:
                broken = rec.placement.devices[0]
                ctl.fail_device(broken, "crash points: injected fault")
                faulted = True
        if broken is not None and not repaired and not ctl.jobs_on(broken):
            ctl.repair_device(broken, "crash points: repaired")
            repaired = True
        if not ctl.idle():
            if stage == 2 and all(
                state(p.name) is not JobState.ADMITTED for p in plan if p.stage == 2
            ):  # all of stage 2 started: the fabric is full
                stage = 3
                submit(3)
            continue
        if stage == 1 and repaired and any(p.stage == 2 for p in plan):
            stage = 2
            submit(2)
        elif repaired:
            return
    raise TimeoutError("the workload did not finish in time")


# ----- the two lives of a point ------------------------------------------------------------
@dataclass
class PointResult:
    """One kill point: what was killed and what the restarted controller found."""

    n: int  # the write number, or with ``kind`` the occurrence of that kind of write
    phase: str
    kind: str | None = None
    killed: bool = False  # False: the run had fewer writes than n
    label: str = ""
    events: list[list[Any]] = field(default_factory=list)
    recovery_s: float | None = None  # kill -> restarted controller ready
    init_s: float | None = None  # the restarted controller's construction (its _recover)
    resubmitted: list[str] = field(default_factory=list)
    lost: list[str] = field(default_factory=list)  # acknowledged, not in the store after kill
    lost_cancels: list[str] = field(default_factory=list)
    duplicated: list[str] = field(default_factory=list)
    wrong: list[str] = field(default_factory=list)  # "name: state, planned outcome"
    violations: list[str] = field(default_factory=list)
    allocated: list[str] = field(default_factory=list)  # devices left ALLOCATED
    orphans: int = 0  # processes of the killed life still alive after the recovery
    error: str | None = None  # a life that crashed on its own, hung, or a harness failure
    wall_s: float = 0.0

    def ok(self) -> bool:
        """Nothing lost, duplicated or wrong; every invariant holds; no error."""
        return not (
            self.lost or self.lost_cancels or self.duplicated or self.wrong or self.violations
            or self.allocated or self.orphans or self.error
        )  # fmt: skip


def _plan(work: Path) -> list[Planned]:
    """The plan (``../plan.json``), its marks in ``work``."""
    text = (work.parent / "plan.json").read_text().replace(MARKS, str(work / "marks"))
    return [Planned(**p) for p in json.loads(text)["jobs"]]


def crash_life(
    work: Path, kill_at: int, phase: str, kind: str | None = None, log_all: bool = False
) -> None:
    """The first life (in a child): run the workload on a :class:`CrashStore` that dies at
    write ``kill_at`` (of ``kind``). Returns (exits 0) if the workload ends first."""
    plan = _plan(work)
    (work / "marks").mkdir(parents=True, exist_ok=True)
    store = CrashStore(work / "state.db", kill_at, phase, work / "kill.jsonl", kind, log_all)
    ctl, backend = _controller(store, work)
    try:
        drive(ctl, plan, _Acks(work / "acks.txt"), time.monotonic() + 60)
    finally:
        backend.close()
    (work / "writes.txt").write_text(str(store.writes))


def recover_life(work: Path, deadline_s: float = 60.0) -> None:
    """The second life (in a child): a normal controller on the file; resubmit what the
    store lacks, cancel again what was not acknowledged, run dry, audit; ``result.json``."""
    plan = _plan(work)
    acks = _Acks(work / "acks.txt")
    kill_note = work / "kill.jsonl"
    notes = (
        [json.loads(x) for x in kill_note.read_text().splitlines()] if kill_note.exists() else []
    )
    killed = [x for x in notes if "at" in x]
    out: dict[str, Any] = {"killed": bool(killed)}
    if killed:
        out.update(label=killed[-1]["label"], events=killed[-1]["events"])
    t0 = time.time()
    store = SqliteStore(work / "state.db")
    ctl, backend = _controller(store, work)
    ready = time.time()
    out["init_s"] = ready - t0
    if killed:
        out["recovery_s"] = ready - killed[-1]["at"]
    try:
        for dev, st in ctl.device_states().items():  # a fault of the killed life: repaired
            if st is DeviceState.UNHEALTHY:
                ctl.repair_device(dev, "crash points: repaired after restart")
        known = {r.spec.name for r in store.jobs()}
        out["lost"] = sorted(acks.read("submit") - known)
        out["resubmitted"] = []
        for p in plan:
            if p.name not in known:
                ctl.submit(JobSpec.model_validate(p.spec), job_id=p.name)
                out["resubmitted"].append(p.name)
        if CANCEL in {p.name for p in plan} and not store.get(CANCEL).state.is_finished():
            if CANCEL in acks.read("cancel"):
                out["lost_cancels"] = [CANCEL]  # acknowledged, yet live again: not re-issued
            else:
                ctl.cancel(CANCEL)  # the user asks again
        deadline = time.monotonic() + deadline_s
        while not ctl.idle():
            if time.monotonic() > deadline:
                raise TimeoutError("the restarted controller did not run dry")
            ctl.step(0.02)
    finally:
        backend.close()
        store.close()
    out.update(audit(work / "state.db", plan))
    (work / "result.json").write_text(json.dumps(out))


def audit(db: Path, plan: list[Planned]) -> dict[str, Any]:
    """Read the store: duplicates, outcomes against the plan, violations, held devices."""
    store = SqliteStore(db)
    try:
        records = store.jobs()
        names = Counter(r.spec.name for r in records)
        by_name = {r.spec.name: r for r in records}
        wrong = []
        for p in plan:
            rec = by_name.get(p.name)
            got = "missing" if rec is None else rec.state.value
            if got != p.outcome:
                wrong.append(f"{p.name}: {got}, planned {p.outcome}")
        return {
            "duplicated": sorted(n for n, c in names.items() if c > 1),
            "wrong": wrong,
            "violations": [str(v) for v in violations(store)],
            "allocated": sorted(
                d for d, s in store.devices().items() if s is DeviceState.ALLOCATED
            ),
        }
    finally:
        store.close()


def _fork(fn: Callable[[], None], log: Path) -> int:
    """Run ``fn`` in a forked child (stdout/stderr to ``log``); its pid. Exit 0 if it
    returned, 1 if it raised (the traceback in the log)."""
    pid = os.fork()
    if pid:
        return pid
    code = 1
    try:
        fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        sys.stdout = open(1, "w", closefd=False)  # noqa: SIM115 - this process's own
        sys.stderr = open(2, "w", closefd=False)  # noqa: SIM115
        os.setpgid(0, 0)  # its own group: the driver's terminal signals are not its business
        fn()
        code = 0
    except BaseException:
        with contextlib.suppress(BaseException):
            traceback.print_exc()
            sys.stderr.flush()
    finally:
        os._exit(code)


# ----- the driver ---------------------------------------------------------------------------
@dataclass
class CrashPointsConfig:
    """Which kill points: the workload (``full`` / ``small``), the phases, at most ``limit``
    writes spread evenly over 1..T (0: every write; -1: none), the first ``by_kind``
    writes of each kind, points run at once, the seed."""

    workload: str = "full"
    phases: tuple[str, ...] = PHASES
    limit: int = 0
    by_kind: int = 0  # also: the first ``by_kind`` writes of every kind the reference made
    parallel: int = 1
    seed: int = 1
    point_timeout_s: float = 120.0
    keep: bool = False  # keep every point's folder (default: only failed ones)
    retry_backoff_s: float | None = None  # the retried jobs' first wait (None: the default)


@dataclass
class CrashPointsReport:
    """What the enumeration ran and found."""

    config: dict[str, Any]
    reference_writes: int = 0
    reference_labels: dict[str, int] = field(default_factory=dict)
    reference_ok: bool = False
    points: list[PointResult] = field(default_factory=list)
    wall_s: float = 0.0

    def covered(self, phase: str | None = None) -> dict[str, int]:
        """Kill points per kind of write (of one phase, or all)."""
        hits = Counter(
            p.label for p in self.points if p.killed and (phase is None or p.phase == phase)
        )
        return dict(sorted(hits.items()))

    def failed(self) -> list[PointResult]:
        """The points that found something wrong."""
        return [p for p in self.points if not p.ok()]

    def ok(self) -> bool:
        """The reference run and every point clean."""
        return self.reference_ok and not self.failed()


class _Point:
    """A kill point in flight: its folder, the live child, and which life it is in."""

    def __init__(self, target: Target, root: Path, timeout_s: float) -> None:
        n, kind, phase = target
        self.result = PointResult(n, phase, kind)
        slug = "".join(c if c.isalnum() else "_" for c in kind or "write")
        self.dir = root / f"{slug}-{n:04d}-{phase}"
        self.dir.mkdir(parents=True)
        self.timeout_s = timeout_s
        self.t0 = time.monotonic()
        self.life = "crash"
        self.pid = _fork(lambda: crash_life(self.dir, n, phase, kind), self.dir / "crash.log")
        self.since = self.t0

    def poll(self) -> bool:
        """Advance; True when the point is done."""
        pid, status = os.waitpid(self.pid, os.WNOHANG)
        if pid == 0:
            if time.monotonic() - self.since > self.timeout_s:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.pid, signal.SIGKILL)
                os.waitpid(self.pid, 0)
                return self._finish(f"{self.life} life hung (over {self.timeout_s} s)")
            return False
        if self.life == "crash":
            killed = os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
            if not killed and os.waitstatus_to_exitcode(status) != 0:
                return self._finish(f"crash life failed: {_tail(self.dir / 'crash.log')}")
            self.life = "recover"
            self.since = time.monotonic()
            self.pid = _fork(lambda: recover_life(self.dir), self.dir / "recover.log")
            return False
        if os.waitstatus_to_exitcode(status) != 0:
            return self._finish(f"recovery failed: {_tail(self.dir / 'recover.log')}")
        return self._finish(None)

    def _finish(self, error: str | None) -> bool:
        r = self.result
        r.error = error
        path = self.dir / "result.json"
        if path.exists():
            data = json.loads(path.read_text())
            for k, v in data.items():
                setattr(r, k, v)
        r.orphans = _reap_orphans(self.dir / "kill.jsonl")
        r.wall_s = time.monotonic() - self.t0
        return True


def _tail(log: Path, lines: int = 6) -> str:
    text = log.read_text(errors="replace") if log.exists() else ""
    return " | ".join(text.strip().splitlines()[-lines:])


def _reap_orphans(kill_note: Path) -> int:
    """Processes of the killed life (its workers, their tasks) still alive: killed, counted.
    They watch their parent and go by themselves within a fraction of a second."""
    if not kill_note.exists():
        return 0
    pids = [pid for row in map(json.loads, kill_note.read_text().splitlines())
            for pid in row.get("workers", [])]  # fmt: skip
    procs = []
    for pid, born in pids:
        with contextlib.suppress(psutil.Error):
            proc = psutil.Process(pid)
            if proc.create_time() == born and proc.status() != psutil.STATUS_ZOMBIE:
                procs.append(proc)  # the very process (not a later one with its pid)
    alive = outlive(procs, 2.0)
    for p in alive:
        with contextlib.suppress(psutil.Error):
            p.kill()
    return len(alive)


Target = tuple[int, str | None, str]  # (write number or occurrence, kind or None, phase)


def _run_points(
    points: list[Target],
    root: Path,
    cfg: CrashPointsConfig,
    advance: Callable[[PointResult], None],
) -> list[PointResult]:
    todo = list(points)
    running: list[_Point] = []
    done: list[PointResult] = []
    try:
        while todo or running:
            while todo and len(running) < max(1, cfg.parallel):
                running.append(_Point(todo.pop(0), root, cfg.point_timeout_s))
            for p in [p for p in running if p.poll()]:
                running.remove(p)
                done.append(p.result)
                if p.result.ok() and not cfg.keep:
                    shutil.rmtree(p.dir, ignore_errors=True)
                advance(p.result)
            time.sleep(0.005)
    finally:
        for p in running:  # interrupted: leave nothing behind
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGKILL)
            with contextlib.suppress(ChildProcessError):
                os.waitpid(p.pid, 0)
    return sorted(done, key=lambda r: (r.kind or "", r.n, PHASES.index(r.phase)))


def choose(total: int, limit: int) -> list[int]:
    """Write numbers 1..total, or ``limit`` of them spread evenly (first and last kept)."""
    if limit < 0:
        return []
    if limit == 0 or limit >= total:
        return list(range(1, total + 1))
    if limit == 1:
        return [1]
    return sorted({1 + round(i * (total - 1) / (limit - 1)) for i in range(limit)})


def run_crash_points(
    cfg: CrashPointsConfig,
    work: Path,
    on_plan: Callable[[int], None] | None = None,
    advance: Callable[[PointResult], None] | None = None,
) -> CrashPointsReport:
    """The reference run, then every chosen kill point, in ``work`` (created). ``on_plan``
    is told how many points there will be, ``advance`` each point's result as it ends."""
    t0 = time.monotonic()
    work.mkdir(parents=True, exist_ok=True)
    plan = workload(cfg.workload, cfg.seed, cfg.retry_backoff_s)
    report = CrashPointsReport(config=asdict(cfg))
    root = work / "points"
    root.mkdir(exist_ok=True)
    (root / "plan.json").write_text(json.dumps({"jobs": [asdict(p) for p in plan]}))
    ref = _reference(root, cfg)
    report.reference_writes = ref.n
    report.reference_labels = ref.labels
    report.reference_ok = ref.ok
    points: list[Target] = [(n, None, ph) for n in choose(ref.n, cfg.limit) for ph in cfg.phases]
    for kind in sorted(ref.labels) if cfg.by_kind else ():  # the first few of every kind
        picks = range(1, min(cfg.by_kind, ref.labels[kind]) + 1)
        points += [(k, kind, ph) for k in picks for ph in cfg.phases]
    if on_plan is not None:
        on_plan(len(points))
    report.points = _run_points(points, root, cfg, advance or (lambda _r: None))
    report.wall_s = time.monotonic() - t0
    return report


@dataclass
class _Reference:
    n: int
    labels: dict[str, int]
    ok: bool


def _reference(root: Path, cfg: CrashPointsConfig) -> _Reference:
    """The workload once with no kill, noting every write: T and what the writes are."""
    ref = root / "0000-reference"
    ref.mkdir(exist_ok=True)
    pid = _fork(lambda: crash_life(ref, 0, "after", log_all=True), ref / "crash.log")
    _, status = os.waitpid(pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(f"the reference run failed: {_tail(ref / 'crash.log')}")
    pid = _fork(lambda: recover_life(ref), ref / "recover.log")
    _, status = os.waitpid(pid, 0)
    result = json.loads((ref / "result.json").read_text()) if status == 0 else {}
    rows = [json.loads(x) for x in (ref / "kill.jsonl").read_text().splitlines()]
    ok = status == 0 and not any(result.get(k) for k in ("wrong", "violations", "allocated",
                                                          "duplicated", "resubmitted"))  # fmt: skip
    if ok and not cfg.keep:
        shutil.rmtree(ref, ignore_errors=True)
    return _Reference(len(rows), dict(Counter(r["label"] for r in rows)), ok)


# ----- command line -------------------------------------------------------------------------
def figures(report: CrashPointsReport) -> dict[str, Any]:
    """The headline numbers of an enumeration."""
    pts = report.points
    rec = [p.recovery_s for p in pts if p.recovery_s is not None]
    init = [p.init_s for p in pts if p.init_s is not None]
    return {
        "writes in the reference run (T)": report.reference_writes,
        "reference run clean": report.reference_ok,
        "points run": len(pts),
        "points killed": sum(p.killed for p in pts),
        "points not reached": sum(not p.killed for p in pts),
        "distinct write kinds killed": len(report.covered()),
        "failed points": len(report.failed()),
        "jobs lost": sum(len(p.lost) for p in pts),
        "cancels lost": sum(len(p.lost_cancels) for p in pts),
        "duplicated": sum(len(p.duplicated) for p in pts),
        "wrong outcomes": sum(len(p.wrong) for p in pts),
        "violations": sum(len(p.violations) for p in pts),
        "devices left allocated": sum(len(p.allocated) for p in pts),
        "orphan processes": sum(p.orphans for p in pts),
        "errors": sum(p.error is not None for p in pts),
        "recovery median s": round(statistics.median(rec), 3) if rec else None,
        "recovery max s": round(max(rec), 3) if rec else None,
        "controller init median s": round(statistics.median(init), 4) if init else None,
        "controller init max s": round(max(init), 4) if init else None,
        "wall s": round(report.wall_s, 1),
    }


def _args() -> tuple[CrashPointsConfig, argparse.Namespace]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    d = CrashPointsConfig()
    ap.add_argument("--workload", choices=["full", "small"], default=d.workload)
    ap.add_argument("--phases", default=",".join(d.phases), help="before,after (or one)")
    ap.add_argument("--limit", type=int, default=d.limit,
                    help="at most this many writes, spread evenly (default 0: every write; "
                         "-1: none, with --by-kind only)")  # fmt: skip
    ap.add_argument("--by-kind", type=int, default=d.by_kind,
                    help="also kill at the first K writes of each kind")  # fmt: skip
    ap.add_argument("--parallel", type=int, default=d.parallel, help="points run at once")
    ap.add_argument("--seed", type=int, default=d.seed)
    ap.add_argument("--work", type=Path, default=None, help="keep the run here (default: temp)")
    ap.add_argument("--keep", action="store_true", help="keep every point's folder")
    ap.add_argument("--out", type=Path, default=RESULTS / "crash_points_bench.json")
    a = ap.parse_args()
    phases = tuple(p.strip() for p in a.phases.split(",") if p.strip())
    if not phases or set(phases) - set(PHASES):
        ap.error(f"--phases: a comma-separated subset of {','.join(PHASES)}")
    cfg = CrashPointsConfig(a.workload, phases, a.limit, a.by_kind, a.parallel, a.seed,
                            keep=a.keep)  # fmt: skip
    return cfg, a


def _run_with_bar(cfg: CrashPointsConfig, work: Path, console: Any) -> CrashPointsReport:
    from rich.markup import escape
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
               TextColumn("{task.fields[bad]} bad"), TimeElapsedColumn(),
               TimeRemainingColumn())  # fmt: skip
    # no refresh thread (auto_refresh=False): the driver forks, and a fork copies one thread
    with Progress(*columns, console=console, auto_refresh=False) as bar:
        task = bar.add_task("reference run", total=None, bad=0)
        bar.refresh()
        bad = 0

        def on_plan(total: int) -> None:
            bar.update(task, total=total, description="kill points")
            bar.refresh()

        def advance(r: PointResult) -> None:
            nonlocal bad
            if not r.ok():
                bad += 1
                what = escape(f"{r.kind or 'write'} {r.n} {r.phase}: {_why(r)}")
                bar.console.print(f"[red]{what}[/]")
            bar.update(task, advance=1, bad=bad)
            bar.refresh()

        return run_crash_points(cfg, work, on_plan, advance)


def main() -> None:
    """Command line: enumerate, print a table, write JSON under bench/results/."""
    import tempfile

    from rich.console import Console
    from rich.table import Table

    cfg, a = _args()
    console = Console()
    with tempfile.TemporaryDirectory(prefix="accelnet-crashpoints-") as tmp:
        report = _run_with_bar(cfg, a.work or Path(tmp), console)
    figs = figures(report)
    table = Table("figure", "value", title="crash points")
    for k, v in figs.items():
        table.add_row(k, str(v))
    console.print(table)
    kinds = Table("write killed", *cfg.phases, title="kill points by kind of write")
    per = {ph: report.covered(ph) for ph in cfg.phases}
    for k in sorted(report.covered()):
        kinds.add_row(k, *(str(per[ph].get(k, 0)) for ph in cfg.phases))
    console.print(kinds)
    for r in report.failed():
        console.print(f"FAILED {r.kind or 'write'} {r.n} {r.phase}: {_why(r)}", markup=False)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    data = {
        "command": " ".join(["python", "bench/crash_points_bench.py", *sys.argv[1:]]),
        "cores": os.cpu_count(),
        "figures": figs,
        "covered": report.covered(),
        "covered_by_phase": per,
        "reference_labels": report.reference_labels,
        "failed": [asdict(p) for p in report.failed()],
        "report": asdict(report),
    }
    a.out.write_text(json.dumps(data, indent=2, default=str))
    console.print(f"wrote {a.out}")
    sys.exit(0 if report.ok() else 1)


def _why(r: PointResult) -> str:
    keys = ("lost", "lost_cancels", "duplicated", "wrong", "violations", "allocated")
    parts = [f"{k}={getattr(r, k)}" for k in keys if getattr(r, k)]
    if r.orphans:
        parts.append(f"orphans={r.orphans}")
    if r.error:
        parts.append(f"error={r.error}")
    return f"[{r.label}] " + "; ".join(parts)


if __name__ == "__main__":
    main()
