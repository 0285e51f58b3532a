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
    return MEMBUS if model.integrated else link_type(model.pcie_type)


def sockets_of(sockets: int, smp: LinkType) -> tuple[list[LocalSwitch], list[LocalLink]]:
    """CPU root complexes ``socket0..`` and the inter-socket links joining them.

    Up to four sockets are fully connected (as UPI and xGMI boards are); more form a chain.
    """
    switches = [LocalSwitch(f"socket{k}", SwitchKind.CPU_ROOT, k) for k in range(sockets)]
    links = [
        LocalLink(f"socket{x}", f"socket{y}", smp)
        for x, y in combinations(range(sockets), 2)
        if sockets <= 4 or y == x + 1
    ]
    return switches, links


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
    A device's ``numa`` puts it on that socket (on one of that socket's PCIe switches when
    the host has them).
    """
    if sockets < 1:
        raise LayoutError(f"sockets must be >= 1, got {sockets}")
    if pcie_switches < 0:
        raise LayoutError(f"pcie_switches must be >= 0, got {pcie_switches}")
    names = _device_names(slots)
    accel = [i for i, s in enumerate(slots) if not s.model.integrated]
    onchip = [i for i, s in enumerate(slots) if s.model.integrated]
    host_pcie = link_type(pcie_type) if pcie_type else _host_pcie(slots)

    switches, links = sockets_of(sockets, link_type(smp_type))
    pswitch_socket = [j * sockets // pcie_switches for j in range(pcie_switches)]
    for j, k in enumerate(pswitch_socket):
        switches.append(LocalSwitch(f"pcie{j}", SwitchKind.PCIE_SWITCH, k))
        links.append(LocalLink(f"pcie{j}", f"socket{k}", host_pcie))

    numa = [0] * len(slots)
    links += _place_accelerators(slots, names, accel, sockets, pswitch_socket, numa)
    for rank, i in enumerate(onchip):
        want = slots[i].numa
        k = want if want is not None else rank * sockets // len(onchip)
        parent, numa[i] = _socket_of(k, sockets, names[i])
        links.append(LocalLink(names[i], parent, MEMBUS))

    for k, nic in enumerate(nics):
        link_type(nic)  # reject unknown adapter types here, with the list of known ones
        if pcie_switches:
            j = k * pcie_switches // len(nics)
            parent, socket = f"pcie{j}", pswitch_socket[j]
        else:
            socket = k * sockets // len(nics)
            parent = f"socket{socket}"
        switches.append(LocalSwitch(f"nic{k}", SwitchKind.NIC, socket))
        links.append(LocalLink(f"nic{k}", parent, host_pcie))

    accel_links = _accelerator_links(slots, names, accel, nvlink, nvlink_type, nvlink_links)
    links.extend(accel_links)
    if nvlink is NVLinkStyle.NVSWITCH and accel_links:
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


def _place_accelerators(
    slots: Sequence[Slot],
    names: Sequence[str],
    accel: Sequence[int],
    sockets: int,
    pswitch_socket: Sequence[int],
    numa: list[int],
) -> list[LocalLink]:
    """Attach PCIe devices evenly over PCIe switches (or sockets); fills in ``numa``."""
    links = []
    per_socket_seen = [0] * sockets
    for rank, i in enumerate(accel):
        want = slots[i].numa
        if want is not None:
            _, numa[i] = _socket_of(want, sockets, names[i])
            on_socket = [j for j, k in enumerate(pswitch_socket) if k == want]
            if pswitch_socket and not on_socket:
                raise LayoutError(f"{names[i]}: socket {want} has no PCIe switch")
            pick = per_socket_seen[want]
            per_socket_seen[want] += 1
            parent = f"pcie{on_socket[pick % len(on_socket)]}" if on_socket else f"socket{want}"
        elif pswitch_socket:
            j = rank * len(pswitch_socket) // len(accel)
            parent, numa[i] = f"pcie{j}", pswitch_socket[j]
        else:
            k = rank * sockets // len(accel)
            parent, numa[i] = f"socket{k}", k
        links.append(LocalLink(names[i], parent, _attach_type(slots[i].model)))
    return links


def _socket_of(numa: int, sockets: int, name: str) -> tuple[str, int]:
    if not 0 <= numa < sockets:
        raise LayoutError(f"{name}: numa {numa} is not a socket of this host (0..{sockets - 1})")
    return f"socket{numa}", numa


def _host_pcie(slots: Sequence[Slot]) -> LinkType:
    types = [link_type(s.model.pcie_type) for s in slots if not s.model.integrated]
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
    """Links among the devices that have an accelerator link (or all, with an override).

    On an NVSwitch each device keeps its own link type and count; direct styles (mesh,
    pairs, cube mesh) need one link type on every joined device.
    """
    if style is NVLinkStyle.NONE:
        return []
    joined = [i for i in accel if type_name or slots[i].model.nvlink_type]
    if not joined:
        models = sorted({slots[i].model.name for i in accel}) or ["no accelerators"]
        raise LayoutError(
            f"nvlink: {style.value} but {', '.join(models)} have no NVLink (or similar) in "
            "the catalog; give nvlink_type (e.g. NVLink4) or use nvlink: none"
        )

    def base(i: int) -> LinkType:
        return link_type(type_name or slots[i].model.nvlink_type or "")

    def per_device(i: int) -> int:
        return links_override or slots[i].model.nvlink_links or 1

    if style is NVLinkStyle.NVSWITCH:
        return [LocalLink(names[i], "nvswitch", bundle(base(i), per_device(i))) for i in joined]
    kinds = {base(i) for i in joined}
    if len(kinds) > 1:
        gens = ", ".join(sorted(t.generation for t in kinds))
        raise LayoutError(f"nvlink: {style.value} joins devices with different links ({gens})")
    out: list[LocalLink] = []
    if style is NVLinkStyle.MESH:
        per_pair = max(1, per_device(joined[0]) // max(1, len(joined) - 1))
        for i, j in combinations(joined, 2):
            out.append(LocalLink(names[i], names[j], bundle(base(i), per_pair)))
    elif style is NVLinkStyle.PAIRS:
        for i, j in zip(joined[0::2], joined[1::2], strict=False):
            out.append(LocalLink(names[i], names[j], bundle(base(i), per_device(i))))
    else:  # cube mesh
        if len(joined) != 8:
            raise LayoutError(f"nvlink: cube-mesh needs exactly 8 accelerators, got {len(joined)}")
        for i, j, n in CUBE_MESH_LINKS:
            out.append(LocalLink(names[joined[i]], names[joined[j]], bundle(base(i), n)))
    return out
