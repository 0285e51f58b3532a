"""Telemetry of this machine's CPU devices through psutil and Linux sysfs.

Discovery makes CPU devices per physical core (``cpu0`` = the core with the lowest logical
CPU, and so on), per socket (``cpuK`` on NUMA node K) or as N devices over the cores; each
device here gets the logical CPUs of its cores (:func:`cpu_groups`), or the ones given.

Per device and sample: utilization (busy share of its logical CPUs' time since the previous
sample, from ``psutil.cpu_times(percpu=True)``: None in the first sample), the host's memory
(CPU devices share it: used = total - available), temperature where the OS gives it
(``psutil.sensors_temperatures``: the core's ``coretemp`` reading, else its package's, else a
whole-CPU sensor) and RAPL energy where ``/sys/class/powercap/intel-rapl:N/energy_uj`` is
readable (often root only): the package counter, unwrapped with ``max_energy_range_uj``, is
split evenly among the package's devices, and power is its rate between samples.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psutil

from accelnet.devices.telemetry import DeviceSample, Sampler

if TYPE_CHECKING:
    from accelnet.fabric.model import Device

SYSFS_CPU = Path("/sys/devices/system/cpu")
POWERCAP = Path("/sys/class/powercap")
_WHOLE_CPU_SENSORS = ("k10temp", "zenpower", "cpu_thermal", "cpu-thermal", "soc_thermal")


@dataclass(frozen=True, slots=True)
class Core:
    """One physical core: its logical CPUs, package (socket) and core id."""

    cpus: tuple[int, ...]
    package: int
    core_id: int


def physical_cores(n_cpus: int, root: Path = SYSFS_CPU) -> tuple[Core, ...]:
    """Logical CPUs ``0..n_cpus-1`` grouped by (package, core id), ordered by lowest CPU.
    A CPU whose topology cannot be read is a core of its own in package 0."""
    groups: dict[tuple[int, int], list[int]] = {}
    for cpu in range(n_cpus):
        topo = root / f"cpu{cpu}" / "topology"
        try:
            key = (
                int((topo / "physical_package_id").read_text()),
                int((topo / "core_id").read_text()),
            )
        except (OSError, ValueError):
            key = (0, -1 - cpu)
        groups.setdefault(key, []).append(cpu)
    cores = [Core(tuple(sorted(c)), p, i) for (p, i), c in groups.items()]
    return tuple(sorted(cores, key=lambda c: c.cpus[0]))


def cpu_groups(devices: Sequence[Device], cores: Sequence[Core]) -> dict[str, tuple[Core, ...]]:
    """The cores of each CPU device, as discovery laid them out: one core per device when
    there are as many devices as cores, one package per device when each device sits on its
    own NUMA node and there are as many packages, else the cores split evenly in order."""
    n = len(devices)
    packages = sorted({c.package for c in cores})
    numas = [d.numa for d in devices]
    if n == len(cores):
        return {d.id: (c,) for d, c in zip(devices, cores, strict=True)}
    if n == len(packages) and sorted(numas) == packages:
        return {d.id: tuple(c for c in cores if c.package == d.numa) for d in devices}
    out = {}
    for k, d in enumerate(devices):
        chunk = tuple(cores[k * len(cores) // n : (k + 1) * len(cores) // n])
        out[d.id] = chunk or (cores[k % len(cores)],)
    return out


def temperatures(sensors: Mapping[str, Sequence[Any]]) -> dict[tuple[int, int | None], float]:
    """(package, core id) -> C from ``psutil.sensors_temperatures()``; (package, None) is a
    package's (or, for package 0 from a whole-CPU sensor, the CPU's) temperature."""
    out: dict[tuple[int, int | None], float] = {}
    package = 0
    for entry in sensors.get("coretemp", ()):  # "Package id P", then "Core C" of that package
        label = str(entry.label)
        if label.startswith("Package id "):
            with contextlib.suppress(ValueError):
                package = int(label.removeprefix("Package id "))
            out[(package, None)] = float(entry.current)
        elif label.startswith("Core "):
            with contextlib.suppress(ValueError):
                out[(package, int(label.removeprefix("Core ")))] = float(entry.current)
    if out:
        return out
    for name in _WHOLE_CPU_SENSORS:  # k10temp: one Tctl (and on Zen 1/2 a Tdie) per package
        entries = list(sensors.get(name, ()))
        dies = [e for e in entries if e.label == "Tdie"] or [
            e for e in entries if e.label == "Tctl"
        ]
        for p, e in enumerate(dies or entries[:1]):
            out[(p, None)] = float(e.current)
        if out:
            break
    return out


class _Rapl:
    """One package's RAPL counter, unwrapped into a monotonic total (uJ)."""

    def __init__(self, path: Path) -> None:
        self.path = path / "energy_uj"
        self.range = int((path / "max_energy_range_uj").read_text())
        self.last = int(self.path.read_text())  # raises if unreadable: no RAPL then
        self.total = self.last

    def read(self) -> int:
        raw = int(self.path.read_text())
        self.total += raw - self.last if raw >= self.last else raw + self.range - self.last
        self.last = raw
        return self.total


def rapl_packages(root: Path = POWERCAP) -> dict[int, _Rapl]:
    """Readable package-level RAPL zones (``intel-rapl:N``, name ``package-N``) by package."""
    out = {}
    for zone in sorted(root.glob("intel-rapl:*")):
        if zone.name.count(":") != 1:
            continue  # a sub-zone (core, dram)
        try:
            name = (zone / "name").read_text().strip()
            package = int(name.removeprefix("package-")) if name.startswith("package-") else -1
            if package >= 0:
                out[package] = _Rapl(zone)
        except (OSError, ValueError):
            continue  # unreadable (root only on most kernels since 2020)
    return out


class HostSampler(Sampler):
    """Samples CPU devices of this machine (see the module docstring).

    ``devices``: fabric devices of this host; those of kind ``cpu`` are sampled, in index
    order. ``cpus`` overrides the logical CPUs of a device. ``sensors`` replaces
    ``psutil.sensors_temperatures`` and ``powercap`` the RAPL root (tests). Temperatures are
    read every ``slow_every``-th sample (hwmon reads are the costly part) and repeated between.
    """

    source = "host"

    def __init__(
        self,
        devices: Iterable[Device],
        *,
        cpus: Mapping[str, Sequence[int]] | None = None,
        sensors: Callable[[], Mapping[str, Sequence[Any]]] | None = None,
        powercap: Path = POWERCAP,
        sysfs_cpu: Path = SYSFS_CPU,
        slow_every: int = 1,
    ) -> None:
        if slow_every < 1:
            raise ValueError(f"slow_every must be >= 1, got {slow_every}")
        devs = sorted((d for d in devices if d.kind == "cpu"), key=lambda d: (d.host, d.index))
        n_cpus = len(psutil.cpu_times(percpu=True))
        cores = physical_cores(n_cpus, sysfs_cpu)
        self._groups = cpu_groups(devs, cores) if devs else {}
        self._cpus = {d: tuple(c for core in g for c in core.cpus) for d, g in self._groups.items()}
        for did, given in (cpus or {}).items():
            if did not in self._cpus:
                raise KeyError(f"{did!r} is not a CPU device of this sampler")
            self._cpus[did] = tuple(given)
        self._ids = tuple(d.id for d in devs)
        self._sensors = sensors if sensors is not None else _psutil_temperatures
        self._rapl = rapl_packages(powercap)
        shares: dict[int, int] = {}
        for g in self._groups.values():
            for p in {c.package for c in g}:
                shares[p] = shares.get(p, 0) + 1
        self._shares = shares
        self._slow_every = slow_every
        self._rounds = 0
        self._temps: dict[tuple[int, int | None], float] = {}
        self._last_times: list[tuple[float, float]] | None = None  # (busy, total) per CPU
        self._last_energy: tuple[float, dict[int, int]] | None = None

    def devices(self) -> tuple[str, ...]:
        """The CPU device ids, in host index order."""
        return self._ids

    def cpus(self, device: str) -> tuple[int, ...]:
        """The logical CPUs ``device`` stands for."""
        return self._cpus[device]

    @property
    def rapl_readable(self) -> bool:
        """Whether RAPL energy counters could be read here."""
        return bool(self._rapl)

    def sample(self, now: float) -> list[DeviceSample]:
        """One sample per CPU device."""
        times = [_busy_total(t) for t in psutil.cpu_times(percpu=True)]
        last, self._last_times = self._last_times, times
        vm = psutil.virtual_memory()
        if self._rounds % self._slow_every == 0:
            try:
                self._temps = temperatures(self._sensors())
            except (OSError, ValueError):
                self._temps = {}
        self._rounds += 1
        energy = {p: r.read() for p, r in self._rapl.items()}
        prev, self._last_energy = self._last_energy, (now, energy)
        out = []
        for did in self._ids:
            cpus = [c for c in self._cpus[did] if c < len(times)]
            util = None
            if last is not None and cpus:
                busy = sum(times[c][0] - last[c][0] for c in cpus)
                total = sum(times[c][1] - last[c][1] for c in cpus)
                util = min(100.0, max(0.0, 100.0 * busy / total)) if total > 0 else 0.0
            packages = sorted({c.package for c in self._groups[did]})
            e_j, p_w = self._energy(packages, energy, now, prev)
            out.append(
                DeviceSample(
                    device=did,
                    time=now,
                    source=self.source,
                    utilization_pct=util,
                    mem_used_bytes=int(vm.total - vm.available),
                    mem_total_bytes=int(vm.total),
                    temperature_c=self._temperature(did, packages),
                    energy_j=e_j,
                    power_w=p_w,
                )
            )
        return out

    def _temperature(self, did: str, packages: list[int]) -> float | None:
        temps = self._temps
        cores = [
            temps[(c.package, c.core_id)]
            for c in self._groups[did]
            if (c.package, c.core_id) in temps
        ]
        if cores:
            return max(cores)
        pkgs = [temps[(p, None)] for p in packages if (p, None) in temps]
        if pkgs:
            return max(pkgs)
        return temps.get((0, None)) if len(temps) == 1 else None

    def _energy(
        self,
        packages: list[int],
        energy: dict[int, int],
        now: float,
        prev: tuple[float, dict[int, int]] | None,
    ) -> tuple[float | None, float | None]:
        if not packages or any(p not in energy for p in packages):
            return None, None
        e_j = sum(energy[p] / self._shares[p] for p in packages) / 1e6
        if prev is None or now <= prev[0]:
            return e_j, None
        before = sum(prev[1][p] / self._shares[p] for p in packages) / 1e6
        return e_j, (e_j - before) / (now - prev[0])


def _busy_total(t: Any) -> tuple[float, float]:
    """(busy, total) seconds of one CPU, as psutil's cpu_percent counts them."""
    total = sum(t) - getattr(t, "guest", 0.0) - getattr(t, "guest_nice", 0.0)
    idle = t.idle + getattr(t, "iowait", 0.0)
    return total - idle, total


def _psutil_temperatures() -> Mapping[str, Sequence[Any]]:
    read = getattr(psutil, "sensors_temperatures", None)  # absent on macOS and Windows
    return read() if read is not None else {}
