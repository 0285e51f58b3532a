"""Placement domains: NVLink domain, host, leaf, pod, fabric."""

from __future__ import annotations

import itertools

from accelnet.fabric import DomainLevel, load_preset
from accelnet.fabric.build import build_fabric, parse_spec


def test_mixed_lab_domains() -> None:
    fabric = load_preset("mixed-lab")
    nvl = fabric.domains.members(DomainLevel.NVLINK)
    assert nvl["h100box/gpu0"] == tuple(f"h100box/gpu{i}" for i in range(8))
    # PCIe-only devices are each their own NVLink domain
    assert nvl["l4box/gpu2"] == ("l4box/gpu2",)
    assert fabric.domain("h100box/gpu5", DomainLevel.HOST) == "h100box"
    assert fabric.domain("l4box/gpu0", DomainLevel.LEAF) == "ib-leaf"
    assert fabric.domain("t4box/gpu0", DomainLevel.LEAF) == "eth-sw"
    assert fabric.domain("jetson1/gpu0", DomainLevel.LEAF) == "lab-ap"
    assert set(fabric.domains.map(DomainLevel.POD).values()) == {"lab"}
    assert set(fabric.domains.map(DomainLevel.FABRIC).values()) == {"mixed-lab"}


def test_domains_nest() -> None:
    fabric = load_preset("fat-tree:hosts=96,hosts_per_leaf=16,leaves_per_pod=2")
    levels = [DomainLevel.NVLINK, DomainLevel.HOST, DomainLevel.LEAF, DomainLevel.POD]
    maps = [fabric.domains.map(level) for level in levels]
    for inner, outer in itertools.pairwise(maps):
        parent: dict[str, str] = {}
        for dev, key in inner.items():
            assert parent.setdefault(key, outer[dev]) == outer[dev]  # one parent per domain
    assert len(fabric.domains.members(DomainLevel.POD)) == 3


def test_hosts_without_network_are_their_own_leaf_and_pod() -> None:
    spec = {
        "name": "x",
        "hosts": [{"name": "a", "devices": "2xT4"}, {"name": "b", "devices": "T4"}],
    }
    fabric = build_fabric(parse_spec(spec, "t"))
    assert fabric.domains.members(DomainLevel.LEAF) == {"a": ("a/gpu0", "a/gpu1"), "b": ("b/gpu0",)}
    assert fabric.domain("b/gpu0", DomainLevel.POD) == "b"


def test_mesh_and_pairs_domains() -> None:
    spec = {
        "name": "x",
        "hosts": [
            {"name": "mesh", "devices": "4xA100-SXM4-80GB", "nvlink": "mesh"},
            {"name": "pairs", "devices": "4xV100", "nvlink": "pairs"},
        ],
    }
    fabric = build_fabric(parse_spec(spec, "t"))
    nvl = fabric.domains.members(DomainLevel.NVLINK)
    assert len(nvl["mesh/gpu0"]) == 4
    assert nvl["pairs/gpu0"] == ("pairs/gpu0", "pairs/gpu1")
    assert nvl["pairs/gpu2"] == ("pairs/gpu2", "pairs/gpu3")
    r = fabric.route("mesh/gpu0", "mesh/gpu3")
    assert r.label == "NV4" and r.bandwidth_gbps == 100.0  # 12 links / 3 peers
