"""Small helpers shared by the workloads: output folders, JSON files, range checks."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

Summary = dict[str, Any]
"""A workload's result: JSON-serialisable numbers, strings, lists and dicts."""


def prepare_out_dir(out_dir: str) -> Path:
    """``out_dir`` as a ``Path``, created with its parents if missing (idempotent)."""
    path = Path(out_dir)
    path.mkdir(parents=True, exist_ok=True)
    return path


def write_json(path: Path, data: Summary) -> None:
    """Write ``data`` to ``path`` as indented JSON with sorted keys (overwrites)."""
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def check_positive(**values: int) -> None:
    """Raise ``ValueError`` naming the first argument that is not >= 1."""
    for name, value in values.items():
        if value < 1:
            raise ValueError(f"{name} must be >= 1, got {value}")


def check_rank(rank: int, world: int) -> None:
    """Raise ``ValueError`` unless ``world >= 1`` and ``0 <= rank < world``."""
    check_positive(world=world)
    if not 0 <= rank < world:
        raise ValueError(f"rank must be in [0, {world}), got {rank}")


def band(rank: int, world: int, total: int) -> tuple[int, int]:
    """The half-open slice ``[start, stop)`` of ``total`` items that ``rank`` of ``world`` owns.

    Bands are contiguous, cover ``range(total)`` exactly once in rank order, and differ in
    size by at most one.
    """
    return rank * total // world, (rank + 1) * total // world
