"""The host (psutil) and emulated-device samplers on this machine, with real processes, plus
their parsing of sensors, sysfs topology and RAPL counters on recorded trees."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import namedtuple
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pynvml
import pytest

from accelnet.devices.samplers import EmulatedSampler, HostSampler, Poller
from accelnet.devices.samplers.host import Core, cpu_groups, physical_cores, temperatures
from accelnet.fabric import DeviceKind
from accelnet.fabric.discovery import discover
from tests.fabric import nvml_fake as nf

Temp = namedtuple("Temp", "label current high critical")  # psutil's shwtemp


class Cpu:
    """The fields of a fabric CPU device the host sampler reads."""

    def __init__(self, index: int, numa: int = 0, host: str = "h") -> None:
        self.id, self.host, self.index, self.numa = f"{host}/cpu{index}", host, index, numa
        self.kind = DeviceKind.CPU


def local_cpus(mode: Any = "per-core") -> list[Any]:
    """This machine's CPU devices as discovery makes them (GPUs left out)."""
    no_gpu = nf.FakeNvml(nf.dgx_h100(), init_error=pynvml.NVMLError_DriverNotLoaded())
    fabric = discover(cpu_devices=mode, nvml=no_gpu, hostname="here").fabric
    return list(fabric.devices.values())


# ----- the host sampler on this machine -----------------------------------------------------


def spin(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def test_host_sampler_reads_this_machine() -> None:
    devices = local_cpus("per-core")
    s = HostSampler(devices)
    assert s.devices() == tuple(d.id for d in devices)
    first = s.sample(0.0)
    assert [x.utilization_pct for x in first] == [None] * len(devices)  # no interval yet
    spin(0.1)  # some CPU time to see
    second = s.sample(1.0)
    total = psutil.virtual_memory().total
    for x in second:
        assert x.source == "host" and x.time == 1.0
        assert x.utilization_pct is not None and 0.0 <= x.utilization_pct <= 100.0
        assert x.mem_total_bytes == total
        assert x.mem_used_bytes is not None and 0 < x.mem_used_bytes <= total
        assert x.temperature_c is None or 0 < x.temperature_c < 130
        assert x.power_w is None or 0 <= x.power_w < 2000
        assert x.xid_events is None and x.errors == ()
    assert sum(x.utilization_pct or 0.0 for x in second) > 0.0  # our spin shows somewhere
    # every logical CPU belongs to exactly one device
    cpus = [c for d in s.devices() for c in s.cpus(d)]
    assert sorted(cpus) == list(range(len(psutil.cpu_times(percpu=True))))


def test_per_socket_devices_cover_their_node() -> None:
    s = HostSampler(local_cpus("per-socket"))
    assert len(s.devices()) >= 1
    assert sorted(c for d in s.devices() for c in s.cpus(d)) == list(
        range(len(psutil.cpu_times(percpu=True)))
    )
    assert all(x.mem_total_bytes for x in s.sample(0.0))


def test_host_sampling_is_cheap() -> None:
    s = HostSampler(local_cpus("per-core"))
    p = Poller([s], period_s=1.0)
    for t in range(50):
        p.poll(float(t))
    (cost,) = p.costs()
    assert cost.device_samples == 50 * len(s.devices())
    assert cost.per_device_sample_s < 0.5  # typically tens of microseconds; loose: no timing pin


# ----- layout, sensors and RAPL on recorded trees -------------------------------------------


def write_topology(root: Path, layout: list[tuple[int, int]]) -> None:
    """cpuN/topology for logical CPU N at (package, core id) = layout[N]."""
    for cpu, (package, core) in enumerate(layout):
        topo = root / f"cpu{cpu}" / "topology"
        topo.mkdir(parents=True)
        (topo / "physical_package_id").write_text(f"{package}\n")
        (topo / "core_id").write_text(f"{core}\n")


def test_physical_cores_group_hyperthreads(tmp_path: Path) -> None:
    # 2 sockets x 2 cores x 2 threads, numbered as Linux does: threads of a core far apart
    write_topology(tmp_path, [(0, 0), (0, 1), (1, 0), (1, 1), (0, 0), (0, 1), (1, 0), (1, 1)])
    cores = physical_cores(9, tmp_path)  # CPU 8 has no topology: a core of its own
    assert [c.cpus for c in cores] == [(0, 4), (1, 5), (2, 6), (3, 7), (8,)]
    assert [c.package for c in cores] == [0, 0, 1, 1, 0]


def test_cpu_groups_follow_discovery_modes() -> None:
    cores = [Core((0, 4), 0, 0), Core((1, 5), 0, 1), Core((2, 6), 1, 0), Core((3, 7), 1, 1)]
    per_core = cpu_groups([Cpu(i, numa=i // 2) for i in range(4)], cores)
    assert [g[0].cpus for g in per_core.values()] == [(0, 4), (1, 5), (2, 6), (3, 7)]
    per_socket = cpu_groups([Cpu(0, 0), Cpu(1, 1)], cores)
    assert [[c.cpus for c in g] for g in per_socket.values()] == [
        [(0, 4), (1, 5)],
        [(2, 6), (3, 7)],
    ]
    three = cpu_groups([Cpu(i) for i in range(3)], cores)
    assert [len(g) for g in three.values()] == [1, 1, 2]
    six = cpu_groups([Cpu(i) for i in range(6)], cores)
    assert all(len(g) == 1 for g in six.values())  # more devices than cores: shared


def test_temperatures_from_coretemp_k10temp_and_others() -> None:
    coretemp = {
        "coretemp": [
            Temp("Package id 0", 55.0, 80, 100),
            Temp("Core 0", 50.0, 80, 100),
            Temp("Core 1", 53.0, 80, 100),
            Temp("Package id 1", 61.0, 80, 100),
            Temp("Core 0", 60.0, 80, 100),
        ],
        "acpitz": [Temp("", 27.8, None, None)],
    }
    assert temperatures(coretemp) == {
        (0, None): 55.0,
        (0, 0): 50.0,
        (0, 1): 53.0,
        (1, None): 61.0,
        (1, 0): 60.0,
    }
    k10 = {"k10temp": [Temp("Tctl", 70.0, None, None), Temp("Tccd1", 60.0, None, None)] * 2}
    assert temperatures(k10) == {(0, None): 70.0, (1, None): 70.0}
    zen2 = {"k10temp": [Temp("Tctl", 80.0, None, None), Temp("Tdie", 70.0, None, None)]}
    assert temperatures(zen2) == {(0, None): 70.0}
    assert temperatures({"cpu_thermal": [Temp("", 45.0, None, None)]}) == {(0, None): 45.0}
    assert temperatures({"nvme": [Temp("Composite", 40.0, None, None)]}) == {}


def test_host_sampler_reports_core_then_package_temperature(tmp_path: Path) -> None:
    n = len(psutil.cpu_times(percpu=True))
    write_topology(tmp_path, [(0, i) for i in range(n)])
    sensors = {"coretemp": [Temp("Package id 0", 66.0, 0, 0), Temp("Core 0", 58.0, 0, 0)]}
    s = HostSampler([Cpu(i) for i in range(n)], sensors=lambda: sensors, sysfs_cpu=tmp_path)
    got = s.sample(0.0)
    assert got[0].temperature_c == 58.0  # its core
    assert all(x.temperature_c == 66.0 for x in got[1:])  # no core reading: the package's


def write_rapl(root: Path, package: int, uj: int, max_uj: int = 262_143_328_850) -> Path:
    zone = root / f"intel-rapl:{package}"
    zone.mkdir(parents=True, exist_ok=True)
    (zone / "name").write_text(f"package-{package}\n")
    (zone / "energy_uj").write_text(f"{uj}\n")
    (zone / "max_energy_range_uj").write_text(f"{max_uj}\n")
    sub = zone / f"intel-rapl:{package}:0"  # the "core" sub-zone: not a package
    sub.mkdir(exist_ok=True)
    (sub / "name").write_text("core\n")
    (sub / "energy_uj").write_text("5\n")
    (sub / "max_energy_range_uj").write_text(f"{max_uj}\n")
    return zone


def test_rapl_energy_is_unwrapped_and_split_among_a_packages_devices(tmp_path: Path) -> None:
    n = len(psutil.cpu_times(percpu=True))
    topo, cap = tmp_path / "cpu", tmp_path / "powercap"
    # the first logical CPU on package 0, the rest on package 1
    write_topology(topo, [(0, 0)] + [(1, i) for i in range(1, n)])
    max_uj = 1_000_000_000
    z0 = write_rapl(cap, 0, 999_000_000, max_uj)
    z1 = write_rapl(cap, 1, 10_000_000, max_uj)
    s = HostSampler([Cpu(i) for i in range(n)], powercap=cap, sysfs_cpu=topo)
    assert s.rapl_readable
    a = s.sample(0.0)
    assert a[0].energy_j == pytest.approx(999.0) and a[0].power_w is None
    (z0 / "energy_uj").write_text("49000000\n")  # wrapped: 1000 J range, +50 J
    (z1 / "energy_uj").write_text(f"{10_000_000 + 200_000_000}\n")  # +200 J
    b = s.sample(2.0)
    assert b[0].energy_j == pytest.approx(1049.0)
    assert b[0].power_w == pytest.approx(25.0)
    shares = n - 1  # package 1's devices share its counter evenly
    for x in b[1:]:
        assert x.power_w == pytest.approx(100.0 / shares)
        assert x.energy_j == pytest.approx(210.0 / shares)


def test_no_rapl_no_energy(tmp_path: Path) -> None:
    s = HostSampler([Cpu(0)], powercap=tmp_path / "absent")
    assert not s.rapl_readable
    x = s.sample(0.0)[0]
    assert (x.energy_j, x.power_w) == (None, None)


# ----- emulated devices: a real worker process and its child --------------------------------

WORKER = """
import subprocess, sys
ballast = b"x" * 60_000_000
child = subprocess.Popen([sys.executable, "-c",
    "import time; ballast = b'y' * 40_000_000; print('up', flush=True); time.sleep(120)"],
    stdout=subprocess.PIPE)
child.stdout.readline()
print(child.pid, flush=True)
while True:
    pass
"""


@pytest.fixture
def worker() -> Iterator[subprocess.Popen[str]]:
    proc = subprocess.Popen(
        [sys.executable, "-c", WORKER], stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        assert proc.stdout is not None
        proc.stdout.readline()  # the child is up, with its ballast
        yield proc
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def cpu_seconds(pid: int) -> float:
    t = psutil.Process(pid).cpu_times()
    return t.user + t.system


def test_emulated_device_reports_its_workers_cpu_and_memory(
    worker: subprocess.Popen[str],
) -> None:
    pids: dict[str, int | None] = {"lab/gpu0": worker.pid, "lab/gpu1": None}
    s = EmulatedSampler(["lab/gpu0", "lab/gpu1"], pids.get)
    alone = EmulatedSampler(["lab/gpu0"], pids.get, include_children=False)
    a, idle = s.sample(0.0)
    assert a.proc_cpu_pct is None  # no interval yet
    assert a.proc_rss_bytes is not None and a.proc_rss_bytes > 100_000_000  # worker + child
    assert (idle.utilization_pct, idle.proc_rss_bytes) == (0.0, None)  # no worker: idle
    (solo,) = alone.sample(0.0)
    assert solo.proc_rss_bytes is not None and 60_000_000 < solo.proc_rss_bytes < 100_000_000
    start = cpu_seconds(worker.pid)
    deadline = time.monotonic() + 30
    while cpu_seconds(worker.pid) < start + 0.2:  # the worker spins: wait for its CPU time
        assert time.monotonic() < deadline, "the worker got no CPU time"
    b = s.sample(1.0)[0]
    assert b.proc_cpu_pct is not None and b.proc_cpu_pct >= 15.0  # >= 0.2 s over 1 "second"
    assert b.utilization_pct == min(b.proc_cpu_pct, 100.0)
    assert b.mem_used_bytes == b.proc_rss_bytes


def test_a_worker_that_dies_or_is_replaced() -> None:
    first = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    second = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    pid = {"d": first.pid}
    s = EmulatedSampler(["d"], pid.get)
    try:
        assert s.sample(0.0)[0].proc_rss_bytes
        s.sample(1.0)
        first.kill()
        first.wait()
        gone = s.sample(2.0)[0]
        assert gone.utilization_pct == 0.0 and gone.proc_cpu_pct is None
        assert gone.errors == (f"worker {first.pid}: gone",)
        pid["d"] = second.pid  # the backend recycled the worker
        fresh = s.sample(3.0)[0]
        assert fresh.errors == () and fresh.proc_cpu_pct is None  # a new interval starts
        assert s.sample(4.0)[0].proc_cpu_pct is not None
    finally:
        for p in (first, second):
            p.kill()
            p.wait()


SPAWNER = """
import subprocess, sys
sys.stdin.readline()  # told to start a command
child = subprocess.Popen([sys.executable, "-c",
    "import time; ballast = b'z' * 80_000_000; print('up', flush=True); time.sleep(120)"],
    stdout=subprocess.PIPE)
child.stdout.readline()
print("started", flush=True)
sys.stdin.readline()
"""


def test_children_are_found_at_the_next_tree_scan() -> None:
    worker = subprocess.Popen(
        [sys.executable, "-c", SPAWNER],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    assert worker.stdin is not None and worker.stdout is not None
    try:
        s = EmulatedSampler(["d"], {"d": worker.pid}.get, tree_every=2)
        before = s.sample(0.0)[0].proc_rss_bytes  # scanned: no child yet
        assert before is not None and before < 80_000_000
        worker.stdin.write("go\n")
        worker.stdin.flush()
        assert worker.stdout.readline().strip() == "started"
        unscanned = s.sample(1.0)[0].proc_rss_bytes  # no scan: the child is not seen yet
        assert unscanned is not None and unscanned < before + 40_000_000
        after = s.sample(2.0)[0].proc_rss_bytes  # scanned: the child and its ballast
        assert after is not None and after > before + 80_000_000
    finally:
        os.killpg(worker.pid, signal.SIGKILL)
        worker.wait()
