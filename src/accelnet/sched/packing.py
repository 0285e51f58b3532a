"""Fragmentation-aware packing: place so that what stays free is still of use.

Best fit keeps large domains whole by filling the fullest one that fits, but it looks at
one level and one number only. ``frag-aware`` scores the candidate placements by what the
free capacity left behind can still hold of a *typical job mix*: a list of
:class:`Typical` shapes (count, share, weight). The **usable capacity** of a state, for one
device class, is::

    U = sum over shapes i of  weight_i * size_i * n_i

with ``size_i = count_i * share_i`` (devices) and ``n_i`` the number of shape-``i`` jobs
that could still be placed, each shape on its own:

* a whole-device shape of ``c`` devices is placed in the tightest domain that can ever hold
  it (as best fit does), so ``n = sum over the nodes N at that depth of
  floor(wholly_free(N) / c)``; the depth is the deepest one of the domain tree with a node
  of at least ``c`` devices of the class;
* a share ``s`` goes on one device, so ``n = sum over devices of floor(room / s)``.

``size_i * n_i`` never exceeds the free capacity ``F`` (free shares summed), so
:func:`usable_fraction`, ``U / (F * sum of weights)``, lies in [0, 1]: the part of the free
capacity the typical mix can use, weighted.

Among the candidates a request could take, ``frag-aware`` takes the one that keeps ``U``
highest. Every candidate takes the same capacity, so that is also the one that keeps the
usable *fraction* highest. A placement only changes the counts of the domains and devices
it touches, so the change in ``U`` is computed from those alone (:meth:`FragAware.gain`,
exactly what a what-if ``take`` and a full recount would give), which keeps a placement
far under a millisecond on a 1,024-GPU fabric. Candidates are bounded
(``max_candidates``): for a gang, at the tightest depth that fits, the first node of each
distinct free count (the whole choice, when domains of one depth are alike) interleaved
with the best-fitting child of the first parent of each distinct free count (which tells
apart, say, a GPU of a wholly free PCIe host from one of a partly used host); for a share,
the partly used devices of each distinct room that fits, then fresh devices taken as a
1-device gang. Ties go to best fit's choice, which is always a candidate, so ``frag-aware``
places whenever best fit does, at the same level and in a domain of the same class.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from accelnet.fabric import DomainLevel
from accelnet.sched.capacity import SHARE_UNITS, CapacityIndex, units
from accelnet.sched.placement import PlacementStrategy, gather, share_class
from accelnet.sched.request import Request
from accelnet.sched.snapshot import Placement
from accelnet.sched.spec import Prefer
from accelnet.sched.topology import DEPTHS, Topology


@dataclass(frozen=True, slots=True)
class Typical:
    """One shape of the typical job mix: ``count`` devices (or ``share`` of one), and how
    often it arrives relative to the others (``weight``)."""

    count: int
    share: float
    weight: float


TYPICAL_MIX: tuple[Typical, ...] = (
    Typical(1, 0.25, 0.30),
    Typical(1, 0.5, 0.20),
    Typical(1, 1.0, 0.25),
    Typical(2, 1.0, 0.10),
    Typical(4, 1.0, 0.10),
    Typical(8, 1.0, 0.05),
)


MixLike = Iterable[Typical | tuple[int, float, float]]


def check_mix(mix: MixLike) -> tuple[Typical, ...]:
    """The mix as :class:`Typical` shapes; ValueError naming the first bad one (a share
    must be in (0, 1] and whole multiples of 1/SHARE_UNITS, a fractional share is one
    device, weights are positive, and the mix is not empty)."""
    out = tuple(t if isinstance(t, Typical) else Typical(int(t[0]), float(t[1]), float(t[2]))
                for t in mix)  # fmt: skip
    if not out:
        raise ValueError("the typical job mix is empty")
    for t in out:
        if t.count < 1 or not 0 < t.share <= 1 or units(t.share) < 1 or t.weight <= 0:
            raise ValueError(f"bad typical job {t}: needs count >= 1, share in "
                             f"(0, 1] of at least 1/{SHARE_UNITS}, weight > 0")  # fmt: skip
        if t.share < 1 and t.count != 1:
            raise ValueError(f"bad typical job {t}: a fractional share is one device")
    return out


@dataclass(frozen=True, slots=True)
class _Terms:
    """The score of one class, ready to evaluate: per depth of the domain tree the
    whole-device shapes counted there as (count, weight * count), and the shares as
    (units, weight * share)."""

    whole: dict[int, tuple[tuple[int, float], ...]]
    shares: tuple[tuple[int, float], ...]


def _terms(topo: Topology, cls: str, mix: Sequence[Typical]) -> _Terms:
    most = [0] * DEPTHS  # the largest node of each depth, in devices of cls
    sizes: dict[str, int] = {}
    for dev, c in topo.class_of.items():
        if c.key == cls:
            for node in topo.chain[dev]:
                sizes[node] = sizes.get(node, 0) + 1
    for node, n in sizes.items():
        depth = topo.nodes[node].depth
        most[depth] = max(most[depth], n)
    whole: dict[int, list[tuple[int, float]]] = {}
    shares: list[tuple[int, float]] = []
    for t in mix:
        if t.share < 1:
            shares.append((units(t.share), t.weight * t.share))
            continue
        fits = [d for d in range(DEPTHS) if most[d] >= t.count]
        if fits:  # else the class can never hold it: it counts for nothing
            whole.setdefault(fits[-1], []).append((t.count, t.weight * t.count))
    return _Terms({d: tuple(ts) for d, ts in whole.items()}, tuple(shares))


def parse_mix(text: str) -> tuple[Typical, ...]:
    """A job mix written ``count:share:weight,...`` (``1:0.25:3,1:1:2,4:1:1``: a quarter
    device weighs 3, one device 2, four devices 1); ValueError naming the bad item."""
    out = []
    for i, item in enumerate(x.strip() for x in text.split(",")):
        parts = item.split(":")
        try:
            if len(parts) != 3:
                raise ValueError
            out.append(Typical(int(parts[0]), float(parts[1]), float(parts[2])))
        except ValueError:
            raise ValueError(f"job mix item {i + 1} {item!r}: write count:share:weight, "
                             "e.g. 1:0.5:2") from None  # fmt: skip
    return check_mix(out)


def usable_capacity(index: CapacityIndex, cls: str, mix: Sequence[Typical] = TYPICAL_MIX) -> float:
    """``U`` of the module docstring for class ``cls``: the weighted free capacity the
    typical mix could still use (a full recount, O(domains + devices))."""
    return _usable(index, cls, _terms(index.topo, cls, check_mix(mix)))


def _usable(index: CapacityIndex, cls: str, terms: _Terms) -> float:
    topo = index.topo
    total = 0.0
    for depth, ts in terms.whole.items():
        for node in topo.nodes_at[depth]:
            free = index.whole_free(cls, node)
            if free:
                total += sum(wc * (free // c) for c, wc in ts)
    if terms.shares:
        for dev, have in index.free.items():
            if topo.class_of[dev].key == cls:
                total += sum(ws * (have // u) for u, ws in terms.shares)
    return total


def free_capacity(index: CapacityIndex, cls: str | None = None) -> float:
    """Free shares summed over the schedulable devices (of ``cls``, or of every class)."""
    class_of = index.topo.class_of
    got = sum(h for d, h in index.free.items() if cls is None or class_of[d].key == cls)
    return got / SHARE_UNITS


def usable_fraction(index: CapacityIndex, mix: Sequence[Typical] = TYPICAL_MIX) -> float:
    """The part of the free capacity the typical mix can use, in [0, 1] (module docstring):
    usable capacity of every class over (free capacity x total weight); 0 when nothing is
    free."""
    shapes = check_mix(mix)
    free = free_capacity(index)
    if free <= 0:
        return 0.0
    usable = sum(usable_capacity(index, c, shapes) for c in index.topo.classes)
    return usable / (free * sum(t.weight for t in shapes))


class FragAware(PlacementStrategy):
    """Among a bounded set of candidates, the placement that keeps the most free capacity
    usable by the typical job mix; ties to best fit (module docstring)."""

    name = "frag-aware"

    def __init__(self, mix: MixLike = TYPICAL_MIX, max_candidates: int = 8) -> None:
        """``mix``: (count, share, weight) shapes; ``max_candidates`` (>= 1): how many
        nodes (and, for shares, partly used devices) one request weighs at most.
        Raises ValueError for a bad mix or bound."""
        if max_candidates < 1:
            raise ValueError(f"max_candidates must be >= 1, not {max_candidates}")
        self.mix = check_mix(mix)
        self.max_candidates = max_candidates
        self._topo: Topology | None = None
        self._terms: dict[str, _Terms] = {}  # per class, for self._topo

    # ----- the score ------------------------------------------------------------------
    def _score_terms(self, topo: Topology, cls: str) -> _Terms:
        """The score terms of ``cls`` on ``topo`` (cached for the last topology)."""
        if topo is not self._topo:
            self._topo, self._terms = topo, {}
        found = self._terms.get(cls)
        if found is None:
            found = self._terms[cls] = _terms(topo, cls, self.mix)
        return found

    def gain(self, index: CapacityIndex, cls: str, devices: Sequence[str], share: float) -> float:
        """How ``U`` of ``cls`` changes if ``share`` of each of ``devices`` (distinct, with
        that much free) is taken: <= 0; computed from the touched domains and devices only,
        without changing the index."""
        topo = index.topo
        terms = self._score_terms(topo, cls)
        want = units(share)
        out = 0.0
        broken: dict[str, int] = {}  # node -> wholly free devices it loses
        for dev in devices:
            have = index.free.get(dev, 0)
            for u, ws in terms.shares:
                out += ws * ((have - want) // u - have // u)
            if have == SHARE_UNITS:
                for node in topo.chain[dev]:
                    broken[node] = broken.get(node, 0) + 1
        nodes = topo.nodes
        for node, lost in broken.items():
            ts = terms.whole.get(nodes[node].depth)
            if ts:
                free = index.whole_free(cls, node)
                out += sum(wc * ((free - lost) // c - free // c) for c, wc in ts)
        return out

    # ----- gangs ----------------------------------------------------------------------
    def pick(
        self, index: CapacityIndex, cls: str, depth: int, k: int, within: DomainLevel | None
    ) -> str | None:
        """See :meth:`PlacementStrategy.pick`: the candidate node (best fit's first) whose
        ``k`` devices, as :func:`gather` takes them, cost the least usable capacity."""
        best: tuple[float, str] | None = None
        for node in self.candidates(index, cls, depth, k, within):
            g = self.gain(index, cls, gather(index, cls, node, k), 1.0)
            if best is None or g > best[0]:
                best = (g, node)
        return None if best is None else best[1]

    def candidates(
        self, index: CapacityIndex, cls: str, depth: int, k: int, within: DomainLevel | None
    ) -> list[str]:
        """At most ``max_candidates`` nodes at ``depth`` (inside one ``within`` domain) with
        >= ``k`` wholly free ``cls`` devices; best fit's choice first, none if it has none."""
        own = by_count(index, cls, depth, k, within)
        if not own:
            return []
        topo = index.topo
        via_parent: list[str] = []
        if depth > 0:
            whole, order = index.whole[cls], topo.node_order
            for parent in by_count(index, cls, depth - 1, k, None):
                kids = [
                    (whole.get(c, 0), order[c], c)
                    for c in topo.children[parent]
                    if whole.get(c, 0) >= k and (within is None or within in topo.nodes[c].within)
                ]
                if kids:
                    via_parent.append(min(kids)[2])
                if len(via_parent) >= self.max_candidates:
                    break
        out: dict[str, None] = {}
        for i in range(max(len(own), len(via_parent))):
            for source in (own, via_parent):
                if i < len(source):
                    out[source[i]] = None
        return list(out)[: self.max_candidates]

    # ----- shares ---------------------------------------------------------------------
    def place_devices(self, req: Request, index: CapacityIndex) -> Placement | None:
        """Devices for the whole gang (or the one device of a share), or None if it does
        not fit now; never changes ``index``."""
        if req.share >= 1:
            return super().place_devices(req, index)
        classes = req.classes
        if req.prefer is Prefer.FIT and len(classes) > 1:  # the class best fit takes
            chosen = share_class(req, index)
            classes = () if chosen is None else (chosen,)
        for cls in classes:
            dev = self._share_device(index, cls.key, req.share)
            if dev is not None:
                return Placement((dev,), req.share, cls.model.name, index.topo.span((dev,)))
        return None

    def _share_device(self, index: CapacityIndex, cls: str, share: float) -> str | None:
        """The device for ``share`` of one ``cls`` device: partly used ones of each distinct
        room that fits (least room first: best fit's choice), then fresh ones."""
        cands: list[str] = []
        items = index.partial[cls]
        i = bisect.bisect_left(items, (units(share), -1, ""))
        while i < len(items) and len(cands) < self.max_candidates:
            have, _, dev = items[i]
            cands.append(dev)  # the first device of this room, then skip to the next room
            i = bisect.bisect_left(items, (have + 1, -1, ""), i)
        for node in self.candidates(index, cls, DEPTHS - 1, 1, None):
            cands.append(gather(index, cls, node, 1)[0])
        best: tuple[float, str] | None = None
        for dev in cands:
            g = self.gain(index, cls, (dev,), share)
            if best is None or g > best[0]:
                best = (g, dev)
        return None if best is None else best[1]


def by_count(
    index: CapacityIndex, cls: str, depth: int, k: int, within: DomainLevel | None
) -> list[str]:
    """The first node (fabric order) of each distinct count >= ``k`` of wholly free ``cls``
    devices at ``depth``, fewest first: its head is :meth:`CapacityIndex.best_fit`'s."""
    first: dict[int, int] = {}
    for (_, levels), buckets in index.buckets[cls][depth].items():
        if within is not None and within not in levels:
            continue
        for count, nodes in buckets.items():
            if nodes and count >= k:
                pos = nodes[0]
                if count not in first or pos < first[count]:
                    first[count] = pos
    node_list = index.topo.node_list
    return [node_list[first[c]] for c in sorted(first)]
