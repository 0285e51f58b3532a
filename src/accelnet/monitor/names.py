"""Every metric ``/metrics`` exports: names, types, units, labels, and where each comes from.

Two families of names:

- accelnet's own, ``accelnet_*``, in base units (seconds, bytes, watts, joules, hertz),
  counters ending in ``_total``, for every device and for jobs, the scheduler and links;
- dcgm-exporter's, ``DCGM_FI_*``, with its units (MiB, mJ, MHz, %) and its labels (``gpu``,
  ``UUID``, ``pci_bus_id``, ``device``, ``modelName``, ``Hostname``), for NVIDIA GPUs read
  through NVML only, so that dashboards and alerts written for dcgm-exporter work unchanged.
  Their names and types are those of dcgm-exporter's ``etc/default-counters.csv`` (and of the
  DCGM field list for fields outside the defaults); counters keep dcgm-exporter's names,
  without a ``_total`` suffix.

The tables here drive the collector, the documentation test and the dashboard test. Pure.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal

Kind = Literal["gauge", "counter", "histogram"]

DEVICE_LABELS: Final = ("accelnet_device", "host", "model", "kind")
"""Labels of every ``accelnet_device_*`` series: fabric id, host, catalog model, kind."""

DCGM_LABELS: Final = ("gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname",
                      "accelnet_device")  # fmt: skip
"""Labels of every ``DCGM_FI_*`` series, as dcgm-exporter writes them, plus the fabric id."""

LINK_LABELS: Final = ("src", "dst", "lane")
"""Labels of every ``accelnet_link_*`` series: one direction of one link."""


@dataclass(frozen=True, slots=True)
class MetricDef:
    """One exported family. ``name`` is what a query uses (histograms add ``_bucket``,
    ``_sum`` and ``_count``); ``unit`` is for people (``1`` for counts and 0/1 flags)."""

    name: str
    kind: Kind
    unit: str
    labels: tuple[str, ...]
    help: str

    @property
    def dcgm(self) -> bool:
        """Whether this is a dcgm-exporter name."""
        return self.name.startswith("DCGM_")


@dataclass(frozen=True, slots=True)
class SampleField:
    """How one :class:`~accelnet.devices.DeviceSample` reading is exported.

    ``metric`` (with the fixed ``labels``) gets ``reading * scale``; for an NVIDIA GPU read
    through NVML, ``dcgm`` gets ``reading * dcgm_scale`` (floored for dcgm-exporter's integer
    fields, ``dcgm_int``). Booleans export as 0/1.
    """

    field: str
    metric: str
    labels: tuple[tuple[str, str], ...] = ()
    scale: float = 1.0
    dcgm: str | None = None
    dcgm_scale: float = 1.0
    dcgm_int: bool = False


MIB: Final = 1024 * 1024

SAMPLE_FIELDS: Final[tuple[SampleField, ...]] = (
    SampleField("utilization_pct", "accelnet_device_utilization_percent",
                dcgm="DCGM_FI_DEV_GPU_UTIL"),
    SampleField("mem_util_pct", "accelnet_device_memory_utilization_percent",
                dcgm="DCGM_FI_DEV_MEM_COPY_UTIL"),
    SampleField("mem_used_bytes", "accelnet_device_memory_used_bytes",
                dcgm="DCGM_FI_DEV_FB_USED", dcgm_scale=1 / MIB, dcgm_int=True),
    SampleField("mem_total_bytes", "accelnet_device_memory_total_bytes",
                dcgm="DCGM_FI_DEV_FB_TOTAL", dcgm_scale=1 / MIB, dcgm_int=True),
    SampleField("power_w", "accelnet_device_power_watts", dcgm="DCGM_FI_DEV_POWER_USAGE"),
    SampleField("energy_j", "accelnet_device_energy_joules_total",
                dcgm="DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", dcgm_scale=1000.0, dcgm_int=True),
    SampleField("temperature_c", "accelnet_device_temperature_celsius",
                dcgm="DCGM_FI_DEV_GPU_TEMP"),
    SampleField("sm_clock_mhz", "accelnet_device_sm_clock_hertz", scale=1e6,
                dcgm="DCGM_FI_DEV_SM_CLOCK"),
    SampleField("mem_clock_mhz", "accelnet_device_memory_clock_hertz", scale=1e6,
                dcgm="DCGM_FI_DEV_MEM_CLOCK"),
    SampleField("ecc_corrected", "accelnet_device_ecc_errors_total", (("type", "corrected"),),
                dcgm="DCGM_FI_DEV_ECC_SBE_VOL_TOTAL"),
    SampleField("ecc_uncorrected", "accelnet_device_ecc_errors_total",
                (("type", "uncorrected"),), dcgm="DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"),
    SampleField("remapped_correctable", "accelnet_device_remapped_rows_total",
                (("cause", "correctable"),), dcgm="DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS"),
    SampleField("remapped_uncorrectable", "accelnet_device_remapped_rows_total",
                (("cause", "uncorrectable"),), dcgm="DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS"),
    SampleField("remap_pending", "accelnet_device_row_remap_pending",
                dcgm="DCGM_FI_DEV_ROW_REMAP_PENDING"),
    SampleField("remap_failed", "accelnet_device_row_remap_failed",
                dcgm="DCGM_FI_DEV_ROW_REMAP_FAILURE"),
    SampleField("nvlink_up", "accelnet_device_nvlinks", (("state", "up"),)),
    SampleField("nvlink_down", "accelnet_device_nvlinks", (("state", "down"),)),
    SampleField("nvlink_replay_errors", "accelnet_device_nvlink_errors_total",
                (("type", "replay"),), dcgm="DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL"),
    SampleField("nvlink_recovery_errors", "accelnet_device_nvlink_errors_total",
                (("type", "recovery"),), dcgm="DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL"),
    SampleField("nvlink_crc_flit_errors", "accelnet_device_nvlink_errors_total",
                (("type", "crc_flit"),), dcgm="DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL"),
    SampleField("nvlink_crc_data_errors", "accelnet_device_nvlink_errors_total",
                (("type", "crc_data"),), dcgm="DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL"),
    SampleField("pcie_gen", "accelnet_device_pcie_link_generation",
                dcgm="DCGM_FI_DEV_PCIE_LINK_GEN"),
    SampleField("pcie_width", "accelnet_device_pcie_link_width",
                dcgm="DCGM_FI_DEV_PCIE_LINK_WIDTH"),
    SampleField("proc_cpu_pct", "accelnet_device_process_cpu_percent"),
    SampleField("proc_rss_bytes", "accelnet_device_process_resident_memory_bytes"),
    SampleField("time", "accelnet_device_sample_timestamp_seconds"),
)  # fmt: skip

_DEV = DEVICE_LABELS
_DCGM = DCGM_LABELS

_DEFS: tuple[MetricDef, ...] = (
    # ----- jobs and the scheduler -----
    MetricDef("accelnet_jobs", "gauge", "1", ("state", "tenant"),
              "Jobs in each state, per tenant (every state of a tenant with jobs, 0 included)."),
    MetricDef("accelnet_jobs_finished", "gauge", "1", ("outcome", "tenant"),
              "Finished jobs per tenant by how they ended (the outcome code, docs/api.md)."),
    MetricDef("accelnet_queue_wait_seconds", "histogram", "s", ("tenant",),
              "Time each attempt waited to start, observed once when it starts: from when "
              "the job was admitted (submitted, or its inputs done) or requeued (after a "
              "preemption, or a failure's retry backoff) to the attempt's start."),
    MetricDef("accelnet_scheduler_decision_seconds", "histogram", "s", (),
              "Wall time of each scheduler decision."),
    MetricDef("accelnet_job_attempts_total", "counter", "1", ("tenant", "outcome"),
              "Job attempts that ended, by how (the outcome code): each counted once, when it "
              "ends (a retried job's failed attempt too)."),
    MetricDef("accelnet_job_run_seconds", "histogram", "s", ("tenant",),
              "Run time of each job attempt, observed once when it ends."),
    # ----- tenants: what they hold and use -----
    MetricDef("accelnet_tenant_devices", "gauge", "1", ("tenant", "model"),
              "Devices the tenant's jobs hold now (a packed job's share counted as such)."),
    MetricDef("accelnet_tenant_device_seconds_total", "counter", "s", ("tenant", "model"),
              "Device-seconds the tenant's ended job attempts used (from the store: kept "
              "across restarts; a running attempt counts when it ends)."),
    MetricDef("accelnet_tenant_quota_devices", "gauge", "1", ("tenant", "model"),
              "The tenant's quota in devices (model=\"*\": every model together); divide "
              "accelnet_tenant_devices by it for the quota in use."),
    MetricDef("accelnet_device_job", "gauge", "1", (*_DEV, "accelnet_job", "tenant"),
              "Each job on the device now, valued at its share of the device (1: whole): "
              "join device readings to jobs and tenants on accelnet_device (job ids only "
              "with --metrics-token; else accelnet_job is empty, one series per tenant)."),
    # ----- the API -----
    MetricDef("accelnet_api_requests_total", "counter", "1",
              ("method", "route", "code", "tenant"),
              "API requests answered, by route template and status (429: rate limited; "
              "tenant empty: no valid token)."),
    # ----- services (accelnet.serve): each router's counts since it started -----
    MetricDef("accelnet_service_request_duration_seconds", "histogram", "s",
              ("service", "tenant"),
              "Latency of each request through the service's router, to its last byte."),
    MetricDef("accelnet_service_requests_total", "counter", "1", ("service", "tenant", "code"),
              "Requests the router answered, by HTTP status (code=\"none\": no replica "
              "answered; 429: every replica saturated)."),
    MetricDef("accelnet_service_retries_total", "counter", "1", ("service", "tenant"),
              "Requests sent again to another replica (the first one was unreachable or died)."),
    MetricDef("accelnet_service_replicas", "gauge", "1", ("service", "tenant", "model", "state"),
              "Replicas by device model and state (starting, ready, stopping)."),
    MetricDef("accelnet_service_inflight_requests", "gauge", "1", ("service", "tenant"),
              "Requests at the service's replicas now."),
    MetricDef("accelnet_service_queued_requests", "gauge", "1", ("service", "tenant"),
              "Requests waiting in the router for a replica to be ready."),
    # ----- devices: state -----
    MetricDef("accelnet_device_info", "gauge", "1",
              (*_DEV, "vendor", "model_name", "uuid", "pci_bus_id"),
              "Always 1: a device's identity, to join on accelnet_device."),
    MetricDef("accelnet_device_state", "gauge", "1", (*_DEV, "state"),
              "1 for the device's lifecycle state, 0 for the others."),
    MetricDef("accelnet_device_health", "gauge", "1", (*_DEV, "health"),
              "1 for the device's health verdict (pass, warn, fail, unknown), 0 for the others."),
    # ----- devices: telemetry, every kind -----
    MetricDef("accelnet_device_utilization_percent", "gauge", "%", _DEV,
              "Compute busy, 0-100 (GPUs: NVML utilization; CPUs: busy share; emulated: "
              "worker CPU)."),
    MetricDef("accelnet_device_memory_utilization_percent", "gauge", "%", _DEV,
              "Memory controller busy, 0-100 (GPUs)."),
    MetricDef("accelnet_device_memory_used_bytes", "gauge", "bytes", _DEV,
              "Device memory in use."),
    MetricDef("accelnet_device_memory_total_bytes", "gauge", "bytes", _DEV,
              "Device memory in all."),
    MetricDef("accelnet_device_power_watts", "gauge", "W", _DEV, "Power draw."),
    MetricDef("accelnet_device_energy_joules_total", "counter", "J", _DEV,
              "Energy used since the driver loaded or the sampler started."),
    MetricDef("accelnet_device_temperature_celsius", "gauge", "C", _DEV, "Temperature."),
    MetricDef("accelnet_device_sm_clock_hertz", "gauge", "Hz", _DEV, "SM clock."),
    MetricDef("accelnet_device_memory_clock_hertz", "gauge", "Hz", _DEV, "Memory clock."),
    MetricDef("accelnet_device_throttle_reason", "gauge", "1", (*_DEV, "reason"),
              "1 for each clock throttle reason in effect, 0 for the others."),
    MetricDef("accelnet_device_ecc_errors_total", "counter", "1", (*_DEV, "type"),
              "Volatile ECC errors (type corrected or uncorrected) since the driver loaded."),
    MetricDef("accelnet_device_remapped_rows_total", "counter", "1", (*_DEV, "cause"),
              "Memory rows remapped (cause correctable or uncorrectable)."),
    MetricDef("accelnet_device_row_remap_pending", "gauge", "1", _DEV,
              "1 if a row remapping waits for a GPU reset."),
    MetricDef("accelnet_device_row_remap_failed", "gauge", "1", _DEV,
              "1 if a row remapping failed (the GPU needs service)."),
    MetricDef("accelnet_device_nvlinks", "gauge", "1", (*_DEV, "state"),
              "NVLinks up and down among the links the device has."),
    MetricDef("accelnet_device_nvlink_errors_total", "counter", "1", (*_DEV, "type"),
              "NVLink errors summed over links (type replay, recovery, crc_flit, crc_data)."),
    MetricDef("accelnet_device_pcie_link_generation", "gauge", "1", _DEV,
              "Current PCIe link generation."),
    MetricDef("accelnet_device_pcie_link_width", "gauge", "1", _DEV,
              "Current PCIe link width (lanes)."),
    MetricDef("accelnet_device_last_xid", "gauge", "1", _DEV,
              "The last Xid code the GPU reported (0: none seen)."),
    MetricDef("accelnet_device_process_cpu_percent", "gauge", "%", _DEV,
              "CPU of the worker process tree serving an emulated device (100 = one core)."),
    MetricDef("accelnet_device_process_resident_memory_bytes", "gauge", "bytes", _DEV,
              "Resident memory of the worker process tree serving an emulated device."),
    MetricDef("accelnet_device_sample_timestamp_seconds", "gauge", "s", _DEV,
              "When the latest sample was taken (controller clock, seconds since the epoch)."),
    MetricDef("accelnet_device_sample_errors", "gauge", "1", _DEV,
              "Readings that failed in the latest sample."),
    # ----- links -----
    MetricDef("accelnet_link_utilization", "gauge", "ratio", LINK_LABELS,
              "Used over capacity of one link direction, 0-1."),
    MetricDef("accelnet_link_used_bytes_per_second", "gauge", "bytes/s", LINK_LABELS,
              "Bytes per second the jobs' collectives put on one link direction."),
    MetricDef("accelnet_link_capacity_bytes_per_second", "gauge", "bytes/s", LINK_LABELS,
              "Capacity of one link direction."),
    MetricDef("accelnet_link_jobs", "gauge", "1", LINK_LABELS,
              "Jobs sharing one link direction."),
    # ----- dcgm-exporter names (NVIDIA GPUs read through NVML) -----
    MetricDef("DCGM_FI_DEV_GPU_UTIL", "gauge", "%", _DCGM, "GPU utilization (in %)."),
    MetricDef("DCGM_FI_DEV_MEM_COPY_UTIL", "gauge", "%", _DCGM, "Memory utilization (in %)."),
    MetricDef("DCGM_FI_DEV_FB_USED", "gauge", "MiB", _DCGM,
              "Framebuffer memory used (in MiB)."),
    MetricDef("DCGM_FI_DEV_FB_FREE", "gauge", "MiB", _DCGM,
              "Framebuffer memory free (in MiB)."),
    MetricDef("DCGM_FI_DEV_FB_TOTAL", "gauge", "MiB", _DCGM,
              "Framebuffer memory total (in MiB)."),
    MetricDef("DCGM_FI_DEV_POWER_USAGE", "gauge", "W", _DCGM, "Power draw (in W)."),
    MetricDef("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "counter", "mJ", _DCGM,
              "Total energy consumption since boot (in mJ)."),
    MetricDef("DCGM_FI_DEV_GPU_TEMP", "gauge", "C", _DCGM, "GPU temperature (in C)."),
    MetricDef("DCGM_FI_DEV_SM_CLOCK", "gauge", "MHz", _DCGM, "SM clock frequency (in MHz)."),
    MetricDef("DCGM_FI_DEV_MEM_CLOCK", "gauge", "MHz", _DCGM,
              "Memory clock frequency (in MHz)."),
    MetricDef("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", "gauge", "bitmask", _DCGM,
              "Current clock throttle reasons (bitmask of nvmlClocksThrottleReason*)."),
    MetricDef("DCGM_FI_DEV_XID_ERRORS", "gauge", "1", (*_DCGM, "err_code"),
              "Value of the last XID error encountered."),
    MetricDef("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "counter", "1", _DCGM,
              "Total number of single-bit volatile ECC errors."),
    MetricDef("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "counter", "1", _DCGM,
              "Total number of double-bit volatile ECC errors."),
    MetricDef("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "counter", "1", _DCGM,
              "Number of remapped rows for correctable errors"),
    MetricDef("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "counter", "1", _DCGM,
              "Number of remapped rows for uncorrectable errors"),
    MetricDef("DCGM_FI_DEV_ROW_REMAP_FAILURE", "gauge", "1", _DCGM,
              "Whether remapping of rows has failed"),
    MetricDef("DCGM_FI_DEV_ROW_REMAP_PENDING", "gauge", "1", _DCGM,
              "Whether remapping of rows is pending"),
    MetricDef("DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL", "counter", "1", _DCGM,
              "Total number of NVLink retries."),
    MetricDef("DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL", "counter", "1", _DCGM,
              "Total number of NVLink recovery errors."),
    MetricDef("DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL", "counter", "1", _DCGM,
              "Total number of NVLink flow-control CRC errors."),
    MetricDef("DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL", "counter", "1", _DCGM,
              "Total number of NVLink data CRC errors."),
    MetricDef("DCGM_FI_DEV_PCIE_LINK_GEN", "gauge", "1", _DCGM, "PCIe link generation."),
    MetricDef("DCGM_FI_DEV_PCIE_LINK_WIDTH", "gauge", "1", _DCGM, "PCIe link width (lanes)."),
)  # fmt: skip

METRICS: Final[dict[str, MetricDef]] = {d.name: d for d in _DEFS}
"""Every exported family by name, in export order."""

DCGM_SOURCES: Final = frozenset({"nvml", "dcgm"})
"""Samplers whose readings of an NVIDIA GPU are exported under DCGM names as well (the
driver's own numbers; an emulated GPU's worker CPU is not a GPU utilization)."""
