"""The physical network of accelerators as pure, immutable values.

Everything here is a frozen dataclass or an enum: no I/O, no clock, no global state. A
:class:`~accelnet.fabric.fabric.Fabric` assembles these values; routes and locality come from
:mod:`accelnet.fabric.routing`.

Units, used everywhere in accelnet:

- bandwidth in GB/s (10^9 bytes per second) *per direction*; ``bidirectional_gbps`` doubles it
  (NVIDIA quotes NVLink 4 as "900 GB/s", which is 450 GB/s each way);
- latency in microseconds, one way;
- memory in GB (10^9 bytes), compute in TFLOP/s (dense, no sparsity), power in watts.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import IntEnum, StrEnum
from types import MappingProxyType


class DeviceKind(StrEnum):
    """What sort of processor a device is."""

    GPU = "gpu"
    TPU = "tpu"
    NPU = "npu"
    CPU = "cpu"
    FPGA = "fpga"


class Precision(StrEnum):
    """Numeric precisions that peak FLOP/s figures are quoted for."""

    FP64 = "fp64"
    FP32 = "fp32"
    TF32 = "tf32"
    BF16 = "bf16"
    FP16 = "fp16"
    FP8 = "fp8"
    FP4 = "fp4"
    INT8 = "int8"


class LinkMedium(StrEnum):
    """The physical medium of a link."""

    NVLINK = "nvlink"  # point-to-point or to an NVSwitch
    NVSWITCH = "nvswitch"  # NVSwitch to NVSwitch (multi-node NVLink domains)
    XGMI = "xgmi"  # AMD Infinity Fabric between GPUs
    ICI = "ici"  # TPU inter-chip interconnect
    C2C = "c2c"  # chip-to-chip (Grace-Hopper NVLink-C2C)
    PCIE = "pcie"
    SMP = "smp"  # inter-socket (UPI, xGMI between CPUs)
    INFINIBAND = "infiniband"
    ROCE = "roce"
    ETHERNET = "ethernet"
    WIFI = "wifi"
    CELLULAR = "cellular"

    @property
    def is_accelerator_link(self) -> bool:
        """True for device-to-device fabrics that bypass PCIe (NVLink and its kin)."""
        return self in _ACCEL_MEDIA

    @property
    def is_network(self) -> bool:
        """True for links between machines (wired or wireless)."""
        return self in _NETWORK_MEDIA or self.is_wireless

    @property
    def is_wireless(self) -> bool:
        """True for radio links, which carry loss and long latency."""
        return self in (LinkMedium.WIFI, LinkMedium.CELLULAR)


_ACCEL_MEDIA = frozenset(
    {LinkMedium.NVLINK, LinkMedium.NVSWITCH, LinkMedium.XGMI, LinkMedium.ICI, LinkMedium.C2C}
)
_NETWORK_MEDIA = frozenset({LinkMedium.INFINIBAND, LinkMedium.ROCE, LinkMedium.ETHERNET})


class SwitchKind(StrEnum):
    """Nodes that forward traffic but run no work."""

    NVSWITCH = "nvswitch"
    PCIE_SWITCH = "pcie_switch"
    CPU_ROOT = "cpu_root"  # a CPU socket's PCIe root complex (host bridge); one NUMA node
    NIC = "nic"  # a network adapter: PCIe on one side, the network on the other
    LEAF = "leaf"
    SPINE = "spine"
    CORE = "core"
    ETHERNET = "ethernet"  # a plain Ethernet switch
    WIRELESS_AP = "wireless_ap"

    @property
    def is_network(self) -> bool:
        """True for switches between machines (they stand outside any host)."""
        return self in _NETWORK_SWITCHES


_NETWORK_SWITCHES = frozenset(
    {
        SwitchKind.LEAF,
        SwitchKind.SPINE,
        SwitchKind.CORE,
        SwitchKind.ETHERNET,
        SwitchKind.WIRELESS_AP,
    }
)


class Level(IntEnum):
    """Locality of two devices, after NCCL's path types; a lower level is closer."""

    SELF = 0
    NVLINK = 1  # accelerator links only (NVLink, NVSwitch, ICI, xGMI)
    PCIE_SWITCH = 2  # PCIe through switches, not through the CPU (PIX / PXB)
    PCIE_HOST = 3  # through one CPU's host bridge (PHB)
    NUMA = 4  # across CPU sockets (SYS)
    NETWORK_LEAF = 5  # another machine under the same network switch
    NETWORK_SPINE = 6  # another machine, across more than one network switch
    WIRELESS = 7  # any radio link on the way


class DomainLevel(StrEnum):
    """Nested placement domains, from the tightest to the whole fabric."""

    NVLINK = "nvlink"
    HOST = "host"
    LEAF = "leaf"
    POD = "pod"
    FABRIC = "fabric"


@dataclass(frozen=True, slots=True, eq=False)
class DeviceModel:
    """A catalog entry: the published figures of one accelerator model.

    ``peak_tflops`` holds dense figures (no structured sparsity). ``nvlink_type`` names the
    accelerator link the model uses (a key of the link catalog) and ``nvlink_links`` how many
    such links one device has; ``pcie_type`` is its host interface. ``integrated`` devices
    (CPU cores, SoC GPUs such as Jetson) sit on their socket's memory bus, not on PCIe.
    Models compare and hash by identity: the catalog holds one object per model.
    """

    name: str
    kind: DeviceKind
    vendor: str
    memory_gb: float
    mem_bw_gbps: float
    peak_tflops: Mapping[Precision, float]
    idle_w: float
    max_w: float
    pcie_type: str = "PCIe4x16"
    nvlink_type: str | None = None
    nvlink_links: int = 0
    aliases: tuple[str, ...] = ()
    notes: str = ""
    integrated: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.peak_tflops, MappingProxyType):
            object.__setattr__(self, "peak_tflops", MappingProxyType(dict(self.peak_tflops)))

    def tflops(self, precision: Precision) -> float:
        """Peak dense TFLOP/s at ``precision``; 0.0 where the model has no such unit."""
        return self.peak_tflops.get(precision, 0.0)


@dataclass(frozen=True, slots=True)
class LinkType:
    """The properties a link has, shared by every link of that type (interned)."""

    medium: LinkMedium
    bandwidth_gbps: float  # per direction, whole bundle
    latency_us: float
    generation: str = ""
    lanes: int = 0
    count: int = 1  # parallel links in the bundle (e.g. 18 NVLinks)
    loss_rate: float = 0.0  # packet loss, radio links only

    @property
    def bidirectional_gbps(self) -> float:
        """Both directions together, as vendors quote NVLink."""
        return 2.0 * self.bandwidth_gbps


@dataclass(frozen=True, slots=True)
class Link:
    """An undirected link between two nodes, identified by global node ids."""

    a: str
    b: str
    type: LinkType

    @property
    def medium(self) -> LinkMedium:
        """The physical medium."""
        return self.type.medium

    @property
    def bandwidth_gbps(self) -> float:
        """Per-direction bandwidth in GB/s."""
        return self.type.bandwidth_gbps

    @property
    def latency_us(self) -> float:
        """One-way latency in microseconds."""
        return self.type.latency_us

    def other(self, node: str) -> str:
        """The end that is not ``node``."""
        return self.b if node == self.a else self.a


@dataclass(frozen=True, slots=True, eq=False)
class Device:
    """One accelerator (or CPU core) in the fabric.

    ``id`` is ``"<host>/<name>"`` and unique in the fabric; ``index`` is its position among
    its host's devices (what ``CUDA_VISIBLE_DEVICES`` would carry for a GPU). Devices compare
    and hash by identity (one object per device of a fabric), so they can go in sets.
    """

    id: str
    host: str
    name: str
    index: int
    model: DeviceModel
    numa: int
    memory_gb: float
    power_limit_w: float
    uuid: str | None = None
    pci_bus: str | None = None
    detail: str = ""

    @property
    def kind(self) -> DeviceKind:
        """Shortcut for ``model.kind``."""
        return self.model.kind


@dataclass(frozen=True, slots=True)
class Switch:
    """A forwarding node; inside a host (``host`` set) or in the network (``host`` None)."""

    id: str
    kind: SwitchKind
    host: str | None = None
    numa: int | None = None
    pod: str | None = None


@dataclass(frozen=True, slots=True)
class LocalDevice:
    """A device slot of a host layout, in host-local terms."""

    name: str
    model: DeviceModel
    numa: int
    memory_gb: float
    power_limit_w: float


@dataclass(frozen=True, slots=True)
class LocalSwitch:
    """A switch of a host layout, in host-local terms."""

    name: str
    kind: SwitchKind
    numa: int | None = None


@dataclass(frozen=True, slots=True)
class LocalLink:
    """A link of a host layout between two local node names."""

    a: str
    b: str
    type: LinkType


@dataclass(frozen=True, slots=True)
class HostLayout:
    """The inside of one machine, shared by every host built from the same description.

    Sharing layouts is what makes large fabrics cheap: 16,384 identical hosts hold one layout,
    and intra-host routes are computed once per layout.
    """

    devices: tuple[LocalDevice, ...]
    switches: tuple[LocalSwitch, ...]
    links: tuple[LocalLink, ...]
    sockets: int = 1
    _kinds: Mapping[str, SwitchKind | None] = field(
        init=False, repr=False, compare=False, hash=False
    )

    def __post_init__(self) -> None:
        kinds: dict[str, SwitchKind | None] = {d.name: None for d in self.devices}
        for s in self.switches:
            kinds[s.name] = s.kind
        object.__setattr__(self, "_kinds", MappingProxyType(kinds))

    def node_kind(self, name: str) -> SwitchKind | None:
        """The switch kind of local node ``name``; None for a device. KeyError if unknown."""
        return self._kinds[name]

    def has_node(self, name: str) -> bool:
        """Whether ``name`` is a device or switch of this layout."""
        return name in self._kinds

    @property
    def node_names(self) -> tuple[str, ...]:
        """Devices first, then switches, in layout order."""
        return tuple(self._kinds)


@dataclass(frozen=True, slots=True)
class Host:
    """One machine: a name, its layout, and the CPU cores and memory jobs may be given.

    ``layout_key`` numbers the distinct layouts of a fabric (hosts built alike share one);
    ``device_ids`` are the global ids of the layout's devices, in layout order. ``cpus``
    (logical CPU cores) and ``memory_gb`` (host RAM, GB) are what the scheduler may hand to
    jobs beside the accelerators, like a Kubernetes node's allocatable or Slurm's ``CPUs=``
    and ``RealMemory=``; None means not declared, so not limited.
    """

    name: str
    layout: HostLayout
    layout_key: int
    device_ids: tuple[str, ...]
    cpus: float | None = None
    memory_gb: float | None = None

    def node_id(self, local: str) -> str:
        """Global id of local node ``local``."""
        return f"{self.name}/{local}"
