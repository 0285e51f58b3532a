"""Telemetry of emulated devices: the real CPU and memory of the worker serving each one.

An emulated fabric (``accelnet demo --fabric mixed-lab``) runs every device's tasks in a
worker process on this machine's CPU; ``LocalBackend.worker_pid(device)`` names it. Per device
and sample: ``proc_cpu_pct`` (CPU time of the worker and its live descendants since the
previous sample, over the time between the samples' ``now``; 100 = one core busy; exited
children that were waited for count through their parent's ``children_*`` times),
``proc_rss_bytes`` (resident memory summed over the tree: shared pages count more than once),
``utilization_pct`` (the same CPU share, capped at 100: the emulated device's busy share) and
``mem_used_bytes`` (= the RSS). A device without a worker is idle (utilization 0); a worker
gone between samples is noted in ``errors``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import psutil

from accelnet.devices.telemetry import DeviceSample, Sampler


@dataclass(slots=True)
class _Watch:
    proc: psutil.Process
    tree: dict[int, psutil.Process] = field(default_factory=dict)  # descendants, last scan
    cpu_s: float | None = None  # tree CPU seconds at the previous sample
    at: float = 0.0  # that sample's time


class EmulatedSampler(Sampler):
    """Samples emulated devices through their worker processes.

    ``pid_of(device)`` gives the worker's pid or None (e.g. ``backend.worker_pid``); it is
    asked at every sample, so a recycled worker is followed. ``include_children`` adds the
    worker's descendants (command tasks run as its children). Finding them takes a scan of
    the process table (milliseconds), so it is done every ``tree_every``-th sample, shared by
    all devices; a child found late counts its CPU time since it started in that sample.
    """

    source = "emulated"

    def __init__(
        self,
        devices: Iterable[str],
        pid_of: Callable[[str], int | None],
        *,
        include_children: bool = True,
        tree_every: int = 5,
    ) -> None:
        if tree_every < 1:
            raise ValueError(f"tree_every must be >= 1, got {tree_every}")
        self._ids = tuple(devices)
        self._pid_of = pid_of
        self._children = include_children
        self._tree_every = tree_every
        self._rounds = 0
        self._watch: dict[str, _Watch] = {}

    def devices(self) -> tuple[str, ...]:
        """The emulated device ids."""
        return self._ids

    def sample(self, now: float) -> list[DeviceSample]:
        """One sample per device."""
        pids = {d: self._pid_of(d) for d in self._ids}
        scan = self._children and self._rounds % self._tree_every == 0 and any(pids.values())
        self._rounds += 1
        kids = _children_map() if scan else None
        return [self._sample(d, pids[d], now, kids) for d in self._ids]

    def _sample(
        self, device: str, pid: int | None, now: float, kids: dict[int, list[int]] | None
    ) -> DeviceSample:
        w = self._watch.get(device)
        if pid is None:
            self._watch.pop(device, None)
            return DeviceSample(device, now, self.source, utilization_pct=0.0)
        try:
            if w is None or w.proc.pid != pid or not w.proc.is_running():
                w = self._watch[device] = _Watch(psutil.Process(pid))
            if kids is not None:
                w.tree = _processes(_descendants(pid, kids), w.tree)
            cpu_s, rss = _tree_usage(w)
        except (psutil.NoSuchProcess, psutil.AccessDenied) as exc:
            self._watch.pop(device, None)
            why = "gone" if isinstance(exc, psutil.NoSuchProcess) else "access denied"
            return DeviceSample(
                device, now, self.source, utilization_pct=0.0, errors=(f"worker {pid}: {why}",)
            )
        pct = None
        if w.cpu_s is not None and now > w.at:
            pct = max(0.0, cpu_s - w.cpu_s) / (now - w.at) * 100.0
        w.cpu_s, w.at = cpu_s, now
        return DeviceSample(
            device,
            now,
            self.source,
            utilization_pct=min(pct, 100.0) if pct is not None else None,
            mem_used_bytes=rss,
            proc_cpu_pct=pct,
            proc_rss_bytes=rss,
        )


def _children_map() -> dict[int, list[int]]:
    """ppid -> pids of the live processes (one pass over the process table)."""
    out: dict[int, list[int]] = {}
    for p in psutil.process_iter(["ppid"]):
        ppid = p.info.get("ppid")
        if ppid is not None:
            out.setdefault(ppid, []).append(p.pid)
    return out


def _descendants(root: int, kids: dict[int, list[int]]) -> list[int]:
    out: list[int] = []
    todo = list(kids.get(root, ()))
    while todo:
        pid = todo.pop()
        if pid != root and pid not in out:
            out.append(pid)
            todo.extend(kids.get(pid, ()))
    return out


def _processes(pids: list[int], known: dict[int, psutil.Process]) -> dict[int, psutil.Process]:
    """Process objects for ``pids`` (reusing ``known`` ones); vanished pids left out."""
    out = {}
    for pid in pids:
        try:
            out[pid] = known.get(pid) or psutil.Process(pid)
        except psutil.NoSuchProcess:
            continue
    return out


def _tree_usage(w: _Watch) -> tuple[float, int]:
    """(CPU seconds, RSS bytes) of the worker and its known descendants, counting the times
    of waited-for children. Raises NoSuchProcess if the worker is gone; descendants that
    are gone are dropped."""
    cpu, rss = _usage(w.proc)
    for pid, proc in list(w.tree.items()):
        try:
            c, r = _usage(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            del w.tree[pid]
            continue
        cpu += c
        rss += r
    return cpu, rss


def _usage(proc: psutil.Process) -> tuple[float, int]:
    with proc.oneshot():
        t = proc.cpu_times()
        return t.user + t.system + t.children_user + t.children_system, proc.memory_info().rss
