"""What each Ray node is: its devices, found by accelnet's discovery on the node itself.

:func:`describe_node` runs as a Ray task pinned to the node it describes (node affinity,
not soft). It runs :func:`accelnet.fabric.discovery.discover` there (psutil, NVML with its
NVLink/PCIe topology on GPU nodes), or, on a node told to *emulate* a machine, builds
that machine's layout instead:

- the node label ``accelnet.io/emulate`` (``ray start --labels accelnet.io/emulate=4xL4``),
  else the variable ``ACCELNET_EMULATE`` in the node's environment, names a
  preset (``pcie-4xL4``: its first host) or device groups (``4xL4``, ``2xT4_1xL4``:
  groups joined by ``_``, ``+`` or ``,``);
- the label ``accelnet.io/host`` (else ``ACCELNET_HOST``) names the fabric host the node
  is; without one, the node's host name.

A :class:`NodeReport` is plain data (device models are catalog objects that do not
pickle; they travel by value and come back as the catalog's own objects).
:func:`build_fabric_of` makes one fabric of the reports: one host per node, each
host's network adapter (one is added where discovery found none) on one leaf switch
(``ray-leaf``, links of ``network`` type, Eth-25G by default).
"""

from __future__ import annotations

import dataclasses
import os
import re
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from accelnet.fabric.build import build_fabric, parse_spec
from accelnet.fabric.catalog import find_device_model, link_type
from accelnet.fabric.errors import FabricSpecError
from accelnet.fabric.fabric import Fabric, FabricBuilder, FabricError
from accelnet.fabric.model import (
    DeviceKind,
    DeviceModel,
    Host,
    HostLayout,
    LinkType,
    LocalDevice,
    LocalLink,
    LocalSwitch,
    Precision,
    SwitchKind,
)
from accelnet.fabric.presets import load_preset, preset_names

if TYPE_CHECKING:
    from accelnet.fabric.discovery import CpuMode

EMULATE_LABEL = "accelnet.io/emulate"
HOST_LABEL = "accelnet.io/host"
EMULATE_ENV = "ACCELNET_EMULATE"
HOST_ENV = "ACCELNET_HOST"
LEAF = "ray-leaf"
DEFAULT_NETWORK = "Eth-25G"
_GROUPS = re.compile(r"[_+,\s]+")


class EmulationError(ValueError):
    """An ``accelnet.io/emulate`` value that names no preset and no device groups."""


@dataclass(frozen=True, slots=True)
class NodeReport:
    """One Ray node as discovery (or emulation) found it; plain data.

    ``devices``: per device ``(name, model, numa, memory_gb, power_limit_w, uuid,
    pci_bus, detail)`` with ``model`` as :func:`model_to_data` makes it; ``switches``:
    ``(name, kind, numa)``; ``links``: ``(a, b, LinkType)``.
    """

    node_id: str
    host: str  # the fabric host this node is (label, variable or host name)
    named: bool  # the host name was given (label or variable), not the machine's name
    hostname: str
    emulated: bool
    emulate: str | None
    sockets: int
    devices: tuple[tuple[Any, ...], ...]
    switches: tuple[tuple[str, str, int | None], ...]
    links: tuple[tuple[str, str, LinkType], ...]
    pid: int
    notes: tuple[str, ...] = ()

    @property
    def device_names(self) -> tuple[str, ...]:
        """The devices' local names, in layout order."""
        return tuple(d[0] for d in self.devices)

    def signature(self) -> tuple[tuple[str, str], ...]:
        """(name, model) of every device: what must match a declared host."""
        return tuple((d[0], d[1]["name"]) for d in self.devices)

    def describe(self) -> str:
        """``4 x L4 (emulated)``-style summary."""
        counts: dict[str, int] = {}
        for _, model in self.signature():
            counts[model] = counts.get(model, 0) + 1
        what = ", ".join(f"{n} x {m}" for m, n in counts.items()) or "no devices"
        return what + (" (emulated)" if self.emulated else "")


# ----- models and layouts as plain data -------------------------------------------------
def model_to_data(m: DeviceModel) -> dict[str, Any]:
    """A device model as plain data (:func:`model_from_data` reverses it)."""
    data = {f.name: getattr(m, f.name) for f in dataclasses.fields(m)}
    data["kind"] = m.kind.value
    data["peak_tflops"] = {p.value: v for p, v in m.peak_tflops.items()}
    return data


def model_from_data(data: Mapping[str, Any]) -> DeviceModel:
    """The catalog's own model of that name (models compare by identity), or a new one."""
    known = find_device_model(str(data["name"]))
    if known is not None and known.name == data["name"]:
        return known
    fields = dict(data)
    fields["kind"] = DeviceKind(fields["kind"])
    fields["peak_tflops"] = {Precision(p): v for p, v in fields["peak_tflops"].items()}
    fields["aliases"] = tuple(fields.get("aliases", ()))
    return DeviceModel(**fields)


def layout_parts(
    layout: HostLayout,
    uuids: Sequence[str | None] = (),
    buses: Sequence[str | None] = (),
    details: Sequence[str] = (),
) -> tuple[tuple[tuple[Any, ...], ...], tuple[tuple[str, str, int | None], ...],
           tuple[tuple[str, str, LinkType], ...]]:  # fmt: skip
    """A layout (and per-device extras) as the plain data a :class:`NodeReport` holds."""
    devices = tuple(
        (d.name, model_to_data(d.model), d.numa, d.memory_gb, d.power_limit_w,
         uuids[i] if i < len(uuids) else None, buses[i] if i < len(buses) else None,
         details[i] if i < len(details) else "")
        for i, d in enumerate(layout.devices)
    )  # fmt: skip
    switches = tuple((s.name, s.kind.value, s.numa) for s in layout.switches)
    links = tuple((lk.a, lk.b, lk.type) for lk in layout.links)
    return devices, switches, links


def layout_of(report: NodeReport) -> HostLayout:
    """The host layout a report describes."""
    devices = tuple(
        LocalDevice(d[0], model_from_data(d[1]), d[2], d[3], d[4]) for d in report.devices
    )
    switches = tuple(LocalSwitch(n, SwitchKind(k), numa) for n, k, numa in report.switches)
    links = tuple(LocalLink(a, b, t) for a, b, t in report.links)
    return HostLayout(devices, switches, links, report.sockets)


def with_nic(layout: HostLayout, pcie: str = "PCIe4x16") -> HostLayout:
    """``layout`` with a network adapter ``nic0`` on socket 0 if it has no adapter."""
    if any(s.kind is SwitchKind.NIC for s in layout.switches):
        return layout
    root = next((s.name for s in layout.switches if s.kind is SwitchKind.CPU_ROOT), None)
    if root is None:
        return layout
    nic = LocalSwitch("nic0", SwitchKind.NIC, 0)
    return HostLayout(
        layout.devices,
        (*layout.switches, nic),
        (*layout.links, LocalLink("nic0", root, link_type(pcie))),
        layout.sockets,
    )


def first_nic(layout: HostLayout) -> str | None:
    """The name of the layout's first network adapter (None if it has none)."""
    return next((s.name for s in layout.switches if s.kind is SwitchKind.NIC), None)


# ----- on the node ----------------------------------------------------------------------
def emulated_layout(value: str) -> HostLayout:
    """The layout an ``accelnet.io/emulate`` value names: a preset's first host, or device
    groups (``4xL4``, ``2xT4_1xL4``) on one socket with one 25GbE adapter. Raises
    :class:`EmulationError` naming the presets."""
    value = value.strip()
    if value in preset_names():
        return load_preset(value).hosts[0].layout
    groups = [g for g in _GROUPS.split(value) if g]
    spec = {"name": "emulated", "hosts": [{"name": "node", "devices": groups,
                                           "nics": "1xEth-25G"}]}  # fmt: skip
    try:
        return build_fabric(parse_spec(spec, f"{EMULATE_LABEL}={value}")).hosts[0].layout
    except (FabricSpecError, FabricError, ValueError) as exc:
        why = " ".join(str(exc).split())
        raise EmulationError(
            f"{EMULATE_LABEL} = {value!r}: not a preset and not device groups like 4xL4 or "
            f"2xT4_1xL4 ({why}); presets: {', '.join(preset_names())}"
        ) from None


def describe_node(
    node_id: str, labels: Mapping[str, str], cpu_devices: CpuMode = "per-core"
) -> NodeReport:
    """This node (run it *on* the node: a task pinned there): discovered, or emulated as
    its label or environment says. Never raises for a missing GPU or NVML; raises
    :class:`EmulationError` for a bad emulation value."""
    emulate = labels.get(EMULATE_LABEL) or os.environ.get(EMULATE_ENV) or None
    given = labels.get(HOST_LABEL) or os.environ.get(HOST_ENV) or None
    hostname = (socket.gethostname().split(".")[0] or "localhost").replace("/", "-")
    host = given or hostname
    notes: tuple[str, ...] = ()
    if emulate:
        layout = emulated_layout(emulate)
        devices, switches, links = layout_parts(with_nic(layout))
        sockets = layout.sockets
    else:
        from accelnet.fabric.discovery import discover  # noqa: PLC0415 (reads the machine)

        found = discover(cpu_devices, hostname=host)
        h: Host = found.fabric.hosts[0]
        devs = [found.fabric.devices[i] for i in h.device_ids]
        devices, switches, links = layout_parts(
            with_nic(h.layout), [d.uuid for d in devs], [d.pci_bus for d in devs],
            [d.detail for d in devs],
        )  # fmt: skip
        sockets = h.layout.sockets
        notes = found.notes
    return NodeReport(
        node_id=node_id, host=host, named=given is not None, hostname=hostname,
        emulated=bool(emulate), emulate=emulate, sockets=sockets, devices=devices,
        switches=switches, links=links, pid=os.getpid(), notes=notes,
    )  # fmt: skip


# ----- the fabric -----------------------------------------------------------------------
def unique_hosts(reports: Sequence[NodeReport]) -> list[NodeReport]:
    """The reports with distinct host names: nodes that share a machine's name and were
    given none get ``<name>-<node id prefix>``."""
    counts: dict[str, int] = {}
    for r in reports:
        counts[r.host] = counts.get(r.host, 0) + 1
    out = []
    for r in reports:
        clash = counts[r.host] > 1 and not r.named
        out.append(dataclasses.replace(r, host=f"{r.host}-{r.node_id[:6]}") if clash else r)
    return out


def build_fabric_of(
    reports: Sequence[NodeReport], name: str = "ray", network: str = DEFAULT_NETWORK
) -> Fabric:
    """One fabric of the nodes: a host per node, its first adapter on leaf ``ray-leaf``
    with a ``network`` link. Raises FabricError for duplicate host names."""
    link = link_type(network)
    builder = FabricBuilder(name, f"a Ray cluster of {len(reports)} node(s)")
    builder.add_switch(LEAF, SwitchKind.LEAF)
    shared: dict[tuple[Any, ...], HostLayout] = {}
    for r in reports:
        key = (r.sockets, r.signature(), r.switches, r.links)
        layout = shared.get(key)
        if layout is None:
            layout = shared[key] = layout_of(r)
        builder.add_host(
            r.host, layout, uuids=tuple(d[5] for d in r.devices),
            pci_buses=tuple(d[6] for d in r.devices), details=tuple(d[7] for d in r.devices),
        )  # fmt: skip
        nic = first_nic(layout)
        if nic is not None:
            builder.add_link(f"{r.host}/{nic}", LEAF, link)
    return builder.build()


def mismatch(fabric: Fabric, report: NodeReport) -> str | None:
    """Why the node cannot be the fabric's host of its name (None: it can)."""
    try:
        host = fabric.host(report.host)
    except KeyError:
        names = ", ".join(h.name for h in fabric.hosts[:8])
        return f"the fabric has no host {report.host!r} (hosts: {names})"
    want = tuple((fabric.devices[d].name, fabric.devices[d].model.name) for d in host.device_ids)
    if want != report.signature():
        shown = ", ".join(f"{n}={m}" for n, m in report.signature()) or "none"
        return f"host {report.host} should have {', '.join(f'{n}={m}' for n, m in want)}; " \
               f"the node has {shown}"  # fmt: skip
    return None
