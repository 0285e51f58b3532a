"""Device failures for the simulator: read from a CSV file, or drawn from an MTBF.

Both functions are also importable from :mod:`accelnet.sim.traces`, whose error type
(:class:`~accelnet.sim.traces.TraceError`) and CSV helpers :func:`load_failures` uses.

A failure takes a device down at ``at`` seconds from the trace's start and repairs it
``repair_s`` later (None: never); see :class:`~accelnet.sim.workload.DeviceFailure`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from accelnet.sim.workload import DeviceFailure

FAILURE_COLUMNS = ("at", "device", "repair_s")
_NEVER = ("", "never", "none")


def load_failures(path: str | Path) -> list[DeviceFailure]:
    """Failures of a CSV file with a header: ``at`` (s, required), ``device`` and
    ``repair_s`` (both optional columns), sorted by time (ties in file order).

    An empty ``device`` cell (or no such column) lets the simulator pick a device at random
    (seeded). An empty ``repair_s`` cell (or ``never``) means never repaired; without the
    column every failure is repaired after DeviceFailure's default, 3600 s.
    """
    # traces re-exports this module's functions, so its parsing helpers come in at call time
    from accelnet.sim.traceio import At, csv_rows, header, read_text  # noqa: PLC0415

    name, text = read_text(path)
    rows = csv_rows(name, text)
    columns = header(name, rows, FAILURE_COLUMNS, ("at",))
    failures: list[DeviceFailure] = []
    for line, row in rows:
        at = At(name, line)
        if len(row) != len(columns):
            raise at.error("columns", len(row), f"expected {len(columns)}: {','.join(columns)}")
        cells = dict(zip(columns, (cell.strip() for cell in row), strict=True))
        when = at.number("at", cells["at"], low=0)
        device = cells.get("device") or None
        if "repair_s" not in cells:
            failures.append(DeviceFailure(at=when, device=device))
            continue
        raw = cells["repair_s"]
        repair = None if raw.lower() in _NEVER else at.number("repair_s", raw, low=0)
        failures.append(DeviceFailure(at=when, device=device, repair_s=repair))
    failures.sort(key=lambda f: f.at)
    return failures


def mtbf_failures(
    devices: Sequence[str],
    mtbf_s: float,
    horizon_s: float,
    seed: int,
    repair_s: float | None = 3600.0,
) -> list[DeviceFailure]:
    """Failures of each device over ``[0, horizon_s)``, sorted by time (ties in the order
    of ``devices``).

    Each device's time to failure is exponential with mean ``mtbf_s`` (a Poisson process
    of failures), counted from the start and, after a failure, from its repair: a device
    cannot fail while it is down, and one never repaired (``repair_s`` None) fails at most
    once. With ``repair_s`` much shorter than ``mtbf_s`` a device fails about
    ``horizon_s / mtbf_s`` times. Device ``i`` draws from its own stream
    (``SeedSequence(seed).spawn``), so its failures depend only on ``seed`` and ``i``.
    """
    if not (math.isfinite(mtbf_s) and mtbf_s > 0):
        raise ValueError(f"mtbf_s = {mtbf_s!r}: must be > 0 seconds")
    if not (math.isfinite(horizon_s) and horizon_s >= 0):
        raise ValueError(f"horizon_s = {horizon_s!r}: must be >= 0 seconds")
    if repair_s is not None and not (math.isfinite(repair_s) and repair_s >= 0):
        raise ValueError(f"repair_s = {repair_s!r}: must be >= 0 seconds or None (never)")
    twice = sorted({d for d in devices if list(devices).count(d) > 1})
    if twice:
        raise ValueError(f"devices = {twice!r}: each device must be named once")
    failures: list[tuple[float, int, DeviceFailure]] = []
    streams = np.random.SeedSequence(seed).spawn(len(devices))
    for i, (device, stream) in enumerate(zip(devices, streams, strict=True)):
        rng = np.random.default_rng(stream)
        t = float(rng.exponential(mtbf_s))
        while t < horizon_s:
            failures.append((t, i, DeviceFailure(at=t, device=device, repair_s=repair_s)))
            if repair_s is None:
                break
            t += repair_s + float(rng.exponential(mtbf_s))
    failures.sort(key=lambda f: (f[0], f[1]))
    return [f for _, _, f in failures]
