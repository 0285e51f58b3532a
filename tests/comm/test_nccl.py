"""NCCL from the fabric: ring order, CUDA_VISIBLE_DEVICES, topology files NCCL can read,
and the NCCL variables of a task.

The topology files are checked twice: with ``xml.etree`` (well-formed XML) and with a port of
NCCL's own reader (NVIDIA/nccl ``src/graph/xml.cc``: ``xmlGetNode``, ``xmlLoadSub`` and the
``ncclTopoXmlLoad*`` handlers), which is stricter than XML (double quotes only, single spaces
between attributes, no declaration, elements it has no handler for are ignored), plus the
attributes ``ncclTopoAddCpu/Pci/Gpu/Net/NvLinks`` (``src/graph/topo.cc``) read.
"""

from __future__ import annotations

import random
import re
import xml.etree.ElementTree as ET
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import pytest

from accelnet.comm import CommError, Communicator
from accelnet.comm.nccl import (
    cuda_visible_devices,
    gpu_number,
    is_nccl_device,
    nccl_env,
    nccl_nics,
    nccl_topo_xml,
    ring_devices,
)
from accelnet.comm.ring import ring_score
from accelnet.fabric import Fabric, load_fabric
from accelnet.fabric.build import build_fabric, parse_spec
from accelnet.fabric.discovery import discover
from accelnet.fabric.model import LinkMedium, SwitchKind
from tests.fabric import nvml_fake as nf

# ----- a port of NCCL's XML reader (src/graph/xml.cc) -------------------------------------
MAX_STR_LEN = 255
MAX_ATTR_COUNT = 16
# What NCCL's topology loader accepts under each element (the ncclTopoXmlLoad* handlers).
HANDLERS: dict[str | None, tuple[str, ...]] = {
    None: ("system",),
    "system": ("cpu",),
    "cpu": ("pci", "nic"),
    "pci": ("pci", "gpu", "nic", "pcilink"),
    "gpu": ("nvlink", "c2c"),
    "nic": ("net",),
    "net": (),
    "nvlink": (),
    "c2c": (),
    "pcilink": (),
}
# kvDictPciClass, kvDictPciGen, kvDictCpuArch, kvDictCpuVendor of src/graph/topo.cc (prefix
# matches, in order; anything else falls back to a default, which a file should not rely on).
PCI_CLASS = ("0x060400", "0x080100", "0x068000", "0x068001", "0x03", "0x02")
PCI_GEN = (
    "2.5 GT/s", "5 GT/s", "8 GT/s", "16 GT/s", "32 GT/s", "2.5 GT/s PCIe", "5.0 GT/s PCIe",
    "8.0 GT/s PCIe", "16.0 GT/s PCIe", "32.0 GT/s PCIe", "64.0 GT/s PCIe",
)  # fmt: skip
CPU_ARCH = ("x86_64", "arm64", "ppc64")
CPU_VENDOR = ("GenuineIntel", "AuthenticAMD", "CentaurHauls", "  Shanghai  ")


class NcclParseError(AssertionError):
    """What NCCL's reader would WARN about and fail on (or silently ignore)."""


@dataclass
class Node:
    name: str
    attrs: list[tuple[str, str]]
    single: bool
    parent: Node | None = None
    subs: list[Node] = field(default_factory=list)

    def get(self, key: str) -> str | None:
        return next((v for k, v in self.attrs if k == key), None)

    def walk(self) -> list[Node]:
        out = [self]
        for s in self.subs:
            out += s.walk()
        return out


class Reader:
    """xmlGetChar / xmlGetValue / xmlGetToken / xmlGetNode over a string."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0

    def char(self) -> str:
        if self.pos >= len(self.text):
            raise NcclParseError("XML Parse : Unexpected EOF")
        c = self.text[self.pos]
        self.pos += 1
        return c

    def value(self) -> tuple[str, str]:
        c = self.char()
        if c not in "\"'":
            raise NcclParseError("XML Parse : Expected (double) quote.")  # INT_OK is off
        out = ""
        while True:
            ch = self.char()
            if ch == c:
                break
            out += ch
            if len(out) >= MAX_STR_LEN:
                raise NcclParseError(f"value {out} too long")
        return out, self.char()

    def token(self, want_value: bool) -> tuple[str, str | None, str]:
        name = ""
        while True:
            c = self.char()
            if c == "=":
                if not want_value:
                    raise NcclParseError(f"XML Parse : Unexpected value with name {name}")
                value, last = self.value()
                return name, value, last
            if c in " >/\n\r":
                return name, None, c
            name += c
            if len(name) >= MAX_STR_LEN:
                raise NcclParseError(f"name {name} too long")

    def node(self) -> tuple[str, Node | None]:
        """("none" | "open" | "close" | "single", node)."""
        c = " "
        while c in " \n\r":
            if self.pos >= len(self.text):
                return "none", None
            c = self.char()
        if c != "<":
            raise NcclParseError(f"XML Parse error : expecting '<', got {c!r}")
        name, _, c = self.token(False)
        if name.startswith("!--"):
            raise NcclParseError("comments are legal but we write none")
        if name == "" and c == "/":
            name, _, c = self.token(False)
            if c != ">":
                raise NcclParseError(f"unexpected trailing {c} in closing tag {name}")
            return "close", Node(name, [], False)
        attrs: list[tuple[str, str]] = []
        while c == " ":
            key, value, c = self.token(True)
            if not key or value is None:
                raise NcclParseError(f"<{name}>: an attribute without key or value")
            attrs.append((key, value))
        single = c == "/"
        if single:
            _, _, c = self.token(False)
        if c != ">":
            raise NcclParseError(f"XML Parse : expected >, got {c!r}")
        if len(attrs) > MAX_ATTR_COUNT:
            raise NcclParseError(f"<{name}>: NCCL ignores attributes past {MAX_ATTR_COUNT}")
        return ("single" if single else "open"), Node(name, attrs, single)


def nccl_read(text: str) -> Node:
    """The ``<system>`` node, as ncclTopoGetXmlFromFile reads it; raises what NCCL would
    reject and every element NCCL would ignore."""
    reader = Reader(text)
    root = Node("", [], False)

    def load(head: Node | None) -> None:
        if head is not None and head.single:
            return
        allowed = HANDLERS[head.name if head else None]
        while True:
            kind, node = reader.node()
            if kind == "none":
                if head is not None:
                    raise NcclParseError(f"XML Parse : unterminated {head.name}")
                return
            assert node is not None
            if kind == "close":
                if head is None or node.name != head.name:
                    raise NcclParseError(f"XML Mismatch : {head and head.name} / {node.name}")
                return
            if node.name not in allowed:
                raise NcclParseError(f"NCCL ignores <{node.name}> under {head and head.name}")
            node.parent = head or root
            node.parent.subs.append(node)
            load(node)

    load(None)
    assert len(root.subs) == 1, "one <system>"
    return root.subs[0]


def _prefix_known(value: str, table: tuple[str, ...]) -> bool:
    return any(value.startswith(k) for k in table)


def _is_bdf(bus: str) -> bool:  # checkBDFFormat
    return re.fullmatch(r"[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-9a-f]", bus) is not None


def check_topology(text: str) -> Node:
    """Everything ncclTopoGetSystemFromXml reads is there and well-formed; returns the
    system node. ``gdr`` is the one attribute NCCL requires that it fills itself (for the
    GPUs it keeps) when the file has none."""
    system = nccl_read(text)
    assert system.get("version") == "1"  # NCCL_TOPO_XML_VERSION
    assert "\t" not in text and not text.startswith("<?")
    nodes = system.walk()
    buses = [n.get("busid") for n in nodes if n.name == "pci"]
    assert len(buses) == len(set(buses)), "bus ids are unique"
    gpu_buses = {n.parent.get("busid") for n in nodes if n.name == "gpu" and n.parent}
    for n in nodes:
        assert len(n.attrs) <= 8, f"<{n.name}> leaves room for what NCCL adds"
        if n.name == "cpu":
            assert int(n.get("numaid") or "x") >= 0
            arch = n.get("arch") or ""
            assert arch in CPU_ARCH
            if arch == "x86_64":
                vendor = n.get("vendor") or ""
                assert vendor in CPU_VENDOR
                int(n.get("familyid") or "x", 0)
                if vendor == "GenuineIntel":
                    int(n.get("modelid") or "x", 0)
        elif n.name == "pci":
            bus = n.get("busid") or ""
            assert _is_bdf(bus), bus
            assert _prefix_known(n.get("class") or "", PCI_CLASS)
            assert int(n.get("link_width") or "x") > 0
            assert _prefix_known(n.get("link_speed") or "", PCI_GEN)
            if any(s.name == "gpu" for s in n.subs):
                assert (n.get("class") or "").startswith("0x03")
        elif n.name == "gpu":
            for key in ("dev", "sm", "rank"):
                int(n.get(key) or "x")
        elif n.name == "nvlink":
            assert int(n.get("count") or "x") > 0
            tclass = n.get("tclass") or ""
            assert _prefix_known(tclass, PCI_CLASS)
            assert _is_bdf(n.get("target") or "")
            if tclass.startswith("0x03"):
                assert n.get("target") in gpu_buses, "a GPU peer is a GPU of this file"
        elif n.name == "net":
            int(n.get("dev") or "x")
            assert n.get("name")
            if n.get("speed") is not None:
                assert int(n.get("speed") or "x") > 0
    return system


# ----- fabrics -----------------------------------------------------------------------------
def pod() -> Fabric:
    return load_fabric("dgx-h100:hosts=2")


def odd_fabric() -> Fabric:
    """A host of non-NVIDIA accelerators next to an H100 host, both on InfiniBand."""
    spec: dict[str, Any] = {
        "name": "odd",
        "switches": [{"name": "leaf", "kind": "leaf"}],
        "hosts": [
            {"name": "amd", "devices": "2xMI300X", "nics": "1xIB-NDR", "network": "leaf"},
            {"name": "tpu", "devices": "2xTPU-v4", "nics": "1xEth-100G", "network": "leaf"},
            {"name": "nv", "devices": "2xH100-SXM", "nics": "1xRoCE-400G", "network": "leaf"},
        ],
    }
    return build_fabric(parse_spec(spec, "<odd>"))


def discovered(machine: nf.Machine) -> Fabric:
    return discover(cpu_devices="none", nvml=nf.FakeNvml(machine), hostname="box").fabric


def host_gpus(fabric: Fabric, host: str) -> list[str]:
    h = fabric.host(host)
    return [i for i in h.device_ids if is_nccl_device(fabric.devices[i])]


def xml_gpus(system: Node) -> dict[str, Node]:
    """``<gpu>`` nodes by their ``dev``."""
    return {n.get("dev") or "": n for n in system.walk() if n.name == "gpu"}


def _xml_cases() -> list[tuple[str, Fabric, str]]:
    lab = load_fabric("mixed-lab")
    two = pod()
    return [
        ("dgx-h100", load_fabric("dgx-h100"), "dgx-h100"),
        ("dgx1-v100", load_fabric("dgx1-v100"), "dgx1"),
        ("hgx-b200", load_fabric("hgx-b200"), "hgx-b200"),
        ("pod-0", two, "dgx-h100-0"),
        ("pod-1", two, "dgx-h100-1"),
        ("lab-h100", lab, "h100box"),
        ("lab-l4", lab, "l4box"),
        ("lab-t4", lab, "t4box"),
        ("pcie-l4", load_fabric("pcie-4xL4"), "l4box"),
        ("nvl72", load_fabric("nvl72"), "tray05"),
        ("found-dgx", discovered(nf.dgx_h100()), "box"),
        ("found-v100", discovered(nf.v100_box()), "box"),
        ("found-azure", discovered(nf.azure_a100_pairs()), "box"),
        ("odd-nv", odd_fabric(), "nv"),
    ]


XML_CASES = _xml_cases()
XML_IDS = [c[0] for c in XML_CASES]


# ----- ring order --------------------------------------------------------------------------
def _ring_cases() -> list[tuple[str, Fabric, list[str]]]:
    rng = random.Random(11)
    out = []
    for name in ("dgx-h100", "dgx1-v100"):
        fabric = load_fabric(name)
        devices = list(fabric.devices)
        for size in (8, 5):
            out.append((f"{name}/{size}", fabric, rng.sample(devices, size)))
    two = pod()
    for size in (16, 12):
        out.append((f"pod/{size}", two, rng.sample(list(two.devices), size)))
    return out


@pytest.mark.parametrize(("name", "fabric", "devices"), _ring_cases(), ids=lambda c: str(c)[:12])
def test_ring_is_a_permutation_with_rank0_first_and_never_worse(
    name: str, fabric: Fabric, devices: list[str]
) -> None:
    ring = ring_devices(fabric, devices)
    assert sorted(ring) == sorted(devices)
    assert ring[0] == devices[0]
    given = Communicator(fabric, devices)
    found = Communicator(fabric, ring)
    ranks = range(len(devices))
    assert ring_score(found, ranks) >= ring_score(given, ranks)


def test_dgx1_bad_order_gets_a_better_ring() -> None:
    # hybrid cube mesh: 0-5, 2-7, 4-1, 6-3 have no NVLink; this order crosses PCIe and QPI
    fabric = load_fabric("dgx1-v100")
    bad = [f"dgx1/gpu{i}" for i in (0, 5, 2, 7, 4, 1, 6, 3)]
    ring = ring_devices(fabric, bad)
    ranks = range(8)
    assert ring_score(Communicator(fabric, ring), ranks) > ring_score(
        Communicator(fabric, bad), ranks
    )
    assert all(fabric.level(ring[i], ring[(i + 1) % 8]).name == "NVLINK" for i in ranks)


def test_ring_accepts_local_refs_and_rejects_repeats() -> None:
    fabric = load_fabric("dgx-h100")
    assert ring_devices(fabric, ["gpu3", "gpu1"]) == ("dgx-h100/gpu3", "dgx-h100/gpu1")
    with pytest.raises(CommError, match="twice"):
        ring_devices(fabric, ["gpu3", "dgx-h100/gpu3"])


# ----- CUDA_VISIBLE_DEVICES ----------------------------------------------------------------
@pytest.mark.parametrize(("name", "fabric", "devices"), _ring_cases(), ids=lambda c: str(c)[:12])
def test_cuda_visible_devices_are_the_hosts_numbers_in_ring_order(
    name: str, fabric: Fabric, devices: list[str]
) -> None:
    ring = ring_devices(fabric, devices)
    for host in sorted({fabric.devices[d].host for d in devices}):
        mine = [d for d in devices if fabric.devices[d].host == host]
        value = cuda_visible_devices(fabric, mine, ring)
        numbers = value.split(",")
        assert sorted(numbers) == sorted(gpu_number(fabric.devices[d]) for d in mine)
        in_ring = [gpu_number(fabric.devices[d]) for d in ring if fabric.devices[d].host == host]
        assert numbers == in_ring


def test_cuda_visible_devices_refuses_what_it_cannot_number() -> None:
    two = pod()
    ring = ring_devices(two, ["dgx-h100-0/gpu0", "dgx-h100-1/gpu0"])
    with pytest.raises(CommError, match="span hosts"):
        cuda_visible_devices(two, ["dgx-h100-0/gpu0", "dgx-h100-1/gpu0"], ring)
    with pytest.raises(CommError, match="not in the ring"):
        cuda_visible_devices(two, ["dgx-h100-0/gpu1"], ring)
    odd = odd_fabric()
    with pytest.raises(CommError, match="not an NVIDIA GPU"):
        cuda_visible_devices(odd, ["amd/gpu0"], ["amd/gpu0"])


# ----- the topology file -------------------------------------------------------------------
@pytest.mark.parametrize(("name", "fabric", "host"), XML_CASES, ids=XML_IDS)
def test_topology_file_is_what_nccls_reader_accepts(name: str, fabric: Fabric, host: str) -> None:
    text = nccl_topo_xml(fabric, host)
    root = ET.fromstring(text)  # plain XML too
    assert root.tag == "system"
    system = check_topology(text)
    # nesting as ncclTopoAddCpu / ncclTopoAddPci build it: system > cpu > pci > (pci | gpu
    # | nic); a <gpu> is the only child of its own <pci>; nic > net; gpu > nvlink
    for n in system.walk():
        if n.name == "gpu":
            assert n.parent is not None and n.parent.name == "pci"
            assert [s.name for s in n.parent.subs] == ["gpu"]
        if n.name == "net":
            assert n.parent is not None and n.parent.name == "nic"
        if n.name == "nic":
            assert n.parent is not None and n.parent.name == "pci"
    assert text == nccl_topo_xml(fabric, host), "stable"


@pytest.mark.parametrize(("name", "fabric", "host"), XML_CASES, ids=XML_IDS)
def test_one_gpu_element_per_gpu_with_unique_dev_and_rank(
    name: str, fabric: Fabric, host: str
) -> None:
    system = nccl_read(nccl_topo_xml(fabric, host))
    gpus = [n for n in system.walk() if n.name == "gpu"]
    expected = host_gpus(fabric, host)
    assert len(gpus) == len(expected)
    assert sorted(n.get("dev") or "" for n in gpus) == sorted(
        gpu_number(fabric.devices[d]) for d in expected
    )
    assert len({n.get("rank") for n in gpus}) == len(gpus)
    # every CPU socket of the host is a <cpu>, numbered by its NUMA node
    sockets = [s for s in fabric.host(host).layout.switches if s.kind is SwitchKind.CPU_ROOT]
    cpus = [n for n in system.subs if n.name == "cpu"]
    assert sorted(int(c.get("numaid") or "-1") for c in cpus) == sorted(
        s.numa or 0 for s in sockets
    )
    # a GPU hangs under the <cpu> of its NUMA node
    for n in gpus:
        dev = next(
            fabric.devices[d] for d in expected if gpu_number(fabric.devices[d]) == n.get("dev")
        )
        top = n
        while top.parent is not None and top.name != "cpu":
            top = top.parent
        assert top.get("numaid") == str(dev.numa)


def _expected_nvlinks(fabric: Fabric, host: str) -> Counter[tuple[str, str]]:
    """(gpu number, peer gpu number or 'NVS') -> links, from the fabric."""
    out: Counter[tuple[str, str]] = Counter()
    gpus = {fabric.devices[d].id: gpu_number(fabric.devices[d]) for d in host_gpus(fabric, host)}
    for link in [*fabric.host_links(host), *fabric.external_links]:
        if link.medium not in (LinkMedium.NVLINK, LinkMedium.NVSWITCH):
            continue
        for a, b in ((link.a, link.b), (link.b, link.a)):
            if a not in gpus:
                continue
            if b in gpus:
                out[(gpus[a], gpus[b])] += link.type.count
            elif fabric.node_kind(b) is SwitchKind.NVSWITCH:
                out[(gpus[a], "NVS")] += link.type.count
    return out


def _xml_nvlinks(system: Node) -> Counter[tuple[str, str]]:
    gpus = xml_gpus(system)
    dev_of_bus = {g.parent.get("busid"): dev for dev, g in gpus.items() if g.parent}
    out: Counter[tuple[str, str]] = Counter()
    for dev, g in gpus.items():
        for s in g.subs:
            if s.name != "nvlink":
                continue
            if s.get("tclass") == "0x068000":
                peer = "NVS"
            else:
                assert s.get("tclass") == "0x030200"
                peer = dev_of_bus[s.get("target")]
            out[(dev, peer)] += int(s.get("count") or "0")
    return out


@pytest.mark.parametrize(("name", "fabric", "host"), XML_CASES, ids=XML_IDS)
def test_nvlink_counts_are_the_fabrics(name: str, fabric: Fabric, host: str) -> None:
    system = nccl_read(nccl_topo_xml(fabric, host))
    assert _xml_nvlinks(system) == _expected_nvlinks(fabric, host)


def test_cube_mesh_and_nvswitch_are_written_as_nccl_dumps_them() -> None:
    # DGX-1: GPU-to-GPU rows with the peer's bus id, 1 or 2 links, 6 links per GPU
    system = nccl_read(nccl_topo_xml(load_fabric("dgx1-v100"), "dgx1"))
    for g in xml_gpus(system).values():
        rows = [s for s in g.subs if s.name == "nvlink"]
        assert {s.get("tclass") for s in rows} == {"0x030200"}
        assert sum(int(s.get("count") or "0") for s in rows) == 6
    # DGX H100: one row per GPU to the NVSwitch, all 18 links, one switch bus id for all
    system = nccl_read(nccl_topo_xml(load_fabric("dgx-h100"), "dgx-h100"))
    rows = [s for g in xml_gpus(system).values() for s in g.subs]
    assert len(rows) == 8
    assert {(s.get("count"), s.get("tclass")) for s in rows} == {("18", "0x068000")}
    assert len({s.get("target") for s in rows}) == 1
    pci_buses = {n.get("busid") for n in system.walk() if n.name == "pci"}
    assert rows[0].get("target") not in pci_buses


def _nets(system: Node) -> list[Node]:
    return [n for n in system.walk() if n.name == "net"]


@pytest.mark.parametrize(("name", "fabric", "host"), XML_CASES, ids=XML_IDS)
def test_a_net_per_adapter_at_the_fabrics_speed(name: str, fabric: Fabric, host: str) -> None:
    system = nccl_read(nccl_topo_xml(fabric, host))
    nets = _nets(system)
    h = fabric.host(host)
    adapters = [s.name for s in h.layout.switches if s.kind is SwitchKind.NIC]
    assert len(nets) == len(adapters)
    assert len({n.get("dev") for n in nets}) == len(nets)
    assert len({n.get("name") for n in nets}) == len(nets)
    by_name = {n.get("name"): n for n in nets}
    for nic in nccl_nics(fabric, host):
        net = by_name[nic.net_name]
        uplinks = fabric.external_adjacency(h.node_id(nic.local))
        if not uplinks:
            assert net.get("speed") is None  # the fabric does not know it; NCCL asks the NIC
            continue
        bw = max(lk.bandwidth_gbps for lk in uplinks)  # GB/s one way; NCCL: Mbit/s
        assert int(net.get("speed") or "0") == pytest.approx(bw * 8000, rel=1e-3)
        pci = net.parent.parent if net.parent else None
        assert pci is not None and pci.name == "pci"
        ib = uplinks[0].medium is LinkMedium.INFINIBAND
        assert pci.get("class") == ("0x020700" if ib else "0x020000")


def test_pod_hosts_describe_only_their_own_gpus_and_nics() -> None:
    two = pod()
    texts = {h: nccl_topo_xml(two, h) for h in ("dgx-h100-0", "dgx-h100-1")}
    for host, text in texts.items():
        system = nccl_read(text)
        assert len(xml_gpus(system)) == 8
        assert sorted(n.get("name") or "" for n in _nets(system)) == [f"mlx5_{k}" for k in range(8)]
        for n in _nets(system):
            assert n.get("speed") == "400000"  # NDR
        assert len([s for s in two.host(host).layout.switches if s.kind is SwitchKind.NIC]) == 8
    # alike boxes, alike files (bus ids are the layout's, not the host's)
    assert texts["dgx-h100-0"] == texts["dgx-h100-1"]


def test_discovered_gpus_keep_nvmls_bus_ids_and_the_rest_does_not_collide() -> None:
    found = discovered(nf.dgx_h100())
    system = check_topology(nccl_topo_xml(found, "box"))
    gpus = xml_gpus(system)
    for d in host_gpus(found, "box"):
        dev = found.devices[d]
        bus = gpus[gpu_number(dev)].parent
        assert bus is not None
        domain, rest = (dev.pci_bus or "").split(":", 1)
        assert bus.get("busid") == f"{int(domain, 16):04x}:{rest.lower()}"
    azure = discovered(nf.azure_a100_pairs())
    system = check_topology(nccl_topo_xml(azure, "box"))
    buses = [g.parent.get("busid") or "" for g in xml_gpus(system).values() if g.parent]
    assert sorted(buses) == [f"000{k}:00:00.0" for k in range(1, 5)]


def test_gdr_is_left_to_nccl_unless_stated() -> None:
    two = pod()
    plain = nccl_read(nccl_topo_xml(two, "dgx-h100-0"))
    assert all(n.get("gdr") is None for n in plain.walk())
    stated = nccl_read(nccl_topo_xml(two, "dgx-h100-0", gdr=True))
    assert {n.get("gdr") for n in stated.walk() if n.name in ("gpu", "net")} == {"1"}


def test_cpu_identity_follows_the_socket_link() -> None:
    def cpu(fabric: Fabric, host: str) -> tuple[str | None, ...]:
        c = nccl_read(nccl_topo_xml(fabric, host)).subs[0]
        return c.get("vendor"), c.get("familyid")

    assert cpu(load_fabric("dgx1-v100"), "dgx1") == ("GenuineIntel", "6")  # QPI: Broadwell
    assert cpu(load_fabric("dgx-a100"), "dgx-a100") == ("AuthenticAMD", "23")  # EPYC Rome


def test_hosts_without_an_nccl_gpu_have_no_topology_file() -> None:
    with pytest.raises(CommError, match="no NVIDIA GPU"):
        nccl_topo_xml(odd_fabric(), "amd")
    with pytest.raises(CommError, match="no NVIDIA GPU"):
        nccl_topo_xml(load_fabric("mixed-lab"), "jetson0")


# ----- the environment ---------------------------------------------------------------------
def test_pod_task_env() -> None:
    two = pod()
    devices = list(two.devices)
    random.Random(5).shuffle(devices)
    ring = ring_devices(two, devices)
    for host in ("dgx-h100-0", "dgx-h100-1"):
        env = nccl_env(two, devices, host, f"/run/{host}.xml")
        assert env["NCCL_TOPO_FILE"] == f"/run/{host}.xml"
        assert env["NCCL_IB_HCA"] == "=" + ",".join(f"mlx5_{k}" for k in range(8))
        assert env["NCCL_SOCKET_IFNAME"] == "=" + ",".join(f"ib{k}" for k in range(8))
        assert env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
        cvd = env["CUDA_VISIBLE_DEVICES"].split(",")
        assert sorted(cvd, key=int) == [str(k) for k in range(8)]
        assert cvd == [two.devices[d].name[3:] for d in ring if two.devices[d].host == host]
        # the HCAs named are those the topology file names
        names = {n.get("name") for n in _nets(nccl_read(nccl_topo_xml(two, host)))}
        assert set(env["NCCL_IB_HCA"][1:].split(",")) == names
    assert "NCCL_TOPO_FILE" not in nccl_env(two, devices, "dgx-h100-0")
    assert nccl_env(two, devices, "dgx-h100-0", ring=ring) == nccl_env(two, devices, "dgx-h100-0")


def test_ib_hca_names_exactly_the_rdma_adapters() -> None:
    lab = load_fabric("mixed-lab")
    l4 = nccl_env(lab, ["l4box/gpu3", "l4box/gpu1"], "l4box")
    assert l4["NCCL_IB_HCA"] == "=mlx5_0"  # one HDR port
    assert l4["CUDA_VISIBLE_DEVICES"] == "3,1"
    t4 = nccl_env(lab, ["t4box/gpu0", "t4box/gpu2"], "t4box")
    assert "NCCL_IB_HCA" not in t4  # Ethernet only: NCCL's socket transport
    assert t4["NCCL_SOCKET_IFNAME"] == "=eth0"
    odd = nccl_env(odd_fabric(), ["nv/gpu0", "nv/gpu1"], "nv")
    assert odd["NCCL_IB_HCA"] == "=mlx5_0"  # RoCE is an RDMA HCA too
    assert odd["NCCL_SOCKET_IFNAME"] == "=eth0"


def test_adapters_without_a_network_link_are_named_but_not_listed() -> None:
    # dgx-h100 alone has no network: the fabric does not know what its 8 adapters are
    fabric = load_fabric("dgx-h100")
    env = nccl_env(fabric, ["gpu0", "gpu1"], "dgx-h100")
    assert "NCCL_IB_HCA" not in env and "NCCL_SOCKET_IFNAME" not in env
    assert {n.kind for n in nccl_nics(fabric, "dgx-h100")} == {"unknown"}


def test_non_nvidia_devices_get_no_nccl_variables() -> None:
    lab = load_fabric("mixed-lab")
    assert nccl_env(lab, ["jetson0/gpu0", "jetson1/gpu0"], "jetson0") == {}  # integrated
    odd = odd_fabric()
    assert nccl_env(odd, ["amd/gpu0", "amd/gpu1"], "amd") == {}
    assert nccl_env(odd, ["tpu/tpu0", "tpu/tpu1"], "tpu") == {}
    assert nccl_env(odd, ["nv/gpu0", "amd/gpu0"], "nv") == {}  # no NCCL across vendors
    cpus = discover(cpu_devices=2, nvml=nf.FakeNvml(nf.v100_box()), hostname="box").fabric
    cores = [d for d in cpus.devices if cpus.devices[d].kind.value == "cpu"]
    assert nccl_env(cpus, cores, "box") == {}


def test_env_needs_a_device_on_the_host() -> None:
    two = pod()
    with pytest.raises(CommError, match="no device of the job"):
        nccl_env(two, ["dgx-h100-0/gpu0", "dgx-h100-0/gpu1"], "dgx-h100-1")
    with pytest.raises(KeyError):
        nccl_env(two, ["dgx-h100-0/gpu0"], "nowhere")


def test_the_reader_port_rejects_what_nccl_rejects() -> None:
    ok = '<system version="1">\n  <cpu numaid="0" arch="arm64"/>\n</system>\n'
    assert nccl_read(ok).subs[0].get("arch") == "arm64"
    for bad in (
        '<?xml version="1.0"?>\n' + ok,  # a declaration is "expected >, got '?'"
        ok.replace('"0"', "0"),  # unquoted value
        ok.replace("<cpu", "<gpu"),  # no handler: NCCL ignores it silently
        ok.replace("</system>", "</cpu>"),  # mismatch
        ok.replace("\n  <cpu", "\n\t<cpu"),  # tabs are not skipped
    ):
        with pytest.raises(NcclParseError):
            nccl_read(bad)
