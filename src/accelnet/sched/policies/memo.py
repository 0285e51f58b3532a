"""A small memo of a round policy's LP answers, keyed by everything the LP is built from.

A round policy is asked for an allocation at every round and whenever the jobs change;
most rounds ask the very question of the round before (the same jobs, alike in the same
order, on the same devices). An answer kept under a key that holds *all* of the LP's
inputs, in the order the LP is built from them, is the answer a fresh solve gives, so
reusing it changes no decision. A few recent answers are kept (a job stopped and
requeued, then back, asks an older question again).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable
from typing import Generic, TypeVar

T = TypeVar("T")


class Memo(Generic[T]):
    """The ``size`` most recently used answers, by key; ``hits`` and ``misses`` counted."""

    def __init__(self, size: int = 16) -> None:
        self.size = size
        self.hits = 0
        self.misses = 0
        self._items: OrderedDict[Hashable, T] = OrderedDict()

    def get(self, key: Hashable) -> T | None:
        """The answer kept under ``key`` (None: not kept)."""
        value = self._items.get(key)
        if value is None:
            self.misses += 1
            return None
        self.hits += 1
        self._items.move_to_end(key)
        return value

    def put(self, key: Hashable, value: T) -> None:
        """Keep ``value`` under ``key``, forgetting the least recently used beyond ``size``."""
        self._items[key] = value
        self._items.move_to_end(key)
        while len(self._items) > self.size:
            self._items.popitem(last=False)
