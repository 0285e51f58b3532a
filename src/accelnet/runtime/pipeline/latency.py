"""Per-frame latency of a pipeline, broken down into compute and transfer.

Every frame carries four timestamps per stage (seconds on one monotonic clock): ``start``
and ``end`` of the stage's work on it, ``acquired`` (a free slot downstream was had) and
``published`` (the frame was copied there and announced). For stages ``s`` and hops
``s -> s+1``:

- compute of stage ``s``: ``end[s] - start[s]``;
- transfer of hop ``s``: ``start[s+1] - end[s]``, made of ``copy`` (``published[s] -
  acquired[s]``: writing the frame into shared memory) and ``wait`` (the rest: for a free
  slot, in the queue while the next stage is busy, and the wake-up);
- total: ``end[last] - start[first]``, which is the sum of every compute and transfer.

:func:`breakdown` computes them from the stamps; :func:`plot` draws them per frame.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

START, END, ACQUIRED, PUBLISHED = range(4)
STAMPS_PER_STAGE = 4


def stats(ms: npt.NDArray[np.float64]) -> dict[str, float]:
    """``p50``, ``p95``, ``mean`` and ``max`` of ``ms`` (zeros if empty), rounded to µs."""
    if ms.size == 0:
        return {"p50": 0.0, "p95": 0.0, "mean": 0.0, "max": 0.0}
    values = {"p50": np.percentile(ms, 50), "p95": np.percentile(ms, 95), "mean": ms.mean(),
              "max": ms.max()}  # fmt: skip
    return {k: round(float(v), 3) for k, v in values.items()}


def hop_names(stages: Sequence[str]) -> list[str]:
    """``["decode->process", "process->encode"]`` for three stages."""
    return [f"{a}->{b}" for a, b in itertools.pairwise(stages)]


def breakdown(stamps: npt.NDArray[np.float64], stages: Sequence[str]) -> dict[str, Any]:
    """The breakdown of ``stamps`` (``(frames, stages, 4)`` seconds): ``per_frame_ms``
    (``total``, ``compute``/``transfer``/``copy``/``wait`` by stage or hop, lists in frame
    order) and ``summary_ms`` (the :func:`stats` of each, plus ``compute_total`` and
    ``transfer_total`` per frame). JSON-serialisable. ValueError for a shape that does
    not match ``stages``."""
    n = len(stages)
    if stamps.ndim != 3 or stamps.shape[1:] != (n, STAMPS_PER_STAGE):
        raise ValueError(f"stamps of shape {stamps.shape} for {n} stages")
    ms = stamps * 1000.0
    compute = {s: ms[:, i, END] - ms[:, i, START] for i, s in enumerate(stages)}
    hops = hop_names(stages)
    transfer = {h: ms[:, i + 1, START] - ms[:, i, END] for i, h in enumerate(hops)}
    copy = {h: ms[:, i, PUBLISHED] - ms[:, i, ACQUIRED] for i, h in enumerate(hops)}
    wait = {h: transfer[h] - copy[h] for h in hops}
    total = ms[:, n - 1, END] - ms[:, 0, START] if n else np.zeros(len(stamps))
    zeros = np.zeros(len(stamps))
    compute_total = sum(compute.values(), zeros)
    transfer_total = sum(transfer.values(), zeros)

    def series(values: npt.NDArray[np.float64]) -> list[float]:
        return [round(float(v), 4) for v in values]

    return {
        "stages": list(stages),
        "hops": hops,
        "frames": len(stamps),
        "per_frame_ms": {
            "total": series(total),
            "compute": {k: series(v) for k, v in compute.items()},
            "transfer": {k: series(v) for k, v in transfer.items()},
            "copy": {k: series(v) for k, v in copy.items()},
            "wait": {k: series(v) for k, v in wait.items()},
        },
        "summary_ms": {
            "total": stats(total),
            "compute_total": stats(compute_total),
            "transfer_total": stats(transfer_total),
            "compute": {k: stats(v) for k, v in compute.items()},
            "transfer": {k: stats(v) for k, v in transfer.items()},
            "copy": {k: stats(v) for k, v in copy.items()},
            "wait": {k: stats(v) for k, v in wait.items()},
        },
    }


def plot(result: dict[str, Any], path: str | Path, title: str = "per-frame latency") -> None:
    """A stacked area chart of :func:`breakdown`'s ``result`` per frame (compute per stage,
    transfer per hop) written to ``path`` (PNG). Imports matplotlib (object API only)."""
    from matplotlib.figure import Figure  # noqa: PLC0415 (heavy: only when plotting)

    per = result["per_frame_ms"]
    labels, layers = [], []  # in the order a frame meets them
    for i, stage in enumerate(result["stages"]):
        labels.append(f"compute {stage}")
        layers.append(per["compute"][stage])
        if i < len(result["hops"]):
            hop = result["hops"][i]
            labels.append(f"transfer {hop}")
            layers.append(per["transfer"][hop])
    fig = Figure(figsize=(7.0, 3.6), dpi=100)
    ax = fig.add_subplot()
    frames = np.arange(result["frames"])
    if len(frames):
        ax.stackplot(frames, *layers, labels=labels)
    ax.set_xlabel("frame")
    ax.set_ylabel("ms")
    ax.set_title(title)
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.2), ncols=3, fontsize="small",
              frameon=False)  # fmt: skip
    fig.savefig(path, bbox_inches="tight")
