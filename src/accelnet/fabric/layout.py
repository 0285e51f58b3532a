"""Build the inside of a machine (a :class:`HostLayout`) from a few parameters.

The parameters are those a user writes in a fabric file: which devices, how many CPU
sockets, how the accelerators are joined (NVSwitch, full mesh, bridged pairs, DGX-1's hybrid
cube mesh, or not at all), how many PCIe switches sit between the devices and the CPUs, and
which network adapters the host has. Devices are spread evenly over PCIe switches, switches
over sockets, and adapters over switches, the way DGX and HGX boards pair them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from itertools import combinations

from accelnet.fabric.catalog import bundle, link_type
from accelnet.fabric.model import (
    DeviceKind,
    DeviceModel,
    HostLayout,
    LinkMedium,
    LinkType,
    LocalDevice,
    LocalLink,
    LocalSwitch,
    SwitchKind,
)

# On-package attachment of CPU cores and integrated GPUs to their socket's memory system.
MEMBUS = LinkType(LinkMedium.PCIE, 100.0, 0.1, "on-package")


class NVLinkStyle(StrEnum):
    """How a host's accelerators are joined to each other."""

    NONE = "none"
    NVSWITCH = "nvswitch"  # every device to one NVSwitch fabric (DGX/HGX A100, H100, B200)
    MESH = "mesh"  # every pair directly (HGX A100 4-GPU, MI300X platform)
    PAIRS = "pairs"  # bridged pairs 0-1, 2-3, ... (PCIe cards with NVLink bridges)
    CUBE_MESH = "cube-mesh"  # DGX-1's hybrid cube mesh (8 GPUs, 6 links each)


# DGX-1 (V100) NVLink counts between GPU pairs, as nvidia-smi topo -m prints them.
CUBE_MESH_LINKS: tuple[tuple[int, int, int], ...] = (
    (0, 1, 1), (0, 2, 1), (0, 3, 2), (0, 4, 2),
    (1, 2, 2), (1, 3, 1), (1, 5, 2),
    (2, 3, 2), (2, 6, 1),
    (3, 7, 1),
    (4, 5, 1), (4, 6, 1), (4, 7, 2),
    (5, 6, 2), (5, 7, 1),
    (6, 7, 2),
)  # fmt: skip


class LayoutError(ValueError):
    """Parameters that describe no possible machine; the message says which and why."""


@dataclass(frozen=True, slots=True)
class Slot:
    """One device to place: its model, and optional overrides."""

    model: DeviceModel
    memory_gb: float | None = None
    power_limit_w: float | None = None
    numa: int | None = None


def _device_names(slots: Sequence[Slot]) -> list[str]:
    counters: dict[DeviceKind, int] = {}
    names = []
    for s in slots:
        n = counters.get(s.model.kind, 0)
        counters[s.model.kind] = n + 1
        names.append(f"{s.model.kind.value}{n}")
    return names


def _attach_type(model: DeviceModel) -> LinkType:
    if model.kind is DeviceKind.CPU or model.name.startswith("Jetson"):
        return MEMBUS
    return link_type(model.pcie_type)


def _nvlink_type(model: DeviceModel, override: str | None) -> LinkType:
    name = override or model.nvlink_type
    if name is None:
        raise LayoutError(
            f"{model.name} has no NVLink (or similar) in the catalog; "
            "give nvlink_type (e.g. NVLink4) or use nvlink: none"
        )
    return link_type(name)


def make_layout(
    slots: Sequence[Slot],
    *,
    sockets: int = 1,
    nvlink: NVLinkStyle = NVLinkStyle.NONE,
    nvlink_type: str | None = None,
    nvlink_links: int | None = None,
    pcie_type: str | None = None,
    pcie_switches: int = 0,
    nics: Sequence[str] = (),
    smp_type: str = "UPI",
    extra_links: Sequence[tuple[str, str, LinkType]] = (),
) -> HostLayout:
    """A host layout; raises :class:`LayoutError` (or ``UnknownNameError``) on bad input.

    ``nics`` lists the link type of each network adapter (``["IB-NDR"] * 8``); the adapters
    are named ``nic0``, ``nic1``, ... and their uplinks are added by the fabric, not here.
    """
    if sockets < 1:
        raise LayoutError(f"sockets must be >= 1, got {sockets}")
    if pcie_switches < 0:
        raise LayoutError(f"pcie_switches must be >= 0, got {pcie_switches}")
    names = _device_names(slots)
    accel = [i for i, s in enumerate(slots) if s.model.kind is not DeviceKind.CPU]
    cpus = [i for i, s in enumerate(slots) if s.model.kind is DeviceKind.CPU]
    host_pcie = link_type(pcie_type) if pcie_type else _host_pcie(slots)

    switches = [LocalSwitch(f"socket{k}", SwitchKind.CPU_ROOT, k) for k in range(sockets)]
    links: list[LocalLink] = []
    smp = link_type(smp_type)
    for x, y in combinations(range(sockets), 2):
        if sockets <= 4 or y == x + 1:
            links.append(LocalLink(f"socket{x}", f"socket{y}", smp))
    pswitch_socket = [j * sockets // pcie_switches for j in range(pcie_switches)]
    for j, k in enumerate(pswitch_socket):
        switches.append(LocalSwitch(f"pcie{j}", SwitchKind.PCIE_SWITCH, k))
        links.append(LocalLink(f"pcie{j}", f"socket{k}", host_pcie))

    numa = [0] * len(slots)
    for rank, i in enumerate(accel):
        want = slots[i].numa
        if want is not None and pcie_switches == 0:
            parent, numa[i] = _socket_of(want, sockets, names[i])
        elif pcie_switches:
            j = rank * pcie_switches // len(accel)
            parent, numa[i] = f"pcie{j}", pswitch_socket[j]
        else:
            k = rank * sockets // len(accel)
            parent, numa[i] = f"socket{k}", k
        links.append(LocalLink(names[i], parent, _attach_type(slots[i].model)))
    for rank, i in enumerate(cpus):
        want = slots[i].numa
        k = want if want is not None else rank * sockets // len(cpus)
        parent, numa[i] = _socket_of(k, sockets, names[i])
        links.append(LocalLink(names[i], parent, MEMBUS))

    for k, nic in enumerate(nics):
        link_type(nic)  # reject unknown adapter types here, with the list of known ones
        switches.append(LocalSwitch(f"nic{k}", SwitchKind.NIC, None))
        if pcie_switches:
            parent = f"pcie{k * pcie_switches // len(nics)}"
        else:
            parent = f"socket{k * sockets // len(nics)}"
        links.append(LocalLink(f"nic{k}", parent, host_pcie))

    links.extend(_accelerator_links(slots, names, accel, nvlink, nvlink_type, nvlink_links))
    if nvlink is NVLinkStyle.NVSWITCH and accel:
        switches.append(LocalSwitch("nvswitch", SwitchKind.NVSWITCH, None))

    devices = tuple(
        LocalDevice(
            names[i],
            s.model,
            numa[i],
            s.memory_gb if s.memory_gb is not None else s.model.memory_gb,
            s.power_limit_w if s.power_limit_w is not None else s.model.max_w,
        )
        for i, s in enumerate(slots)
    )
    known = set(names) | {s.name for s in switches}
    for a, b, t in extra_links:
        for end in (a, b):
            if end not in known:
                raise LayoutError(
                    f"link {a} -- {b}: no node {end!r} in this host; known: "
                    + ", ".join(sorted(known))
                )
        links.append(LocalLink(a, b, t))
    return HostLayout(devices, tuple(switches), tuple(links), sockets)


def _socket_of(numa: int, sockets: int, name: str) -> tuple[str, int]:
    if not 0 <= numa < sockets:
        raise LayoutError(f"{name}: numa {numa} is not a socket of this host (0..{sockets - 1})")
    return f"socket{numa}", numa


def _host_pcie(slots: Sequence[Slot]) -> LinkType:
    types = [link_type(s.model.pcie_type) for s in slots if s.model.kind is not DeviceKind.CPU]
    if not types:
        return link_type("PCIe4x16")
    return max(types, key=lambda t: t.bandwidth_gbps)


def _accelerator_links(
    slots: Sequence[Slot],
    names: Sequence[str],
    accel: Sequence[int],
    style: NVLinkStyle,
    type_name: str | None,
    links_override: int | None,
) -> list[LocalLink]:
    if style is NVLinkStyle.NONE or not accel:
        return []
    model = slots[accel[0]].model
    base = _nvlink_type(model, type_name)
    per_device = links_override or model.nvlink_links or 1
    out: list[LocalLink] = []
    if style is NVLinkStyle.NVSWITCH:
        for i in accel:
            out.append(LocalLink(names[i], "nvswitch", bundle(base, per_device)))
    elif style is NVLinkStyle.MESH:
        if len(accel) < 2:
            return []
        per_pair = max(1, per_device // (len(accel) - 1))
        for i, j in combinations(accel, 2):
            out.append(LocalLink(names[i], names[j], bundle(base, per_pair)))
    elif style is NVLinkStyle.PAIRS:
        for i, j in zip(accel[0::2], accel[1::2], strict=False):
            out.append(LocalLink(names[i], names[j], bundle(base, per_device)))
    else:  # cube mesh
        if len(accel) != 8:
            raise LayoutError(f"nvlink: cube-mesh needs exactly 8 accelerators, got {len(accel)}")
        for i, j, n in CUBE_MESH_LINKS:
            out.append(LocalLink(names[accel[i]], names[accel[j]], bundle(base, n)))
    return out
