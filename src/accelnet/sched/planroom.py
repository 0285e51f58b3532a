"""The room a round's plan fills, device by device: whole free devices per model, and the
free part of each partly used one, so a share is planned only where it fits.

A model's room as one divisible number (devices minus the sum of planned shares) plans
three 0.6 shares on two devices (2.0 - 1.8 = 0.2 left), though only two can run: the third
waits, and a 0.4 share that fits beside either is left unplanned. Here a share goes to the
partly used device with the least room that fits it (best fit, as placement does), else to
a wholly free device; a gang of whole devices needs that many wholly free ones.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

_EPS = 1e-9


class PlanRoom:
    """Free room per model while a plan is made (nothing here is a real placement)."""

    def __init__(self, capacity: Mapping[str, int]) -> None:
        self.whole: dict[str, int] = dict(capacity)
        self.parts: dict[str, list[float]] = {m: [] for m in capacity}

    def hold(self, model: str, placements: Iterable[tuple[tuple[str, ...], float]]) -> None:
        """Shares of ``model`` in use now, as (devices, share) placements (running jobs that
        keep their devices): each device they are on is partly used, by their sum."""
        used: dict[str, float] = {}
        for devices, share in placements:
            for d in devices:
                used[d] = used.get(d, 0.0) + share
        for share in used.values():
            self._take_whole(model, 1)
            if 1.0 - share > _EPS:
                self.parts[model].append(1.0 - share)

    def fits(self, model: str, count: int, share: float) -> bool:
        """Whether ``count`` devices (``share`` of one, if below 1) fit now."""
        if share < 1.0:
            return any(p >= share - _EPS for p in self.parts.get(model, ())) or (
                self.whole.get(model, 0) >= 1
            )
        return self.whole.get(model, 0) >= count

    def full(self) -> bool:
        """Whether nothing fits any more: no wholly free device and no free part left on
        any model."""
        return all(n <= 0 for n in self.whole.values()) and not any(self.parts.values())

    def take(self, model: str, count: int, share: float) -> None:
        """Plan ``count`` devices (``share`` of one) on ``model``: a share on the partly used
        device with the least room that fits, else on a whole one; whole devices from the
        wholly free. Taking more than :meth:`fits` allows leaves the room short (kept jobs
        are counted even where the plan has none left)."""
        if share >= 1.0:
            self._take_whole(model, count)
            return
        parts = self.parts.setdefault(model, [])
        fitting = [i for i, p in enumerate(parts) if p >= share - _EPS]
        if fitting:
            best = min(fitting, key=lambda i: parts[i])
            parts[best] -= share
            if parts[best] <= _EPS:
                del parts[best]
            return
        self._take_whole(model, 1)
        parts.append(1.0 - share)

    def _take_whole(self, model: str, count: int) -> None:
        self.whole[model] = self.whole.get(model, 0) - count
