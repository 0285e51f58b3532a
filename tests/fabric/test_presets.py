"""Presets load and their routes match the hardware they describe."""

from __future__ import annotations

import itertools

import pytest

from accelnet.fabric import (
    DomainLevel,
    FabricSpecError,
    Level,
    LinkMedium,
    NoRouteError,
    load_preset,
    preset_names,
)
from accelnet.fabric.export import topology_matrix

# nvidia-smi topo -m on a DGX-1 (V100): NVLink counts between GPUs, SYS elsewhere.
DGX1_MATRIX = """\
X   NV1 NV1 NV2 NV2 SYS SYS SYS
NV1 X   NV2 NV1 SYS NV2 SYS SYS
NV1 NV2 X   NV2 SYS SYS NV1 SYS
NV2 NV1 NV2 X   SYS SYS SYS NV1
NV2 SYS SYS SYS X   NV1 NV1 NV2
SYS NV2 SYS SYS NV1 X   NV2 NV1
SYS SYS NV1 SYS NV1 NV2 X   NV2
SYS SYS SYS NV1 NV2 NV1 NV2 X"""


@pytest.mark.parametrize("name", preset_names())
def test_every_preset_loads_with_routes_between_all_its_devices(name: str) -> None:
    fabric = load_preset(name)
    ids = list(fabric.devices)
    assert ids
    first = ids[0]
    for other in ids:
        r = fabric.route(first, other)
        assert (r.level is Level.SELF) == (other == first)
        assert r.bandwidth_gbps > 0


def test_preset_sizes() -> None:
    sizes = {n: len(load_preset(n).devices) for n in preset_names()}
    assert sizes == {
        "dgx-a100": 8,
        "dgx-h100": 8,
        "hgx-b200": 8,
        "dgx1-v100": 8,
        "pcie-4xL4": 4,
        "gavel-48": 48,
        "mixed-lab": 18,
        "nvl72": 72,
    }
    gavel = load_preset("gavel-48")
    assert gavel.model_counts() == {"V100": 8, "P100": 16, "K80": 24}
    assert all(len(h.device_ids) == 1 for h in gavel.hosts)


def test_dgx_h100_nvswitch_is_900_gbps_aggregate() -> None:
    fabric = load_preset("dgx-h100")
    r = fabric.route("gpu0", "gpu5")
    assert r.level is Level.NVLINK
    assert r.label == "NV18"
    assert r.bandwidth_gbps == 450.0
    assert r.bidirectional_gbps == 900.0
    assert r.nodes == ("dgx-h100/gpu0", "dgx-h100/nvswitch", "dgx-h100/gpu5")
    assert {lk.type.generation for lk in r.links} == {"NVLink4"}


@pytest.mark.parametrize(
    ("name", "label", "per_direction"),
    [("dgx-a100", "NV12", 300.0), ("dgx-h100", "NV18", 450.0), ("hgx-b200", "NV18", 900.0)],
)
def test_nvswitch_boxes_are_all_to_all(name: str, label: str, per_direction: float) -> None:
    fabric = load_preset(name)
    for a, b in itertools.combinations(fabric.devices, 2):
        r = fabric.route(a, b)
        assert (r.label, r.bandwidth_gbps) == (label, per_direction)


def test_dgx1_hybrid_cube_mesh_matches_nvidia_smi() -> None:
    fabric = load_preset("dgx1-v100")
    names, rows = topology_matrix(fabric, "dgx1")
    gpus = [n for n in names if n.startswith("gpu")]
    got = [row[: len(gpus)] for row, n in zip(rows, names, strict=True) if n.startswith("gpu")]
    want = [line.split() for line in DGX1_MATRIX.splitlines()]
    assert got == want
    r = fabric.route("gpu0", "gpu3")
    assert r.bandwidth_gbps == 50.0  # two NVLink 2 links, 25 GB/s each way each


def test_pcie_l4_across_sockets_is_numa_sys() -> None:
    fabric = load_preset("pcie-4xL4")
    same = fabric.route("gpu0", "gpu1")
    cross = fabric.route("gpu0", "gpu2")
    assert (same.level, same.label) == (Level.PCIE_HOST, "PHB")
    assert (cross.level, cross.label) == (Level.NUMA, "SYS")
    assert cross.bandwidth_gbps == 31.5  # PCIe Gen4 x16 is the bottleneck, not UPI
    assert any(lk.medium is LinkMedium.SMP for lk in cross.links)
    assert cross.latency_us > same.latency_us


def test_pcie_switch_levels_pix_and_pxb() -> None:
    fabric = load_preset("mixed-lab")
    names, rows = topology_matrix(fabric, "h100box")
    row = dict(zip(names, rows[names.index("gpu0")], strict=True))
    assert row["nic0"] == "PIX"  # same PCIe switch
    assert row["nic1"] == "SYS"  # the other socket
    assert fabric.route("l4box/gpu0", "l4box/gpu1").label == "PIX"


def test_gavel_cluster_leaf_and_spine() -> None:
    fabric = load_preset("gavel-48")
    same_leaf = fabric.route("v100-00/gpu0", "v100-07/gpu0")
    cross = fabric.route("v100-00/gpu0", "k80-23/gpu0")
    assert same_leaf.level is Level.NETWORK_LEAF
    assert cross.level is Level.NETWORK_SPINE
    assert same_leaf.bandwidth_gbps == 1.25  # 10GbE
    assert "spine0" in cross.nodes


def test_mixed_lab_has_every_level() -> None:
    fabric = load_preset("mixed-lab")
    pairs = {
        Level.SELF: ("h100box/gpu0", "h100box/gpu0"),
        Level.NVLINK: ("h100box/gpu0", "h100box/gpu7"),
        Level.PCIE_SWITCH: ("l4box/gpu0", "l4box/gpu1"),
        Level.PCIE_HOST: ("t4box/gpu0", "t4box/gpu3"),
        Level.NUMA: ("l4box/gpu0", "l4box/gpu3"),
        Level.NETWORK_LEAF: ("h100box/gpu0", "l4box/gpu0"),
        Level.NETWORK_SPINE: ("h100box/gpu0", "t4box/gpu0"),
        Level.WIRELESS: ("t4box/gpu0", "jetson1/gpu0"),
    }
    assert {lvl: fabric.level(*p) for lvl, p in pairs.items()} == {lvl: lvl for lvl in pairs}
    wifi = fabric.route(*pairs[Level.WIRELESS])
    assert wifi.loss_rate == pytest.approx(0.01)
    assert wifi.latency_us > 3000
    assert wifi.bandwidth_gbps == 0.15
    # two Jetsons talk through the access point: both radio hops lose packets
    both = fabric.route("jetson0/gpu0", "jetson1/gpu0")
    assert both.loss_rate == pytest.approx(1 - 0.99**2)


def test_nvl72_is_one_nvlink_domain_across_trays() -> None:
    fabric = load_preset("nvl72")
    r = fabric.route("tray00/gpu0", "tray17/gpu3")
    assert (r.level, r.label, r.bandwidth_gbps) == (Level.NVLINK, "NV18", 900.0)
    # inside a tray the external NVSwitch beats PCIe and the CPUs
    assert fabric.route("tray00/gpu0", "tray00/gpu3").level is Level.NVLINK
    nvl = fabric.domains.members(DomainLevel.NVLINK)
    assert len(nvl) == 1 and len(next(iter(nvl.values()))) == 72
    assert len(fabric.domains.members(DomainLevel.HOST)) == 18


def test_fat_tree_generator_shape_and_routes() -> None:
    fabric = load_preset("fat-tree:hosts=128,gpus_per_host=8,hosts_per_leaf=16,leaves_per_pod=4")
    assert len(fabric.hosts) == 128 and len(fabric.devices) == 1024
    kinds = [s.kind.value for s in fabric.switches.values()]
    assert kinds.count("leaf") == 8 and kinds.count("core") == 16
    assert fabric.route("node00000/gpu0", "node00000/gpu7").level is Level.NVLINK
    assert fabric.route("node00000/gpu0", "node00015/gpu0").level is Level.NETWORK_LEAF
    far = fabric.route("node00000/gpu0", "node00127/gpu0")
    assert far.level is Level.NETWORK_SPINE
    assert any(n.startswith("core") for n in far.nodes)
    assert len(fabric.domains.members(DomainLevel.LEAF)) == 8
    assert len(fabric.domains.members(DomainLevel.POD)) == 2
    assert len({h.layout_key for h in fabric.hosts}) == 1
    # non-blocking: 16 hosts x 1 NIC under a leaf, 8 aggregation switches -> 2 links to each;
    # 4 leaves x 2 links per aggregation switch over 16 cores -> 1 link to each core
    counts = {
        (lk.a[:4], lk.b[:4]): lk.type.count
        for lk in fabric.external_links
        if not lk.a.startswith("node")
    }
    assert counts == {("leaf", "p000"): 2, ("p000", "core"): 1}


def test_two_tier_fat_tree_has_no_core() -> None:
    fabric = load_preset("fat-tree:hosts=64")
    assert not any(s.kind.value == "core" for s in fabric.switches.values())
    assert fabric.level("node00000/gpu0", "node00063/gpu0") is Level.NETWORK_SPINE


@pytest.mark.parametrize(
    ("ref", "needle"),
    [
        ("fat-tree:hosts=0", "hosts = 0: must be >= 1"),
        ("fat-tree:hosts=ten", "hosts = 'ten': must be a whole number"),
        ("fat-tree:racks=4", "racks = '4': unknown parameter; known: hosts"),
        ("fat-tree:model=H900", "unknown device model 'H900'"),
        ("fat-tree:cpus_per_host=0", "cpus_per_host = '0': must be a number > 0"),
        ("fat-tree:cpus_per_host=-8", "cpus_per_host = '-8': must be a number > 0"),
        ("fat-tree:cpus_per_host=many", "cpus_per_host = 'many': must be a number"),
        ("fat-tree:cpus_per_host=nan", "cpus_per_host = 'nan': must be a number > 0"),
        ("fat-tree:cpus_per_host=100000", "cpus_per_host = '100000': must be a number > 0"),
        ("fat-tree:memory_gb_per_host=0", "memory_gb_per_host = '0': must be a number > 0"),
        ("fat-tree:memory_gb_per_host=inf", "memory_gb_per_host = 'inf': must be a number > 0"),
        ("fat-tree:memory_gb_per_host=", "memory_gb_per_host = '': must be a number"),
    ],
)
def test_generator_rejects_bad_parameters(ref: str, needle: str) -> None:
    with pytest.raises(FabricSpecError) as info:
        load_preset(ref)
    assert needle in str(info.value)


def test_unknown_preset_lists_presets() -> None:
    with pytest.raises(KeyError, match="dgx-h100"):
        load_preset("dgx-h900")


def test_isolated_hosts_have_no_route() -> None:
    from accelnet.fabric.build import build_fabric, parse_spec

    spec = {
        "name": "apart",
        "hosts": [{"name": "a", "devices": "T4"}, {"name": "b", "devices": "T4"}],
    }
    fabric = build_fabric(parse_spec(spec, "t"))
    with pytest.raises(NoRouteError, match="no route between a/gpu0 and b/gpu0"):
        fabric.route("a/gpu0", "b/gpu0")


def test_device_lookup_errors_are_readable() -> None:
    fabric = load_preset("mixed-lab")
    with pytest.raises(KeyError, match="ambiguous"):
        fabric.device("gpu0")
    with pytest.raises(KeyError, match="no device 'h100box/gpu9'"):
        fabric.device("h100box/gpu9")
    assert fabric.device("h100box/gpu3").index == 3
    assert load_preset("dgx-h100").device("3").name == "gpu3"


def test_fat_tree_hosts_declare_cpus_and_memory_when_asked() -> None:
    fabric = load_preset("fat-tree:hosts=40,cpus_per_host=224,memory_gb_per_host=2048")
    assert {(h.cpus, h.memory_gb) for h in fabric.hosts} == {(224.0, 2048.0)}
    assert len(fabric.hosts) == 40
    half = load_preset("fat-tree:hosts=2,cpus_per_host=7.5")
    assert [(h.cpus, h.memory_gb) for h in half.hosts] == [(7.5, None), (7.5, None)]


def test_fat_tree_hosts_declare_nothing_by_default() -> None:
    fabric = load_preset("fat-tree:hosts=4")
    assert {(h.cpus, h.memory_gb) for h in fabric.hosts} == {(None, None)}
