"""Devices: list, get, and the admin's drain / undrain / reset / probe.

A non-admin sees every device, but of the jobs on it only its own tenant's (``busy``
says whether anyone's job holds it). An operation waits up to ``op_wait_s`` for its
answer: a refused one (a probe of a busy device, an undrain of an unhealthy one still
running jobs) is 409 with the reason; one not settled by then is 202 with
``answer: null`` and goes on (the device and the event log tell how it ends). A probe that
finds the device failing is answered (202, ``answer.ok`` false, with its findings).
"""

from __future__ import annotations

from accelnet.api.errors import conflict, not_found
from accelnet.api.jobs import JobTenants
from accelnet.api.models import AnswerOut, DeviceOpOut, DeviceOut
from accelnet.api.port import DEVICE_OPS, ClusterPort, DeviceCareOffError
from accelnet.api.tokens import Principal
from accelnet.runtime.care.device_view import DeviceStatus


class DeviceService:
    """The device endpoints' logic."""

    def __init__(self, port: ClusterPort, job_tenants: JobTenants, op_wait_s: float) -> None:
        self.port = port
        self.job_tenants = job_tenants
        self.op_wait_s = op_wait_s

    def out(self, who: Principal, status: DeviceStatus) -> DeviceOut:
        """The API's view of a device, for ``who``."""
        s = status.sample
        jobs = list(status.jobs)
        if not who.admin:
            jobs = [j for j in jobs if self.job_tenants.of(j) == who.tenant]
        health = status.health.value
        return DeviceOut(
            id=status.device, host=self.port.fabric.devices[status.device].host,
            model=status.model, kind=status.kind, state=status.state, phase=status.phase,
            health=health if health in ("pass", "warn", "fail") else "unknown",
            failures=status.failures, jobs=jobs, busy=bool(status.jobs),
            utilization_pct=s.utilization_pct if s else None,
            memory_used_bytes=s.mem_used_bytes if s else None,
            memory_total_bytes=s.mem_total_bytes if s else None,
            power_w=s.power_w if s else None,
            temperature_c=s.temperature_c if s else None,
            sampled_at=s.time if s else None,
            findings=[f.to_json() for f in status.findings],
        )  # fmt: skip

    def list(self, who: Principal) -> list[DeviceOut]:
        """Every device."""
        return [self.out(who, s) for s in self.port.devices()]

    def get(self, who: Principal, device: str) -> DeviceOut:
        """One device; 404 if the fabric has none of that id."""
        return self.out(who, self._status(device))

    def operate(
        self, who: Principal, device: str, op: str, reason: str | None, level: int
    ) -> DeviceOpOut:
        """Carry out ``op`` (see the module docstring)."""
        assert op in DEVICE_OPS
        self._status(device)
        why = reason or f"operator {who.token_id}: {op}"
        try:
            answer = self.port.device_op(op, device, why, level, self.op_wait_s)
        except DeviceCareOffError as exc:
            raise conflict(str(exc)) from None
        if answer is not None and not answer.ok and not answer.findings:  # refused
            raise conflict(f"{op} {device}: {answer.detail}")
        now = self.out(who, self._status(device))
        out = AnswerOut(**answer.to_json()) if answer is not None else None
        return DeviceOpOut(**now.model_dump(), answer=out)

    def _status(self, device: str) -> DeviceStatus:
        if device not in self.port.fabric.devices:
            raise not_found(f"no device {device!r}")
        for s in self.port.devices():
            if s.device == device:
                return s
        raise not_found(f"no device {device!r}")
