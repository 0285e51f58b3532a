"""Hosts' free CPU and memory units, with copies that cost nothing to take.

A decision on a full fabric keeps a frozen copy of the capacity index to explain later why
jobs wait (:meth:`~accelnet.sched.capacity.CapacityIndex.frozen`). Copying every host's
free cores and memory for it cost O(hosts) per decision (about 100 µs on 16,384 hosts).
A :class:`RoomView` instead reads the live table through a :class:`Journal` of the values
the live table had before each change since the view was taken: taking one is O(1), a
change to the live table costs one look-up per view still alive, and a read of the view
is two dictionary look-ups.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterator, Mapping

_ABSENT = object()


class Journal:
    """The values a live table had when a view of it was taken, for each key changed
    since (the first change of a key records it; later ones find it there)."""

    __slots__ = ("__weakref__", "before")

    def __init__(self) -> None:
        self.before: dict[str, int] = {}


class RoomView(Mapping[str, int]):
    """A read-only mapping: ``live`` as it was when the view was taken."""

    __slots__ = ("_journal", "_live")

    def __init__(self, live: Mapping[str, int], journal: Journal) -> None:
        self._live = live
        self._journal = journal  # held here: the live table records into it while we live

    def __getitem__(self, key: str) -> int:
        old = self._journal.before.get(key, _ABSENT)
        return self._live[key] if old is _ABSENT else old  # type: ignore[return-value]

    def __iter__(self) -> Iterator[str]:
        return iter(self._live)  # a live table never gains or loses keys

    def __len__(self) -> int:
        return len(self._live)


class Journals:
    """The journals of a live table's views still alive (weakly held)."""

    __slots__ = ("_refs",)

    def __init__(self) -> None:
        self._refs: list[weakref.ref[Journal]] = []

    def view(self, live: Mapping[str, int]) -> RoomView:
        """A view of ``live`` as it is now (``live`` must record each change here first,
        with :meth:`changing`)."""
        journal = Journal()
        self._refs = [r for r in self._refs if r() is not None]
        self._refs.append(weakref.ref(journal))
        return RoomView(live, journal)

    def changing(self, key: str, before: int) -> None:
        """``key`` of the live table is about to change from ``before``."""
        for ref in self._refs:
            journal = ref()
            if journal is not None and key not in journal.before:
                journal.before[key] = before

    def __bool__(self) -> bool:
        return bool(self._refs)
