"""Fabric files: the YAML/JSON a user writes, validated with pydantic (``extra="forbid"``).

A compact host line is enough for most machines::

    name: lab
    switches:
      - {name: leaf0, kind: leaf}
    hosts:
      - {name: "n{i}", count: 4, devices: "8xH100-SXM", nvlink: nvswitch,
         sockets: 2, pcie_switches: 4, nics: "8xIB-NDR", network: leaf0}

Explicit links join anything else (``{a: jetson0/nic0, b: ap0, type: WiFi6}``). See
docs/fabric-spec.md for every key; ``accelnet fabric schema`` prints the JSON schema.
"""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import Field, field_validator, model_validator

from accelnet.fabric.catalog import UnknownNameError, device_models, find_device_model, link_type
from accelnet.fabric.layout import NVLinkStyle
from accelnet.fabric.model import DeviceKind, LinkMedium, Precision, SwitchKind
from accelnet.specio import SpecModel, StrictFloat

_COUNT_FORM = re.compile(r"^\s*(\d+)\s*[xX×]\s*(\S.*?)\s*$")
_NAME = r"^[A-Za-z0-9][A-Za-z0-9._:-]*$"
_TEMPLATE = re.compile(r"\{i(?::0?\d{1,2}d)?\}")
MAX_NAME = 128
MAX_DEVICES = 1_048_576
MAX_SWITCHES = 65_536
MAX_LINKS = 1_048_576
MAX_HOST_CPUS = 65_536
MAX_HOST_MEMORY_GB = 1e6

Name = Annotated[str, Field(pattern=_NAME, max_length=128)]


def _split_count(value: Any, key: str) -> Any:
    """``"8xH100"`` -> ``{key: "H100", "count": 8}``; ``"H100"`` -> ``{key: "H100"}``."""
    if isinstance(value, str):
        m = _COUNT_FORM.match(value)
        if m:
            return {key: m.group(2), "count": int(m.group(1))}
        return {key: value}
    return value


def _as_list(value: Any) -> Any:
    return [value] if isinstance(value, str | dict) else value


class DeviceGroupSpec(SpecModel):
    """A group of identical devices: ``"8xH100-SXM"`` or a mapping with overrides.

    A model outside the catalog is accepted when ``kind``, ``memory_gb``, ``mem_bw_gbps``,
    ``peak_tflops`` and ``max_w`` are given.
    """

    model: str = Field(
        min_length=1, max_length=MAX_NAME, description="catalog model or alias, or a new name"
    )
    count: int = Field(1, ge=1, le=1024, description="how many devices of this model")
    kind: DeviceKind | None = Field(None, description="gpu, tpu, npu, cpu or fpga")
    memory_gb: float | None = Field(None, gt=0, description="device memory, GB")
    mem_bw_gbps: float | None = Field(None, gt=0, description="memory bandwidth, GB/s")
    peak_tflops: dict[Precision, Annotated[float, Field(ge=0)]] | None = Field(
        None, description="dense peak TFLOP/s by precision"
    )
    idle_w: float | None = Field(None, ge=0, description="idle power, W")
    max_w: float | None = Field(None, gt=0, description="maximum board power, W")
    power_limit_w: float | None = Field(None, gt=0, description="enforced power cap, W")
    pcie_type: str | None = Field(None, description="host interface link type, e.g. PCIe5x16")
    nvlink_type: str | None = Field(None, description="accelerator link type, e.g. NVLink4")
    nvlink_links: int | None = Field(None, ge=1, le=64, description="accelerator links")
    numa: int | None = Field(None, ge=0, description="CPU socket the devices attach to")

    @model_validator(mode="before")
    @classmethod
    def _short_form(cls, value: Any) -> Any:
        return _split_count(value, "model")

    @model_validator(mode="after")
    def _known_or_complete(self) -> DeviceGroupSpec:
        _check_role("pcie_type", self.pcie_type, _is_pcie)
        _check_role("nvlink_type", self.nvlink_type, _is_accel)
        known = find_device_model(self.model)
        max_w = self.max_w if self.max_w is not None else (known.max_w if known else None)
        for key in ("idle_w", "power_limit_w"):
            value = getattr(self, key)
            if value is not None and max_w is not None and value > max_w:
                raise ValueError(f"{key} = {value} is above max_w = {max_w}")
        if known is not None:
            return self
        missing = [
            k
            for k in ("kind", "memory_gb", "mem_bw_gbps", "peak_tflops", "max_w")
            if getattr(self, k) is None
        ]
        if missing:
            names = ", ".join(m.name for m in device_models())
            raise ValueError(
                f"unknown device model {self.model!r}; known: {names} "
                f"(or describe a new model: missing {', '.join(missing)})"
            )
        return self


class NicSpec(SpecModel):
    """Network adapters of one type: ``"8xIB-NDR"`` or ``{type: RoCE-400G, count: 2}``."""

    type: str = Field(description="link type of the adapter's port, e.g. IB-NDR, Eth-25G")
    count: int = Field(1, ge=1, le=64, description="adapters of this type")

    @model_validator(mode="before")
    @classmethod
    def _short_form(cls, value: Any) -> Any:
        return _split_count(value, "type")

    @field_validator("type")
    @classmethod
    def _network(cls, v: str) -> str:
        if not link_type(v).medium.is_network:
            raise ValueError(f"{v!r} is not a network link type")
        return v


class LinkSpec(SpecModel):
    """A link: a catalog ``type``, or explicit ``medium``, ``bandwidth_gbps``, ``latency_us``.

    Explicit figures override those of ``type``. Ends are global ids (``host/node`` or a
    switch name) at the top level, local names (``gpu0``, ``nic1``) inside a host.
    """

    a: str = Field(max_length=2 * MAX_NAME + 1, description="one end: switch or host/node")
    b: str = Field(max_length=2 * MAX_NAME + 1, description="the other end")
    type: str | None = Field(None, description="catalog link type, e.g. IB-NDR, NVLink4")
    count: int = Field(1, ge=1, le=1024, description="parallel links bundled as one")
    medium: LinkMedium | None = Field(None, description="nvlink, pcie, infiniband, wifi, ...")
    bandwidth_gbps: float | None = Field(None, gt=0, description="per direction, GB/s")
    latency_us: float | None = Field(None, ge=0, description="one way, microseconds")
    generation: str | None = Field(None, max_length=64, description="e.g. NDR, Gen5")
    lanes: int | None = Field(
        None, ge=1, le=64, description="lanes in use; scales a PCIe type's bandwidth"
    )
    loss_rate: float | None = Field(None, ge=0, lt=1, description="packet loss, 0..1")

    @model_validator(mode="after")
    def _typed_or_explicit(self) -> LinkSpec:
        if self.type is not None:
            link_type(self.type)
        else:
            missing = [
                k for k in ("medium", "bandwidth_gbps", "latency_us") if getattr(self, k) is None
            ]
            if missing:
                raise ValueError(f"give a link type, or {', '.join(missing)}")
        if self.a == self.b:
            raise ValueError(f"a link needs two different ends, both are {self.a!r}")
        return self


def _check_template(name: str) -> str:
    if "{" in name or "}" in name:
        stripped = _TEMPLATE.sub("0", name, count=1)
        if "{" in stripped or "}" in stripped or not re.match(_NAME, stripped):
            raise ValueError(f"name template {name!r}: use one {{i}} or {{i:03d}} (width < 100)")
    elif not re.match(_NAME, name):
        raise ValueError(f"name {name!r}: use letters, digits, '.', '_', ':' and '-'")
    if len(name) > MAX_NAME:
        raise ValueError(f"name is {len(name)} characters long; at most {MAX_NAME}")
    return name


def _is_pcie(medium: LinkMedium) -> bool:
    return medium is LinkMedium.PCIE


def _is_accel(medium: LinkMedium) -> bool:
    return medium.is_accelerator_link


def _is_smp(medium: LinkMedium) -> bool:
    return medium is LinkMedium.SMP


def _check_role(key: str, name: str | None, role: Any) -> None:
    """A link type given for ``key`` must exist and have the right medium for that role."""
    if name is None:
        return
    medium = link_type(name).medium
    if not role(medium):
        raise ValueError(f"{key} = {name!r} is a {medium.value} link; it cannot serve here")


def _catalog_nvlink(model: str) -> bool:
    found = find_device_model(model)
    return found is not None and found.nvlink_type is not None


def expand_names(name: str, count: int, start: int) -> list[str]:
    """Names of ``count`` replicas: the template filled in, or ``name-<i>`` without one."""
    if count == 1 and "{" not in name:
        return [name]
    if "{" not in name:
        name = name + "-{i}"
    return [name.format(i=i) for i in range(start, start + count)]


class HostSpec(SpecModel):
    """One machine, or ``count`` identical machines named from a template."""

    name: str = Field(description="host name, or a template like node{i:03d} with count")
    count: int = Field(1, ge=1, le=131072, description="replicas of this host")
    start: int = Field(0, ge=0, le=10**9, description="first index of the name template")
    devices: list[DeviceGroupSpec] = Field(
        min_length=1, max_length=256, description='"8xH100-SXM", a model, or device groups'
    )
    sockets: int = Field(1, ge=1, le=16, description="CPU sockets (NUMA nodes)")
    nvlink: NVLinkStyle = Field(NVLinkStyle.NONE, description="how accelerators are joined")
    nvlink_type: str | None = Field(None, description="override the model's NVLink type")
    nvlink_links: int | None = Field(None, ge=1, le=64, description="links per device")
    pcie_type: str | None = Field(None, description="PCIe of switches and adapters")
    pcie_switches: int = Field(0, ge=0, le=128, description="PCIe switches below the CPUs")
    smp_type: str = Field("UPI", description="inter-socket link type (UPI, xGMI-CPU)")
    nics: list[NicSpec] = Field(default_factory=list, description="network adapters")
    network: str | list[str] | None = Field(
        None, description="switch every adapter plugs into, or one switch per adapter"
    )
    links: list[LinkSpec] = Field(default_factory=list, description="extra links inside")
    cpus: StrictFloat | None = Field(
        None,
        gt=0,
        le=MAX_HOST_CPUS,
        description="logical CPU cores jobs may be given on each host; absent: not limited",
    )
    memory_gb: StrictFloat | None = Field(
        None,
        gt=0,
        le=MAX_HOST_MEMORY_GB,
        description="host memory (RAM) jobs may be given on each host, GB; absent: not limited",
    )

    @field_validator("devices", "nics", mode="before")
    @classmethod
    def _listify(cls, v: Any) -> Any:
        return _as_list(v)

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        return _check_template(v)

    @model_validator(mode="after")
    def _consistent(self) -> HostSpec:
        _check_role("pcie_type", self.pcie_type, _is_pcie)
        _check_role("smp_type", self.smp_type, _is_smp)
        _check_role("nvlink_type", self.nvlink_type, _is_accel)
        for g in self.devices:
            if g.numa is not None and g.numa >= self.sockets:
                raise ValueError(
                    f"devices: {g.model} has numa {g.numa} but the host has {self.sockets} "
                    f"socket{'s' * (self.sockets > 1)} (0..{self.sockets - 1})"
                )
        if self.nvlink is not NVLinkStyle.NONE and self.nvlink_type is None:
            linked = [g for g in self.devices if g.nvlink_type or _catalog_nvlink(g.model)]
            if not linked:
                models = ", ".join(sorted({g.model for g in self.devices}))
                raise ValueError(
                    f"nvlink: {self.nvlink.value} but {models} have no NVLink (or similar) in "
                    "the catalog; give nvlink_type (e.g. NVLink4) or use nvlink: none"
                )
        longest = self.names()[-1] if self.count > 1 or "{" in self.name else self.name
        if len(longest) > MAX_NAME:
            raise ValueError(f"host name {longest[:40]!r}... is longer than {MAX_NAME}")
        return self

    @property
    def nic_types(self) -> list[str]:
        """Link type of each adapter, ``nic0`` first."""
        return [n.type for n in self.nics for _ in range(n.count)]

    @model_validator(mode="after")
    def _network_matches(self) -> HostSpec:
        if isinstance(self.network, list) and len(self.network) != len(self.nic_types):
            raise ValueError(
                f"network lists {len(self.network)} switches for {len(self.nic_types)} adapters"
            )
        if self.network is not None and not self.nics:
            raise ValueError("network is set but the host has no nics")
        return self

    def names(self) -> list[str]:
        """The host names this entry expands to."""
        return expand_names(self.name, self.count, self.start)


class SwitchSpec(SpecModel):
    """A network switch (or ``count`` of them, named from a template)."""

    name: str = Field(description="switch name, or a template like leaf{i:03d} with count")
    kind: SwitchKind = Field(description="leaf, spine, core, ethernet, wireless_ap, nvswitch")
    pod: str | None = Field(
        None, max_length=MAX_NAME, description="pod (aggregation block) of a leaf switch"
    )
    count: int = Field(1, ge=1, le=MAX_SWITCHES, description="replicas of this switch")
    start: int = Field(0, ge=0, le=10**9, description="first index of the name template")

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        return _check_template(v)

    @field_validator("kind")
    @classmethod
    def _outside_hosts(cls, v: SwitchKind) -> SwitchKind:
        if v in (SwitchKind.PCIE_SWITCH, SwitchKind.CPU_ROOT, SwitchKind.NIC):
            raise ValueError(f"a {v.value} belongs inside a host (see hosts[].pcie_switches)")
        return v

    def names(self) -> list[str]:
        """The switch names this entry expands to."""
        return expand_names(self.name, self.count, self.start)


class FabricSpec(SpecModel):
    """A whole fabric: hosts, network switches, and links between them."""

    name: Name = Field(description="fabric name")
    description: str = Field("", max_length=4096, description="free text")
    hosts: list[HostSpec] = Field(min_length=1, description="machines")
    switches: list[SwitchSpec] = Field(default_factory=list, description="network switches")
    links: list[LinkSpec] = Field(
        default_factory=list, description="links between hosts and switches (global ids)"
    )

    @model_validator(mode="after")
    def _bounded(self) -> FabricSpec:
        devices = 0
        for i, h in enumerate(self.hosts):
            devices += h.count * sum(g.count for g in h.devices)
            if devices > MAX_DEVICES:
                raise ValueError(
                    f"hosts[{i}] brings the fabric past {MAX_DEVICES:,} devices; "
                    "split the fabric or model fewer hosts"
                )
        switches = sum(s.count for s in self.switches)
        if switches > MAX_SWITCHES:
            raise ValueError(f"{switches:,} switches; at most {MAX_SWITCHES:,}")
        if len(self.links) > MAX_LINKS:
            raise ValueError(f"{len(self.links):,} links; at most {MAX_LINKS:,}")
        return self


def fabric_json_schema() -> dict[str, Any]:
    """JSON schema of fabric files, compact forms included.

    Pydantic's schema shows the normalised shape; the short forms people write by hand
    (``devices: "8xH100-SXM"``, ``nics: "8xIB-NDR"``, a model name alone) are parsed by
    validators it cannot see, so they are added here.
    """
    schema = FabricSpec.model_json_schema()
    props = schema["$defs"]["HostSpec"]["properties"]
    for key, ref, example in (
        ("devices", "DeviceGroupSpec", "8xH100-SXM"),
        ("nics", "NicSpec", "8xIB-NDR"),
    ):
        short = {"type": "string", "examples": [example]}
        item = {"anyOf": [short, {"$ref": f"#/$defs/{ref}"}]}
        props[key] = {
            "anyOf": [short, {"type": "array", "items": item}],
            "description": props[key].get("description", ""),
        }
    return schema


__all__ = [
    "DeviceGroupSpec",
    "FabricSpec",
    "HostSpec",
    "LinkSpec",
    "NicSpec",
    "SpecModel",
    "SwitchSpec",
    "UnknownNameError",
    "expand_names",
    "fabric_json_schema",
]
