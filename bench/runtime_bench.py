"""LocalBackend overheads: worker start, and launch -> SUCCEEDED of trivial tasks.

Measured, all on one emulated ``pcie-4xL4`` device:

- ``worker start``: spawn a worker process until it answers its first ping;
- ``cold command`` / ``cold payload``: the first task on a device (worker start included);
- ``payload``: a warm worker runs ``int()`` (cloudpickled) and the result comes back;
- ``command``: a warm worker runs ``/bin/sh -c true`` in a new session.

Each figure is launch (or spawn) to the event seen by ``poll``. Run:
``.venv/bin/python bench/runtime_bench.py [--repeats 200 --starts 20]``; writes
``bench/results/runtime_local.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import cloudpickle
from rich.console import Console
from rich.table import Table

from accelnet.fabric import load_preset
from accelnet.runtime.backend import TaskEventKind, TaskSpec
from accelnet.runtime.clock import SystemClock
from accelnet.runtime.local.backend import LocalBackend

DEVICES = load_preset("pcie-4xL4").devices
DEV = "l4box/gpu0"


def _spec(tid: str, log_dir: str, command: str | None, payload: bytes | None) -> TaskSpec:
    return TaskSpec(tid, "bench", 0, 1, DEV, (DEV,), command, payload, log_dir=log_dir)


def _round_trip(b: LocalBackend, spec: TaskSpec) -> float:
    t0 = time.perf_counter()
    b.launch(spec)
    while True:
        for ev in b.poll(10):
            if ev.kind is not TaskEventKind.STARTED:
                assert ev.kind is TaskEventKind.SUCCEEDED, ev
                return (time.perf_counter() - t0) * 1e3


def _series(n: int, one: Callable[[int], float]) -> list[float]:
    return [one(i) for i in range(n)]


def main() -> None:
    """Measure and print; write JSON."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeats", type=int, default=200)
    ap.add_argument("--starts", type=int, default=20)
    args = ap.parse_args()
    payload = cloudpickle.dumps((int, (), {}))
    samples: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        logs = str(Path(tmp) / "logs")

        def start(i: int) -> float:
            with LocalBackend(DEVICES, Path(tmp) / f"s{i}", SystemClock(), emulated=True) as b:
                t0 = time.perf_counter()
                w = b._pool.start(DEVICES[DEV])  # the private step, timed alone
                assert b._pool.ping(w, 10) is not None
                return (time.perf_counter() - t0) * 1e3

        def cold(kind: str) -> Callable[[int], float]:
            def one(i: int) -> float:
                with LocalBackend(
                    DEVICES, Path(tmp) / f"{kind}{i}", SystemClock(), emulated=True
                ) as b:
                    cmd, pay = ("true", None) if kind == "command" else (None, payload)
                    return _round_trip(b, _spec(f"{kind}{i}", logs, cmd, pay))

            return one

        samples["worker start"] = _series(args.starts, start)
        samples["cold command"] = _series(args.starts, cold("command"))
        samples["cold payload"] = _series(args.starts, cold("payload"))
        with LocalBackend(DEVICES, Path(tmp) / "warm", SystemClock(), emulated=True) as b:
            _round_trip(b, _spec("warmup", logs, None, payload))
            # interleaved, so that both kinds see the same machine noise
            pay_ms, cmd_ms = [], []
            for i in range(args.repeats):
                pay_ms.append(_round_trip(b, _spec(f"p{i}", logs, None, payload)))
                cmd_ms.append(_round_trip(b, _spec(f"c{i}", logs, "true", None)))
        samples["payload"] = pay_ms
        samples["command"] = cmd_ms
    table = Table(title=f"LocalBackend overheads ({os.cpu_count()} cores), ms")
    for col in ("figure", "n", "median", "p10", "p90"):
        table.add_column(col, justify="left" if col == "figure" else "right")
    summary = {}
    for name, xs in samples.items():
        q = statistics.quantiles(xs, n=10)
        summary[name] = {"n": len(xs), "median_ms": statistics.median(xs), "p10_ms": q[0],
                         "p90_ms": q[-1]}  # fmt: skip
        table.add_row(name, str(len(xs)), f"{statistics.median(xs):.2f}", f"{q[0]:.2f}",
                      f"{q[-1]:.2f}")  # fmt: skip
    Console().print(table)
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
    ).stdout.strip()
    out = Path(__file__).parent / "results" / "runtime_local.json"
    out.parent.mkdir(exist_ok=True)
    record = {"when": datetime.now(UTC).isoformat(timespec="seconds"), "commit": commit,
              "cores": os.cpu_count(), "python": sys.version.split()[0], "summary": summary,
              "samples_ms": samples}  # fmt: skip
    out.write_text(json.dumps(record, indent=1))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
