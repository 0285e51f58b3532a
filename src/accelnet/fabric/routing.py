"""Routes between devices: links, bottleneck bandwidth, latency, loss and locality level.

Routing is hierarchical, so that a 16,384-host fabric needs no all-pairs table:

- **inside a host**: the widest path (largest bottleneck bandwidth, then least latency, then
  fewest hops) over the host's layout, never passing *through* a device. It is computed once
  per (layout, source) and shared by every host built from that layout.
- **between hosts**: each device leaves its host through its nearest exit (the NIC, or the
  device itself when it has its own external link, as in multi-node NVLink), crosses the
  network by the least-latency path between network switches (cached per source switch),
  and enters the other host through that device's nearest exit.

The locality level follows NCCL's path types: accelerator links only is NVLINK; PCIe switches
only is PCIE_SWITCH (PIX for one switch, PXB for several); through a CPU root complex is
PCIE_HOST (PHB); across sockets is NUMA (SYS); any network hop is NETWORK_LEAF (one network
switch) or NETWORK_SPINE (more); any radio link is WIRELESS.
"""

from __future__ import annotations

import bisect
import hashlib
import heapq
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from accelnet.fabric.model import Host, HostLayout, Level, Link, LinkMedium, LocalLink, SwitchKind

if TYPE_CHECKING:
    from accelnet.fabric.fabric import Fabric


class NoRouteError(LookupError):
    """Two devices that no chain of links joins."""


@dataclass(frozen=True, slots=True)
class Route:
    """The way from ``src`` to ``dst``: nodes and links in order, and their figures.

    ``bandwidth_gbps`` is the bottleneck per direction (for SELF, the device's memory
    bandwidth); ``latency_us`` the sum over links; ``loss_rate`` the chance a packet is lost
    somewhere on the way. ``label`` is what ``nvidia-smi topo -m`` would print.
    """

    src: str
    dst: str
    nodes: tuple[str, ...]
    links: tuple[Link, ...]
    level: Level
    label: str
    bandwidth_gbps: float
    latency_us: float
    loss_rate: float

    @property
    def hops(self) -> int:
        """Number of links."""
        return len(self.links)

    @property
    def bidirectional_gbps(self) -> float:
        """Both directions together (NVIDIA's "900 GB/s" for NVLink 4)."""
        return 2.0 * self.bandwidth_gbps

    def reversed(self) -> Route:
        """The same route walked from ``dst`` to ``src``."""
        return Route(
            self.dst,
            self.src,
            self.nodes[::-1],
            self.links[::-1],
            self.level,
            self.label,
            self.bandwidth_gbps,
            self.latency_us,
            self.loss_rate,
        )

    def to_json(self) -> dict[str, Any]:
        """Stable JSON form (schema ``accelnet.route/v1``, see docs/json.md)."""
        return {
            "schema": "accelnet.route/v1",
            "src": self.src,
            "dst": self.dst,
            "level": self.level.name,
            "label": self.label,
            "bandwidth_gbps": self.bandwidth_gbps,
            "bidirectional_gbps": self.bidirectional_gbps,
            "latency_us": round(self.latency_us, 6),
            "loss_rate": round(self.loss_rate, 9),
            "hops": [
                {
                    "from": a,
                    "to": b,
                    "medium": link.medium.value,
                    "generation": link.type.generation,
                    "count": link.type.count,
                    "bandwidth_gbps": link.bandwidth_gbps,
                    "latency_us": link.latency_us,
                }
                for a, b, link in zip(self.nodes[:-1], self.nodes[1:], self.links, strict=True)
            ],
        }


@dataclass(frozen=True, slots=True)
class _Path:
    nodes: tuple[str, ...]
    links: tuple[LocalLink, ...]
    bandwidth: float
    latency: float


class _LayoutRoutes:
    """Widest paths inside one host layout, computed per source on first use."""

    def __init__(self, layout: HostLayout) -> None:
        self._devices = frozenset(d.name for d in layout.devices)
        adj: dict[str, list[tuple[str, LocalLink]]] = {n: [] for n in layout.node_names}
        for link in layout.links:
            adj[link.a].append((link.b, link))
            adj[link.b].append((link.a, link))
        self._adj = adj
        self._thresholds = sorted({lk.type.bandwidth_gbps for lk in layout.links}, reverse=True)
        self._from: dict[str, dict[str, _Path]] = {}

    def path(self, src: str, dst: str) -> _Path | None:
        table = self._from.get(src)
        if table is None:
            table = self._from[src] = self._solve(src)
        return table.get(dst)

    def _solve(self, src: str) -> dict[str, _Path]:
        # The widest bottleneck is the largest threshold t at which dst is reachable over
        # links of bandwidth >= t; the least-latency path at that threshold breaks ties.
        # (A single lexicographic Dijkstra is not exact: min() is not isotone in latency.)
        found: dict[str, _Path] = {src: _Path((src,), (), math.inf, 0.0)}
        for t in self._thresholds:
            for node, path in self._dijkstra(src, t).items():
                if node not in found:
                    found[node] = path
            if len(found) == len(self._adj):
                break
        return found

    def _dijkstra(self, src: str, threshold: float) -> dict[str, _Path]:
        best: dict[str, tuple[float, int]] = {src: (0.0, 0)}
        prev: dict[str, tuple[str, LocalLink]] = {}
        heap: list[tuple[float, int, int, str]] = [(0.0, 0, 0, src)]
        seq = 1
        done: set[str] = set()
        while heap:
            lat, hops, _, node = heapq.heappop(heap)
            if node in done:
                continue
            done.add(node)
            if node != src and node in self._devices:
                continue  # devices are end points, never transit
            for nxt, link in self._adj[node]:
                if link.type.bandwidth_gbps < threshold or nxt in done:
                    continue
                cand = (lat + link.type.latency_us, hops + 1)
                if nxt not in best or cand < best[nxt]:
                    best[nxt] = cand
                    prev[nxt] = (node, link)
                    heapq.heappush(heap, (cand[0], cand[1], seq, nxt))
                    seq += 1
        out: dict[str, _Path] = {}
        for node in done:
            if node == src:
                continue
            nodes, links = [node], []
            cur = node
            while cur != src:
                p, lk = prev[cur]
                links.append(lk)
                nodes.append(p)
                cur = p
            nodes.reverse()
            links.reverse()
            bw = min(lk.type.bandwidth_gbps for lk in links)
            out[node] = _Path(tuple(nodes), tuple(links), bw, best[node][0])
        return out


class Router:
    """Answers :meth:`route` for one fabric; caches as it goes (not thread-safe)."""

    def __init__(self, fabric: Fabric) -> None:
        self._fabric = fabric
        self._layouts: dict[int, _LayoutRoutes] = {}
        self._exits: dict[str, tuple[str, ...]] = {}
        self._nearest: dict[tuple[int, tuple[str, ...], str], tuple[tuple[str, _Path], ...]] = {}
        self._tie_groups: dict[tuple[int, tuple[str, ...], tuple[str, ...]], list[str]] = {}
        self._widest: dict[str, dict[str, float]] = {}
        self._trees: dict[
            tuple[str, float],
            tuple[dict[str, tuple[float, int]], dict[str, tuple[tuple[str, Link], ...]]],
        ] = {}
        self._switch_bandwidths: list[float] | None = None

    # ----- public -------------------------------------------------------------------
    def route(self, a: str, b: str) -> Route:
        """Route between devices ``a`` and ``b`` (global ids); raises :class:`NoRouteError`.

        Symmetric by construction: ``route(b, a)`` is ``route(a, b)`` reversed.
        """
        if a > b:
            return self.route(b, a).reversed()
        fabric = self._fabric
        da, db = fabric.devices[a], fabric.devices[b]
        if a == b:
            return _self_route(a, da.model.mem_bw_gbps)
        ha, hb = fabric.host(da.host), fabric.host(db.host)
        candidates: list[tuple[tuple[str, ...], tuple[Link, ...]]] = []
        if ha is hb:
            p = self._layout(ha).path(da.name, db.name)
            if p is not None:
                candidates.append(self._globalize(ha, p))
        if ha is not hb or (self._is_exit(ha, da.name) and self._is_exit(hb, db.name)):
            ext = self._external_route(ha, da.name, hb, db.name)
            if ext is not None:
                candidates.append(ext)
        if not candidates:
            raise NoRouteError(f"no route between {a} and {b} in fabric {fabric.name!r}")
        nodes, links = min(candidates, key=lambda c: _rank(c[1]))
        return self._make(a, b, nodes, links)

    def host_route(self, host: str, a: str, b: str) -> Route:
        """Route inside ``host`` between any two local nodes (devices, NICs, switches)."""
        h = self._fabric.host(host)
        for end in (a, b):
            if not h.layout.has_node(end):
                raise KeyError(f"host {host!r} has no node {end!r}")
        if a == b:
            dev = self._fabric.devices.get(h.node_id(a))
            return _self_route(h.node_id(a), dev.model.mem_bw_gbps if dev is not None else 0.0)
        p = self._layout(h).path(a, b)
        if p is None:
            raise NoRouteError(f"no route between {a} and {b} inside host {host!r}")
        nodes, links = self._globalize(h, p)
        return self._make(nodes[0], nodes[-1], nodes, links)

    # ----- inside hosts -------------------------------------------------------------
    def _layout(self, host: Host) -> _LayoutRoutes:
        lr = self._layouts.get(host.layout_key)
        if lr is None:
            lr = self._layouts[host.layout_key] = _LayoutRoutes(host.layout)
        return lr

    @staticmethod
    def _globalize(host: Host, p: _Path) -> tuple[tuple[str, ...], tuple[Link, ...]]:
        prefix = host.name + "/"
        nodes = tuple(prefix + n for n in p.nodes)
        links = tuple(Link(prefix + x.a, prefix + x.b, x.type) for x in p.links)
        return nodes, links

    def _host_exits(self, host: Host) -> tuple[str, ...]:
        ex = self._exits.get(host.name)
        if ex is None:
            adj = self._fabric.external_adjacency
            ex = tuple(n for n in host.layout.node_names if adj(host.node_id(n)))
            self._exits[host.name] = ex
        return ex

    def _is_exit(self, host: Host, local: str) -> bool:
        return local in self._host_exits(host)

    def _nearest_exits(self, host: Host, local: str) -> tuple[tuple[str, _Path], ...]:
        exits = self._host_exits(host)
        key = (host.layout_key, exits, local)
        found = self._nearest.get(key)
        if found is None:
            ranked = self._ranked_exits(host, exits, local)
            found = tuple(_spread(ranked, self._tie_ordinal(host, exits, local, ranked)))
            self._nearest[key] = found
        return found

    def _ranked_exits(
        self, host: Host, exits: tuple[str, ...], local: str
    ) -> list[tuple[str, _Path]]:
        """Exits ``local`` reaches, widest then nearest (ties in layout order)."""
        lr = self._layout(host)
        layout = host.layout
        # another device is never a way out: devices are end points, not transit
        usable = [e for e in exits if e == local or layout.node_kind(e) is not None]
        paths = [(e, lr.path(local, e)) for e in usable]
        reachable = [(e, p) for e, p in paths if p is not None]
        reachable.sort(key=lambda ep: _exit_rank(ep[1]))
        return reachable

    def _tie_ordinal(
        self, host: Host, exits: tuple[str, ...], local: str, ranked: list[tuple[str, _Path]]
    ) -> int:
        """``local``'s position among the host's devices whose nearest exits are the same
        tied set as its own (so that they take those exits in turn)."""
        mine = _first_ties(ranked)
        if len(mine) < 2:
            return 0
        key = (host.layout_key, exits, mine)
        order = self._tie_groups.get(key)
        if order is None:
            order = [d.name for d in host.layout.devices
                     if _first_ties(self._ranked_exits(host, exits, d.name)) == mine]  # fmt: skip
            self._tie_groups[key] = order
        return order.index(local) if local in order else 0

    # ----- across the network -------------------------------------------------------
    def _external_route(
        self, ha: Host, a: str, hb: Host, b: str
    ) -> tuple[tuple[str, ...], tuple[Link, ...]] | None:
        """Best route leaving ``ha`` and entering ``hb``, over every pair of exits.

        Exits are sorted widest-then-nearest, so branch and bound stops early: a pair whose
        inside-host parts alone are narrower (or as wide and slower) than the best route
        found cannot win. In the usual case only the nearest pair is fully evaluated.
        """
        best: tuple[tuple[float, float, int], tuple[str, ...], tuple[Link, ...]] | None = None
        for ea, pa in self._nearest_exits(ha, a):
            if best is not None and pa.bandwidth < -best[0][0]:
                break
            for eb, pb in self._nearest_exits(hb, b):
                bound_bw = min(pa.bandwidth, pb.bandwidth)
                if best is not None:
                    if bound_bw < -best[0][0]:
                        break  # later exits of hb are no wider
                    if bound_bw == -best[0][0] and pa.latency + pb.latency > best[0][1]:
                        continue
                mid = self._network_path(ha.node_id(ea), hb.node_id(eb))
                if mid is None:
                    continue
                na, la = self._globalize(ha, pa)
                nb, lb = self._globalize(hb, _reverse(pb))
                links = la + mid[1] + lb
                key = _rank(links)
                if best is None or key < best[0]:
                    best = (key, na + mid[0][1:-1] + nb, links)
        return None if best is None else (best[1], best[2])

    def _network_path(self, ea: str, eb: str) -> tuple[tuple[str, ...], tuple[Link, ...]] | None:
        """Widest, then least-latency, then fewest-hop path between two exits.

        The way between switches is found per (source switch, bandwidth threshold): first
        the widest bottleneck the switches allow, capped by the two uplinks; then the least
        latency over links at least that wide. Hosts are never crossed.
        """
        fabric = self._fabric
        switches = fabric.switches
        best: tuple[tuple[float, float, int], tuple[str, ...], tuple[Link, ...]] | None = None
        for la in fabric.external_adjacency(ea):
            sa = la.other(ea)
            if sa == eb:
                key = (-la.bandwidth_gbps, la.latency_us, 1)
                if best is None or key < best[0]:
                    best = (key, (ea, eb), (la,))
                continue
            if sa not in switches:
                continue  # never transit through another host
            widest = self._widest_from(sa)
            for lb in fabric.external_adjacency(eb):
                sb = lb.other(eb)
                if sb not in widest:
                    continue
                target = min(la.bandwidth_gbps, lb.bandwidth_gbps, widest[sb])
                threshold = self._threshold(target) if sa != sb else 0.0
                dist, _ = self._switch_tree(sa, threshold)
                d, h = dist[sb]
                key = (-target, la.latency_us + d + lb.latency_us, h + 2)
                if best is None or key < best[0]:
                    snodes, slinks = self._switch_path(sa, sb, threshold, f"{ea}|{eb}")
                    best = (key, (ea, *snodes, eb), (la, *slinks, lb))
        return None if best is None else (best[1], best[2])

    def _threshold(self, target: float) -> float:
        """The smallest switch-to-switch link bandwidth that is at least ``target``."""
        if self._switch_bandwidths is None:
            self._switch_bandwidths = _switch_bandwidths(self._fabric)
        bws = self._switch_bandwidths
        i = bisect.bisect_left(bws, target)
        return bws[i] if i < len(bws) else target

    def _widest_from(self, source: str) -> dict[str, float]:
        found = self._widest.get(source)
        if found is None:
            found = self._widest[source] = _switch_widest(self._fabric, source)
        return found

    def _switch_tree(
        self, source: str, threshold: float
    ) -> tuple[dict[str, tuple[float, int]], dict[str, tuple[tuple[str, Link], ...]]]:
        key = (source, threshold)
        found = self._trees.get(key)
        if found is None:
            found = self._trees[key] = _switch_dijkstra(self._fabric, source, threshold)
        return found

    def _switch_path(
        self, sa: str, sb: str, threshold: float, flow: str
    ) -> tuple[tuple[str, ...], tuple[Link, ...]]:
        """One of the equal-cost paths from ``sa`` to ``sb``, picked by hashing ``flow``.

        Like ECMP in real switches, different device pairs spread over the parallel
        aggregation and core switches; the same pair always takes the same path (blake2b,
        not Python's per-process randomised ``hash``).
        """
        tree = self._switch_tree(sa, threshold)[1]
        nodes, links = [sb], []
        cur = sb
        h = int.from_bytes(hashlib.blake2b(flow.encode(), digest_size=8).digest())
        while preds := tree[cur]:
            if len(preds) > 1:
                h, pick = divmod(h, len(preds))  # fresh digits of the hash at every tier
                cur, link = preds[pick]
            else:
                cur, link = preds[0]
            nodes.append(cur)
            links.append(link)
        return tuple(reversed(nodes)), tuple(reversed(links))

    # ----- assembling -----------------------------------------------------------------
    def _make(self, a: str, b: str, nodes: tuple[str, ...], links: tuple[Link, ...]) -> Route:
        kinds = [self._fabric.node_kind(n) for n in nodes[1:-1]]
        level, label = classify(links, kinds)
        survive = 1.0
        for link in links:
            survive *= 1.0 - link.type.loss_rate
        return Route(
            src=a,
            dst=b,
            nodes=nodes,
            links=links,
            level=level,
            label=label,
            bandwidth_gbps=min(link.bandwidth_gbps for link in links),
            latency_us=sum(link.latency_us for link in links),
            loss_rate=1.0 - survive,
        )


def _exit_rank(p: _Path) -> tuple[float, float, int]:
    return (-p.bandwidth, p.latency, len(p.links))


def _first_ties(ranked: list[tuple[str, _Path]]) -> tuple[str, ...]:
    """The exits tied for nearest, sorted."""
    if not ranked:
        return ()
    best = _exit_rank(ranked[0][1])
    return tuple(sorted(e for e, p in ranked if _exit_rank(p) == best))


def _spread(ranked: list[tuple[str, _Path]], ordinal: int) -> list[tuple[str, _Path]]:
    """Exits equally near a device, rotated by the device's ordinal among the devices tied
    on the same exits: they use them in turn (one rail each, as NCCL pairs GPUs with NICs),
    not all the first."""
    out: list[tuple[str, _Path]] = []
    i = 0
    while i < len(ranked):
        j = i
        while j < len(ranked) and _exit_rank(ranked[j][1]) == _exit_rank(ranked[i][1]):
            j += 1
        group = ranked[i:j]
        k = ordinal % len(group)
        out += group[k:] + group[:k]
        i = j
    return out


def _self_route(node: str, bandwidth: float) -> Route:
    """A node to itself: no links; its bandwidth is the device's memory bandwidth."""
    return Route(node, node, (node,), (), Level.SELF, "X", bandwidth, 0.0, 0.0)


def _rank(links: Sequence[Link]) -> tuple[float, float, int]:
    return (
        -min(lk.bandwidth_gbps for lk in links),
        sum(lk.latency_us for lk in links),
        len(links),
    )


def _reverse(p: _Path) -> _Path:
    return _Path(tuple(reversed(p.nodes)), tuple(reversed(p.links)), p.bandwidth, p.latency)


def _switch_bandwidths(fabric: Fabric) -> list[float]:
    """Sorted distinct bandwidths of switch-to-switch links."""
    switches = fabric.switches
    return sorted(
        {lk.bandwidth_gbps for lk in fabric.external_links if lk.a in switches and lk.b in switches}
    )


def _switch_widest(fabric: Fabric, source: str) -> dict[str, float]:
    """Largest bottleneck bandwidth from ``source`` to every switch (maximin Dijkstra)."""
    switches = fabric.switches
    best: dict[str, float] = {source: math.inf}
    heap: list[tuple[float, str]] = [(-math.inf, source)]
    done: set[str] = set()
    while heap:
        neg, node = heapq.heappop(heap)
        if node in done:
            continue
        done.add(node)
        for link in fabric.external_adjacency(node):
            nxt = link.other(node)
            if nxt not in switches or nxt in done:
                continue
            cand = min(-neg, link.bandwidth_gbps)
            if cand > best.get(nxt, -1.0):
                best[nxt] = cand
                heapq.heappush(heap, (-cand, nxt))
    return best


def _switch_dijkstra(
    fabric: Fabric, source: str, threshold: float = 0.0
) -> tuple[dict[str, tuple[float, int]], dict[str, tuple[tuple[str, Link], ...]]]:
    """Least-latency (then fewest-hop) paths from ``source`` over network switches only,
    using links of at least ``threshold`` GB/s.

    Returns the distances and, per switch, *every* predecessor on an equal-cost path (in
    the order found), so that paths can be spread as ECMP spreads flows.
    """
    switches = fabric.switches
    dist: dict[str, tuple[float, int]] = {source: (0.0, 0)}
    preds: dict[str, list[tuple[str, Link]]] = {source: []}
    heap: list[tuple[float, int, str]] = [(0.0, 0, source)]
    done: set[str] = set()
    while heap:
        lat, hops, node = heapq.heappop(heap)
        if node in done:
            continue
        done.add(node)
        for link in fabric.external_adjacency(node):
            nxt = link.other(node)
            if nxt not in switches or nxt in done or link.bandwidth_gbps < threshold:
                continue
            cand = (lat + link.latency_us, hops + 1)
            if nxt not in dist or cand < dist[nxt]:
                dist[nxt] = cand
                preds[nxt] = [(node, link)]
                heapq.heappush(heap, (cand[0], cand[1], nxt))
            elif cand == dist[nxt]:
                preds[nxt].append((node, link))
    return dist, {k: tuple(v) for k, v in preds.items()}


_NVLINK_LABEL_MEDIA = frozenset({LinkMedium.NVLINK, LinkMedium.NVSWITCH})


def classify(links: Iterable[Link], transit: Sequence[SwitchKind | None]) -> tuple[Level, str]:
    """Locality level and ``nvidia-smi topo``-style label of a non-empty route."""
    links = tuple(links)
    media = {lk.medium for lk in links}
    if any(m.is_wireless for m in media):
        return Level.WIRELESS, "WIFI"
    net_switches = sum(1 for k in transit if k is not None and k.is_network)
    if net_switches or any(m.is_network for m in media):
        return (Level.NETWORK_SPINE if net_switches > 1 else Level.NETWORK_LEAF), "NET"
    if all(m.is_accelerator_link for m in media):
        count = min(lk.type.count for lk in links)
        prefix = "NV" if media <= _NVLINK_LABEL_MEDIA else "XL"
        return Level.NVLINK, f"{prefix}{count}"
    if LinkMedium.SMP in media:
        return Level.NUMA, "SYS"
    if SwitchKind.CPU_ROOT in transit:
        return Level.PCIE_HOST, "PHB"
    pcie_switches = sum(1 for k in transit if k is SwitchKind.PCIE_SWITCH)
    return Level.PCIE_SWITCH, "PXB" if pcie_switches > 1 else "PIX"
