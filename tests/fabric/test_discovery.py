"""NVML discovery, driven by recorded fakes that are checked against the real pynvml API.

No GPU is needed except for the one test marked ``gpu`` (``pytest -m gpu`` on a GPU machine).
The fakes live in ``tests/fabric/nvml_fake.py``; the first tests here make sure they, and
discovery itself, use only functions, parameters and constants the real ``pynvml`` has.
"""

from __future__ import annotations

import ast
import functools
import inspect
import itertools
import sys
from pathlib import Path
from typing import Any

import pynvml
import pytest

from accelnet.fabric import DeviceKind, Level, LinkMedium, SwitchKind, device_models
from accelnet.fabric import discovery as disc
from accelnet.fabric.discovery import discover, gpu_model
from accelnet.fabric.export import topology_matrix
from tests.fabric import nvml_fake as nf

HOST = "dgx"
GIB = 2**20 / 1e9  # GB in one MiB


def run(machine: nf.Machine, cpu_devices: Any = "none", **fake: Any) -> tuple[Any, nf.FakeNvml]:
    nvml = nf.FakeNvml(machine, **fake)
    return discover(cpu_devices=cpu_devices, nvml=nvml, hostname=HOST), nvml


def labels(fabric: Any) -> dict[tuple[str, str], str]:
    names, rows = topology_matrix(fabric, HOST)
    return {(a, b): rows[i][j] for i, a in enumerate(names) for j, b in enumerate(names)}


# ----- the API surface: discovery and the fake against the real pynvml -----------------------


def nvml_names_used(source: str) -> tuple[set[str], set[str]]:
    """(functions, constants) that ``source`` reads from its ``nvml`` module object."""
    functions: set[str] = set()
    constants: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        name = None
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            if node.value.id == "nvml":
                name = node.attr
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("getattr", "hasattr")
            and len(node.args) >= 2
            and isinstance(node.args[0], ast.Name)
            and node.args[0].id == "nvml"
            and isinstance(node.args[1], ast.Constant)
        ):
            name = str(node.args[1].value)
        if name is not None:
            (constants if name.startswith("NVML_") else functions).add(name)
    return functions, constants


def not_in_pynvml(names: set[str]) -> list[str]:
    return sorted(n for n in names if not hasattr(pynvml, n))


DISCOVERY_FUNCTIONS, DISCOVERY_CONSTANTS = nvml_names_used(Path(disc.__file__).read_text())


def test_discovery_calls_only_functions_the_real_pynvml_has() -> None:
    # the scan itself must see discovery's calls, or this test would pass vacuously
    assert {"nvmlInit", "nvmlShutdown", "nvmlDeviceGetTopologyCommonAncestor"} <= (
        DISCOVERY_FUNCTIONS
    )
    assert not_in_pynvml(DISCOVERY_FUNCTIONS) == []
    assert all(callable(getattr(pynvml, n)) for n in DISCOVERY_FUNCTIONS)
    # ... and the fake answers every one of them
    assert sorted(DISCOVERY_FUNCTIONS - set(nf.fake_functions())) == []


def test_discovery_reads_only_constants_the_real_pynvml_has() -> None:
    assert "NVML_NVLINK_MAX_LINKS" in DISCOVERY_CONSTANTS
    assert not_in_pynvml(DISCOVERY_CONSTANTS) == []
    assert sorted(DISCOVERY_CONSTANTS - set(nf.fake_constants())) == []


def test_the_surface_scan_reports_a_function_pynvml_lacks() -> None:
    source = "def f(nvml, h):\n    return nvml.nvmlDeviceGetFrobnication(h), nvml.nvmlInit()\n"
    functions, _ = nvml_names_used(source)
    assert not_in_pynvml(functions) == ["nvmlDeviceGetFrobnication"]
    _, constants = nvml_names_used("x = getattr(nvml, 'NVML_NO_SUCH_THING', 3)")
    assert not_in_pynvml(constants) == ["NVML_NO_SUCH_THING"]


def _required(fn: Any) -> list[str]:
    params = inspect.signature(fn).parameters.values()
    return [
        p.name
        for p in params
        if p.name != "self"
        and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
        and p.default is p.empty
    ]


@pytest.mark.parametrize("name", sorted(nf.fake_functions()))
def test_fake_function_has_the_real_signature(name: str) -> None:
    real = getattr(pynvml, name, None)
    assert callable(real), f"pynvml has no {name}"
    fake = nf.fake_functions()[name]
    assert _required(fake) == _required(real)
    # optional parameters of the real function (``version=None``) are accepted too
    fake_params = inspect.signature(fake).parameters
    for p in inspect.signature(real).parameters.values():
        assert p.name in fake_params, f"{name}: the fake lacks parameter {p.name}"


@pytest.mark.parametrize("name", sorted(nf.fake_constants()))
def test_fake_constant_equals_the_real_one(name: str) -> None:
    assert hasattr(pynvml, name), f"pynvml has no {name}"
    assert nf.fake_constants()[name] == getattr(pynvml, name)


def test_fake_answers_with_real_structures_and_real_errors() -> None:
    nvml = nf.FakeNvml(nf.v100_box(numa=(None,) * 4))
    with pytest.raises(pynvml.NVMLError_Uninitialized):
        nvml.nvmlDeviceGetCount()
    nvml.nvmlInit()
    h = nvml.nvmlDeviceGetHandleByIndex(0)
    pci = nvml.nvmlDeviceGetPciInfo(h)
    assert isinstance(pci, pynvml.nvmlPciInfo_t)
    assert (pci.busId, pci.domain, pci.bus) == ("00000000:1A:00.0", 0, 0x1A)
    mem = nvml.nvmlDeviceGetMemoryInfo(h)
    assert isinstance(mem, pynvml.c_nvmlMemory_t)
    assert mem.total == 16160 * 2**20
    with pytest.raises(pynvml.NVMLError_NotSupported):
        nvml.nvmlDeviceGetNumaNodeId(h)
    with pytest.raises(pynvml.NVMLError_InvalidArgument):  # V100s have 6 ports, not 36
        nvml.nvmlDeviceGetNvLinkState(h, 6)
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        nvml.nvmlDeviceGetHandleByIndex(4)


# ----- DGX H100: 8 GPUs, 18 NVLinks each to NVSwitches -----------------------------------


def test_dgx_h100_devices_carry_what_nvml_reported() -> None:
    found, _ = run(nf.dgx_h100())
    assert found.notes == ()
    devices = list(found.fabric.devices.values())
    assert [d.name for d in devices] == [f"gpu{i}" for i in range(8)]
    assert {d.model.name for d in devices} == {"H100-SXM"}
    for d, gpu in zip(devices, nf.dgx_h100().gpus, strict=True):
        assert d.id == f"{HOST}/{d.name}"
        assert d.memory_gb == pytest.approx(81559 * GIB)  # 85.52 GB, not the catalog's 80
        assert d.memory_gb == pytest.approx(85.52, abs=0.01)
        assert d.power_limit_w == 700.0
        assert d.uuid == gpu.uuid and d.uuid.startswith("GPU-")
        assert d.pci_bus == gpu.bus.lower()
        assert d.detail == "NVIDIA H100 80GB HBM3"
    assert [d.numa for d in devices] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert [d.pci_bus for d in devices][:2] == ["00000000:1b:00.0", "00000000:43:00.0"]


def test_dgx_h100_gpu0_to_gpu5_is_nv18_through_the_nvswitch() -> None:
    found, _ = run(nf.dgx_h100())
    route = found.fabric.route("gpu0", "gpu5")
    assert route.level is Level.NVLINK
    assert route.label == "NV18"
    assert route.nodes == (f"{HOST}/gpu0", f"{HOST}/nvswitch", f"{HOST}/gpu5")
    assert route.bandwidth_gbps == pytest.approx(450.0)  # "900 GB/s" bidirectional
    assert route.bidirectional_gbps == pytest.approx(900.0)
    assert {lk.type.generation for lk in route.links} == {"NVLink4"}
    assert [s.kind for s in found.fabric.host_switches(HOST)].count(SwitchKind.NVSWITCH) == 1


def test_dgx_h100_matrix_is_nv18_everywhere() -> None:
    found, _ = run(nf.dgx_h100())
    got = labels(found.fabric)
    for a, b in itertools.product(range(8), repeat=2):
        assert got[(f"gpu{a}", f"gpu{b}")] == ("X" if a == b else "NV18"), (a, b)


def test_dgx_h100_gpus_hang_off_their_numa_socket_over_pcie5() -> None:
    found, _ = run(nf.dgx_h100())
    pcie = {
        lk.a.split("/")[1]: lk
        for lk in found.fabric.host_links(HOST)
        if lk.medium is LinkMedium.PCIE and lk.a.split("/")[1].startswith("gpu")
    }
    assert {g: lk.b for g, lk in pcie.items()} == {
        f"gpu{i}": f"{HOST}/socket{i // 4}" for i in range(8)
    }
    assert {lk.type.generation for lk in pcie.values()} == {"Gen5"}
    assert {lk.bandwidth_gbps for lk in pcie.values()} == {63.0}


def test_hgx_gpu_pairs_behind_one_pcie_switch_get_one_switch_node() -> None:
    found, _ = run(nf.dgx_h100(nf.HGX_PAIRED_SWITCHES))
    fabric = found.fabric
    switches = [s for s in fabric.host_switches(HOST) if s.kind is SwitchKind.PCIE_SWITCH]
    assert len(switches) == 4
    parent = {
        lk.a.split("/")[1]: lk.b
        for lk in fabric.host_links(HOST)
        if lk.medium is LinkMedium.PCIE and lk.a.split("/")[1].startswith("gpu")
    }
    for pair in range(4):
        a, b = parent[f"gpu{2 * pair}"], parent[f"gpu{2 * pair + 1}"]
        assert a == b and fabric.node_kind(a) is SwitchKind.PCIE_SWITCH
        assert next(s for s in switches if s.id == a).numa == pair // 2
    assert len(set(parent.values())) == 4


def test_old_driver_without_remote_device_type_still_counts_nvswitch_links() -> None:
    missing = pynvml.NVMLError_FunctionNotFound()
    found, _ = run(nf.dgx_h100(), errors={"nvmlDeviceGetNvLinkRemoteDeviceType": missing})
    assert found.fabric.route("gpu0", "gpu7").label == "NV18"
    assert found.fabric.route("gpu0", "gpu7").bandwidth_gbps == pytest.approx(450.0)


def test_numa_comes_from_sysfs_when_nvml_cannot_tell(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for i, bus in enumerate(nf.H100_BUSES):
        node = tmp_path / f"0000:{bus.lower()}:00.0"
        node.mkdir()
        (node / "numa_node").write_text(f"{i // 4}\n")
    monkeypatch.setattr(disc, "_sysfs_numa", functools.partial(disc._sysfs_numa, root=tmp_path))
    missing = pynvml.NVMLError_FunctionNotFound()
    found, _ = run(nf.dgx_h100(), errors={"nvmlDeviceGetNumaNodeId": missing})
    assert [d.numa for d in found.fabric.devices.values()] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert found.fabric.route("gpu0", "gpu4").label == "NV18"


def test_nvml_is_shut_down_once_after_a_probe() -> None:
    _, nvml = run(nf.dgx_h100())
    assert (nvml.initialized, nvml.shutdowns) == (0, 1)
    assert nvml.calls[0] == "nvmlInit" and nvml.calls[-1] == "nvmlShutdown"


# ----- V100 box: direct GPU-to-GPU NVLinks, no NVSwitch ----------------------------------


def test_v100_direct_links_give_nv2_and_nv1_and_pcie_elsewhere() -> None:
    found, _ = run(nf.v100_box())
    fabric = found.fabric
    assert {d.model.name for d in fabric.devices.values()} == {"V100"}
    assert not any(s.kind is SwitchKind.NVSWITCH for s in fabric.host_switches(HOST))
    expected = [
        ["X", "NV2", "NV1", "SYS"],
        ["NV2", "X", "SYS", "NV1"],
        ["NV1", "SYS", "X", "NV2"],
        ["SYS", "NV1", "NV2", "X"],
    ]
    assert topology_matrix(fabric, HOST) == ([f"gpu{i}" for i in range(4)], expected)
    nv2 = fabric.route("gpu0", "gpu1")
    assert nv2.nodes == (f"{HOST}/gpu0", f"{HOST}/gpu1")
    assert nv2.bandwidth_gbps == pytest.approx(50.0)
    assert nv2.links[0].type.generation == "NVLink2"
    assert fabric.route("gpu0", "gpu2").bandwidth_gbps == pytest.approx(25.0)
    sys_route = fabric.route("gpu0", "gpu3")
    assert sys_route.level is Level.NUMA
    assert sys_route.bandwidth_gbps == pytest.approx(15.75)  # PCIe Gen3 x16


S, M, HB, NODE, SYSTEM = (
    nf.NVML_TOPOLOGY_SINGLE,
    nf.NVML_TOPOLOGY_MULTIPLE,
    nf.NVML_TOPOLOGY_HOSTBRIDGE,
    nf.NVML_TOPOLOGY_NODE,
    nf.NVML_TOPOLOGY_SYSTEM,
)


def _cross(level: int) -> dict[tuple[int, int], int]:
    """Pairs 0-1 and 2-3 behind one switch each, every other pair meeting at ``level``."""
    return {(i, j): S if (i, j) in ((0, 1), (2, 3)) else level for i, j in nf.V100_ANCESTORS}


@pytest.mark.parametrize(
    ("ancestors", "numa", "label", "level"),
    [
        ({pair: S for pair in nf.V100_ANCESTORS}, (0, 0, 0, 0), "PIX", Level.PCIE_SWITCH),
        (_cross(M), (0, 0, 0, 0), "PXB", Level.PCIE_SWITCH),
        (_cross(HB), (0, 0, 0, 0), "PHB", Level.PCIE_HOST),
        (_cross(NODE), (0, 0, 0, 0), "PHB", Level.PCIE_HOST),
        (_cross(SYSTEM), (0, 0, 1, 1), "SYS", Level.NUMA),
    ],
    ids=["single-switch", "multiple-switches", "hostbridge", "node", "system"],
)
def test_pairs_without_nvlink_fall_back_to_the_pcie_level_nvml_reports(
    ancestors: dict[tuple[int, int], int], numa: tuple[int, ...], label: str, level: Level
) -> None:
    found, _ = run(nf.v100_box(ancestors, numa))
    fabric = found.fabric
    for a, b in (("gpu0", "gpu3"), ("gpu1", "gpu2"), ("gpu3", "gpu0")):
        route = fabric.route(a, b)
        assert (route.label, route.level) == (label, level), (a, b)
        assert route.bandwidth_gbps == pytest.approx(15.75)
    assert fabric.route("gpu0", "gpu1").label == "NV2"  # NVLink still wins where it exists


# ----- other machines and NVLink generations ------------------------------------------------


def test_gpus_in_pci_domains_of_their_own_pair_up_correctly() -> None:
    # Azure VMs: 0001:00:00.0, 0002:00:00.0, ... differ only in the PCI domain
    found, _ = run(nf.azure_a100_pairs())
    fabric = found.fabric
    assert [d.pci_bus for d in fabric.devices.values()] == [
        f"0000000{d}:00:00.0" for d in range(1, 5)
    ]
    assert {d.model.name for d in fabric.devices.values()} == {"A100-PCIe-80GB"}
    got = labels(fabric)
    assert got[("gpu0", "gpu1")] == got[("gpu2", "gpu3")] == "NV12"
    assert got[("gpu0", "gpu2")] == got[("gpu0", "gpu3")] == got[("gpu1", "gpu2")] == "SYS"
    route = fabric.route("gpu0", "gpu1")
    assert route.bandwidth_gbps == pytest.approx(300.0)  # 12 NVLink 3 links, 25 GB/s each
    assert route.links[0].type.generation == "NVLink3"


@pytest.mark.parametrize(
    ("version", "generation", "per_link"),
    [
        (nf.NVML_NVLINK_VERSION_2_0, "NVLink2", 25.0),
        (nf.NVML_NVLINK_VERSION_2_2, "NVLink2", 25.0),
        (nf.NVML_NVLINK_VERSION_3_0, "NVLink3", 25.0),
        (nf.NVML_NVLINK_VERSION_3_1, "NVLink3", 25.0),
        (nf.NVML_NVLINK_VERSION_4_0, "NVLink4", 25.0),
        (nf.NVML_NVLINK_VERSION_5_0, "NVLink5", 50.0),
    ],
)
def test_nvlink_version_is_read_as_nvmls_enum(
    version: int, generation: str, per_link: float
) -> None:
    found, _ = run(nf.two_gpus("NVIDIA A100-SXM4-40GB", version, links=4))
    route = found.fabric.route("gpu0", "gpu1")
    assert route.label == "NV4"
    assert route.links[0].type.generation == generation
    assert route.bandwidth_gbps == pytest.approx(4 * per_link)


def test_unknown_gpu_becomes_an_ad_hoc_model_with_measured_figures() -> None:
    found, _ = run(nf.v100_box().with_gpus(name="NVIDIA Foo 9000"))
    devices = list(found.fabric.devices.values())
    model = devices[0].model
    assert model.name == "Foo-9000"
    assert model.name not in {m.name for m in device_models()}
    assert model.kind is DeviceKind.GPU
    assert model.memory_gb == pytest.approx(16160 * GIB)
    assert model.max_w == 300.0
    assert "not in the catalog" in model.notes
    assert all(d.memory_gb == pytest.approx(16160 * GIB) for d in devices)
    assert all(d.power_limit_w == 300.0 for d in devices)
    assert found.fabric.route("gpu0", "gpu1").label == "NV2"


@pytest.mark.parametrize(
    ("name", "model"),
    [
        ("NVIDIA H100 80GB HBM3", "H100-SXM"),
        ("NVIDIA H100 PCIe", "H100-PCIe"),
        ("NVIDIA GH200 480GB", "H200"),
        ("NVIDIA A100-SXM4-40GB", "A100-SXM4-40GB"),
        ("NVIDIA A100-SXM4-80GB", "A100-SXM4-80GB"),
        ("NVIDIA A100 80GB PCIe", "A100-PCIe-80GB"),
        ("NVIDIA L40S", "L40S"),
        ("NVIDIA L4", "L4"),
        ("Tesla T4", "T4"),
        ("Tesla V100-SXM2-16GB", "V100"),
        ("Tesla V100S-PCIE-32GB", "V100"),
        ("NVIDIA L40", None),  # not an L4
        ("NVIDIA T400 4GB", None),  # not a T4
        ("NVIDIA RTX A1000", None),  # not an A100
    ],
)
def test_nvml_names_map_to_catalog_models(name: str, model: str | None) -> None:
    got = gpu_model(name, 12.0, 150.0)
    if model is None:
        assert got.name not in {m.name for m in device_models()}
        assert (got.memory_gb, got.max_w) == (12.0, 150.0)
    else:
        assert got.name == model


# ----- CPU devices and machines without NVML ------------------------------------------------


def test_cpu_devices_none_gives_gpus_only() -> None:
    found, _ = run(nf.dgx_h100(), cpu_devices="none")
    assert {d.kind for d in found.fabric.devices.values()} == {DeviceKind.GPU}
    assert len(found.fabric.devices) == 8


def test_cpu_devices_two_adds_two_cpu_devices_next_to_the_gpus() -> None:
    found, _ = run(nf.dgx_h100(), cpu_devices=2)
    fabric = found.fabric
    names = [d.name for d in fabric.devices.values()]
    assert names == [f"gpu{i}" for i in range(8)] + ["cpu0", "cpu1"]
    cpus = [d for d in fabric.devices.values() if d.kind is DeviceKind.CPU]
    assert [d.model.name for d in cpus] == ["CPU-core", "CPU-core"]
    assert cpus[0].numa == 0
    assert fabric.route("cpu0", "gpu0").label == "PHB"  # through socket 0's root complex
    assert fabric.route("cpu0", "gpu4").label == "SYS"  # across the socket link


@pytest.mark.parametrize(
    "error", [pynvml.NVMLError_LibraryNotFound(), pynvml.NVMLError_DriverNotLoaded()]
)
def test_nvml_init_failure_gives_a_cpu_only_fabric_and_one_note(error: Exception) -> None:
    found, nvml = run(nf.dgx_h100(), cpu_devices=2, init_error=error)
    assert [d.kind for d in found.fabric.devices.values()] == [DeviceKind.CPU] * 2
    assert len(found.notes) == 1
    assert type(error).__name__ in found.notes[0]
    assert nvml.calls == ["nvmlInit"]  # no shutdown after a failed init


def test_a_gpu_lost_mid_probe_gives_a_cpu_only_fabric_and_one_note() -> None:
    lost = pynvml.NVMLError_GpuIsLost()
    found, nvml = run(nf.dgx_h100(), cpu_devices=1, errors={"nvmlDeviceGetHandleByIndex": lost})
    assert [d.name for d in found.fabric.devices.values()] == ["cpu0"]
    assert len(found.notes) == 1 and "GpuIsLost" in found.notes[0]
    assert (nvml.initialized, nvml.shutdowns) == (0, 1)


def test_without_pynvml_installed_discovery_is_cpu_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml -> ImportError
    found = discover(cpu_devices=1, hostname=HOST)
    assert [d.name for d in found.fabric.devices.values()] == ["cpu0"]
    assert len(found.notes) == 1 and "not installed" in found.notes[0]


def _driver_present() -> bool:
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return False
    pynvml.nvmlShutdown()
    return True


def test_real_pynvml_without_a_driver_gives_a_cpu_only_fabric() -> None:
    if _driver_present():
        pytest.skip("an NVIDIA driver is present; the gpu-marked test covers this machine")
    found = discover(cpu_devices=2, nvml=None, hostname=HOST)
    assert [d.kind for d in found.fabric.devices.values()] == [DeviceKind.CPU] * 2
    assert len(found.notes) == 1 and "CPU only" in found.notes[0]


# ----- a real GPU ---------------------------------------------------------------------------


@pytest.mark.gpu
def test_real_gpus_are_discovered_and_routed() -> None:
    found = discover(cpu_devices="none", hostname=HOST)
    gpus = [d for d in found.fabric.devices.values() if d.kind is DeviceKind.GPU]
    assert gpus, f"no GPU discovered; notes: {found.notes}"
    assert found.notes == ()
    for d in gpus:
        assert d.uuid, d
        assert d.pci_bus, d
        assert d.memory_gb > 1.0, d
    for a, b in itertools.combinations(gpus, 2):
        route = found.fabric.route(a.id, b.id)
        assert route.level <= Level.NUMA and route.bandwidth_gbps > 0, (a.name, b.name)


# ----- CPU cores and memory the host may give jobs --------------------------------------------


def test_discovered_host_declares_the_machines_cpus_and_memory() -> None:
    import psutil

    found, _ = run(nf.dgx_h100(), cpu_devices="none")
    host = found.fabric.host(HOST)
    assert host.cpus == psutil.cpu_count(logical=True)
    assert host.memory_gb == pytest.approx(psutil.virtual_memory().total / 1e9)
    assert host.memory_gb is not None and host.memory_gb > 0


def test_discovery_without_nvml_declares_them_too(monkeypatch: pytest.MonkeyPatch) -> None:
    import psutil

    monkeypatch.setitem(sys.modules, "pynvml", None)
    host = discover(cpu_devices="none", hostname=HOST).fabric.host(HOST)
    assert host.cpus == psutil.cpu_count(logical=True)
    assert host.memory_gb == pytest.approx(psutil.virtual_memory().total / 1e9)


def test_discovery_cpus_and_memory_can_be_overridden() -> None:
    nvml = nf.FakeNvml(nf.dgx_h100())
    found = discover("none", nvml, HOST, cpus=96, memory_gb=1536.5)
    host = found.fabric.host(HOST)
    assert (host.cpus, host.memory_gb) == (96, 1536.5)


def test_discovery_falls_back_to_os_cpu_count(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(disc.psutil, "cpu_count", lambda logical=True: None)
    monkeypatch.setattr(disc.os, "cpu_count", lambda: 12)
    assert disc.host_cpus() == 12
    monkeypatch.setattr(disc.os, "cpu_count", lambda: None)
    assert disc.host_cpus() == 1


@pytest.mark.parametrize(("key", "value"), [("cpus", 0), ("memory_gb", -1.0)])
def test_discovery_rejects_a_bad_override(key: str, value: float) -> None:
    from accelnet.fabric import FabricError

    with pytest.raises(FabricError, match=f"{key} = {value!r}"):
        discover("none", nf.FakeNvml(nf.dgx_h100()), HOST, **{key: value})
