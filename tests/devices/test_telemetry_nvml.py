"""The NVML sampler against a faithful fake of nvidia-ml-py, and the fake against pynvml.

No GPU is needed except for the test marked ``gpu`` (``pytest -m gpu`` on a GPU machine).
"""

from __future__ import annotations

import ast
import importlib.util
import inspect
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pynvml
import pytest

from accelnet.devices.samplers import NvmlSampler, Poller, match_gpus, nvml_support, throttle_names
from accelnet.devices.samplers import nvml as nvml_sampler
from accelnet.devices.telemetry import SamplerUnavailableError
from accelnet.fabric import DeviceKind
from accelnet.fabric.discovery import discover
from tests.devices import nvml_telemetry_fake as nft
from tests.fabric import nvml_fake as nf

HOST = "dgx"
SOURCES = [Path(nvml_sampler.__file__), Path(nvml_support.__file__)]


# ----- the API surface: the sampler and the fake against the real pynvml ---------------------


def nvml_names(source: str) -> set[str]:
    """Every ``nvml*``/``NVML*`` name the source reads as an attribute or by ``getattr``,
    and every such name written as a string (the throttle and counter tables)."""
    out: set[str] = set()
    name = re.compile(r"(nvml|NVML)\w*[A-Za-z0-9]")  # not "NVMLError_" (a prefix) or "nvml"
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and name.fullmatch(node.attr):
            out.add(node.attr)
        elif (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and name.fullmatch(node.value)
        ):
            out.add(node.value)
    return out


USED = set().union(*(nvml_names(p.read_text()) for p in SOURCES))
USED_FUNCTIONS = {n for n in USED if n.startswith("nvml") and callable(getattr(pynvml, n, None))}


def test_the_sampler_uses_only_names_the_real_pynvml_has() -> None:
    # the scan must see the sampler's calls, or this test would pass vacuously
    assert {
        "nvmlDeviceGetPowerUsage",
        "nvmlEventSetWait",
        "NVML_TEMPERATURE_GPU",
        "NVMLError_Timeout",
        "nvmlEventTypeXidCriticalError",
        "nvmlClocksThrottleReasonSwPowerCap",
        "NVML_NVLINK_ERROR_DL_CRC_DATA",
    } <= USED
    assert sorted(n for n in USED if not hasattr(pynvml, n)) == []


def test_the_fake_answers_every_call_and_constant_the_sampler_uses() -> None:
    fake_names = set(nft.telemetry_functions()) | set(nft.telemetry_constants())
    tables = {name for _, _, name in nvml_support.THROTTLE_REASONS}  # values checked below
    assert sorted(USED - fake_names - tables) == []
    assert len(USED_FUNCTIONS) >= 20


def _required(fn: Any) -> list[str]:
    return [
        p.name
        for p in inspect.signature(fn).parameters.values()
        if p.name != "self"
        and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
        and p.default is p.empty
    ]


@pytest.mark.parametrize("name", sorted(nft.telemetry_functions()))
def test_fake_function_has_the_real_signature(name: str) -> None:
    real = getattr(pynvml, name, None)
    assert callable(real), f"pynvml has no {name}"
    fake = nft.telemetry_functions()[name]
    assert _required(fake) == _required(real)
    fake_params = inspect.signature(fake).parameters
    for p in inspect.signature(real).parameters.values():
        assert p.name in fake_params, f"{name}: the fake lacks parameter {p.name}"


@pytest.mark.parametrize("name", sorted(nft.telemetry_constants()))
def test_fake_constant_equals_the_real_one(name: str) -> None:
    assert getattr(pynvml, name) == nft.telemetry_constants()[name]


@pytest.mark.parametrize(("bit", "label", "const"), nvml_support.THROTTLE_REASONS)
def test_throttle_reason_bits_are_pynvmls(bit: int, label: str, const: str) -> None:
    assert getattr(pynvml, const) == bit
    newer = const.replace("ClocksThrottleReason", "ClocksEventReason")
    if hasattr(pynvml, newer):  # the renamed constants (drivers >= 535) keep the bits
        assert getattr(pynvml, newer) == bit
    assert throttle_names(bit) == (label,)


def test_fake_answers_with_real_structures_and_errors() -> None:
    nvml = nft.fake(nf.dgx_h100())
    nvml.nvmlInit()
    h = nvml.nvmlDeviceGetHandleByIndex(0)
    assert isinstance(nvml.nvmlDeviceGetUtilizationRates(h), pynvml.c_nvmlUtilization_t)
    es = nvml.nvmlEventSetCreate()
    with pytest.raises(pynvml.NVMLError_Timeout):
        nvml.nvmlEventSetWait(es, 0)
    nvml.nvmlDeviceRegisterEvents(h, pynvml.nvmlEventTypeXidCriticalError, es)
    nvml.xid(0, 79)
    data = nvml.nvmlEventSetWait(es, 0)
    assert isinstance(data, pynvml.c_nvmlEventData_t)
    assert (data.eventType, data.eventData) == (pynvml.nvmlEventTypeXidCriticalError, 79)
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        nvml.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_COUNT)
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        nvml.nvmlDeviceGetNvLinkErrorCounter(h, 18, pynvml.NVML_NVLINK_ERROR_DL_REPLAY)
    nvml.unsupport(0, "nvmlDeviceGetPowerUsage")
    with pytest.raises(pynvml.NVMLError_NotSupported):
        nvml.nvmlDeviceGetPowerUsage(h)


def test_importing_the_samplers_does_not_import_pynvml() -> None:
    code = "import sys, accelnet.devices.samplers; assert 'pynvml' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


# ----- the sampler -------------------------------------------------------------------------


def sampler(machine: nf.Machine | None = None, **kw: Any) -> tuple[NvmlSampler, nft.TelemetryNvml]:
    nvml = nft.fake(machine or nf.dgx_h100())
    return NvmlSampler(nvml=nvml, host=HOST, **kw), nvml


def test_every_field_in_the_units_of_a_sample() -> None:
    s, nvml = sampler()
    nvml.set(2, gpu_util=87, mem_util=41, mem_used_mib=60_000, power_mw=512_345, temp_c=67)
    nvml.set(2, energy_mj=123_456_789, pcie_gen=4, pcie_width=8)
    nvml.set(2, clocks_mhz={0: 1980, 1: 1980, 2: 2619, 3: 1500})
    nvml.throttle(2, nft.nvmlClocksThrottleReasonSwPowerCap)
    nvml.ecc(2, corrected=3, uncorrected=1)
    nvml.set(2, remapped=(2, 1, 1, 0))
    nvml.link_down(2, 5)
    nvml.set(2, nvlink_errors={(0, nft.NVML_NVLINK_ERROR_DL_REPLAY): 4, (7, 0): 1, (3, 2): 9})
    assert s.devices() == tuple(f"{HOST}/gpu{i}" for i in range(8))
    got = {x.device: x for x in s.sample(100.0)}
    x = got[f"{HOST}/gpu2"]
    assert (x.time, x.source) == (100.0, "nvml")
    assert (x.utilization_pct, x.mem_util_pct) == (87.0, 41.0)
    assert x.mem_used_bytes == 60_000 * 2**20
    assert x.mem_total_bytes == 81559 * 2**20
    assert x.power_w == pytest.approx(512.345)
    assert x.energy_j == pytest.approx(123_456.789)
    assert x.temperature_c == 67.0
    assert (x.sm_clock_mhz, x.mem_clock_mhz) == (1980, 2619)
    assert x.throttle_reasons == ("sw_power_cap",)
    assert (x.ecc_corrected, x.ecc_uncorrected) == (3, 1)
    assert (x.remapped_correctable, x.remapped_uncorrectable) == (2, 1)
    assert (x.remap_pending, x.remap_failed) == (True, False)
    assert (x.nvlink_up, x.nvlink_down) == (17, 1)
    assert (x.nvlink_replay_errors, x.nvlink_crc_flit_errors) == (5, 9)
    assert (x.nvlink_recovery_errors, x.nvlink_crc_data_errors) == (0, 0)
    assert (x.pcie_gen, x.pcie_width) == (4, 8)
    assert x.xid_events == ()
    assert (x.proc_cpu_pct, x.proc_rss_bytes, x.errors) == (None, None, ())
    idle = got[f"{HOST}/gpu0"]
    assert idle.throttle_reasons == ("gpu_idle",)
    assert (idle.pcie_gen, idle.pcie_width, idle.nvlink_up) == (5, 16, 18)


def test_unsupported_fields_become_none_and_are_not_asked_again() -> None:
    # a V100: no remapped rows, no NVLink error counters for CRC data; GPU 1 has no ECC
    s, nvml = sampler(nf.v100_box())
    for g in range(4):
        nvml.unsupport(g, "nvmlDeviceGetRemappedRows")
    nvml.unsupport(1, "nvmlDeviceGetTotalEccErrors", "nvmlDeviceGetTotalEnergyConsumption")
    first = s.sample(1.0)
    assert first[0].remapped_correctable is None and first[0].remap_pending is None
    assert first[0].ecc_corrected == 0 and first[1].ecc_corrected is None
    assert first[1].energy_j is None and first[0].energy_j is not None
    assert first[1].errors == ()  # unsupported is not an error
    assert s.unsupported(f"{HOST}/gpu1") >= {"ecc_corrected", "energy_j", "remapped_rows"}
    nvml.calls.clear()
    s.sample(2.0)
    assert nvml.calls.count("nvmlDeviceGetRemappedRows") == 0
    assert nvml.calls.count("nvmlDeviceGetTotalEnergyConsumption") == 3  # GPUs 0, 2, 3
    assert nvml.calls.count("nvmlDeviceGetTotalEccErrors") == 3 * 2


def test_nvlink_is_probed_once_and_a_gpu_without_it_is_not_asked_again() -> None:
    s, nvml = sampler(nf.v100_box())
    nvml.calls.clear()
    s.sample(1.0)
    assert nvml.calls.count("nvmlDeviceGetNvLinkState") == 4 * nf.NVML_NVLINK_MAX_LINKS  # probe
    nvml.calls.clear()
    x = s.sample(2.0)[0]
    assert nvml.calls.count("nvmlDeviceGetNvLinkState") == 4 * 6  # the six ports a V100 has
    assert (x.nvlink_up, x.nvlink_down) == (3, 3)  # 0-1 twice, 0-2 once; 3 ports unused
    s2, nvml2 = sampler(nf.dgx_h100().with_gpus(ports=()))  # no NVLink at all
    s2.sample(1.0)
    nvml2.calls.clear()
    y = s2.sample(2.0)[0]
    assert nvml2.calls.count("nvmlDeviceGetNvLinkState") == 0
    assert (y.nvlink_up, y.nvlink_replay_errors) == (None, None)


def test_a_transient_error_is_reported_and_retried() -> None:
    s, nvml = sampler()
    nvml.fail(3, "nvmlDeviceGetPowerUsage", pynvml.NVMLError_GpuIsLost())
    x = s.sample(1.0)[3]
    assert x.power_w is None
    assert x.errors == ("power_w: GpuIsLost",)
    nvml.fail(3, "nvmlDeviceGetPowerUsage", None)
    y = s.sample(2.0)[3]
    assert y.power_w == 70.0 and y.errors == ()


def test_xid_events_are_drained_once_each() -> None:
    nvml = nft.fake(nf.dgx_h100())
    nvml.nvmlInit()  # an Xid before the sampler registered is not delivered to it
    nvml.xid(1, 13)
    s = NvmlSampler(nvml=nvml, host=HOST)
    assert all(x.xid_events == () for x in s.sample(1.0))
    nvml.xid(1, 79, 48)
    nvml.xid(6, 94)
    got = s.sample(2.0)
    assert [x.xid_events for x in got] == [(), (79, 48), (), (), (), (), (94,), ()]
    assert all(x.xid_events == () for x in s.sample(3.0))


def test_xid_drain_is_bounded_and_resumes() -> None:
    s, nvml = sampler(max_events=64)
    nvml.xid(0, *range(100))
    assert s.sample(1.0)[0].xid_events == tuple(range(64))
    assert s.sample(2.0)[0].xid_events == tuple(range(64, 100))


def test_xid_not_watched_when_events_are_unsupported() -> None:
    nvml = nft.fake(nf.dgx_h100())
    nvml.unsupport(0, "nvmlDeviceRegisterEvents")
    s = NvmlSampler(nvml=nvml, host=HOST)
    got = s.sample(1.0)
    assert got[0].xid_events is None and got[1].xid_events == ()
    assert sum(not es.freed for es in nvml.sets) == 7  # GPU 0's set was freed at once


def test_energy_counter_grows_with_power() -> None:
    s, nvml = sampler()
    nvml.set(0, power_mw=400_000)
    a = s.sample(0.0)[0]
    nvml.tick(10.0)
    b = s.sample(10.0)[0]
    assert a.energy_j is not None and b.energy_j is not None
    assert b.energy_j - a.energy_j == pytest.approx(4000.0)  # 400 W for 10 s
    assert b.power_w == 400.0


def test_throttle_reasons_by_name_and_the_old_driver_fallback() -> None:
    bits = nft.nvmlClocksThrottleReasonHwThermalSlowdown | nft.nvmlClocksThrottleReasonSwPowerCap
    assert throttle_names(bits) == ("sw_power_cap", "hw_thermal_slowdown")
    assert throttle_names(0) == ()
    assert throttle_names(0x1 | 0x10000) == ("gpu_idle", "0x10000")
    s, nvml = sampler()
    nvml.throttle(0, nft.nvmlClocksThrottleReasonHwSlowdown)
    assert s.sample(1.0)[0].throttle_reasons == ("hw_slowdown",)
    old = nft.fake(nf.dgx_h100(), no_event_reasons_fn=True)
    s_old = NvmlSampler(nvml=old, host=HOST)
    old.throttle(0, nft.nvmlClocksThrottleReasonSwThermalSlowdown)
    assert s_old.sample(1.0)[0].throttle_reasons == ("sw_thermal_slowdown",)
    old.calls.clear()
    assert s_old.sample(2.0)[0].throttle_reasons == ("sw_thermal_slowdown",)
    assert "nvmlDeviceGetCurrentClocksEventReasons" not in old.calls


def test_slow_fields_are_read_every_kth_sample_and_repeated_between() -> None:
    s, nvml = sampler(slow_every=3)
    s.sample(0.0)
    nvml.ecc(0, uncorrected=2)
    nvml.calls.clear()
    a, b = s.sample(1.0)[0], s.sample(2.0)[0]
    assert "nvmlDeviceGetTotalEccErrors" not in nvml.calls
    assert "nvmlDeviceGetNvLinkErrorCounter" not in nvml.calls
    assert a.ecc_uncorrected == b.ecc_uncorrected == 0  # the last reading, repeated
    assert a.nvlink_up == 18
    c = s.sample(3.0)[0]
    assert c.ecc_uncorrected == 2


def test_gpus_map_to_fabric_ids_by_uuid_then_bus() -> None:
    machine = nf.dgx_h100()
    fabric = discover(cpu_devices="none", nvml=nf.FakeNvml(machine), hostname=HOST).fabric
    gpus = [d for d in fabric.devices.values() if d.kind is DeviceKind.GPU]
    # NVML enumerates in another order (CUDA_DEVICE_ORDER, a different driver): ids follow
    # the GPUs, not the indices
    shuffled = nf.Machine(machine.driver, machine.gpus[::-1], machine.ancestors)
    s = NvmlSampler(gpus, nvml=nft.fake(shuffled))
    assert s.devices() == tuple(f"{HOST}/gpu{i}" for i in reversed(range(8)))
    assert s.unmatched == ()
    # by PCI bus id when the fabric has no UUIDs; a GPU not in the fabric is skipped
    found = [(g.uuid, g.bus) for g in machine.gpus]
    by_bus = [(d.id, d.pci_bus) for d in gpus[:7]]
    devices = [_Dev(did, None, bus) for did, bus in by_bus]
    assert match_gpus([("", b) for _, b in found], devices) == {
        i: f"{HOST}/gpu{i}" for i in range(7)
    }
    s2 = NvmlSampler(devices, nvml=nft.fake(machine))
    assert s2.unmatched == (7,) and len(s2.devices()) == 7
    # a bus id that two hosts share matches neither
    twins = [_Dev("a/gpu0", None, "0000:1b:00.0"), _Dev("b/gpu0", None, "00000000:1B:00.0")]
    assert match_gpus([("", "00000000:1B:00.0")], twins) == {}


def test_a_gpu_lost_at_start_is_left_out_and_the_others_sampled() -> None:
    machine = nf.dgx_h100()
    fabric = discover(cpu_devices="none", nvml=nf.FakeNvml(machine), hostname=HOST).fabric
    nvml = nft.fake(machine, lost={3})
    s = NvmlSampler(fabric.devices.values(), nvml=nvml)
    assert s.unavailable == {3: "GpuIsLost"}
    assert f"{HOST}/gpu3" not in s.devices() and len(s.devices()) == 7
    assert s.devices()[3] == f"{HOST}/gpu4"  # matched by UUID, not by position
    assert len(s.sample(1.0)) == 7


class _Dev:
    def __init__(self, did: str, uuid: str | None, bus: str | None) -> None:
        self.id, self.uuid, self.pci_bus, self.kind = did, uuid, bus, DeviceKind.GPU


def test_missing_library_or_driver_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # "import pynvml" raises ImportError
    with pytest.raises(SamplerUnavailableError, match=r"accelnet\[nvidia\]"):
        NvmlSampler()
    no_driver = nft.fake(nf.dgx_h100(), init_error=pynvml.NVMLError_DriverNotLoaded())
    with pytest.raises(SamplerUnavailableError, match="DriverNotLoaded"):
        NvmlSampler(nvml=no_driver)


def test_close_frees_event_sets_and_shuts_down_once() -> None:
    s, nvml = sampler()
    with s:
        s.sample(1.0)
    assert all(es.freed for es in nvml.sets) and len(nvml.sets) == 8
    assert (nvml.initialized, nvml.shutdowns) == (0, 1)
    s.close()
    assert nvml.shutdowns == 1
    with pytest.raises(RuntimeError, match="closed"):
        s.sample(2.0)


def test_sampling_cost_per_device_is_measured() -> None:
    s, _ = sampler()
    poller = Poller([s], period_s=1.0)
    for t in range(20):
        poller.poll(float(t))
    (cost,) = poller.costs()
    assert (cost.sampler, cost.rounds, cost.device_samples) == ("NvmlSampler", 20, 160)
    assert 0 < cost.per_device_sample_s < 0.5  # tens of µs; loose: no timing pin
    assert cost.per_device_per_s(1.0) == cost.per_device_sample_s


@pytest.mark.gpu
def test_real_gpus_are_sampled() -> None:
    found = discover(cpu_devices="none")
    gpus = [d for d in found.fabric.devices.values() if d.kind is DeviceKind.GPU]
    assert gpus, f"no GPU discovered; notes: {found.notes}"
    with NvmlSampler(gpus) as s:
        assert set(s.devices()) == {d.id for d in gpus}
        first, second = s.sample(0.0), s.sample(1.0)
    for x in first + second:
        assert x.mem_total_bytes and x.mem_total_bytes > 2**30, x
        assert x.mem_used_bytes is not None and 0 <= x.mem_used_bytes <= x.mem_total_bytes
        assert x.utilization_pct is not None and 0 <= x.utilization_pct <= 100
        assert x.temperature_c is not None and 0 < x.temperature_c < 120
        assert x.power_w is None or 0 < x.power_w < 2000
        assert x.sm_clock_mhz is not None and x.sm_clock_mhz > 0
        assert x.throttle_reasons is not None
        assert x.pcie_gen is None or 1 <= x.pcie_gen <= 6
        assert not [e for e in x.errors if "GpuIsLost" in e], x.errors
    for a, b in zip(first, second, strict=True):
        if a.energy_j is not None and b.energy_j is not None:
            assert b.energy_j >= a.energy_j


# ----- the prepared GPU script, driven through the fake -------------------------------------

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "gpu_telemetry_check.py"


def load_script() -> Any:
    spec = importlib.util.spec_from_file_location("gpu_telemetry_check", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_gpu_script_prints_readings_and_costs(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    nvml = nft.fake(nf.v100_box())
    nvml.set(1, gpu_util=93, power_mw=250_500)
    monkeypatch.setitem(sys.modules, "pynvml", nvml)  # what "import pynvml" finds
    out_json = tmp_path / "out.json"
    assert load_script().main(["-n", "3", "-p", "0.001", "--json", str(out_json)]) == 0
    out = capsys.readouterr().out
    assert "GPUs by fabric discovery" in out
    assert "us per device per sample" in out
    lines = [line for line in out.splitlines() if "/gpu1 " in line]
    assert len(lines) == 3 and "93" in lines[0] and "250.5" in lines[0]
    data = json.loads(out_json.read_text())
    assert len(data["samples"]) == 3 * 4
    assert data["cost_per_device_sample_s"] > 0
    assert nvml.initialized == 0  # discovery and the sampler both shut NVML down


def test_the_gpu_script_without_a_gpu_says_so(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)
    assert load_script().main([]) == 0
    assert "nothing to check here" in capsys.readouterr().out
