"""The capacity index moved in batches (a placement's devices taken together, the devices
that changed between decisions reset together: ``CapacityIndex.hold``, ``reset_many``)
ends exactly where one device at a time and a fresh index of the same state do."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from accelnet.fabric import DomainLevel, load_fabric
from accelnet.sched.capacity import SHARE_UNITS, CapacityIndex
from accelnet.sched.snapshot import Placement
from accelnet.sched.topology import DEPTHS, Topology

from .test_capacity_buckets import _consistent

FABRIC = load_fabric("fat-tree:hosts=8,gpus_per_host=4")
TOPO = Topology(FABRIC)
DEVICES = sorted(FABRIC.devices)
SHARES = (0.25, 0.5, 1.0)

# devices may repeat within a batch: a batch must end where one change at a time does
step = st.one_of(
    st.tuples(st.just("hold"), st.lists(st.integers(0, len(DEVICES) - 1), min_size=1,
                                        max_size=8), st.sampled_from(SHARES)),
    st.tuples(st.just("reset"), st.lists(st.tuples(st.integers(0, len(DEVICES) - 1),
                                                   st.integers(0, SHARE_UNITS), st.booleans()),
                                         min_size=1, max_size=8)),
)  # fmt: skip


def _same(a: CapacityIndex, b: CapacityIndex) -> None:
    assert a.free == b.free
    assert {c: {n: k for n, k in w.items() if k} for c, w in a.whole.items()} == {
        c: {n: k for n, k in w.items() if k} for c, w in b.whole.items()
    }
    assert a.partial == b.partial
    for cls in TOPO.classes:
        for depth in range(DEPTHS):
            for k in (1, 2, 3, 4, 8):
                assert a.best_fit(cls, depth, k) == b.best_fit(cls, depth, k)


@settings(max_examples=60, deadline=None)
@given(st.lists(step, max_size=25))
def test_batches_end_where_one_at_a_time_and_a_fresh_index_do(steps: list) -> None:  # type: ignore[type-arg]
    batched = CapacityIndex(TOPO, dict.fromkeys(DEVICES, 1.0))
    single = CapacityIndex(TOPO, dict.fromkeys(DEVICES, 1.0))
    for kind, *args in steps:
        if kind == "hold":
            devs, share = [DEVICES[i] for i in args[0]], args[1]
            errors: list[str | None] = []
            try:
                batched.hold(Placement(tuple(devs), share, "", DomainLevel.HOST))
                errors.append(None)
            except ValueError as e:  # what was taken before the device without room stays
                errors.append(str(e))
            try:
                for d in devs:
                    single.take(d, share)
                errors.append(None)
            except ValueError as e:
                errors.append(str(e))
            assert errors[0] == errors[1]
            assert batched._log == single._log
        else:
            items = [(DEVICES[i], units, ok) for i, units, ok in args[0]]
            batched._log.clear()  # resets come between decisions, never inside a what-if
            single._log.clear()
            batched.reset_many(items)
            for dev, units, ok in items:
                single.reset(dev, units, ok)
        _same(batched, single)
    _consistent(batched)
    # a fresh index of the final state (devices with nothing free left out: the same
    # answers as schedulable ones that are full)
    fresh = {d: u / SHARE_UNITS for d, u in batched.free.items()}
    _same(batched, CapacityIndex(TOPO, fresh))
