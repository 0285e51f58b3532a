"""Recorded fakes of the NVML calls that ``accelnet.fabric.discovery`` makes.

A :class:`FakeNvml` stands in for the ``pynvml`` module (package ``nvidia-ml-py``) on machines
without a GPU. It exposes the same function names with the same parameters, the same
``NVML_*`` constants (with the values the real module has), answers with the real ctypes
structures (``pynvml.nvmlPciInfo_t``, ``pynvml.c_nvmlMemory_t``) and raises the real
``pynvml.NVMLError`` subclasses where the driver would: ``NVMLError_NotSupported`` for a
feature the GPU lacks, ``NVMLError_InvalidArgument`` for a link index past the GPU's ports,
``NVMLError_Uninitialized`` before ``nvmlInit``, ``NVMLError_FunctionNotFound`` for a call an
older driver does not export. ``tests/fabric/test_discovery.py`` checks this surface against
the installed ``pynvml`` so that the fake cannot drift from the real library.

The machines (values as ``nvidia-smi`` / NVML report them):

- :func:`dgx_h100` -- 8 x "NVIDIA H100 80GB HBM3", 81559 MiB, 700 W enforced limit, PCIe
  Gen5 x16, buses 1B 43 52 61 (NUMA 0) and 9D C3 D1 DF (NUMA 1). Each GPU has 18 NVLink 4
  ports (``nvmlDeviceGetNvLinkVersion`` answers ``NVML_NVLINK_VERSION_4_0`` = 6, an enum, not
  4), all up, all to one of four NVSwitch chips (remote type ``SWITCH``, remote PCI buses
  05..08 as an HGX H100 reports them, 4/5/5/4 ports per chip). PCIe: on a DGX H100 every GPU
  sits behind a PCIe switch of its own (shared with a ConnectX-7 adapter, which the GPU-pair
  query does not show), so GPUs of one socket meet at ``NVML_TOPOLOGY_NODE`` and GPUs of two
  sockets at ``NVML_TOPOLOGY_SYSTEM``. :data:`HGX_PAIRED_SWITCHES` is the other common
  layout (GPU pairs 0-1, 2-3, 4-5, 6-7 behind one switch each: ``SINGLE``).
- :func:`v100_box` -- 4 x "Tesla V100-SXM2-16GB", 16160 MiB, 300 W, PCIe Gen3 x16, six
  NVLink 2 ports each (``NVML_NVLINK_VERSION_2_0`` = 2) wired GPU to GPU with no NVSwitch:
  0-1 two links, 0-2 one, 1-3 one, 2-3 two; 0-3 and 1-2 have none, the other ports are
  down. GPUs 0-1 share a PCIe switch on socket 0, GPUs 2-3 one on socket 1 (``SINGLE``
  within a pair, ``SYSTEM`` across).
- :func:`azure_a100_pairs` -- 4 x "NVIDIA A100 80GB PCIe" in a Hyper-V VM (Azure NC A100
  v4): every GPU in a PCI domain of its own, all on bus 00 (``00000001:00:00.0`` ...), GPU
  pairs 0-1 and 2-3 joined by NVLink bridges (12 links, ``NVML_NVLINK_VERSION_3_1`` = 5 as
  an A100 answers).

UUIDs are made up in the real format (``GPU-`` and 8-4-4-4-12 hex digits).
"""

# ruff: noqa: N802  (the fake mirrors pynvml's function names)

from __future__ import annotations

import inspect
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import pynvml

# Values of the real pynvml constants (checked against it by test_discovery.py).
NVML_FEATURE_DISABLED = 0
NVML_FEATURE_ENABLED = 1
NVML_NVLINK_DEVICE_TYPE_GPU = 0
NVML_NVLINK_DEVICE_TYPE_IBMNPU = 1
NVML_NVLINK_DEVICE_TYPE_SWITCH = 2
NVML_NVLINK_DEVICE_TYPE_UNKNOWN = 255
NVML_NVLINK_MAX_LINKS = 36  # nvidia-ml-py 13: ports a GPU may have; discovery probes them all
NVML_NVLINK_VERSION_INVALID = 0
NVML_NVLINK_VERSION_1_0 = 1
NVML_NVLINK_VERSION_2_0 = 2
NVML_NVLINK_VERSION_2_2 = 3
NVML_NVLINK_VERSION_3_0 = 4
NVML_NVLINK_VERSION_3_1 = 5
NVML_NVLINK_VERSION_4_0 = 6
NVML_NVLINK_VERSION_5_0 = 7
NVML_TOPOLOGY_INTERNAL = 0
NVML_TOPOLOGY_SINGLE = 10
NVML_TOPOLOGY_MULTIPLE = 20
NVML_TOPOLOGY_HOSTBRIDGE = 30
NVML_TOPOLOGY_NODE = 40
NVML_TOPOLOGY_SYSTEM = 50


@dataclass(frozen=True)
class Port:
    """One NVLink port: where it goes, and whether it is up."""

    remote_bus: str
    remote_type: int = NVML_NVLINK_DEVICE_TYPE_GPU
    active: bool = True


@dataclass(frozen=True)
class Gpu:
    """What NVML reports about one GPU; ``numa=None`` means the query is not supported."""

    name: str
    uuid: str
    bus: str  # as NVML prints it: 8-digit domain, upper-case hex
    memory_mib: int
    power_limit_mw: int
    numa: int | None
    pcie_gen: int
    pcie_width: int
    device_id: int = 0  # PCI device and vendor id, as nvmlPciInfo_t.pciDeviceId
    nvlink_version: int = NVML_NVLINK_VERSION_INVALID
    ports: tuple[Port, ...] = ()  # every NVLink port the GPU has, up or down


@dataclass(frozen=True)
class Machine:
    """A recorded machine: driver, GPUs in NVML order, and pairwise PCIe common ancestors."""

    driver: str
    gpus: tuple[Gpu, ...]
    ancestors: Mapping[tuple[int, int], int]

    def ancestor(self, i: int, j: int) -> int:
        if i == j:
            return NVML_TOPOLOGY_INTERNAL
        return self.ancestors[(min(i, j), max(i, j))]

    def with_gpus(self, **changes: Any) -> Machine:
        """The same machine with every GPU's fields replaced (``name=...``, ``numa=...``)."""
        return replace(self, gpus=tuple(replace(g, **changes) for g in self.gpus))


class _Handle:
    """An opaque device handle (the real one is a ctypes pointer)."""

    __slots__ = ("index",)

    def __init__(self, index: int) -> None:
        self.index = index

    def __repr__(self) -> str:
        return f"<fake nvmlDevice_t {self.index}>"


def _pci_info(bus: str, device_id: int = 0) -> pynvml.nvmlPciInfo_t:
    info = pynvml.nvmlPciInfo_t()
    domain, bus_no, dev_fn = bus.split(":")
    info.busId = bus
    info.busIdLegacy = bus[4:]  # NVML's legacy form has a 4-digit domain
    info.domain = int(domain, 16)
    info.bus = int(bus_no, 16)
    info.device = int(dev_fn.split(".")[0], 16)
    info.pciDeviceId = device_id
    return info


@dataclass
class FakeNvml:
    """A stand-in for the ``pynvml`` module, answering for ``machine``.

    ``init_error`` is raised by ``nvmlInit`` (no library, no driver); ``errors`` maps a
    function name to the exception it raises (an older driver's ``FunctionNotFound``, a
    ``GpuIsLost``). ``calls`` records every NVML function called, in order.
    """

    machine: Machine
    init_error: pynvml.NVMLError | None = None
    errors: Mapping[str, pynvml.NVMLError] = field(default_factory=dict)
    calls: list[str] = field(default_factory=list)
    initialized: int = 0
    shutdowns: int = 0

    # the constants, as module attributes of pynvml
    NVML_FEATURE_DISABLED = NVML_FEATURE_DISABLED
    NVML_FEATURE_ENABLED = NVML_FEATURE_ENABLED
    NVML_NVLINK_DEVICE_TYPE_GPU = NVML_NVLINK_DEVICE_TYPE_GPU
    NVML_NVLINK_DEVICE_TYPE_IBMNPU = NVML_NVLINK_DEVICE_TYPE_IBMNPU
    NVML_NVLINK_DEVICE_TYPE_SWITCH = NVML_NVLINK_DEVICE_TYPE_SWITCH
    NVML_NVLINK_DEVICE_TYPE_UNKNOWN = NVML_NVLINK_DEVICE_TYPE_UNKNOWN
    NVML_NVLINK_MAX_LINKS = NVML_NVLINK_MAX_LINKS
    NVML_NVLINK_VERSION_INVALID = NVML_NVLINK_VERSION_INVALID
    NVML_NVLINK_VERSION_1_0 = NVML_NVLINK_VERSION_1_0
    NVML_NVLINK_VERSION_2_0 = NVML_NVLINK_VERSION_2_0
    NVML_NVLINK_VERSION_2_2 = NVML_NVLINK_VERSION_2_2
    NVML_NVLINK_VERSION_3_0 = NVML_NVLINK_VERSION_3_0
    NVML_NVLINK_VERSION_3_1 = NVML_NVLINK_VERSION_3_1
    NVML_NVLINK_VERSION_4_0 = NVML_NVLINK_VERSION_4_0
    NVML_NVLINK_VERSION_5_0 = NVML_NVLINK_VERSION_5_0
    NVML_TOPOLOGY_INTERNAL = NVML_TOPOLOGY_INTERNAL
    NVML_TOPOLOGY_SINGLE = NVML_TOPOLOGY_SINGLE
    NVML_TOPOLOGY_MULTIPLE = NVML_TOPOLOGY_MULTIPLE
    NVML_TOPOLOGY_HOSTBRIDGE = NVML_TOPOLOGY_HOSTBRIDGE
    NVML_TOPOLOGY_NODE = NVML_TOPOLOGY_NODE
    NVML_TOPOLOGY_SYSTEM = NVML_TOPOLOGY_SYSTEM

    # ----- bookkeeping --------------------------------------------------------------
    def _enter(self, name: str) -> None:
        self.calls.append(name)
        if name in self.errors:
            raise self.errors[name]
        if not self.initialized:
            raise pynvml.NVMLError_Uninitialized()

    def _gpu(self, handle: Any) -> Gpu:
        if not isinstance(handle, _Handle):
            raise pynvml.NVMLError_InvalidArgument()
        return self.machine.gpus[handle.index]

    def _port(self, handle: Any, link: int) -> Port:
        gpu = self._gpu(handle)
        if not gpu.ports:
            raise pynvml.NVMLError_NotSupported()
        if not 0 <= link < len(gpu.ports):
            raise pynvml.NVMLError_InvalidArgument()
        return gpu.ports[link]

    # ----- library ------------------------------------------------------------------
    def nvmlInit(self) -> None:
        self.calls.append("nvmlInit")
        if self.init_error is not None:
            raise self.init_error
        self.initialized += 1

    def nvmlShutdown(self) -> None:
        self._enter("nvmlShutdown")
        self.initialized -= 1
        self.shutdowns += 1

    def nvmlSystemGetDriverVersion(self) -> str:
        self._enter("nvmlSystemGetDriverVersion")
        return self.machine.driver

    def nvmlDeviceGetCount(self) -> int:
        self._enter("nvmlDeviceGetCount")
        return len(self.machine.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> _Handle:
        self._enter("nvmlDeviceGetHandleByIndex")
        if not 0 <= index < len(self.machine.gpus):
            raise pynvml.NVMLError_InvalidArgument()
        return _Handle(index)

    # ----- one device ---------------------------------------------------------------
    def nvmlDeviceGetName(self, handle: Any) -> str:
        self._enter("nvmlDeviceGetName")
        return self._gpu(handle).name

    def nvmlDeviceGetUUID(self, handle: Any) -> str:
        self._enter("nvmlDeviceGetUUID")
        return self._gpu(handle).uuid

    def nvmlDeviceGetPciInfo(self, handle: Any) -> pynvml.nvmlPciInfo_t:
        self._enter("nvmlDeviceGetPciInfo")
        gpu = self._gpu(handle)
        return _pci_info(gpu.bus, gpu.device_id)

    def nvmlDeviceGetMemoryInfo(self, handle: Any, version: Any = None) -> Any:
        self._enter("nvmlDeviceGetMemoryInfo")
        total = self._gpu(handle).memory_mib * 2**20
        reserved = 0
        if version:
            mem: Any = pynvml.c_nvmlMemory_v2_t()
            mem.version = version
            reserved = 512 * 2**20
            mem.reserved = reserved
        else:
            mem = pynvml.c_nvmlMemory_t()
        mem.total = total
        mem.used = reserved
        mem.free = total - reserved
        return mem

    def nvmlDeviceGetEnforcedPowerLimit(self, handle: Any) -> int:
        self._enter("nvmlDeviceGetEnforcedPowerLimit")
        return self._gpu(handle).power_limit_mw

    def nvmlDeviceGetNumaNodeId(self, handle: Any) -> int:
        self._enter("nvmlDeviceGetNumaNodeId")
        numa = self._gpu(handle).numa
        if numa is None:
            raise pynvml.NVMLError_NotSupported()
        return numa

    def nvmlDeviceGetMaxPcieLinkGeneration(self, handle: Any) -> int:
        self._enter("nvmlDeviceGetMaxPcieLinkGeneration")
        return self._gpu(handle).pcie_gen

    def nvmlDeviceGetMaxPcieLinkWidth(self, handle: Any) -> int:
        self._enter("nvmlDeviceGetMaxPcieLinkWidth")
        return self._gpu(handle).pcie_width

    # ----- NVLink ---------------------------------------------------------------------
    def nvmlDeviceGetNvLinkState(self, device: Any, link: int) -> int:
        self._enter("nvmlDeviceGetNvLinkState")
        port = self._port(device, link)
        return NVML_FEATURE_ENABLED if port.active else NVML_FEATURE_DISABLED

    def nvmlDeviceGetNvLinkVersion(self, device: Any, link: int) -> int:
        self._enter("nvmlDeviceGetNvLinkVersion")
        self._port(device, link)
        return self._gpu(device).nvlink_version

    def nvmlDeviceGetNvLinkRemoteDeviceType(self, handle: Any, link: int) -> int:
        self._enter("nvmlDeviceGetNvLinkRemoteDeviceType")
        port = self._port(handle, link)
        return port.remote_type if port.active else NVML_NVLINK_DEVICE_TYPE_UNKNOWN

    def nvmlDeviceGetNvLinkRemotePciInfo(self, device: Any, link: int) -> pynvml.nvmlPciInfo_t:
        self._enter("nvmlDeviceGetNvLinkRemotePciInfo")
        port = self._port(device, link)
        if not port.active:
            raise pynvml.NVMLError_NotSupported()
        return _pci_info(port.remote_bus)

    # ----- topology -------------------------------------------------------------------
    def nvmlDeviceGetTopologyCommonAncestor(self, device1: Any, device2: Any) -> int:
        self._enter("nvmlDeviceGetTopologyCommonAncestor")
        self._gpu(device1)
        self._gpu(device2)
        return self.machine.ancestor(device1.index, device2.index)


def fake_functions() -> dict[str, Any]:
    """The NVML functions :class:`FakeNvml` implements, by name (unbound)."""
    return {
        name: fn
        for name, fn in inspect.getmembers(FakeNvml, inspect.isfunction)
        if name.startswith("nvml")
    }


def fake_constants() -> dict[str, Any]:
    """The ``NVML_*`` constants :class:`FakeNvml` exposes, by name."""
    return {name: getattr(FakeNvml, name) for name in dir(FakeNvml) if name.startswith("NVML_")}


# ----- recorded machines ------------------------------------------------------------------

H100_BUSES = ("1B", "43", "52", "61", "9D", "C3", "D1", "DF")
# HGX H100 port -> NVSwitch wiring as `nvidia-smi nvlink -R` shows it (remote buses 05..08).
_H100_SWITCH_OF_PORT = (7, 7, 6, 6, 7, 7, 6, 6, 5, 5, 7, 6, 8, 8, 5, 5, 8, 8)
_DGX_NODE = {
    (i, j): NVML_TOPOLOGY_NODE if i // 4 == j // 4 else NVML_TOPOLOGY_SYSTEM
    for i in range(8)
    for j in range(i + 1, 8)
}
DGX_H100_ANCESTORS: Mapping[tuple[int, int], int] = _DGX_NODE
HGX_PAIRED_SWITCHES: Mapping[tuple[int, int], int] = {
    (i, j): NVML_TOPOLOGY_SINGLE if i // 2 == j // 2 else level
    for (i, j), level in _DGX_NODE.items()
}


def _uuid(seed: int) -> str:
    h = f"{seed * 0x9E3779B97F4A7C15 & (2**128 - 1):032x}"
    return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def dgx_h100(ancestors: Mapping[tuple[int, int], int] = DGX_H100_ANCESTORS) -> Machine:
    """An NVIDIA DGX H100 (see the module docstring)."""
    ports = tuple(
        Port(f"00000000:{sw:02X}:00.0", NVML_NVLINK_DEVICE_TYPE_SWITCH)
        for sw in _H100_SWITCH_OF_PORT
    )
    gpus = tuple(
        Gpu(
            name="NVIDIA H100 80GB HBM3",
            uuid=_uuid(100 + i),
            bus=f"00000000:{bus}:00.0",
            memory_mib=81559,
            power_limit_mw=700_000,
            numa=i // 4,
            pcie_gen=5,
            pcie_width=16,
            device_id=0x233010DE,
            nvlink_version=NVML_NVLINK_VERSION_4_0,
            ports=ports,
        )
        for i, bus in enumerate(H100_BUSES)
    )
    return Machine("535.129.03", gpus, dict(ancestors))


V100_BUSES = ("1A", "1C", "88", "8A")
V100_LINKS = {(0, 1): 2, (0, 2): 1, (1, 3): 1, (2, 3): 2}  # GPU pair -> NVLinks between them
V100_ANCESTORS: Mapping[tuple[int, int], int] = {
    (0, 1): NVML_TOPOLOGY_SINGLE,
    (2, 3): NVML_TOPOLOGY_SINGLE,
    (0, 2): NVML_TOPOLOGY_SYSTEM,
    (0, 3): NVML_TOPOLOGY_SYSTEM,
    (1, 2): NVML_TOPOLOGY_SYSTEM,
    (1, 3): NVML_TOPOLOGY_SYSTEM,
}


def v100_box(
    ancestors: Mapping[tuple[int, int], int] = V100_ANCESTORS,
    numa: tuple[int | None, ...] = (0, 0, 1, 1),
) -> Machine:
    """Four V100 SXM2 GPUs with direct NVLinks and no NVSwitch (see the module docstring)."""
    buses = [f"00000000:{b}:00.0" for b in V100_BUSES]
    gpus = []
    for i in range(4):
        ports: list[Port] = []
        for (a, b), n in sorted(V100_LINKS.items()):
            if i in (a, b):
                ports += [Port(buses[b if i == a else a])] * n
        ports += [Port("00000000:00:00.0", active=False)] * (6 - len(ports))
        gpus.append(
            Gpu(
                name="Tesla V100-SXM2-16GB",
                uuid=_uuid(200 + i),
                bus=buses[i],
                memory_mib=16160,
                power_limit_mw=300_000,
                numa=numa[i],
                pcie_gen=3,
                pcie_width=16,
                device_id=0x1DB110DE,
                nvlink_version=NVML_NVLINK_VERSION_2_0,
                ports=tuple(ports),
            )
        )
    return Machine("470.182.03", tuple(gpus), dict(ancestors))


def azure_a100_pairs() -> Machine:
    """Four A100 PCIe GPUs of a Hyper-V VM, NVLink-bridged in pairs (see the docstring)."""
    buses = [f"0000000{d}:00:00.0" for d in range(1, 5)]
    gpus = tuple(
        Gpu(
            name="NVIDIA A100 80GB PCIe",
            uuid=_uuid(300 + i),
            bus=buses[i],
            memory_mib=81920,
            power_limit_mw=300_000,
            numa=i // 2,
            pcie_gen=4,
            pcie_width=16,
            device_id=0x20B510DE,
            nvlink_version=NVML_NVLINK_VERSION_3_1,
            ports=(Port(buses[i ^ 1]),) * 12,
        )
        for i in range(4)
    )
    ancestors = {
        (i, j): NVML_TOPOLOGY_NODE if i // 2 == j // 2 else NVML_TOPOLOGY_SYSTEM
        for i in range(4)
        for j in range(i + 1, 4)
    }
    return Machine("550.90.07", gpus, ancestors)


def two_gpus(name: str, nvlink_version: int, links: int, memory_mib: int = 40960) -> Machine:
    """Two GPUs of ``name`` joined by ``links`` NVLinks, on one PCIe switch."""
    buses = ("00000000:3B:00.0", "00000000:5E:00.0")
    gpus = tuple(
        Gpu(
            name=name,
            uuid=_uuid(400 + i),
            bus=buses[i],
            memory_mib=memory_mib,
            power_limit_mw=250_000,
            numa=0,
            pcie_gen=4,
            pcie_width=16,
            nvlink_version=nvlink_version,
            ports=(Port(buses[1 - i]),) * links,
        )
        for i in range(2)
    )
    return Machine("550.90.07", gpus, {(0, 1): NVML_TOPOLOGY_SINGLE})
