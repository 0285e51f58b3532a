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
        self.domain_of: dict[DomainLevel, Mapping[str, str]] = {
            level: fabric.domains.map(level) for level in LEVELS
        }
        # children[level][domain] = domains one level down (devices under an NVLink domain)
        self.children: dict[DomainLevel, dict[str, list[str]]] = {lv: {} for lv in LEVELS}
        nvl = self.domain_of[DomainLevel.NVLINK]
        for dev in fabric.devices:
            self.children[DomainLevel.NVLINK].setdefault(nvl[dev], []).append(dev)
        for lower, upper in itertools.pairwise(LEVELS):
            seen: set[str] = set()
            low_map, up_map = self.domain_of[lower], self.domain_of[upper]
            for dev in fabric.devices:
                child = low_map[dev]
                if child not in seen:
                    seen.add(child)
                    self.children[upper].setdefault(up_map[dev], []).append(child)
        self.domains_at: dict[DomainLevel, tuple[str, ...]] = {}
        for level in LEVELS:
            self.domains_at[level] = tuple(dict.fromkeys(self.domain_of[level].values()))
        # how many devices of each class a domain has (free or not): for never-fit checks
        self.size: dict[tuple[str, DomainLevel], dict[str, int]] = {}
        for dev, c in cls_of.items():
            for level in LEVELS:
                per = self.size.setdefault((c.key, level), {})
                dom = self.domain_of[level][dev]
                per[dom] = per.get(dom, 0) + 1

    def largest(self, cls: str, level: DomainLevel) -> int:
        """Devices of class ``cls`` in the largest domain at ``level`` (free or not)."""
        per = self.size.get((cls, level))
        return max(per.values()) if per else 0

    def host_of_domain(self, level: DomainLevel, domain: str) -> str:
        """A readable place for a domain key: the host for NVLink domains, else the key."""
        if level is DomainLevel.NVLINK:
            return domain.split("/", 1)[0]
        return domain
