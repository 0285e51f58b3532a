"""Collective algorithms as phases of concurrent flows between ranks.

Each algorithm turns a collective of ``n`` bytes on a communicator into :class:`Phase` s:
a set of flows ``(src rank, dst rank, bytes)`` that run at once, repeated ``steps`` times in
sequence, or (``pipelined``) streamed in chunks through a chain or tree so that the latency
is paid once per level and the bytes once. The cost model (:mod:`accelnet.comm.cost`)
prices them; this module only says who sends what to whom.

Sizes follow nccl-tests: ``n`` is the whole buffer (allreduce, broadcast, reduce), the
output (allgather), the input (reduce-scatter), or each rank's send buffer (all-to-all,
send/recv).

- **ring**: allreduce = reduce-scatter then allgather around the ring, ``2(p-1)`` steps of
  ``n/p`` on every hop; reduce-scatter and allgather ``p-1`` steps; broadcast and reduce a
  pipelined chain from (to) rank 0.
- **tree**: NCCL's double binary tree. Two binary trees over the ranks, each carrying half
  the data, so every rank is an inner node of at most one. Allreduce is a pipelined reduce
  up both trees and broadcast down: each edge carries ``n/2`` each way per tree, depth
  ``2 * height``. Broadcast and reduce use one tree and ``n``.
- **hierarchical**: reduce-scatter inside each host, allreduce of each host's ``n/L`` slice
  across hosts (``L`` rings in parallel, rank ``k`` of every host together, so every NIC
  rail works), allgather inside each host. Hosts with different rank counts use leaders:
  reduce to each host's first rank, ring allreduce between leaders, broadcast back.
- **halving_doubling**: for a power-of-two group: recursive halving (``log2 p`` steps,
  exchange ``n/2, n/4, ...`` with the partner at distance ``p/2, p/4, ...``), then recursive
  doubling back. Latency ``2 log2 p`` steps, bandwidth as the ring's.
- **direct**: all-to-all (every rank sends ``n/p`` to every other at once) and send/recv
  (rank ``i`` sends ``n`` to rank ``i+1``, as nccl-tests' sendrecv).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from accelnet.comm.communicator import Communicator

Flow = tuple[int, int, float]


class Collective(StrEnum):
    """The collectives the model prices."""

    ALLREDUCE = "allreduce"
    REDUCE_SCATTER = "reduce_scatter"
    ALLGATHER = "allgather"
    BROADCAST = "broadcast"
    REDUCE = "reduce"
    ALLTOALL = "alltoall"
    SENDRECV = "sendrecv"


class Algorithm(StrEnum):
    """Ways to run a collective."""

    RING = "ring"
    TREE = "tree"
    HIERARCHICAL = "hierarchical"
    HALVING_DOUBLING = "halving_doubling"
    DIRECT = "direct"


def busbw_factor(collective: Collective, p: int) -> float:
    """nccl-tests' bus bandwidth factor: ``busbw = algbw * factor`` (so that busbw is
    comparable with the link's speed whatever the rank count)."""
    if p <= 1:
        return 1.0
    if collective is Collective.ALLREDUCE:
        return 2.0 * (p - 1) / p
    if collective in (Collective.REDUCE_SCATTER, Collective.ALLGATHER, Collective.ALLTOALL):
        return (p - 1) / p
    return 1.0


@dataclass(frozen=True, slots=True)
class Phase:
    """Flows that run at once; ``steps`` times in sequence, or pipelined through ``depth``
    levels (latency ``depth`` times, bytes once)."""

    flows: tuple[Flow, ...]
    steps: int = 1
    depth: int = 0  # > 0: pipelined

    @property
    def pipelined(self) -> bool:
        """Whether the phase streams its bytes through ``depth`` levels."""
        return self.depth > 0


ALGORITHMS: dict[Collective, tuple[Algorithm, ...]] = {
    Collective.ALLREDUCE: (
        Algorithm.RING,
        Algorithm.TREE,
        Algorithm.HIERARCHICAL,
        Algorithm.HALVING_DOUBLING,
    ),
    Collective.REDUCE_SCATTER: (Algorithm.RING, Algorithm.HALVING_DOUBLING),
    Collective.ALLGATHER: (Algorithm.RING, Algorithm.HALVING_DOUBLING),
    Collective.BROADCAST: (Algorithm.RING, Algorithm.TREE),
    Collective.REDUCE: (Algorithm.RING, Algorithm.TREE),
    Collective.ALLTOALL: (Algorithm.DIRECT,),
    Collective.SENDRECV: (Algorithm.DIRECT,),
}


def phases(
    algorithm: Algorithm, collective: Collective, comm: Communicator, n: float
) -> list[Phase] | None:
    """The phases of ``collective`` of ``n`` bytes by ``algorithm``; None where the algorithm
    does not apply (not offered for the collective, a non-power-of-two group for halving-
    doubling, one host for hierarchical); [] for a single rank (nothing moves)."""
    if algorithm not in ALGORITHMS[collective]:
        return None
    p = comm.size
    if p == 1:
        return []
    if algorithm is Algorithm.RING:
        return _ring(collective, p, n)
    if algorithm is Algorithm.TREE:
        return _tree(collective, p, n)
    if algorithm is Algorithm.HALVING_DOUBLING:
        return _halving_doubling(collective, p, n)
    if algorithm is Algorithm.HIERARCHICAL:
        return _hierarchical(comm.hosts(), n)
    if collective is Collective.ALLTOALL:
        each = n / p
        return [Phase(tuple((i, j, each) for i in range(p) for j in range(p) if i != j))]
    return [Phase(tuple((i, (i + 1) % p, n) for i in range(p)))]


def ring_flows(ranks: tuple[int, ...], size: float) -> tuple[Flow, ...]:
    """Every rank of ``ranks`` sends ``size`` bytes to the next, around the ring."""
    k = len(ranks)
    return tuple((ranks[i], ranks[(i + 1) % k], size) for i in range(k)) if k > 1 else ()


def _ring(collective: Collective, p: int, n: float) -> list[Phase]:
    ring = tuple(range(p))
    if collective is Collective.ALLREDUCE:
        return [Phase(ring_flows(ring, n / p), steps=2 * (p - 1))]
    if collective in (Collective.REDUCE_SCATTER, Collective.ALLGATHER):
        return [Phase(ring_flows(ring, n / p), steps=p - 1)]
    chain = tuple((i, i + 1, n) for i in range(p - 1))
    if collective is Collective.REDUCE:
        chain = tuple((j, i, size) for i, j, size in chain)
    return [Phase(chain, depth=p - 1)]


def binary_tree(order: list[int]) -> list[tuple[int, int]]:
    """(child, parent) edges of the heap-shaped binary tree over ``order``."""
    return [(order[i], order[(i - 1) // 2]) for i in range(1, len(order))]


def tree_height(p: int) -> int:
    """Levels below the root of a heap-shaped binary tree of ``p`` nodes."""
    return max(0, (p).bit_length() - 1)


def _tree(collective: Collective, p: int, n: float) -> list[Phase]:
    height = tree_height(p)
    first = binary_tree(list(range(p)))
    if collective is Collective.ALLREDUCE:
        # the second tree is the first mirrored: inner nodes of one are leaves of the other
        second = binary_tree(list(range(p - 1, -1, -1)))
        flows = []
        for child, parent in [*first, *second]:
            flows += [(child, parent, n / 2), (parent, child, n / 2)]
        return [Phase(tuple(flows), depth=2 * height)]
    if collective is Collective.BROADCAST:
        return [Phase(tuple((parent, child, n) for child, parent in first), depth=height)]
    return [Phase(tuple((child, parent, n) for child, parent in first), depth=height)]


def _halving_doubling(collective: Collective, p: int, n: float) -> list[Phase] | None:
    if p & (p - 1):
        return None
    halving = []
    size = n
    distance = p // 2
    while distance >= 1:
        size /= 2
        halving.append(Phase(tuple((i, i ^ distance, size) for i in range(p))))
        distance //= 2
    if collective is Collective.REDUCE_SCATTER:
        return halving
    doubling = list(reversed(halving))
    if collective is Collective.ALLGATHER:
        return doubling
    return halving + doubling


def _hierarchical(hosts: tuple[tuple[int, ...], ...], n: float) -> list[Phase] | None:
    if len(hosts) < 2 or all(len(h) == 1 for h in hosts):
        return None
    sizes = {len(h) for h in hosts}
    if len(sizes) == 1:
        local = sizes.pop()
        inner = tuple(f for h in hosts for f in ring_flows(h, n / local))
        rails = [tuple(h[k] for h in hosts) for k in range(local)]
        slice_ = n / local / len(hosts)
        across = tuple(f for rail in rails for f in ring_flows(rail, slice_))
        return [
            Phase(inner, steps=local - 1),  # reduce-scatter inside every host
            Phase(across, steps=2 * (len(hosts) - 1)),  # allreduce of each slice across
            Phase(inner, steps=local - 1),  # allgather inside every host
        ]
    deepest = max(len(h) for h in hosts) - 1
    to_leader = tuple((h[i + 1], h[i], n) for h in hosts for i in range(len(h) - 1))
    leaders = tuple(h[0] for h in hosts)
    ring = ring_flows(leaders, n / len(leaders))
    back = tuple((j, i, size) for i, j, size in to_leader)
    out = [Phase(ring, steps=2 * (len(leaders) - 1))]
    if deepest > 0:
        out = [Phase(to_leader, depth=deepest), *out, Phase(back, depth=deepest)]
    return out
