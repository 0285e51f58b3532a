"""Pipeline jobs: stages that run at once, each in a process of its own, on the job's
devices, streaming frames from stage to stage through shared memory.

A :class:`Pipeline` of stages ``s0 -> s1 -> ...`` runs as one gang job (``any:N``, N at
most the number of stages; :meth:`LocalCluster.submit_pipeline
<accelnet.runtime.sdk.LocalCluster.submit_pipeline>`): every rank runs
:meth:`Pipeline.run_task`, and stage ``i`` runs on rank ``i % N``. A rank with several
stages runs the most downstream one itself and the others in processes forked from it, so
every stage has a process of its own, and stages land on different devices whenever there
are as many devices as stages. Adjacent stages are joined by a channel
(:mod:`accelnet.runtime.pipeline.channel`) in the attempt's shared-memory folder (``ACCELNET_SHM``).

A stage is ``Stage(name, make)``; ``make()`` is called in the stage's own process and
returns, for the first stage (the source), an iterable of ``(array, meta)``, and for the
others a callable ``(array, meta) -> (array, meta)`` (the last stage, the sink, returns
nothing that is used). If what ``make()`` returned has a ``finish()`` method, the sink's
is the pipeline's result. Arrays arrive as read-only views into shared memory, valid
during the call; ``meta`` is small and picklable.

Timing: each frame carries four timestamps per stage from ``time.perf_counter`` (on
Linux CLOCK_MONOTONIC: one clock for every process of a machine), which the sink turns
into the frame's latency, split into compute per stage and transfer per hop
(:mod:`accelnet.runtime.pipeline.latency`). ``source_fps`` paces the source like a live camera:
frame ``k`` is not begun before ``k / source_fps`` seconds after the first.

Each stage prints its figures to the task's log (``[pipeline] ...`` lines of
``<job>.<attempt>.<rank>.out``), the sink the transfer per hop and the per-frame total.

Failure: a stage that raises records why in the folder's ``abort`` file and closes its
channels; its neighbours see the channel end and fail too, naming it; the job fails as a
gang does. Shared memory never outlives the attempt (the channels unlink their files, the
backend removes the folder).
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from accelnet.runtime.local.handoff import shm_dir
from accelnet.runtime.pipeline import latency
from accelnet.runtime.pipeline.channel import ChannelError, RingReceiver, RingSender, abort, aborted

_NAME = re.compile(r"^[A-Za-z_][\w.-]{0,63}$")
_pause = threading.Event().wait  # pacing: a sleep nobody interrupts


class PipelineError(RuntimeError):
    """A stage of the pipeline failed (the message names it and says why)."""


@dataclass(frozen=True, slots=True)
class Stage:
    """One stage: its ``name`` and ``make``, called in the stage's process (see the
    module docstring for what it returns)."""

    name: str
    make: Callable[[], Any]


@dataclass(frozen=True, slots=True)
class _Where:
    rank: int
    device: str
    shm: Path


class Pipeline:
    """Stages in a chain; picklable if their ``make`` are (cloudpickle)."""

    def __init__(
        self,
        stages: Sequence[Stage],
        slots: int = 4,
        source_fps: float | None = None,
        meta_bytes: int = 16384,
        timeout_s: float = 60.0,
    ) -> None:
        """``slots``: frames in flight per hop; ``source_fps``: pace the source (None: as
        fast as it goes); ``meta_bytes``: room for a frame's pickled metadata;
        ``timeout_s``: how long a stage waits for its neighbours to come up. ValueError
        for fewer than two stages, duplicate or bad names, or bad numbers."""
        names = [s.name for s in stages]
        if len(stages) < 2:
            raise ValueError("a pipeline has at least two stages")
        bad = [n for n in names if not _NAME.match(n)]
        if bad or len(set(names)) != len(names):
            raise ValueError(f"stage names must be unique identifiers, got {names}")
        if slots < 1 or (source_fps is not None and source_fps <= 0):
            raise ValueError("slots must be >= 1 and source_fps > 0")
        self.stages = tuple(stages)
        self.slots = slots
        self.source_fps = source_fps
        self.meta_bytes = meta_bytes
        self.timeout_s = timeout_s

    def placement(self, world: int) -> list[int]:
        """The rank of each stage on a gang of ``world`` devices."""
        if not 1 <= world <= len(self.stages):
            raise ValueError(
                f"a pipeline of {len(self.stages)} stages runs on 1 to {len(self.stages)} "
                f"devices, not {world}"
            )
        return [i % world for i in range(len(self.stages))]

    def run_task(self) -> dict[str, Any]:
        """Run this task's stages (its rank of the job's gang, from the environment the
        backend set); see :meth:`run`."""
        return self.run(
            int(os.environ["ACCELNET_RANK"]),
            int(os.environ["ACCELNET_WORLD_SIZE"]),
            os.environ.get("ACCELNET_DEVICE", "cpu"),
            shm_dir(),
        )

    def run(self, rank: int, world: int, device: str, shm: Path) -> dict[str, Any]:
        """Run rank ``rank``'s stages (of ``world``) until the stream ends; blocks. Returns
        ``{"rank", "device", "stages", "report"}``: ``report`` (:func:`report`) on the rank
        of the sink, None elsewhere. PipelineError if a stage failed."""
        mine = [i for i, r in enumerate(self.placement(world)) if r == rank]
        where = _Where(rank, device, shm)
        children: dict[int, int] = {}
        result: dict[str, Any] = {"rank": rank, "device": device, "report": None,
                                  "stages": [self.stages[i].name for i in mine]}  # fmt: skip
        try:
            for i in mine[:-1]:
                children[i] = self._fork(i, where)
            if mine:
                result["report"] = self._stage(mine[-1], where)
        except BaseException:
            for pid in children.values():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            for pid in children.values():
                os.waitpid(pid, 0)
            raise
        for i, pid in children.items():
            code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
            if code != 0:
                why = aborted(shm) or f"its process exited with code {code}"
                raise PipelineError(f"stage {self.stages[i].name} failed: {why}")
        return result

    def _fork(self, i: int, where: _Where) -> int:
        """Run stage ``i`` in a child process (same device, same logs); its pid."""
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        pid = os.fork()
        if pid:
            return pid
        code = 1
        try:  # the child: run the stage, never return into the parent's code
            self._stage(i, where)
            code = 0
        except BaseException:
            traceback.print_exc()
        finally:
            for stream in (sys.stdout, sys.stderr):
                with contextlib.suppress(Exception):
                    stream.flush()
            os._exit(code)

    # ----- one stage ----------------------------------------------------------------
    def _stage(self, i: int, where: _Where) -> dict[str, Any] | None:
        """Run stage ``i`` in this process; the pipeline's report if it is the sink."""
        stage, n = self.stages[i], len(self.stages)
        rx = tx = None
        try:
            if i > 0:
                rx = RingReceiver(where.shm, f"hop{i - 1}", self.timeout_s)
            if i < n - 1:
                tx = RingSender(where.shm, f"hop{i}", self.slots, n * latency.STAMPS_PER_STAGE,
                                self.meta_bytes, self.timeout_s)  # fmt: skip
            logic = stage.make()
            if rx is None:
                assert tx is not None
                compute, kept = self._source(logic, tx), None
            else:
                compute, kept = self._step(i, logic, rx, tx)
            finish = getattr(logic, "finish", None)
            value = finish() if callable(finish) else None
            own = {"stage": stage.name, "index": i, "rank": where.rank, "device": where.device,
                   "pid": os.getpid(), "frames": len(compute),
                   "compute_ms": latency.stats(np.asarray(compute) * 1000.0)}  # fmt: skip
            upstream = list(rx.final or []) if rx is not None else []
            _log_stage(own)
            if tx is not None:
                tx.finish([*upstream, own])
                return None
            assert kept is not None
            done = report(self, [*upstream, own], kept, value)
            _log_latency(done["latency"]["summary_ms"])
            return done
        except BaseException as exc:
            abort(where.shm, f"stage {stage.name} (rank {where.rank}, {where.device}) failed: "
                  f"{type(exc).__name__}: {exc}")  # fmt: skip
            if isinstance(exc, ChannelError):
                raise PipelineError(f"stage {stage.name}: {exc}") from None
            raise
        finally:
            if tx is not None:
                tx.close()
            if rx is not None:
                rx.close()

    def _source(self, logic: Any, tx: RingSender) -> list[float]:
        """Pull frames from the source, pace them, send them; compute seconds per frame."""
        n = len(self.stages)
        frames = iter(logic)
        compute: list[float] = []
        first: float | None = None
        while True:
            if self.source_fps is not None and first is not None:
                due = first + len(compute) / self.source_fps
                delay = due - time.perf_counter()
                if delay > 0:
                    _pause(delay)
            start = time.perf_counter()
            item = next(frames, None)
            end = time.perf_counter()
            if item is None:
                return compute
            first = start if first is None else first
            compute.append(end - start)
            stamps = np.zeros((n, latency.STAMPS_PER_STAGE))
            stamps[0, latency.START], stamps[0, latency.END] = start, end
            self._send(tx, 0, item, stamps)

    def _step(
        self, i: int, logic: Any, rx: RingReceiver, tx: RingSender | None
    ) -> tuple[list[float], np.ndarray[Any, np.dtype[np.float64]] | None]:
        """Receive, process and (unless the sink) send every frame; compute seconds per
        frame and, for the sink, every frame's stamps."""
        n = len(self.stages)
        compute: list[float] = []
        kept: list[np.ndarray[Any, np.dtype[np.float64]]] = []
        while (slot := rx.get()) is not None:
            start = time.perf_counter()
            out = logic(slot.array, slot.meta)
            end = time.perf_counter()
            compute.append(end - start)
            stamps = slot.stamps.reshape(n, latency.STAMPS_PER_STAGE).copy()
            stamps[i, latency.START], stamps[i, latency.END] = start, end
            if tx is None:
                stamps[i, latency.ACQUIRED] = stamps[i, latency.PUBLISHED] = end
                kept.append(stamps)
            else:
                self._send(tx, i, out, stamps)
            rx.release(slot)  # after sending: the output may be a view of the input
        shape = (0, n, latency.STAMPS_PER_STAGE)
        return compute, (np.stack(kept) if kept else np.zeros(shape)) if tx is None else None

    @staticmethod
    def _send(tx: RingSender, i: int, item: Any, stamps: np.ndarray[Any, Any]) -> None:
        array, meta = item
        array = np.asarray(array)
        slot = tx.acquire(array.shape, array.dtype)
        stamps[i, latency.ACQUIRED] = time.perf_counter()
        slot.array[...] = array
        stamps[i, latency.PUBLISHED] = time.perf_counter()
        slot.stamps[:] = stamps.ravel()
        tx.publish(slot, meta)


def _log(line: str) -> None:
    """A line of the task's log (its stdout)."""
    print(f"[pipeline] {line}", flush=True)


def _log_stage(own: dict[str, Any]) -> None:
    c = own["compute_ms"]
    where = f"rank {own['rank']}, {own['device']}, pid {own['pid']}"
    _log(f"stage {own['stage']} ({where}): {own['frames']} frames, "
         f"compute p50 {c['p50']:.3f} ms, p95 {c['p95']:.3f} ms")  # fmt: skip


def _log_latency(lat: dict[str, Any]) -> None:
    for hop, t in lat["transfer"].items():
        copy, wait = lat["copy"][hop]["p50"], lat["wait"][hop]["p50"]
        _log(f"transfer {hop}: p50 {t['p50']:.3f} ms (copy {copy:.3f}, wait {wait:.3f}), "
             f"p95 {t['p95']:.3f} ms")  # fmt: skip
    total, compute, transfer = lat["total"], lat["compute_total"], lat["transfer_total"]
    _log(f"per frame: p50 {total['p50']:.3f} ms = compute {compute['p50']:.3f} + transfer "
         f"{transfer['p50']:.3f} ms; p95 {total['p95']:.3f} ms")  # fmt: skip


def report(
    pipeline: Pipeline, stages: list[dict[str, Any]], stamps: np.ndarray[Any, Any], value: Any
) -> dict[str, Any]:
    """The pipeline's report, made by its sink: ``stages`` (each stage's name, rank,
    device, pid, frames and compute statistics), ``frames``, ``fps`` (frames over the
    time from the first frame's start to the last one's end), ``latency`` (the
    :func:`~accelnet.runtime.pipeline.latency.breakdown`) and ``result`` (the sink's
    ``finish()``)."""
    names = [s.name for s in pipeline.stages]
    frames = len(stamps)
    span = float(stamps[-1, -1, latency.END] - stamps[0, 0, latency.START]) if frames else 0.0
    return {
        "stages": stages,
        "frames": frames,
        "fps": frames / span if span > 0 else 0.0,
        "source_fps": pipeline.source_fps,
        "latency": latency.breakdown(stamps, names),
        "result": value,
    }


def find_report(job_result: Any) -> dict[str, Any] | None:
    """The pipeline's report in a pipeline job's result (one entry per rank, or one)."""
    ranks = job_result if isinstance(job_result, list) else [job_result]
    for r in ranks:
        if isinstance(r, dict) and isinstance(r.get("report"), dict):
            found: dict[str, Any] = r["report"]
            return found
    return None
