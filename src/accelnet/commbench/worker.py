"""One benchmark worker: a fresh interpreter per rank that binds to its device, joins the
process group and times every step, reporting to the runner.

Started as ``python -P -m accelnet.commbench.worker FD``: it reads its :class:`WorkerConfig`
from the :class:`~multiprocessing.connection.Connection` on ``FD``. Rank 0 opens the
process group's TCP store on a port the kernel picks (no race for a "free" port) and sends
``("port", 0, port)``; the runner passes ``("port", port)`` on to the other ranks. Then
every rank sends ``("result", rank, step, times_s)`` (the mean per-iteration time of each
repeat) per step, and ``("done", rank)`` or ``("error", rank, message)`` at the end. torch
is imported here, in the worker, never at import time.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from multiprocessing.connection import Connection
from typing import Any, Protocol

from accelnet.commbench.plan import Backend, RankBinding

TORCH_MISSING = "torch is not installed: pip install 'accelnet[torch]' (torch==2.13.0)"
ELEMENT_BYTES = 4  # float32
LOOPBACK = "127.0.0.1"
_PR_SET_PDEATHSIG = 1


@dataclass(frozen=True, slots=True)
class Step:
    """One collective of one size: ``nbytes`` as nccl-tests counts it (allreduce: the
    buffer; allgather: the whole output) and ``count`` its float32 elements."""

    collective: str
    nbytes: int
    count: int


@dataclass(frozen=True, slots=True)
class WorkerConfig:
    """Everything one worker needs (picklable, sent to the spawned process)."""

    binding: RankBinding
    world: int
    backend: Backend
    steps: tuple[Step, ...]
    warmup: int
    iters: int
    repeats: int
    timeout_s: float
    ring_only: bool = False  # NCCL: NCCL_ALGO=Ring (calibration fits the ring's formula)


class Sink(Protocol):
    """A worker's connection to the runner."""

    def send(self, obj: Any) -> None: ...

    def recv(self) -> Any: ...


def worker_main(cfg: WorkerConfig, sink: Sink) -> int:
    """Run ``cfg``'s steps, reporting on ``sink``; the exit status. Never raises: an error
    is reported as ``("error", rank, "Type: message")`` and gives status 1."""
    rank = cfg.binding.rank
    try:
        _bind(cfg)
        _run(cfg, sink)
    except BaseException as e:
        with contextlib.suppress(OSError):
            sink.send(("error", rank, f"{type(e).__name__}: {e}"))
        return 1
    sink.send(("done", rank))
    return 0


def main(argv: Sequence[str]) -> int:
    """``python -m accelnet.commbench.worker FD``: the config comes first on ``FD``."""
    _die_with_parent()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the runner's to handle
    conn = Connection(int(argv[1]))
    try:
        cfg = conn.recv()
    except EOFError:  # the runner went away before sending anything
        return 1
    return worker_main(cfg, conn)


def _die_with_parent() -> None:
    """Ask Linux to SIGTERM this process when its parent dies (no orphans even if the
    runner is killed); a no-op elsewhere."""
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


def _bind(cfg: WorkerConfig) -> None:
    b = cfg.binding
    if b.cpus:
        os.sched_setaffinity(0, b.cpus)
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = "1"
    # keep the process group's traffic on loopback
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    os.environ.setdefault("NCCL_SOCKET_IFNAME", "lo")
    os.environ.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")  # CUDA numbers GPUs as NVML
    if cfg.ring_only:
        os.environ["NCCL_ALGO"] = "Ring"


def _run(cfg: WorkerConfig, sink: Sink) -> None:
    try:
        import torch  # noqa: PLC0415 - optional and heavy: only in the worker
        import torch.distributed as dist  # noqa: PLC0415
    except ImportError:
        raise RuntimeError(TORCH_MISSING) from None
    torch.set_num_threads(1)
    b = cfg.binding
    device = torch.device("cpu")
    if cfg.backend == "nccl":
        device = torch.device("cuda", b.cuda_index or 0)
        torch.cuda.set_device(device)
    timeout = timedelta(seconds=cfg.timeout_s)
    if b.rank == 0:
        store = dist.TCPStore(
            LOOPBACK, 0, cfg.world, is_master=True, timeout=timeout, wait_for_workers=False
        )
        sink.send(("port", 0, int(store.port)))
    else:
        _, port = sink.recv()
        store = dist.TCPStore(LOOPBACK, port, cfg.world, is_master=False, timeout=timeout)
    dist.init_process_group(
        cfg.backend, store=store, rank=b.rank, world_size=cfg.world, timeout=timeout
    )
    try:
        for index, step in enumerate(cfg.steps):
            op = _collective(torch, dist, step, cfg.world, b.rank, device)
            times = _time(op, cfg, dist.barrier, _synchronizer(torch, cfg.backend))
            sink.send(("result", b.rank, index, times))
    finally:
        dist.destroy_process_group()


def _synchronizer(torch: Any, backend: Backend) -> Callable[[], None]:
    if backend == "nccl":
        return torch.cuda.synchronize  # type: ignore[no-any-return]
    return lambda: None


def _collective(
    torch: Any, dist: Any, step: Step, world: int, rank: int, device: Any
) -> Callable[[], None]:
    """The step's collective as a callable, after one checked call (a wrong result raises
    naming the collective, size and values)."""
    if step.collective == "allreduce":
        buf = torch.ones(step.count, dtype=torch.float32, device=device)
        dist.all_reduce(buf)
        _check(step, float(buf[0]), float(buf[-1]), float(world), float(world))
        buf.zero_()  # timed calls add zeros: no overflow, no denormals
        return lambda: dist.all_reduce(buf)
    each = step.count // world
    out = torch.empty(step.count, dtype=torch.float32, device=device)
    inp = torch.full((each,), float(rank + 1), dtype=torch.float32, device=device)
    gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
    gather(out, inp)
    _check(step, float(out[0]), float(out[-1]), 1.0, float(world))
    return lambda: gather(out, inp)


def _check(step: Step, first: float, last: float, want_first: float, want_last: float) -> None:
    if (first, last) != (want_first, want_last):
        raise RuntimeError(
            f"{step.collective} of {step.nbytes} bytes gave {first}..{last}, "
            f"expected {want_first}..{want_last}"
        )


def _time(
    op: Callable[[], None],
    cfg: WorkerConfig,
    barrier: Callable[[], object],
    sync: Callable[[], None],
) -> tuple[float, ...]:
    """Warm-up calls, then per repeat: barrier, ``iters`` timed calls back to back; the
    mean per-call time of each repeat (nccl-tests' ``-w``/``-n``)."""
    for _ in range(cfg.warmup):
        op()
    sync()
    times = []
    for _ in range(cfg.repeats):
        barrier()
        sync()
        start = time.perf_counter()
        for _ in range(cfg.iters):
            op()
        sync()
        times.append((time.perf_counter() - start) / cfg.iters)
    return tuple(times)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
