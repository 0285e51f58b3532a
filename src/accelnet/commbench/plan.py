"""What a collective benchmark will run: devices in ring order, the backend, and how each
rank binds to its device. Pure but for the facts passed in (the local machine's fabric and
cores); every problem is a :class:`BenchInputError` raised before any process starts."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from accelnet.comm import CommError, Communicator, CostModel
from accelnet.comm.ring import ring_order
from accelnet.commbench.errors import BenchInputError
from accelnet.fabric import Device, DeviceKind, Fabric

Backend = Literal["gloo", "nccl"]
_NUMBER = re.compile(r"(\d+)$")


@dataclass(frozen=True, slots=True)
class RankBinding:
    """One rank's device: for a CPU core the logical CPUs to pin the worker to (empty: no
    pinning), for a GPU its CUDA index (the number ending its name, as NVML numbers it)."""

    rank: int
    device: str
    kind: DeviceKind
    cpus: tuple[int, ...] = ()
    cuda_index: int | None = None


@dataclass(frozen=True)
class BenchPlan:
    """Ranks in ring order (``comm.ranks[k]`` is rank ``k``), the torch backend, the
    bindings by rank, and the locality levels of the ring's hops (distinct, in ring order)."""

    comm: Communicator
    backend: Backend
    bindings: tuple[RankBinding, ...]
    levels: tuple[str, ...]

    @property
    def ranks(self) -> int:
        """Number of ranks (worker processes)."""
        return self.comm.size


def parse_devices(text: str) -> list[str]:
    """``"cpu0, cpu1"`` -> ``["cpu0", "cpu1"]``; BenchInputError if it names none."""
    refs = [r.strip() for r in text.split(",")]
    if not text.strip() or any(not r for r in refs):
        raise BenchInputError(f"--devices: {text!r} is not a comma list of devices (cpu0,cpu1)")
    return refs


def default_devices(local: Fabric) -> list[str]:
    """This machine's NVIDIA GPUs, or else its CPU cores (local names)."""
    devs = list(local.devices.values())
    gpus = [d.name for d in devs if d.kind is DeviceKind.GPU and d.model.vendor == "nvidia"]
    return gpus or [d.name for d in devs if d.kind is DeviceKind.CPU]


def plan_bench(
    fabric: Fabric,
    devices: Sequence[str] | None,
    local: Fabric,
    cores: Sequence[tuple[int, ...]],
    model: CostModel | None = None,
    pin: bool = True,
) -> BenchPlan:
    """Check ``devices`` (references into ``fabric``; None: :func:`default_devices`) and
    plan the run: each device must exist on this machine (``local``, by name and kind),
    appear once, and be of one kind with a backend; CPU device ``cpuK`` is physical core K
    of ``cores`` (its logical CPUs). Ranks follow :func:`ring_order` under ``model``.

    Raises BenchInputError naming ``--devices`` and the device at fault.
    """
    refs = list(devices) if devices is not None else default_devices(local)
    if len(refs) < 2:
        raise BenchInputError(
            f"--devices: a collective needs at least 2 devices, got {len(refs)} "
            f"({', '.join(refs) or 'none'})"
        )
    chosen: list[Device] = []
    for ref in refs:
        try:
            dev = fabric.device(ref)
        except KeyError as e:
            raise BenchInputError(f"--devices: {e.args[0]}") from None
        if dev in chosen:
            raise BenchInputError(f"--devices: {ref!r} appears twice ({dev.id})")
        chosen.append(dev)
    _check_local(chosen, local)
    backend = _backend(chosen)
    try:
        comm = ring_order(Communicator(fabric, [d.id for d in chosen]), model or CostModel())
    except CommError as e:  # pragma: no cover - devices were checked above
        raise BenchInputError(f"--devices: {e}") from None
    bindings = tuple(
        _bind(rank, fabric.devices[dev], cores, pin) for rank, dev in enumerate(comm.ranks)
    )
    levels: list[str] = []
    for k in range(comm.size):
        name = comm.route(k, (k + 1) % comm.size).level.name
        if name not in levels:
            levels.append(name)
    return BenchPlan(comm, backend, bindings, tuple(levels))


def _check_local(chosen: Sequence[Device], local: Fabric) -> None:
    here = {d.name: d for d in local.devices.values()}
    for dev in chosen:
        twin = here.get(dev.name)
        if twin is None or twin.kind is not dev.kind:
            have = ", ".join(here) or "no devices"
            raise BenchInputError(
                f"--devices: {dev.id} is not on this machine ({local.name} has {have})"
            )


def _backend(chosen: Sequence[Device]) -> Backend:
    kinds = {d.kind for d in chosen}
    if kinds == {DeviceKind.CPU}:
        return "gloo"
    if kinds == {DeviceKind.GPU} and all(d.model.vendor == "nvidia" for d in chosen):
        return "nccl"
    if len(kinds) > 1:
        listed = ", ".join(f"{d.id} ({d.kind.value})" for d in chosen)
        raise BenchInputError(
            f"--devices: mixes device kinds ({listed}); choose CPU cores (gloo) or "
            "NVIDIA GPUs (NCCL)"
        )
    odd = chosen[0]
    raise BenchInputError(
        f"--devices: no collective backend for {odd.id} ({odd.kind.value}, "
        f"{odd.model.vendor}); gloo runs on CPU cores, NCCL on NVIDIA GPUs"
    )


def _bind(rank: int, dev: Device, cores: Sequence[tuple[int, ...]], pin: bool) -> RankBinding:
    number = _NUMBER.search(dev.name)
    if number is None:
        raise BenchInputError(
            f"--devices: cannot tell which {dev.kind.value} {dev.id} is: its name ends in no number"
        )
    k = int(number.group(1))
    if dev.kind is DeviceKind.GPU:
        return RankBinding(rank, dev.id, dev.kind, cuda_index=k)
    if k >= len(cores):
        raise BenchInputError(
            f"--devices: {dev.id} is core {k}, but this process may run on "
            f"{len(cores)} core(s) only"
        )
    return RankBinding(rank, dev.id, dev.kind, cpus=cores[k] if pin else ())
