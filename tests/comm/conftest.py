from __future__ import annotations

from typing import Any

from accelnet.fabric import Fabric
from accelnet.fabric.build import build_fabric, parse_spec


def star(n: int, model: str = "V100", nic: str = "Eth-10G") -> Fabric:
    """``n`` one-GPU hosts, each with one NIC on one switch: every route alike."""
    spec: dict[str, Any] = {
        "name": f"star{n}",
        "switches": [{"name": "sw", "kind": "leaf"}],
        "hosts": [{"name": "h", "count": n, "devices": model, "nics": nic, "network": "sw"}],
    }
    return build_fabric(parse_spec(spec, f"<star{n}>"))


def boxes(n: int, gpus: int, nics: int = 1) -> Fabric:
    """``n`` DGX-like hosts of ``gpus`` H100s on NVSwitch, ``nics`` NDR NICs each, one leaf."""
    spec: dict[str, Any] = {
        "name": f"boxes{n}x{gpus}",
        "switches": [{"name": "leaf", "kind": "leaf"}],
        "hosts": [
            {
                "name": "b",
                "count": n,
                "devices": f"{gpus}xH100-SXM",
                "nvlink": "nvswitch",
                "nics": f"{nics}xIB-NDR",
                "network": "leaf",
            }
        ],
    }
    return build_fabric(parse_spec(spec, f"<boxes{n}x{gpus}>"))
