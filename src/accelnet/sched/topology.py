"""The static shape the scheduler places into: device classes and nested domains.

Built once per fabric (the scheduler keeps it between decisions): which devices are alike
(same model and memory: a *device class*), and the tree of placement domains, NVLink
domain -> host -> leaf -> pod -> fabric, with each domain's children in fabric order.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from accelnet.fabric import DeviceModel, DomainLevel, Fabric

LEVELS: tuple[DomainLevel, ...] = (
    DomainLevel.NVLINK,
    DomainLevel.HOST,
    DomainLevel.LEAF,
    DomainLevel.POD,
    DomainLevel.FABRIC,
)
LEVEL_NAMES = {
    DomainLevel.NVLINK: "NVLink domain",
    DomainLevel.HOST: "host",
    DomainLevel.LEAF: "leaf switch",
    DomainLevel.POD: "pod",
    DomainLevel.FABRIC: "fabric",
}


@dataclass(frozen=True, slots=True)
class DeviceClass:
    """Interchangeable devices: one model with one memory size."""

    key: str
    model: DeviceModel
    memory_gb: float


class Topology:
    """Device classes and the domain tree of one fabric (immutable after construction)."""

    def __init__(self, fabric: Fabric) -> None:
        self.fabric = fabric
        classes: dict[str, DeviceClass] = {}
        cls_of: dict[str, DeviceClass] = {}
        order: dict[str, int] = {}
        for i, d in enumerate(fabric.devices.values()):
            key = f"{d.model.name}/{d.memory_gb:g}GB"
            c = classes.get(key)
            if c is None:
                c = classes[key] = DeviceClass(key, d.model, d.memory_gb)
            cls_of[d.id] = c
            order[d.id] = i
        self.classes: Mapping[str, DeviceClass] = MappingProxyType(classes)
        self.class_of: Mapping[str, DeviceClass] = MappingProxyType(cls_of)
        self.order: Mapping[str, int] = MappingProxyType(order)
        self.levels, self.domain_of = _nested_levels(fabric)
        # children[level][domain] = domains one level down (devices under an NVLink domain)
        self.children: dict[DomainLevel, dict[str, list[str]]] = {lv: {} for lv in self.levels}
        first = self.levels[0]
        bottom = self.domain_of[first]
        for dev in fabric.devices:
            self.children[first].setdefault(bottom[dev], []).append(dev)
        for lower, upper in itertools.pairwise(self.levels):
            seen: set[str] = set()
            low_map, up_map = self.domain_of[lower], self.domain_of[upper]
            for dev in fabric.devices:
                child = low_map[dev]
                if child not in seen:
                    seen.add(child)
                    self.children[upper].setdefault(up_map[dev], []).append(child)
        self.domains_at: dict[DomainLevel, tuple[str, ...]] = {}
        for level in self.levels:
            self.domains_at[level] = tuple(dict.fromkeys(self.domain_of[level].values()))
        self._largest: dict[tuple[str, DomainLevel], int] = {}
        # how many devices of each class a domain has (free or not): for never-fit checks
        self.size: dict[tuple[str, DomainLevel], dict[str, int]] = {}
        for dev, c in cls_of.items():
            for level in self.levels:
                per = self.size.setdefault((c.key, level), {})
                dom = self.domain_of[level][dev]
                per[dom] = per.get(dom, 0) + 1

    def largest(self, cls: str, level: DomainLevel) -> int:
        """Devices of class ``cls`` in the largest domain at ``level`` (free or not)."""
        key = (cls, level)
        found = self._largest.get(key)
        if found is None:
            per = self.size.get(key)
            found = self._largest[key] = max(per.values()) if per else 0
        return found

    def host_of_domain(self, level: DomainLevel, domain: str) -> str:
        """A readable place for a domain key: the host for NVLink domains, else the key."""
        domain = domain.split("@", 1)[0]
        if level is DomainLevel.NVLINK:
            return domain.split("/", 1)[0]
        return domain

    def allowed(self, required: DomainLevel | None) -> tuple[DomainLevel, ...]:
        """Levels a gang may span, tightest first, when ``required`` is its limit."""
        if required is None:
            return self.levels
        return self.levels[: self.levels.index(required) + 1]


def _nested_levels(
    fabric: Fabric,
) -> tuple[tuple[DomainLevel, ...], dict[DomainLevel, Mapping[str, str]]]:
    """Domain levels tightest first, with keys refined so that each nests in the next.

    Usually NVLink domains sit inside hosts; in a multi-node NVLink rack (NVL72) hosts sit
    inside the NVLink domain, and the order becomes host, NVLink domain, leaf, ... A domain
    that straddles its parent is split (its key gets ``@parent``), which keeps every
    placement inside the domain it claims.
    """
    maps = {level: fabric.domains.map(level) for level in LEVELS}
    nvl, host = maps[DomainLevel.NVLINK], maps[DomainLevel.HOST]
    nvl_hosts: dict[str, set[str]] = {}
    for dev, key in nvl.items():
        nvl_hosts.setdefault(key, set()).add(host[dev])
    inside = all(len(hs) == 1 for hs in nvl_hosts.values())
    order = LEVELS if inside else (DomainLevel.HOST, DomainLevel.NVLINK, *LEVELS[2:])
    refined: dict[DomainLevel, Mapping[str, str]] = {order[-1]: maps[order[-1]]}
    for lower, upper in zip(reversed(order[:-1]), reversed(order[1:]), strict=True):
        own, parent = maps[lower], refined[upper]
        seen: dict[str, str] = {}
        nested = all(seen.setdefault(own[d], parent[d]) == parent[d] for d in own)
        refined[lower] = own if nested else {d: f"{own[d]}@{parent[d]}" for d in own}
    return order, {level: refined[level] for level in order}
