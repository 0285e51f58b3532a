"""Placement strategies: which exact devices a gang gets.

All-or-nothing: a strategy returns every device of the gang or nothing. ``best-fit`` puts a
gang in the tightest domain level the job allows and, at that level, in the domain with the
fewest free devices that still fit it, so large free domains stay whole for large jobs
(Slurm's topology/tree and Kueue's TAS do the same). ``first-fit`` takes the first domain
that fits, in fabric order: a baseline. Fractional shares are packed onto the partly used
device with the least room that fits (best fit), and a fresh device is taken from the most
crowded NVLink domain.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable
from dataclasses import replace

from accelnet.fabric import DomainLevel
from accelnet.sched.capacity import SHARE_UNITS, CapacityIndex
from accelnet.sched.hostfit import explain_hosts, fit_hosts, host_use, place_on_host
from accelnet.sched.registry import Registry
from accelnet.sched.request import Request
from accelnet.sched.snapshot import JobView, Placement
from accelnet.sched.spec import Prefer
from accelnet.sched.topology import DEPTHS, LEVEL_NAMES, DeviceClass, Topology


class PlacementStrategy(ABC):
    """Chooses devices for a request on a capacity index; never changes the index."""

    name = "?"

    @abstractmethod
    def pick(
        self, index: CapacityIndex, cls: str, depth: int, k: int, within: DomainLevel | None
    ) -> str | None:
        """A node at ``depth`` inside one ``within`` domain with >= ``k`` wholly free
        ``cls`` devices, or None."""

    def place(self, req: Request, index: CapacityIndex) -> Placement | None:
        """Devices for the whole gang, on hosts with the CPU cores and memory its ranks
        need (:mod:`accelnet.sched.hostfit`), or None if it does not fit now; a CPU-only
        request gets room on one host."""
        if req.count and not (req.cpus or req.memory_gb):  # devices only: the hot path
            return self.place_devices(req, index)
        if not req.count:
            return place_on_host(req, index)
        if index.topo.limited_hosts:
            return fit_hosts(self.place_devices, req, index)
        placed = self.place_devices(req, index)
        if placed is not None:
            return replace(placed, hosts=host_use(req, placed.devices, index.topo))
        return placed

    def place_devices(self, req: Request, index: CapacityIndex) -> Placement | None:
        """Devices for the whole gang (CPU and memory aside), or None if it does not fit.

        With ``prefer: fit`` every class is weighed together: a placement within the
        preferred level first, then the tightest domain level, then the domain with the
        fewest free devices of its class; the class order (the user's, or fastest first)
        only breaks ties. With ``order`` or ``speed`` the first class (in that order) that
        fits wins."""
        if req.share < 1:
            return self._place_share(req, index)
        topo = index.topo
        classes, counts, preferred = req.classes, req.counts, req.preferred
        together = len(classes) > 1 and req.prefer is Prefer.FIT
        best: tuple[tuple[int, int, int, int, int], DeviceClass, str, int] | None = None
        for rank, cls in enumerate(classes):
            count = counts[rank] if counts else req.count
            if index.total_whole(cls.key) < count:
                continue
            for depth in range(DEPTHS - 1, -1, -1):  # tightest domains first
                node = self.pick(index, cls.key, depth, count, req.required)
                if node is None:
                    continue
                missed = preferred is not None and preferred not in topo.nodes[node].within
                if not (missed or together):
                    return self._realise(index, cls, node, count)
                # classes are weighed by best fit's tightness whatever the strategy, so
                # every strategy takes the same class and only picks within it its own way
                tight = index.best_fit(cls.key, depth, count, req.required) if together else None
                free = around = 0
                if tight is not None:  # its free devices, then those of its parent
                    free = index.whole_free(cls.key, tight)
                    up = topo.nodes[tight].parent
                    around = index.whole_free(cls.key, up) if up is not None else free
                key = (int(missed), DEPTHS - depth, free, around, rank)
                if best is None or key < best[0]:
                    best = (key, cls, node, count)
                break
        if best is None:
            return None
        return self._realise(index, best[1], best[2], best[3])

    @staticmethod
    def _realise(index: CapacityIndex, cls: DeviceClass, node: str, k: int) -> Placement:
        devices = tuple(gather(index, cls.key, node, k))
        return Placement(devices, 1.0, cls.model.name, index.topo.span(devices))

    @staticmethod
    def _place_share(req: Request, index: CapacityIndex) -> Placement | None:
        if req.prefer is Prefer.FIT and len(req.classes) > 1:
            return _share_together(req, index)
        for cls in req.classes:
            dev = index.best_partial(cls.key, req.share)
            if dev is None:
                node = index.best_fit(cls.key, DEPTHS - 1, 1)
                if node is None:
                    continue
                dev = gather(index, cls.key, node, 1)[0]
            return Placement((dev,), req.share, cls.model.name, index.topo.span((dev,)))
        return None


def share_class(req: Request, index: CapacityIndex) -> DeviceClass | None:
    """The class a share goes to by fit (:func:`_share_together`'s), or None if none."""
    placed = _share_together(req, index)
    return None if placed is None else index.topo.class_of[placed.devices[0]]


def _share_together(req: Request, index: CapacityIndex) -> Placement | None:
    """A share on the partly used device, of any allowed class, with the least room that
    fits it; else a fresh device from the class whose best-fitting NVLink domain has the
    fewest free (class order breaks ties)."""
    best: tuple[tuple[int, int, int, int], DeviceClass, str] | None = None
    for rank, cls in enumerate(req.classes):
        dev = index.best_partial(cls.key, req.share)
        if dev is not None:
            key = (0, index.free[dev], 0, rank)
        else:
            node = index.best_fit(cls.key, DEPTHS - 1, 1)
            if node is None:
                continue
            up = index.topo.nodes[node].parent
            around = index.whole_free(cls.key, up) if up is not None else 0
            key = (1, index.whole_free(cls.key, node), around, rank)
            dev = node
        if best is None or key < best[0]:
            best = (key, cls, dev)
    if best is None:
        return None
    (fresh, _, _, _), cls, where = best
    dev = gather(index, cls.key, where, 1)[0] if fresh else where
    return Placement((dev,), req.share, cls.model.name, index.topo.span((dev,)))


def gather(index: CapacityIndex, cls: str, node: str, k: int) -> list[str]:
    """``k`` wholly free ``cls`` devices inside ``node`` (which has at least ``k``).

    Inside, a single child domain that fits is used (the fullest such, best fit); otherwise
    the fullest children are taken whole and the remainder goes to the best-fitting child,
    so the gang spans as few child domains as possible.
    """
    topo = index.topo
    members = topo.children[node]
    if topo.nodes[node].depth == DEPTHS - 1:
        free, class_of = index.free, topo.class_of
        out: list[str] = []
        for d in members:  # the first k wholly free ones, in fabric order
            if free.get(d) == SHARE_UNITS and class_of[d].key == cls:
                out.append(d)
                if len(out) == k:
                    break
        return out
    kids = [(index.whole_free(cls, c), i, c) for i, c in enumerate(members)]
    kids = [x for x in kids if x[0] > 0]
    fits = [x for x in kids if x[0] >= k]
    if fits:
        _, _, child = min(fits)
        return gather(index, cls, child, k)
    kids.sort(key=lambda x: (-x[0], x[1]))
    out = []
    remaining = k
    for pos, (n, _, child) in enumerate(kids):
        rest = [x for x in kids[pos:] if x[0] >= remaining]
        if rest:  # the remainder fits in one child: take the tightest such
            _, _, last = min(rest)
            return out + gather(index, cls, last, remaining)
        out += gather(index, cls, child, n)
        remaining -= n
    raise AssertionError(f"{node} counted {k} free {cls} devices but has fewer")


def explain(req: Request, index: CapacityIndex) -> str:
    """A sentence a person can act on: what the job needs and what is free."""
    if req.cpu_only:
        return explain_hosts(req, index)
    if not req.classes:
        return "no device in the fabric matches its resources"
    if req.needs_host and index.topo.limited_hosts:
        devices_only = replace(req, cpus=0.0, memory_gb=0.0)
        if BestFit().place_devices(devices_only, index) is not None:
            return explain_hosts(req, index)
    parts = []
    for rank, cls in enumerate(req.classes):
        if req.share < 1:
            room = index.max_partial(cls.key)
            whole = index.total_whole(cls.key)
            parts.append(
                f"needs {req.what(cls)}; no {cls.model.name} has {req.share:g} free "
                f"(largest free share {room:g}, {whole} wholly free)"
            )
            continue
        free = index.total_whole(cls.key)
        total = index.topo.largest(cls.key, DomainLevel.FABRIC)
        if free < req.count_on(rank):
            out = index.unschedulable(cls.key)
            note = f" ({out} draining, unhealthy or offline)" if out else ""
            parts.append(f"needs {req.what(cls)}; {free} of {total} free{note}")
            continue
        level = req.required or DomainLevel.FABRIC
        node, most = index.largest(cls.key, level)
        where = f" (on {index.topo.place_name(node)})" if node else ""
        parts.append(
            f"needs {req.what(cls)} in one {LEVEL_NAMES[level]}; "
            f"largest free {LEVEL_NAMES[level]} has {most}{where}"
        )
    return "; or ".join(parts)


class BestFit(PlacementStrategy):
    """Tightest level, then the domain with the fewest free devices that fit."""

    name = "best-fit"

    def pick(
        self, index: CapacityIndex, cls: str, depth: int, k: int, within: DomainLevel | None
    ) -> str | None:
        """See :meth:`PlacementStrategy.pick`."""
        return index.best_fit(cls, depth, k, within)


class FirstFit(PlacementStrategy):
    """Tightest level, then the first domain in fabric order that fits."""

    name = "first-fit"

    def pick(
        self, index: CapacityIndex, cls: str, depth: int, k: int, within: DomainLevel | None
    ) -> str | None:
        """See :meth:`PlacementStrategy.pick`."""
        return index.first_fit(cls, depth, k, within)


class SeesTraffic(ABC):
    """A strategy that weighs the traffic of running jobs: the scheduler calls
    :meth:`begin` when a decision starts (the jobs holding devices) and :meth:`started` for
    every job the decision starts."""

    @abstractmethod
    def begin(self, topo: Topology, running: Iterable[JobView]) -> None:
        """A decision begins; ``running`` hold devices."""

    @abstractmethod
    def started(self, req: Request, placement: Placement) -> None:
        """The decision starts ``req`` on ``placement``."""


def _frag_aware(**params: object) -> PlacementStrategy:
    """``frag-aware`` (sched.packing), imported on first use: packing builds on this
    module, so a top-level import here would be a cycle. FragAware checks its parameters
    (TypeError, ValueError)."""
    from accelnet.sched.packing import FragAware  # noqa: PLC0415

    return FragAware(**params)  # type: ignore[arg-type]


def _comm_aware(**params: object) -> PlacementStrategy:
    """``comm-aware`` (sched.commaware), imported on first use (it builds on this module)."""
    from accelnet.sched.commaware import CommAware  # noqa: PLC0415

    return CommAware(**params)  # type: ignore[arg-type]


def _fgd(**params: object) -> PlacementStrategy:
    """``fgd`` (sched.fgd), imported on first use (it builds on this module). FGD checks
    its parameters (ValueError naming the bad one, TypeError for unknown ones)."""
    from accelnet.sched.fgd import FGD  # noqa: PLC0415

    return FGD(**params)  # type: ignore[arg-type]


PLACEMENTS: Registry[PlacementStrategy] = Registry(
    "placement strategy",
    {
        "best-fit": BestFit,
        "first-fit": FirstFit,
        "frag-aware": _frag_aware,
        "comm-aware": _comm_aware,
        "fgd": _fgd,
    },
)
