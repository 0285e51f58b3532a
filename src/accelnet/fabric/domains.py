"""Placement domains: which devices share an NVLink domain, a host, a leaf switch, a pod.

Schedulers keep a job inside the tightest domain that fits it (Kueue's topology-aware
scheduling, Slurm's topology/tree). Keys are readable strings:

- NVLINK: ``"<host>/<first device>"`` of a group of devices joined by accelerator links
  (through an NVSwitch or directly); multi-node NVLink domains merge across hosts;
- HOST: the host name;
- LEAF: the network switch the host's first adapter plugs into (the host name when the
  host has no network);
- POD: the leaf's ``pod`` attribute, else the fabric name (the host name without network);
- FABRIC: the fabric name.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING

from accelnet.fabric.model import DomainLevel, Host, HostLayout, SwitchKind

if TYPE_CHECKING:
    from accelnet.fabric.fabric import Fabric


class _UnionFind:
    def __init__(self) -> None:
        self.parent: dict[str, str] = {}

    def find(self, x: str) -> str:
        parent = self.parent
        root = x
        while parent.setdefault(root, root) != root:
            root = parent[root]
        while parent[x] != root:
            parent[x], x = root, parent[x]
        return root

    def union(self, a: str, b: str) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[max(ra, rb)] = min(ra, rb)


def _local_nvlink_groups(layout: HostLayout) -> dict[str, str]:
    """Map each local device to the first device of its accelerator-link group."""
    uf = _UnionFind()
    order = {d.name: i for i, d in enumerate(layout.devices)}
    for link in layout.links:
        if not link.type.medium.is_accelerator_link:
            continue
        ends = [link.a, link.b]
        if all(e in order or layout.node_kind(e) is SwitchKind.NVSWITCH for e in ends):
            uf.union(*ends)
    groups: dict[str, list[str]] = {}
    for d in layout.devices:
        groups.setdefault(uf.find(d.name), []).append(d.name)
    out: dict[str, str] = {}
    for members in groups.values():
        first = min(members, key=order.__getitem__)
        for m in members:
            out[m] = first
    return out


class Domains:
    """Domain keys of every device of a fabric, computed per level on first use."""

    def __init__(self, fabric: Fabric) -> None:
        self._fabric = fabric
        self._maps: dict[DomainLevel, Mapping[str, str]] = {}
        self._members: dict[DomainLevel, Mapping[str, tuple[str, ...]]] = {}

    def of(self, device: str, level: DomainLevel) -> str:
        """Domain key of ``device`` (global id) at ``level``."""
        return self.map(level)[device]

    def map(self, level: DomainLevel) -> Mapping[str, str]:
        """Device id -> domain key, for every device."""
        found = self._maps.get(level)
        if found is None:
            found = self._maps[level] = MappingProxyType(self._compute(level))
        return found

    def members(self, level: DomainLevel) -> Mapping[str, tuple[str, ...]]:
        """Domain key -> device ids, in fabric order."""
        found = self._members.get(level)
        if found is None:
            groups: dict[str, list[str]] = {}
            for dev, key in self.map(level).items():
                groups.setdefault(key, []).append(dev)
            found = self._members[level] = MappingProxyType(
                {k: tuple(v) for k, v in groups.items()}
            )
        return found

    def _compute(self, level: DomainLevel) -> dict[str, str]:
        fabric = self._fabric
        if level is DomainLevel.FABRIC:
            return dict.fromkeys(fabric.devices, fabric.name)
        if level is DomainLevel.HOST:
            return {d.id: d.host for d in fabric.devices.values()}
        if level is DomainLevel.NVLINK:
            return self._nvlink()
        out: dict[str, str] = {}
        for host in fabric.hosts:
            leaf = self._leaf(host)
            if level is DomainLevel.LEAF:
                key = leaf or host.name
            elif leaf is None:
                key = host.name
            else:
                key = fabric.switches[leaf].pod or fabric.name
            for d in host.device_ids:
                out[d] = key
        return out

    def _leaf(self, host: Host) -> str | None:
        fabric = self._fabric
        for s in host.layout.switches:
            if s.kind is not SwitchKind.NIC:
                continue
            nic = host.node_id(s.name)
            for link in fabric.external_adjacency(nic):
                other = link.other(nic)
                if other in fabric.switches and fabric.switches[other].kind.is_network:
                    return other
        return None

    def _nvlink(self) -> dict[str, str]:
        fabric = self._fabric
        per_layout: dict[int, dict[str, str]] = {}
        out: dict[str, str] = {}
        for host in fabric.hosts:
            local = per_layout.get(host.layout_key)
            if local is None:
                local = per_layout[host.layout_key] = _local_nvlink_groups(host.layout)
            prefix = host.name + "/"
            for d in host.layout.devices:
                out[prefix + d.name] = prefix + local[d.name]
        # Multi-node NVLink: devices tied to the same external NVSwitch share one domain.
        uf = _UnionFind()
        touched = False
        for link in fabric.external_links:
            if not link.medium.is_accelerator_link:
                continue
            ends = [out.get(e, e) for e in (link.a, link.b)]
            uf.union(*ends)
            touched = True
        if touched:
            first: dict[str, str] = {}
            for key in out.values():  # fabric order: a domain is named after its first device
                first.setdefault(uf.find(key), key)
            for dev, key in out.items():
                out[dev] = first[uf.find(key)]
        return out
