"""Hand-built fabrics and jobs for scheduler tests."""

from __future__ import annotations

from typing import Any

import pytest

from accelnet.fabric import DomainLevel, Fabric
from accelnet.fabric.build import build_fabric, parse_spec
from accelnet.sched import JobSpec, JobState, JobView, Placement

LAB: dict[str, Any] = {
    "name": "lab",
    "switches": [
        {"name": "leaf0", "kind": "leaf", "pod": "p0"},
        {"name": "leaf1", "kind": "leaf", "pod": "p0"},
        {"name": "spine", "kind": "spine"},
    ],
    "hosts": [
        {"name": "a", "devices": "8xH100-SXM", "nvlink": "nvswitch", "nics": "IB-NDR",
         "network": "leaf0"},
        {"name": "b", "devices": "8xH100-SXM", "nvlink": "nvswitch", "nics": "IB-NDR",
         "network": "leaf0"},
        {"name": "c", "devices": "4xH100-SXM", "nvlink": "nvswitch", "nics": "IB-NDR",
         "network": "leaf1"},
        {"name": "t", "devices": "4xT4", "nics": "IB-NDR", "network": "leaf1"},
        {"name": "m", "devices": "2xA100-SXM4-80GB", "nvlink": "nvswitch", "nics": "IB-NDR",
         "network": "leaf1"},
    ],
    "links": [{"a": "leaf0", "b": "spine", "type": "IB-NDR"},
              {"a": "leaf1", "b": "spine", "type": "IB-NDR"}],
}  # fmt: skip


@pytest.fixture(scope="session")
def lab() -> Fabric:
    return build_fabric(parse_spec(LAB, "<lab>"))


def job(
    name: str,
    acc: object = "H100:1",
    *,
    t: float = 0.0,
    state: JobState = JobState.ADMITTED,
    devices: tuple[str, ...] = (),
    share: float = 1.0,
    started: float | None = None,
    nominated: tuple[str, ...] = (),
    **spec: Any,
) -> JobView:
    """A job view; with ``devices`` it is RUNNING (unless ``state`` says otherwise)."""
    js = JobSpec.model_validate(
        {"name": name, "run": "true", "resources": {"accelerators": acc}, **spec}
    )
    placement = None
    if devices:
        model = "T4" if devices[0].startswith("t/") else "H100-SXM"
        placement = Placement(devices, share, model, DomainLevel.HOST)
        if state is JobState.ADMITTED:
            state = JobState.RUNNING
    return JobView(name, js, state, t, started_at=started, placement=placement, nominated=nominated)


def on(host: str, *idx: int) -> tuple[str, ...]:
    return tuple(f"{host}/gpu{i}" for i in idx)
