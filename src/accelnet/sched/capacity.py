"""Free capacity, indexed so that a placement touches a handful of entries, not the fabric.

For every device class and node of the domain tree the index keeps how many *wholly free*
devices the node has, and buckets of nodes by that count (per depth, level and the set of
levels the node lies within), so "the smallest domain with at least k free" is a walk over
a few distinct counts. Partly used devices (fractional shares) are kept sorted by free
share per class for best-fit packing. Only schedulable devices ever count as free, even in
what-if releases. Every change is logged so that what-if questions (would this job fit if
those jobs were preempted?) can be rolled back exactly.

Shares are whole multiples of 1/``SHARE_UNITS`` and kept as integers, so a device is
wholly free exactly when no unit of it is used.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, TypeAlias

from sortedcontainers import SortedList

from accelnet.fabric import DomainLevel
from accelnet.sched.room import Journals, RoomView
from accelnet.sched.snapshot import Placement
from accelnet.sched.topology import DEPTHS, Topology, cpu_units, memory_units

SHARE_UNITS = 100  # the finest share of a device a job can ask for: 0.01
HOST_CPU = "\x00"  # log keys of a host's free CPU units and memory units: prefix + host
HOST_MEM = "\x01"
UNLIMITED = 1 << 62  # the room of a host that does not declare CPU cores or memory
PARENT_SCAN = 16  # parents best_fit looks at, at most, for a fuller one (its tie-break)
SMALL_NODES = 2048  # nodes of one count kept as a plain sorted list (see Counts)

BucketKey = tuple[DomainLevel, frozenset[DomainLevel]]


def host_units(hosts: Iterable[tuple[str, float, float]]) -> Iterator[tuple[str, int, int]]:
    """(host, CPU units, memory units) of each (host, cpus, memory_gb) a placement holds."""
    for host, cpus, gb in hosts:
        yield host, cpu_units(cpus), memory_units(gb)


def tally_hosts(
    tally: dict[str, tuple[int, int]], hosts: Iterable[tuple[str, float, float]], sign: int = 1
) -> None:
    """Add (``sign`` -1: take off) the CPU and memory units ``hosts`` hold to ``tally``
    (host -> units held); a host back at nothing is dropped."""
    for host, cpu, mem in host_units(hosts):
        had_cpu, had_mem = tally.get(host, (0, 0))
        now = (had_cpu + sign * cpu, had_mem + sign * mem)
        if now == (0, 0):
            tally.pop(host, None)
        else:
            tally[host] = now


def units(share: float) -> int:
    """A share (0..1] as whole units of 1/SHARE_UNITS."""
    return round(share * SHARE_UNITS)


Nodes: TypeAlias = "list[int] | SortedList"  # node positions, ascending


class Counts(dict[int, Nodes]):
    """Nodes (as their fabric order, sorted) by how many wholly free devices they have,
    and the counts that have nodes in ``sorted`` (ascending), so that the smallest count
    >= k is one bisection, however many distinct counts a large fabric has. The nodes of
    a count are a plain list while few (bisection in C is several times faster than a
    SortedList's Python) and a SortedList once they reach :data:`SMALL_NODES` (an
    insertion into a long list moves half of it). An emptied entry stays, to be reused."""

    __slots__ = ("sorted",)

    def __init__(self) -> None:
        super().__init__()
        self.sorted: list[int] = []

    def add(self, count: int, pos: int) -> None:
        """Node ``pos`` now has ``count``."""
        nodes = self.get(count)
        if nodes is None:
            nodes = self[count] = []
        if not nodes:
            bisect.insort(self.sorted, count)
        if not isinstance(nodes, list):
            nodes.add(pos)
        elif len(nodes) < SMALL_NODES:
            bisect.insort(nodes, pos)
        else:
            self[count] = SortedList((*nodes, pos))

    def discard(self, count: int, pos: int) -> None:
        """Node ``pos`` no longer has ``count``."""
        nodes = self[count]
        if isinstance(nodes, list):
            del nodes[bisect.bisect_left(nodes, pos)]
        else:
            nodes.remove(pos)
        if not nodes:
            del self.sorted[bisect.bisect_left(self.sorted, count)]

    def at_least(self, k: int) -> int | None:
        """The smallest count >= ``k`` (None: none)."""
        i = bisect.bisect_left(self.sorted, k)
        return self.sorted[i] if i < len(self.sorted) else None

    def clone(self) -> Counts:
        """An independent copy."""
        twin = Counts()
        twin.update((c, nodes.copy()) for c, nodes in self.items() if nodes)
        twin.sorted = list(self.sorted)
        return twin


class Schedulable:
    """The devices that may take work: every device of the topology (``known``) but the
    ``down`` ones (draining, unhealthy, offline, ...), kept as the few that are down so
    that copying an index costs little on a large fabric."""

    __slots__ = ("down", "known")

    def __init__(self, known: Mapping[str, object], down: set[str]) -> None:
        self.known = known
        self.down = down

    def __contains__(self, dev: object) -> bool:
        return dev in self.known and dev not in self.down


class CapacityIndex:
    """Free units of schedulable devices, with per-node counts of wholly free ones."""

    def __init__(
        self,
        topo: Topology,
        free: Mapping[str, float],
        host_used: Mapping[str, tuple[int, int]] | None = None,
    ) -> None:
        """``free``: free share (0..1] of every schedulable device; others are absent.
        ``host_used``: CPU units and memory units jobs hold per host (none if absent)."""
        self.topo = topo
        used = host_used or {}
        # free CPU and memory units per host that declares them: a frozen copy reads
        # them through views (accelnet.sched.room), which each change is journalled for
        self.cpu: dict[str, int] | RoomView = {
            h: max(0, cap - used.get(h, (0, 0))[0]) for h, cap in topo.host_cpu.items()
        }
        self.mem: dict[str, int] | RoomView = {
            h: max(0, cap - used.get(h, (0, 0))[1]) for h, cap in topo.host_mem.items()
        }
        self._views = (Journals(), Journals())  # of cpu, of mem
        self._roomy: SortedList | None = None  # see roomiest_fit; made on first use
        self.schedulable = Schedulable(topo.class_of, {d for d in topo.class_of if d not in free})
        self.free: dict[str, int] = {}
        self.whole: dict[str, dict[str, int]] = {c: {} for c in topo.classes}
        # buckets[cls][depth][(level, within)][count] = nodes with that many wholly free,
        # as their fabric order (Topology.node_order), sorted: ties go to the first
        self.buckets: dict[str, list[dict[BucketKey, Counts]]] = {
            c: [{} for _ in range(DEPTHS)] for c in topo.classes
        }
        self.partial: dict[str, list[tuple[int, int, str]]] = {c: [] for c in topo.classes}
        self._log: list[tuple[str, int]] = []
        self._links: dict[str, tuple[tuple[str, int, Counts], ...]] = {}  # see _link
        self._unschedulable: dict[str, int] = {}
        for dev in self.schedulable.down:
            key = topo.class_of[dev].key
            self._unschedulable[key] = self._unschedulable.get(key, 0) + 1
        order = topo.order
        for dev in sorted(free, key=order.__getitem__):
            have = units(free[dev])
            if have > 0:
                self._set(dev, 0, have)

    # ----- queries --------------------------------------------------------------------
    def unschedulable(self, cls: str) -> int:
        """Devices of ``cls`` that cannot take work (draining, unhealthy, offline, ...)."""
        return self._unschedulable.get(cls, 0)

    def is_whole(self, dev: str) -> bool:
        """Whether ``dev`` is schedulable and wholly free."""
        return self.free.get(dev, 0) == SHARE_UNITS

    def free_share(self, dev: str) -> float:
        """The free share of ``dev`` (0 if unschedulable or fully used)."""
        return self.free.get(dev, 0) / SHARE_UNITS

    def whole_free(self, cls: str, node: str) -> int:
        """Wholly free devices of ``cls`` in ``node``."""
        return self.whole[cls].get(node, 0)

    def whole_any(self) -> bool:
        """Whether any device is wholly free."""
        root = self.topo.nodes_at[0][0]
        return any(counts.get(root) for counts in self.whole.values())

    def total_whole(self, cls: str) -> int:
        """Wholly free devices of ``cls`` in the fabric."""
        root = self.topo.nodes_at[0][0]
        return self.whole[cls].get(root, 0)

    def best_fit(
        self, cls: str, depth: int, k: int, within: DomainLevel | None = None
    ) -> str | None:
        """The node at ``depth`` (inside one ``within`` domain) with the fewest wholly free
        ``cls`` devices that are still >= ``k``; among such nodes, one whose parent has
        the fewest free (a GPU of a PCIe host, its own NVLink domain, goes to the fullest
        host that has one, keeping emptier hosts whole); ties to fabric order."""
        best: tuple[int, int] | None = None
        for (_, levels), buckets in self.buckets[cls][depth].items():
            if within is not None and within not in levels:
                continue
            count = buckets.at_least(k)
            if count is not None:
                first = buckets[count][0]
                if best is None or (count, first) < best:
                    best = (count, first)
        if best is None:
            return None
        topo = self.topo
        node = topo.node_list[best[1]]
        parent = topo.nodes[node].parent
        if parent is None or self.whole[cls][parent] == best[0]:
            return node  # the fabric, or a parent that holds no more: nothing fuller
        return self._fuller_parent(cls, node, best[0], within) or node

    def _fuller_parent(
        self, cls: str, node: str, count: int, within: DomainLevel | None
    ) -> str | None:
        """A node with ``count`` wholly free ``cls`` devices (inside one ``within``
        domain) whose parent has fewer free than ``node``'s parent, the parent with the
        fewest first (fabric order among equals); None if none (or none among the first
        :data:`PARENT_SCAN` parents looked at)."""
        topo = self.topo
        whole = self.whole[cls]
        parent = topo.nodes[node].parent
        assert parent is not None
        ceiling = whole[parent]
        found: tuple[int, int, str] | None = None  # (parent count, parent order, child)
        scanned = 0
        nodes, children = topo.nodes, topo.children
        for buckets in self.buckets[cls][nodes[parent].depth].values():
            i = bisect.bisect_left(buckets.sorted, count)
            for have in buckets.sorted[i:]:
                if have >= ceiling or (found is not None and have > found[0]):
                    break
                for pos in buckets[have]:
                    scanned += 1
                    if scanned > PARENT_SCAN:
                        break
                    if found is not None and (have, pos) >= found[:2]:
                        break
                    child = next(  # children come in fabric order: the first is the pick
                        (c for c in children[topo.node_list[pos]]
                         if whole.get(c, 0) == count
                         and (within is None or within in nodes[c].within)),
                        None,
                    )  # fmt: skip
                    if child is not None:
                        found = (have, pos, child)
                        break
        return None if found is None else found[2]

    def first_fit(
        self, cls: str, depth: int, k: int, within: DomainLevel | None = None
    ) -> str | None:
        """The first node at ``depth`` in fabric order with >= ``k`` wholly free devices."""
        counts = self.whole[cls]
        nodes = self.topo.nodes
        for node in self.topo.nodes_at[depth]:
            if counts.get(node, 0) >= k and (within is None or within in nodes[node].within):
                return node
        return None

    def largest(self, cls: str, level: DomainLevel) -> tuple[str | None, int]:
        """The ``level`` node with the most wholly free ``cls`` devices, and how many."""
        best: tuple[int, int] = (-1, 0)  # (node order, count)
        for per_depth in self.buckets[cls]:
            for (lv, _), buckets in per_depth.items():
                top = buckets.sorted[-1] if lv is level and buckets.sorted else 0
                if top:
                    first = buckets[top][0]
                    if top > best[1] or (top == best[1] and first < best[0]):
                        best = (first, top)
        return (self.topo.node_list[best[0]] if best[1] else None), best[1]

    def best_partial(self, cls: str, share: float) -> str | None:
        """The partly used device of ``cls`` with the least room that is >= ``share``."""
        items = self.partial[cls]
        i = bisect.bisect_left(items, (units(share), -1, ""))
        return items[i][2] if i < len(items) else None

    def max_partial(self, cls: str) -> float:
        """The largest free share among partly used devices of ``cls`` (0 if none)."""
        items = self.partial[cls]
        return items[-1][0] / SHARE_UNITS if items else 0.0

    def host_room(self, host: str) -> tuple[int, int]:
        """Free CPU units and memory units of ``host`` (:data:`UNLIMITED` where it declares
        none)."""
        return self.cpu.get(host, UNLIMITED), self.mem.get(host, UNLIMITED)

    def host_fits(self, use: Iterable[tuple[str, float, float]]) -> bool:
        """Whether every host of ``use`` ((host, cpus, memory_gb) to take) has that room."""
        cpu, mem = self.cpu, self.mem
        for host, cpus, gb in use:
            if cpus and cpu.get(host, UNLIMITED) < cpu_units(cpus):
                return False
            if gb and mem.get(host, UNLIMITED) < memory_units(gb):
                return False
        return True

    def host_schedulable(self, host: str) -> bool:
        """Whether any device of ``host`` may take work (a host all of whose devices are
        draining, unhealthy or offline takes no CPU-only job either)."""
        ok = self.schedulable
        return any(d in ok for d in self.topo.host_devices.get(host, ()))

    def roomiest_fit(self, cpu: int, mem: int) -> str | None:
        """The schedulable host with the least free CPU (then memory) that still has
        ``cpu`` CPU units and ``mem`` memory units free (best fit, ties to fabric order)."""
        roomy = self._roomy
        if roomy is None:
            order = self.topo.host_order
            roomy = self._roomy = SortedList(
                (*self.host_room(h), order[h], h) for h in self.topo.hosts
            )
        i = roomy.bisect_left((cpu, -1, -1, ""))
        for room_cpu, room_mem, _, host in roomy.islice(i):
            assert room_cpu >= cpu
            if room_mem >= mem and self.host_schedulable(host):
                return str(host)
        return None

    # ----- changes --------------------------------------------------------------------
    def hold(self, p: Placement, schedulable_only: bool = False) -> None:
        """Take what placement ``p`` holds: its devices' share (only the schedulable ones
        with ``schedulable_only``: the undo of :meth:`release`) and its hosts' CPU cores and
        memory; ValueError if some of it is not free."""
        want, free, log = units(p.share), self.free, self._log
        changes: dict[str, tuple[int, int]] = {}  # device -> (free before the batch, after)
        for dev in p.devices:
            if not schedulable_only or dev in self.schedulable:
                change = changes.get(dev)  # a device named twice takes twice, as take() would
                have = free.get(dev, 0) if change is None else change[1]
                if want > have:
                    self._set_many(changes)  # what was taken before stays (and is logged)
                    raise _no_room(dev, have, p.share)
                log.append((dev, have))
                changes[dev] = (have if change is None else change[0], have - want)
        self._set_many(changes)
        for host, cpu, mem in host_units(p.hosts):
            self.take_host(host, cpu, mem)

    def release(self, p: Placement) -> None:
        """Give back what placement ``p`` holds (a what-if release: :meth:`give`)."""
        for dev in p.devices:
            self.give(dev, p.share)
        for host, cpu, mem in host_units(p.hosts):
            self.give_host(host, cpu, mem)

    def take_host(self, host: str, cpu: int, mem: int) -> None:
        """Use ``cpu`` CPU units and ``mem`` memory units of ``host`` (where it declares
        them); ValueError if it has less free."""
        have_cpu, have_mem = self.cpu.get(host), self.mem.get(host)
        if cpu and have_cpu is not None and cpu > have_cpu:
            raise ValueError(f"{host} has {have_cpu} CPU units free, cannot take {cpu}")
        if mem and have_mem is not None and mem > have_mem:
            raise ValueError(f"{host} has {have_mem} MB free, cannot take {mem}")
        self._host_set(host, -cpu, -mem, log=True)

    def give_host(self, host: str, cpu: int, mem: int) -> None:
        """Free ``cpu`` CPU units and ``mem`` memory units of ``host`` (a what-if release)."""
        self._host_set(host, cpu, mem, log=True)

    def reset_host(self, host: str, used_cpu: int, used_mem: int) -> None:
        """Set what jobs hold of ``host`` outright (not logged: see :meth:`reset`)."""
        assert not self._log, "reset inside a what-if question"
        topo = self.topo
        cpu = topo.host_cpu.get(host)
        mem = topo.host_mem.get(host)
        self._host_set(
            host,
            0 if cpu is None else max(0, cpu - used_cpu) - self.cpu[host],
            0 if mem is None else max(0, mem - used_mem) - self.mem[host],
            log=False,
        )

    def take(self, dev: str, share: float) -> None:
        """Use ``share`` of ``dev``; raises ValueError if it has less free."""
        have, want = self.free.get(dev, 0), units(share)
        if want > have:
            raise _no_room(dev, have, share)
        self._log.append((dev, have))
        self._set(dev, have, have - want)

    def give(self, dev: str, share: float) -> None:
        """Free ``share`` of ``dev`` (a what-if release); unschedulable devices stay used."""
        if dev not in self.schedulable:
            return
        have = self.free.get(dev, 0)
        self._log.append((dev, have))
        self._set(dev, have, min(SHARE_UNITS, have + units(share)))

    def mark(self) -> int:
        """A point to :meth:`rollback` to."""
        return len(self._log)

    def rollback(self, mark: int) -> None:
        """Undo every change since ``mark``."""
        while len(self._log) > mark:
            dev, before = self._log.pop()
            if dev[0] == HOST_CPU:
                self._host_set(dev[1:], before - self.cpu[dev[1:]], 0, log=False)
            elif dev[0] == HOST_MEM:
                self._host_set(dev[1:], 0, before - self.mem[dev[1:]], log=False)
            else:
                self._set(dev, self.free.get(dev, 0), before)

    def keep(self, mark: int) -> list[str]:
        """Keep every change since ``mark`` (no rollback to before it any more); the
        devices changed (and hosts, as ``HOST_CPU + host`` or ``HOST_MEM + host``)."""
        changed = [dev for dev, _ in self._log[mark:]]
        del self._log[mark:]
        return changed

    def take_all(self, devices: Iterable[str], share: float) -> None:
        """:meth:`take` on each device."""
        for d in devices:
            self.take(d, share)

    def reset(self, dev: str, free_units: int, schedulable: bool) -> None:
        """Set a device's free units and whether it is schedulable, outright: how a
        long-lived index follows the fabric between decisions (not logged; never inside a
        what-if question)."""
        self.reset_many(((dev, free_units, schedulable),))

    def reset_many(self, devices: Iterable[tuple[str, int, bool]]) -> None:
        """:meth:`reset` on each ``(device, free units, schedulable)``, the domains'
        counts moved once for all."""
        assert not self._log, "reset inside a what-if question"
        changes: dict[str, tuple[int, int]] = {}  # device -> (free before, after): the last
        known, down, out = self.schedulable.known, self.schedulable.down, self._unschedulable
        free = self.free
        for dev, free_units, schedulable in devices:
            if (dev in known and dev not in down) != schedulable:  # Schedulable's test
                cls = self.topo.class_of[dev].key
                if schedulable:
                    down.discard(dev)
                    out[cls] -= 1
                else:
                    down.add(dev)
                    out[cls] = out.get(cls, 0) + 1
            new = max(0, min(SHARE_UNITS, free_units)) if schedulable else 0
            old = changes[dev][0] if dev in changes else free.get(dev, 0)
            changes[dev] = (old, new)
        self._set_many(changes)

    def frozen(self) -> CapacityIndex:
        """An independent copy for later reading (cheap when little is free)."""
        twin = object.__new__(CapacityIndex)
        twin.topo = self.topo
        twin.schedulable = Schedulable(self.topo.class_of, set(self.schedulable.down))
        twin.free = dict(self.free)
        twin.whole = {c: dict(counts) for c, counts in self.whole.items()}
        if self.whole_any():
            twin.buckets = {
                c: [{key: per.clone() for key, per in depth.items() if per} for depth in per_cls]
                for c, per_cls in self.buckets.items()
            }  # fmt: skip
        else:  # nothing wholly free (a full fabric): every bucket is empty
            twin.buckets = {c: [{} for _ in range(DEPTHS)] for c in self.buckets}
        twin.partial = {c: list(items) for c, items in self.partial.items()}
        twin._log = []
        twin._links = {}  # the twin's own buckets, linked when it first changes
        twin._unschedulable = dict(self._unschedulable)
        cpu_views, mem_views = self._views
        twin.cpu = cpu_views.view(self.cpu)  # O(1): see accelnet.sched.room
        twin.mem = mem_views.view(self.mem)
        twin._views = (Journals(), Journals())
        twin._roomy = None  # rebuilt from the hosts' room if it is asked for
        return twin

    # ----- internals ------------------------------------------------------------------
    def _host_set(self, host: str, d_cpu: int, d_mem: int, log: bool) -> None:
        """Change ``host``'s free CPU and memory units by the deltas (where it declares
        them), logging the values before when ``log``."""
        cpu, mem = self.cpu.get(host), self.mem.get(host)
        if (cpu is None or not d_cpu) and (mem is None or not d_mem):
            return
        cpu_table, mem_table = self._tables()
        roomy = self._roomy
        if roomy is not None:
            roomy.remove((*self.host_room(host), self.topo.host_order[host], host))
        cpu_views, mem_views = self._views
        if cpu is not None and d_cpu:
            if log:
                self._log.append((HOST_CPU + host, cpu))
            if cpu_views:
                cpu_views.changing(host, cpu)
            cpu_table[host] = min(self.topo.host_cpu[host], cpu + d_cpu)
        if mem is not None and d_mem:
            if log:
                self._log.append((HOST_MEM + host, mem))
            if mem_views:
                mem_views.changing(host, mem)
            mem_table[host] = min(self.topo.host_mem[host], mem + d_mem)
        if roomy is not None:
            roomy.add((*self.host_room(host), self.topo.host_order[host], host))

    def _tables(self) -> tuple[dict[str, int], dict[str, int]]:
        """The hosts' free CPU and memory tables, to change: a frozen copy makes its own
        the first time it changes (the views of it taken before keep reading the tables
        they were taken of, which never change under them)."""
        cpu, mem = self.cpu, self.mem
        if type(cpu) is not dict or type(mem) is not dict:
            cpu = self.cpu = dict(cpu)
            mem = self.mem = dict(mem)
            self._views = (Journals(), Journals())
        return cpu, mem

    def _set(self, dev: str, old: int, new: int) -> None:
        delta = self._set_free(dev, old, new)
        if not delta:
            return
        cls = self.topo.class_of[dev].key
        counts = self.whole[cls]
        links = self._links.get(dev)
        if links is None:
            links = self._link(dev, cls)
        for node_id, pos, buckets in links:
            _move(counts, node_id, pos, buckets, delta)

    def _set_many(self, changes: Mapping[str, tuple[int, int]]) -> None:
        """:meth:`_set` on each ``device -> (old, new)``, a domain's count moved once for
        all its devices that changed (a gang on one host: one move of the host's count,
        not one per device)."""
        if len(changes) == 1:
            ((dev, (old, new)),) = changes.items()
            if old != new:
                self._set(dev, old, new)
            return
        # the devices' wholly-free deltas summed per (class, chain of domains) first: a
        # gang's devices mostly share one chain (one host's), so its domains move once
        class_of, chain = self.topo.class_of, self.topo.chain
        groups: dict[tuple[str, tuple[str, ...]], list[Any]] = {}  # -> [a device, delta]
        for dev, (old, new) in changes.items():
            if old == new:
                continue
            delta = self._set_free(dev, old, new)
            if not delta:
                continue
            key = (class_of[dev].key, chain[dev])
            group = groups.get(key)
            if group is None:
                groups[key] = [dev, delta]
            else:
                group[1] += delta
        whole = self.whole
        if len(groups) == 1:
            (((cls, _), (dev, delta)),) = groups.items()
            if delta:
                counts = whole[cls]
                links = self._links.get(dev) or self._link(dev, cls)
                for node_id, pos, buckets in links:
                    _move(counts, node_id, pos, buckets, delta)
            return
        moves: dict[tuple[str, str], list[Any]] = {}  # (class, node) -> [pos, buckets, delta]
        for (cls, _), (dev, delta) in groups.items():
            links = self._links.get(dev) or self._link(dev, cls)
            for node_id, pos, buckets in links:
                move = moves.get((cls, node_id))
                if move is None:
                    moves[cls, node_id] = [pos, buckets, delta]
                else:
                    move[2] += delta
        for (cls, node_id), (pos, buckets, delta) in moves.items():
            if delta:
                _move(whole[cls], node_id, pos, buckets, delta)

    def _set_free(self, dev: str, old: int, new: int) -> int:
        """A device's free units from ``old`` to ``new``, in ``free`` and the partly free
        lists; how its wholly free count moves (+1, -1 or 0: its domains' counts are the
        caller's to move)."""
        if 0 < old < SHARE_UNITS or 0 < new < SHARE_UNITS:
            topo = self.topo
            cls = topo.class_of[dev].key
            order = topo.order[dev]
            if 0 < old < SHARE_UNITS:
                items = self.partial[cls]
                del items[bisect.bisect_left(items, (old, order, dev))]
            if 0 < new < SHARE_UNITS:
                bisect.insort(self.partial[cls], (new, order, dev))
        if new > 0:
            self.free[dev] = new
        else:
            self.free.pop(dev, None)
        was_whole, is_whole = old == SHARE_UNITS, new == SHARE_UNITS
        if was_whole == is_whole:
            return 0
        return 1 if is_whole else -1

    def _link(self, dev: str, cls: str) -> tuple[tuple[str, int, Counts], ...]:
        """The domains holding ``dev``, each with its fabric order and the buckets its count
        lives in (made if missing): what :meth:`_set` walks, looked up once per device."""
        topo = self.topo
        per_depth = self.buckets[cls]
        links = []
        for node_id in topo.chain[dev]:
            node = topo.nodes[node_id]
            key = (node.level, node.within)
            buckets = per_depth[node.depth].get(key)
            if buckets is None:
                buckets = per_depth[node.depth][key] = Counts()
            links.append((node_id, topo.node_order[node_id], buckets))
        found = self._links[dev] = tuple(links)
        return found


def _move(counts: dict[str, int], node_id: str, pos: int, buckets: Counts, delta: int) -> None:
    """Node ``node_id``'s (fabric order ``pos``) wholly-free count moved by ``delta``,
    in ``counts`` and in its ``buckets``."""
    before = counts.get(node_id, 0)
    after = before + delta
    if before:
        buckets.discard(before, pos)
    if after:
        counts[node_id] = after
        buckets.add(after, pos)
    else:
        del counts[node_id]


def _no_room(dev: str, have: int, share: float) -> ValueError:
    return ValueError(f"{dev} has {have / SHARE_UNITS:g} free, cannot take {share:g}")
