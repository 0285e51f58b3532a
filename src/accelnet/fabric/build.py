"""Turn a fabric file or a :class:`FabricSpec` into a :class:`Fabric`.

Every problem is reported as a :class:`FabricSpecError` naming the file, the line (for
YAML/JSON files), the key path and the bad value. Parsing rejects duplicate keys, which
plain YAML loaders silently resolve to the last one.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from accelnet.fabric.catalog import (
    UnknownNameError,
    bundle,
    device_model,
    link_type,
    with_lanes,
)
from accelnet.fabric.errors import FabricSpecError, SpecIssue
from accelnet.fabric.fabric import Fabric, FabricBuilder, FabricError
from accelnet.fabric.layout import LayoutError, Slot, make_layout
from accelnet.fabric.model import DeviceModel, HostLayout, LinkType
from accelnet.fabric.spec import DeviceGroupSpec, FabricSpec, HostSpec, LinkSpec
from accelnet.specio import parse_text, read_text, validation_issues


def parse_spec(data: Any, source: str, node: yaml.Node | None = None) -> FabricSpec:
    """Validate parsed data as a :class:`FabricSpec`; FabricSpecError with every issue."""
    if not isinstance(data, dict):
        raise FabricSpecError(
            source, [SpecIssue("", "a fabric spec is a mapping with name and hosts", data, 1)]
        )
    try:
        return FabricSpec.model_validate(data)
    except ValidationError as exc:
        raise FabricSpecError(source, validation_issues(exc, data, node, FabricSpec)) from None


def load_spec(path: str | Path) -> FabricSpec:
    """Read and validate a YAML or JSON fabric file."""
    source = str(path)
    text = read_text(path, FabricSpecError)
    data, node = parse_text(text, source, FabricSpecError, source.lower().endswith(".json"))
    return parse_spec(data, source, node)


def load_fabric_file(path: str | Path) -> Fabric:
    """Read, validate and build a fabric file."""
    return build_fabric(load_spec(path), str(path))


def _model_of(group: DeviceGroupSpec) -> DeviceModel:
    try:
        base = device_model(group.model)
    except UnknownNameError:
        assert group.kind and group.memory_gb and group.mem_bw_gbps and group.max_w
        return DeviceModel(
            name=group.model,
            kind=group.kind,
            vendor="custom",
            memory_gb=group.memory_gb,
            mem_bw_gbps=group.mem_bw_gbps,
            peak_tflops=group.peak_tflops or {},
            idle_w=group.idle_w if group.idle_w is not None else 0.15 * group.max_w,
            max_w=group.max_w,
            pcie_type=group.pcie_type or "PCIe4x16",
            nvlink_type=group.nvlink_type,
            nvlink_links=group.nvlink_links or 0,
            notes="described in the fabric spec",
        )
    overrides: dict[str, Any] = {
        k: v
        for k, v in (
            ("mem_bw_gbps", group.mem_bw_gbps),
            ("idle_w", group.idle_w),
            ("max_w", group.max_w),
            ("pcie_type", group.pcie_type),
            ("nvlink_type", group.nvlink_type),
            ("nvlink_links", group.nvlink_links),
            ("kind", group.kind),
        )
        if v is not None
    }
    if group.peak_tflops:
        overrides["peak_tflops"] = {**base.peak_tflops, **group.peak_tflops}
    return replace(base, **overrides) if overrides else base


def link_from_spec(spec: LinkSpec) -> LinkType:
    """The :class:`LinkType` a link spec describes (catalog type, then explicit overrides)."""
    if spec.type is not None:
        base = link_type(spec.type)
        medium = spec.medium or base.medium
        bw = spec.bandwidth_gbps or base.bandwidth_gbps
        lat = spec.latency_us if spec.latency_us is not None else base.latency_us
        gen = spec.generation or base.generation
        loss = spec.loss_rate if spec.loss_rate is not None else base.loss_rate
        t = LinkType(medium, bw, lat, gen, base.lanes, base.count, loss)
        if spec.lanes is not None and spec.bandwidth_gbps is None:
            t = with_lanes(t, spec.lanes)
    else:
        assert spec.medium and spec.bandwidth_gbps and spec.latency_us is not None
        t = LinkType(
            spec.medium,
            spec.bandwidth_gbps,
            spec.latency_us,
            spec.generation or "",
            spec.lanes or 0,
            1,
            spec.loss_rate or 0.0,
        )
    return bundle(t, spec.count) if spec.count > 1 else t


def _layout_of(host: HostSpec) -> HostLayout:
    slots = [
        Slot(_model_of(g), g.memory_gb, g.power_limit_w, g.numa)
        for g in host.devices
        for _ in range(g.count)
    ]
    extra = [(lk.a, lk.b, link_from_spec(lk)) for lk in host.links]
    return make_layout(
        slots,
        sockets=host.sockets,
        nvlink=host.nvlink,
        nvlink_type=host.nvlink_type,
        nvlink_links=host.nvlink_links,
        pcie_type=host.pcie_type,
        pcie_switches=host.pcie_switches,
        nics=host.nic_types,
        smp_type=host.smp_type,
        extra_links=extra,
    )


_LAYOUT_FIELDS = {
    "devices", "sockets", "nvlink", "nvlink_type", "nvlink_links", "pcie_type",
    "pcie_switches", "smp_type", "nics", "links",
}  # fmt: skip


def build_fabric(spec: FabricSpec, source: str = "<spec>") -> Fabric:
    """Build the fabric a validated spec describes; FabricSpecError names what is wrong."""
    builder = FabricBuilder(spec.name, spec.description)
    for i, sw in enumerate(spec.switches):
        for name in sw.names():
            with _at(source, f"switches[{i}].name", name):
                builder.add_switch(name, sw.kind, sw.pod)
    layouts: dict[str, HostLayout] = {}
    for i, host in enumerate(spec.hosts):
        key = host.model_dump_json(include=_LAYOUT_FIELDS)
        layout = layouts.get(key)
        if layout is None:
            try:
                layout = layouts[key] = _layout_of(host)
            except (LayoutError, UnknownNameError, ValueError) as exc:
                raise FabricSpecError(
                    source, [SpecIssue(f"hosts[{i}]", str(exc), host.name)]
                ) from None
        nics = host.nic_types
        uplinks = host.network if isinstance(host.network, list) else [host.network] * len(nics)
        for name in host.names():
            with _at(source, f"hosts[{i}].name", name):
                builder.add_host(name, layout, cpus=host.cpus, memory_gb=host.memory_gb)
            if host.network is None:
                continue
            for k, (nic, target) in enumerate(zip(nics, uplinks, strict=True)):
                if target is None or "/" in target or not builder.has_node(target):
                    raise FabricSpecError(
                        source,
                        [
                            SpecIssue(
                                f"hosts[{i}].network",
                                f"no switch {target!r}; switches: " + _names(builder.switch_names),
                                target,
                            )
                        ],
                    )
                builder.add_link(f"{name}/nic{k}", target, link_type(nic))
    for i, lk in enumerate(spec.links):
        for end_key, end in (("a", lk.a), ("b", lk.b)):
            if not builder.has_node(end):
                raise FabricSpecError(
                    source, [SpecIssue(f"links[{i}].{end_key}", _no_node_hint(builder, end), end)]
                )
        with _at(source, f"links[{i}]", f"{lk.a} -- {lk.b}"):
            builder.add_link(lk.a, lk.b, link_from_spec(lk))
    return builder.build()


@contextmanager
def _at(source: str, path: str, value: object) -> Iterator[None]:
    try:
        yield
    except FabricError as exc:
        raise FabricSpecError(source, [SpecIssue(path, str(exc), value)]) from None


def _names(names: Sequence[str] | Any, limit: int = 8) -> str:
    names = list(names)
    shown = ", ".join(names[:limit])
    return (shown + f", ... ({len(names)} in all)") if len(names) > limit else (shown or "none")


def _no_node_hint(builder: FabricBuilder, end: str) -> str:
    host, sep, local = end.partition("/")
    if sep and builder.has_host(host):
        return (
            f"host {host!r} has no node {local!r}; it has: {_names(builder.host_nodes(host), 12)}"
        )
    if sep:
        return f"no host {host!r}; hosts: {_names(builder.host_names)}"
    return f"no switch {end!r} (a device or adapter is host/name); switches: " + _names(
        builder.switch_names
    )
