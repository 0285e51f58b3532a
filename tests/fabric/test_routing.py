"""Routing properties on generated fabrics (hypothesis) and exactness on small hosts."""

from __future__ import annotations

import itertools
from typing import Any

import networkx as nx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from accelnet.fabric import Fabric, Level, NoRouteError, load_preset
from accelnet.fabric.build import build_fabric, parse_spec
from accelnet.fabric.routing import classify

MODELS = ["H100-SXM", "A100-SXM4-80GB", "V100", "L4", "T4", "K80", "MI300X", "TPU-v4"]
NVLINKED = {"H100-SXM", "A100-SXM4-80GB", "V100", "MI300X", "TPU-v4"}
NICS = ["IB-NDR", "IB-HDR", "Eth-25G", "RoCE-100G", "WiFi6"]


@st.composite
def host_specs(draw: st.DrawFn, index: int, leaves: list[str]) -> dict[str, Any]:
    model = draw(st.sampled_from(MODELS))
    count = draw(st.integers(1, 8))
    styles = ["none"]
    if model in NVLINKED:
        styles += ["nvswitch", "mesh", "pairs"] + (["cube-mesh"] if count == 8 else [])
    spec: dict[str, Any] = {
        "name": f"h{index}",
        "devices": f"{count}x{model}",
        "sockets": draw(st.integers(1, 3)),
        "pcie_switches": draw(st.integers(0, 4)),
        "nvlink": draw(st.sampled_from(styles)),
    }
    n_nics = draw(st.integers(0, 3)) if leaves else 0
    if n_nics:
        spec["nics"] = [draw(st.sampled_from(NICS)) for _ in range(n_nics)]
        spec["network"] = [draw(st.sampled_from(leaves)) for _ in range(n_nics)]
    return spec


@st.composite
def fabrics(draw: st.DrawFn) -> Fabric:
    n_leaves = draw(st.integers(0, 3))
    leaves = [f"leaf{i}" for i in range(n_leaves)]
    switches: list[dict[str, Any]] = [{"name": n, "kind": "leaf"} for n in leaves]
    links: list[dict[str, Any]] = []
    if n_leaves > 1 and draw(st.booleans()):
        switches.append({"name": "spine", "kind": "spine"})
        for leaf in leaves:
            bw = draw(st.sampled_from([12.5, 25.0, 50.0, 100.0]))
            links.append({"a": leaf, "b": "spine", "medium": "infiniband",
                          "bandwidth_gbps": bw, "latency_us": 0.3})  # fmt: skip
    for a, b in itertools.combinations(leaves, 2):
        if draw(st.booleans()):
            links.append({"a": a, "b": b, "type": draw(st.sampled_from(["Eth-100G", "IB-HDR"]))})
    hosts = [draw(host_specs(i, leaves)) for i in range(draw(st.integers(1, 4)))]
    spec = {"name": "gen", "hosts": hosts, "switches": switches, "links": links}
    return build_fabric(parse_spec(spec, "<generated>"))


def _check_route(fabric: Fabric, all_links: set[Any], a: str, b: str) -> None:
    try:
        r = fabric.route(a, b)
    except NoRouteError:
        try:
            fabric.route(b, a)
        except NoRouteError:
            return
        raise AssertionError(f"route {b}->{a} exists but {a}->{b} does not") from None
    back = fabric.route(b, a)
    assert r.level == back.level
    assert r.latency_us == back.latency_us
    assert r.bandwidth_gbps == back.bandwidth_gbps
    if a == b:
        assert r.level is Level.SELF and not r.links
        return
    # the route is a chain of the fabric's own links from a to b
    assert r.nodes[0] == a and r.nodes[-1] == b
    assert len(r.nodes) == len(r.links) + 1
    for x, y, link in zip(r.nodes[:-1], r.nodes[1:], r.links, strict=True):
        assert {link.a, link.b} == {x, y}
        assert link in all_links
    # bandwidth is the bottleneck: never above any link on the way, equal to the smallest
    assert all(r.bandwidth_gbps <= lk.bandwidth_gbps for lk in r.links)
    assert r.bandwidth_gbps == min(lk.bandwidth_gbps for lk in r.links)
    assert r.latency_us == pytest.approx(sum(lk.latency_us for lk in r.links))
    # devices are end points only
    assert not any(n in fabric.devices for n in r.nodes[1:-1])
    assert len(set(r.nodes)) == len(r.nodes)
    if r.level is Level.NVLINK:
        assert all(lk.medium.is_accelerator_link for lk in r.links)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fabric=fabrics(), data=st.data())
def test_routes_on_generated_fabrics(fabric: Fabric, data: st.DataObject) -> None:
    ids = list(fabric.devices)
    all_links = set(fabric.links())
    pairs = data.draw(st.lists(st.tuples(st.sampled_from(ids), st.sampled_from(ids)), max_size=25))
    for a, b in pairs:
        _check_route(fabric, all_links, a, b)


def _host_graph(fabric: Fabric, host: str) -> nx.MultiGraph:
    g: nx.MultiGraph = nx.MultiGraph()
    for link in fabric.host_links(host):
        g.add_edge(link.a, link.b, bw=link.bandwidth_gbps, lat=link.latency_us)
    return g


def _brute_force_best(fabric: Fabric, g: nx.MultiGraph, a: str, b: str) -> tuple[float, float]:
    """Widest then fastest simple path, devices never transit: by enumeration."""
    best = (0.0, float("inf"))
    devices = set(fabric.devices)
    for path in nx.all_simple_edge_paths(g, a, b):
        nodes = [a] + [v for _, v, _ in path]
        if any(n in devices for n in nodes[1:-1]):
            continue
        bw = min(g.edges[u, v, k]["bw"] for u, v, k in path)
        lat = sum(g.edges[u, v, k]["lat"] for u, v, k in path)
        if (bw, -lat) > (best[0], -best[1]):
            best = (bw, lat)
    return best


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fabric=fabrics())
def test_intra_host_routes_are_the_widest_then_fastest(fabric: Fabric) -> None:
    host = fabric.hosts[0]
    g = _host_graph(fabric, host.name)
    for a, b in itertools.combinations(host.device_ids[:5], 2):
        want = _brute_force_best(fabric, g, a, b)
        r = fabric.route(a, b)
        if fabric.router._is_exit(host, a.split("/")[1]):  # external detours may win
            continue
        assert (r.bandwidth_gbps, r.latency_us) == want


def test_presets_levels_are_symmetric_on_all_pairs() -> None:
    for name in ("dgx1-v100", "pcie-4xL4", "mixed-lab"):
        fabric = load_preset(name)
        for a, b in itertools.combinations(fabric.devices, 2):
            assert fabric.level(a, b) == fabric.level(b, a)


def test_classify_labels() -> None:
    fabric = load_preset("dgx-h100")
    r = fabric.route("gpu0", "gpu1")
    assert classify(r.links, [fabric.node_kind(n) for n in r.nodes[1:-1]]) == (
        Level.NVLINK,
        "NV18",
    )


def test_route_json_is_stable() -> None:
    r = load_preset("pcie-4xL4").route("gpu0", "gpu2")
    data = r.to_json()
    assert list(data) == [
        "schema", "src", "dst", "level", "label", "bandwidth_gbps", "bidirectional_gbps",
        "latency_us", "loss_rate", "hops",
    ]  # fmt: skip
    assert data["schema"] == "accelnet.route/v1"
    assert data["level"] == "NUMA" and data["label"] == "SYS"
    assert [h["medium"] for h in data["hops"]] == ["pcie", "smp", "pcie"]
    assert data["hops"][0]["from"] == "l4box/gpu0" and data["hops"][-1]["to"] == "l4box/gpu2"


def test_routes_are_cached_per_layout_not_per_host() -> None:
    fabric = load_preset("fat-tree:hosts=64")
    for h in fabric.hosts:
        fabric.route(h.device_ids[0], h.device_ids[1])
    assert len(fabric.router._layouts) == 1


def test_equal_cost_network_paths_are_spread_like_ecmp() -> None:
    fabric = load_preset("fat-tree:hosts=128,hosts_per_leaf=16,leaves_per_pod=4")
    src = [h.device_ids[0] for h in fabric.hosts[:16]]
    dst = [h.device_ids[0] for h in fabric.hosts[-16:]]
    cores = {n for a in src for b in dst for n in fabric.route(a, b).nodes if n.startswith("core")}
    assert len(cores) > 8  # flows spread over the 16 core switches, not all through one
    # and a given pair always takes the same path, in both directions
    again = fabric.route(src[0], dst[0])
    assert again.nodes == fabric.route(dst[0], src[0]).nodes[::-1]
    fresh = load_preset("fat-tree:hosts=128,hosts_per_leaf=16,leaves_per_pod=4")
    assert fresh.route(src[0], dst[0]).nodes == again.nodes


def test_devices_tied_on_nics_take_them_in_turn() -> None:
    # one socket, four PCIe switches, two NICs: gpu0 is nearest nic0, gpu2 nearest nic1,
    # gpu1 and gpu3 are as near to both: they must not pile onto one
    from accelnet.fabric.build import build_fabric, parse_spec

    spec = {"name": "t", "switches": [{"name": "leaf", "kind": "leaf"}],
            "hosts": [{"name": "h", "count": 2, "devices": "4xV100", "sockets": 1,
                       "pcie_switches": 4, "nics": "2xIB-EDR", "network": "leaf"}]}  # fmt: skip
    fabric = build_fabric(parse_spec(spec, "<t>"))
    nics = [fabric.route(f"h-0/gpu{i}", "h-1/gpu0").nodes for i in range(4)]
    used = [next(n for n in nodes if "/nic" in n) for nodes in nics]
    assert sorted(used).count("h-0/nic0") == 2
    assert sorted(used).count("h-0/nic1") == 2
