"""Discover the local machine: CPU cores and memory through psutil, NVIDIA GPUs through NVML.

NVML (the ``pynvml`` module of the ``nvidia-ml-py`` package, extra ``nvidia``) is imported
lazily. No library, no driver or no GPU gives a CPU-only fabric and a one-line note, never a
crash. The NVML module is injectable so that tests can drive the same code with a recorded
fake; on a machine with GPUs the real module runs through exactly the same calls.

From NVML: name, memory, UUID, PCI bus id, NUMA node, power limit, PCIe generation/width,
NVLink peers and link counts (to other GPUs or to NVSwitches), and the PCIe common ancestor
of every GPU pair (``nvmlDeviceGetTopologyCommonAncestor``) from which PCIe switches are
inferred: GPUs under one switch share a ``pcie`` node, several switches under one bridge
share a parent ``pcie`` node.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import platform
import re
import socket
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

import psutil

from accelnet.fabric.catalog import bundle, device_model, link_type, with_lanes
from accelnet.fabric.fabric import Fabric, FabricBuilder
from accelnet.fabric.layout import MEMBUS, sockets_of
from accelnet.fabric.model import (
    DeviceKind,
    DeviceModel,
    HostLayout,
    LinkType,
    LocalDevice,
    LocalLink,
    LocalSwitch,
    SwitchKind,
)

CpuMode = Literal["per-core", "per-socket", "none"] | int

# NVML's common-ancestor levels (nvmlGpuTopologyLevel_t).
TOPO_INTERNAL, TOPO_SINGLE, TOPO_MULTIPLE, TOPO_HOSTBRIDGE, TOPO_NODE, TOPO_SYSTEM = (
    0, 10, 20, 30, 40, 50,
)  # fmt: skip

# NVML marketing names -> catalog models; first match wins, so specific names come first.
_NVML_NAMES: tuple[tuple[str, str], ...] = (
    ("GH200", "H200"),
    ("H200", "H200"),
    ("H100 NVL", "H100-NVL"),
    ("H100 PCIe", "H100-PCIe"),
    ("H100", "H100-SXM"),
    ("B200", "B200"),
    ("A100-SXM4-40GB", "A100-SXM4-40GB"),
    ("A100-PCIE-40GB", "A100-PCIe-40GB"),
    ("A100-PCIE", "A100-PCIe-80GB"),
    ("A100 80GB PCIe", "A100-PCIe-80GB"),
    ("A100", "A100-SXM4-80GB"),
    ("L40S", "L40S"),
    ("L4", "L4"),
    ("T4", "T4"),
    ("V100-PCIE", "V100-PCIe"),
    ("V100", "V100"),
    ("P100-SXM2", "P100-SXM2"),
    ("P100", "P100"),
    ("K80", "K80"),
    ("Orin Nano", "Jetson-Orin-Nano"),
    ("Orin", "Jetson-AGX-Orin"),
)

# nvmlDeviceGetNvLinkVersion answers an nvmlNvlinkVersion_t, not the major version:
# 2 = 2.0, 3 = 2.2, 4 = 3.0, 5 = 3.1, 6 = 4.0, 7 = 5.0 (an A100 answers 5, an H100 6).
_NVLINK_BY_VERSION = {
    1: "NVLink1", 2: "NVLink2", 3: "NVLink2", 4: "NVLink3", 5: "NVLink3", 6: "NVLink4",
    7: "NVLink5",
}  # fmt: skip
_PCIE_BY_GEN = {3: "PCIe3x16", 4: "PCIe4x16", 5: "PCIe5x16", 6: "PCIe6x16"}


@dataclass(frozen=True, slots=True)
class GpuInfo:
    """What NVML told about one GPU."""

    index: int
    name: str
    uuid: str
    pci_bus: str
    memory_gb: float
    numa: int | None
    power_limit_w: float | None
    pcie_gen: int | None
    pcie_width: int | None
    nvlink_version: int | None
    nvlink_peers: dict[int, int] = field(default_factory=dict)  # GPU index -> link count
    nvswitch_links: int = 0


@dataclass(frozen=True, slots=True)
class NvmlReport:
    """GPUs and their pairwise PCIe common-ancestor levels, or why there are none."""

    gpus: tuple[GpuInfo, ...]
    ancestors: dict[tuple[int, int], int]
    driver: str = ""
    note: str = ""


@dataclass(frozen=True, slots=True)
class Discovery:
    """The discovered fabric and the notes a user should read (missing NVML, ...)."""

    fabric: Fabric
    notes: tuple[str, ...]


def _call(fn: Callable[..., Any], *args: Any, default: Any = None) -> Any:
    try:
        return fn(*args)
    except Exception:  # NVML raises NVMLError_NotSupported & co. for absent features
        return default


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def probe_nvml(nvml: Any | None = None) -> NvmlReport:
    """Ask NVML about every GPU; never raises. ``nvml`` defaults to the real ``pynvml``."""
    if nvml is None:
        try:
            nvml = importlib.import_module("pynvml")
        except ImportError:
            return NvmlReport((), {}, note="NVML not installed (pip install 'accelnet[nvidia]')")
    try:
        nvml.nvmlInit()
    except Exception as exc:
        return NvmlReport((), {}, note=f"no NVIDIA driver ({type(exc).__name__}): CPU only")
    try:
        return _probe(nvml)
    except Exception as exc:  # a GPU lost or hidden half-way: report it, never crash
        return NvmlReport((), {}, note=f"NVML failed ({type(exc).__name__}: {exc}): CPU only")
    finally:
        with contextlib.suppress(Exception):
            nvml.nvmlShutdown()


def _probe(nvml: Any) -> NvmlReport:
    driver = _text(_call(nvml.nvmlSystemGetDriverVersion, default=""))
    count = int(_call(nvml.nvmlDeviceGetCount, default=0))
    handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
    buses = [_text(nvml.nvmlDeviceGetPciInfo(h).busId).lower() for h in handles]
    by_bus = {_bus_key(b): i for i, b in enumerate(buses)}
    max_links = int(getattr(nvml, "NVML_NVLINK_MAX_LINKS", 18))
    enabled = getattr(nvml, "NVML_FEATURE_ENABLED", 1)
    gpus = []
    for i, h in enumerate(handles):
        peers: dict[int, int] = {}
        to_switch = 0
        version = None
        for link in range(max_links):
            if _call(nvml.nvmlDeviceGetNvLinkState, h, link) != enabled:
                continue
            version = version or _call(nvml.nvmlDeviceGetNvLinkVersion, h, link)
            kind = _call(nvml.nvmlDeviceGetNvLinkRemoteDeviceType, h, link)
            remote = _call(nvml.nvmlDeviceGetNvLinkRemotePciInfo, h, link)
            peer = by_bus.get(_bus_key(_text(remote.busId))) if remote is not None else None
            if peer is not None and peer != i:
                peers[peer] = peers.get(peer, 0) + 1
            elif kind == getattr(nvml, "NVML_NVLINK_DEVICE_TYPE_SWITCH", 2) or kind is None:
                to_switch += 1  # an NVSwitch (older drivers cannot say: count it as one)
        mem = _call(nvml.nvmlDeviceGetMemoryInfo, h)
        limit_mw = _call(nvml.nvmlDeviceGetEnforcedPowerLimit, h)
        numa = _call(nvml.nvmlDeviceGetNumaNodeId, h)
        gpus.append(
            GpuInfo(
                index=i,
                name=_text(nvml.nvmlDeviceGetName(h)),
                uuid=_text(_call(nvml.nvmlDeviceGetUUID, h, default="")),
                pci_bus=buses[i],
                memory_gb=(mem.total / 1e9) if mem is not None else 0.0,
                numa=numa if isinstance(numa, int) and numa >= 0 else _sysfs_numa(buses[i]),
                power_limit_w=limit_mw / 1000.0 if limit_mw else None,
                pcie_gen=_call(nvml.nvmlDeviceGetMaxPcieLinkGeneration, h),
                pcie_width=_call(nvml.nvmlDeviceGetMaxPcieLinkWidth, h),
                nvlink_version=version,
                nvlink_peers=peers,
                nvswitch_links=to_switch,
            )
        )
    ancestors: dict[tuple[int, int], int] = {}
    for i in range(count):
        for j in range(i + 1, count):
            level = _call(nvml.nvmlDeviceGetTopologyCommonAncestor, handles[i], handles[j])
            ancestors[(i, j)] = int(level) if level is not None else TOPO_SYSTEM
    return NvmlReport(tuple(gpus), ancestors, driver)


def _bus_key(bus: str) -> str:
    """``00000000:1B:00.0`` and ``0000:1b:00.0`` -> ``0000:1b:00.0``.

    The domain is kept (as 4 digits): VMs put each GPU in a domain of its own, all on bus 00
    (Azure: ``0001:00:00.0``, ``0002:00:00.0``, ...).
    """
    domain, sep, rest = bus.lower().partition(":")
    if sep and rest.count(":") == 1:
        with contextlib.suppress(ValueError):
            return f"{int(domain, 16):04x}:{rest}"
    return bus.lower()


def _sysfs_numa(bus: str, root: Path = Path("/sys/bus/pci/devices")) -> int | None:
    parts = bus.lower().split(":")
    name = f"{parts[-3][-4:]}:{parts[-2]}:{parts[-1]}" if len(parts) >= 3 else bus
    try:
        value = int((root / name / "numa_node").read_text().strip())
    except (OSError, ValueError):
        return None
    return value if value >= 0 else None


def gpu_model(name: str, memory_gb: float, power_w: float | None) -> DeviceModel:
    """Catalog model for an NVML name; an ad-hoc model with measured figures otherwise."""
    for needle, model_name in _NVML_NAMES:
        # not followed by a digit: an L40 is no L4, a T400 no T4, an RTX A1000 no A100
        if re.search(re.escape(needle) + r"(?!\d)", name, re.IGNORECASE):
            return device_model(model_name)
    return DeviceModel(
        name=name.removeprefix("NVIDIA ").replace(" ", "-"),
        kind=DeviceKind.GPU,
        vendor="nvidia",
        memory_gb=memory_gb,
        mem_bw_gbps=0.0,
        peak_tflops={},
        idle_w=0.0,
        max_w=power_w or 0.0,
        notes="not in the catalog; figures unknown (discovered through NVML)",
    )


def _cpu_slots(mode: CpuMode) -> tuple[int, list[tuple[int, int]]]:
    """(sockets, [(numa, cores of that device)]) for the CPU devices to create."""
    nodes = _numa_cpus()
    sockets = max(1, len(nodes))
    if mode in ("none", 0):
        return sockets, []
    if mode == "per-socket":
        return sockets, [(n, len(cpus)) for n, cpus in enumerate(nodes)]
    total = psutil.cpu_count(logical=False) or psutil.cpu_count() or 1
    count = total if mode == "per-core" else int(mode)
    if count < 1:
        raise ValueError(f"cpu devices must be 'per-core', 'per-socket', 'none' or >= 1: {mode}")
    return sockets, [(i * sockets // count, 1) for i in range(count)]


def _numa_cpus(root: Path = Path("/sys/devices/system/node")) -> list[list[int]]:
    nodes = []
    for path in sorted(root.glob("node[0-9]*"), key=lambda p: int(p.name[4:])):
        with contextlib.suppress(OSError, ValueError):
            nodes.append(_parse_cpulist((path / "cpulist").read_text()))
    return [n for n in nodes if n] or [list(range(os.cpu_count() or 1))]


def _parse_cpulist(text: str) -> list[int]:
    out: list[int] = []
    for part in filter(None, text.strip().split(",")):
        lo, _, hi = part.partition("-")
        out.extend(range(int(lo), int(hi or lo) + 1))
    return out


def _cpu_name() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def host_cpus() -> int:
    """Logical CPU cores of this machine (psutil, then ``os.cpu_count``, at least 1)."""
    return psutil.cpu_count(logical=True) or os.cpu_count() or 1


def host_memory_gb() -> float:
    """Physical memory (RAM) of this machine, GB (10^9 bytes)."""
    return psutil.virtual_memory().total / 1e9


def discover(
    cpu_devices: CpuMode = "per-core",
    nvml: Any | None = None,
    hostname: str | None = None,
    *,
    cpus: float | None = None,
    memory_gb: float | None = None,
) -> Discovery:
    """The local machine as a one-host fabric. Never raises for missing GPUs or NVML.

    The host declares the machine's logical CPU cores and RAM (GB) as what jobs may be
    given; ``cpus`` and ``memory_gb`` override them (FabricError unless finite and > 0).
    """
    host = (hostname or socket.gethostname().split(".")[0] or "localhost").replace("/", "-")
    report = probe_nvml(nvml)
    sockets, cpu_slots = _cpu_slots(cpu_devices)
    gpu_numas = [g.numa for g in report.gpus if g.numa is not None]
    sockets = max([sockets, *(n + 1 for n in gpu_numas)])
    mem_total = host_memory_gb()
    cpu_model = device_model("CPU-core")
    cpu_name = _cpu_name()
    total_cores = sum(c for _, c in cpu_slots) or 1
    devices: list[LocalDevice] = []
    details: list[str] = []
    uuids: list[str | None] = []
    buses: list[str | None] = []
    for g in report.gpus:
        model = gpu_model(g.name, g.memory_gb, g.power_limit_w)
        devices.append(
            LocalDevice(
                f"gpu{g.index}",
                model,
                g.numa or 0,
                g.memory_gb or model.memory_gb,
                g.power_limit_w or model.max_w,
            )
        )
        details.append(g.name)
        uuids.append(g.uuid or None)
        buses.append(g.pci_bus)
    for k, (numa, cores) in enumerate(cpu_slots):
        model = (
            cpu_model
            if cores == 1
            else replace(
                cpu_model,
                name=f"CPU-socket-{cores}c",
                peak_tflops={p: v * cores for p, v in cpu_model.peak_tflops.items()},
                mem_bw_gbps=cpu_model.mem_bw_gbps * cores,
                idle_w=cpu_model.idle_w * cores,
                max_w=cpu_model.max_w * cores,
            )
        )
        devices.append(
            LocalDevice(
                f"cpu{k}", model, numa, round(mem_total * cores / total_cores, 3), model.max_w
            )
        )
        details.append(f"{cpu_name} ({cores} core{'s' * (cores > 1)})")
        uuids.append(None)
        buses.append(None)
    switches, links = _gpu_topology(report, sockets)
    links += [
        LocalLink(d.name, f"socket{d.numa}", MEMBUS)
        for d in devices
        if d.model.kind is DeviceKind.CPU
    ]
    layout = HostLayout(tuple(devices), tuple(switches), tuple(links), sockets)
    builder = FabricBuilder(host, f"discovered on {host}")
    builder.add_host(
        host,
        layout,
        uuids=tuple(uuids),
        pci_buses=tuple(buses),
        details=tuple(details),
        cpus=cpus if cpus is not None else host_cpus(),
        memory_gb=memory_gb if memory_gb is not None else mem_total,
    )
    notes = [report.note] if report.note else []
    if not devices:
        notes.append("no devices found; use --cpu-devices per-core")
    return Discovery(builder.build(), tuple(notes))


def _gpu_topology(report: NvmlReport, sockets: int) -> tuple[list[LocalSwitch], list[LocalLink]]:
    """Switches and links among GPUs, CPU roots and NVSwitches from the NVML report."""
    switches, links = sockets_of(sockets, link_type("UPI"))
    gpus = report.gpus
    if not gpus:
        return switches, links
    anc = report.ancestors

    def level(i: int, j: int) -> int:
        return anc.get((min(i, j), max(i, j)), TOPO_SYSTEM)

    pcie = [_pcie_type(g) for g in gpus]
    # Group GPUs under one PCIe switch (SINGLE), then switches under one parent (MULTIPLE).
    singles = _groups(len(gpus), lambda i, j: level(i, j) <= TOPO_SINGLE)
    multiples = _groups(len(gpus), lambda i, j: level(i, j) <= TOPO_MULTIPLE)
    parent_of_group: dict[int, str] = {}
    n_sw = 0
    for members in multiples:
        sub = [s for s in singles if s[0] in members]
        numa = gpus[members[0]].numa or 0
        top = f"socket{numa}"
        if len(sub) > 1:
            top = f"pcie{n_sw}"
            n_sw += 1
            switches.append(LocalSwitch(top, SwitchKind.PCIE_SWITCH, numa))
            links.append(LocalLink(top, f"socket{numa}", max(pcie, key=lambda t: t.bandwidth_gbps)))
        for s in sub:
            if len(s) > 1:
                name = f"pcie{n_sw}"
                n_sw += 1
                switches.append(LocalSwitch(name, SwitchKind.PCIE_SWITCH, numa))
                links.append(LocalLink(name, top, pcie[s[0]]))
                for i in s:
                    parent_of_group[i] = name
            else:
                parent_of_group[s[0]] = top
    for g in gpus:
        links.append(LocalLink(f"gpu{g.index}", parent_of_group[g.index], pcie[g.index]))
    links += _nvlinks(gpus)
    if any(g.nvswitch_links for g in gpus):
        switches.append(LocalSwitch("nvswitch", SwitchKind.NVSWITCH))
    return switches, links


def _pcie_type(g: GpuInfo) -> LinkType:
    return with_lanes(link_type(_PCIE_BY_GEN.get(g.pcie_gen or 4, "PCIe4x16")), g.pcie_width or 16)


def _nvlinks(gpus: Sequence[GpuInfo]) -> list[LocalLink]:
    out = []
    for g in gpus:
        base = link_type(_NVLINK_BY_VERSION.get(g.nvlink_version or 0, "NVLink4"))
        for peer, n in sorted(g.nvlink_peers.items()):
            if peer > g.index:
                out.append(LocalLink(f"gpu{g.index}", f"gpu{peer}", bundle(base, n)))
        if g.nvswitch_links:
            out.append(LocalLink(f"gpu{g.index}", "nvswitch", bundle(base, g.nvswitch_links)))
    return out


def _groups(n: int, same: Callable[[int, int], bool]) -> list[list[int]]:
    """Connected groups of 0..n-1 under the relation ``same`` (in index order)."""
    seen: set[int] = set()
    out = []
    for i in range(n):
        if i in seen:
            continue
        group, stack = [], [i]
        seen.add(i)
        while stack:
            x = stack.pop()
            group.append(x)
            for y in range(n):
                if y not in seen and same(x, y):
                    seen.add(y)
                    stack.append(y)
        out.append(sorted(group))
    return out
