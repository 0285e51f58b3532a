"""Flows over the fabric's links, and how concurrent flows share a link.

A *flow* is a stream of bytes from one device to another along its route. Links are
full duplex: each direction of a link is a separate resource with the link's per-direction
bandwidth, keyed by :data:`LinkDir`. Concurrent flows that cross the same direction of a link
divide its bandwidth max-min fairly (progressive filling, as TCP-like transports and NCCL's
channels converge to): every flow gets the largest rate such that no link is over capacity
and no flow could get more without taking from a flow that has less.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from accelnet.fabric import Route

LinkDir = tuple[str, str, str]
"""One direction of a link: ``(end a, end b, the end the bytes leave from)``."""


@dataclass(frozen=True, slots=True)
class Path:
    """The link directions a flow crosses, their capacities (bytes/s) and the one-way
    latency (s)."""

    hops: tuple[LinkDir, ...]
    capacity: tuple[float, ...]
    latency_s: float

    @classmethod
    def of(cls, route: Route) -> Path:
        """The path of a fabric route (an empty one for a device to itself)."""
        hops = []
        caps = []
        for frm, link in zip(route.nodes[:-1], route.links, strict=True):
            hops.append((link.a, link.b, frm))
            caps.append(link.bandwidth_gbps * 1e9)
        return cls(tuple(hops), tuple(caps), route.latency_us * 1e-6)


def max_min_rates(paths: Sequence[Path]) -> list[float]:
    """The max-min fair rate (bytes/s) of each flow, all flows running at once.

    Progressive filling: raise every unfrozen flow's rate together until some link direction
    is full, freeze the flows that cross it, repeat. On every link that limits a flow, the
    rates of the flows that cross it sum to its capacity. A flow with no hops (a device to
    itself) gets ``inf``. O(links x rounds).
    """
    rates = [float("inf")] * len(paths)
    left: dict[LinkDir, float] = {}
    users: dict[LinkDir, list[int]] = {}
    for f, path in enumerate(paths):
        for hop, cap in zip(path.hops, path.capacity, strict=True):
            left[hop] = min(left.get(hop, cap), cap)
            users.setdefault(hop, []).append(f)
    active = {f for f, path in enumerate(paths) if path.hops}
    count = {hop: len(fs) for hop, fs in users.items()}
    while active:
        hop = min((h for h in count if count[h] > 0), key=lambda h: left[h] / count[h])
        share = max(0.0, left[hop] / count[hop])
        for f in users[hop]:
            if f not in active:
                continue
            active.discard(f)
            rates[f] = share
            for h in paths[f].hops:
                left[h] -= share
                count[h] -= 1
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
