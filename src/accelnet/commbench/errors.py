"""The two ways a collective benchmark fails."""

from __future__ import annotations


class BenchInputError(ValueError):
    """Bad input (a flag's value, a device, a calibration file). The message names the flag
    or file and the value. Always raised before any worker process starts."""


class BenchError(RuntimeError):
    """A run that failed: torch missing, a worker's error (with its rank and device), a
    worker that died or stalled. Every worker is stopped before this is raised."""
