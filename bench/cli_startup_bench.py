"""CLI start-up (issue 26 item 8): how long ``accelnet --help``, ``accelnet status`` and
``accelnet submit`` take from the shell, and what ``--help`` imports.

Each command runs ``--repeats`` times as a fresh process (the installed console script, as a
user types it); a figure is the median wall time. ``status`` and ``submit`` talk to a real
``accelnet serve`` on 127.0.0.1 (an emulated CPU fabric, one user token): ``status`` lists
the latest jobs, ``submit`` sends one job file (``run: "true"``, not waited for). The
interpreter alone (``python -c pass``) and ``import accelnet`` are timed the same way, as
the floor. ``-X importtime`` of ``--help`` gives the largest imports. Goal: ``--help`` and
``status`` under 0.5 s.

Run from the project root (machine idle)::

    .venv/bin/python bench/cli_startup_bench.py [--repeats 10]

It prints a table and writes ``bench/results/cli_startup.json``.
"""

from __future__ import annotations

import argparse
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from api_bench import token
from benchutil import run_and_report, source_state, src_label
from serveproc import ServeProcess, accelnet_cmd

ROOT = Path(__file__).resolve().parent
RESULTS = ROOT / "results" / "cli_startup.json"
GOAL_S = 0.5


def timed(cmd: list[str], env: dict[str, str]) -> float:
    """Wall seconds of one run of ``cmd`` (exit status checked by the caller's choice)."""
    t0 = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    wall = time.perf_counter() - t0
    if done.returncode != 0:
        raise RuntimeError(f"{shlex.join(cmd)} exited {done.returncode}: {done.stderr[-800:]}")
    return wall


def largest_imports(env: dict[str, str], top: int = 8) -> list[dict[str, Any]]:
    """``python -X importtime`` of ``accelnet --help``: the largest top-level imports."""
    code = ("from accelnet.cli.main import app\n"
            "try:\n    app(['--help'])\nexcept SystemExit:\n    pass")  # fmt: skip
    done = subprocess.run([sys.executable, "-X", "importtime", "-c", code], capture_output=True,
                          text=True, env=env, check=False)  # fmt: skip
    rows = []
    for line in done.stderr.splitlines():
        parts = line.split("|")
        if len(parts) != 3 or not parts[1].strip().isdigit():
            continue
        name = parts[2].rstrip()
        depth = (len(name) - len(name.lstrip())) // 2
        if depth == 0:
            rows.append({"module": name.strip(), "ms": int(parts[1]) / 1000})
    return sorted(rows, key=lambda r: -r["ms"])[:top]


def run(args: argparse.Namespace, console: Console) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="accelnet-cli-bench-") as tmp_s:
        tmp = Path(tmp_s)
        tmp.chmod(0o711)  # as root, tenants' users pass through to their folders
        db = tmp / "state.db"
        user = token(db, "bench", "user")
        server = ServeProcess(tmp, db, "--fabric", "local", "--rate", "0")
        try:
            job = tmp / "job.yaml"
            job.write_text('name: hello\nrun: "true"\n', encoding="utf-8")
            env = {**os.environ, "ACCELNET_URL": server.url, "ACCELNET_TOKEN": user,
                   "HOME": str(tmp), "COLUMNS": "120"}  # fmt: skip
            cli = accelnet_cmd()
            cases = {
                "python -c pass (floor)": [sys.executable, "-c", "pass"],
                "import accelnet": [sys.executable, "-c", "import accelnet"],
                "accelnet --help": [*cli, "--help"],
                "accelnet status": [*cli, "status"],
                "accelnet submit job.yaml": [*cli, "submit", str(job)],
            }
            walls: dict[str, list[float]] = {k: [] for k in cases}
            with Progress(console=console, transient=True) as progress:
                task = progress.add_task("commands", total=len(cases) * args.repeats)
                for _ in range(args.repeats):  # interleaved: a slow minute hits every row
                    for name, cmd in cases.items():
                        walls[name].append(timed(cmd, env))
                        progress.advance(task)
            imports = largest_imports(env)
        finally:
            server.stop()
    rows = {
        name: {"median_s": statistics.median(w), "min_s": min(w), "max_s": max(w), "runs_s": w}
        for name, w in walls.items()
    }
    return {
        "schema": "accelnet.bench.cli_startup/v1",
        "timestamp": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": "bench/cli_startup_bench.py " + shlex.join(sys.argv[1:]),
        "repeats": args.repeats,
        "goal_s": GOAL_S,
        "source": source_state(),
        "commands": rows,
        "help_largest_imports": imports,
    }


def report(result: dict[str, Any], console: Console) -> None:
    t = Table(title=f"CLI start-up, medians of {result['repeats']} fresh processes")
    for col in ("command", "median (s)", "min (s)", "max (s)"):
        t.add_column(col, justify="right" if col != "command" else "left")
    for name, r in result["commands"].items():
        t.add_row(name, f"{r['median_s']:.3f}", f"{r['min_s']:.3f}", f"{r['max_s']:.3f}")
    console.print(t)
    top = ", ".join(f"{r['module']} {r['ms']:.0f} ms" for r in result["help_largest_imports"])
    console.print(f"largest imports of --help: {top}")
    console.print(f"src {src_label(result['source'])}; goal: --help and status under "
                  f"{result['goal_s']} s")  # fmt: skip


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    run_and_report(args, run, report, args.out)


if __name__ == "__main__":
    main()
