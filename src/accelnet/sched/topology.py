"""The static shape the scheduler places into: device classes and a tree of domains.

Built once per fabric (the scheduler keeps it between decisions). Devices that are alike
(same model and memory) form a *device class*. Placement domains (NVLink domain, host,
leaf, pod, fabric) form a tree, but not always in the same order: in an ordinary server
the NVLink domain sits inside the host, while in a multi-node NVLink rack (NVL72) the hosts
(trays) sit inside one NVLink domain, and such a domain may even span two leaf switches.
So each device's chain of domains is ordered by size, tightest first; a node of the tree is
one domain, and a domain that straddles two parents (a rare hybrid) is split, its key
suffixed with ``@parent``, so that the tree stays a tree and every placement stays inside
the domains it claims.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from accelnet.fabric import DeviceModel, DomainLevel, Fabric

LEVELS: tuple[DomainLevel, ...] = (
    DomainLevel.NVLINK,
    DomainLevel.HOST,
    DomainLevel.LEAF,
    DomainLevel.POD,
    DomainLevel.FABRIC,
)
DEPTHS = len(LEVELS)  # every device's chain has one domain of each level
CPU_UNITS = 100  # the finest part of a CPU core a job can ask for: 0.01
MEMORY_UNITS = 1000  # host memory is counted in MB (GB = 1,000 MB = 10^9 bytes)


def cpu_units(cpus: float) -> int:
    """CPU cores as whole units of 1/CPU_UNITS."""
    return round(cpus * CPU_UNITS)


def memory_units(gb: float) -> int:
    """Host memory in GB as whole MB (rounded up: a request never gets less than asked)."""
    return math.ceil(gb * MEMORY_UNITS - 1e-6)


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


@dataclass(frozen=True, slots=True)
class Node:
    """One domain of the tree: its level, its fabric key, and its place in the tree.

    ``depth`` counts from the fabric (0) down to the tightest domains (``DEPTHS - 1``);
    ``within`` holds the levels of the node and all its ancestors: a gang placed inside
    the node is inside one domain of each of those levels.
    """

    id: str
    level: DomainLevel
    key: str
    depth: int
    parent: str | None
    within: frozenset[DomainLevel]


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
        self.nodes: dict[str, Node] = {}
        self.chain: dict[str, tuple[str, ...]] = {}  # device -> node ids, tightest first
        self.children: dict[str, list[str]] = {}  # node -> child nodes, or devices
        self._build_tree()
        # nodes in fabric order (that of their first device): ties between domains go to
        # the first, whatever the history of the index that asks
        self.node_list: tuple[str, ...] = tuple(self.nodes)
        self.node_order: dict[str, int] = {n: i for i, n in enumerate(self.node_list)}
        self.nodes_at: dict[int, tuple[str, ...]] = {}
        for depth in range(DEPTHS):
            self.nodes_at[depth] = tuple(n.id for n in self.nodes.values() if n.depth == depth)
        # devices of each class per *fabric* domain (unsplit), for never-fit checks
        self.size: dict[tuple[str, DomainLevel], dict[str, int]] = {}
        for dev, c in cls_of.items():
            for level in LEVELS:
                per = self.size.setdefault((c.key, level), {})
                dom = self.domain_of[level][dev]
                per[dom] = per.get(dom, 0) + 1
        self._largest: dict[tuple[str, DomainLevel], int] = {}
        self._hosts(fabric)
        # memo of model-name resolution (request.canonical_models), keyed by the names
        self.resolved: dict[tuple[str, ...], tuple[tuple[str, ...], tuple[str, ...]]] = {}
        # per request shape (sched.request): eligible classes and never-fit verdicts
        self.eligible: dict[tuple[object, ...], tuple[DeviceClass, ...]] = {}
        self.rejections: dict[tuple[object, ...], Any] = {}
        self.requests: dict[tuple[object, ...], tuple[Any, ...]] = {}  # a request's fields
        # per device class: each node's devices of it (sched.reserve)
        self.class_devices: dict[str, dict[str, list[str]]] = {}
        self.hold_nodes: dict[tuple[object, ...], list[str]] = {}  # sched.reserve candidates

    def _hosts(self, fabric: Fabric) -> None:
        """Each device's host, and the CPU cores and memory hosts declare (as whole
        :data:`CPU_UNITS` and :data:`MEMORY_UNITS`; a host that declares none is not
        limited by them)."""
        self.host_of: dict[str, str] = {d.id: d.host for d in fabric.devices.values()}
        self.hosts: tuple[str, ...] = tuple(h.name for h in fabric.hosts if h.device_ids)
        self.host_order: dict[str, int] = {h: i for i, h in enumerate(self.hosts)}
        self.host_devices: dict[str, tuple[str, ...]] = {h.name: h.device_ids for h in fabric.hosts}
        self.host_cpu: dict[str, int] = {}
        self.host_mem: dict[str, int] = {}
        for h in fabric.hosts:
            if h.cpus is not None:
                self.host_cpu[h.name] = cpu_units(h.cpus)
            if h.memory_gb is not None:
                self.host_mem[h.name] = memory_units(h.memory_gb)
        self.limited_hosts: tuple[str, ...] = tuple(
            h for h in self.hosts if h in self.host_cpu or h in self.host_mem
        )
        self.most_cpu = max(self.host_cpu.values(), default=0)
        self.most_mem = max(self.host_mem.values(), default=0)

    def _build_tree(self) -> None:
        sizes: dict[DomainLevel, dict[str, int]] = {lv: {} for lv in LEVELS}
        for level in LEVELS:
            per = sizes[level]
            for key in self.domain_of[level].values():
                per[key] = per.get(key, 0) + 1
        rank = {lv: i for i, lv in enumerate(LEVELS)}
        for dev in self.fabric.devices:
            levels = sorted(LEVELS, key=lambda lv: (sizes[lv][self.domain_of[lv][dev]], rank[lv]))
            parent: str | None = None
            within: frozenset[DomainLevel] = frozenset()
            chain: list[str] = []
            for depth, level in enumerate(reversed(levels)):
                key = self.domain_of[level][dev]
                node_id = f"{level.value}:{key}"
                existing = self.nodes.get(node_id)
                if existing is not None and existing.parent != parent:
                    node_id = f"{node_id}@{parent}"  # straddles two parents: split it
                    existing = self.nodes.get(node_id)
                within = within | {level}
                if existing is None:
                    self.nodes[node_id] = Node(node_id, level, key, depth, parent, within)
                    if parent is not None:
                        self.children.setdefault(parent, []).append(node_id)
                chain.append(node_id)
                parent = node_id
            self.chain[dev] = tuple(reversed(chain))
            assert parent is not None
            self.children.setdefault(parent, []).append(dev)

    def largest(self, cls: str, level: DomainLevel) -> int:
        """Devices of class ``cls`` in the largest fabric domain at ``level`` (free or not)."""
        key = (cls, level)
        found = self._largest.get(key)
        if found is None:
            per = self.size.get(key)
            found = self._largest[key] = max(per.values()) if per else 0
        return found

    def place_name(self, node: str) -> str:
        """A readable place for a node: the host for NVLink domains, else the domain key."""
        n = self.nodes[node]
        if n.level is DomainLevel.NVLINK:
            return n.key.split("/", 1)[0]
        return n.key

    def span(self, devices: tuple[str, ...]) -> DomainLevel:
        """The tightest fabric level with one domain holding all ``devices``."""
        for level in LEVELS:
            m = self.domain_of[level]
            first = m[devices[0]]
            if all(m[d] == first for d in devices):
                return level
        return DomainLevel.FABRIC
