"""Free capacity, indexed so that a placement touches a handful of entries, not the fabric.

For every device class and domain level the index keeps how many *wholly free* devices
each domain has, and buckets of domains by that count, so "the smallest domain with at
least k free" is a walk over a few distinct counts. Partly used devices (fractional shares)
are kept sorted by free share per class for best-fit packing. Every change is logged so
that what-if questions (would this job fit if those jobs were preempted?) can be rolled
back exactly.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Mapping

from accelnet.fabric import DomainLevel
from accelnet.sched.topology import Topology

EPS = 1e-9


class CapacityIndex:
    """Free shares of schedulable devices, with per-domain counts of wholly free ones."""

    def __init__(self, topo: Topology, free: Mapping[str, float]) -> None:
        """``free``: free share (0..1] of every schedulable device; others are absent."""
        self.topo = topo
        self.free: dict[str, float] = {}
        # whole[cls][level][domain] = wholly free devices of cls in domain
        self.whole: dict[str, dict[DomainLevel, dict[str, int]]] = {}
        # buckets[cls][level][count] = domains with exactly that many (insertion-ordered)
        self.buckets: dict[str, dict[DomainLevel, dict[int, dict[str, None]]]] = {}
        # partial[cls] = sorted (free share, fabric order, device) for 0 < free < 1
        self.partial: dict[str, list[tuple[float, int, str]]] = {}
        self._log: list[tuple[str, float]] = []
        for c in topo.classes:
            self.whole[c] = {lv: {} for lv in topo.levels}
            self.buckets[c] = {lv: {} for lv in topo.levels}
            self.partial[c] = []
        order = topo.order
        for dev in sorted(free, key=order.__getitem__):
            share = free[dev]
            if share > EPS:
                self._set(dev, 0.0, share)

    # ----- queries --------------------------------------------------------------------
    def whole_free(self, cls: str, level: DomainLevel, domain: str) -> int:
        """Wholly free devices of ``cls`` in ``domain``."""
        return self.whole[cls][level].get(domain, 0)

    def total_whole(self, cls: str) -> int:
        """Wholly free devices of ``cls`` in the fabric."""
        return sum(self.whole[cls][DomainLevel.FABRIC].values())

    def best_fit(self, cls: str, level: DomainLevel, k: int) -> str | None:
        """The domain at ``level`` with the fewest wholly free ``cls`` devices that are >= k."""
        buckets = self.buckets[cls][level]
        best = None
        for count in buckets:
            if count >= k and (best is None or count < best):
                best = count
        if best is None:
            return None
        return next(iter(buckets[best]))

    def first_fit(self, cls: str, level: DomainLevel, k: int) -> str | None:
        """The first domain at ``level`` (in fabric order) with >= k wholly free devices."""
        counts = self.whole[cls][level]
        for dom in self.topo.domains_at[level]:
            if counts.get(dom, 0) >= k:
                return dom
        return None

    def largest(self, cls: str, level: DomainLevel) -> tuple[str | None, int]:
        """The domain at ``level`` with the most wholly free ``cls`` devices, and how many."""
        buckets = self.buckets[cls][level]
        if not buckets:
            return None, 0
        top = max(buckets)
        return next(iter(buckets[top])), top

    def best_partial(self, cls: str, share: float) -> str | None:
        """The partly used device of ``cls`` with the least free share that is >= ``share``."""
        items = self.partial[cls]
        i = bisect.bisect_left(items, (share - EPS, -1, ""))
        return items[i][2] if i < len(items) else None

    def max_partial(self, cls: str) -> float:
        """The largest free share among partly used devices of ``cls`` (0 if none)."""
        items = self.partial[cls]
        return items[-1][0] if items else 0.0

    # ----- changes --------------------------------------------------------------------
    def take(self, dev: str, share: float) -> None:
        """Use ``share`` of ``dev``; raises ValueError if it has less free."""
        have = self.free.get(dev, 0.0)
        if share > have + EPS:
            raise ValueError(f"{dev} has {have:g} free, cannot take {share:g}")
        self._log.append((dev, have))
        self._set(dev, have, max(0.0, have - share))

    def give(self, dev: str, share: float) -> None:
        """Free ``share`` of ``dev`` (a what-if release of a running job)."""
        have = self.free.get(dev, 0.0)
        self._log.append((dev, have))
        self._set(dev, have, min(1.0, have + share))

    def mark(self) -> int:
        """A point to :meth:`rollback` to."""
        return len(self._log)

    def rollback(self, mark: int) -> None:
        """Undo every change since ``mark``."""
        while len(self._log) > mark:
            dev, before = self._log.pop()
            self._set(dev, self.free.get(dev, 0.0), before)

    def take_all(self, devices: Iterable[str], share: float) -> None:
        """:meth:`take` on each device."""
        for d in devices:
            self.take(d, share)

    # ----- internals ------------------------------------------------------------------
    def _set(self, dev: str, old: float, new: float) -> None:
        cls = self.topo.class_of[dev].key
        was_whole, is_whole = old >= 1.0 - EPS, new >= 1.0 - EPS
        order = self.topo.order[dev]
        if EPS < old < 1.0 - EPS:
            items = self.partial[cls]
            del items[bisect.bisect_left(items, (old, order, dev))]
        if EPS < new < 1.0 - EPS:
            bisect.insort(self.partial[cls], (new, order, dev))
        if new > EPS:
            self.free[dev] = new
        else:
            self.free.pop(dev, None)
        if was_whole != is_whole:
            delta = 1 if is_whole else -1
            for level in self.topo.levels:
                dom = self.topo.domain_of[level][dev]
                counts = self.whole[cls][level]
                before = counts.get(dom, 0)
                after = before + delta
                buckets = self.buckets[cls][level]
                if before:
                    b = buckets[before]
                    del b[dom]
                    if not b:
                        del buckets[before]
                if after:
                    counts[dom] = after
                    buckets.setdefault(after, {})[dom] = None
                else:
                    counts.pop(dom, None)
