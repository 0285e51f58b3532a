"""The physical network: devices, hosts, switches, links; specs, presets, discovery, routes.

Pure and immutable (discovery aside, which reads the machine). Typical use::

    from accelnet.fabric import load_fabric
    fabric = load_fabric("dgx-h100")
    route = fabric.route("gpu0", "gpu5")   # NVLINK via NVSwitch, 450 GB/s each way
"""

from accelnet.fabric.build import build_fabric, load_fabric_file, load_spec, parse_spec
from accelnet.fabric.catalog import UnknownNameError, device_model, device_models, link_type
from accelnet.fabric.errors import FabricSpecError, SpecIssue
from accelnet.fabric.fabric import Fabric, FabricBuilder, FabricError
from accelnet.fabric.load import FabricNotFoundError, load_fabric
from accelnet.fabric.model import (
    Device,
    DeviceKind,
    DeviceModel,
    DomainLevel,
    Host,
    Level,
    Link,
    LinkMedium,
    LinkType,
    Precision,
    Switch,
    SwitchKind,
)
from accelnet.fabric.presets import load_preset, preset_names
from accelnet.fabric.routing import NoRouteError, Route

__all__ = [
    "Device",
    "DeviceKind",
    "DeviceModel",
    "DomainLevel",
    "Fabric",
    "FabricBuilder",
    "FabricError",
    "FabricNotFoundError",
    "FabricSpecError",
    "Host",
    "Level",
    "Link",
    "LinkMedium",
    "LinkType",
    "NoRouteError",
    "Precision",
    "Route",
    "SpecIssue",
    "Switch",
    "SwitchKind",
    "UnknownNameError",
    "build_fabric",
    "device_model",
    "device_models",
    "link_type",
    "load_fabric",
    "load_fabric_file",
    "load_preset",
    "load_spec",
    "parse_spec",
    "preset_names",
]
