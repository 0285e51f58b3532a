"""Telemetry history in the store: the device care's samples, downsampled and persisted.

:class:`HistoryKeeper` listens to every round of samples (a
:class:`~accelnet.runtime.care.device_care.SampleListener`), folds them into buckets of ``width_s``
(:class:`~accelnet.devices.history.Downsampler`: count/min/mean/max per reading, Xid codes,
throttle reasons, errors) and writes each bucket to the store once it has closed
(:meth:`~accelnet.runtime.control.store.Store.add_history`; bounded per device there). At
:meth:`close` the open buckets are written as they stand; a controller started later on
the same store merges its samples of the same minute into them. Read back with
``store.history(device, since)`` or ``accelnet device history``.
"""

from __future__ import annotations

from accelnet.devices.history import Downsampler, HistoryBucket
from accelnet.devices.telemetry import DeviceSample
from accelnet.runtime.control.store import Store

__all__ = ["HISTORY_WIDTH_S", "HistoryKeeper"]

HISTORY_WIDTH_S = 60.0
"""The default bucket width: one-minute buckets."""


class HistoryKeeper:
    """Samples -> buckets -> ``store`` (see the module docstring). Not thread-safe: the
    controller's thread calls it."""

    def __init__(self, store: Store, width_s: float = HISTORY_WIDTH_S) -> None:
        self._store = store
        self._down = Downsampler(width_s)
        self.written = 0
        self._closed = False

    @property
    def width_s(self) -> float:
        """The bucket width (s)."""
        return self._down.width_s

    def observe(self, samples: list[DeviceSample], now: float) -> None:
        """Fold a round of samples in; write the buckets that ended by ``now``."""
        closed: list[HistoryBucket] = []
        for s in samples:
            try:
                closed += self._down.add(s)
            except ValueError:  # older than its device's open bucket: already written
                continue
        closed += self._down.flush(now)
        self._write(closed)

    def open_buckets(self) -> list[HistoryBucket]:
        """The buckets being filled now, as they stand."""
        return self._down.open_buckets()

    def close(self) -> None:
        """Write the open buckets as they stand. Idempotent."""
        if not self._closed:
            self._closed = True
            self._write(self._down.flush())

    def _write(self, buckets: list[HistoryBucket]) -> None:
        if buckets:
            self._store.add_history(buckets)
            self.written += len(buckets)
