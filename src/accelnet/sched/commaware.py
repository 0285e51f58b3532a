"""``comm-aware`` placement: the devices on which a gang's training step is fastest.

For a gang that says how much it communicates per step (workload hint ``bytes_per_step``),
each candidate set of devices is scored by its predicted step time: compute (from the
job's throughput hints on that device model, when given) plus one allreduce of those bytes
on those devices, priced by the communication model (:mod:`accelnet.comm`) over the exact
routes and *under current contention*: the rings of running jobs that communicate share
the links with it. Candidates are, for every acceptable device model and every domain
level the job allows, best fit's and first fit's domains and the first domain of each
distinct free count (``max_candidates`` per level at most), each filled as best fit fills
it. Jobs that do not communicate (one device, a share, no ``bytes_per_step``) are placed
by best fit.

The strategy sees traffic: the scheduler tells it which jobs hold devices when a decision
begins and which it starts (:class:`~accelnet.sched.placement.SeesTraffic`).
"""

from __future__ import annotations

from collections.abc import Iterable

from accelnet.comm import Communicator, CostModel, Path
from accelnet.comm.flows import Traffic
from accelnet.fabric import DomainLevel
from accelnet.sched.capacity import CapacityIndex
from accelnet.sched.packing import by_count
from accelnet.sched.placement import BestFit, SeesTraffic, gather
from accelnet.sched.request import Request
from accelnet.sched.snapshot import JobView, Placement
from accelnet.sched.topology import DEPTHS, Topology


class CommAware(BestFit, SeesTraffic):
    """Least predicted step time among bounded candidates (module docstring)."""

    name = "comm-aware"

    def __init__(self, model: CostModel | None = None, max_candidates: int = 8) -> None:
        """``model``: the communication cost model (defaults to the fabric's figures);
        ``max_candidates`` (>= 1): domains weighed per model and level. ValueError if < 1."""
        if max_candidates < 1:
            raise ValueError(f"max_candidates must be >= 1, not {max_candidates}")
        self.model = model or CostModel()
        self.max_candidates = max_candidates
        self._flows: dict[str, tuple[tuple[str, ...], list[Path]]] = {}
        self._background = Traffic()
        self._topo: Topology | None = None

    # ----- traffic ----------------------------------------------------------------------
    def begin(self, topo: Topology, running: Iterable[JobView]) -> None:
        """A decision begins: these jobs hold devices (their rings are the background)."""
        if topo is not self._topo:
            self._flows = {}  # another fabric: nothing cached applies
        self._topo = topo
        keep: dict[str, tuple[tuple[str, ...], list[Path]]] = {}
        for job in running:
            nbytes = job.spec.workload.bytes_per_step or 0.0
            if job.placement is None or len(job.placement.devices) < 2 or nbytes <= 0:
                continue
            devices = job.placement.devices
            old = self._flows.get(job.id)
            if old is None or old[0] != devices:
                old = (devices, self._ring_flows(topo, devices, nbytes))
            keep[job.id] = old
        self._flows = keep
        self._background = Traffic([p for _, flows in keep.values() for p in flows])

    def started(self, req: Request, placement: Placement) -> None:
        """The decision starts ``req`` on ``placement``: its ring joins the background."""
        if self._topo is None or req.comm_bytes <= 0 or len(placement.devices) < 2:
            return
        flows = self._ring_flows(self._topo, placement.devices, req.comm_bytes)
        self._flows[req.job] = (placement.devices, flows)
        self._background = self._background.plus(flows)

    def _ring_flows(self, topo: Topology, devices: tuple[str, ...], nbytes: float) -> list[Path]:
        return self.model.flows_of(Communicator(topo.fabric, devices), "allreduce", nbytes)

    # ----- placement --------------------------------------------------------------------
    def step_time(
        self, index: CapacityIndex, devices: tuple[str, ...], nbytes: float, rate: float = 0.0
    ) -> float:
        """Predicted seconds per step on ``devices``: compute (``1 / rate`` if known) plus
        one allreduce of ``nbytes`` among the current background traffic."""
        comm = Communicator(index.topo.fabric, devices)
        est = self.model.estimate(comm, "allreduce", nbytes, background=self._background)
        return (1.0 / rate if rate > 0 else 0.0) + est.time_s

    def place_devices(self, req: Request, index: CapacityIndex) -> Placement | None:
        """The candidate with the least predicted step time; best fit for jobs that do not
        communicate. Never changes ``index``."""
        if req.share < 1 or req.count < 2 or req.comm_bytes <= 0:
            return super().place_devices(req, index)
        known = bool(req.step_rates) and all(r > 0 for r in req.step_rates)
        best: tuple[float, int, Placement] | None = None
        seq = 0
        for rank, cls in enumerate(req.classes):
            count = req.count_on(rank)
            if index.total_whole(cls.key) < count:
                continue
            rate = req.step_rates[rank] if known else 0.0
            seen: set[tuple[str, ...]] = set()
            for depth in range(DEPTHS - 1, -1, -1):
                for node in self._candidates(index, cls.key, depth, count, req.required):
                    for devices in self._fills(index, cls.key, node, count):
                        if devices in seen:
                            continue
                        seen.add(devices)
                        score = self.step_time(index, devices, req.comm_bytes, rate)
                        seq += 1
                        if best is None or (score, seq) < best[:2]:
                            span = index.topo.span(devices)
                            best = (score, seq, Placement(devices, 1.0, cls.model.name, span))
            if best is not None and not known:
                break  # without hints, the first model that fits, as best fit
        return None if best is None else best[2]

    def _fills(self, index: CapacityIndex, cls: str, node: str, k: int) -> list[tuple[str, ...]]:
        """Ways to take ``k`` free devices in ``node``: best fit's, and, when the gang spans
        several child domains, the children quietest first (least background traffic on
        their hosts), roomiest first (fewest children), and evenly over m children."""
        out = [tuple(gather(index, cls, node, k))]
        topo = index.topo
        kids = [
            (c, index.whole_free(cls, c)) for c in topo.children.get(node, ()) if c in topo.nodes
        ]
        kids = [(c, n) for c, n in kids if n > 0]
        if not kids or max(n for _, n in kids) >= k:
            return out
        busy = self._host_traffic()
        order = topo.node_order

        def hosts_load(child: str) -> int:
            devs = gather(index, cls, child, 1)
            return busy.get(topo.fabric.devices[devs[0]].host, 0) if devs else 0

        for key in (
            lambda cn: (hosts_load(cn[0]), -cn[1], order[cn[0]]),
            lambda cn: (-cn[1], hosts_load(cn[0]), order[cn[0]]),
        ):
            devices: list[str] = []
            for child, n in sorted(kids, key=key):
                take = min(n, k - len(devices))
                devices += gather(index, cls, child, take)
                if len(devices) == k:
                    out.append(tuple(devices))
                    break
        # balanced: the same number in each of m children (hierarchical collectives run a
        # rail per local rank, so an even split beats a lopsided one)
        for m in range(2, len(kids) + 1):
            if k % m:
                continue
            per = k // m
            room = sorted((c for c, n in kids if n >= per),
                          key=lambda c: (hosts_load(c), order[c]))  # fmt: skip
            if len(room) >= m:
                out.append(tuple(d for c in room[:m] for d in gather(index, cls, c, per)))
        return out

    def _host_traffic(self) -> dict[str, int]:
        """Background flows touching each host (any hop inside it)."""
        out: dict[str, int] = {}
        for path in self._background.paths:
            hosts = {end.split("/", 1)[0] for hop in path.hops for end in hop[:2] if "/" in end}
            for h in hosts:
                out[h] = out.get(h, 0) + 1
        return out

    def _candidates(
        self, index: CapacityIndex, cls: str, depth: int, k: int, within: DomainLevel | None
    ) -> list[str]:
        out: dict[str, None] = {}
        for node in (index.best_fit(cls, depth, k, within), index.first_fit(cls, depth, k, within)):
            if node is not None:
                out[node] = None
        for node in by_count(index, cls, depth, k, within):
            if len(out) >= self.max_candidates:
                break
            out[node] = None
        return list(out)[: self.max_candidates]
