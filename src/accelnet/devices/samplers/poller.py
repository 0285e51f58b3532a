"""Sampling on a period: feeds the ring buffer and the downsampled history, and measures
what sampling costs.

:class:`Poller` samples when its injected clock says a period has passed; it neither sleeps
nor reads the time itself (``poll(now)``), so the controller's loop, a test or the simulator
drives it. :func:`run_polling` is the thin real-time loop for a script: it takes the clock
and the sleep as arguments. The cost of every sampler call is measured with ``timer`` (a
monotonic performance counter): :meth:`Poller.costs` gives seconds per device per sample
and the overhead per device per second of wall time at the configured period.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from accelnet.devices.history import Downsampler, HistoryBucket
from accelnet.devices.telemetry import DeviceSample, Sampler, SampleRing


@dataclass(frozen=True, slots=True)
class SamplingCost:
    """What one sampler's calls cost so far: ``rounds`` calls of ``sample`` that produced
    ``device_samples`` samples in ``seconds`` of ``timer`` time (wall time by default)."""

    sampler: str
    rounds: int
    device_samples: int
    seconds: float

    @property
    def per_device_sample_s(self) -> float:
        """Seconds per device per sample (0 before the first sample)."""
        return self.seconds / self.device_samples if self.device_samples else 0.0

    def per_device_per_s(self, period_s: float) -> float:
        """Seconds of sampling work per device per second at ``period_s`` (a core fraction)."""
        return self.per_device_sample_s / period_s


@dataclass(slots=True)
class _Tally:
    rounds: int = 0
    samples: int = 0
    seconds: float = 0.0
    failures: int = 0
    last_error: str = ""


class Poller:
    """Samples every ``period_s`` of the caller's clock with each of ``samplers``.

    Each sample goes to ``ring`` and ``history`` (if given); buckets the history closes wait
    in :meth:`take_history` for the store. A due time missed by more than a period is
    skipped, not caught up (``skipped`` counts them). A sampler that raises is counted in
    :meth:`failures` and the others still run. Not thread-safe.
    """

    def __init__(
        self,
        samplers: Sequence[Sampler],
        period_s: float,
        *,
        ring: SampleRing | None = None,
        history: Downsampler | None = None,
        timer: Callable[[], float] = time.perf_counter,
    ) -> None:
        if not period_s > 0:
            raise ValueError(f"sampling period must be > 0 s, got {period_s}")
        self._samplers = tuple(samplers)
        self._period = float(period_s)
        self.ring = ring
        self.history = history
        self._timer = timer
        self._next: float | None = None
        self._tallies = [_Tally() for _ in self._samplers]
        self._closed: list[HistoryBucket] = []
        self.skipped = 0

    @property
    def period_s(self) -> float:
        """The sampling period in seconds."""
        return self._period

    @property
    def next_due(self) -> float | None:
        """When the next sample is due; None before the first."""
        return self._next

    def due(self, now: float) -> bool:
        """Whether a sample is due at ``now``."""
        return self._next is None or now >= self._next

    def poll(self, now: float) -> list[DeviceSample]:
        """Sample if due at ``now`` (the first call always is); the new samples, else []."""
        if not self.due(now):
            return []
        if self._next is None:
            self._next = now + self._period
        else:
            behind = int((now - self._next) // self._period)
            self.skipped += behind
            self._next += (behind + 1) * self._period
        return self.sample_now(now)

    def sample_now(self, now: float) -> list[DeviceSample]:
        """Sample every sampler now, whatever the schedule; feed ring and history."""
        out: list[DeviceSample] = []
        for sampler, tally in zip(self._samplers, self._tallies, strict=True):
            t0 = self._timer()
            try:
                got = sampler.sample(now)
            except Exception as exc:  # one broken sampler must not stop the others
                tally.failures += 1
                tally.last_error = f"{type(exc).__name__}: {exc}"
                continue
            finally:
                tally.seconds += self._timer() - t0
            tally.rounds += 1
            tally.samples += len(got)
            out += got
        if self.ring is not None:
            self.ring.extend(out)
        if self.history is not None:
            self._closed += self.history.extend(out)
        return out

    def take_history(self, now: float | None = None) -> list[HistoryBucket]:
        """The history buckets closed so far (and, given ``now``, those ended by then);
        each is handed out once."""
        if self.history is not None and now is not None:
            self._closed += self.history.flush(now)
        out, self._closed = self._closed, []
        return out

    def costs(self) -> tuple[SamplingCost, ...]:
        """Measured cost per sampler (named by its class), in sampler order."""
        return tuple(
            SamplingCost(type(s).__name__, t.rounds, t.samples, t.seconds)
            for s, t in zip(self._samplers, self._tallies, strict=True)
        )

    def failures(self) -> dict[str, tuple[int, str]]:
        """Sampler class name -> (failed calls, last error), for samplers that failed."""
        return {
            type(s).__name__: (t.failures, t.last_error)
            for s, t in zip(self._samplers, self._tallies, strict=True)
            if t.failures
        }

    def close(self) -> None:
        """Close every sampler."""
        for s in self._samplers:
            s.close()


def run_polling(
    poller: Poller,
    now: Callable[[], float],
    sleep: Callable[[float], None],
    rounds: int,
    on_samples: Callable[[list[DeviceSample]], None] | None = None,
) -> None:
    """Take ``rounds`` samples on the poller's period, sleeping in between with ``sleep``
    (``time.sleep`` in a script, a fake in tests). Blocks for about ``rounds`` periods."""
    taken = 0
    while taken < rounds:
        t = now()
        if poller.due(t):
            got = poller.poll(t)
            taken += 1
            if on_samples is not None:
                on_samples(got)
        due = poller.next_due
        if taken < rounds and due is not None:
            sleep(max(0.0, due - now()))
