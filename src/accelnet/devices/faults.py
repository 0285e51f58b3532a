"""Fault injection: make a device fail, slow down, hang or lose its worker, on a schedule.

A :class:`Fault` names a device, a kind and when (``at`` seconds after the schedule starts,
or after it is added to a running one):

- ``fail``: the device's health check FAILs with evidence ``injected`` (source ``fault``):
  once (``for_s`` unset: its probe after the reset passes) or for ``for_s`` seconds (its
  probes fail too, so it keeps failing and goes OFFLINE);
- ``slow``: its worker (and the worker's children) get only ``factor`` of their CPU time,
  by SIGSTOP/SIGCONT in 100 ms cycles (a real throttle, as cpulimit does), for ``for_s``
  seconds or until the device is reset; a WARN ``throttle`` finding says so;
- ``hang``: its worker is stopped (SIGSTOP) for ``for_s`` s or until reset: it misses its
  heartbeats;
- ``kill``: its worker's process group is SIGKILLed (its task, if any, is LOST).

The same remediation path handles injected and real faults: the controller sees a FAIL
finding, a silent worker or a dead one. :class:`FaultSchedule` is pure (the times come from
the caller's clock); :class:`WorkerFaults` does the signalling (the I/O edge). A plan can
be read from YAML (``faults: [{device: ..., kind: fail, at: 5}]``).
"""

from __future__ import annotations

import contextlib
import heapq
import os
import signal
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import psutil
from pydantic import Field, ValidationError

from accelnet.devices.health import Finding, Status
from accelnet.specio import SpecError, SpecModel, parse_text, read_text, validation_issues

FaultKind = Literal["fail", "slow", "hang", "kill"]
THROTTLE_PERIOD_S = 0.1


class FaultPlanError(SpecError):
    """A fault plan file that is not valid."""

    what = "fault plan"


class Fault(SpecModel):
    """One fault to inject."""

    device: str = Field(description="the device's id, e.g. mixed-lab/h100-0")
    kind: FaultKind = Field(description="fail, slow, hang or kill")
    at: float = Field(0.0, ge=0, description="seconds after the schedule starts (or it is added)")
    for_s: float | None = Field(
        None, gt=0, description="how long it lasts (fail: unset = one failed check; "
        "slow, hang: unset = until the device is reset)",
    )  # fmt: skip
    factor: float = Field(0.25, gt=0, lt=1, description="slow: the share of CPU time kept")
    note: str = Field("", description="said in the evidence")


class FaultPlan(SpecModel):
    """A file of faults."""

    faults: tuple[Fault, ...] = ()


def load_faults(path: str | Path) -> tuple[Fault, ...]:
    """The faults of a plan file; FaultPlanError naming file:line, key and value."""
    source = str(path)
    text = read_text(path, FaultPlanError)
    data, node = parse_text(text, source, FaultPlanError, source.lower().endswith(".json"))
    try:
        return FaultPlan.model_validate({} if data is None else data).faults
    except ValidationError as exc:
        raise FaultPlanError(source, validation_issues(exc, data, node, FaultPlan)) from None


@dataclass(frozen=True, slots=True)
class Injected:
    """A fault placed in time: it starts at ``start`` and ends at ``end`` (None: when the
    device is reset, or at once for a one-off ``fail``)."""

    fault: Fault
    start: float
    end: float | None
    seq: int

    @property
    def device(self) -> str:
        """The device it hits."""
        return self.fault.device

    def evidence(self) -> str:
        """``injected fail #3 for 5 s: ECC storm``."""
        span = f" for {self.fault.for_s:g} s" if self.fault.for_s else ""
        note = f": {self.fault.note}" if self.fault.note else ""
        return f"injected {self.fault.kind} #{self.seq}{span}{note}"

    def finding(self, at: float) -> Finding:
        """What a health check reports while it lasts: FAIL (fail) or WARN (slow)."""
        if self.fault.kind == "slow":
            return Finding(self.device, "throttle", Status.WARN, at, "fault",
                           f"worker keeps {self.fault.factor:.0%} of its CPU time",
                           detail=self.evidence())  # fmt: skip
        return Finding(self.device, "injected", Status.FAIL, at, "fault", self.evidence())


class FaultSchedule:
    """When faults begin and end (pure; times from the caller's clock). Not thread-safe."""

    def __init__(self, faults: Iterable[Fault] = (), start: float = 0.0) -> None:
        self._pending: list[tuple[float, int, Injected]] = []
        self._active: dict[int, Injected] = {}
        self._seq = 0
        for f in faults:
            self.add(f, start)

    def add(self, fault: Fault, now: float) -> Injected:
        """Schedule ``fault`` ``fault.at`` seconds after ``now``."""
        self._seq += 1
        start = now + fault.at
        end = None if fault.for_s is None else start + fault.for_s
        inj = Injected(fault, start, end, self._seq)
        heapq.heappush(self._pending, (start, inj.seq, inj))
        return inj

    def next_time(self) -> float | None:
        """When the next fault begins or an active one ends (None: nothing scheduled)."""
        times = [self._pending[0][0]] if self._pending else []
        times += [i.end for i in self._active.values() if i.end is not None]
        return min(times, default=None)

    def begin(self, now: float) -> list[Injected]:
        """The faults that begin by ``now`` (each once); lasting ones become active."""
        out = []
        while self._pending and self._pending[0][0] <= now:
            inj = heapq.heappop(self._pending)[2]
            out.append(inj)
            if inj.end is not None or inj.fault.kind in ("slow", "hang"):
                self._active[inj.seq] = inj
        return out

    def end(self, now: float) -> list[Injected]:
        """The active faults whose time is up at ``now`` (each once)."""
        over = [i for i in self._active.values() if i.end is not None and i.end <= now]
        for i in over:
            del self._active[i.seq]
        return over

    def active(self, device: str | None = None) -> list[Injected]:
        """The active faults (of ``device``), oldest first."""
        return sorted((i for i in self._active.values() if device in (None, i.device)),
                      key=lambda i: i.seq)  # fmt: skip

    def failing(self, device: str) -> Injected | None:
        """An active ``fail`` fault of ``device`` (its probes fail while it lasts)."""
        found = [i for i in self.active(device) if i.fault.kind == "fail"]
        return found[0] if found else None

    def clear(self, device: str) -> list[Injected]:
        """End every active fault of ``device`` now (and drop its pending ones); returns
        the active ones ended."""
        self._pending = [p for p in self._pending if p[2].device != device]
        heapq.heapify(self._pending)
        over = self.active(device)
        for i in over:
            del self._active[i.seq]
        return over

    def reset(self, device: str) -> list[Injected]:
        """The device was reset: its slow and hang faults are over (the worker they held is
        gone); returns them. ``fail`` faults last their time."""
        over = [i for i in self.active(device) if i.fault.kind in ("slow", "hang")]
        for i in over:
            del self._active[i.seq]
        return over


class _Throttle:
    """SIGSTOP/SIGCONT a process tree in cycles, keeping ``factor`` of its CPU time."""

    def __init__(self, pid: int | None, factor: float) -> None:
        self.pid = pid  # the caller may point it at a new worker (an int: set atomically)
        self.factor = factor
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"throttle-{pid}", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        run_s = THROTTLE_PERIOD_S * self.factor
        pause_s = THROTTLE_PERIOD_S - run_s
        tree: list[int] = []
        rounds = 0
        try:
            while not self._stop.is_set():
                if rounds % 10 == 0:
                    fresh = _tree(self.pid)
                    if tree and fresh[:1] != tree[:1]:
                        _signal(tree, signal.SIGCONT)  # the old worker is let go
                    tree = fresh
                rounds += 1
                _signal(tree, signal.SIGCONT)
                if self._stop.wait(run_s):
                    break
                _signal(tree, signal.SIGSTOP)
                self._stop.wait(pause_s)
        finally:
            _signal(_tree(self.pid) or tree, signal.SIGCONT)

    def stop(self) -> None:
        """End the throttle (the tree runs freely again); waits for the thread."""
        self._stop.set()
        self._thread.join(timeout=2.0)


def _tree(pid: int | None) -> list[int]:
    """``pid`` and its descendants (commands run in sessions of their own)."""
    if pid is None:
        return []
    try:
        proc = psutil.Process(pid)
        return [pid, *(c.pid for c in proc.children(recursive=True))]
    except psutil.Error:
        return []


def _signal(pids: list[int], sig: signal.Signals) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


class WorkerFaults:
    """Carries out ``kill``, ``hang`` and ``slow`` on the worker serving each device
    (``pid_of(device)``, e.g. ``LocalBackend.worker_pid``). Each method says what it did."""

    def __init__(self, pid_of: Callable[[str], int | None]) -> None:
        self._pid_of = pid_of
        self._throttles: dict[str, _Throttle] = {}
        self._stopped: dict[str, list[int]] = {}
        self._killed: set[int] = set()  # workers a ``kill`` fault SIGKILLed

    def apply(self, inj: Injected) -> str:
        """Start ``inj`` (kill, hang or slow; ``fail`` has nothing to do here)."""
        dev, kind = inj.device, inj.fault.kind
        pid = self._pid_of(dev)
        if kind == "fail":
            return "health checks fail"
        if kind == "slow":  # also a worker that starts later (see follow)
            self.undo(dev, "slow")
            self._throttles[dev] = _Throttle(pid, inj.fault.factor)
            who = f"worker pid {pid}" if pid is not None else "its next worker"
            return f"{who} throttled to {inj.fault.factor:.0%} of its CPU time"
        if pid is None:
            return "no worker running: nothing to do"
        if kind == "kill":
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)
            self._killed.add(pid)
            return f"worker pid {pid} SIGKILLed"
        tree = _tree(pid)
        _signal(tree, signal.SIGSTOP)
        self._stopped[dev] = tree
        return f"worker pid {pid} stopped (SIGSTOP, {len(tree)} processes)"

    def killed(self, pid: int) -> bool:
        """Whether a ``kill`` fault SIGKILLed the worker ``pid`` (each pid answered once):
        its death is the injected fault's, not its task's."""
        if pid in self._killed:
            self._killed.discard(pid)
            return True
        return False

    def follow(self) -> None:
        """Point each throttle at its device's current worker (a worker recycled since
        is throttled too); call now and then from the thread that owns ``pid_of``."""
        for dev, throttle in self._throttles.items():
            pid = self._pid_of(dev)
            if pid is not None:
                throttle.pid = pid

    def undo(self, device: str, kind: str) -> str:
        """End a ``slow`` or ``hang`` of ``device``."""
        if kind == "slow" and device in self._throttles:
            self._throttles.pop(device).stop()
            return "throttle ended"
        if kind == "hang" and device in self._stopped:
            _signal(self._stopped.pop(device), signal.SIGCONT)
            return "worker continued (SIGCONT)"
        return "nothing to undo"

    def close(self) -> None:
        """End every throttle and hang."""
        for dev in list(self._throttles):
            self.undo(dev, "slow")
        for dev in list(self._stopped):
            self.undo(dev, "hang")
