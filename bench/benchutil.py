"""Helpers shared by the benchmarks (run them as ``python bench/NAME.py``)."""

from __future__ import annotations

import hashlib
import json
import math
import statistics
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console

if TYPE_CHECKING:
    import psutil


def source_state() -> dict[str, Any]:
    """The git commit of the checkout whose ``accelnet`` is imported (another tree's when
    ``PYTHONPATH`` points there, as in an A/B of two commits), whether its ``src/`` differs
    from it, and a hash of that difference (tracked files), so that figures can be traced to
    code (None: no git)."""
    import accelnet

    root = Path(accelnet.__file__).resolve().parents[2]  # <root>/src/accelnet/__init__.py
    if not (root / "src" / "accelnet").is_dir():  # an installed copy: this checkout, then
        root = Path(__file__).resolve().parent.parent

    def git(*cmd: str) -> str | None:
        try:
            done = subprocess.run(
                ["git", *cmd], cwd=root, capture_output=True, text=True, check=True, timeout=10
            )
        except (OSError, subprocess.SubprocessError):
            return None
        return done.stdout.strip()

    changed = git("status", "--porcelain", "--", "src")
    diff = git("diff", "HEAD", "--", "src")
    return {
        "commit": git("rev-parse", "HEAD"),
        "src_modified": None if changed is None else bool(changed),
        "src_diff_sha1": hashlib.sha1(diff.encode()).hexdigest() if diff else None,
    }


def src_label(source: dict[str, Any]) -> str:
    """Short form of :func:`source_state`, for tables."""
    commit = (source["commit"] or "unknown commit")[:12]
    return f"{commit} + uncommitted changes" if source["src_modified"] else commit


def write_json(result: dict[str, Any], path: Path) -> None:
    """Write ``result`` to ``path`` (through a temporary file, then a rename)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    tmp.replace(path)


def run_and_report(
    args: Any,
    run: Callable[[Any, Console], dict[str, Any]],
    report: Callable[[dict[str, Any], Console], None],
    out: Path,
) -> None:
    """The end of every benchmark's ``main``: run, write the JSON, print the report."""
    console = Console()
    if not console.is_terminal:  # piped or logged: do not wrap wide tables at 80 columns
        console = Console(width=max(console.width, 132))
    result = run(args, console)
    write_json(result, out)
    report(result, console)
    console.print(f"wrote {out}")


def fit_power(xs: Sequence[float], ys: Sequence[float]) -> tuple[float, float]:
    """(a, k) of ``y = a * x^k`` by least squares in log space."""
    lx = [math.log(x) for x in xs]
    ly = [math.log(y) for y in ys]
    mx, my = statistics.fmean(lx), statistics.fmean(ly)
    k = sum((a - mx) * (b - my) for a, b in zip(lx, ly, strict=True)) / sum(
        (a - mx) ** 2 for a in lx
    )
    return math.exp(my - k * mx), k


def outlive(procs: Sequence[psutil.Process], timeout: float) -> list[psutil.Process]:
    """Wait up to ``timeout`` s for ``procs`` (not necessarily our children) to end; those
    still alive. Every one is looked at every 10 ms, and a zombie counts as ended:
    ``psutil.wait_procs`` waits on each in turn for up to 1/n s (a full second per sweep),
    so waiting for workers that ended within 0.3 s of their controller's kill took a
    second or more, and a zombie nobody reaps waits out its whole timeout."""
    import psutil

    def running(p: psutil.Process) -> bool:
        try:
            return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return False

    deadline = time.monotonic() + timeout
    alive = [p for p in procs if running(p)]
    while alive and time.monotonic() < deadline:
        time.sleep(0.01)
        alive = [p for p in alive if running(p)]
    return alive
