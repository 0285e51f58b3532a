"""Planning a run: devices checked against this machine, ring order, backend, bindings."""

from __future__ import annotations

from pathlib import Path

import pytest

from accelnet.comm import CostModel
from accelnet.comm.ring import ring_order
from accelnet.commbench import BenchInputError, make_steps, plan_bench
from accelnet.commbench.affinity import physical_cores
from accelnet.commbench.plan import default_devices, parse_devices
from accelnet.fabric import DeviceKind, Fabric, load_fabric
from accelnet.fabric.build import build_fabric, parse_spec
from accelnet.fabric.discovery import discover
from tests.fabric import nvml_fake as nf

CORES = ((0,), (1,))


def _cpus(n: int = 2, host: str = "vm") -> Fabric:
    return discover(n, nvml=nf.FakeNvml(nf.Machine("550.0", (), {})), hostname=host).fabric


def _gpus() -> Fabric:
    return discover(2, nvml=nf.FakeNvml(nf.v100_box()), hostname="box").fabric


def test_two_cores_run_gloo_pinned_to_their_cores() -> None:
    local = _cpus()
    plan = plan_bench(local, ["cpu1", "cpu0"], local, CORES)
    assert plan.backend == "gloo"
    assert plan.ranks == 2
    assert plan.comm.ranks == ("vm/cpu1", "vm/cpu0")
    assert [(b.rank, b.device, b.cpus) for b in plan.bindings] == [
        (0, "vm/cpu1", (1,)),
        (1, "vm/cpu0", (0,)),
    ]
    assert plan.levels == ("PCIE_HOST",)
    assert [b.cpus for b in plan_bench(local, None, local, CORES, pin=False).bindings] == [
        (),
        (),
    ]


def test_gpus_run_nccl_in_ring_order_by_cuda_index() -> None:
    local = _gpus()
    assert default_devices(local) == ["gpu0", "gpu1", "gpu2", "gpu3"]
    model = CostModel()
    plan = plan_bench(local, None, local, CORES, model)
    assert plan.backend == "nccl"
    best = ring_order(plan.comm, model)
    assert plan.comm.ranks == best.ranks
    assert plan.comm.ranks != ("box/gpu0", "box/gpu1", "box/gpu2", "box/gpu3")  # NVLink ring
    assert [b.cuda_index for b in plan.bindings] == [
        int(d.removeprefix("box/gpu")) for d in plan.comm.ranks
    ]
    assert all(b.kind is DeviceKind.GPU and not b.cpus for b in plan.bindings)


@pytest.mark.parametrize(
    ("devices", "needle"),
    [
        (["cpu0", "cpu7"], "--devices: no device 'cpu7' in fabric 'vm'"),
        (["cpu0", "cpu0"], "--devices: 'cpu0' appears twice (vm/cpu0)"),
        (["cpu0", "vm/cpu0"], "--devices: 'vm/cpu0' appears twice"),
        (["cpu0"], "--devices: a collective needs at least 2 devices, got 1 (cpu0)"),
    ],
)
def test_bad_devices(devices: list[str], needle: str) -> None:
    local = _cpus()
    with pytest.raises(BenchInputError) as info:
        plan_bench(local, devices, local, CORES)
    assert needle in str(info.value)


def test_mixed_kinds_and_missing_cores_are_refused() -> None:
    local = _gpus()
    with pytest.raises(BenchInputError, match=r"mixes device kinds \(box/gpu0 \(gpu\)"):
        plan_bench(local, ["gpu0", "cpu0"], local, CORES)
    four = _cpus(4)
    with pytest.raises(BenchInputError, match="vm/cpu3 is core 3, but this process may run on 2"):
        plan_bench(four, ["cpu0", "cpu3"], four, CORES)


def test_devices_must_be_on_this_machine() -> None:
    local = _cpus()
    dgx = load_fabric("dgx-h100")
    with pytest.raises(BenchInputError, match=r"--devices: dgx-h100/gpu0 is not on this machine"):
        plan_bench(dgx, ["gpu0", "gpu1"], local, CORES)
    tpus = _one_host("2xTPU-v4")
    with pytest.raises(BenchInputError, match=r"no collective backend for t/tpu0 \(tpu"):
        plan_bench(tpus, ["tpu0", "tpu1"], tpus, CORES)
    amd = _one_host("2xMI300X")
    with pytest.raises(BenchInputError, match=r"no collective backend for t/gpu0 \(gpu, amd"):
        plan_bench(amd, ["gpu0", "gpu1"], amd, CORES)
    # a fabric file that models this machine under another name is fine
    other = _cpus(host="model-of-vm")
    plan = plan_bench(other, ["cpu0", "cpu1"], local, CORES)
    assert plan.comm.ranks == ("model-of-vm/cpu0", "model-of-vm/cpu1")


def _one_host(devices: str) -> Fabric:
    spec = {"name": "t", "hosts": [{"name": "t", "devices": devices}]}
    return build_fabric(parse_spec(spec, "<t>"))


def test_parse_devices() -> None:
    assert parse_devices(" cpu0, cpu1 ") == ["cpu0", "cpu1"]
    for bad in ("", "cpu0,,cpu1", " , "):
        with pytest.raises(BenchInputError, match="--devices: "):
            parse_devices(bad)


def test_steps_count_float32_elements_like_nccl_tests() -> None:
    steps = make_steps(["allreduce", "allgather"], [1024, 1000, 2], 3)
    assert [(s.collective, s.nbytes, s.count) for s in steps] == [
        ("allreduce", 1024, 256),
        ("allreduce", 1000, 250),
        ("allreduce", 4, 1),
        ("allgather", 1020, 255),  # a multiple of the 3 ranks
        ("allgather", 996, 249),
        ("allgather", 12, 3),
    ]
    with pytest.raises(BenchInputError, match="--collectives: unknown collective 'bcast'"):
        make_steps(["allreduce", "bcast"], [1024], 2)


def test_physical_cores_group_hyperthreads(tmp_path: Path) -> None:
    for cpu, core in enumerate([0, 1, 0, 1]):  # two cores, two threads each
        topo = tmp_path / f"cpu{cpu}" / "topology"
        topo.mkdir(parents=True)
        (topo / "physical_package_id").write_text("0\n")
        (topo / "core_id").write_text(f"{core}\n")
    assert physical_cores((0, 1, 2, 3), tmp_path) == ((0, 2), (1, 3))
    assert physical_cores((1, 3, 9), tmp_path) == ((1, 3), (9,))  # cpu9: unreadable
