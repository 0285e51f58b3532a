"""Device health and remediation from the SDK: the part of ``LocalCluster`` that deals with
devices (``cluster.devices()``, ``drain``, ``undrain``, ``reset_device``, ``probe``,
``inject``, ``events``, ``recoveries``), and the samplers a local cluster watches with.

Requests go to the cluster's :class:`~accelnet.runtime.care.device_care.DeviceCare` through its
queue and are carried out in the controller's thread; the calls here wait for the answer.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import cloudpickle

from accelnet.devices.faults import Fault
from accelnet.devices.health import Finding
from accelnet.devices.lifecycle import DeviceState
from accelnet.devices.probes import judge, no_answer, run_probe
from accelnet.devices.remediation import KindPolicy
from accelnet.devices.telemetry import Sampler, SamplerUnavailableError
from accelnet.fabric import Fabric
from accelnet.fabric.model import DeviceKind
from accelnet.runtime.backend import TaskEventKind, TaskSpec
from accelnet.runtime.care.device_care import Answer, DeviceCare
from accelnet.runtime.care.device_view import DeviceStatus, Recovery, recovery_times
from accelnet.runtime.care.power import PowerCare
from accelnet.runtime.control.controller import Controller
from accelnet.runtime.control.store import Event, Store
from accelnet.runtime.local.backend import LocalBackend
from accelnet.runtime.local.runas import SERVICE_TENANT

if TYPE_CHECKING:
    from accelnet.runtime.ray.backend import RayBackend


def default_samplers(fabric: Fabric, backend: LocalBackend, emulated: bool) -> list[Sampler]:
    """What a local cluster samples: an emulated fabric its workers' processes; this
    machine its CPU devices (psutil) and NVIDIA GPUs (NVML, if ``nvidia-ml-py`` and a
    driver are there; otherwise they go unsampled)."""
    from accelnet.devices.samplers import EmulatedSampler, HostSampler, NvmlSampler  # noqa: PLC0415

    devices = list(fabric.devices.values())
    if emulated:
        return [EmulatedSampler([d.id for d in devices], backend.worker_pid)]
    out: list[Sampler] = []
    cpus = [d for d in devices if d.kind is DeviceKind.CPU]
    if cpus:
        out.append(HostSampler(cpus))
    gpus = [d for d in devices if d.kind is DeviceKind.GPU and d.model.vendor == "nvidia"]
    if gpus:
        # no driver or no nvidia-ml-py: heartbeats and probes still watch them
        with contextlib.suppress(SamplerUnavailableError):
            out.append(NvmlSampler(gpus))
    return out


class DeviceOps:
    """Mixed into :class:`~accelnet.runtime.sdk.LocalCluster`."""

    care: DeviceCare | None
    power: PowerCare
    controller: Controller
    store: Store
    backend: LocalBackend | RayBackend
    fabric: Fabric
    _lock: threading.Lock

    def _care(self) -> DeviceCare:
        if self.care is None:
            raise RuntimeError("device care is off in this cluster (local(health=False))")
        return self.care

    def _ask(self, op: str, device: str, timeout: float, **args: Any) -> Answer:
        fut = self._care().request(op, device, **args)
        self.backend.wakeup()
        return fut.result(timeout)

    def free_by_model(self) -> dict[str, int]:
        """Devices READY for new work now, by device model (works with device care off)."""
        with self._lock:
            states = self.controller.device_states()
        free: dict[str, int] = {}
        for dev_id, state in states.items():
            if state is DeviceState.READY:
                name = self.fabric.devices[dev_id].model.name
                free[name] = free.get(name, 0) + 1
        return free

    def devices(self) -> list[DeviceStatus]:
        """Every device: lifecycle state, remediation phase, health and its findings, the
        jobs on it, its latest telemetry sample, the energy of its jobs since the cluster
        started, its power cap (with a power budget)."""
        care = self._care()
        with self._lock:
            rows = care.statuses()
            energy = self.power.device_energy(self.controller.clock.now())
            caps = self.power.caps()
        return [replace(r, energy_j=energy.get(r.device, 0.0), power_cap_w=caps.get(r.device))
                for r in rows]  # fmt: skip

    def drain(self, device: str, reason: str | None = None, timeout: float = 30.0) -> Answer:
        """Take ``device`` out of service: no new work; its jobs finish."""
        return self._ask("drain", device, timeout, reason=reason)

    def undrain(self, device: str, timeout: float = 120.0) -> Answer:
        """Back into service (refreshed and probed first if idle); answered when settled."""
        return self._ask("undrain", device, timeout)

    def reset_device(self, device: str, timeout: float = 120.0) -> Answer:
        """Reset and probe ``device`` (after its jobs end); answered when it has settled
        (at once if it waits for jobs)."""
        return self._ask("reset", device, timeout)

    def probe(self, device: str, level: int = 1, timeout: float = 300.0) -> Answer:
        """Run a level-1 or level-2 probe on an idle device; the findings are in the
        answer. A device in service is out of service while it runs."""
        return self._ask("probe", device, timeout, level=level)

    def inject(self, fault: Fault | None = None, timeout: float = 30.0, **fields: Any) -> Answer:
        """Inject a fault now (or ``at`` seconds from now): a :class:`Fault`, or its fields
        (``device=..., kind="fail" | "slow" | "hang" | "kill", for_s=..., factor=...``)."""
        fault = fault if fault is not None else Fault.model_validate(fields)
        fut = self._care().inject(fault)
        self.backend.wakeup()
        return fut.result(timeout)

    def clear_faults(self, device: str, timeout: float = 30.0) -> Answer:
        """End ``device``'s injected faults now (its scheduled ones are dropped)."""
        fut = self._care().clear_faults(device)
        self.backend.wakeup()
        return fut.result(timeout)

    def events(self, job: str | None = None, kinds: Iterable[str] | None = None) -> list[Event]:
        """The event log (of one job; of some kinds, e.g. ``("job:moved",)``)."""
        events = self.store.events(job)
        wanted = None if kinds is None else set(kinds)
        return [e for e in events if wanted is None or e.kind in wanted]

    def recoveries(self) -> list[Recovery]:
        """For every injected fault that moved jobs: the time until each ran again."""
        return recovery_times(self.store.events())


def probe_directly(
    backend: LocalBackend, device: str, level: int, policy: KindPolicy, log_dir: Path
) -> list[Finding]:
    """Probe ``device`` in its worker on ``backend`` now, without a controller (the CLI
    on a machine where nothing else runs); blocks until the probe ends or times out."""
    timeout = policy.probe_timeout_s + (policy.stress_s if level >= 2 else 0.0)
    payload = cloudpickle.dumps((run_probe, (level, policy.stress_s, None), {}))
    tid = "probe-direct"
    start = time.monotonic()
    backend.launch(TaskSpec(tid, tid, 0, 1, device, (device,), payload=payload,
                            timeout_s=timeout, log_dir=str(log_dir),
                            tenant=SERVICE_TENANT))  # fmt: skip
    while True:
        for ev in backend.poll(1.0):
            if ev.task_id != tid or ev.kind is TaskEventKind.STARTED:
                continue
            if ev.kind is TaskEventKind.SUCCEEDED:
                return judge(device, ev.result, ev.at, time.monotonic() - start)
            return [no_answer(device, f"{ev.kind.value}: {ev.error or ev.exit_code}", ev.at)]
