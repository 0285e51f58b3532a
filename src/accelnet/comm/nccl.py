"""NCCL tuned from the fabric: ring order, visible GPUs, a topology file and NCCL's variables.

NCCL learns a machine from sysfs and NVML. In a VM or a container that hides the PCIe tree it
guesses the paths between GPUs and NICs badly, it never sees the ring order the cost model
(:func:`accelnet.comm.ring.ring_order`) found, and it uses every HCA and IP interface it can
find. This module hands NCCL what the fabric knows, as pure functions of the fabric:

- :func:`ring_devices`: a job's devices in the best ring order (rank 0 stays first);
- :func:`cuda_visible_devices`: one host's GPUs, numbered on their host, in that order;
- :func:`nccl_topo_xml`: the file ``NCCL_TOPO_FILE`` names, describing one host;
- :func:`nccl_env`: ``CUDA_VISIBLE_DEVICES``, ``NCCL_TOPO_FILE``, ``NCCL_IB_HCA`` and
  ``NCCL_SOCKET_IFNAME`` for a job's task on one host.

**The topology file** follows NCCL's reader (NVIDIA/nccl ``src/graph/xml.cc``,
``ncclTopoXmlLoad*``) and the code that turns it into NCCL's graph (``src/graph/topo.cc``,
``ncclTopoAddCpu/Pci/Gpu/Nic/Net/NvLinks``)::

    <system version="1">                       NCCL_TOPO_XML_VERSION
      <cpu numaid arch vendor familyid modelid>   one per CPU socket (NUMA node)
        <pci busid class="0x060400" link_speed link_width>   a PCIe switch
          <pci busid class="0x030200" link_speed link_width>  a GPU's own PCI function
            <gpu dev sm rank>
              <nvlink target count tclass/>    per NVLink peer: a GPU, or the NVSwitch
            </gpu>
          </pci>
          <pci busid class="0x020700" link_speed link_width>  a NIC (0x020000: Ethernet)
            <nic><net name dev speed port/></nic>
          </pci>
        </pci>
      </cpu>
    </system>

A ``<pci>`` element's ``link_speed``/``link_width`` describe its link to its parent, as NCCL
reads them (``bw = width * speed``). NVSwitch links use ``tclass="0x068000"`` (NCCL's
``PCI_NVSWITCH_CLASS``: every such link goes to one NVS node, so one ``<nvlink>`` with the
GPU's whole link count is what NCCL makes of the four per-switch rows a DGX dump has); links
between GPUs use the peer's bus id and class ``0x030200``. Counts are the fabric's link
counts; NCCL prices each link from the GPU's ``sm`` itself.

What the file leaves out, on purpose: NCCL reads a topology file and then fills every
attribute that is *absent* from the machine (``xmlInitAttrInt``, ``if (index == -1)`` in
``ncclTopoGetXmlFromCpu/Sys/Gpu``, ``ncclTopoPopulateNics``) but keeps those that are
present. So what the fabric does not model is left for NCCL to detect rather than guessed:
CPU ``affinity`` (NCCL reads the NUMA node's cpumap), PCI ``vendor``/``device`` ids, the
net's ``guid``/``maxconn``/``latency``, and ``gdr`` (GPUDirect RDMA needs a kernel module the
fabric knows nothing of; pass ``gdr=`` to state it). NCCL matches GPUs by bus id and nets by
name (``ncclTopoFillGpu``, ``ncclTopoFillNet``) and trims what it did not match, so the file
helps a real machine where those agree with it (a discovered fabric carries NVML's bus ids).

**Bus ids**: a device's own ``pci_bus`` when the fabric has one (discovery records NVML's),
written ``dddd:bb:dd.f``; every other PCI node (switches, NICs, GPUs of described fabrics,
NVSwitches) gets ``0000:XX:00.0``, numbered depth-first from socket 0 in the order of the
host's layout and skipping buses a real id uses: stable for a layout, unique in a host,
alike on alike hosts.

**NIC names** (the fabric gives adapters no OS names; these are the classic kernel names):
an InfiniBand or RoCE adapter is an RDMA HCA ``mlx5_<k>`` (``k`` counts the host's RDMA
adapters in layout order) and that is its ``<net name>``; its IP interface is ``ib<j>``
(IPoIB) or ``eth<j>`` (RoCE); a plain Ethernet adapter is ``eth<j>`` and a radio one
``wlan<j>``, named so in ``<net>`` as NCCL's socket transport names them. An adapter whose
network link the fabric lacks (no ``network`` in its host spec) keeps its fabric name and no
speed. ``NCCL_IB_HCA`` lists the RDMA HCAs in NCCL's exact-match form (``=mlx5_0,mlx5_1``);
``NCCL_SOCKET_IFNAME`` the Ethernet interfaces, else the IPoIB ones, else the radio ones
(``=eth0``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Literal

from accelnet.comm.communicator import CommError, Communicator
from accelnet.comm.cost import CostModel
from accelnet.comm.ring import ring_order, ring_score
from accelnet.fabric import Fabric
from accelnet.fabric.catalog import link_type
from accelnet.fabric.model import Device, DeviceKind, HostLayout, LinkMedium, LinkType, SwitchKind

# CUDA compute capability (major * 10 + minor) of the catalog's NVIDIA models: NCCL's ``sm``,
# which it uses to price NVLinks. Models not listed get no ``sm``; NCCL reads it from the GPU.
COMPUTE_CAPABILITY: Mapping[str, int] = MappingProxyType(
    {
        "B200": 100,
        "H200": 90,
        "H100-SXM": 90,
        "H100-PCIe": 90,
        "H100-NVL": 90,
        "A100-SXM4-80GB": 80,
        "A100-SXM4-40GB": 80,
        "A100-PCIe-80GB": 80,
        "A100-PCIe-40GB": 80,
        "L40S": 89,
        "L4": 89,
        "T4": 75,
        "V100": 70,
        "V100-PCIe": 70,
        "P100": 60,
        "P100-SXM2": 60,
        "K80": 37,
    }
)

# What NCCL's ncclTopoAddCpu reads (arch, vendor, familyid, modelid) for the CPUs whose
# socket link the catalog names; NCCL only uses them to price the link between sockets.
# UPI 2.0: Sapphire Rapids (DGX H100); UPI 1.0: Skylake/Cascade Lake; QPI: Broadwell
# (DGX-1); Infinity Fabric: EPYC Rome (DGX A100). Anything else: the UPI 2.0 part, the
# layout's own default socket link.
_CPU_BY_SMP: Mapping[str, tuple[str, str, int, int]] = MappingProxyType(
    {
        "UPI": ("x86_64", "GenuineIntel", 6, 0x8F),
        "UPI1": ("x86_64", "GenuineIntel", 6, 0x55),
        "QPI": ("x86_64", "GenuineIntel", 6, 0x4F),
        "xGMI-CPU": ("x86_64", "AuthenticAMD", 0x17, 0x31),
    }
)
_DEFAULT_CPU = "UPI"

# PCI class codes as sysfs gives them and NCCL's kvDictPciClass reads them.
_CLASS_BRIDGE = "0x060400"
_CLASS_GPU = "0x030200"  # 3D controller: data-center GPUs
_CLASS_IB = "0x020700"  # InfiniBand controller
_CLASS_ETH = "0x020000"  # Ethernet controller
_CLASS_NVSWITCH = "0x068000"

# NCCL's kvDictPciGen keys (sysfs max_link_speed) by PCIe generation, and the per-lane
# GB/s each generation carries, to place a link type that names no generation.
_PCIE_SPEED = MappingProxyType(
    {
        1: "2.5 GT/s PCIe",
        2: "5.0 GT/s PCIe",
        3: "8.0 GT/s PCIe",
        4: "16.0 GT/s PCIe",
        5: "32.0 GT/s PCIe",
        6: "64.0 GT/s PCIe",
    }
)
_PCIE_LANE_GBPS = MappingProxyType({1: 0.25, 2: 0.5, 3: 0.985, 4: 1.97, 5: 3.94, 6: 7.56})
_GEN = re.compile(r"gen\s*(\d)", re.IGNORECASE)
_BUS_ID = re.compile(r"^([0-9a-f]{1,8}):([0-9a-f]{2}):([0-9a-f]{2})\.([0-7])$", re.IGNORECASE)
_GPU_NUMBER = re.compile(r"(\d+)$")
_MAX_BUS = 0xFF


def is_nccl_device(device: Device) -> bool:
    """Whether NCCL can drive ``device``: a discrete NVIDIA GPU.

    Integrated GPUs (Jetson) are not: NCCL is not built for them (Jetson's PyTorch ships
    without it), and they sit on no PCIe bus a topology file could place them on.
    """
    return (
        device.kind is DeviceKind.GPU
        and device.model.vendor.lower() == "nvidia"
        and not device.model.integrated
    )


# ----- ring order and visible devices -------------------------------------------------------
def ring_devices(
    fabric: Fabric, devices: Sequence[str], model: CostModel | None = None
) -> tuple[str, ...]:
    """``devices`` (global ids or unambiguous refs) as global ids in the ring order
    :func:`~accelnet.comm.ring.ring_order` finds, rank 0's device first.

    Never worse than the order given: where the search (a heuristic above nine ranks)
    scores below ``devices`` as they are, they are kept. Raises :class:`CommError` for an
    unknown or repeated device.
    """
    model = model or CostModel()
    comm = Communicator(fabric, devices)
    found = ring_order(comm, model)
    ranks = range(comm.size)
    if ring_score(comm, ranks, model) > ring_score(found, ranks, model):
        return comm.ranks
    return found.ranks


def gpu_number(device: Device) -> str:
    """A GPU's number on its host, as ``CUDA_VISIBLE_DEVICES`` carries it: the digits
    ending its name (``gpu3`` -> ``"3"``, NVML's index for a discovered GPU), else its
    UUID, else its index among the host's devices (the rule the runtime's task
    environment follows for one device)."""
    number = _GPU_NUMBER.search(device.name)
    if number:
        return str(int(number.group(1)))
    return device.uuid or str(device.index)


def cuda_visible_devices(
    fabric: Fabric, devices_on_host: Sequence[str], ring: Sequence[str]
) -> str:
    """``CUDA_VISIBLE_DEVICES`` for a task holding ``devices_on_host``: their numbers on
    their host (:func:`gpu_number`), comma-separated, in the order they appear in ``ring``
    (devices of other hosts in ``ring`` are skipped).

    Local rank ``i`` of the task then drives the ``i``-th GPU of the ring on this host.
    Raises :class:`CommError` if the devices span hosts, are not NVIDIA GPUs, or are
    missing from ``ring``.
    """
    mine = [_device(fabric, ref) for ref in devices_on_host]
    if not mine:
        raise CommError("cuda_visible_devices needs at least one device")
    hosts = sorted({d.host for d in mine})
    if len(hosts) > 1:
        raise CommError(f"devices span hosts {', '.join(hosts)}; give one host's devices")
    for d in mine:
        if not is_nccl_device(d):
            raise CommError(
                f"{d.id} is a {d.model.vendor} {d.kind.value} ({d.model.name}), not an "
                "NVIDIA GPU: CUDA_VISIBLE_DEVICES does not apply"
            )
    position = {_device(fabric, ref).id: i for i, ref in enumerate(ring)}
    missing = [d.id for d in mine if d.id not in position]
    if missing:
        raise CommError(f"devices {', '.join(missing)} are not in the ring")
    return ",".join(gpu_number(d) for d in sorted(mine, key=lambda d: position[d.id]))


# ----- network adapters --------------------------------------------------------------------
NicKind = Literal["ib", "roce", "ethernet", "wireless", "unknown"]


@dataclass(frozen=True, slots=True)
class NcclNic:
    """One network adapter of a host as NCCL will know it.

    ``kind`` is ``ib``, ``roce``, ``ethernet``, ``wireless`` or ``unknown`` (the fabric has
    no network link for it); ``net_name`` is the name NCCL's net plugin reports (the HCA for
    RDMA adapters, the interface otherwise); ``hca`` the RDMA device or None; ``ifname`` the
    IP interface or None; ``speed_mbps`` the network link's speed one way, in NCCL's unit.
    """

    local: str
    kind: NicKind
    net_name: str
    hca: str | None
    ifname: str | None
    speed_mbps: int | None
    numa: int | None


_NIC_KIND: Mapping[LinkMedium, NicKind] = MappingProxyType(
    {
        LinkMedium.INFINIBAND: "ib",
        LinkMedium.ROCE: "roce",
        LinkMedium.ETHERNET: "ethernet",
        LinkMedium.WIFI: "wireless",
        LinkMedium.CELLULAR: "wireless",
    }
)
# The IP interface of each kind of adapter (IPoIB for InfiniBand), numbered per prefix.
_IFNAME_PREFIX: Mapping[NicKind, str] = MappingProxyType(
    {"ib": "ib", "roce": "eth", "ethernet": "eth", "wireless": "wlan"}
)


def nccl_nics(fabric: Fabric, host: str) -> tuple[NcclNic, ...]:
    """The adapters of ``host`` in layout order, named as the module docstring says."""
    h = fabric.host(host)
    out: list[NcclNic] = []
    counters = {"hca": 0, "ib": 0, "eth": 0, "wlan": 0}

    def take(key: str) -> str:
        n = counters[key]
        counters[key] = n + 1
        return f"{'mlx5_' if key == 'hca' else key}{n}"

    for sw in h.layout.switches:
        if sw.kind is not SwitchKind.NIC:
            continue
        uplinks = fabric.external_adjacency(h.node_id(sw.name))
        best = max(uplinks, key=lambda lk: lk.bandwidth_gbps, default=None)
        kind: NicKind = _NIC_KIND.get(best.medium, "unknown") if best else "unknown"
        hca = take("hca") if kind in ("ib", "roce") else None
        prefix = _IFNAME_PREFIX.get(kind)
        ifname = take(prefix) if prefix else None
        speed = round(best.bandwidth_gbps * 8000) if best is not None else None
        out.append(NcclNic(sw.name, kind, hca or ifname or sw.name, hca, ifname, speed, sw.numa))
    return tuple(out)


# ----- the topology file -------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class _Element:
    """An XML element as NCCL's writer lays it out (attributes in order, no text)."""

    tag: str
    attrs: tuple[tuple[str, str], ...]
    children: tuple[_Element, ...] = ()


def _render(element: _Element, indent: int, out: list[str]) -> None:
    # NCCL's reader: single spaces between attributes, double quotes, spaces and newlines
    # (no tabs) between elements, no XML declaration (``<?xml`` is no element it knows).
    pad = " " * indent
    attrs = "".join(f' {k}="{v}"' for k, v in element.attrs)
    if not element.children:
        out.append(f"{pad}<{element.tag}{attrs}/>")
        return
    out.append(f"{pad}<{element.tag}{attrs}>")
    for child in element.children:
        _render(child, indent + 2, out)
    out.append(f"{pad}</{element.tag}>")


def _normal_bus(bus: str | None) -> str | None:
    """``00000000:1B:00.0`` -> ``0000:1b:00.0`` (NCCL's form); None for anything else."""
    m = _BUS_ID.match(bus.strip()) if bus else None
    if m is None:
        return None
    domain, b, dev, fn = m.groups()
    return f"{int(domain, 16):04x}:{b.lower()}:{dev.lower()}.{fn}"


def _pcie_link(t: LinkType) -> tuple[tuple[str, str], tuple[str, str]]:
    """``link_speed`` and ``link_width`` of a PCIe link, as sysfs writes them."""
    lanes = t.lanes or 16
    m = _GEN.search(t.generation)
    gen = int(m.group(1)) if m and int(m.group(1)) in _PCIE_SPEED else 0
    if not gen:
        per_lane = t.bandwidth_gbps / lanes
        gen = min(_PCIE_LANE_GBPS, key=lambda g: abs(_PCIE_LANE_GBPS[g] - per_lane))
    return ("link_speed", _PCIE_SPEED[gen]), ("link_width", str(lanes))


def _cpu_attrs(layout: HostLayout, numa: int) -> tuple[tuple[str, str], ...]:
    """``<cpu>``'s attributes: its NUMA node and the CPU its socket link says it is."""
    if any(lk.type.medium is LinkMedium.C2C for lk in layout.links):
        return (("numaid", str(numa)), ("arch", "arm64"))  # Grace: NCCL reads arch only
    smp = next((lk.type for lk in layout.links if lk.type.medium is LinkMedium.SMP), None)
    name = _DEFAULT_CPU
    if smp is not None:
        name = next(
            (n for n in _CPU_BY_SMP if link_type(n).generation == smp.generation), _DEFAULT_CPU
        )
    arch, vendor, family, model = _CPU_BY_SMP[name]
    return (
        ("numaid", str(numa)),
        ("arch", arch),
        ("vendor", vendor),
        ("familyid", str(family)),
        ("modelid", str(model)),
    )


class _BusIds:
    """Bus ids of one host: real ones kept, the rest numbered ``0000:XX:00.0`` in turn."""

    def __init__(self, taken: Sequence[str]) -> None:
        self._taken = {b[:7] for b in taken}  # "dddd:bb"
        self._next = 1

    def new(self) -> str:
        while f"0000:{self._next:02x}" in self._taken:
            self._next += 1
        if self._next > _MAX_BUS:
            raise CommError("host has more PCI nodes than one PCI domain numbers (255)")
        bus = f"0000:{self._next:02x}:00.0"
        self._next += 1
        return bus


class _HostTopology:
    """The PCIe tree of one host, its bus ids and its NCCL GPUs and adapters."""

    def __init__(self, fabric: Fabric, host: str) -> None:
        h = fabric.host(host)
        layout = h.layout
        self.fabric = fabric
        self.host = h
        self.layout = layout
        self.devices = {fabric.devices[i].name: fabric.devices[i] for i in h.device_ids}
        self.gpus = [d for d in self.devices.values() if is_nccl_device(d)]
        self.nics = {n.local: n for n in nccl_nics(fabric, host)}
        self.sockets = [s for s in layout.switches if s.kind is SwitchKind.CPU_ROOT]
        if not self.sockets:
            raise CommError(f"host {host!r} has no CPU socket in the fabric")
        self.parent: dict[str, tuple[str, LinkType]] = {}
        self.children: dict[str, list[str]] = {}
        self._tree()
        wanted = {d.name for d in self.gpus} | set(self.nics)
        self.shown = self._shown(wanted)
        real = {d.name: _normal_bus(d.pci_bus) for d in self.gpus}
        self._ids = _BusIds([b for b in real.values() if b])
        self.bus: dict[str, str] = {}
        for s in self.sockets:
            for node in self._preorder(s.name):
                if node != s.name and node in self.shown:
                    self.bus[node] = real.get(node) or self._ids.new()

    def _tree(self) -> None:
        """Parents over PCIe links, breadth first from the sockets; what PCIe does not
        reach (a GPU only on NVLink, say) hangs from its NUMA node's socket."""
        kinds = self.layout.node_kind
        pcie: dict[str, list[tuple[str, LinkType]]] = {}
        for lk in self.layout.links:
            if lk.type.medium is LinkMedium.PCIE:
                pcie.setdefault(lk.a, []).append((lk.b, lk.type))
                pcie.setdefault(lk.b, []).append((lk.a, lk.type))
        seen = {s.name for s in self.sockets}
        queue = [s.name for s in self.sockets]
        while queue:
            node = queue.pop(0)
            for other, t in pcie.get(node, ()):
                if other in seen:
                    continue
                seen.add(other)
                self.parent[other] = (node, t)
                self.children.setdefault(node, []).append(other)
                if kinds(other) is SwitchKind.PCIE_SWITCH:
                    queue.append(other)
        for name, numa, t in [
            *((d.name, d.numa, link_type(d.model.pcie_type)) for d in self.gpus),
            *((n.local, n.numa or 0, link_type("PCIe4x16")) for n in self.nics.values()),
        ]:
            if name not in seen:
                socket = next((s for s in self.sockets if s.numa == numa), self.sockets[0])
                self.parent[name] = (socket.name, t)
                self.children.setdefault(socket.name, []).append(name)

    def _shown(self, wanted: set[str]) -> set[str]:
        shown: set[str] = set()
        for start in wanted:
            node = start
            while node in self.parent and node not in shown:
                shown.add(node)
                node = self.parent[node][0]
        return shown

    def _preorder(self, node: str) -> list[str]:
        out = [node]
        for child in self.children.get(node, ()):
            out += self._preorder(child)
        return out

    def switch_bus(self, key: str) -> str:
        """The bus id of an NVSwitch: a local one by name, a network one as ``fabric:<id>``."""
        if key not in self.bus:
            self.bus[key] = self._ids.new()
        return self.bus[key]


def _nvlinks(topo: _HostTopology, gpu: Device) -> list[_Element]:
    """``<nvlink>`` rows (and a ``<c2c>``) for ``gpu``: link counts summed per target."""
    counts: dict[tuple[str, str], int] = {}
    c2c: list[LinkType] = []
    layout, fabric = topo.layout, topo.fabric
    for lk in layout.links:
        if gpu.name not in (lk.a, lk.b) or lk.a == lk.b:
            continue
        other = lk.b if lk.a == gpu.name else lk.a
        kind = layout.node_kind(other)
        if lk.type.medium is LinkMedium.C2C and kind is SwitchKind.CPU_ROOT:
            c2c.append(lk.type)
        elif lk.type.medium not in (LinkMedium.NVLINK, LinkMedium.NVSWITCH):
            continue
        elif kind is SwitchKind.NVSWITCH:
            key = (topo.switch_bus(other), _CLASS_NVSWITCH)
            counts[key] = counts.get(key, 0) + lk.type.count
        elif kind is None and other in topo.bus and is_nccl_device(topo.devices[other]):
            key = (topo.bus[other], _CLASS_GPU)
            counts[key] = counts.get(key, 0) + lk.type.count
    for ext in fabric.external_adjacency(gpu.id):
        far = ext.other(gpu.id)
        if ext.medium in (LinkMedium.NVLINK, LinkMedium.NVSWITCH) and (
            "/" not in far and fabric.node_kind(far) is SwitchKind.NVSWITCH
        ):
            key = (topo.switch_bus(f"fabric:{far}"), _CLASS_NVSWITCH)  # multi-node NVLink
            counts[key] = counts.get(key, 0) + ext.type.count
    rows = [
        _Element("nvlink", (("target", bus), ("count", str(n)), ("tclass", tclass)))
        for (bus, tclass), n in sorted(counts.items())
    ]
    if c2c:
        count = sum(t.count for t in c2c)
        per_link_mbps = round(sum(t.bandwidth_gbps for t in c2c) * 1000 / count)
        rows.append(_Element("c2c", (("bw", str(per_link_mbps)), ("count", str(count)))))
    return rows


def _pci_element(topo: _HostTopology, node: str, gdr: bool | None) -> _Element:
    """``<pci>`` for a PCIe switch, a NIC or a GPU, its link to its parent on it."""
    speed, width = _pcie_link(topo.parent[node][1])
    kind = topo.layout.node_kind(node)
    if kind is SwitchKind.PCIE_SWITCH:
        kids = sorted(
            (c for c in topo.children.get(node, ()) if c in topo.shown), key=topo.bus.__getitem__
        )
        cls, inner = _CLASS_BRIDGE, tuple(_pci_element(topo, c, gdr) for c in kids)
    elif kind is SwitchKind.NIC:
        nic = topo.nics[node]
        cls = _CLASS_IB if nic.kind == "ib" else _CLASS_ETH
        inner = (_Element("nic", (), (_net_element(nic, list(topo.nics).index(node), gdr),)),)
    else:
        cls, inner = _CLASS_GPU, (_gpu_element(topo, topo.devices[node], gdr),)
    return _Element("pci", (("busid", topo.bus[node]), ("class", cls), speed, width), inner)


def _net_element(nic: NcclNic, dev: int, gdr: bool | None) -> _Element:
    attrs = [("name", nic.net_name), ("dev", str(dev))]
    if nic.speed_mbps is not None:
        attrs.append(("speed", str(nic.speed_mbps)))
    attrs.append(("port", "1"))
    if gdr is not None and nic.hca is not None:
        attrs.append(("gdr", str(int(gdr))))
    return _Element("net", tuple(attrs))


def _gpu_element(topo: _HostTopology, gpu: Device, gdr: bool | None) -> _Element:
    attrs = [("dev", _dev_number(gpu))]
    sm = COMPUTE_CAPABILITY.get(gpu.model.name)
    if sm is not None:
        attrs.append(("sm", str(sm)))
    attrs.append(("rank", str(topo.gpus.index(gpu))))
    if gdr is not None:
        attrs.append(("gdr", str(int(gdr))))
    return _Element("gpu", tuple(attrs), tuple(_nvlinks(topo, gpu)))


def _dev_number(gpu: Device) -> str:
    number = gpu_number(gpu)
    return number if number.isdigit() else str(gpu.index)


def nccl_topo_xml(fabric: Fabric, host: str, *, gdr: bool | None = None) -> str:
    """The NCCL topology file (``NCCL_TOPO_FILE``) of ``host``: its sockets, PCIe switches,
    NVIDIA GPUs with their NVLinks, and network adapters, as the fabric models them (see the
    module docstring for the layout and what is left for NCCL to detect).

    ``gdr`` states whether GPUDirect RDMA works on the host (written on GPUs and RDMA nets);
    None leaves it to NCCL. Raises KeyError for an unknown host and :class:`CommError` for a
    host without an NVIDIA GPU NCCL could use.
    """
    topo = _HostTopology(fabric, host)
    if not topo.gpus:
        raise CommError(f"host {host!r} has no NVIDIA GPU for NCCL; no topology file to write")
    cpus = []
    for s in topo.sockets:
        top = sorted(
            (c for c in topo.children.get(s.name, ()) if c in topo.shown), key=topo.bus.__getitem__
        )
        numa = s.numa if s.numa is not None else topo.sockets.index(s)
        cpus.append(
            _Element(
                "cpu",
                _cpu_attrs(topo.layout, numa),
                tuple(_pci_element(topo, c, gdr) for c in top),
            )
        )
    lines: list[str] = []
    _render(_Element("system", (("version", "1"),), tuple(cpus)), 0, lines)
    return "\n".join(lines) + "\n"


# ----- the environment ---------------------------------------------------------------------
def nccl_env(
    fabric: Fabric,
    devices: Sequence[str],
    host: str,
    topo_path: str | None = None,
    *,
    ring: Sequence[str] | None = None,
) -> dict[str, str]:
    """NCCL's variables for the task of a job on ``devices`` that runs on ``host``.

    Empty unless every device of the job is an NVIDIA GPU (:func:`is_nccl_device`). Else:
    ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` (so CUDA numbers GPUs as NVML and the fabric do),
    ``CUDA_VISIBLE_DEVICES`` (this host's GPUs of the job in ring order), ``NCCL_TOPO_FILE``
    (when ``topo_path`` is given: where :func:`nccl_topo_xml`'s text was written),
    ``NCCL_IB_HCA`` and ``NCCL_SOCKET_IFNAME`` (the host's adapters, when it has such).
    ``ring`` is the job's ring (:func:`ring_devices`), computed when not given.
    Raises :class:`CommError` if no device of the job is on ``host``.
    """
    chosen = [_device(fabric, ref) for ref in devices]
    if not chosen or not all(is_nccl_device(d) for d in chosen):
        return {}
    fabric.host(host)  # KeyError naming known hosts
    here = [d.id for d in chosen if d.host == host]
    if not here:
        raise CommError(f"no device of the job is on host {host!r}")
    order = ring if ring is not None else ring_devices(fabric, [d.id for d in chosen])
    env = {
        "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
        "CUDA_VISIBLE_DEVICES": cuda_visible_devices(fabric, here, order),
    }
    if topo_path is not None:
        env["NCCL_TOPO_FILE"] = topo_path
    nics = nccl_nics(fabric, host)
    hcas = [n.hca for n in nics if n.hca]
    if hcas:
        env["NCCL_IB_HCA"] = "=" + ",".join(hcas)
    for kinds in (("roce", "ethernet"), ("ib",), ("wireless",)):
        names = [n.ifname for n in nics if n.kind in kinds and n.ifname]
        if names:
            env["NCCL_SOCKET_IFNAME"] = "=" + ",".join(names)
            break
    return env


def _device(fabric: Fabric, ref: str) -> Device:
    try:
        return fabric.device(ref)
    except KeyError as e:
        raise CommError(str(e.args[0])) from None
