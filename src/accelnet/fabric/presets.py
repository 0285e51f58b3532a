"""Named fabrics of well-known machines and a generator of large fat-tree fabrics.

Presets are ordinary fabric specs (the same validation and builder as user files). The
generator ``fat-tree:hosts=2048,gpus_per_host=8`` builds scale-test fabrics: hosts of
NVLink-joined GPUs under leaf switches, leaves in pods under aggregation switches, pods
joined by core switches (two tiers when one pod suffices).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

from accelnet.fabric.build import build_fabric, parse_spec
from accelnet.fabric.catalog import device_model, link_type
from accelnet.fabric.errors import FabricSpecError, SpecIssue
from accelnet.fabric.fabric import Fabric
from accelnet.fabric.spec import MAX_HOST_CPUS, MAX_HOST_MEMORY_GB


def _dgx(name: str, desc: str, model: str, nics: str, pcie: str, smp: str) -> dict[str, Any]:
    return {
        "name": name,
        "description": desc,
        "hosts": [
            {
                "name": name,
                "devices": f"8x{model}",
                "nvlink": "nvswitch",
                "sockets": 2,
                "smp_type": smp,
                "pcie_switches": 4,
                "pcie_type": pcie,
                "nics": nics,
            }
        ],
    }


def _dgx1() -> dict[str, Any]:
    return {
        "name": "dgx1-v100",
        "description": "DGX-1 with 8 V100 SXM2 in the hybrid cube mesh (6 NVLink 2 each)",
        "hosts": [
            {
                "name": "dgx1",
                "devices": "8xV100",
                "nvlink": "cube-mesh",
                "sockets": 2,
                "pcie_switches": 4,
                "pcie_type": "PCIe3x16",
                "smp_type": "QPI",
                "nics": "4xIB-EDR",
            }
        ],
    }


def _pcie_l4() -> dict[str, Any]:
    return {
        "name": "pcie-4xL4",
        "description": "4 L4 on PCIe Gen4, two per CPU socket, no NVLink, one 25GbE port",
        "hosts": [
            {
                "name": "l4box",
                "devices": "4xL4",
                "sockets": 2,
                "nics": "1xEth-25G",
            }
        ],
    }


def _gavel48() -> dict[str, Any]:
    leaves = [("v100", 8), ("p100", 16), ("k80", 24)]
    return {
        "name": "gavel-48",
        "description": "Gavel's physical cluster: 8 V100 + 16 P100 + 24 K80, one GPU per "
        "server, 10GbE to a leaf per GPU type, 100GbE leaf-spine",
        "switches": [
            *({"name": f"leaf-{t}", "kind": "leaf", "pod": "pod0"} for t, _ in leaves),
            {"name": "spine0", "kind": "spine"},
        ],
        "hosts": [
            {
                "name": f"{t}-{{i:02d}}",
                "count": n,
                "devices": t.upper(),
                "nics": "1xEth-10G",
                "network": f"leaf-{t}",
            }
            for t, n in leaves
        ],
        "links": [{"a": f"leaf-{t}", "b": "spine0", "type": "Eth-100G"} for t, _ in leaves],
    }


def _mixed_lab() -> dict[str, Any]:
    return {
        "name": "mixed-lab",
        "description": "A heterogeneous lab: an NVLink H100 box and a PCIe L4 box on "
        "InfiniBand, a T4 box on Ethernet, two Jetson edge devices on Wi-Fi",
        "switches": [
            {"name": "ib-leaf", "kind": "leaf", "pod": "lab"},
            {"name": "eth-sw", "kind": "ethernet", "pod": "lab"},
            {"name": "lab-ap", "kind": "wireless_ap", "pod": "lab"},
        ],
        "hosts": [
            {
                "name": "h100box",
                "devices": "8xH100-SXM",
                "nvlink": "nvswitch",
                "sockets": 2,
                "pcie_switches": 4,
                "nics": "2xIB-NDR",
                "network": "ib-leaf",
            },
            {
                "name": "l4box",
                "devices": "4xL4",
                "sockets": 2,
                "pcie_switches": 2,
                "nics": "1xIB-HDR",
                "network": "ib-leaf",
            },
            {"name": "t4box", "devices": "4xT4", "nics": "1xEth-25G", "network": "eth-sw"},
            {
                "name": "jetson{i}",
                "count": 2,
                "devices": "Jetson-AGX-Orin",
                "nics": "1xWiFi6",
                "network": "lab-ap",
            },
        ],
        "links": [
            {"a": "ib-leaf", "b": "eth-sw", "type": "Eth-100G"},
            {"a": "lab-ap", "b": "eth-sw", "type": "Eth-10G"},
        ],
    }


def _nvl72() -> dict[str, Any]:
    return {
        "name": "nvl72",
        "description": "A 72-GPU multi-node NVLink rack (GB200 NVL72 style): 18 trays of 4 "
        "B200, every GPU on the rack's NVSwitch fabric (NVLink 5, 18 links)",
        "switches": [
            {"name": "nvl-fabric", "kind": "nvswitch"},
            {"name": "rack-leaf", "kind": "leaf"},
        ],
        "hosts": [
            {
                "name": "tray{i:02d}",
                "count": 18,
                "devices": "4xB200",
                "sockets": 2,
                "nics": "4xIB-NDR",
                "network": "rack-leaf",
            }
        ],
        "links": [
            {"a": f"tray{t:02d}/gpu{g}", "b": "nvl-fabric", "type": "NVLink5", "count": 18}
            for t in range(18)
            for g in range(4)
        ],
    }


_PRESETS: Mapping[str, Callable[[], dict[str, Any]]] = {
    "dgx-a100": lambda: _dgx(
        "dgx-a100", "DGX A100: 8 A100-SXM4-80GB on NVSwitch (NVLink 3), 8 HDR ports",
        "A100-SXM4-80GB", "8xIB-HDR", "PCIe4x16", "xGMI-CPU",
    ),
    "dgx-h100": lambda: _dgx(
        "dgx-h100", "DGX H100: 8 H100-SXM on NVSwitch (NVLink 4, 900 GB/s), 8 NDR ports",
        "H100-SXM", "8xIB-NDR", "PCIe5x16", "UPI",
    ),
    "hgx-b200": lambda: _dgx(
        "hgx-b200", "HGX B200: 8 B200 on NVSwitch (NVLink 5, 1.8 TB/s), 8 NDR ports",
        "B200", "8xIB-NDR", "PCIe5x16", "UPI",
    ),
    "dgx1-v100": _dgx1,
    "pcie-4xL4": _pcie_l4,
    "gavel-48": _gavel48,
    "mixed-lab": _mixed_lab,
    "nvl72": _nvl72,
}  # fmt: skip


def preset_names() -> tuple[str, ...]:
    """Names of the presets."""
    return tuple(_PRESETS)


def preset_spec(name: str) -> dict[str, Any]:
    """The raw spec (as a user would write it in YAML) of preset ``name``."""
    return _PRESETS[name]()


def is_generator(ref: str) -> bool:
    """Whether ``ref`` names a generated fabric (``fat-tree:...``)."""
    return ref.split(":", 1)[0] in _GENERATORS


def load_preset(ref: str) -> Fabric:
    """Build a preset by name or a generated fabric; KeyError listing presets otherwise."""
    if ref in _PRESETS:
        source = f"<preset {ref}>"
        return build_fabric(parse_spec(preset_spec(ref), source), source)
    if is_generator(ref):
        kind, _, params = ref.partition(":")
        return _GENERATORS[kind](params, ref)
    raise KeyError(f"no preset {ref!r}; presets: {', '.join(_PRESETS)}; generator: {FAT_TREE_HELP}")


FAT_TREE_HELP = (
    "fat-tree:hosts=N[,gpus_per_host=8,model=H100-SXM,hosts_per_leaf=32,leaves_per_pod=16,"
    "aggs_per_pod=8,cores=16,nic=IB-NDR,nics_per_host=1,cpus_per_host=C,memory_gb_per_host=M]"
)
_FAT_TREE_DEFAULTS: dict[str, Any] = {
    "hosts": 64,
    "gpus_per_host": 8,
    "model": "H100-SXM",
    "hosts_per_leaf": 32,
    "leaves_per_pod": 16,
    "aggs_per_pod": 8,
    "cores": 16,
    "nic": "IB-NDR",
    "nics_per_host": 1,
    "cpus_per_host": None,  # not declared: not limited
    "memory_gb_per_host": None,
}
# per-host capacities (numbers > 0, not necessarily whole): parameter -> (host key, maximum)
_HOST_CAPACITY = {
    "cpus_per_host": ("cpus", MAX_HOST_CPUS),
    "memory_gb_per_host": ("memory_gb", MAX_HOST_MEMORY_GB),
}


def _capacity(key: str, value: str, ref: str) -> float:
    """A per-host capacity parameter: a finite number > 0, at most what a host spec takes."""
    try:
        number = float(value)
    except ValueError:
        raise FabricSpecError(ref, [SpecIssue(key, "must be a number", value)]) from None
    limit = _HOST_CAPACITY[key][1]
    if not math.isfinite(number) or number <= 0 or number > limit:
        raise FabricSpecError(
            ref, [SpecIssue(key, f"must be a number > 0 and <= {limit:g}", value.strip())]
        )
    return number


def _parse_params(params: str, ref: str) -> dict[str, Any]:
    out = dict(_FAT_TREE_DEFAULTS)
    seen: set[str] = set()
    for item in filter(None, (p.strip() for p in params.split(","))):
        key, eq, value = item.partition("=")
        key = key.strip()
        if key in seen:
            raise FabricSpecError(ref, [SpecIssue(key, "given twice", value)])
        seen.add(key)
        if not eq or key not in out:
            raise FabricSpecError(
                ref,
                [SpecIssue(key, f"unknown parameter; known: {', '.join(out)}", value or None)],
            )
        if key in _HOST_CAPACITY:
            out[key] = _capacity(key, value, ref)
        elif isinstance(_FAT_TREE_DEFAULTS[key], int):
            try:
                out[key] = int(value)
            except ValueError:
                raise FabricSpecError(
                    ref, [SpecIssue(key, "must be a whole number", value)]
                ) from None
            if out[key] < 1:
                raise FabricSpecError(ref, [SpecIssue(key, "must be >= 1", out[key])])
        else:
            out[key] = value.strip()
    for key, check in (("model", device_model), ("nic", link_type)):
        try:
            check(out[key])
        except LookupError as exc:
            raise FabricSpecError(ref, [SpecIssue(key, str(exc), out[key])]) from None
    return out


def fat_tree_spec(params: str, ref: str = "fat-tree") -> dict[str, Any]:
    """The spec of a generated fat tree (see :data:`FAT_TREE_HELP`)."""
    p = _parse_params(params, ref)
    hosts, per_leaf = p["hosts"], p["hosts_per_leaf"]
    n_leaves = math.ceil(hosts / per_leaf)
    n_pods = math.ceil(n_leaves / p["leaves_per_pod"])
    aggs = p["aggs_per_pod"]
    nic = p["nic"]
    # non-blocking: each tier's uplinks carry what its downlinks can bring
    uplink = max(1, math.ceil(per_leaf * p["nics_per_host"] / aggs))
    core_uplink = max(1, math.ceil(p["leaves_per_pod"] * uplink / p["cores"]))
    model = device_model(p["model"])
    gpus = p["gpus_per_host"]
    switches: list[dict[str, Any]] = []
    links: list[dict[str, Any]] = []
    host_specs: list[dict[str, Any]] = []
    for pod in range(n_pods):
        first = pod * p["leaves_per_pod"]
        leaves = range(first, min(n_leaves, first + p["leaves_per_pod"]))
        switches.append(
            {
                "name": "leaf{i:05d}",
                "kind": "leaf",
                "pod": f"pod{pod:04d}",
                "count": len(leaves),
                "start": first,
            }
        )
        switches.append({"name": f"p{pod:04d}-agg{{i}}", "kind": "spine", "count": aggs})
        for leaf in leaves:
            h0 = leaf * per_leaf
            host_specs.append(
                {
                    "name": "node{i:05d}",
                    "count": min(per_leaf, hosts - h0),
                    "start": h0,
                    "devices": f"{gpus}x{model.name}",
                    "nvlink": "nvswitch" if model.nvlink_type and gpus > 1 else "none",
                    "sockets": 2,
                    "nics": f"{p['nics_per_host']}x{nic}",
                    "network": f"leaf{leaf:05d}",
                    **{
                        host_key: p[param]
                        for param, (host_key, _) in _HOST_CAPACITY.items()
                        if p[param] is not None
                    },
                }
            )
            for a in range(aggs):
                links.append(
                    {
                        "a": f"leaf{leaf:05d}",
                        "b": f"p{pod:04d}-agg{a}",
                        "type": nic,
                        "count": uplink,
                    }
                )
    if n_pods > 1:
        switches.append({"name": "core{i}", "kind": "core", "count": p["cores"]})
        for pod in range(n_pods):
            for a in range(aggs):
                for c in range(p["cores"]):
                    links.append({"a": f"p{pod:04d}-agg{a}", "b": f"core{c}", "type": nic,
                                  "count": core_uplink})  # fmt: skip
    return {
        "name": f"fat-tree-{hosts}x{gpus}",
        "description": f"generated: {ref}",
        "switches": switches,
        "hosts": host_specs,
        "links": links,
    }


def _fat_tree(params: str, ref: str) -> Fabric:
    return build_fabric(parse_spec(fat_tree_spec(params, ref), ref), ref)


POD_HELP = "dgx-h100:hosts=N (also dgx-a100, hgx-b200): N such boxes, every NIC on one leaf"


def pod_spec(base: str, params: str, ref: str) -> dict[str, Any]:
    """``hosts`` boxes of preset ``base``, every NIC port on one leaf switch (a small pod,
    as one 64-port switch serves 8 boxes of 8 NICs)."""
    p = {"hosts": 4}
    for item in filter(None, (x.strip() for x in params.split(","))):
        key, eq, value = item.partition("=")
        if key.strip() != "hosts":
            raise FabricSpecError(ref, [SpecIssue(key, "unknown parameter; known: hosts", value)])
        if not eq:
            raise FabricSpecError(ref, [SpecIssue(key, "needs a value: hosts=N", None)])
        try:
            p["hosts"] = int(value)
        except ValueError:
            raise FabricSpecError(
                ref, [SpecIssue("hosts", "must be a whole number", value)]
            ) from None
        if p["hosts"] < 1:
            raise FabricSpecError(ref, [SpecIssue("hosts", "must be >= 1", p["hosts"])])
    spec = preset_spec(base)
    box = dict(spec["hosts"][0])
    box.update({"name": f"{base}-{{i}}", "count": p["hosts"], "network": "leaf"})
    return {
        "name": f"{base}-pod{p['hosts']}",
        "description": f"{p['hosts']} x {spec['description']}; every NIC on one leaf",
        "switches": [{"name": "leaf", "kind": "leaf"}],
        "hosts": [box],
    }


def _pod(base: str) -> Callable[[str, str], Fabric]:
    def build(params: str, ref: str) -> Fabric:
        return build_fabric(parse_spec(pod_spec(base, params, ref), ref), ref)

    return build


_GENERATORS: Mapping[str, Callable[[str, str], Fabric]] = {
    "fat-tree": _fat_tree,
    **{base: _pod(base) for base in ("dgx-a100", "dgx-h100", "hgx-b200")},
}
