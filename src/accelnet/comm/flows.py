"""Flows over the fabric's links, and how concurrent flows share a link.

A *flow* is a stream of bytes from one device to another along its route. Links are
full duplex: each direction of a link is a separate resource with the link's per-direction
bandwidth, keyed by :data:`LinkDir`. Concurrent flows that cross the same direction of a link
divide its bandwidth max-min fairly (progressive filling, as TCP-like transports and NCCL's
channels converge to): every flow gets the largest rate such that no link is over capacity
and no flow could get more without taking from a flow that has less.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from accelnet.fabric import Route

LinkDir = tuple[str, str, str, int]
"""One direction of a link: ``(end a, end b, the end the bytes leave from, lane)``; ``lane``
tells parallel links between the same two nodes apart (0 for a single link)."""


@dataclass(frozen=True, slots=True)
class Path:
    """The link directions a flow crosses, their capacities (bytes/s) and the one-way
    latency (s)."""

    hops: tuple[LinkDir, ...]
    capacity: tuple[float, ...]
    latency_s: float

    @classmethod
    def of(cls, route: Route, lanes: Mapping[int, int] | None = None) -> Path:
        """The path of a fabric route (an empty one for a device to itself). ``lanes``:
        ``id(link) -> lane`` for links that have parallel twins (the fabric's own link
        objects), so that two cables between the same switches stay two resources."""
        hops: list[LinkDir] = []
        caps = []
        for frm, link in zip(route.nodes[:-1], route.links, strict=True):
            lane = lanes.get(id(link), 0) if lanes else 0
            hops.append((link.a, link.b, frm, lane))
            caps.append(link.bandwidth_gbps * 1e9)
        return cls(tuple(hops), tuple(caps), route.latency_us * 1e-6)


def max_min_rates(paths: Sequence[Path]) -> list[float]:
    """The max-min fair rate (bytes/s) of each flow, all flows running at once.

    Progressive filling: raise every unfrozen flow's rate together until some link direction
    is full, freeze the flows that cross it, repeat. On every link that limits a flow, the
    rates of the flows that cross it sum to its capacity. A flow with no hops (a device to
    itself) gets ``inf``. A heap of the links' fair shares (stale entries skipped):
    O(hops x log links).
    """
    rates = [float("inf")] * len(paths)
    left: dict[LinkDir, float] = {}
    users: dict[LinkDir, list[int]] = {}
    for f, path in enumerate(paths):
        for hop, cap in zip(path.hops, path.capacity, strict=True):
            left[hop] = min(left.get(hop, cap), cap)
            users.setdefault(hop, []).append(f)
    count = {hop: len(fs) for hop, fs in users.items()}
    heap = [(left[h] / n, i, h) for i, (h, n) in enumerate(count.items())]
    heapq.heapify(heap)
    order = {h: i for i, h in enumerate(count)}  # tie-break: first seen
    frozen = [not path.hops for path in paths]
    while heap:
        share, _, hop = heapq.heappop(heap)
        n = count.get(hop, 0)
        if n == 0 or share != left[hop] / n:
            continue  # stale: the link's share changed since this entry was pushed
        share = max(0.0, share)
        touched: set[LinkDir] = set()
        for f in users[hop]:
            if frozen[f]:
                continue
            frozen[f] = True
            rates[f] = share
            for h in paths[f].hops:
                left[h] -= share
                count[h] -= 1
                touched.add(h)
        for h in touched:
            if count[h] > 0:
                heapq.heappush(heap, (left[h] / count[h], order[h], h))
    return rates


def link_loads(paths: Sequence[Path], rates: Sequence[float]) -> dict[LinkDir, float]:
    """Bytes/s each link direction carries at the given flow rates."""
    out: dict[LinkDir, float] = {}
    for path, rate in zip(paths, rates, strict=True):
        for hop in path.hops:
            out[hop] = out.get(hop, 0.0) + rate
    return out


def capacities(paths: Sequence[Path]) -> Mapping[LinkDir, float]:
    """Capacity (bytes/s) of every link direction the paths cross."""
    out: dict[LinkDir, float] = {}
    for path in paths:
        for hop, cap in zip(path.hops, path.capacity, strict=True):
            out[hop] = min(out.get(hop, cap), cap)
    return out


class Traffic:
    """Background flows indexed by the link directions they cross, so that a phase finds the
    flows it shares a link with without scanning them all. Immutable once built; ``plus``
    returns a new one."""

    def __init__(self, paths: Sequence[Path] = ()) -> None:
        self.paths: tuple[Path, ...] = tuple(paths)
        self._by_hop: dict[LinkDir, list[int]] = {}
        for i, path in enumerate(self.paths):
            for hop in path.hops:
                self._by_hop.setdefault(hop, []).append(i)

    def __len__(self) -> int:
        return len(self.paths)

    def plus(self, more: Sequence[Path]) -> Traffic:
        """These flows and ``more``."""
        return Traffic([*self.paths, *more])

    def touching(self, paths: Sequence[Path]) -> list[Path]:
        """The flows that share a link direction with any of ``paths``, each once."""
        found: set[int] = set()
        for path in paths:
            for hop in path.hops:
                found.update(self._by_hop.get(hop, ()))
        return [self.paths[i] for i in sorted(found)]
