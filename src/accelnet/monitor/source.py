"""What ``/metrics`` reads: the :class:`MetricsSource` protocol and its plain records.

The server implements :class:`MetricsSource` over its live parts (the controller, the store,
the telemetry poller, the link model); the collector (:mod:`accelnet.monitor.metrics`) calls
it once per scrape and never writes. The records are plain frozen dataclasses so that a
source can copy what it needs under its own lock and let the exposition run outside it
(:class:`Snapshot` is such a copy, and itself a source). The helpers :func:`job_info`,
:func:`device_info` and :func:`link_uses` build the records from the runtime's and the
fabric's own types. Pure: no I/O, no clock reads.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from accelnet.devices.telemetry import DeviceSample
from accelnet.monitor.timing import HistogramSnapshot

if TYPE_CHECKING:
    from accelnet.comm.contention import LinkShare
    from accelnet.fabric.model import Device


@dataclass(frozen=True, slots=True)
class JobInfo:
    """One job as the metrics see it. ``state`` is a :class:`~accelnet.sched.JobState` value
    (``"running"``); times are seconds on the controller's clock, ``None`` until they
    happen. ``started_at - submitted_at`` is the job's queue wait. ``outcome``: how its
    latest attempt ended (an :class:`~accelnet.sched.reasons.OutcomeCode` value; None
    before one has)."""

    id: str
    state: str
    tenant: str
    submitted_at: float
    started_at: float | None = None
    finished_at: float | None = None
    outcome: str | None = None


@dataclass(frozen=True, slots=True)
class DeviceInfo:
    """One device: identity, lifecycle state, health and latest telemetry.

    ``id`` is the fabric id (``"dgx/gpu0"``), ``model`` the catalog model (``"H100-SXM"``),
    ``model_name`` the name the driver reports (``"NVIDIA H100 80GB HBM3"``; dcgm-exporter's
    ``modelName``), ``index`` the device's index on its host (dcgm-exporter's ``gpu``).
    ``state`` is a :class:`~accelnet.devices.DeviceState` value, ``health`` one of
    ``pass|warn|fail|unknown`` or ``None`` when nothing checks it. ``sample`` is the latest
    telemetry sample (``None``: not sampled yet). ``last_xid`` is the last Xid code the device
    reported (``None``: none seen, or not tracked; the latest sample's codes are used then).
    """

    id: str
    host: str
    state: str
    kind: str = ""
    model: str = ""
    vendor: str = ""
    model_name: str = ""
    index: int = 0
    uuid: str | None = None
    pci_bus: str | None = None
    health: str | None = None
    sample: DeviceSample | None = None
    last_xid: int | None = None

    def is_nvidia_gpu(self) -> bool:
        """Whether the device is an NVIDIA GPU (its readings may carry DCGM names)."""
        return self.kind.lower() == "gpu" and self.vendor.lower() == "nvidia"


@dataclass(frozen=True, slots=True)
class LinkUse:
    """One direction of one link: bytes/s the jobs put on it against its capacity.

    ``src`` is the end the bytes leave from, ``dst`` the other; ``lane`` tells parallel links
    between the same two nodes apart. ``jobs`` is how many jobs share it."""

    src: str
    dst: str
    used_bps: float
    capacity_bps: float
    lane: int = 0
    jobs: int = 0

    @property
    def utilization(self) -> float:
        """``used / capacity`` (0 for a link without capacity)."""
        return self.used_bps / self.capacity_bps if self.capacity_bps > 0 else 0.0


@dataclass(frozen=True, slots=True)
class ServiceInfo:
    """One service (:mod:`accelnet.serve`): its router's counts since it started and its
    replicas now. ``requests`` by status code (``"none"``: no replica answered),
    ``replicas`` by ``(device model, state)`` with state ``starting|ready|stopping``."""

    name: str
    tenant: str
    latency: HistogramSnapshot
    requests: Mapping[str, int]
    retries: int
    replicas: Mapping[tuple[str, str], int]
    inflight: int
    queued: int


@dataclass(frozen=True, slots=True)
class TenantUse:
    """What one tenant holds and has used of one device model: ``devices`` now (a packed
    job's share counted as such), ``device_seconds`` its ended attempts used."""

    tenant: str
    model: str
    devices: float
    device_seconds: float


@dataclass(frozen=True, slots=True)
class DeviceJob:
    """A job on a device now (one per device of its placement): what ties a device's
    readings to the job and the tenant (as dcgm-exporter's pod labels do); ``share`` is
    the job's share of the device (1: whole; 0.5: packed beside another)."""

    device: str
    job: str
    tenant: str
    share: float = 1.0


@dataclass(frozen=True)
class Accounting:
    """Who uses what: ``usage`` per tenant and model; ``quotas`` (tenant, model) -> devices
    (``*``: every model together); ``attempts`` (tenant, outcome) -> attempts ended;
    ``run_times`` each tenant's attempt run times; ``device_jobs`` the jobs on devices now;
    ``api_requests`` (method, route, code, tenant) -> API requests answered (tenant
    empty: no valid token)."""

    usage: Sequence[TenantUse] = ()
    quotas: Mapping[tuple[str, str], float] = field(default_factory=dict)
    attempts: Mapping[tuple[str, str], int] = field(default_factory=dict)
    run_times: Mapping[str, HistogramSnapshot] = field(default_factory=dict)
    device_jobs: Sequence[DeviceJob] = ()
    api_requests: Mapping[tuple[str, str, str, str], int] = field(default_factory=dict)


class MetricsSource(Protocol):
    """What the metrics read, once per scrape, from whatever runs the cluster.

    Every method is read-only, may be called from a thread other than the controller's (the
    implementation makes its answers consistent: a copy under its lock), and should be cheap
    (a scrape reads every job: O(jobs + devices + links)). An exception fails the scrape (the
    server answers 500 and Prometheus records the target down); nothing is half-exported.
    """

    def jobs(self) -> Iterable[JobInfo]:
        """Every job the store holds, finished ones included (they carry the queue waits)."""
        ...

    def devices(self) -> Iterable[DeviceInfo]:
        """Every device of the fabric, with its state and latest sample."""
        ...

    def links(self) -> Iterable[LinkUse]:
        """Link directions in use (an empty iterable when nothing communicates)."""
        ...

    def decisions(self) -> HistogramSnapshot | None:
        """Scheduler decision durations (:meth:`DecisionTimer.snapshot`); None if not timed."""
        ...

    def queue_waits(self) -> Mapping[str, HistogramSnapshot]:
        """Each tenant's queue waits, each observed once when its attempt started
        (:meth:`TenantHistograms.snapshot`); empty when nothing records them."""
        ...

    def accounting(self) -> Accounting:
        """Who uses what (:class:`Accounting`; empty parts where nothing records them)."""
        ...

    def services(self) -> Iterable[ServiceInfo]:
        """The running services (an empty iterable when there are none)."""
        ...


@dataclass(frozen=True)
class Snapshot:
    """A :class:`MetricsSource` that holds its answers: copy under a lock, export outside."""

    job_list: Sequence[JobInfo] = ()
    device_list: Sequence[DeviceInfo] = ()
    link_list: Sequence[LinkUse] = ()
    decision_times: HistogramSnapshot | None = None
    service_list: Sequence[ServiceInfo] = ()
    wait_times: Mapping[str, HistogramSnapshot] = field(default_factory=dict)
    accounts: Accounting = field(default_factory=Accounting)

    def jobs(self) -> Iterable[JobInfo]:
        """See :class:`MetricsSource`."""
        return self.job_list

    def devices(self) -> Iterable[DeviceInfo]:
        """See :class:`MetricsSource`."""
        return self.device_list

    def links(self) -> Iterable[LinkUse]:
        """See :class:`MetricsSource`."""
        return self.link_list

    def decisions(self) -> HistogramSnapshot | None:
        """See :class:`MetricsSource`."""
        return self.decision_times

    def services(self) -> Iterable[ServiceInfo]:
        """See :class:`MetricsSource`."""
        return self.service_list

    def queue_waits(self) -> Mapping[str, HistogramSnapshot]:
        """See :class:`MetricsSource`."""
        return self.wait_times

    def accounting(self) -> Accounting:
        """See :class:`MetricsSource`."""
        return self.accounts


# ----- builders from the runtime's and the fabric's types ---------------------------------
class _HasTenant(Protocol):
    @property
    def tenant(self) -> str: ...


class _JobRecordLike(Protocol):
    """The fields of :class:`accelnet.runtime.control.store.JobRecord` a :class:`JobInfo` needs."""

    @property
    def id(self) -> str: ...
    @property
    def spec(self) -> _HasTenant: ...
    @property
    def state(self) -> str: ...
    @property
    def submitted_at(self) -> float: ...
    @property
    def started_at(self) -> float | None: ...
    @property
    def finished_at(self) -> float | None: ...
    @property
    def outcome(self) -> str | None: ...


def job_info(record: _JobRecordLike) -> JobInfo:
    """A :class:`JobInfo` from a store's ``JobRecord`` (``store.jobs()``)."""
    return JobInfo(
        record.id,
        str(record.state),
        record.spec.tenant,
        record.submitted_at,
        record.started_at,
        record.finished_at,
        None if record.outcome is None else str(record.outcome),
    )


def device_info(
    device: Device,
    state: str,
    *,
    sample: DeviceSample | None = None,
    health: str | None = None,
    last_xid: int | None = None,
) -> DeviceInfo:
    """A :class:`DeviceInfo` from a fabric device, its lifecycle state (a ``DeviceState``)
    and what telemetry and health checks know of it. The driver's model name is the
    device's ``detail`` when discovery recorded one, else the catalog model's name."""
    return DeviceInfo(
        id=device.id,
        host=device.host,
        state=str(state),
        kind=str(device.model.kind),
        model=device.model.name,
        vendor=device.model.vendor,
        model_name=device.detail or device.model.name,
        index=device.index,
        uuid=device.uuid,
        pci_bus=device.pci_bus,
        health=None if health is None else str(health),
        sample=sample,
        last_xid=last_xid,
    )


def link_uses(shares: Iterable[LinkShare]) -> list[LinkUse]:
    """:class:`LinkUse` records from :func:`accelnet.comm.contention.link_shares`."""
    out = []
    for s in shares:
        a, b, src, lane = s.link
        dst = b if src == a else a
        out.append(LinkUse(src, dst, s.used, s.capacity, lane, len(s.shares)))
    return out


def link_uses_from(table: Mapping[tuple[str, str], tuple[float, float]]) -> list[LinkUse]:
    """:class:`LinkUse` records from a plain ``{(src, dst): (used, capacity)}`` mapping
    (bytes/s), for a source that measures links itself."""
    return [LinkUse(src, dst, used, cap) for (src, dst), (used, cap) in table.items()]
