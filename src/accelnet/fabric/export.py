"""Stable JSON forms of fabrics and the per-host topology matrix (docs/json.md).

``fabric_to_json`` has schema ``accelnet.fabric/v1``; keys are only ever added within v1.
"""

from __future__ import annotations

from typing import Any

from accelnet.fabric.fabric import Fabric
from accelnet.fabric.model import Device, DeviceModel, Host, Link, SwitchKind
from accelnet.fabric.routing import NoRouteError

SCHEMA = "accelnet.fabric/v1"


def link_to_json(link: Link) -> dict[str, Any]:
    """A link as JSON."""
    t = link.type
    return {
        "a": link.a,
        "b": link.b,
        "medium": t.medium.value,
        "generation": t.generation,
        "count": t.count,
        "lanes": t.lanes,
        "bandwidth_gbps": t.bandwidth_gbps,
        "latency_us": t.latency_us,
        "loss_rate": t.loss_rate,
    }


def model_to_json(m: DeviceModel) -> dict[str, Any]:
    """A catalog model as JSON."""
    return {
        "name": m.name,
        "kind": m.kind.value,
        "vendor": m.vendor,
        "memory_gb": m.memory_gb,
        "mem_bw_gbps": m.mem_bw_gbps,
        "peak_tflops": {p.value: v for p, v in m.peak_tflops.items()},
        "idle_w": m.idle_w,
        "max_w": m.max_w,
        "pcie_type": m.pcie_type,
        "nvlink_type": m.nvlink_type,
        "nvlink_links": m.nvlink_links,
        "aliases": list(m.aliases),
        "notes": m.notes,
    }


def device_to_json(d: Device) -> dict[str, Any]:
    """A device as JSON."""
    return {
        "id": d.id,
        "host": d.host,
        "name": d.name,
        "index": d.index,
        "model": d.model.name,
        "kind": d.kind.value,
        "memory_gb": d.memory_gb,
        "numa": d.numa,
        "power_limit_w": d.power_limit_w,
        "uuid": d.uuid,
        "pci_bus": d.pci_bus,
        "detail": d.detail,
    }


def matrix_nodes(host: Host) -> list[str]:
    """Local nodes shown in the matrix: devices, then network adapters."""
    nics = [s.name for s in host.layout.switches if s.kind is SwitchKind.NIC]
    return [d.name for d in host.layout.devices] + nics


def topology_matrix(fabric: Fabric, host: str) -> tuple[list[str], list[list[str]]]:
    """Node names and ``nvidia-smi topo -m``-style labels (X, NV18, PIX, PXB, PHB, SYS)."""
    h = fabric.host(host)
    names = matrix_nodes(h)
    rows = []
    for a in names:
        row = []
        for b in names:
            try:
                row.append(fabric.router.host_route(host, a, b).label)
            except NoRouteError:
                row.append("-")
        rows.append(row)
    return names, rows


def fabric_to_json(fabric: Fabric, matrix: bool = True) -> dict[str, Any]:
    """The whole fabric as JSON; ``matrix`` adds each host's topology matrix."""
    matrices: dict[int, dict[str, Any]] = {}
    hosts = []
    for h in fabric.hosts:
        entry: dict[str, Any] = {
            "name": h.name,
            "sockets": h.layout.sockets,
            "devices": [device_to_json(fabric.devices[d]) for d in h.device_ids],
            "switches": [
                {"id": s.id, "kind": s.kind.value, "numa": s.numa}
                for s in fabric.host_switches(h.name)
            ],
            "links": [link_to_json(lk) for lk in fabric.host_links(h.name)],
            "cpus": h.cpus,
            "memory_gb": h.memory_gb,
        }
        if matrix:
            if h.layout_key not in matrices:  # identical layouts give identical matrices
                names, rows = topology_matrix(fabric, h.name)
                matrices[h.layout_key] = {"nodes": names, "labels": rows}
            entry["matrix"] = matrices[h.layout_key]
        hosts.append(entry)
    models = {d.model.name: d.model for d in fabric.devices.values()}
    return {
        "schema": SCHEMA,
        "name": fabric.name,
        "description": fabric.description,
        "summary": {
            "hosts": len(fabric.hosts),
            "devices": len(fabric.devices),
            "models": dict(fabric.model_counts()),
            "switches": len(fabric.switches),
            "external_links": len(fabric.external_links),
        },
        "models": {name: model_to_json(m) for name, m in models.items()},
        "hosts": hosts,
        "switches": [
            {"id": s.id, "kind": s.kind.value, "pod": s.pod} for s in fabric.switches.values()
        ],
        "links": [link_to_json(lk) for lk in fabric.external_links],
    }
