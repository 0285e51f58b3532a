"""Device health: passive checks over telemetry and heartbeats, each a finding with evidence.

After DCGM's health watches. A :class:`Finding` says which check, what status (PASS / WARN /
FAIL), what value it saw, against which limit, when, and from which source (telemetry,
heartbeat, probe, an injected fault). The checks:

- ``temperature``: at or above ``temperature_warn_c`` / ``temperature_fail_c``;
- ``xid``: an Xid event in the sample; the codes in ``xid_fail`` (48 double-bit ECC, 63/64
  row-remapping event/failure, 74 NVLink, 79 fallen off the bus, 92 high single-bit ECC
  rate, 94/95 contained/uncontained ECC) FAIL, others are ``xid_other`` (WARN);
- ``ecc_uncorrected``: the volatile uncorrected ECC counter grew since the previous sample;
- ``remap_pending`` (a row remapping waits for a reset) and ``remap_failed``;
- ``nvlink_down``: more links down than at the device's first sample;
- ``throttle``: a clock throttle reason in ``throttle_warn`` (hardware or thermal slowdown);
- ``gpu_lost`` / ``read_errors``: a reading failed with GpuIsLost, or otherwise;
- ``heartbeat``: the device's worker was silent for ``heartbeat_timeout_s``, or died
  (``worker_lost``).

Utilization at 0 while a job runs is not a failure (a job may be loading data or waiting on
its peers). Pure: no I/O, no clock; callers pass the samples and the times.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Literal

from pydantic import Field

from accelnet.devices.telemetry import DeviceSample
from accelnet.specio import SpecModel

CRITICAL_XIDS = (48, 63, 64, 74, 79, 92, 94, 95)
"""Xid codes that mean the GPU (not the application) is in trouble."""

HW_THROTTLES = ("hw_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown",
                "sw_thermal_slowdown")  # fmt: skip

Severity = Literal["fail", "warn", "ignore"]


class Status(StrEnum):
    """A check's verdict; ordered PASS < WARN < FAIL."""

    PASS = "pass"
    WARN = "warn"
    FAIL = "fail"

    @property
    def rank(self) -> int:
        """0, 1, 2 for PASS, WARN, FAIL."""
        return _RANK[self]


_RANK = {Status.PASS: 0, Status.WARN: 1, Status.FAIL: 2}


def worst(statuses: Iterable[Status]) -> Status:
    """The worst of ``statuses`` (PASS if there are none)."""
    return max(statuses, key=lambda s: s.rank, default=Status.PASS)


@dataclass(frozen=True, slots=True)
class Finding:
    """One check's verdict on one device, with its evidence.

    ``value`` is what was seen and ``limit`` what it was held against (both as text, e.g.
    ``"97 C"`` and ``">= 95 C"``); ``source`` is where it came from: ``telemetry``,
    ``heartbeat``, ``probe`` or ``fault`` (injected); ``at`` the time of the sample, the
    heartbeat check or the probe.
    """

    device: str
    check: str
    status: Status
    at: float
    source: str
    value: str = ""
    limit: str = ""
    detail: str = ""

    def text(self) -> str:
        """``host/gpu0 temperature fail: 97 C (limit >= 95 C; telemetry at 12.5)``."""
        limit = f"limit {self.limit}; " if self.limit else ""
        more = f" - {self.detail}" if self.detail else ""
        return (f"{self.device} {self.check} {self.status.value}: {self.value or '-'} "
                f"({limit}{self.source} at {self.at:.3f}){more}")  # fmt: skip

    def to_json(self) -> dict[str, Any]:
        """The finding as JSON-ready data."""
        return {"device": self.device, "check": self.check, "status": self.status.value,
                "at": self.at, "source": self.source, "value": self.value,
                "limit": self.limit, "detail": self.detail}  # fmt: skip


class HealthChecks(SpecModel):
    """Thresholds of the passive checks (one set per device kind in a remediation policy).

    A severity of ``ignore`` turns a check off; a threshold of ``null`` too."""

    temperature_warn_c: float | None = Field(None, description="WARN at or above (deg C)")
    temperature_fail_c: float | None = Field(None, description="FAIL at or above (deg C)")
    xid_fail: tuple[int, ...] = Field(CRITICAL_XIDS, description="Xid codes that FAIL")
    xid_other: Severity = Field("warn", description="any other Xid code")
    ecc_uncorrected: Severity = Field("fail", description="uncorrected ECC count grew")
    remap_pending: Severity = Field("warn", description="a row remapping waits for a reset")
    remap_failed: Severity = Field("fail", description="a row remapping failed")
    nvlink_down: Severity = Field("fail", description="more NVLinks down than at first")
    throttle_warn: tuple[str, ...] = Field(HW_THROTTLES, description="throttle reasons that WARN")
    gpu_lost: Severity = Field("fail", description="a reading failed with GpuIsLost")
    read_errors: Severity = Field("warn", description="any other failed reading")
    heartbeat_timeout_s: float = Field(30.0, gt=0, description="a silent worker FAILs after")
    worker_lost: Severity = Field("fail", description="the device's worker died on its own")


def _verdict(severity: Severity) -> Status | None:
    return None if severity == "ignore" else Status(severity)


def check_sample(
    sample: DeviceSample,
    checks: HealthChecks,
    previous: DeviceSample | None = None,
    baseline: DeviceSample | None = None,
) -> list[Finding]:
    """The WARN and FAIL findings of one sample (PASS checks are not listed). ``previous``
    is the device's sample before (for counters), ``baseline`` its first (for NVLinks)."""
    out: list[Finding] = []
    dev, at = sample.device, sample.time

    def add(
        check: str, status: Status | None, value: str, limit: str = "", detail: str = ""
    ) -> None:
        if status is not None:
            out.append(Finding(dev, check, status, at, "telemetry", value, limit, detail))

    temp = sample.temperature_c
    if temp is not None:
        fail_c, warn_c = checks.temperature_fail_c, checks.temperature_warn_c
        if fail_c is not None and temp >= fail_c:
            add("temperature", Status.FAIL, f"{temp:g} C", f">= {fail_c:g} C")
        elif warn_c is not None and temp >= warn_c:
            add("temperature", Status.WARN, f"{temp:g} C", f">= {warn_c:g} C")
    if sample.xid_events:
        codes = sample.xid_events
        critical = [c for c in codes if c in checks.xid_fail]
        status = Status.FAIL if critical else _verdict(checks.xid_other)
        add("xid", status, "Xid " + ", ".join(map(str, codes)),
            f"critical: {', '.join(map(str, checks.xid_fail))}")  # fmt: skip
    now_ecc = sample.ecc_uncorrected
    before = previous.ecc_uncorrected if previous is not None else None
    if now_ecc is not None and before is not None and now_ecc > before:
        add("ecc_uncorrected", _verdict(checks.ecc_uncorrected), f"{before} -> {now_ecc}",
            "no increase")  # fmt: skip
    if sample.remap_failed:
        add("remap_failed", _verdict(checks.remap_failed), "a row remapping failed",
            detail="the GPU needs service")  # fmt: skip
    if sample.remap_pending:
        add("remap_pending", _verdict(checks.remap_pending), "a row remapping is pending",
            detail="applied by a GPU reset")  # fmt: skip
    down, first = sample.nvlink_down, baseline.nvlink_down if baseline is not None else None
    if down is not None and first is not None and down > first:
        add("nvlink_down", _verdict(checks.nvlink_down), f"{down} link(s) down",
            f"<= {first} (at the first sample)")  # fmt: skip
    hot = [r for r in sample.throttle_reasons or () if r in checks.throttle_warn]
    if hot:
        add("throttle", Status.WARN, ", ".join(hot))
    lost = [e for e in sample.errors if "GpuIsLost" in e]
    other = [e for e in sample.errors if "GpuIsLost" not in e]
    if lost:
        add("gpu_lost", _verdict(checks.gpu_lost), "; ".join(lost))
    if other:
        add("read_errors", _verdict(checks.read_errors), "; ".join(other))
    return out


def check_heartbeat(
    device: str, last_beat: float, now: float, checks: HealthChecks, pid: int | None = None
) -> Finding | None:
    """FAIL if the device's worker has been silent for ``heartbeat_timeout_s``."""
    silent = now - last_beat
    if silent < checks.heartbeat_timeout_s:
        return None
    who = f"worker pid {pid}" if pid is not None else "worker"
    return Finding(device, "heartbeat", Status.FAIL, now, "heartbeat",
                   f"no heartbeat for {silent:.1f} s", f"< {checks.heartbeat_timeout_s:g} s",
                   f"{who}: last heard at {last_beat:.3f}")  # fmt: skip


def check_lost(
    device: str, at: float, how: str, checks: HealthChecks, pid: int | None = None
) -> Finding | None:
    """The verdict on a worker that died on its own (nobody asked it to stop)."""
    status = _verdict(checks.worker_lost)
    if status is None:
        return None
    who = f"worker pid {pid}" if pid is not None else "worker"
    return Finding(device, "heartbeat", status, at, "heartbeat", f"{who} {how}",
                   "alive", "its heartbeat stopped")  # fmt: skip


class HealthBoard:
    """The current WARN/FAIL findings of every device, per source; tells what changed.

    Each source (``telemetry``, ``heartbeat``, ``probe``, ``fault``) replaces its own
    findings of a device with every :meth:`update`; the changes are the findings whose
    status is new and, as PASS findings, the checks that cleared. Not thread-safe.
    """

    def __init__(self) -> None:
        self._now: dict[str, dict[tuple[str, str], Finding]] = {}

    def update(
        self, device: str, source: str, findings: Iterable[Finding], at: float
    ) -> list[Finding]:
        """Replace ``source``'s findings of ``device``; the changes (new, changed, cleared)."""
        current = self._now.setdefault(device, {})
        fresh = {(source, f.check): f for f in findings if f.status is not Status.PASS}
        changes = [f for key, f in fresh.items()
                   if key not in current or current[key].status is not f.status]  # fmt: skip
        for key, old in list(current.items()):
            if key[0] == source and key not in fresh:
                del current[key]
                changes.append(Finding(device, old.check, Status.PASS, at, source,
                                       detail=f"cleared (was {old.status.value})"))  # fmt: skip
        current.update(fresh)
        return changes

    def findings(self, device: str) -> list[Finding]:
        """The device's current WARN and FAIL findings, worst first."""
        found = self._now.get(device, {}).values()
        return sorted(found, key=lambda f: (-f.status.rank, f.check))

    def status(self, device: str) -> Status:
        """The worst current status of the device (PASS if nothing is wrong)."""
        return worst(f.status for f in self._now.get(device, {}).values())

    def clear(self, device: str, source: str) -> None:
        """Forget ``source``'s findings of ``device`` (without reporting them as cleared)."""
        current = self._now.get(device, {})
        for key in [k for k in current if k[0] == source]:
            del current[key]
