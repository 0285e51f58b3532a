"""Small helpers shared by the workloads: output folders, JSON files, range checks, and
the HTTP server the service workloads run under."""

from __future__ import annotations

import argparse
import json
import os
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


def service_args(description: str) -> argparse.ArgumentParser:
    """A service workload's parser, with ``--port`` (default ``$PORT``, else 8000)."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--port", type=int, default=int(os.environ.get("PORT", "8000")))
    return p


def serve_app(app: Any, port: int) -> None:
    """Serve ``app`` on ``$ACCELNET_BIND:port`` (a Ray node's address on Ray; 127.0.0.1
    without it) until stopped."""
    import uvicorn  # noqa: PLC0415

    host = os.environ.get("ACCELNET_BIND", "127.0.0.1")
    uvicorn.run(app, host=host, port=port, log_level="warning", access_log=False)
