"""Fragmentation gradient descent (``fgd``): place where the target workload loses least.

After Weng et al., "Beware of Fragmentation: Scheduling GPU-Sharing Workloads with
Fragmentation Gradient Descent" (USENIX ATC'23). Quantities are in share units
(:data:`~accelnet.sched.capacity.SHARE_UNITS` per GPU) and CPU/memory units
(:func:`~accelnet.sched.topology.cpu_units`, :func:`~accelnet.sched.topology.memory_units`).

**Target workload M.** The shapes of the last ``window`` (default 1,000) distinct job ids
:meth:`FGD.place` (or :meth:`FGD.observe`) was asked about, each with the number of those
jobs that had it as its weight ``w_m``; a job asked again (while it waits) counts once. A
shape is, per allowed device class ``c``: the GPU form (``u`` units of one GPU for a share,
or ``k_c`` whole GPUs, in one NVLink domain when ``topology.required`` is ``nvlink``) and
the CPU and memory the shape needs on the host (per rank, times ``k_c`` ranks for whole
GPUs unless launched per host); a CPU-only shape has no class, only CPU and memory. Since
the request being placed is observed first, M is never empty (at first it is that request
alone). The weights placements use are a frozen copy, taken again once ``refresh`` (default
100) new jobs were seen since, or sooner while few were: once the new jobs are as many as
those the copy came from (after 1, 2, 4, 8, ... jobs).

**Fragmentation of host n to shape m**, ``F_n(m)``, with ``T_n`` the free units of every
GPU of n (any class): ``F_n(m) = T_n - U_n(m)``, where the *usable* part ``U_n(m)`` sums,
over the classes c of m that m can run on at n now, the free units of the c GPUs of n that
m could take:

* m can run on n with class c when n has c GPUs, free CPU and memory at least m's need
  for c, and for a share of ``u`` units a c GPU with at least ``u`` free, for ``k`` whole
  GPUs at least ``k`` wholly free c GPUs (in one NVLink domain of n when required: the
  NVLink domain restricted to the host);
* a share may take the free units of every c GPU with at least ``u`` free; whole GPUs the
  wholly free c GPUs (``SHARE_UNITS`` each); so a GPU whose free share is below what m
  needs per GPU is fragment, and every free GPU of n is fragment when m runs nowhere on n;
* a CPU-only m that fits n's free CPU and memory has ``U_n(m) = T_n`` (no fragment), else 0.

``F_n(M) = sum over m of w_m * F_n(m)`` (integers: the weights are job counts).

**Placement.** For a request, every host that holds it whole is a candidate, with, inside
it, for a share each partly used GPU of distinct free room that fits plus one wholly free
GPU (from the host's NVLink domain with the fewest wholly free), and for ``k`` whole GPUs
those best fit gathers (the NVLink domain with the fewest wholly free that holds ``k``,
else the fullest domains first). A candidate needs the devices free and the host's CPU and
memory for its ranks. The candidate with the smallest key wins:
``(misses topology.preferred nvlink, Delta, free units of the GPUs taken, wholly free GPUs
of its class on the host, class rank, host fabric order, GPU positions)`` where ``Delta =
F_n(M) after - F_n(M) before`` on the chosen host n (other hosts do not change). A CPU-only
request weighs every schedulable host with room by ``(Delta, free CPU, free memory, host
order)``. A gang no single host holds falls back to best fit
(:meth:`PlacementStrategy.place`, which honours host room through
:func:`~accelnet.sched.hostfit.fit_hosts`), and so does one whose every single-host
candidate misses ``topology.preferred`` when best fit's choice keeps it. With ``prefer:
order`` or ``speed`` the first class that fits (on one host, else by best fit) and keeps
``topology.preferred`` wins, best fit's choice if none keeps it; with ``fit`` all classes
are weighed together. Nothing of the index changes.

The choice thus depends on the jobs the strategy has seen, not on the snapshot alone: a
scheduler that keeps one ``fgd`` instance learns its workload as it goes. Unlike the
paper's simulator, CPU-only shapes are part of M and are no fragment where they fit (it
leaves them out by default, and counts every free GPU as their fragment), memory is
checked beside CPU, and every shape of the window counts (no cut to the most popular).

**Cost.** A host's state is its layout, its GPUs' free units, and its free CPU and memory;
the best candidate per (state, request shape) and ``F`` per state are cached until the
weights are refreshed, and ``F`` is a few table lookups per (class, GPU form) of M, so a
placement reads the free units of the candidate hosts and little else.
:class:`HostScoring` is that machinery with the cost left open (the benchmark's baselines
use it).
"""

from __future__ import annotations

import bisect
from abc import abstractmethod
from collections import Counter, OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from accelnet.fabric import DomainLevel
from accelnet.sched.capacity import SHARE_UNITS, UNLIMITED, CapacityIndex, units
from accelnet.sched.hostfit import host_use
from accelnet.sched.placement import BestFit
from accelnet.sched.request import Request
from accelnet.sched.snapshot import Placement
from accelnet.sched.spec import Prefer
from accelnet.sched.topology import Topology, cpu_units, memory_units

CACHE_LIMIT = 300_000  # cached entries kept at most (then the cache starts afresh)

# One class's part of a shape: (class key, units per GPU (0: CPU-only), GPUs, whether one
# NVLink domain is required, CPU units, memory units needed on the host).
Need = tuple[str, int, int, bool, int, int]
Shape = tuple[Need, ...]
# A host's state: (layout id, free units per device position (None: 0), free CPU units,
# free memory units (None: not declared, so not limited)).
Raw = tuple[int, tuple[int | None, ...], int | None, int | None]
# The best candidate on one host: (missed preferred, cost, free units taken, wholly free
# GPUs of the class on the host, positions taken).
Best = tuple[bool, float, int, int, tuple[int, ...]]


def shape_of(req: Request) -> Shape:
    """The shape of ``req`` (module docstring): one :data:`Need` per allowed class, aligned
    with ``req.classes``; a CPU-only request has one need of class ``""``."""
    cpu, mem = cpu_units(req.cpus), memory_units(req.memory_gb)
    if req.cpu_only:
        return (("", 0, 0, False, cpu, mem),)
    share = req.share < 1
    per = units(req.share) if share else SHARE_UNITS
    nvlink = req.required is DomainLevel.NVLINK
    out = []
    for rank, cls in enumerate(req.classes):
        k = 1 if share else req.count_on(rank)
        ranks = 1 if share or req.per_host else k
        out.append((cls.key, per, k, nvlink and k > 1, cpu * ranks, mem * ranks))
    return tuple(out)


@dataclass(frozen=True, slots=True)
class Slots:
    """A host layout as placement sees it: per device position its class key and the
    index of its NVLink domain within the host."""

    classes: tuple[str, ...]
    groups: tuple[int, ...]


class HostTables:
    """Per topology: each host's devices and layout, the hosts of each class, and the
    host-level domain node of each host (None if its devices lie in several)."""

    def __init__(self, topo: Topology) -> None:
        self.topo = topo
        nvlink = topo.domain_of[DomainLevel.NVLINK]
        ids: dict[Slots, int] = {}
        self.slots: list[Slots] = []
        self.layout: dict[str, int] = {}
        self.devices: dict[str, tuple[str, ...]] = {}
        self.by_class: dict[str, list[str]] = {}
        self.most: dict[str, int] = {}  # most devices of a class on one host
        self.node: dict[str, str | None] = {}
        for host in topo.hosts:
            devs = tuple(d for d in topo.host_devices[host] if d in topo.class_of)
            doms: dict[str, int] = {}
            slots = Slots(
                tuple(topo.class_of[d].key for d in devs),
                tuple(doms.setdefault(nvlink[d], len(doms)) for d in devs),
            )
            self.layout[host] = ids.setdefault(slots, len(ids))
            if len(ids) > len(self.slots):
                self.slots.append(slots)
            self.devices[host] = devs
            for cls, n in Counter(slots.classes).items():
                self.by_class.setdefault(cls, []).append(host)
                self.most[cls] = max(self.most.get(cls, 0), n)
            nodes = {
                n for d in devs for n in topo.chain[d] if topo.nodes[n].level is DomainLevel.HOST
            }
            self.node[host] = nodes.pop() if len(nodes) == 1 else None


def options(slots: Slots, frees: Sequence[int | None], need: Need) -> list[tuple[int, ...]]:
    """Device positions ``need`` may take on a host of ``slots`` with ``frees`` (module
    docstring: per distinct room of partly used GPUs plus one wholly free GPU for a share;
    best fit's gathering for whole GPUs); empty if none."""
    cls, per, k, nvlink = need[0], need[1], need[2], need[3]
    whole: dict[int, list[int]] = {}  # NVLink domain -> wholly free positions
    out: list[tuple[int, ...]] = []
    rooms: set[int] = set()
    for pos, (c, have) in enumerate(zip(slots.classes, frees, strict=True)):
        if c != cls or not have:
            continue
        if have == SHARE_UNITS:
            whole.setdefault(slots.groups[pos], []).append(pos)
        elif per < SHARE_UNITS and have >= per and have not in rooms:
            rooms.add(have)
            out.append((pos,))
    if not whole:
        return out
    doms = sorted((len(p), g, p) for g, p in whole.items())
    fits = [d for d in doms if d[0] >= k]
    if fits:
        out.append(tuple(fits[0][2][:k]))
        return out
    if nvlink or sum(d[0] for d in doms) < k:
        return out
    taken: list[int] = []
    left = k
    kids = sorted(doms, key=lambda d: (-d[0], d[1]))  # fullest first, as gather takes them
    for i, (n, _, members) in enumerate(kids):
        rest = [d for d in kids[i:] if d[0] >= left]
        if rest:  # the remainder fits in one domain: the tightest such
            return [*out, tuple(sorted(taken + min(rest)[2][:left]))]
        taken += members
        left -= n
    raise AssertionError("counted enough wholly free devices but found fewer")


def after(raw: Raw, positions: Iterable[int], need: Need) -> Raw:
    """The state ``raw`` becomes once ``need`` takes ``positions``."""
    frees = list(raw[1])
    take = need[1]
    for p in positions:
        left = (frees[p] or 0) - take
        frees[p] = left or None
    cpu, mem = raw[2], raw[3]
    return (
        raw[0],
        tuple(frees),
        None if cpu is None else cpu - need[4],
        None if mem is None else mem - need[5],
    )


def _misses(req: Request, placed: Placement, index: CapacityIndex) -> bool:
    """Whether ``placed`` spans more than one domain of ``req``'s preferred level."""
    if req.preferred is None:
        return False
    domain = index.topo.domain_of[req.preferred]
    return len({domain[d] for d in placed.devices}) > 1


class HostScoring(BestFit):
    """Places a request on the one host (and devices there) of the least cost, from a
    cache per (host state, need); best fit for what no single host holds (module
    docstring, with :meth:`cost` in place of ``Delta``)."""

    name = "host-scoring"

    def __init__(self) -> None:
        self._hosts: HostTables | None = None
        self._best: dict[tuple[Raw, Need, bool], Best | None] = {}

    @abstractmethod
    def cost(self, slots: Slots, before: Raw, then: Raw, need: Need) -> float:
        """The cost of a host going from ``before`` to ``then`` for ``need``; lower is
        better. Must depend on these arguments (and the instance's frozen state) only."""

    def forget(self) -> None:
        """Drop the cached choices (a subclass whose :meth:`cost` changed calls it)."""
        self._best.clear()

    def hosts(self, topo: Topology) -> HostTables:
        """The host tables of ``topo`` (made once per topology; the caches start afresh)."""
        if self._hosts is None or self._hosts.topo is not topo:
            self._hosts = HostTables(topo)
            self.forget()
        return self._hosts

    def place(self, req: Request, index: CapacityIndex) -> Placement | None:
        """Devices (and host room) for the whole request, or None; never changes ``index``."""
        hosts = self.hosts(index.topo)
        if req.cpu_only:
            return self._cpu_only(req, index, hosts)
        if not req.classes:
            return None
        shape = shape_of(req)
        if req.prefer is Prefer.FIT or len(req.classes) == 1:
            found = self._scan(req, shape, range(len(req.classes)), index, hosts)
            if found is None or _misses(req, found, index):
                fallback = super().place(req, index)
                if fallback is not None and (found is None or not _misses(req, fallback, index)):
                    return fallback
            return found
        for rank, cls in enumerate(req.classes):
            found = self._scan(req, shape, (rank,), index, hosts)
            if found is None:
                one = replace(
                    req,
                    classes=(cls,),
                    counts=(req.count_on(rank),) if req.counts else (),
                    step_rates=req.step_rates[rank : rank + 1],
                )
                found = super().place(one, index)
            if found is not None and not _misses(req, found, index):
                return found
        return super().place(req, index)  # every class misses topology.preferred

    def _scores(
        self,
        index: CapacityIndex,
        tables: HostTables,
        candidates: Iterable[str],
        need: Need,
        prefer: bool,
    ) -> list[tuple[Best, str, Raw]]:
        """The best candidate of each host of ``candidates`` that can take ``need``, with
        the host and its state (cached per state and need)."""
        free_get, cpu_get, mem_get = index.free.get, index.cpu.get, index.mem.get
        layout, devices, slots = tables.layout, tables.devices, tables.slots
        cache = self._best
        out = []
        for host in candidates:
            raw = (layout[host], tuple(map(free_get, devices[host])), cpu_get(host), mem_get(host))
            key = (raw, need, prefer)
            try:
                got = cache[key]
            except KeyError:
                if len(cache) > CACHE_LIMIT:
                    cache.clear()
                got = cache[key] = self._host_best(slots[raw[0]], raw, need, prefer)
            if got is not None:
                out.append((got, host, raw))
        return out

    def _host_best(self, slots: Slots, raw: Raw, need: Need, prefer: bool) -> Best | None:
        cpu, mem = raw[2], raw[3]
        if (cpu is not None and cpu < need[4]) or (mem is not None and mem < need[5]):
            return None
        frees = raw[1]
        if not need[1]:  # CPU-only
            return (False, self.cost(slots, raw, after(raw, (), need), need), 0, 0, ())
        best: Best | None = None
        cls = need[0]
        whole = sum(
            1 for c, f in zip(slots.classes, frees, strict=True) if c == cls and f == SHARE_UNITS
        )
        for positions in options(slots, frees, need):
            missed = prefer and len({slots.groups[p] for p in positions}) > 1
            taken = sum(frees[p] or 0 for p in positions)
            key: Best = (
                missed, self.cost(slots, raw, after(raw, positions, need), need), taken, whole,
                positions,
            )  # fmt: skip
            if best is None or key < best:
                best = key
        return best

    def _scan(
        self,
        req: Request,
        shape: Shape,
        ranks: Iterable[int],
        index: CapacityIndex,
        hosts: HostTables,
    ) -> Placement | None:
        """The best single-host placement over the classes ``ranks``, or None."""
        prefer = req.preferred is DomainLevel.NVLINK
        order = index.topo.host_order
        best: tuple[tuple[bool, float, int, int, int, int], str, tuple[int, ...], int] | None
        best = None
        for rank in ranks:
            need = shape[rank]
            cls, per, k = need[0], need[1], need[2]
            if k > hosts.most.get(cls, 0):
                continue
            found = self._scores(
                index, hosts, self._candidates(index, hosts, cls, per, k), need, prefer
            )
            for got, host, _ in found:
                key = (got[0], got[1], got[2], got[3], rank, order[host])
                if best is None or key < best[0]:
                    best = (key, host, got[4], rank)
        if best is None:
            return None
        _, host, positions, rank = best
        devs = hosts.devices[host]
        devices = tuple(devs[p] for p in positions)
        topo = index.topo
        return Placement(
            devices,
            req.share if req.share < 1 else 1.0,
            req.classes[rank].model.name,
            topo.span(devices),
            host_use(req, devices, topo),
        )

    @staticmethod
    def _candidates(
        index: CapacityIndex, hosts: HostTables, cls: str, per: int, k: int
    ) -> Iterable[str]:
        """Hosts that may hold ``k`` whole ``cls`` GPUs (or ``per`` units of one): those
        with enough wholly free, and for a share those with a partly used GPU with room."""
        counts = index.whole.get(cls, {})
        node = hosts.node
        need_whole = k if per == SHARE_UNITS else 1
        out = [
            h
            for h in hosts.by_class.get(cls, ())
            if (n := node[h]) is None or counts.get(n, 0) >= need_whole
        ]
        if per < SHARE_UNITS:
            items = index.partial.get(cls, [])
            i = bisect.bisect_left(items, (per, -1, ""))
            if i < len(items):
                seen = set(out)
                host_of = index.topo.host_of
                out += {host_of[d] for _, _, d in items[i:]} - seen
        return out

    def _cpu_only(self, req: Request, index: CapacityIndex, hosts: HostTables) -> Placement | None:
        need = shape_of(req)[0]
        order = index.topo.host_order
        cpu_get, mem_get = index.cpu.get, index.mem.get
        fits = [
            h
            for h in index.topo.hosts
            if ((cpu := cpu_get(h)) is None or cpu >= need[4])
            and ((mem := mem_get(h)) is None or mem >= need[5])
        ]
        best: tuple[tuple[float, int, int, int], str] | None = None
        for got, host, raw in self._scores(index, hosts, fits, need, False):
            cpu, mem = raw[2], raw[3]
            key = (
                got[1], UNLIMITED if cpu is None else cpu, UNLIMITED if mem is None else mem,
                order[host],
            )  # fmt: skip
            if best is not None and key >= best[0]:
                continue
            if any(raw[1]) or index.host_schedulable(host):
                best = (key, host)
        if best is None:
            return None
        return Placement((), 1.0, "", DomainLevel.HOST, ((best[1], req.cpus, req.memory_gb),))


class _Table:
    """Weights of (CPU, memory) needs, answering "how much weight needs at most (cpu,
    mem)" with two bisections (a 2-D prefix sum)."""

    __slots__ = ("cpus", "cum", "mems")

    def __init__(self, weights: dict[tuple[int, int], int]) -> None:
        self.cpus = sorted({c for c, _ in weights})
        self.mems = sorted({m for _, m in weights})
        ci = {c: i for i, c in enumerate(self.cpus)}
        mi = {m: i for i, m in enumerate(self.mems)}
        grid = [[0] * len(self.mems) for _ in self.cpus]
        for (c, m), w in weights.items():
            grid[ci[c]][mi[m]] += w
        for i, row in enumerate(grid):
            for j in range(len(row)):
                row[j] += (row[j - 1] if j else 0) + (grid[i - 1][j] if i else 0)
                row[j] -= grid[i - 1][j - 1] if i and j else 0
        self.cum = grid

    def at(self, cpu: int | None, mem: int | None) -> int:
        """The weight of the needs with CPU <= ``cpu`` and memory <= ``mem`` (None: any)."""
        i = len(self.cpus) - 1 if cpu is None else bisect.bisect_right(self.cpus, cpu) - 1
        j = len(self.mems) - 1 if mem is None else bisect.bisect_right(self.mems, mem) - 1
        return self.cum[i][j] if i >= 0 and j >= 0 else 0


Form = tuple[int, int, bool]  # (units per GPU, GPUs, one NVLink domain required)


class FGD(HostScoring):
    """Fragmentation gradient descent over the learned workload (module docstring)."""

    name = "fgd"

    def __init__(self, window: int = 1000, refresh: int = 100) -> None:
        """``window`` (>= 1): distinct jobs the target workload is learned from;
        ``refresh`` (>= 1): new jobs between refreshes of the weights placements use.
        Raises ValueError naming a bad parameter."""
        for name, value in (("window", window), ("refresh", refresh)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"fgd: {name} must be an integer >= 1, not {value!r}")
        super().__init__()
        self.window = window
        self.refresh = refresh
        self._jobs: OrderedDict[str, Shape] = OrderedDict()
        self._counts: Counter[Shape] = Counter()
        self._new = 0  # new jobs since the weights were frozen
        self._frozen_from = 0  # jobs the frozen weights came from
        self._total = 0  # sum of the frozen weights
        self._forms: dict[str, list[tuple[Form, _Table]]] = {}
        self._cpu_table: _Table | None = None
        self._frag: dict[Raw, int] = {}
        self._frozen: dict[Shape, int] = {}

    # ----- the target workload ----------------------------------------------------------
    def observe(self, req: Request) -> None:
        """Learn ``req``'s shape (once per job id; the oldest falls out past ``window``)."""
        if req.job in self._jobs:
            return
        shape = shape_of(req)
        self._jobs[req.job] = shape
        self._counts[shape] += 1
        if len(self._jobs) > self.window:
            _, old = self._jobs.popitem(last=False)
            self._counts[old] -= 1
            if not self._counts[old]:
                del self._counts[old]
        self._new += 1
        if self._new >= min(self.refresh, max(1, self._frozen_from)):
            self._freeze()

    def workload(self) -> dict[Shape, float]:
        """The frozen target workload: each shape's probability."""
        return {s: w / self._total for s, w in self._frozen.items()} if self._total else {}

    def _freeze(self) -> None:
        """Take the learned counts as the weights placements use (and drop the caches)."""
        self._frozen = dict(self._counts)
        self._total = sum(self._frozen.values())
        self._frozen_from = len(self._jobs)
        self._new = 0
        per: dict[tuple[str, Form], dict[tuple[int, int], int]] = {}
        for shape, w in self._frozen.items():
            for cls, per_gpu, k, nvlink, cpu, mem in shape:
                needs = per.setdefault((cls, (per_gpu, k, nvlink)), {})
                needs[(cpu, mem)] = needs.get((cpu, mem), 0) + w
        self._forms = {}
        self._cpu_table = None
        for (cls, form), weights in sorted(per.items()):
            if not cls:
                self._cpu_table = _Table(weights)
            else:
                self._forms.setdefault(cls, []).append((form, _Table(weights)))
        self.forget()

    def forget(self) -> None:
        """Drop the cached choices and fragmentation values."""
        super().forget()
        self._frag.clear()

    # ----- the score ----------------------------------------------------------------------
    def place(self, req: Request, index: CapacityIndex) -> Placement | None:
        """Learn ``req``'s shape, then place it (module docstring); never changes ``index``."""
        self.observe(req)
        return super().place(req, index)

    def cost(self, slots: Slots, before: Raw, then: Raw, need: Need) -> float:
        """``Delta``: ``F_n(M)`` of ``then`` minus that of ``before``."""
        return self.fragmentation(slots, then) - self.fragmentation(slots, before)

    def fragmentation(self, slots: Slots, raw: Raw) -> int:
        """``F_n(M)`` of a host of ``slots`` in state ``raw`` (cached until a refresh)."""
        found = self._frag.get(raw)
        if found is not None:
            return found
        if len(self._frag) > CACHE_LIMIT:
            self._frag.clear()
        found = self._frag[raw] = self._fragmentation(slots, raw)
        return found

    def _fragmentation(self, slots: Slots, raw: Raw) -> int:
        frees, cpu, mem = raw[1], raw[2], raw[3]
        per_class: dict[str, list[tuple[int, int]]] = {}
        total = 0
        for cls, group, have in zip(slots.classes, slots.groups, frees, strict=True):
            if have:
                total += have
                per_class.setdefault(cls, []).append((have, group))
        if not total:
            return 0
        out = total * self._total
        if self._cpu_table is not None:
            out -= self._cpu_table.at(cpu, mem) * total
        for cls, items in per_class.items():
            forms = self._forms.get(cls)
            if not forms:
                continue
            groups: Counter[int] = Counter(g for f, g in items if f == SHARE_UNITS)
            whole = sum(groups.values())
            for (per, k, nvlink), table in forms:
                if per < SHARE_UNITS:
                    usable = sum(f for f, _ in items if f >= per)
                else:
                    most = max(groups.values(), default=0) if nvlink else whole
                    usable = SHARE_UNITS * whole if most >= k else 0
                if usable:
                    out -= table.at(cpu, mem) * usable
        return out
