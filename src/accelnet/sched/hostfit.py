"""CPU cores and host memory beside the devices: what every placement strategy honours.

A request may ask, per rank, for CPU cores and host memory (``resources.cpus`` and
``resources.memory_gb``); hosts that declare them (``cpus``/``memory_gb`` in the fabric)
then hold only as many ranks as their free cores and memory allow, whatever devices they
have free. Strategies choose devices on the capacity index as before
(:meth:`~accelnet.sched.placement.PlacementStrategy.place_devices`); :func:`fit_hosts`
checks the hosts of their choice and, when one lacks the room, hides from the strategy the
devices such hosts cannot serve (a what-if take on the index, rolled back) and asks again:

1. up to :data:`LAZY_TRIES` times only the hosts of the rejected choice are hidden, which
   is all it takes when CPU or memory is short on a few hosts;
2. then every host that declares CPU or memory and cannot serve all its free devices is
   hidden at once (O(hosts)), so the strategy's own rule picks among exactly the devices
   that can take a rank.

Every strategy (best fit, first fit, frag-aware, comm-aware, ...) thus honours host room
without knowing of it, and a request that asks for no CPU or memory costs nothing more.
A CPU-only request (no device) takes the host with the least free CPU (then memory) that
fits it: best fit on the host's cores (:meth:`CapacityIndex.roomiest_fit`).
"""

from __future__ import annotations

from collections.abc import Callable

from accelnet.fabric import DomainLevel
from accelnet.sched.capacity import SHARE_UNITS, UNLIMITED, CapacityIndex
from accelnet.sched.request import Request
from accelnet.sched.snapshot import Placement
from accelnet.sched.topology import CPU_UNITS, MEMORY_UNITS, Topology, cpu_units, memory_units

LAZY_TRIES = 3

HostUse = tuple[tuple[str, float, float], ...]


def host_use(req: Request, devices: tuple[str, ...], topo: Topology) -> HostUse:
    """(host, cpus, memory_gb) the request holds on each host of ``devices``: per device
    (a rank each), or once per host with ``per_host``; empty if it asks for neither."""
    if not req.needs_host:
        return ()
    host_of = topo.host_of
    if len(devices) == 1:
        return ((host_of[devices[0]], req.cpus, req.memory_gb),)
    ranks: dict[str, int] = {}
    for dev in devices:
        host = host_of[dev]
        ranks[host] = ranks.get(host, 0) + 1
    if req.per_host:
        return tuple((h, req.cpus, req.memory_gb) for h in ranks)
    return tuple((h, n * req.cpus, n * req.memory_gb) for h, n in ranks.items())


def ranks_room(req: Request, index: CapacityIndex, host: str) -> int:
    """How many ranks of ``req`` ``host`` has CPU and memory for (:data:`UNLIMITED` if
    any number; with ``per_host`` that is all or nothing)."""
    cpu, mem = index.host_room(host)
    need_cpu, need_mem = cpu_units(req.cpus), memory_units(req.memory_gb)
    if req.per_host:
        return UNLIMITED if cpu >= need_cpu and mem >= need_mem else 0
    room = UNLIMITED
    if need_cpu:
        room = min(room, cpu // need_cpu)
    if need_mem:
        room = min(room, mem // need_mem)
    return room


def fit_hosts(
    place_devices: Callable[[Request, CapacityIndex], Placement | None],
    req: Request,
    index: CapacityIndex,
) -> Placement | None:
    """``place_devices``'s choice for ``req`` on devices whose hosts have the CPU and
    memory its ranks need, with the hosts' use recorded (module docstring); None if no
    such choice. Leaves ``index`` as it was."""
    topo = index.topo
    placed = place_devices(req, index)
    if placed is None:
        return None
    use = host_use(req, placed.devices, topo)
    if index.host_fits(use):  # the common case: no what-if at all
        return Placement(placed.devices, placed.share, placed.model, placed.span, use)
    mark = index.mark()
    hidden: set[str] = set()
    try:
        for tries in range(LAZY_TRIES + 1):  # the last after every short host is hidden
            short = (
                [one[0] for one in use if not index.host_fits((one,))]
                if tries < LAZY_TRIES
                else topo.limited_hosts
            )
            for host in short:
                if host not in hidden:
                    _hide(req, index, host)
                    hidden.add(host)
            placed = place_devices(req, index)
            if placed is None:
                return None
            use = host_use(req, placed.devices, topo)
            if index.host_fits(use):
                return Placement(placed.devices, placed.share, placed.model, placed.span, use)
        raise AssertionError(f"{req.job}: hidden hosts still chosen")
    finally:
        index.rollback(mark)


def _hide(req: Request, index: CapacityIndex, host: str) -> None:
    """What-if: take the free devices of ``req``'s classes on ``host`` that its CPU and
    memory cannot serve. For a share, every device once the host has room for no rank; for
    whole devices, all but as many as it has room for ranks, those kept chosen as best fit
    gathers them (one NVLink domain when one holds them), per class (a gang is of one)."""
    room = ranks_room(req, index, host)
    topo = index.topo
    devices = topo.host_devices[host]
    if room >= len(devices):
        return
    keys = {c.key for c in req.classes}
    class_of, free = topo.class_of, index.free
    if req.share < 1:
        if room < 1:
            for dev in devices:
                have = free.get(dev, 0)
                if have and class_of[dev].key in keys:
                    index.take(dev, have / SHARE_UNITS)
        return
    for key in keys:
        whole = [d for d in devices if class_of[d].key == key and free.get(d) == SHARE_UNITS]
        if len(whole) <= room:
            continue
        keep = set(_kept(index, key, whole, room))
        for dev in whole:
            if dev not in keep:
                index.take(dev, 1.0)


def _kept(index: CapacityIndex, key: str, whole: list[str], room: int) -> list[str]:
    """``room`` of the wholly free ``whole`` devices (of class ``key``, on one host) to
    leave visible: as best fit gathers them in the host's domain node, else the first."""
    if room <= 0:
        return []
    from accelnet.sched.placement import gather  # noqa: PLC0415 (placement imports this)

    topo = index.topo
    node = next((n for n in topo.chain[whole[0]] if topo.nodes[n].level is DomainLevel.HOST), None)
    if node is None or index.whole_free(key, node) < room:
        return whole[:room]
    return gather(index, key, node, room)


def place_on_host(req: Request, index: CapacityIndex) -> Placement | None:
    """A CPU-only request on the host with the least free CPU (then memory) that fits."""
    host = index.roomiest_fit(cpu_units(req.cpus), memory_units(req.memory_gb))
    if host is None:
        return None
    return Placement((), 1.0, "", DomainLevel.HOST, ((host, req.cpus, req.memory_gb),))


def explain_hosts(req: Request, index: CapacityIndex) -> str:
    """Why a CPU-only request, or the ranks of one whose devices are free, find no host:
    the most free CPU and memory on any host."""
    topo = index.topo
    best_cpu = max((c for h, c in index.cpu.items() if index.host_schedulable(h)), default=None)
    best_mem = max((m for h, m in index.mem.items() if index.host_schedulable(h)), default=None)
    parts = []
    if req.cpus and best_cpu is not None:
        parts.append(f"{best_cpu / CPU_UNITS:g} CPUs")
    if req.memory_gb and best_mem is not None:
        parts.append(f"{best_mem / MEMORY_UNITS:g} GB")
    most = f"; the most free on a host: {', '.join(parts)}" if parts else ""
    if req.cpu_only:
        schedulable = any(index.host_schedulable(h) for h in topo.hosts)
        note = "" if schedulable else " (no host has a schedulable device)"
        return f"needs {req.host_what()} on one host{most}{note}"
    return (
        f"needs {req.host_what()} per {'host' if req.per_host else 'rank'} beside its "
        f"devices; no host with free devices has that room{most}"
    )
