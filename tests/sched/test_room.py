"""Frozen copies of the capacity index read hosts' CPU and memory through journalled
views (accelnet.sched.room): O(1) to take, and never changed by the live index."""

from __future__ import annotations

import gc

from hypothesis import given, settings
from hypothesis import strategies as st

from accelnet.fabric.build import build_fabric, parse_spec
from accelnet.sched.capacity import UNLIMITED, CapacityIndex
from accelnet.sched.room import Journals
from accelnet.sched.topology import Topology


def _host(i: int) -> dict[str, object]:
    return {"name": f"h{i}", "devices": "2xT4", "cpus": 16, "memory_gb": 64, "nics": "IB-EDR",
            "network": "leaf"}  # fmt: skip


def _index(hosts: int = 3) -> CapacityIndex:
    spec = {
        "name": "f",
        "switches": [{"name": "leaf", "kind": "leaf"}],
        "hosts": [_host(i) for i in range(hosts)],
    }
    fab = build_fabric(parse_spec(spec, "<f>"))
    topo = Topology(fab)
    return CapacityIndex(topo, dict.fromkeys(fab.devices, 1.0))


def test_a_frozen_index_keeps_the_hosts_room_it_was_taken_with() -> None:
    live = _index()
    before = {h: live.host_room(h) for h in ("h0", "h1", "h2")}
    twin = live.frozen()
    live.take_host("h0", 8, 0)
    live.take_host("h1", 2, 5)
    live.give_host("h0", 3, 0)
    assert {h: twin.host_room(h) for h in before} == before
    assert live.host_room("h0")[0] == before["h0"][0] - 5
    assert dict(twin.cpu) == {h: room[0] for h, room in before.items()}


def test_a_frozen_index_that_changes_makes_its_own_tables_and_its_views_hold() -> None:
    live = _index()
    twin = live.frozen()
    grandchild = twin.frozen()  # a view of a view
    start = twin.host_room("h2")
    twin.take_host("h2", 4, 4)  # the twin's own change
    assert twin.host_room("h2") == (start[0] - 4, start[1] - 4)
    assert live.host_room("h2") == start  # the live index is not touched
    assert grandchild.host_room("h2") == start
    live.take_host("h2", 1, 0)
    assert grandchild.host_room("h2") == start and twin.host_room("h2")[0] == start[0] - 4
    mark = twin.mark()
    twin.take_host("h1", 2, 0)
    twin.rollback(mark)
    assert twin.host_room("h1") == live.host_room("h1")


def test_views_that_died_are_no_longer_written_to() -> None:
    journals = Journals()
    table = {"a": 1}
    view = journals.view(table)
    journals.changing("a", 1)
    table["a"] = 2
    assert view["a"] == 1 and view.get("b", UNLIMITED) == UNLIMITED
    del view
    gc.collect()
    assert not any(ref() is not None for ref in journals._refs)
    journals.view(table)  # taking a view prunes the dead ones
    assert len(journals._refs) == 1


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2), st.integers(0, 6), st.integers(0, 6),
                          st.booleans(), st.booleans()), max_size=30))  # fmt: skip
def test_every_frozen_copy_reads_what_a_full_copy_would(
    steps: list[tuple[int, int, int, bool, bool]],
) -> None:
    live = _index()
    copies: list[tuple[CapacityIndex, dict[str, tuple[int, int]]]] = []
    for i, cpu, mem, take, freeze in steps:
        host = f"h{i}"
        free_cpu, free_mem = live.host_room(host)
        if take and cpu <= free_cpu and mem <= free_mem:
            live.take_host(host, cpu, mem)
        elif not take:
            live.give_host(host, cpu, mem)
        if freeze:
            copies.append((live.frozen(), {h: live.host_room(h) for h in ("h0", "h1", "h2")}))
        for twin, expected in copies:
            assert {h: twin.host_room(h) for h in expected} == expected
