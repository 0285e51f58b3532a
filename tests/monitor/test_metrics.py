"""``/metrics`` read back with Prometheus' text-format parser: names, types, labels, units,
histogram buckets, dcgm-exporter compatibility, label escaping, the empty cluster."""

from __future__ import annotations

import http.server
import math
import re
import shutil
import subprocess
import threading
import urllib.request
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import replace
from typing import Any

import pytest
from prometheus_client import REGISTRY
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families

from accelnet.comm import Communicator, CostModel
from accelnet.comm.contention import CommJob, LinkShare, link_shares
from accelnet.devices import DeviceSample, DeviceState
from accelnet.fabric.presets import load_preset
from accelnet.monitor import (
    CONTENT_TYPE,
    DecisionTimer,
    DeviceInfo,
    HistogramSnapshot,
    JobInfo,
    LinkUse,
    MetricsSource,
    Snapshot,
    device_info,
    job_info,
    link_uses,
    link_uses_from,
    make_registry,
    render,
)
from accelnet.monitor.metrics import AccelnetCollector, exposition
from accelnet.monitor.names import DCGM_LABELS, DEVICE_LABELS, METRICS, SAMPLE_FIELDS
from accelnet.monitor.source import Accounting, DeviceJob, ServiceInfo, TenantUse
from accelnet.monitor.timing import (
    QUEUE_WAIT_BUCKETS,
    SERVICE_BUCKETS,
    AttemptTally,
    TenantHistograms,
    histogram,
)
from accelnet.runtime.control.store import JobRecord
from accelnet.sched import JobSpec, JobState

GIB = 1024**3


class FakeSource:
    """A hand-built cluster; answers with one-shot iterators (the collector reads once)."""

    def __init__(
        self,
        jobs: Iterable[JobInfo] = (),
        devices: Iterable[DeviceInfo] = (),
        links: Iterable[LinkUse] = (),
        decisions: HistogramSnapshot | None = None,
        services: Iterable[ServiceInfo] = (),
        waits: Mapping[str, HistogramSnapshot] | None = None,
        accounts: Accounting | None = None,
    ) -> None:
        self._jobs, self._devices, self._links = list(jobs), list(devices), list(links)
        self._waits = dict(waits or {})
        self._accounts = accounts or Accounting()
        self._decisions = decisions
        self._services = list(services)
        self.scrapes = 0

    def jobs(self) -> Iterator[JobInfo]:
        self.scrapes += 1
        return iter(self._jobs)

    def devices(self) -> Iterator[DeviceInfo]:
        return iter(self._devices)

    def links(self) -> Iterator[LinkUse]:
        return iter(self._links)

    def decisions(self) -> HistogramSnapshot | None:
        return self._decisions

    def services(self) -> Iterator[ServiceInfo]:
        return iter(self._services)

    def queue_waits(self) -> Mapping[str, HistogramSnapshot]:
        return self._waits

    def accounting(self) -> Accounting:
        return self._accounts


def parse(source: MetricsSource) -> dict[str, Metric]:
    """The families of one scrape by name, through the real text-format parser."""
    return {m.name: m for m in text_string_to_metric_families(render(source).decode())}


def value(fams: dict[str, Metric], sample: str, **labels: str) -> float:
    """The one sample named ``sample`` whose labels include ``labels``."""
    bases = [sample.removesuffix(x) for x in ("_total", "_bucket", "_count", "_sum")]
    family = next(b for b in bases if b != sample and b in fams) if sample not in fams else sample
    found = [
        s.value
        for s in fams[family].samples
        if s.name == sample and all(s.labels.get(k) == v for k, v in labels.items())
    ]
    assert len(found) == 1, f"{sample}{labels}: {len(found)} samples"
    return found[0]


def series(fams: dict[str, Metric], family: str) -> list[dict[str, str]]:
    return [s.labels for s in fams[family].samples] if family in fams else []


def gpu(index: int = 0, host: str = "dgx", source: str = "nvml", **readings: Any) -> DeviceInfo:
    sample = DeviceSample(f"{host}/gpu{index}", 1000.0, source, **readings)
    return DeviceInfo(
        id=f"{host}/gpu{index}", host=host, state="allocated", kind="gpu", model="H100-SXM",
        vendor="nvidia", model_name="NVIDIA H100 80GB HBM3", index=index,
        uuid=f"GPU-{index:08d}", pci_bus=f"00000000:{index + 7:02X}:00.0", sample=sample,
    )  # fmt: skip


# ----- jobs and the scheduler ----------------------------------------------------------------
def test_finished_jobs_are_counted_by_outcome_code() -> None:
    jobs = [
        JobInfo("a", "succeeded", "vision", 0.0, 1.0, 2.0, "succeeded"),
        JobInfo("b", "failed", "vision", 0.0, 1.0, 3.0, "timed_out"),
        JobInfo("c", "failed", "vision", 0.0, 1.0, 4.0, "timed_out"),
        JobInfo("d", "admitted", "vision", 0.0, 1.0, None, "task_failed"),  # being retried
        JobInfo("e", "cancelled", "nlp", 0.0, None, 5.0, "cancelled"),
    ]
    fams = parse(FakeSource(jobs))
    assert fams["accelnet_jobs_finished"].type == "gauge"
    got = {(s.labels["outcome"], s.labels["tenant"]): s.value
           for s in fams["accelnet_jobs_finished"].samples}  # fmt: skip
    assert got == {("succeeded", "vision"): 1, ("timed_out", "vision"): 2,
                   ("cancelled", "nlp"): 1}  # fmt: skip


def test_jobs_are_counted_by_state_and_tenant_with_zeros_filled() -> None:
    jobs = [
        JobInfo("a", "running", "vision", 0.0, 5.0),
        JobInfo("b", "running", "vision", 1.0, 9.0),
        JobInfo("c", "admitted", "vision", 2.0),
        JobInfo("d", "succeeded", "nlp", 0.0, 1.0, 8.0),
        JobInfo("e", "paused", "nlp", 0.0),  # a state this build does not know
    ]
    fams = parse(FakeSource(jobs))
    assert fams["accelnet_jobs"].type == "gauge"
    assert value(fams, "accelnet_jobs", state="running", tenant="vision") == 2
    assert value(fams, "accelnet_jobs", state="admitted", tenant="vision") == 1
    assert value(fams, "accelnet_jobs", state="succeeded", tenant="nlp") == 1
    assert value(fams, "accelnet_jobs", state="paused", tenant="nlp") == 1
    # every known state of every tenant is there, at 0 when empty: stable series
    for state in JobState:
        for tenant in ("vision", "nlp"):
            value(fams, "accelnet_jobs", state=state.value, tenant=tenant)
    assert value(fams, "accelnet_jobs", state="failed", tenant="vision") == 0


def test_queue_wait_is_the_sources_histogram_per_tenant() -> None:
    waits = TenantHistograms(QUEUE_WAIT_BUCKETS)
    for seconds in (0.05, 7.0, 7200.0):  # 7,200 s is exactly a bound: le="7200"
        waits.observe("t1", seconds)
    waits.observe("t2", 0.0)
    jobs = [JobInfo("a", "running", "t1", 0.0, 1.0), JobInfo("d", "admitted", "t3", 0.0)]
    fams = parse(FakeSource(jobs, waits=waits.snapshot()))
    fam = fams["accelnet_queue_wait_seconds"]
    assert fam.type == "histogram"
    assert value(fams, "accelnet_queue_wait_seconds_count", tenant="t1") == 3
    assert value(fams, "accelnet_queue_wait_seconds_sum", tenant="t1") == pytest.approx(7207.05)
    buckets = {
        float(s.labels["le"]): s.value
        for s in fam.samples
        if s.name.endswith("_bucket") and s.labels["tenant"] == "t1"
    }
    assert buckets[0.1] == 1 and buckets[5.0] == 1 and buckets[10.0] == 2
    assert buckets[3600.0] == 2 and buckets[7200.0] == 3 and buckets[math.inf] == 3
    assert list(buckets.values()) == sorted(buckets.values())  # cumulative
    assert value(fams, "accelnet_queue_wait_seconds_bucket", tenant="t2", le="0.1") == 1
    # a tenant with jobs but no start yet has an empty histogram (stable series); the
    # job records' start times are not read (a retried job's would move its wait)
    assert value(fams, "accelnet_queue_wait_seconds_count", tenant="t3") == 0


def test_tenant_histograms_only_grow_and_check_their_bounds() -> None:
    waits = TenantHistograms([1.0, 10.0])
    waits.observe("a", 0.5)
    first = waits.snapshot()["a"]
    waits.observe("a", 25.0)
    later = waits.snapshot()["a"]
    assert later.count == first.count + 1
    assert all(b >= a for a, b in zip(first.cumulative, later.cumulative, strict=True))
    with pytest.raises(ValueError, match="finite and >= 0"):
        waits.observe("a", -1.0)
    with pytest.raises(ValueError, match="strictly increasing"):
        TenantHistograms([5.0, 1.0])


def test_scheduler_decision_times_come_from_the_decision_timer() -> None:
    timer = DecisionTimer()
    for seconds in (0.0002, 0.0002, 0.003, 0.7):
        timer.observe(seconds)
    fams = parse(FakeSource(decisions=timer.snapshot()))
    assert fams["accelnet_scheduler_decision_seconds"].type == "histogram"
    assert value(fams, "accelnet_scheduler_decision_seconds_count") == 4
    assert value(fams, "accelnet_scheduler_decision_seconds_sum") == pytest.approx(0.7034)
    assert value(fams, "accelnet_scheduler_decision_seconds_bucket", le="0.00025") == 2
    assert value(fams, "accelnet_scheduler_decision_seconds_bucket", le="0.005") == 3
    assert value(fams, "accelnet_scheduler_decision_seconds_bucket", le="+Inf") == 4
    # no timer: the family is declared, with no samples
    assert parse(FakeSource())["accelnet_scheduler_decision_seconds"].samples == []


# ----- devices ---------------------------------------------------------------------------------
def test_an_nvidia_gpu_read_through_nvml_has_dcgm_names_units_and_labels() -> None:
    dev = gpu(
        3, utilization_pct=87.0, mem_util_pct=40.0, mem_used_bytes=10 * GIB + 123,
        mem_total_bytes=80 * GIB, power_w=512.25, energy_j=123456.7894, temperature_c=61.0,
        sm_clock_mhz=1980, mem_clock_mhz=2619, ecc_corrected=3, ecc_uncorrected=0,
        pcie_gen=5, pcie_width=16, throttle_reasons=("sw_power_cap", "hw_slowdown"),
        xid_events=(13, 79), remapped_correctable=1, remap_pending=True,
        nvlink_crc_flit_errors=2,
    )  # fmt: skip
    fams = parse(FakeSource(devices=[dev]))
    labels = series(fams, "DCGM_FI_DEV_GPU_UTIL")[0]
    assert labels == {
        "gpu": "3", "UUID": "GPU-00000003", "pci_bus_id": "00000000:0A:00.0",
        "device": "nvidia3", "modelName": "NVIDIA H100 80GB HBM3", "Hostname": "dgx",
        "accelnet_device": "dgx/gpu3",
    }  # fmt: skip
    assert set(labels) == set(DCGM_LABELS)
    expect = {
        "DCGM_FI_DEV_GPU_UTIL": 87.0,
        "DCGM_FI_DEV_MEM_COPY_UTIL": 40.0,
        "DCGM_FI_DEV_FB_USED": 10240.0,  # MiB, whole
        "DCGM_FI_DEV_FB_FREE": 71679.0,  # (80 GiB - 10 GiB - 123 B) in whole MiB
        "DCGM_FI_DEV_FB_TOTAL": 81920.0,
        "DCGM_FI_DEV_POWER_USAGE": 512.25,  # W
        "DCGM_FI_DEV_GPU_TEMP": 61.0,  # C
        "DCGM_FI_DEV_SM_CLOCK": 1980.0,  # MHz
        "DCGM_FI_DEV_MEM_CLOCK": 2619.0,
        "DCGM_FI_DEV_PCIE_LINK_GEN": 5.0,
        "DCGM_FI_DEV_PCIE_LINK_WIDTH": 16.0,
        "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS": 0x4 | 0x8,
        "DCGM_FI_DEV_ROW_REMAP_PENDING": 1.0,
        # counters: the parser names their samples with _total (OpenMetrics style)
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION_total": 123456789.0,  # mJ, whole
        "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL_total": 3.0,
        "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL_total": 0.0,
        "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS_total": 1.0,
        "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL_total": 2.0,
    }
    for name, v in expect.items():
        family = name.removesuffix("_total")
        assert value(fams, name, accelnet_device="dgx/gpu3") == v, name
        want = "counter" if name.endswith("_total") else "gauge"
        assert fams[family].type == want, family
    assert value(fams, "DCGM_FI_DEV_XID_ERRORS", err_code="79") == 79  # the last of the sample
    # readings the sample lacks are not exported as 0
    assert "DCGM_FI_DEV_ROW_REMAP_FAILURE" not in fams
    assert "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS" not in fams


def test_dcgm_counters_keep_dcgm_exporter_names_and_type_in_the_text() -> None:
    text = render(FakeSource(devices=[gpu(energy_j=5.0, ecc_corrected=1)])).decode()
    lines = text.splitlines()
    for name in ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL"):
        assert f"# TYPE {name} counter" in lines
        assert any(line.startswith(name + "{") for line in lines)
        assert f"{name}_total" not in text
    # accelnet's own counters follow Prometheus' naming: _total, typed counter
    assert "# TYPE accelnet_device_energy_joules_total counter" in lines
    assert "untyped" not in text


def test_only_nvidia_gpus_read_through_nvml_get_dcgm_names() -> None:
    readings: dict[str, Any] = {"utilization_pct": 50.0, "power_w": 100.0, "temperature_c": 40.0}
    emulated = replace(gpu(0, source="emulated", **readings), id="lab/gpu0")
    amd = replace(gpu(1, **readings), id="lab/gpu1", vendor="amd", model="MI300X")
    cpu = DeviceInfo("lab/cpu0", "lab", "ready", "cpu", "CPU-core", "intel",
                     sample=DeviceSample("lab/cpu0", 1.0, "host", **readings))  # fmt: skip
    nvidia = gpu(2, host="lab", **readings)
    fams = parse(FakeSource(devices=[emulated, amd, cpu, nvidia]))
    assert [s["accelnet_device"] for s in series(fams, "DCGM_FI_DEV_GPU_UTIL")] == ["lab/gpu2"]
    # every device has the accelnet names, in base units
    util = {s.labels["accelnet_device"]: s.value
            for s in fams["accelnet_device_utilization_percent"].samples}  # fmt: skip
    assert util == {"lab/gpu0": 50.0, "lab/gpu1": 50.0, "lab/cpu0": 50.0, "lab/gpu2": 50.0}
    assert set(series(fams, "accelnet_device_power_watts")[0]) == set(DEVICE_LABELS)
    # no NVIDIA GPU at all: no DCGM family is even declared (as dcgm-exporter)
    fams = parse(FakeSource(devices=[emulated, amd, cpu]))
    assert not [name for name in fams if name.startswith("DCGM_")]


def test_every_device_exports_its_readings_in_base_units() -> None:
    dev = gpu(
        0, sm_clock_mhz=1500, mem_clock_mhz=1000, energy_j=2.5, remap_failed=False,
        nvlink_up=17, nvlink_down=1, nvlink_replay_errors=4, ecc_uncorrected=2,
        throttle_reasons=("gpu_idle", "0x800"), errors=("power_w: GpuIsLost",),
        proc_cpu_pct=150.0, proc_rss_bytes=1 << 30, mem_used_bytes=5, mem_total_bytes=10,
    )  # fmt: skip
    fams = parse(FakeSource(devices=[dev]))
    d = {"accelnet_device": "dgx/gpu0"}
    assert value(fams, "accelnet_device_sm_clock_hertz", **d) == 1.5e9
    assert value(fams, "accelnet_device_memory_clock_hertz", **d) == 1e9
    assert value(fams, "accelnet_device_energy_joules_total", **d) == 2.5
    assert fams["accelnet_device_energy_joules"].type == "counter"
    assert value(fams, "accelnet_device_row_remap_failed", **d) == 0
    assert value(fams, "accelnet_device_nvlinks", state="up", **d) == 17
    assert value(fams, "accelnet_device_nvlinks", state="down", **d) == 1
    assert value(fams, "accelnet_device_nvlink_errors_total", type="replay", **d) == 4
    assert value(fams, "accelnet_device_ecc_errors_total", type="uncorrected", **d) == 2
    assert value(fams, "accelnet_device_sample_errors", **d) == 1
    assert value(fams, "accelnet_device_process_cpu_percent", **d) == 150
    assert value(fams, "accelnet_device_process_resident_memory_bytes", **d) == 1 << 30
    assert value(fams, "accelnet_device_memory_used_bytes", **d) == 5
    assert value(fams, "accelnet_device_sample_timestamp_seconds", **d) == 1000.0
    reasons = {s.labels["reason"]: s.value
               for s in fams["accelnet_device_throttle_reason"].samples}  # fmt: skip
    assert reasons["gpu_idle"] == 1 and reasons["0x800"] == 1 and reasons["sw_power_cap"] == 0
    assert len(reasons) == 12  # the 11 NVML reasons and the unknown bit
    assert value(fams, "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS") == 0x1 | 0x800
    assert "accelnet_device_last_xid" not in {n for n, f in fams.items() if f.samples}


def test_last_xid_prefers_what_the_source_tracked() -> None:
    seen = replace(gpu(0, xid_events=()), last_xid=48)  # seen before; none in this sample
    unwatched = gpu(1)  # xid_events None: nobody watches, nothing exported
    fams = parse(FakeSource(devices=[seen, unwatched]))
    assert value(fams, "accelnet_device_last_xid", accelnet_device="dgx/gpu0") == 48
    assert value(fams, "DCGM_FI_DEV_XID_ERRORS", accelnet_device="dgx/gpu0") == 48
    assert [s["err_code"] for s in series(fams, "DCGM_FI_DEV_XID_ERRORS")] == ["48"]
    assert len(series(fams, "accelnet_device_last_xid")) == 1


def test_device_state_and_health_are_one_hot() -> None:
    a = DeviceInfo("h/gpu0", "h", "draining", "gpu", "L4", "nvidia", health="warn")
    b = DeviceInfo("h/gpu1", "h", "rebooting", "gpu", "L4", "nvidia")  # unknown state, no health
    fams = parse(FakeSource(devices=[a, b]))
    states = {(s.labels["accelnet_device"], s.labels["state"]): s.value
              for s in fams["accelnet_device_state"].samples}  # fmt: skip
    for st in DeviceState:
        assert states["h/gpu0", st.value] == (1.0 if st is DeviceState.DRAINING else 0.0)
        assert states["h/gpu1", st.value] == 0.0
    assert states["h/gpu1", "rebooting"] == 1.0
    health = {s.labels["health"]: s.value for s in fams["accelnet_device_health"].samples}
    assert health == {"pass": 0.0, "warn": 1.0, "fail": 0.0, "unknown": 0.0}
    info = series(fams, "accelnet_device_info")
    assert {i["accelnet_device"] for i in info} == {"h/gpu0", "h/gpu1"}
    # no sample yet: state and identity only, no telemetry, no DCGM
    assert "DCGM_FI_DEV_GPU_UTIL" not in fams
    assert fams["accelnet_device_utilization_percent"].samples == []


# ----- links -----------------------------------------------------------------------------------
def test_link_utilization_from_the_contention_model() -> None:
    fabric = load_preset("dgx-h100")
    ids = sorted(fabric.devices)
    jobs = [
        CommJob("a", Communicator(fabric, ids[:4]), 256e6),
        CommJob("b", Communicator(fabric, ids[4:]), 256e6),
    ]
    shares = link_shares(CostModel(), jobs)
    uses = link_uses(shares)
    assert len(uses) == len(shares) > 0
    fams = parse(FakeSource(links=uses))
    for share, use in zip(shares, uses, strict=True):
        a, b, src, lane = share.link
        assert (use.src, {use.src, use.dst}, use.lane) == (src, {a, b}, lane)
        labels = {"src": use.src, "dst": use.dst, "lane": str(lane)}
        u = value(fams, "accelnet_link_utilization", **labels)
        assert u == pytest.approx(share.used / share.capacity)
        assert 0.0 < u <= 1.0 + 1e-9
        assert value(fams, "accelnet_link_capacity_bytes_per_second", **labels) == share.capacity
        assert value(fams, "accelnet_link_jobs", **labels) == len(share.shares)


def test_link_uses_from_shares_and_from_a_plain_mapping() -> None:
    share = LinkShare(("x", "y", "y", 1), 100.0, {"j1": 30.0, "j2": 20.0})
    assert link_uses([share]) == [LinkUse("y", "x", 50.0, 100.0, 1, 2)]
    uses = link_uses_from({("p", "q"): (25.0, 100.0), ("q", "p"): (0.0, 0.0)})
    fams = parse(FakeSource(links=uses))
    assert value(fams, "accelnet_link_utilization", src="p", dst="q") == 0.25
    assert value(fams, "accelnet_link_utilization", src="q", dst="p") == 0.0  # no capacity


# ----- the exposition itself -------------------------------------------------------------------
ODD = ['we"ird', "back\\slash", "new\nline", "{brace}=x,y", "ünï/çødé ☃", "", "trailing\\"]


@pytest.mark.parametrize("name", ODD)
def test_odd_label_values_are_escaped_and_read_back_unchanged(name: str) -> None:
    dev = DeviceInfo(name, name, "ready", "gpu", name, "nvidia", model_name=name,
                     sample=DeviceSample(name, 1.0, "nvml", utilization_pct=1.0))  # fmt: skip
    job = JobInfo("j", "running", name, 0.0, 1.0)
    fams = parse(FakeSource([job], [dev], [LinkUse(name, name, 1.0, 2.0)]))
    assert series(fams, "accelnet_device_utilization_percent")[0]["accelnet_device"] == name
    dcgm = series(fams, "DCGM_FI_DEV_GPU_UTIL")[0]
    assert dcgm["modelName"] == name and dcgm["Hostname"] == name
    assert value(fams, "accelnet_jobs", state="running", tenant=name) == 1
    assert value(fams, "accelnet_link_utilization", src=name) == 0.5


def test_an_empty_cluster_exports_declared_families_and_no_samples() -> None:
    source = FakeSource()
    text = render(source).decode()
    fams = {m.name: m for m in text_string_to_metric_families(text)}
    ours = {d.name.removesuffix("_total") for d in METRICS.values() if not d.dcgm}
    assert set(fams) == ours  # every accelnet family declared (HELP, TYPE), no DCGM one
    assert all(not f.samples for f in fams.values())
    assert source.scrapes == 1
    assert render(Snapshot()) == text.encode()  # Snapshot is a source too


# ----- services --------------------------------------------------------------------------------
def digits_service() -> ServiceInfo:
    latency = histogram([0.002, 0.004, 0.004, 0.3], SERVICE_BUCKETS)
    return ServiceInfo("digits", "vision", latency, {"200": 3, "429": 1, "none": 1}, 2,
                       {("L4", "ready"): 2, ("H100-SXM", "starting"): 1}, 3, 0)  # fmt: skip


def test_a_service_exports_its_latency_histogram_requests_by_code_and_replicas() -> None:
    fams = parse(FakeSource(services=[digits_service()]))
    who = {"service": "digits", "tenant": "vision"}
    assert fams["accelnet_service_request_duration_seconds"].type == "histogram"
    assert value(fams, "accelnet_service_request_duration_seconds_count", **who) == 4
    assert value(fams, "accelnet_service_request_duration_seconds_bucket", le="0.005", **who) == 3
    assert value(fams, "accelnet_service_requests_total", code="200", **who) == 3
    assert value(fams, "accelnet_service_requests_total", code="none", **who) == 1
    assert value(fams, "accelnet_service_retries_total", **who) == 2
    assert value(fams, "accelnet_service_replicas", model="L4", state="ready", **who) == 2
    # every state of a model in use is a series (0 included): a state that empties stays
    assert value(fams, "accelnet_service_replicas", model="L4", state="stopping", **who) == 0
    assert value(fams, "accelnet_service_replicas", model="H100-SXM", state="starting",
                 **who) == 1  # fmt: skip
    assert value(fams, "accelnet_service_inflight_requests", **who) == 3
    assert parse(FakeSource())["accelnet_service_requests"].samples == []  # none: declared


def _full_source() -> FakeSource:
    """A source with something for every catalogued family."""
    readings: dict[str, Any] = {
        f.field: (True if f.field.startswith("remap_") else 7)
        for f in SAMPLE_FIELDS
        if f.field != "time"
    }
    readings.update(throttle_reasons=("gpu_idle",), xid_events=(31,))
    dev = replace(gpu(0, **readings), health="pass")
    job = JobInfo("j", "running", "t", 0.0, 1.0)
    ended = JobInfo("k", "failed", "t", 0.0, 1.0, 2.0, "timed_out")
    links = [LinkUse("a", "b", 1.0, 2.0)]
    tally = AttemptTally()
    tally.ended("t", "timed_out", 1.0)
    accounts = Accounting(
        usage=[TenantUse("t", "H100-SXM", 1.0, 30.0)], quotas={("t", "*"): 4.0},
        attempts=tally.counts(), run_times=tally.run.snapshot(),
        device_jobs=[DeviceJob(dev.id, "j", "t")],
        api_requests={("GET", "/api/v1/jobs", "200", "t"): 3},
    )  # fmt: skip
    return FakeSource([job, ended], [dev], links, DecisionTimer().snapshot(),
                      [digits_service()], accounts=accounts)  # fmt: skip


def test_a_full_scrape_produces_every_catalogued_family() -> None:
    source = _full_source()
    collected = {m.name for m in AccelnetCollector(source).collect() if m.samples}
    assert collected == {d.name.removesuffix("_total") if not d.dcgm else d.name
                         for d in METRICS.values()}  # fmt: skip
    # labels exported are the catalogue's, in every family
    for m in AccelnetCollector(source).collect():
        d = METRICS.get(m.name) or METRICS[m.name + "_total"]
        for s in m.samples:
            assert set(s.labels) - {"le"} == set(d.labels), m.name


PROMTOOL = shutil.which("promtool")


@pytest.mark.skipif(PROMTOOL is None, reason="no promtool (Debian's prometheus package)")
def test_promtool_finds_nothing_to_say_of_accelnets_own_families() -> None:
    """``promtool check metrics`` over a scrape with every family: no warning on an
    accelnet family; the DCGM_FI_* series keep dcgm-exporter's names and labels (camelCase,
    counters without ``_total``) on purpose, so its dashboards work unchanged."""
    assert PROMTOOL is not None
    done = subprocess.run([PROMTOOL, "check", "metrics"], input=render(_full_source()),
                          capture_output=True, timeout=60, check=False)  # fmt: skip
    lines = (done.stdout + done.stderr).decode().splitlines()
    problems = [line for line in lines if line.strip() and not line.startswith("DCGM_FI_")]
    assert problems == [], problems
    assert done.returncode in (0, 3), lines  # 3: lint warnings (the DCGM ones) only


def test_catalogue_tables_agree() -> None:
    for f in SAMPLE_FIELDS:
        d = METRICS[f.metric]
        assert d.labels == (*DEVICE_LABELS, *(k for k, _ in f.labels)), f.metric
        if f.dcgm is not None:
            assert METRICS[f.dcgm].dcgm and METRICS[f.dcgm].labels == DCGM_LABELS
    for d in METRICS.values():
        if not d.dcgm:
            assert d.name.startswith("accelnet_")
            assert d.name.endswith("_total") == (d.kind == "counter"), d.name


def test_accelnet_labels_are_snake_case_and_dcgm_labels_keep_dcgm_names() -> None:
    """Prometheus' naming rule (promtool check metrics warns on camelCase): accelnet's own
    families use snake_case labels; only the DCGM_FI_* series keep dcgm-exporter's."""
    snake = re.compile(r"^[a-z_][a-z0-9_]*$")
    for d in METRICS.values():
        bad = [label for label in d.labels if not snake.match(label)]
        if d.dcgm:
            assert d.labels[: len(DCGM_LABELS)] == DCGM_LABELS
        else:
            assert bad == [], (d.name, bad)
    fams = parse(FakeSource(devices=[gpu(0)]))
    info = series(fams, "accelnet_device_info")[0]
    assert info["model_name"] == "NVIDIA H100 80GB HBM3" and info["uuid"] == "GPU-00000000"


def test_registries_are_per_app_and_the_global_registry_is_untouched() -> None:
    before = set(REGISTRY._names_to_collectors)
    one = make_registry(FakeSource([JobInfo("a", "running", "t1", 0.0)]))
    two = make_registry(FakeSource([JobInfo("b", "failed", "t2", 0.0)]))
    assert set(REGISTRY._names_to_collectors) == before
    assert b'tenant="t1"' in exposition(one) and b'tenant="t1"' not in exposition(two)
    with pytest.raises(ValueError, match="Duplicated timeseries"):
        one.register(AccelnetCollector(FakeSource()))


def test_a_failing_source_fails_the_scrape() -> None:
    class Broken(FakeSource):
        def devices(self) -> Iterator[DeviceInfo]:
            raise RuntimeError("store closed")

    with pytest.raises(RuntimeError, match="store closed"):
        render(Broken())


def test_records_from_the_runtime_and_fabric_types() -> None:
    spec = JobSpec(name="train", tenant="vision", run="true")
    rec = JobRecord("train-1", spec, JobState.RUNNING, 10.0, attempts=1, started_at=12.5)
    assert job_info(rec) == JobInfo("train-1", "running", "vision", 10.0, 12.5, None)
    device = load_preset("dgx-h100").devices["dgx-h100/gpu1"]
    info = device_info(device, DeviceState.READY, health="pass", last_xid=13)
    assert (info.id, info.host, info.state, info.kind) == ("dgx-h100/gpu1", "dgx-h100",
                                                           "ready", "gpu")  # fmt: skip
    assert (info.model, info.vendor, info.model_name, info.index) == ("H100-SXM", "nvidia",
                                                                      "H100-SXM", 1)  # fmt: skip
    assert info.is_nvidia_gpu() and info.last_xid == 13
    detailed = replace(device, detail="NVIDIA H100 80GB HBM3", uuid="GPU-x")
    assert device_info(detailed, "ready").model_name == "NVIDIA H100 80GB HBM3"


def test_served_over_http_with_the_prometheus_content_type() -> None:
    """What a scraper meets: a real socket on 127.0.0.1, the body read by the parser."""
    source = FakeSource([JobInfo("a", "running", "t", 0.0, 2.0)], [gpu(power_w=300.0)])

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = render(source)
            self.send_response(200)
            self.send_header("Content-Type", CONTENT_TYPE)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/metrics"
        with urllib.request.urlopen(url, timeout=10) as resp:
            assert resp.headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
            text = resp.read().decode()
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)
    fams = {m.name: m for m in text_string_to_metric_families(text)}
    assert value(fams, "DCGM_FI_DEV_POWER_USAGE", Hostname="dgx", gpu="0") == 300.0
    assert value(fams, "accelnet_jobs", state="running", tenant="t") == 1


def test_tenants_attempts_and_api_calls_are_exported_and_devices_join_to_jobs() -> None:
    """Issue 26 item 2: what ties a device to the job and tenant on it, what each tenant
    holds, has used and may use, how attempts ended and ran, and the API's answers."""
    tally = AttemptTally()
    for outcome, run_s in (("succeeded", 30.0), ("task_failed", 2.0), ("succeeded", 4000.0)):
        tally.ended("vision", outcome, run_s)
    accounts = Accounting(
        usage=[TenantUse("vision", "H100-SXM", 1.5, 7200.0)],
        quotas={("vision", "H100-SXM"): 4.0, ("vision", "*"): 8.0},
        attempts=tally.counts(), run_times=tally.run.snapshot(),
        device_jobs=[DeviceJob("dgx/gpu0", "train-1", "vision", 0.5),
                     DeviceJob("elsewhere/gpu9", "x", "y")],  # a device not exported: none
        api_requests={("POST", "/api/v1/jobs", "201", "vision"): 5,
                      ("POST", "/api/v1/jobs", "429", "vision"): 2,
                      ("GET", "unmatched", "404", ""): 1},
    )  # fmt: skip
    fams = parse(FakeSource(devices=[gpu(0)], accounts=accounts))
    assert value(fams, "accelnet_tenant_devices", tenant="vision", model="H100-SXM") == 1.5
    assert value(fams, "accelnet_tenant_device_seconds_total", tenant="vision") == 7200.0
    assert value(fams, "accelnet_tenant_quota_devices", tenant="vision", model="*") == 8.0
    assert value(fams, "accelnet_job_attempts_total", tenant="vision", outcome="succeeded") == 2
    assert value(fams, "accelnet_job_run_seconds_count", tenant="vision") == 3
    assert value(fams, "accelnet_job_run_seconds_bucket", tenant="vision", le="60.0") == 2
    assert (
        value(fams, "accelnet_device_job", accelnet_job="train-1") == 0.5
    )  # its share: split by it
    joined = series(fams, "accelnet_device_job")
    assert joined == [{"accelnet_device": "dgx/gpu0", "host": "dgx", "model": "H100-SXM",
                       "kind": "gpu", "accelnet_job": "train-1", "tenant": "vision"}]  # fmt: skip
    assert value(fams, "accelnet_api_requests_total", route="/api/v1/jobs", code="429") == 2
    assert value(fams, "accelnet_api_requests_total", route="unmatched", tenant="") == 1


def test_tenant_device_seconds_count_ended_attempts_only_so_they_never_fall() -> None:
    """A running attempt's time is not guessed at a scrape (it could exceed what the store
    records when the attempt ends, and a counter must never go down)."""
    from accelnet.api.metrics import tenant_usage
    from accelnet.sched.snapshot import Placement
    from accelnet.sched.topology import DomainLevel

    spec = JobSpec.model_validate({"name": "t", "tenant": "vision", "run": "true"})
    running = JobRecord("r", spec, JobState.RUNNING, 0.0, attempts=2, started_at=10.0,
                        placement=Placement(("h/gpu0", "h/gpu1"), 1.0, "L4", DomainLevel.HOST),
                        attained=(("L4", 30.0),))  # fmt: skip
    ended = JobRecord("e", spec, JobState.SUCCEEDED, 0.0, attained=(("L4", 12.0),))
    (use,) = tenant_usage([running, ended])
    assert (use.tenant, use.model, use.devices, use.device_seconds) == ("vision", "L4", 2.0, 42.0)


def test_an_open_metrics_names_services_by_a_digest_only() -> None:
    """Without the scrape token, a service is exported under a digest of its tenant and name:
    stable across scrapes, distinct per service, and not the name (which the API shows a
    tenant only of its own services)."""
    from accelnet.api.metrics import _unnamed

    svc = digits_service()
    hidden = _unnamed(svc)
    assert hidden.name.startswith("svc-") and svc.name not in hidden.name
    assert _unnamed(svc) == hidden  # stable
    assert _unnamed(replace(svc, tenant="other")).name != hidden.name  # distinct
    text = render(FakeSource(services=[hidden])).decode()
    assert svc.name not in text and hidden.name in text
