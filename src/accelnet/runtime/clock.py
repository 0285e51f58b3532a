"""Clocks. The only place in accelnet that reads the time or sleeps for real."""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    """Seconds since the epoch (or since the start of a simulation)."""

    def now(self) -> float:
        """The current time."""
        ...


class SystemClock:
    """Wall-clock time."""

    def now(self) -> float:
        """``time.time()``."""
        return time.time()


class ManualClock:
    """A clock that moves only when told to (tests, the simulator)."""

    def __init__(self, start: float = 0.0) -> None:
        self._now = start

    def now(self) -> float:
        """The time set last."""
        return self._now

    def advance(self, seconds: float) -> None:
        """Move forward by ``seconds`` (>= 0)."""
        if seconds < 0:
            raise ValueError(f"a clock cannot go back ({seconds} s)")
        self._now += seconds

    def set(self, t: float) -> None:
        """Move forward to ``t`` (not before the current time)."""
        if t < self._now:
            raise ValueError(f"a clock cannot go back (from {self._now} to {t})")
        self._now = t
