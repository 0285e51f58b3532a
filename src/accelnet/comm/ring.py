"""Ring ordering: the order of ranks that makes a ring fastest.

A ring allreduce moves the same chunk over every hop at once, so it runs at the pace of its
slowest hop: the hop's max-min fair share of the links it crosses, counting the ring's own
other hops (two hops that leave one NIC in the same direction halve it). The score of an
order is ``(bottleneck rate, then the slowest hop's latency, then the summed latency)``;
:func:`ring_order` maximises it.

- Up to ``exact_limit`` ranks (9): every ring is tried, rank 0 first and each direction
  once, ``(p-1)!/2`` rings, so the answer is optimal.
- Beyond: hosts are visited one after another (one crossing per host boundary), each host's
  ranks in their best order (exactly, when a host has few enough), hosts chained nearest
  first; then 2-opt (reversing a stretch of the ring) while the score improves.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

from accelnet.comm.communicator import Communicator
from accelnet.comm.cost import CostModel
from accelnet.comm.flows import max_min_rates

Score = tuple[float, float, float]
EXACT_LIMIT = 9
TWO_OPT_LIMIT = 64


def ring_score(comm: Communicator, order: Sequence[int], model: CostModel | None = None) -> Score:
    """The score of ring ``order`` (rank indices of ``comm``): larger is better. A single
    rank scores ``(inf, 0, 0)``."""
    model = model or CostModel()
    k = len(order)
    if k < 2:
        return (float("inf"), 0.0, 0.0)
    paths = [model.path(comm, order[i], order[(i + 1) % k]) for i in range(k)]
    rates = max_min_rates(paths)
    lat = [p.latency_s for p in paths]
    return (min(rates), -max(lat), -sum(lat))


def ring_order(
    comm: Communicator, model: CostModel | None = None, exact_limit: int = EXACT_LIMIT
) -> Communicator:
    """``comm`` with its ranks in the best ring order found (optimal up to ``exact_limit``
    ranks). Rank 0 stays rank 0."""
    model = model or CostModel()
    p = comm.size
    if p <= 2:
        return comm
    if p <= exact_limit:
        return comm.reordered(_exact(comm, list(range(p)), model))
    groups = [list(g) for g in comm.hosts()]
    chains = [
        _exact(comm, g, model) if len(g) <= exact_limit else _two_opt(comm, g, model)
        for g in groups
    ]
    order = _chain_hosts(comm, chains, model)
    order = _two_opt(comm, order, model)
    zero = order.index(0)
    return comm.reordered(order[zero:] + order[:zero])


def _exact(comm: Communicator, ranks: list[int], model: CostModel) -> list[int]:
    if len(ranks) <= 3:
        return list(ranks)
    first, rest = ranks[0], ranks[1:]
    best: tuple[Score, list[int]] | None = None
    for perm in itertools.permutations(rest):
        if perm[0] > perm[-1]:  # the same ring walked the other way
            continue
        order = [first, *perm]
        score = ring_score(comm, order, model)
        if best is None or score > best[0]:
            best = (score, order)
    assert best is not None
    return best[1]


def _chain_hosts(comm: Communicator, chains: list[list[int]], model: CostModel) -> list[int]:
    """Host rings cut open and joined nearest-first: each chain is entered at the rank
    nearest the previous chain's end (rotating the host's ring to start there)."""
    left = list(range(1, len(chains)))
    order = list(chains[0])
    while left:
        tail = order[-1]
        best: tuple[float, float, int, int] | None = None
        for c in left:
            for start, rank in enumerate(chains[c]):
                path = model.path(comm, tail, rank)
                key = (-min(path.capacity, default=float("inf")), path.latency_s, c, start)
                if best is None or key < best:
                    best = key
        assert best is not None
        _, _, c, start = best
        order += chains[c][start:] + chains[c][:start]
        left.remove(c)
    return order


def _two_opt(comm: Communicator, order: list[int], model: CostModel, rounds: int = 4) -> list[int]:
    order = list(order)
    n = len(order)
    if n > TWO_OPT_LIMIT:  # O(n^3) per round: larger rings keep the host-by-host order
        return order
    score = ring_score(comm, order, model)
    for _ in range(rounds):
        improved = False
        for i in range(1, n - 1):
            for j in range(i + 1, n):
                cand = order[:i] + order[i : j + 1][::-1] + order[j + 1 :]
                s = ring_score(comm, cand, model)
                if s > score:
                    order, score, improved = cand, s, True
        if not improved:
            break
    return order
