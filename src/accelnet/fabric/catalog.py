"""Catalog of device models and link types with their published figures.

Compute figures are dense (no 2:4 sparsity) peak TFLOP/s from the vendors' data sheets;
bandwidths are per direction. Idle power is a typical measured idle for the part, not a
data-sheet figure, and is marked as an estimate in ``notes``. Lookups are case-insensitive,
accept aliases (``v100``, ``H100``, ``A100-80GB``), and an unknown name raises
:class:`UnknownNameError` listing the known ones.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import TypeVar

from accelnet.fabric.model import DeviceKind, DeviceModel, LinkMedium, LinkType, Precision

T = TypeVar("T")


class UnknownNameError(LookupError, ValueError):
    """A catalog name that is not known; the message lists the valid names.

    A ``ValueError`` too, so that spec validators report it at the offending key.
    """

    def __init__(self, what: str, name: str, known: Iterable[str]) -> None:
        self.what = what
        self.name = name
        self.known = tuple(sorted(known))
        super().__init__(f"unknown {what} {name!r}; known: {', '.join(self.known)}")

    def __str__(self) -> str:
        return str(self.args[0])


def _tf(**kw: float) -> Mapping[Precision, float]:
    return MappingProxyType({Precision(k): v for k, v in kw.items()})


# fmt: off
_MODELS: tuple[DeviceModel, ...] = (
    DeviceModel(
        "B200", DeviceKind.GPU, "nvidia", 180, 7700,
        _tf(fp64=37, fp32=75, tf32=1100, bf16=2250, fp16=2250, fp8=4500, fp4=9000, int8=4500),
        idle_w=140, max_w=1000, pcie_type="PCIe5x16", nvlink_type="NVLink5", nvlink_links=18,
        aliases=("B200-SXM", "HGX-B200"), notes="HGX B200 per-GPU figures; idle estimated",
    ),
    DeviceModel(
        "H200", DeviceKind.GPU, "nvidia", 141, 4800,
        _tf(fp64=34, fp32=67, tf32=494.7, bf16=989.4, fp16=989.4, fp8=1978.9, int8=1978.9),
        idle_w=75, max_w=700, pcie_type="PCIe5x16", nvlink_type="NVLink4", nvlink_links=18,
        aliases=("H200-SXM", "H200-SXM-141GB"), notes="idle estimated",
    ),
    DeviceModel(
        "H100-SXM", DeviceKind.GPU, "nvidia", 80, 3350,
        _tf(fp64=34, fp32=67, tf32=494.7, bf16=989.4, fp16=989.4, fp8=1978.9, int8=1978.9),
        idle_w=70, max_w=700, pcie_type="PCIe5x16", nvlink_type="NVLink4", nvlink_links=18,
        aliases=("H100", "H100-SXM5", "H100-SXM5-80GB", "H100-80GB"), notes="idle estimated",
    ),
    DeviceModel(
        "H100-PCIe", DeviceKind.GPU, "nvidia", 80, 2000,
        _tf(fp64=26, fp32=51, tf32=378, bf16=756, fp16=756, fp8=1513, int8=1513),
        idle_w=50, max_w=350, pcie_type="PCIe5x16", aliases=("H100-PCIE-80GB",),
        notes="idle estimated",
    ),
    DeviceModel(
        "H100-NVL", DeviceKind.GPU, "nvidia", 94, 3900,
        _tf(fp64=30, fp32=60, tf32=417.5, bf16=835, fp16=835, fp8=1670, int8=1670),
        idle_w=55, max_w=400, pcie_type="PCIe5x16", nvlink_type="NVLink4", nvlink_links=12,
        notes="PCIe card; bridged pairs at 600 GB/s; idle estimated",
    ),
    DeviceModel(
        "A100-SXM4-80GB", DeviceKind.GPU, "nvidia", 80, 2039,
        _tf(fp64=9.7, fp32=19.5, tf32=156, bf16=312, fp16=312, int8=624),
        idle_w=55, max_w=400, pcie_type="PCIe4x16", nvlink_type="NVLink3", nvlink_links=12,
        aliases=("A100-80GB", "A100", "A100-SXM-80GB"), notes="idle estimated",
    ),
    DeviceModel(
        "A100-SXM4-40GB", DeviceKind.GPU, "nvidia", 40, 1555,
        _tf(fp64=9.7, fp32=19.5, tf32=156, bf16=312, fp16=312, int8=624),
        idle_w=50, max_w=400, pcie_type="PCIe4x16", nvlink_type="NVLink3", nvlink_links=12,
        aliases=("A100-40GB",), notes="idle estimated",
    ),
    DeviceModel(
        "A100-PCIe-80GB", DeviceKind.GPU, "nvidia", 80, 1935,
        _tf(fp64=9.7, fp32=19.5, tf32=156, bf16=312, fp16=312, int8=624),
        idle_w=45, max_w=300, pcie_type="PCIe4x16", notes="idle estimated",
    ),
    DeviceModel(
        "A100-PCIe-40GB", DeviceKind.GPU, "nvidia", 40, 1555,
        _tf(fp64=9.7, fp32=19.5, tf32=156, bf16=312, fp16=312, int8=624),
        idle_w=40, max_w=250, pcie_type="PCIe4x16", notes="idle estimated",
    ),
    DeviceModel(
        "L40S", DeviceKind.GPU, "nvidia", 48, 864,
        _tf(fp32=91.6, tf32=183, bf16=362, fp16=362, fp8=733, int8=733),
        idle_w=35, max_w=350, pcie_type="PCIe4x16", notes="idle estimated",
    ),
    DeviceModel(
        "L4", DeviceKind.GPU, "nvidia", 24, 300,
        _tf(fp32=30.3, tf32=60, bf16=121, fp16=121, fp8=242, int8=242),
        idle_w=16, max_w=72, pcie_type="PCIe4x16", notes="idle estimated",
    ),
    DeviceModel(
        "T4", DeviceKind.GPU, "nvidia", 16, 320,
        _tf(fp32=8.1, fp16=65, int8=130),
        idle_w=10, max_w=70, pcie_type="PCIe3x16", aliases=("Tesla-T4",),
        notes="fp16 is mixed-precision tensor; idle estimated",
    ),
    DeviceModel(
        "V100", DeviceKind.GPU, "nvidia", 16, 900,
        _tf(fp64=7.8, fp32=15.7, fp16=125),
        idle_w=40, max_w=300, pcie_type="PCIe3x16", nvlink_type="NVLink2", nvlink_links=6,
        aliases=("V100-SXM2-16GB", "V100-SXM2", "Tesla-V100"),
        notes="SXM2 16 GB, the GPU of Gavel's measurements; idle estimated",
    ),
    DeviceModel(
        "V100-PCIe", DeviceKind.GPU, "nvidia", 16, 900,
        _tf(fp64=7, fp32=14, fp16=112),
        idle_w=35, max_w=250, pcie_type="PCIe3x16", aliases=("V100-PCIE-16GB",),
        notes="idle estimated",
    ),
    DeviceModel(
        "P100", DeviceKind.GPU, "nvidia", 16, 732,
        _tf(fp64=4.7, fp32=9.3, fp16=18.7),
        idle_w=30, max_w=250, pcie_type="PCIe3x16", aliases=("P100-PCIE-16GB", "Tesla-P100"),
        notes="PCIe 16 GB, the GPU of Gavel's measurements; idle estimated",
    ),
    DeviceModel(
        "P100-SXM2", DeviceKind.GPU, "nvidia", 16, 732,
        _tf(fp64=5.3, fp32=10.6, fp16=21.2),
        idle_w=30, max_w=300, pcie_type="PCIe3x16", nvlink_type="NVLink1", nvlink_links=4,
        aliases=("P100-SXM2-16GB",), notes="idle estimated",
    ),
    DeviceModel(
        "K80", DeviceKind.GPU, "nvidia", 12, 240,
        _tf(fp64=1.46, fp32=4.37),
        idle_w=25, max_w=150, pcie_type="PCIe3x16", aliases=("Tesla-K80", "GK210"),
        notes="one GK210 of the dual-GPU board, as clouds expose it; idle estimated",
    ),
    DeviceModel(
        "MI300X", DeviceKind.GPU, "amd", 192, 5300,
        _tf(fp64=81.7, fp32=163.4, tf32=653.7, bf16=1307.4, fp16=1307.4, fp8=2614.9,
            int8=2614.9),
        idle_w=90, max_w=750, pcie_type="PCIe5x16", nvlink_type="xGMI-MI300", nvlink_links=7,
        aliases=("Instinct-MI300X",), notes="idle estimated",
    ),
    DeviceModel(
        "TPU-v4", DeviceKind.TPU, "google", 32, 1200,
        _tf(bf16=275, int8=275),
        idle_w=90, max_w=192, pcie_type="PCIe3x16", nvlink_type="ICI-v4", nvlink_links=6,
        aliases=("TPUv4", "v4"), notes="power: Google's published mean/max; idle estimated",
    ),
    DeviceModel(
        "TPU-v5e", DeviceKind.TPU, "google", 16, 819,
        _tf(bf16=197, int8=394),
        idle_w=60, max_w=170, pcie_type="PCIe4x16", nvlink_type="ICI-v5e", nvlink_links=4,
        aliases=("TPUv5e", "v5e", "v5litepod"), notes="power estimated",
    ),
    DeviceModel(
        "Gaudi2", DeviceKind.NPU, "intel", 96, 2450,
        _tf(fp32=0, bf16=432, fp16=432, fp8=865),
        idle_w=90, max_w=600, pcie_type="PCIe4x16", aliases=("HL-225",),
        notes="matrix-engine figures; idle estimated",
    ),
    DeviceModel(
        "Alveo-U250", DeviceKind.FPGA, "amd", 64, 77,
        _tf(int8=33.3),
        idle_w=30, max_w=225, pcie_type="PCIe3x16", aliases=("U250",),
        notes="DDR4 on-card memory; idle estimated",
    ),
    DeviceModel(
        "Jetson-AGX-Orin", DeviceKind.GPU, "nvidia", 64, 204.8,
        _tf(fp32=5.3, fp16=42.5, int8=85),
        idle_w=10, max_w=60, pcie_type="PCIe4x16",
        aliases=("Jetson-Orin", "AGX-Orin", "Jetson-AGX-Orin-64GB"),
        notes="integrated GPU (no DLA), memory shared with the CPU; edge device",
        integrated=True,
    ),
    DeviceModel(
        "Jetson-Orin-Nano", DeviceKind.GPU, "nvidia", 8, 102,
        _tf(fp32=1.3, fp16=17, int8=34),
        idle_w=5, max_w=25, pcie_type="PCIe3x16", aliases=("Orin-Nano",),
        notes="Super developer kit, 25 W mode; integrated GPU; edge device",
        integrated=True,
    ),
    DeviceModel(
        "CPU-core", DeviceKind.CPU, "generic", 4, 10,
        _tf(fp64=0.05, fp32=0.1),
        idle_w=1, max_w=8, pcie_type="PCIe4x16", aliases=("cpu", "core"),
        notes="one core of a server CPU (AVX2-class); discovery sets memory per core",
        integrated=True,
    ),
)
# fmt: on

# Per-direction bandwidth of a whole bundle, GB/s; latency one-way in microseconds. The
# latencies are modelling defaults (NVLink/NVSwitch hops under a microsecond, PCIe hops
# about 0.5 us, an InfiniBand switch hop about 0.3 us, Wi-Fi milliseconds), not data sheets.
_LINKS: dict[str, LinkType] = {
    "NVLink1": LinkType(LinkMedium.NVLINK, 20.0, 0.35, "NVLink1", count=1),
    "NVLink2": LinkType(LinkMedium.NVLINK, 25.0, 0.35, "NVLink2", count=1),
    "NVLink3": LinkType(LinkMedium.NVLINK, 25.0, 0.35, "NVLink3", count=1),
    "NVLink4": LinkType(LinkMedium.NVLINK, 25.0, 0.35, "NVLink4", count=1),
    "NVLink5": LinkType(LinkMedium.NVLINK, 50.0, 0.35, "NVLink5", count=1),
    "xGMI-MI300": LinkType(LinkMedium.XGMI, 64.0, 0.4, "Infinity Fabric 4", count=1),
    "ICI-v4": LinkType(LinkMedium.ICI, 50.0, 1.0, "ICI v4", count=1),
    "ICI-v5e": LinkType(LinkMedium.ICI, 50.0, 1.0, "ICI v5e", count=1),
    "PCIe3x16": LinkType(LinkMedium.PCIE, 15.75, 0.5, "Gen3", lanes=16),
    "PCIe4x16": LinkType(LinkMedium.PCIE, 31.5, 0.5, "Gen4", lanes=16),
    "PCIe5x16": LinkType(LinkMedium.PCIE, 63.0, 0.5, "Gen5", lanes=16),
    "PCIe6x16": LinkType(LinkMedium.PCIE, 121.0, 0.5, "Gen6", lanes=16),
    "UPI": LinkType(LinkMedium.SMP, 128.0, 0.3, "UPI 2.0 x4, 16 GT/s", count=4),
    "UPI1": LinkType(LinkMedium.SMP, 62.4, 0.3, "UPI 1.0 x3, 10.4 GT/s", count=3),
    "QPI": LinkType(LinkMedium.SMP, 38.4, 0.3, "QPI x2, 9.6 GT/s", count=2),
    "xGMI-CPU": LinkType(LinkMedium.SMP, 64.0, 0.3, "Infinity Fabric (CPU)", count=4),
    "IB-EDR": LinkType(LinkMedium.INFINIBAND, 12.5, 0.3, "EDR", lanes=4),
    "IB-HDR": LinkType(LinkMedium.INFINIBAND, 25.0, 0.3, "HDR", lanes=4),
    "IB-NDR": LinkType(LinkMedium.INFINIBAND, 50.0, 0.3, "NDR", lanes=4),
    "IB-XDR": LinkType(LinkMedium.INFINIBAND, 100.0, 0.3, "XDR", lanes=4),
    "RoCE-100G": LinkType(LinkMedium.ROCE, 12.5, 0.8, "100GbE"),
    "RoCE-200G": LinkType(LinkMedium.ROCE, 25.0, 0.8, "200GbE"),
    "RoCE-400G": LinkType(LinkMedium.ROCE, 50.0, 0.8, "400GbE"),
    "Eth-1G": LinkType(LinkMedium.ETHERNET, 0.125, 10.0, "1GbE"),
    "Eth-10G": LinkType(LinkMedium.ETHERNET, 1.25, 5.0, "10GbE"),
    "Eth-25G": LinkType(LinkMedium.ETHERNET, 3.125, 5.0, "25GbE"),
    "Eth-100G": LinkType(LinkMedium.ETHERNET, 12.5, 5.0, "100GbE"),
    "Eth-400G": LinkType(LinkMedium.ETHERNET, 50.0, 5.0, "400GbE"),
    "WiFi6": LinkType(LinkMedium.WIFI, 0.15, 3000.0, "802.11ax 2x2", loss_rate=0.01),
    "WiFi7": LinkType(LinkMedium.WIFI, 0.6, 2000.0, "802.11be 2x2", loss_rate=0.005),
    "5G": LinkType(LinkMedium.CELLULAR, 0.05, 10000.0, "5G NR", loss_rate=0.02),
}


def _fold(name: str) -> str:
    return re.sub(r"[\s_]+", "-", name.strip()).lower()


def _index(models: Iterable[DeviceModel]) -> Mapping[str, DeviceModel]:
    out: dict[str, DeviceModel] = {}
    for m in models:
        for key in (m.name, *m.aliases):
            out[_fold(key)] = m
    return MappingProxyType(out)


_BY_NAME = _index(_MODELS)
# every name and alias as written, with what its folded form finds: most look-ups pass a
# catalog name (a fabric's or a table's), found here without folding it by regex
_AS_WRITTEN = MappingProxyType(
    {key: _BY_NAME[_fold(key)] for m in _MODELS for key in (m.name, *m.aliases)}
)
_LINKS_FOLDED = MappingProxyType({_fold(k): v for k, v in _LINKS.items()})


def device_models() -> tuple[DeviceModel, ...]:
    """Every catalog model, in catalog order."""
    return _MODELS


def link_types() -> Mapping[str, LinkType]:
    """Every named link type (``NVLink4``, ``PCIe5x16``, ``IB-NDR``, ``WiFi6``, ...)."""
    return MappingProxyType(_LINKS)


FAMILIES: Mapping[str, tuple[str, ...]] = MappingProxyType({
    "A100": ("A100-SXM4-80GB", "A100-SXM4-40GB", "A100-PCIe-80GB", "A100-PCIe-40GB"),
    "A100-PCIe": ("A100-PCIe-80GB", "A100-PCIe-40GB"),
    "A100-SXM4": ("A100-SXM4-80GB", "A100-SXM4-40GB"),
    "Alveo": ("Alveo-U250",),
    "CPU": ("CPU-core",),
    "H100": ("H100-SXM", "H100-PCIe", "H100-NVL"),
    "Jetson": ("Jetson-AGX-Orin", "Jetson-Orin-Nano"),
    "Jetson-AGX": ("Jetson-AGX-Orin",),
    "Jetson-Orin": ("Jetson-Orin-Nano",),
    "P100": ("P100-SXM2",),
    "TPU": ("TPU-v4", "TPU-v5e"),
    "V100": ("V100-PCIe",),
})  # fmt: skip
"""Names a job may ask for that stand for several catalog models (a request for ``H100``
takes any of the three), besides the model a name or alias denotes itself. Explicit: a
model a fabric declares that is not in the catalog (``V100-32GB``) is matched by its own
name only, never by a family."""
_FAMILY = {_fold(k): v for k, v in FAMILIES.items()}


def family(name: str) -> tuple[str, ...]:
    """The catalog models family ``name`` stands for (case-insensitive); empty if none."""
    return _FAMILY.get(_fold(name), ())


def find_device_model(name: str) -> DeviceModel | None:
    """The model called ``name`` (case-insensitive, aliases accepted), or None."""
    found = _AS_WRITTEN.get(name)
    return found if found is not None else _BY_NAME.get(_fold(name))


def device_model(name: str) -> DeviceModel:
    """The model called ``name``; raises :class:`UnknownNameError` listing known models."""
    found = find_device_model(name)
    if found is None:
        raise UnknownNameError("device model", name, (m.name for m in _MODELS))
    return found


def link_type(name: str, count: int = 1) -> LinkType:
    """The link type called ``name``, bundled ``count`` times (bandwidth scales, latency not).

    Raises :class:`UnknownNameError` listing the known link types.
    """
    base = _LINKS_FOLDED.get(_fold(name))
    if base is None:
        raise UnknownNameError("link type", name, _LINKS)
    if count == 1:
        return base
    return bundle(base, count)


def bundle(base: LinkType, count: int) -> LinkType:
    """``count`` parallel links of ``base`` as one link (bandwidth x count)."""
    if count < 1:
        raise ValueError(f"a link bundle needs count >= 1, got {count}")
    return LinkType(
        medium=base.medium,
        bandwidth_gbps=base.bandwidth_gbps * count,
        latency_us=base.latency_us,
        generation=base.generation,
        lanes=base.lanes,
        count=base.count * count,
        loss_rate=base.loss_rate,
    )


def with_lanes(base: LinkType, lanes: int) -> LinkType:
    """``base`` running on ``lanes`` lanes (a PCIe x16 slot trained at x8 has half its speed).

    Types without lanes (NVLink, Ethernet) are returned as they are.
    """
    if not base.lanes or lanes == base.lanes:
        return base
    return LinkType(
        base.medium,
        base.bandwidth_gbps * lanes / base.lanes,
        base.latency_us,
        base.generation,
        lanes,
        base.count,
        base.loss_rate,
    )
