"""Holding a domain for a gang that has waited too long behind backfill.

A decision places queued jobs in policy order and lets a later job start where an earlier
one does not fit (backfill). Under a steady stream of small jobs that starves a large gang:
devices free up one at a time and each is taken by a small job before the gang's whole
count is ever free at once. Slurm's backfill answers with a reservation for its top
pending job; here a job that has waited ``reserve_after_s`` (``Scheduler``) and still does
not fit has one domain *held*: the domain where it could fit that has the most of its
devices free now, at the tightest level it can fit in. The devices free in it (wholly or
in part) are kept from every later job of the decision; as the jobs running there end,
their devices are held too, until the gang fits. A decision holds one domain at most (for
the first such job in policy order), and nothing is stored between decisions: each
decision chooses again, and the domain it held keeps the most free devices, so it is
chosen again.
"""

from __future__ import annotations

from accelnet.sched.capacity import SHARE_UNITS, CapacityIndex
from accelnet.sched.request import Request
from accelnet.sched.topology import DEPTHS, Topology


def class_devices(topo: Topology, cls: str) -> dict[str, list[str]]:
    """Every node's devices of class ``cls``, in fabric order (memoised on ``topo``)."""
    found = topo.class_devices.get(cls)
    if found is None:
        found = topo.class_devices[cls] = {}
        for dev, c in topo.class_of.items():
            if c.key == cls:
                for node in topo.chain[dev]:
                    found.setdefault(node, []).append(dev)
    return found


def hold_for(req: Request, index: CapacityIndex) -> tuple[str, int] | None:
    """Hold a domain for ``req``, a gang of whole devices that does not fit now: take the
    free share of each of its devices of the chosen class out of ``index``. Returns the
    domain and the devices held (None, holding nothing, for a share of a device, or if no
    domain it may use has anything free). Costs the domains of one level, each read in
    O(1) from the index's counts of wholly free devices."""
    if req.share < 1:
        return None
    topo = index.topo
    best: tuple[int, int, int, str, str] | None = None  # (-depth, -free, order, cls, node)
    for cls in req.classes:
        for depth in range(DEPTHS - 1, -1, -1):  # the tightest level it can fit in
            nodes = _candidates(topo, cls.key, depth, req)
            if not nodes:
                continue
            node = _most_free(index, cls.key, nodes, req.count)
            if node is not None:
                free = index.whole_free(cls.key, node)
                cand = (-depth, -free, topo.node_order[node], cls.key, node)
                if best is None or cand < best:
                    best = cand
            break
    if best is None:
        return None
    cls_key, node = best[3], best[4]
    held = 0
    for dev in class_devices(topo, cls_key)[node]:
        have = index.free.get(dev, 0)
        if have:
            index.take(dev, have / SHARE_UNITS)
            held += 1
    return node, held


def _candidates(topo: Topology, cls: str, depth: int, req: Request) -> list[str]:
    """The nodes at ``depth`` with at least ``req.count`` devices of ``cls`` (up or not)
    within ``req.required`` (memoised on ``topo``)."""
    key = (cls, depth, req.count, req.required)
    found = topo.hold_nodes.get(key)
    if found is None:
        members = class_devices(topo, cls)
        found = topo.hold_nodes[key] = [
            n for n in topo.nodes_at[depth]
            if len(members.get(n, ())) >= req.count
            and (req.required is None or req.required in topo.nodes[n].within)
        ]  # fmt: skip
    return found


def _most_free(index: CapacityIndex, cls: str, nodes: list[str], count: int) -> str | None:
    """The node with the most wholly free ``cls`` devices (the first in fabric order on a
    tie) that has ``count`` of them up (a domain whose others are draining or failed could
    not hold the gang until they are back); None if none has any free."""
    order = index.topo.node_order
    ranked = sorted(
        (n for n in nodes if index.whole_free(cls, n)),
        key=lambda n: (-index.whole_free(cls, n), order[n]),
    )
    members = class_devices(index.topo, cls)
    for node in ranked:
        if sum(d in index.schedulable for d in members[node]) >= count:
            return node
    return None
