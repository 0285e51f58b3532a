"""The capacity index's buckets of nodes by free count: plain lists while short, sorted
lists once long (accelnet.sched.capacity.Counts); both must answer alike."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from accelnet.fabric import load_fabric
from accelnet.sched import capacity
from accelnet.sched.capacity import CapacityIndex, Counts
from accelnet.sched.topology import DEPTHS, Topology

FABRIC = load_fabric("fat-tree:hosts=8,gpus_per_host=4")
TOPO = Topology(FABRIC)
DEVICES = sorted(FABRIC.devices)


def _consistent(index: CapacityIndex) -> None:
    """Every node with wholly free devices sits, once, in the bucket of its count, and
    each bucket's nodes are in fabric order."""
    for cls, per_depth in index.buckets.items():
        seen: dict[int, int] = {}
        for per_key in per_depth:
            for counts in per_key.values():
                assert counts.sorted == sorted(c for c, nodes in counts.items() if nodes)
                for count, nodes in counts.items():
                    assert list(nodes) == sorted(nodes)
                    for pos in nodes:
                        assert pos not in seen
                        seen[pos] = count
        whole = {TOPO.node_order[n]: c for n, c in index.whole[cls].items() if c}
        assert seen == whole


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(0, len(DEVICES) - 1), st.sampled_from([0.25, 1.0]),
                          st.booleans()), max_size=60))  # fmt: skip
def test_short_and_long_buckets_answer_alike(steps: list[tuple[int, float, bool]]) -> None:
    free = dict.fromkeys(DEVICES, 1.0)
    indexes = []
    for small in (2, capacity.SMALL_NODES):  # 2: buckets turn into sorted lists at once
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(capacity, "SMALL_NODES", small)
            indexes.append(CapacityIndex(TOPO, free))
    for i, share, take in steps:
        dev = DEVICES[i]
        for small, index in zip((2, capacity.SMALL_NODES), indexes, strict=True):
            with pytest.MonkeyPatch.context() as mp:
                mp.setattr(capacity, "SMALL_NODES", small)
                if take and index.free_share(dev) >= share:
                    index.take(dev, share)
                elif not take:
                    index.give(dev, share)
        a, b = indexes
        assert a.free == b.free and a.whole == b.whole
        for cls in TOPO.classes:
            for depth in range(DEPTHS):
                for k in (1, 2, 4):
                    assert a.best_fit(cls, depth, k) == b.best_fit(cls, depth, k)
    for index in indexes:
        _consistent(index)
        _consistent(index.frozen())


def test_a_bucket_grows_into_a_sorted_list_and_keeps_its_order(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(capacity, "SMALL_NODES", 3)
    counts = Counts()
    for pos in (9, 1, 5, 3, 7):
        counts.add(2, pos)
    assert type(counts[2]) is not list and list(counts[2]) == [1, 3, 5, 7, 9]
    counts.discard(2, 5)
    assert list(counts[2]) == [1, 3, 7, 9] and counts.at_least(1) == 2
    for pos in (1, 3, 7, 9):
        counts.discard(2, pos)
    assert counts.at_least(1) is None and counts.clone() == {}
