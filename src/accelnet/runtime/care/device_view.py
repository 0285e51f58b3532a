"""What ``accelnet device list`` and ``cluster.devices()`` show, and fault recovery times.

:class:`DeviceStatus` is one device's row: lifecycle state, remediation phase, health (the
worst current finding, with the findings), jobs on it, the latest telemetry. A running
cluster fills it from its live parts
(:meth:`accelnet.runtime.care.device_care.DeviceCare.statuses`);
:func:`from_store` fills it from a store file another process wrote (states, the latest
health and remediation events, running jobs, the jobs' energy, the power caps).
:func:`recovery_times` reads the event log for the time from each fault to its jobs
running again (the benchmark's figure).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from accelnet.devices.health import Finding, Status, worst
from accelnet.devices.telemetry import DeviceSample
from accelnet.fabric import Fabric
from accelnet.runtime.control.store import Event, Store
from accelnet.sched import JobState

DEVICES_SCHEMA = "accelnet.devices/v1"
HEALTH_KINDS = ("health:pass", "health:warn", "health:fail")
_LIVE = (JobState.STARTING, JobState.RUNNING, JobState.PREEMPTING)


@dataclass(frozen=True, slots=True)
class DeviceStatus:
    """One device as ``accelnet device list`` shows it (``-``: not known here).
    ``energy_j``: the energy of the jobs run on it (J; a live cluster: since its controller
    started; a store: every job recorded there); ``power_cap_w``: its power limit where a
    power budget capped it below its maximum."""

    device: str
    kind: str
    model: str
    state: str
    phase: str
    health: Status
    findings: tuple[Finding, ...] = ()
    jobs: tuple[str, ...] = ()
    sample: DeviceSample | None = None
    failures: int = 0
    energy_j: float | None = None
    power_cap_w: float | None = None

    def to_json(self) -> dict[str, Any]:
        """The row as JSON-ready data (readings null when unknown)."""
        s = self.sample
        return {
            "device": self.device, "kind": self.kind, "model": self.model,
            "state": self.state, "phase": self.phase, "health": self.health.value,
            "failures": self.failures, "jobs": list(self.jobs),
            "utilization_pct": s.utilization_pct if s else None,
            "mem_used_bytes": s.mem_used_bytes if s else None,
            "mem_total_bytes": s.mem_total_bytes if s else None,
            "power_w": s.power_w if s else None,
            "temperature_c": s.temperature_c if s else None,
            "sampled_at": s.time if s else None,
            "energy_j": self.energy_j, "power_cap_w": self.power_cap_w,
            "findings": [f.to_json() for f in self.findings],
        }  # fmt: skip


def devices_json(rows: Iterable[DeviceStatus], source: str) -> dict[str, Any]:
    """``{"schema": "accelnet.devices/v1", "source": ..., "devices": [...]}``."""
    return {"schema": DEVICES_SCHEMA, "source": source, "devices": [r.to_json() for r in rows]}


def parse_finding(event: Event) -> Finding | None:
    """The finding a ``health:*`` event recorded (its text: ``dev check status: value
    (...)``); None if the text is not one."""
    head, _, rest = event.detail.partition(": ")
    parts = head.split(" ")
    if len(parts) < 3 or not event.kind.startswith("health:"):
        return None
    try:
        status = Status(parts[-1])
    except ValueError:
        return None
    value = rest.split(" (", 1)[0] if rest else ""
    return Finding(" ".join(parts[:-2]), parts[-2], status, event.at, "log", value)


def from_store(
    store: Store, fabric: Fabric, samples: Mapping[str, DeviceSample] | None = None
) -> list[DeviceStatus]:
    """Every device of ``fabric`` as the store has it: state, the current findings (from
    the health events), the remediation phase (from the last ``remedy:*`` event), the jobs
    running on it, their energy (the jobs' records), its power cap (the last ``power:cap``
    event); readings from ``samples`` (e.g. sampled now)."""
    states = store.devices()
    jobs: dict[str, list[str]] = {}
    for rec in store.jobs(_LIVE):
        for dev in rec.placement.devices if rec.placement else ():
            jobs.setdefault(dev, []).append(rec.id)
    current: dict[str, dict[str, Finding]] = {}
    phases: dict[str, str] = {}
    energy: dict[str, float] = {}
    for rec in store.jobs():
        for dev, joules in ((rec.energy or {}).get("by_device") or {}).items():
            energy[dev] = energy.get(dev, 0.0) + float(joules)
    caps: dict[str, float] = {}
    kinds = (*HEALTH_KINDS, *(f"remedy:{k}" for k in _REMEDY_ACTIONS), "power:cap")
    for ev in store.events_since(0, kinds):
        if ev.kind == "power:cap":
            dev, _, rest = ev.detail.partition(": ")
            with contextlib.suppress(ValueError):
                caps[dev] = float(rest.split(" W", 1)[0].replace(",", ""))
            continue
        if ev.kind.startswith("remedy:"):
            dev, _, rest = ev.detail.partition(" ")
            phases[dev] = rest.split(":", 1)[0]
            continue
        f = parse_finding(ev)
        if f is None:
            continue
        found = current.setdefault(f.device, {})
        if f.status is Status.PASS:
            found.pop(f.check, None)
        else:
            found[f.check] = f
    out = []
    for dev, d in fabric.devices.items():
        findings = tuple(sorted(current.get(dev, {}).values(), key=lambda f: -f.status.rank))
        state = states.get(dev)
        out.append(DeviceStatus(
            dev, d.kind.value, d.model.name, state.value if state else "-",
            phases.get(dev, "healthy" if state else "-"),
            worst(f.status for f in findings), findings, tuple(jobs.get(dev, ())),
            (samples or {}).get(dev), 0, energy.get(dev),
            caps[dev] if caps.get(dev, d.model.max_w) < d.model.max_w else None,
        ))  # fmt: skip
    return out


_REMEDY_ACTIONS = ("fail", "drain", "undrain", "reset", "probe", "ready", "offline", "note")


@dataclass(frozen=True, slots=True)
class Recovery:
    """A job moved by a fault: the fault on ``device`` at ``fault_at``; the job placed
    again at ``placed_at`` on ``devices`` and running at ``running_at``."""

    job: str
    device: str
    fault: str
    fault_at: float
    placed_at: float
    running_at: float
    devices: tuple[str, ...]

    @property
    def seconds(self) -> float:
        """From the fault to the job running again."""
        return self.running_at - self.fault_at

    @property
    def elsewhere(self) -> bool:
        """Whether it runs on other devices than the faulty one."""
        return self.device not in self.devices


def recovery_times(events: Iterable[Event]) -> list[Recovery]:
    """For every injected fault (``fault:*`` event) that hit a device running jobs, the time
    until each of those jobs ran again (``job:running`` of its next attempt). Jobs that
    finished without being moved are left out."""
    placed: dict[str, tuple[str, ...]] = {}  # live job -> devices of its attempt
    pending: dict[str, tuple[str, str, float]] = {}  # job -> (device, fault, when)
    placing: dict[str, tuple[float, tuple[str, ...]]] = {}
    out = []
    for ev in events:
        if ev.kind.startswith("fault:") and ev.job is None and ev.kind != "fault:end":
            dev = ev.detail.split(":", 1)[0]
            for job, devs in placed.items():
                if dev in devs and job not in pending:
                    pending[job] = (dev, ev.kind.removeprefix("fault:"), ev.at)
            continue
        if ev.job is None:
            continue
        job = ev.job
        if ev.kind == "job:starting":
            devs = tuple(d.strip() for d in ev.detail.removeprefix("placed on ").split(","))
            if job in pending:
                placing[job] = (ev.at, devs)
            placed[job] = devs
        elif ev.kind == "job:running" and job in pending and job in placing:
            dev, fault, at = pending.pop(job)
            when, devs = placing.pop(job)
            out.append(Recovery(job, dev, fault, at, when, ev.at, devs))
        elif ev.kind in ("job:succeeded", "job:failed", "job:cancelled"):
            placed.pop(job, None)
            pending.pop(job, None)
            placing.pop(job, None)
        elif ev.kind == "job:admitted":
            placed.pop(job, None)
    return out
