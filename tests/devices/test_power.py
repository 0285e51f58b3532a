"""Device power: the model against the simulator's, and power limits, emulated and through
NVML (against the faithful fake; the test marked ``gpu`` reads a real GPU's limits)."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pynvml
import pytest

from accelnet.devices import DevicePower, EmulatedPowerControl, PowerLimitError, PowerLimits
from accelnet.devices.power import DVFS_FLOOR, MIN_CAP_FRACTION, busy_draw_w, cap_speed
from accelnet.devices.samplers import nvml_power
from accelnet.devices.samplers.nvml_power import NvmlPowerControl
from accelnet.devices.telemetry import SamplerUnavailableError
from accelnet.fabric import DeviceKind
from accelnet.fabric.catalog import device_models
from accelnet.fabric.discovery import discover
from accelnet.sched.policies.energy import PowerTable
from accelnet.sim import throughput
from accelnet.sim.throughput import GENERIC, ThroughputModel
from tests.devices import nvml_telemetry_fake as nft
from tests.fabric import nvml_fake as nf

HOST = "dgx"

# ----- one model: the simulator's and the energy policy's ----------------------------------


@pytest.fixture(scope="module")
def rates() -> ThroughputModel:
    return ThroughputModel.gavel()


def test_the_floor_is_the_simulators() -> None:
    assert DVFS_FLOOR == throughput.DVFS_FLOOR


@pytest.mark.parametrize("model", [m.name for m in device_models()])
def test_draw_and_speed_equal_the_simulators_for_every_catalog_model(
    model: str, rates: ThroughputModel
) -> None:
    p = DevicePower.of_model("x/d0", model)
    table = PowerTable([model])
    assert p.busy_w() == rates.power_w(model, True) == table.idle_w(model) + table.dynamic_w(model)
    assert p.draw_w(0.0) == rates.power_w(model, False) == table.idle_w(model)
    try:
        uncapped = rates.rate(GENERIC, model, 1)
    except ValueError:
        uncapped = None  # a model without a compute figure (an FPGA): no rate to compare
    for frac in (0.01, 0.02, 0.1, 0.3, 0.5, 0.77, 1.0, 1.5):
        cap = frac * p.max_w
        assert p.busy_w(cap) == rates.power_w(model, True, cap)
        if uncapped is not None:
            assert p.speed(cap) == pytest.approx(
                rates.rate(GENERIC, model, 1, power_cap_w=cap) / uncapped
            )


def test_the_curve_and_its_edges() -> None:
    assert cap_speed(None, 700) == cap_speed(700, 700) == cap_speed(900, 700) == 1.0
    assert cap_speed(350, 700) == pytest.approx(0.5 ** (1 / 3))
    assert cap_speed(1, 700) == DVFS_FLOOR
    assert busy_draw_w(70, 700, 10) == 70  # a cap below idle cannot be met
    assert busy_draw_w(70, 700) == 700
    with pytest.raises(ValueError, match="power cap"):
        cap_speed(0, 700)
    with pytest.raises(ValueError, match="power cap"):
        busy_draw_w(70, 700, float("nan"))


def test_device_power_figures() -> None:
    h = DevicePower.of_model("n/gpu0", "h100")  # aliases, case-insensitive
    assert (h.model, h.idle_w, h.max_w) == ("H100-SXM", 70, 700)
    assert (h.cap_min_w, h.cap_max_w) == (MIN_CAP_FRACTION * 700, 700)
    assert h.draw_w(0.5) == 70 + 0.5 * 630
    assert h.draw_w(1.0, cap_w=400, util=0.5) == 70 + 0.5 * 330
    cpu = DevicePower.of_model("n/cpu0", "CPU-core")
    assert cpu.cap_min_w == MIN_CAP_FRACTION * 8
    with pytest.raises(ValueError, match="idle_w <= max_w"):
        DevicePower("d", "m", 800, 700, 100, 700)
    with pytest.raises(ValueError, match="cap_min_w <= cap_max_w"):
        DevicePower("d", "m", 70, 700, 500, 400)
    with pytest.raises(ValueError, match="unknown device model"):
        DevicePower.of_model("d", "H1000")


def test_device_power_of_a_fabric_device_takes_nvml_constraints() -> None:
    fabric = discover(cpu_devices="none", nvml=nft.fake(nf.dgx_h100()), hostname=HOST).fabric
    dev = fabric.devices[f"{HOST}/gpu0"]
    limits = PowerLimits(dev.id, 700, 700, 700, 200, 700)
    assert (DevicePower.of(dev, limits).cap_min_w, DevicePower.of(dev).cap_min_w) == (200, 210)


# ----- emulated limits ----------------------------------------------------------------------


def test_emulated_control_records_and_reports_caps() -> None:
    devs = [DevicePower.of_model(f"n/cpu{i}", "CPU-core") for i in range(2)]
    c = EmulatedPowerControl(devs)
    assert c.devices() == ("n/cpu0", "n/cpu1")
    assert c.limits("n/cpu0") == PowerLimits("n/cpu0", 8, 8, 8, 2.4, 8)
    after = c.set_limit("n/cpu0", 5)
    assert (after.limit_w, after.enforced_w) == (5, 5)
    assert c.caps() == {"n/cpu0": 5}
    assert c.reset_limit("n/cpu0").limit_w == 8 and c.caps() == {}
    with pytest.raises(PowerLimitError, match=r"n/cpu1 to 1 W: outside the allowed range 2.4-8 W"):
        c.set_limit("n/cpu1", 1)
    with pytest.raises(KeyError, match=r"managed: \['n/cpu0', 'n/cpu1'\]"):
        c.limits("n/gpu9")
    with pytest.raises(ValueError, match="number of W"):
        c.set_limit("n/cpu0", float("inf"))
    refused = EmulatedPowerControl(devs, permitted=False)
    with pytest.raises(PowerLimitError, match="not permitted") as info:
        refused.set_limit("n/cpu0", 4)
    assert (info.value.device, info.value.requested_w) == ("n/cpu0", 4)
    assert refused.limits("n/cpu0").limit_w == 8


# ----- NVML: the surface against the real pynvml --------------------------------------------

SOURCE = Path(nvml_power.__file__)


def test_the_control_uses_only_functions_the_real_pynvml_has_and_the_fake_answers() -> None:
    name = re.compile(r"nvml\w+")
    used = {
        n.attr
        for n in ast.walk(ast.parse(SOURCE.read_text()))
        if isinstance(n, ast.Attribute) and name.fullmatch(n.attr)
    }
    assert {
        "nvmlDeviceGetPowerManagementLimit",
        "nvmlDeviceGetPowerManagementDefaultLimit",
        "nvmlDeviceGetPowerManagementLimitConstraints",
        "nvmlDeviceGetEnforcedPowerLimit",
        "nvmlDeviceSetPowerManagementLimit",
    } <= used
    assert sorted(n for n in used if not callable(getattr(pynvml, n, None))) == []
    assert sorted(used - set(nft.telemetry_functions())) == []


def test_importing_the_power_modules_does_not_import_pynvml() -> None:
    code = (
        "import sys, accelnet.devices, accelnet.devices.samplers.nvml_power; "
        "assert 'pynvml' not in sys.modules; "
        "assert 'accelnet.devices.governor' not in sys.modules  # loaded on first use"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


# ----- NVML against the fake ------------------------------------------------------------------


def control(
    machine: nf.Machine | None = None, **kw: object
) -> tuple[NvmlPowerControl, nft.TelemetryNvml]:
    nvml = nft.fake(machine or nf.dgx_h100(), **kw)  # type: ignore[arg-type]
    return NvmlPowerControl(nvml=nvml, host=HOST), nvml


def test_limits_in_watts() -> None:
    c, _ = control()
    assert c.devices() == tuple(f"{HOST}/gpu{i}" for i in range(8))
    assert c.limits(f"{HOST}/gpu3") == PowerLimits(f"{HOST}/gpu3", 700, 700, 700, 200, 700)
    v, _ = control(nf.v100_box())
    assert v.limits(f"{HOST}/gpu0") == PowerLimits(f"{HOST}/gpu0", 300, 300, 300, 150, 300)


def test_set_a_limit_in_milliwatts_and_read_it_back() -> None:
    c, nvml = control()
    after = c.set_limit(f"{HOST}/gpu2", 412.5)
    assert nvml.power_limits_mw == {2: 412_500}
    assert (after.limit_w, after.enforced_w, after.default_w) == (412.5, 412.5, 700)
    assert nvml.calls.count("nvmlDeviceSetPowerManagementLimit") == 1
    assert c.reset_limit(f"{HOST}/gpu2").limit_w == 700
    assert nvml.power_limits_mw == {2: 700_000}


def test_a_limit_outside_the_constraints_names_the_range_and_changes_nothing() -> None:
    c, nvml = control()
    for watts in (199.9, 700.5, 1500):
        with pytest.raises(
            PowerLimitError, match=r"allowed range 200-700 W; nothing changed"
        ) as info:
            c.set_limit(f"{HOST}/gpu0", watts)
        assert (info.value.device, info.value.requested_w) == (f"{HOST}/gpu0", watts)
    assert "nvmlDeviceSetPowerManagementLimit" not in nvml.calls
    assert nvml.power_limits_mw == {}


def test_no_permission_without_root() -> None:
    c, _ = control(root=False)
    with pytest.raises(PowerLimitError) as info:
        c.set_limit(f"{HOST}/gpu1", 450)
    text = str(info.value)
    assert text.startswith(f"cannot set the power limit of {HOST}/gpu1 to 450 W: ")
    assert "NoPermission" in text and "root" in text and "nvidia-smi -i 1 -pl 450" in text
    assert isinstance(info.value.__cause__, pynvml.NVMLError_NoPermission)
    assert c.limits(f"{HOST}/gpu1").limit_w == 700


def test_unsupported_readings_are_none_and_setting_says_unsupported() -> None:
    c, nvml = control(nf.two_gpus("NVIDIA GeForce RTX 3090", 4, 4))
    for fn in (
        "nvmlDeviceGetPowerManagementLimitConstraints",
        "nvmlDeviceGetPowerManagementDefaultLimit",
        "nvmlDeviceSetPowerManagementLimit",
    ):
        nvml.unsupport(0, fn)
    got = c.limits(f"{HOST}/gpu0")
    assert (got.limit_w, got.enforced_w, got.default_w, got.min_w, got.max_w) == (
        250,
        250,
        None,
        None,
        None,
    )
    with pytest.raises(
        PowerLimitError, match=r"NotSupported: this GPU .* does not support power limits"
    ):
        c.set_limit(f"{HOST}/gpu0", 200)
    with pytest.raises(PowerLimitError, match="no default limit"):
        c.reset_limit(f"{HOST}/gpu0")
    nvml.fail(1, "nvmlDeviceSetPowerManagementLimit", pynvml.NVMLError_InvalidArgument())
    with pytest.raises(PowerLimitError, match="InvalidArgument"):
        c.set_limit(f"{HOST}/gpu1", 200)


def test_the_fake_refuses_out_of_range_values_as_nvml_does() -> None:
    nvml = nft.fake(nf.dgx_h100())
    nvml.nvmlInit()
    h = nvml.nvmlDeviceGetHandleByIndex(0)
    assert nvml.nvmlDeviceGetPowerManagementLimitConstraints(h) == [200_000, 700_000]
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        nvml.nvmlDeviceSetPowerManagementLimit(h, 150_000)
    nvml.power_ranges_mw[0] = (100_000, 700_000)
    nvml.nvmlDeviceSetPowerManagementLimit(h, 150_000)
    assert nvml.nvmlDeviceGetEnforcedPowerLimit(h) == 150_000


def test_a_lost_gpu_raises_on_read_and_the_others_work() -> None:
    c, nvml = control()
    nvml.fail(4, "nvmlDeviceGetPowerManagementLimit", pynvml.NVMLError_GpuIsLost())
    with pytest.raises(
        PowerLimitError, match=f"cannot read the power limits of {HOST}/gpu4: NVML GpuIsLost"
    ):
        c.limits(f"{HOST}/gpu4")
    assert c.limits(f"{HOST}/gpu5").limit_w == 700
    lost, _ = control(lost={6})
    assert lost.unavailable == {6: "GpuIsLost"} and f"{HOST}/gpu6" not in lost.devices()


def test_gpus_match_fabric_devices_and_close_is_idempotent() -> None:
    nvml = nft.fake(nf.v100_box())
    fabric = discover(cpu_devices="none", nvml=nft.fake(nf.v100_box()), hostname="box").fabric
    gpus = [d for d in fabric.devices.values() if d.kind is DeviceKind.GPU][1:]
    with NvmlPowerControl(gpus, nvml=nvml) as c:
        assert c.devices() == tuple(d.id for d in gpus)
        assert c.unmatched == (0,) and c.index("box/gpu2") == 2
        assert c.limits("box/gpu3").max_w == 300
        with pytest.raises(KeyError, match="box/gpu0"):
            c.limits("box/gpu0")
    c.close()
    assert nvml.shutdowns == 1
    with pytest.raises(PowerLimitError, match="closed"):
        c.limits("box/gpu3")


def test_without_a_driver_the_error_says_so() -> None:
    nvml = nft.fake(nf.dgx_h100(), init_error=pynvml.NVMLError_LibraryNotFound())
    with pytest.raises(SamplerUnavailableError, match="NVIDIA driver"):
        NvmlPowerControl(nvml=nvml)


# ----- a real GPU ---------------------------------------------------------------------------


@pytest.mark.gpu
def test_real_gpu_power_limits() -> None:
    """Reads every GPU's limits. Sets and restores one only with ACCELNET_GPU_SET_POWER=1
    (it changes the machine's settings for a moment, and needs root)."""
    found = discover(cpu_devices="none")
    gpus = [d for d in found.fabric.devices.values() if d.kind is DeviceKind.GPU]
    assert gpus, f"no GPU discovered; notes: {found.notes}"
    with NvmlPowerControl(gpus) as c:
        for d in c.devices():
            lim = c.limits(d)
            print(d, lim)
            assert lim.enforced_w is not None and 10 < lim.enforced_w < 2000
            if lim.min_w is not None and lim.max_w is not None:
                assert 0 < lim.min_w <= lim.max_w
                assert lim.limit_w is None or lim.min_w <= lim.limit_w <= lim.max_w
        if os.environ.get("ACCELNET_GPU_SET_POWER") != "1":
            return
        d = c.devices()[0]
        before = c.limits(d)
        assert before.limit_w is not None and before.min_w is not None
        target = max(before.min_w, before.limit_w - 50)
        try:
            after = c.set_limit(d, target)
        except PowerLimitError as exc:
            assert "NoPermission" in str(exc) or "NotSupported" in str(exc), exc
            pytest.skip(f"not permitted here: {exc}")
        try:
            assert after.limit_w == pytest.approx(target)
        finally:
            assert c.set_limit(d, before.limit_w).limit_w == pytest.approx(before.limit_w)
