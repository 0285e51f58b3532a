"""Runs a planned benchmark: one worker process per rank, results gathered over a
connection to each, every worker stopped on the way out (success, error, stall or Ctrl-C).

Workers are fresh interpreters (``python -P -m accelnet.commbench.worker``), as
multiprocessing's ``spawn`` makes them (never a fork of a process that may hold torch or
CUDA state), started with :mod:`subprocess` so that no helper process (multiprocessing's
resource tracker) outlives the run. Each runs in a session of its own and dies with the
runner (``PR_SET_PDEATHSIG``).

Blocks until the run ends. The time of a step's repeat is the slowest rank's mean
per-iteration time (the collective is done when the last rank is done).
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from pathlib import Path

from accelnet.commbench.errors import BenchError, BenchInputError
from accelnet.commbench.plan import BenchPlan
from accelnet.commbench.worker import ELEMENT_BYTES, TORCH_MISSING, Step, WorkerConfig

COLLECTIVES = ("allreduce", "allgather")
WORKER_MODULE = "accelnet.commbench.worker"
POLL_S = 0.2
STOP_GRACE_S = 3.0


@dataclass(frozen=True, slots=True)
class Settings:
    """Iterations as nccl-tests' ``-w`` (warmup) and ``-n`` (iters); ``repeats`` timed
    blocks per step; ``stall_s``: give up when no rank reports for this long."""

    warmup: int = 5
    iters: int = 20
    repeats: int = 1
    stall_s: float = 300.0

    def check(self) -> None:
        """BenchInputError naming the flag if a value is out of range."""
        for flag, value, low in (
            ("--warmup", self.warmup, 0),
            ("--iters", self.iters, 1),
            ("--repeats", self.repeats, 1),
        ):
            if value < low:
                raise BenchInputError(f"{flag}: {value} must be at least {low}")
        if not self.stall_s > 0:
            raise BenchInputError(f"--timeout: {self.stall_s} must be above 0 seconds")


@dataclass(frozen=True, slots=True)
class Measurement:
    """A step's measured times: per repeat, the slowest rank's mean per-iteration time."""

    step: Step
    times_s: tuple[float, ...]


def make_steps(collectives: Sequence[str], sizes: Sequence[int], ranks: int) -> tuple[Step, ...]:
    """Steps in run order (each collective over every size). Element counts are float32
    and, for allgather, a multiple of the rank count; at least one element per rank.

    Raises BenchInputError naming ``--collectives`` for an unknown collective.
    """
    out = []
    for coll in collectives:
        if coll not in COLLECTIVES:
            raise BenchInputError(
                f"--collectives: unknown collective {coll!r}; known: {', '.join(COLLECTIVES)}"
            )
        unit = ranks if coll == "allgather" else 1
        for size in sizes:
            count = max(size // ELEMENT_BYTES // unit, 1) * unit
            out.append(Step(coll, count * ELEMENT_BYTES, count))
    return tuple(out)


def require_torch() -> None:
    """BenchError naming the ``torch`` extra if torch cannot be imported (checked before
    any process starts)."""
    if importlib.util.find_spec("torch") is None:
        raise BenchError(TORCH_MISSING)


@dataclass
class _Worker:
    """A started worker: its rank, process, connection and stderr file."""

    rank: int
    proc: subprocess.Popen[bytes]
    conn: Connection
    stderr: Path


def _start(cfg: WorkerConfig, logs: Path) -> _Worker:
    """Start one worker (a fresh interpreter in a session of its own) and send it ``cfg``."""
    rank = cfg.binding.rank
    log = logs / f"rank{rank}.stderr"
    ours, theirs = socket.socketpair()
    try:
        with theirs, open(log, "wb") as err:
            proc = subprocess.Popen(
                [sys.executable, "-P", "-m", WORKER_MODULE, str(theirs.fileno())],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=err,
                pass_fds=(theirs.fileno(),),
                start_new_session=True,  # Ctrl-C reaches the runner only; it stops the workers
            )
    except BaseException:
        ours.close()
        raise
    worker = _Worker(rank, proc, Connection(ours.detach()), log)
    with contextlib.suppress(OSError):  # a worker dead already is noticed by _collect
        worker.conn.send(cfg)
    return worker


def run_bench(
    plan: BenchPlan,
    steps: Sequence[Step],
    settings: Settings,
    on_step: Callable[[int], None] | None = None,
    ring_only: bool = False,
) -> list[Measurement]:
    """Run ``steps`` on ``plan``'s devices; ``on_step(i)`` after every rank has reported
    step ``i``; ``ring_only`` makes NCCL run rings (gloo always does). Blocks. Raises
    BenchError (torch missing, a rank's error with its rank and device, a rank that died
    or went silent for ``settings.stall_s``); KeyboardInterrupt passes through. No worker
    outlives the call."""
    settings.check()
    require_torch()
    configs = [
        WorkerConfig(
            b,
            plan.ranks,
            plan.backend,
            tuple(steps),
            settings.warmup,
            settings.iters,
            settings.repeats,
            settings.stall_s,
            ring_only,
        )
        for b in plan.bindings
    ]
    workers: list[_Worker] = []
    with tempfile.TemporaryDirectory(prefix="accelnet-bench-") as logs:
        try:
            for cfg in configs:
                workers.append(_start(cfg, Path(logs)))
            times = _collect(plan, workers, len(steps), settings.stall_s, on_step)
        finally:
            stop_all(workers)
    return [
        Measurement(step, tuple(max(col) for col in zip(*times[i], strict=True)))
        for i, step in enumerate(steps)
    ]


def _collect(
    plan: BenchPlan,
    workers: Sequence[_Worker],
    nsteps: int,
    stall_s: float,
    on_step: Callable[[int], None] | None,
    now: Callable[[], float] = time.monotonic,
) -> list[list[tuple[float, ...]]]:
    """Read every worker's messages until all are done; raise at the first sign of
    trouble (an error, a worker gone before it said done, silence for ``stall_s``)."""
    times: list[list[tuple[float, ...]]] = [[] for _ in range(nsteps)]
    live = {w.conn: w for w in workers}
    done: set[int] = set()
    last = now()
    while len(done) < len(workers):
        ready = wait(list(live), timeout=POLL_S)
        if not ready:
            if now() - last > stall_s:
                raise BenchError(
                    f"no rank reported for {stall_s:g} s; stopped the workers (--timeout)"
                )
            continue
        last = now()
        for conn in ready:
            worker = live[conn]  # type: ignore[index]
            try:
                msg = worker.conn.recv()
            except (EOFError, OSError):
                del live[worker.conn]
                if worker.rank not in done:
                    raise BenchError(_where(plan, worker.rank) + _death(worker)) from None
                continue
            kind = msg[0]
            if kind == "error":
                raise BenchError(_where(plan, msg[1]) + msg[2])
            if kind == "port":  # rank 0's store is up: tell the others where
                for other in (w for w in workers if w.rank != msg[1]):
                    with contextlib.suppress(OSError):  # a dead one is noticed on recv
                        other.conn.send(("port", msg[2]))
            elif kind == "done":
                done.add(msg[1])
            elif kind == "result":
                step = msg[2]
                times[step].append(msg[3])
                if len(times[step]) == len(workers) and on_step is not None:
                    on_step(step)
    return times


def _death(worker: _Worker) -> str:
    """Why a worker went away without a word: its exit status and its stderr's last line."""
    try:
        code: int | None = worker.proc.wait(STOP_GRACE_S)
    except subprocess.TimeoutExpired:
        code = None
    why = (
        "closed its connection"
        if code is None
        else f"killed by signal {-code}"
        if code < 0
        else f"exited with status {code}"
    )
    try:
        lines = worker.stderr.read_text(errors="replace").strip().splitlines()
    except OSError:
        lines = []
    return f"worker {why}" + (f"; its stderr ends: {lines[-1]}" if lines else "")


def _where(plan: BenchPlan, rank: int) -> str:
    return f"rank {rank} ({plan.comm.ranks[rank]}): "


def stop_all(
    workers: Sequence[_Worker],
    grace_s: float = STOP_GRACE_S,
    now: Callable[[], float] = time.monotonic,
) -> None:
    """SIGTERM every worker's process group, wait up to ``grace_s``, SIGKILL what is left,
    reap all, close the connections. Idempotent."""

    def signal_all(sig: signal.Signals) -> None:
        for w in workers:
            if w.proc.poll() is None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(w.proc.pid, sig)

    signal_all(signal.SIGTERM)
    deadline = now() + grace_s
    for w in workers:
        with contextlib.suppress(subprocess.TimeoutExpired):
            w.proc.wait(max(0.0, deadline - now()))
    signal_all(signal.SIGKILL)
    for w in workers:
        w.proc.wait()
        w.conn.close()
