"""``/metrics``: a Prometheus collector over a :class:`~accelnet.monitor.source.MetricsSource`.

::

    registry = make_registry(source)          # one per app; no global registry
    body = exposition(registry)               # bytes, Prometheus text format 0.0.4
    return Response(body, media_type=CONTENT_TYPE)

or ``render(source)`` for both at once. The families, their units and labels are listed in
:mod:`accelnet.monitor.names` (and docs/metrics.md). Every scrape reads the source afresh
(O(jobs + devices + links)); nothing is cached between scrapes, so the collector holds no
state. Job counts come from the durable store (a restarted server exports the same); the
histograms (queue waits, decision times) from what the controller observed since it
started: each observation is made once, so their counts only grow.

dcgm-exporter writes counters under their bare DCGM names (``# TYPE
DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION counter``, no ``_total``), which the Python client's
exposition cannot do (it appends ``_total`` to every counter). The collector yields those
families untyped, and :func:`exposition` declares them ``counter`` again, so the text is what
dcgm-exporter writes, name and type.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Final

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.metrics_core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
    UnknownMetricFamily,
)
from prometheus_client.utils import floatToGoString

from accelnet.devices import DeviceSample, DeviceState
from accelnet.devices.samplers.nvml_support import THROTTLE_REASONS
from accelnet.monitor.names import (
    DCGM_SOURCES,
    METRICS,
    MIB,
    SAMPLE_FIELDS,
    MetricDef,
)
from accelnet.monitor.source import (
    Accounting,
    DeviceInfo,
    JobInfo,
    LinkUse,
    MetricsSource,
    ServiceInfo,
)
from accelnet.monitor.timing import QUEUE_WAIT_BUCKETS, HistogramSnapshot
from accelnet.sched import JobState

CONTENT_TYPE: Final = "text/plain; version=0.0.4; charset=utf-8"
"""The media type of :func:`exposition`'s bytes (``text/plain; version=0.0.4``)."""

HEALTH_VERDICTS: Final = ("pass", "warn", "fail", "unknown")
_THROTTLE_BITS: Final = {name: bit for bit, name, _ in THROTTLE_REASONS}
_DCGM_COUNTERS: Final = tuple(d.name for d in METRICS.values() if d.dcgm and d.kind == "counter")


def _le(bound: float) -> str:
    """A bucket bound as the ``le`` label writes it (``+Inf``, ``0.005``, ``1.0``)."""
    return str(floatToGoString(bound))  # type: ignore[no-untyped-call]


def _family(d: MetricDef) -> Metric:
    labels = list(d.labels)
    if d.kind == "histogram":
        return HistogramMetricFamily(d.name, d.help, labels=labels)
    if d.kind == "counter" and not d.dcgm:
        return CounterMetricFamily(d.name, d.help, labels=labels)
    if d.kind == "counter":  # dcgm-exporter's bare counter names: see the module docstring
        return UnknownMetricFamily(d.name, d.help, labels=labels)
    return GaugeMetricFamily(d.name, d.help, labels=labels)


class _Families:
    """One empty family per exported metric, filled by one scrape."""

    def __init__(self) -> None:
        self.by_name = {name: _family(d) for name, d in METRICS.items()}

    def add(self, name: str, labels: Sequence[str], value: float) -> None:
        fam = self.by_name[name]
        assert isinstance(fam, GaugeMetricFamily | CounterMetricFamily | UnknownMetricFamily)
        fam.add_metric(list(labels), value)

    def add_histogram(self, name: str, labels: Sequence[str], h: HistogramSnapshot) -> None:
        fam = self.by_name[name]
        assert isinstance(fam, HistogramMetricFamily)
        buckets = [(_le(b), float(n)) for b, n in h.buckets()]
        fam.add_metric(list(labels), buckets, h.total)

    def result(self) -> list[Metric]:
        """Every accelnet family (empty ones too: their HELP and TYPE say they exist) and the
        DCGM families that have samples (as dcgm-exporter: none without an NVIDIA GPU)."""
        return [f for name, f in self.by_name.items() if f.samples or not METRICS[name].dcgm]


class AccelnetCollector:
    """Reads ``source`` on every :meth:`collect`; holds no other state. Register it in a
    fresh ``CollectorRegistry`` (:func:`make_registry`). Raises whatever the source raises."""

    def __init__(self, source: MetricsSource) -> None:
        self._source = source

    def describe(self) -> list[Metric]:
        """Every family this collector can export (no samples): what the registry checks
        for name clashes, without reading the source."""
        return [_family(d) for d in METRICS.values()]

    def collect(self) -> list[Metric]:
        """One scrape: jobs, scheduler decisions, devices, links, services."""
        out = _Families()
        _jobs(out, self._source.jobs(), self._source.queue_waits())
        decisions = self._source.decisions()
        if decisions is not None:
            out.add_histogram("accelnet_scheduler_decision_seconds", (), decisions)
        devices = list(self._source.devices())
        for dev in devices:
            _device(out, dev)
        _accounting(out, self._source.accounting(), {d.id: d for d in devices})
        for link in self._source.links():
            _link(out, link)
        for svc in self._source.services():
            _service(out, svc)
        return out.result()


def make_registry(source: MetricsSource) -> CollectorRegistry:
    """A new registry holding one :class:`AccelnetCollector` over ``source``. One per app:
    nothing is registered globally."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(AccelnetCollector(source))
    return registry


def exposition(registry: CollectorRegistry) -> bytes:
    """The registry's metrics in Prometheus text format 0.0.4 (:data:`CONTENT_TYPE`), with
    dcgm-exporter's counters declared ``counter`` under their bare names."""
    text = generate_latest(registry)
    for name in _DCGM_COUNTERS:
        untyped, counter = f"# TYPE {name} untyped\n", f"# TYPE {name} counter\n"
        text = text.replace(untyped.encode(), counter.encode())
    return text


def render(source: MetricsSource) -> bytes:
    """``exposition(make_registry(source))``: the body of one ``/metrics`` answer."""
    return exposition(make_registry(source))


# ----- jobs -----------------------------------------------------------------------------------
def _jobs(out: _Families, jobs: Iterable[JobInfo], waits: Mapping[str, HistogramSnapshot]) -> None:
    counts: dict[tuple[str, str], int] = defaultdict(int)
    outcomes: dict[tuple[str, str], int] = defaultdict(int)
    tenants: set[str] = set(waits)
    extra_states: set[str] = set()
    known = [s.value for s in JobState]
    for job in jobs:
        counts[job.tenant, job.state] += 1
        tenants.add(job.tenant)
        if job.state not in known:
            extra_states.add(job.state)
        if job.finished_at is not None and job.outcome is not None:
            outcomes[job.outcome, job.tenant] += 1
    states = known + sorted(extra_states)
    bounds = next(iter(waits.values())).bounds if waits else QUEUE_WAIT_BUCKETS
    for tenant in sorted(tenants):
        for state in states:
            out.add("accelnet_jobs", (state, tenant), counts.get((tenant, state), 0))
        # every tenant with jobs gets a (maybe empty) histogram: stable series
        wait = waits.get(tenant) or HistogramSnapshot.empty(bounds)
        out.add_histogram("accelnet_queue_wait_seconds", (tenant,), wait)
    for labels, n in sorted(outcomes.items()):
        out.add("accelnet_jobs_finished", labels, n)


# ----- tenants, attempts, the API ------------------------------------------------------------
def _accounting(out: _Families, acc: Accounting, devices: Mapping[str, DeviceInfo]) -> None:
    for (tenant, outcome), n in sorted(acc.attempts.items()):
        out.add("accelnet_job_attempts_total", (tenant, outcome), n)
    for tenant, h in sorted(acc.run_times.items()):
        out.add_histogram("accelnet_job_run_seconds", (tenant,), h)
    for u in sorted(acc.usage, key=lambda u: (u.tenant, u.model)):
        out.add("accelnet_tenant_devices", (u.tenant, u.model), u.devices)
        out.add("accelnet_tenant_device_seconds_total", (u.tenant, u.model), u.device_seconds)
    for (tenant, model), limit in sorted(acc.quotas.items()):
        out.add("accelnet_tenant_quota_devices", (tenant, model), limit)
    for dj in acc.device_jobs:
        dev = devices.get(dj.device)
        if dev is not None:
            on = (dev.id, dev.host, dev.model, dev.kind, dj.job, dj.tenant)
            out.add("accelnet_device_job", on, dj.share)
    for labels, n in sorted(acc.api_requests.items()):
        out.add("accelnet_api_requests_total", labels, n)


# ----- services -------------------------------------------------------------------------------
SERVICE_STATES: Final = ("starting", "ready", "stopping")


def _service(out: _Families, svc: ServiceInfo) -> None:
    labels = (svc.name, svc.tenant)
    out.add_histogram("accelnet_service_request_duration_seconds", labels, svc.latency)
    for code, n in sorted(svc.requests.items()):
        out.add("accelnet_service_requests_total", (*labels, code), n)
    out.add("accelnet_service_retries_total", labels, svc.retries)
    models = sorted({m for m, _ in svc.replicas})
    for model in models:  # every state of a model the service uses, 0 included
        for state in SERVICE_STATES:
            out.add("accelnet_service_replicas", (*labels, model, state),
                    svc.replicas.get((model, state), 0))  # fmt: skip
    out.add("accelnet_service_inflight_requests", labels, svc.inflight)
    out.add("accelnet_service_queued_requests", labels, svc.queued)


# ----- devices --------------------------------------------------------------------------------
def _one_hot(
    out: _Families, name: str, labels: Sequence[str], values: Sequence[str], current: str
) -> None:
    """1 for ``current``, 0 for the other ``values`` (``current`` added if not among them)."""
    every = list(values) if current in values else [*values, current]
    for v in every:
        out.add(name, (*labels, v), 1.0 if v == current else 0.0)


def _device(out: _Families, dev: DeviceInfo) -> None:
    labels = (dev.id, dev.host, dev.model, dev.kind)
    ident = (dev.vendor, dev.model_name, dev.uuid or "", dev.pci_bus or "")
    out.add("accelnet_device_info", (*labels, *ident), 1.0)
    _one_hot(out, "accelnet_device_state", labels, [s.value for s in DeviceState], dev.state)
    if dev.health is not None:
        _one_hot(out, "accelnet_device_health", labels, HEALTH_VERDICTS, dev.health)
    s = dev.sample
    if s is None:
        return
    for f in SAMPLE_FIELDS:
        value = getattr(s, f.field)
        if value is not None:
            out.add(f.metric, (*labels, *(v for _, v in f.labels)), float(value) * f.scale)
    out.add("accelnet_device_sample_errors", labels, float(len(s.errors)))
    if s.throttle_reasons is not None:
        known = [name for _, name, _ in THROTTLE_REASONS]
        for reason in known + sorted(set(s.throttle_reasons) - set(known)):
            out.add("accelnet_device_throttle_reason", (*labels, reason),
                    1.0 if reason in s.throttle_reasons else 0.0)  # fmt: skip
    xid = _last_xid(dev, s)
    if xid is not None:
        out.add("accelnet_device_last_xid", labels, float(xid))
    if dev.is_nvidia_gpu() and s.source in DCGM_SOURCES:
        _dcgm(out, dev, s, xid)


def _last_xid(dev: DeviceInfo, s: DeviceSample) -> int | None:
    """The last Xid code (0: none seen), or None when nobody watches Xids."""
    if dev.last_xid is not None:
        return dev.last_xid
    if s.xid_events is None:
        return None
    return s.xid_events[-1] if s.xid_events else 0


def _throttle_mask(reasons: Iterable[str]) -> int:
    mask = 0
    for r in reasons:
        bit = _THROTTLE_BITS.get(r)
        if bit is None and r.startswith("0x"):  # an unknown bit, as the sampler names it
            try:
                bit = int(r, 16)
            except ValueError:
                bit = 0
        mask |= bit or 0
    return mask


def _dcgm(out: _Families, dev: DeviceInfo, s: DeviceSample, xid: int | None) -> None:
    """The readings of an NVIDIA GPU under dcgm-exporter's names, units and labels."""
    labels = (str(dev.index), dev.uuid or "", dev.pci_bus or "", f"nvidia{dev.index}",
              dev.model_name, dev.host, dev.id)  # fmt: skip
    for f in SAMPLE_FIELDS:
        value = getattr(s, f.field)
        if f.dcgm is None or value is None:
            continue
        v = float(value) * f.dcgm_scale
        out.add(f.dcgm, labels, float(math.floor(v)) if f.dcgm_int else v)
    if s.mem_used_bytes is not None and s.mem_total_bytes is not None:
        free = max(0, s.mem_total_bytes - s.mem_used_bytes) // MIB
        out.add("DCGM_FI_DEV_FB_FREE", labels, float(free))
    if s.throttle_reasons is not None:
        mask = _throttle_mask(s.throttle_reasons)
        out.add("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", labels, float(mask))
    if xid is not None:
        out.add("DCGM_FI_DEV_XID_ERRORS", (*labels, str(xid)), float(xid))


# ----- links ----------------------------------------------------------------------------------
def _link(out: _Families, link: LinkUse) -> None:
    labels = (link.src, link.dst, str(link.lane))
    out.add("accelnet_link_utilization", labels, link.utilization)
    out.add("accelnet_link_used_bytes_per_second", labels, link.used_bps)
    out.add("accelnet_link_capacity_bytes_per_second", labels, link.capacity_bps)
    out.add("accelnet_link_jobs", labels, float(link.jobs))
