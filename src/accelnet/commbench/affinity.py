"""Which logical CPUs make up each physical core this process may run on.

Discovery names one CPU device per physical core (``cpu0``, ``cpu1``, ...); a benchmark
worker for ``cpuK`` is pinned to the logical CPUs (hyper-threads) of the K-th core, cores
ordered by their lowest logical CPU. Reads Linux sysfs; elsewhere every allowed logical CPU
counts as a core.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

SYSFS_CPU = Path("/sys/devices/system/cpu")


def allowed_cpus() -> tuple[int, ...]:
    """The logical CPUs this process may run on, ascending."""
    getter = getattr(os, "sched_getaffinity", None)
    if getter is None:  # not Linux
        return tuple(range(os.cpu_count() or 1))
    return tuple(sorted(getter(0)))


def physical_cores(
    cpus: tuple[int, ...] | None = None, root: Path = SYSFS_CPU
) -> tuple[tuple[int, ...], ...]:
    """Logical CPUs grouped by physical core (package, core id), groups ordered by their
    lowest CPU. ``cpus`` defaults to :func:`allowed_cpus`. Never raises: a CPU whose
    topology cannot be read is a core of its own."""
    cpus = allowed_cpus() if cpus is None else cpus
    groups: dict[tuple[str, str], list[int]] = {}
    for cpu in cpus:
        topo = root / f"cpu{cpu}" / "topology"
        try:
            key = (
                (topo / "physical_package_id").read_text().strip(),
                (topo / "core_id").read_text().strip(),
            )
        except OSError:
            key = ("?", f"cpu{cpu}")
        groups.setdefault(key, []).append(cpu)
    return tuple(sorted((tuple(sorted(g)) for g in groups.values()), key=lambda g: g[0]))


def machine_info() -> dict[str, object]:
    """This machine as the benchmark reports it: host name, logical CPUs, the ones this
    process may use, and physical cores among those."""
    allowed = allowed_cpus()
    return {
        "host": socket.gethostname(),
        "logical_cpus": os.cpu_count(),
        "usable_cpus": len(allowed),
        "cores": len(physical_cores(allowed)),
    }
