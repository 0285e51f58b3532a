"""The assembled fabric: hosts, devices, network switches and links, with lookups.

A :class:`Fabric` is immutable once built by :class:`FabricBuilder`. Intra-host links are
not stored per host: they come from the host's shared :class:`HostLayout` on demand, which
keeps a 131,072-GPU fabric within a few hundred MB. Routes are computed lazily by a
:class:`~accelnet.fabric.routing.Router` that caches per layout and per network switch.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterator, Mapping
from types import MappingProxyType

from accelnet.fabric.domains import Domains
from accelnet.fabric.model import (
    Device,
    DomainLevel,
    Host,
    HostLayout,
    Level,
    Link,
    LinkType,
    Switch,
    SwitchKind,
)
from accelnet.fabric.routing import Route, Router


class FabricError(ValueError):
    """A fabric that cannot be built as described (duplicate or unknown names, bad links)."""


def _check_name(what: str, name: str) -> None:
    if not name or "/" in name or name != name.strip():
        raise FabricError(f"{what} name {name!r} must be non-empty, without '/' or edge spaces")


def _check_capacity(host: str, key: str, value: object, what: str) -> float | None:
    """``value`` as a float when it is a finite number > 0; None stays None (not declared)."""
    if value is None:
        return None
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value <= 0
    ):
        raise FabricError(
            f"host {host!r}: {key} = {value!r} must be a finite number > 0 ({what}), "
            "or None for not declared"
        )
    return float(value)


def _has_node(hosts: Mapping[str, Host], switches: Mapping[str, Switch], node: str) -> bool:
    """Whether ``node`` (``host/local`` or a switch name) is among ``hosts``/``switches``."""
    host, sep, local = node.partition("/")
    if sep:
        h = hosts.get(host)
        return h is not None and h.layout.has_node(local)
    return node in switches


class Fabric:
    """An immutable accelerator fabric. Build one with :class:`FabricBuilder`."""

    def __init__(
        self,
        name: str,
        hosts: tuple[Host, ...],
        devices: Mapping[str, Device],
        switches: Mapping[str, Switch],
        external_links: tuple[Link, ...],
        description: str = "",
    ) -> None:
        self._name = name
        self._description = description
        self._hosts = hosts
        self._hosts_by_name = MappingProxyType({h.name: h for h in hosts})
        self._devices = MappingProxyType(dict(devices))
        self._switches = MappingProxyType(dict(switches))
        self._external = external_links
        adjacency: dict[str, list[Link]] = {}
        for link in external_links:
            adjacency.setdefault(link.a, []).append(link)
            adjacency.setdefault(link.b, []).append(link)
        self._adjacency = MappingProxyType({k: tuple(v) for k, v in adjacency.items()})
        self._router: Router | None = None
        self._domains: Domains | None = None

    # ----- identity -----------------------------------------------------------------
    @property
    def name(self) -> str:
        """The fabric's name (a preset name, the spec's ``name``, or the local hostname)."""
        return self._name

    @property
    def description(self) -> str:
        """Free text from the spec or preset."""
        return self._description

    # ----- hosts and devices --------------------------------------------------------
    @property
    def hosts(self) -> tuple[Host, ...]:
        """Hosts in build order."""
        return self._hosts

    def host(self, name: str) -> Host:
        """The host called ``name``; KeyError naming a few known hosts otherwise."""
        try:
            return self._hosts_by_name[name]
        except KeyError:
            msg = f"no host {name!r} in fabric {self._name!r}; {self._sample_hosts()}"
            raise KeyError(msg) from None

    @property
    def devices(self) -> Mapping[str, Device]:
        """Every device by global id (``host/name``), in build order."""
        return self._devices

    def device(self, ref: str) -> Device:
        """Look a device up by global id, or by local name/index when only one host has it.

        ``"n1/gpu3"`` always works; ``"gpu3"`` and ``"3"`` work when unambiguous (a one-host
        fabric, typically). Raises KeyError with a readable message otherwise.
        """
        found = self._devices.get(ref)
        if found is not None:
            return found
        if "/" not in ref:
            matches = [
                d
                for h in self._hosts
                for d in (self._devices[i] for i in h.device_ids)
                if d.name == ref or str(d.index) == ref
            ]
            if len(matches) == 1:
                return matches[0]
            if len(matches) > 1:
                some = ", ".join(m.id for m in matches[:4])
                raise KeyError(f"device {ref!r} is ambiguous in {self._name!r}: {some}, ...")
        sample = ", ".join(list(self._devices)[:4])
        raise KeyError(
            f"no device {ref!r} in fabric {self._name!r} "
            f"({len(self._devices)} devices, e.g. {sample})"
        )

    # ----- switches and links -------------------------------------------------------
    @property
    def switches(self) -> Mapping[str, Switch]:
        """Network switches (outside hosts) by id."""
        return self._switches

    def host_switches(self, host: str) -> tuple[Switch, ...]:
        """The switches inside ``host`` (NVSwitch, PCIe switches, CPU roots, NICs)."""
        h = self.host(host)
        return tuple(Switch(h.node_id(s.name), s.kind, h.name, s.numa) for s in h.layout.switches)

    @property
    def external_links(self) -> tuple[Link, ...]:
        """Links that leave a host: host to network, switch to switch, host to host."""
        return self._external

    def host_links(self, host: str) -> tuple[Link, ...]:
        """The links inside ``host``, with global node ids."""
        h = self.host(host)
        return tuple(Link(h.node_id(x.a), h.node_id(x.b), x.type) for x in h.layout.links)

    def links(self) -> Iterator[Link]:
        """Every link: each host's internal links, then the external ones."""
        for h in self._hosts:
            yield from self.host_links(h.name)
        yield from self._external

    def external_adjacency(self, node: str) -> tuple[Link, ...]:
        """External links at ``node`` (a network switch, a NIC, or a device)."""
        return self._adjacency.get(node, ())

    def node_kind(self, node: str) -> SwitchKind | None:
        """Switch kind of ``node``, None for a device; KeyError for an unknown node."""
        host, sep, local = node.partition("/")
        if sep:
            return self.host(host).layout.node_kind(local)
        if node in self._switches:
            return self._switches[node].kind
        raise KeyError(f"no node {node!r} in fabric {self._name!r}")

    def has_node(self, node: str) -> bool:
        """Whether ``node`` is a device or switch of this fabric."""
        return _has_node(self._hosts_by_name, self._switches, node)

    # ----- routes and domains -------------------------------------------------------
    @property
    def router(self) -> Router:
        """The fabric's router (created on first use; caches as it answers)."""
        if self._router is None:
            self._router = Router(self)
        return self._router

    def route(self, a: str, b: str) -> Route:
        """The route between two devices (global ids or unambiguous local names)."""
        return self.router.route(self.device(a).id, self.device(b).id)

    def level(self, a: str, b: str) -> Level:
        """Locality level of two devices."""
        return self.route(a, b).level

    @property
    def domains(self) -> Domains:
        """Placement domains (NVLink domain, host, leaf, pod) of every device."""
        if self._domains is None:
            self._domains = Domains(self)
        return self._domains

    def domain(self, device: str, level: DomainLevel) -> str:
        """Key of the domain at ``level`` that ``device`` belongs to."""
        return self.domains.of(self.device(device).id, level)

    # ----- summaries ----------------------------------------------------------------
    def model_counts(self) -> Counter[str]:
        """How many devices of each model."""
        return Counter(d.model.name for d in self._devices.values())

    def _sample_hosts(self) -> str:
        names = [h.name for h in self._hosts[:4]]
        more = ", ..." if len(self._hosts) > 4 else ""
        return f"hosts: {', '.join(names)}{more}"

    def __repr__(self) -> str:
        return (
            f"Fabric({self._name!r}, hosts={len(self._hosts)}, devices={len(self._devices)}, "
            f"switches={len(self._switches)}, external_links={len(self._external)})"
        )


class FabricBuilder:
    """Assembles a :class:`Fabric`; raises :class:`FabricError` on the first bad name.

    Hosts that are given the *same* :class:`HostLayout` object share it, and the router
    computes their intra-host routes once.
    """

    def __init__(self, name: str, description: str = "") -> None:
        self._name = name
        self._description = description
        self._hosts: list[Host] = []
        self._host_names: dict[str, Host] = {}
        self._layout_keys: dict[int, int] = {}
        self._layouts: list[HostLayout] = []
        self._devices: dict[str, Device] = {}
        self._switches: dict[str, Switch] = {}
        self._links: list[Link] = []

    def add_host(
        self,
        name: str,
        layout: HostLayout,
        *,
        uuids: tuple[str | None, ...] | None = None,
        pci_buses: tuple[str | None, ...] | None = None,
        details: tuple[str, ...] | None = None,
        cpus: float | None = None,
        memory_gb: float | None = None,
    ) -> Host:
        """Add a machine built from ``layout``; per-device ``uuids`` etc. are optional.

        ``cpus`` (logical CPU cores) and ``memory_gb`` (host RAM, GB) are what jobs may be
        given on this host beside its devices; None (the default) means not declared, so
        not limited. FabricError naming the host, key and value unless finite and > 0.
        """
        _check_name("host", name)
        if name in self._host_names or name in self._switches:
            raise FabricError(f"duplicate name {name!r}: a host or switch already has it")
        host_cpus = _check_capacity(name, "cpus", cpus, "logical CPU cores")
        host_memory = _check_capacity(name, "memory_gb", memory_gb, "host memory in GB")
        key = self._layout_keys.get(id(layout))
        if key is None:
            key = len(self._layouts)
            self._layout_keys[id(layout)] = key
            self._layouts.append(layout)
        ids: list[str] = []
        for i, slot in enumerate(layout.devices):
            did = f"{name}/{slot.name}"
            self._devices[did] = Device(
                id=did,
                host=name,
                name=slot.name,
                index=i,
                model=slot.model,
                numa=slot.numa,
                memory_gb=slot.memory_gb,
                power_limit_w=slot.power_limit_w,
                uuid=uuids[i] if uuids else None,
                pci_bus=pci_buses[i] if pci_buses else None,
                detail=details[i] if details else "",
            )
            ids.append(did)
        host = Host(name, layout, key, tuple(ids), host_cpus, host_memory)
        self._hosts.append(host)
        self._host_names[name] = host
        return host

    def add_switch(self, name: str, kind: SwitchKind, pod: str | None = None) -> Switch:
        """Add a network switch (leaf, spine, core, Ethernet, wireless AP, or NVSwitch)."""
        _check_name("switch", name)
        if name in self._switches or name in self._host_names:
            raise FabricError(f"duplicate name {name!r}: a host or switch already has it")
        if kind in (SwitchKind.PCIE_SWITCH, SwitchKind.CPU_ROOT, SwitchKind.NIC):
            raise FabricError(f"switch {name!r}: a {kind.value} belongs inside a host")
        sw = Switch(name, kind, None, None, pod)
        self._switches[name] = sw
        return sw

    @property
    def switch_names(self) -> tuple[str, ...]:
        """Network switches added so far."""
        return tuple(self._switches)

    @property
    def host_names(self) -> tuple[str, ...]:
        """Hosts added so far."""
        return tuple(self._host_names)

    def has_host(self, name: str) -> bool:
        """Whether a host called ``name`` was added."""
        return name in self._host_names

    def host_nodes(self, name: str) -> tuple[str, ...]:
        """Local node names of host ``name``."""
        return self._host_names[name].layout.node_names

    def has_node(self, node: str) -> bool:
        """Whether ``node`` (global id) was added so far."""
        return _has_node(self._host_names, self._switches, node)

    def add_link(self, a: str, b: str, type: LinkType) -> Link:
        """Add an external link between two existing nodes (global ids)."""
        for end in (a, b):
            if not self.has_node(end):
                raise FabricError(f"link {a} -- {b}: no node {end!r}")
        if a == b:
            raise FabricError(f"link {a} -- {b}: a link needs two different ends")
        if a.partition("/")[0] == b.partition("/")[0] and "/" in a:
            raise FabricError(f"link {a} -- {b}: both ends are in one host; use host links")
        link = Link(a, b, type)
        self._links.append(link)
        return link

    def build(self) -> Fabric:
        """The finished fabric."""
        if not self._hosts:
            raise FabricError(f"fabric {self._name!r} has no hosts")
        return Fabric(
            self._name,
            tuple(self._hosts),
            self._devices,
            self._switches,
            tuple(self._links),
            self._description,
        )
