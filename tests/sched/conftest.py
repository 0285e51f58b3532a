"""Hand-built fabrics and jobs for scheduler tests."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from accelnet.fabric import DomainLevel, Fabric
from accelnet.fabric.build import build_fabric, parse_spec
from accelnet.sched import JobSpec, JobState, JobView, Placement
from accelnet.sched.jobinfo import JobInfo
from accelnet.sched.rounds import RoundContext

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


def hosts_fabric(name: str, *hosts: tuple[str, str]) -> Fabric:
    """One host per (name, devices), e.g. ("v", "4xV100"), on one leaf."""
    spec: dict[str, Any] = {
        "name": name,
        "switches": [{"name": "leaf", "kind": "leaf"}],
        "hosts": [{"name": n, "devices": d, "nics": "IB-EDR", "network": "leaf"}
                  for n, d in hosts],
    }  # fmt: skip
    return build_fabric(parse_spec(spec, f"<{name}>"))


def round_context(
    jobs: list[JobView],
    table: Mapping[str, Mapping[str, float]],
    capacity: Mapping[str, int],
    now: float = 10.0,
) -> RoundContext:
    """A context as :class:`RoundScheduler` builds it: gang rates from ``table`` (job ->
    model -> steps/s on one device, times the gang), only the job's models in ``table``
    that have room for its gang."""

    def rates(spec: JobSpec, model: str, count: int) -> float:
        return table[spec.name].get(model, 0.0) * count

    return RoundContext.of(jobs, capacity, JobInfo(now, rates), models=lambda j: table[j.id])
