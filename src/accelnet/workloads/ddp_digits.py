"""Data-parallel training of a small MLP on scikit-learn's digits, with PyTorch DDP (CPU, gloo).

An ordinary torchrun-style script: it runs the same

* as one plain process (no ``RANK`` in the environment: world 1, no process group),
* under ``torchrun --nproc-per-node N``, and
* as an accelnet job (accelnet sets torchrun's variables: ``RANK``, ``WORLD_SIZE``,
  ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT``).

Every step uses one GLOBAL batch (``--global-batch``, the same whatever the world size);
rank r trains on its equal slice of it and DDP averages the gradients, so the mean of the
equal-size shard means is the full batch's mean: N ranks give the weights one process
gives, up to float rounding.

Checkpoints (``$ACCELNET_CHECKPOINT_DIR`` or ``--checkpoint-dir``): rank 0 writes
``ckpt.pt`` atomically every ``--checkpoint-every`` steps, on preemption and at the end;
every rank resumes from it. The batch order is a function of (seed, epoch), so model,
optimizer and step are all a resumed run needs to continue exactly as an uninterrupted
one. SIGTERM stops every rank at the same step boundary, with a checkpoint, exit code 143.

Standard output: JSON lines (``start`` from every rank; ``step``, ``preempted`` and
``done`` from rank 0).
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import secrets
import signal
import sys
import threading
from pathlib import Path
from typing import Any, NoReturn

import torch
import torch.distributed as dist
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from accelnet.runtime.clock import SystemClock

CHECKPOINT = "ckpt.pt"
CHECKPOINT_FORMAT = 1
EXIT_PREEMPTED = 128 + signal.SIGTERM  # 143: stopped, not finished
MOMENTUM = 0.9
HIDDEN = 64
TEST_FRACTION = 0.25
# what a checkpoint's training must share with this run for a resume to be the same run
SAME_RUN = ("seed", "global_batch", "lr", "momentum", "hidden")


_CLOCK = SystemClock()  # the events' stamps (Unix time)


class Preempted:
    """Set by SIGTERM; read at the next step boundary (``event`` also ends a step's
    ``--step-sleep`` at once)."""

    flag = False
    event = threading.Event()

    @classmethod
    def handler(cls, signum: int, frame: Any) -> None:
        cls.flag = True
        cls.event.set()


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=300, help="total optimizer steps (default 300)")
    p.add_argument("--seed", type=int, default=0, help="split, init and batch order (default 0)")
    p.add_argument(
        "--global-batch",
        type=int,
        default=64,
        help="examples per step over all ranks; divisible by the world size (default 64)",
    )
    p.add_argument("--lr", type=float, default=0.05, help="SGD learning rate (default 0.05)")
    p.add_argument(
        "--checkpoint-every", type=int, default=25, help="steps between checkpoints (default 25)"
    )
    p.add_argument(
        "--checkpoint-dir",
        default=os.environ.get("ACCELNET_CHECKPOINT_DIR") or None,
        help="checkpoint folder (default $ACCELNET_CHECKPOINT_DIR; none: no checkpoints)",
    )
    output = os.environ.get("ACCELNET_OUTPUT")
    p.add_argument(
        "--out",
        default=str(Path(output) / "metrics.json") if output else None,
        help="final metrics JSON (default $ACCELNET_OUTPUT/metrics.json; none if unset)",
    )
    p.add_argument(
        "--step-sleep", type=float, default=0.0, help="seconds to sleep per step (default 0)"
    )
    args = p.parse_args(argv)
    if args.steps < 0:
        p.error(f"--steps {args.steps}: at least 0")
    if args.global_batch < 1:
        p.error(f"--global-batch {args.global_batch}: at least 1")
    if args.checkpoint_every < 1:
        p.error(f"--checkpoint-every {args.checkpoint_every}: at least 1")
    if args.step_sleep < 0:
        p.error(f"--step-sleep {args.step_sleep}: at least 0")
    if not (math.isfinite(args.lr) and args.lr > 0):
        p.error(f"--lr {args.lr}: a positive number")
    return args


def emit(event: str, **fields: Any) -> None:
    """One JSON line, in one write: ranks sharing a pipe (torchrun's, which runs them
    unbuffered) never interleave within a line. ``t``: when (Unix time, seconds)."""
    stamp = round(_CLOCK.now(), 6)
    sys.stdout.write(json.dumps({"event": event, **fields, "t": stamp}) + "\n")
    sys.stdout.flush()


def fail(message: str) -> None:
    print(f"ddp_digits.py: error: {message}", file=sys.stderr, flush=True)
    raise SystemExit(2)


def load_data(seed: int) -> tuple[torch.Tensor, ...]:
    """The digits split (seeded, stratified) with features standardized on the train part."""
    x, y = load_digits(return_X_y=True)
    x_train, x_test, y_train, y_test = train_test_split(
        x, y, test_size=TEST_FRACTION, random_state=seed, stratify=y
    )
    scaler = StandardScaler().fit(x_train)
    return (
        torch.tensor(scaler.transform(x_train), dtype=torch.float32),
        torch.tensor(y_train, dtype=torch.long),
        torch.tensor(scaler.transform(x_test), dtype=torch.float32),
        torch.tensor(y_test, dtype=torch.long),
    )


def build_model(seed: int, features: int, classes: int) -> nn.Module:
    torch.manual_seed(seed)  # every rank starts from the same weights
    return nn.Sequential(nn.Linear(features, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, classes))


def batch_indices(step: int, n: int, global_batch: int, seed: int) -> torch.Tensor:
    """The global batch of 0-based ``step``: a slice of epoch ``step // (n // B)``'s
    permutation, drawn from (seed, epoch) alone: the same on every rank and on a resume."""
    per_epoch = n // global_batch
    epoch, i = divmod(step, per_epoch)
    g = torch.Generator().manual_seed(seed * 1_000_003 + epoch)
    return torch.randperm(n, generator=g)[i * global_batch : (i + 1) * global_batch]


def save_checkpoint(folder: Path, state: dict[str, Any]) -> Path:
    """Write ``folder/ckpt.pt`` atomically: a temporary file in the same folder, fsync,
    ``os.replace``, then fsync the folder (a crash leaves the old checkpoint or the new)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / CHECKPOINT
    tmp = folder / f".{CHECKPOINT}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)  # the umask's mode
    try:
        with os.fdopen(fd, "wb") as f:
            torch.save(state, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    dir_fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
    return path


def write_json(path: Path, data: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n")
    os.replace(tmp, path)


def shut_down(distributed: bool) -> None:
    """Free DDP, then the process group. The caller drops its DDP wrapper first: its
    Reducer holds the group, and a gloo group freed by the Reducer's destructor (which
    keeps the GIL) can deadlock at exit with a gloo thread that needs the GIL."""
    gc.collect()  # DDP's Reducer, gone with the wrapper (hooks make reference cycles)
    if distributed:
        dist.destroy_process_group()


def param_norm(model: nn.Module) -> float:
    return math.sqrt(sum(float(p.detach().double().pow(2).sum()) for p in model.parameters()))


def main(argv: list[str] | None = None) -> int:  # noqa: PLR0915
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, Preempted.handler)

    distributed = "RANK" in os.environ
    rank = int(os.environ.get("RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    attempt = int(os.environ.get("ACCELNET_ATTEMPT", "1"))
    if args.global_batch % world:
        fail(
            f"--global-batch {args.global_batch} is not divisible by the world size {world} "
            f"(WORLD_SIZE): every rank takes an equal slice of each global batch; use a "
            f"multiple of {world}"
        )
    shard = args.global_batch // world
    if "OMP_NUM_THREADS" not in os.environ:  # as torchrun does: no oversubscribed cores
        local_world = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None
        torch.set_num_threads(max(1, (cores or os.cpu_count() or 1) // local_world))

    x_train, y_train, x_test, y_test = load_data(args.seed)
    n = len(x_train)
    if args.global_batch > n:
        fail(f"--global-batch {args.global_batch} is larger than the {n} training examples")

    model = build_model(args.seed, x_train.shape[1], int(y_train.max()) + 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=MOMENTUM)
    run = {
        "seed": args.seed,
        "global_batch": args.global_batch,
        "lr": args.lr,
        "momentum": MOMENTUM,
        "hidden": HIDDEN,
    }

    # resume: every rank loads the same checkpoint (model, momentum buffers, step)
    folder = Path(args.checkpoint_dir) if args.checkpoint_dir else None
    start, last_loss = 0, float("nan")
    if folder is not None and (folder / CHECKPOINT).exists():
        ckpt = torch.load(folder / CHECKPOINT, map_location="cpu", weights_only=True)
        if ckpt.get("format") != CHECKPOINT_FORMAT:
            fail(f"{folder / CHECKPOINT}: format {ckpt.get('format')!r}, not {CHECKPOINT_FORMAT}")
        was = ckpt.get("run", {})
        differ = [f"{k} {was.get(k)!r} -> {run[k]!r}" for k in SAME_RUN if was.get(k) != run[k]]
        if differ:
            fail(
                f"{folder / CHECKPOINT} is from another run ({', '.join(differ)}): "
                "resume with the same settings, or use another checkpoint folder"
            )
        if ckpt["step"] > args.steps:
            fail(f"{folder / CHECKPOINT} is at step {ckpt['step']}, past --steps {args.steps}")
        model.load_state_dict(ckpt["model"])
        optimizer.load_state_dict(ckpt["optimizer"])
        torch.set_rng_state(ckpt["torch_rng"])
        start, last_loss = int(ckpt["step"]), float(ckpt["loss"])

    if distributed:
        dist.init_process_group("gloo")  # env://: MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE
        got = torch.tensor([start, -start], dtype=torch.int64)
        dist.all_reduce(got, op=dist.ReduceOp.MAX)
        if got.tolist() != [start, -start]:
            fail(
                f"rank {rank} resumed from step {start} but another rank from step "
                f"{int(got[0]) if got[0] != start else -int(got[1])}: every rank must see "
                "the same checkpoint folder"
            )
        train_model: nn.Module = DistributedDataParallel(model)
    else:
        train_model = model
    emit("start", rank=rank, world=world, resumed_from=start, attempt=attempt)

    def checkpoint(step: int) -> None:
        if folder is None or rank != 0:
            return
        save_checkpoint(
            folder,
            {
                "format": CHECKPOINT_FORMAT,
                "step": step,
                "loss": last_loss,
                "model": model.state_dict(),
                "optimizer": optimizer.state_dict(),
                "torch_rng": torch.get_rng_state(),
                "run": run,
                "data_order": {
                    "seed": args.seed,
                    "global_batch": args.global_batch,
                    "steps_per_epoch": n // args.global_batch,
                    "next_epoch": step // (n // args.global_batch),
                    "next_batch_in_epoch": step % (n // args.global_batch),
                },
                "world": world,
            },
        )

    loss_fn = nn.CrossEntropyLoss()
    train_model.train()
    for step in range(start, args.steps):
        batch = batch_indices(step, n, args.global_batch, args.seed)
        mine = batch[rank * shard : (rank + 1) * shard]
        optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(train_model(x_train[mine]), y_train[mine])
        loss.backward()  # DDP averages the gradients over the ranks
        optimizer.step()
        if args.step_sleep:
            Preempted.event.wait(args.step_sleep)
        # one collective: the global batch's loss, and whether any rank was told to stop
        stats = torch.tensor([loss.item(), float(Preempted.flag)], dtype=torch.float64)
        if distributed:
            dist.all_reduce(stats)
        last_loss = float(stats[0]) / world
        done = step + 1
        if rank == 0:
            emit("step", step=done, loss=last_loss)
        if stats[1] > 0 and done < args.steps:
            checkpoint(done)
            if distributed:
                dist.barrier()  # no rank exits before the checkpoint is on disk
            if rank == 0:
                emit("preempted", step=done)
            del train_model
            shut_down(distributed)
            return EXIT_PREEMPTED
        if done % args.checkpoint_every == 0 or done == args.steps:
            checkpoint(done)

    if distributed:
        dist.barrier()
    del train_model
    shut_down(distributed)
    if rank != 0:
        return 0
    model.eval()
    with torch.no_grad():
        accuracy = float((model(x_test).argmax(dim=1) == y_test).float().mean())
    metrics = {
        "steps": args.steps,
        "steps_run_this_attempt": args.steps - start,
        "resumed_from": start,
        "final_loss": last_loss if math.isfinite(last_loss) else None,  # None: no step yet
        "test_accuracy": accuracy,
        "world": world,
        "param_norm": param_norm(model),
    }
    if args.out:
        write_json(Path(args.out), metrics)
    emit("done", **metrics)
    return 0


def exit_now(code: int) -> NoReturn:
    """End the process with ``code`` once its output is flushed, without the interpreter's
    teardown: freeing torch's modules and tensors takes about half a second a process
    (two with four ranks on two cores) and does nothing a finished run needs, since its
    checkpoint, metrics and process group are written, closed and freed by then."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    exit_now(main())
