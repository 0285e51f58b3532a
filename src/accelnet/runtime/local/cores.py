"""CPU cores lent to tasks that asked for them (``resources.cpus``): Linux CPU affinity.

The scheduler counts a host's cores; this book, one per backend process, decides *which*
cores of this machine a task runs on: ``ceil(cpus)`` cores that no other pinned task holds,
lowest numbers first, from the cores this process may use itself
(``os.sched_getaffinity``). When a fabric declares more cores than the machine has (a
planning fabric run on a laptop), a task takes the cores fewest pinned tasks hold rather
than none: it is pinned to as many cores as it asked for (at most all of them), shared.
Where the OS has no CPU affinity (not Linux) nothing is pinned. The worker pins the task
(:func:`accelnet.runtime.local.worker.pin`).
"""

from __future__ import annotations

import math
import os


class CoreBook:
    """Which cores each pinned task holds (task id -> cores)."""

    def __init__(self, cores: set[int] | None = None) -> None:
        """``cores``: the cores to lend (default: those this process may run on; none
        where the OS cannot say)."""
        if cores is None:
            getter = getattr(os, "sched_getaffinity", None)
            cores = set(getter(0)) if getter is not None else set()
        self.cores: tuple[int, ...] = tuple(sorted(cores))
        self._held: dict[str, tuple[int, ...]] = {}
        self._users: dict[int, int] = dict.fromkeys(self.cores, 0)

    def lend(self, task_id: str, cpus: float) -> tuple[int, ...]:
        """Cores for ``task_id``, which asked for ``cpus`` (> 0): empty if there is nothing
        to lend. A task holds its cores until :meth:`give_back`."""
        if not self.cores or cpus <= 0:
            return ()
        self.give_back(task_id)
        want = min(len(self.cores), max(1, math.ceil(cpus - 1e-9)))
        chosen = sorted(self.cores, key=lambda c: (self._users[c], c))[:want]
        for c in chosen:
            self._users[c] += 1
        got = self._held[task_id] = tuple(sorted(chosen))
        return got

    def give_back(self, task_id: str) -> None:
        """``task_id``'s cores are free again (nothing if it holds none)."""
        for c in self._held.pop(task_id, ()):
            self._users[c] -= 1

    def held(self, task_id: str) -> tuple[int, ...]:
        """The cores ``task_id`` holds (empty: none)."""
        return self._held.get(task_id, ())
