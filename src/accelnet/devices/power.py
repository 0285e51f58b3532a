"""Device power: the power model of one device, and reading and setting power limits.

**The model** is the simulator's (:mod:`accelnet.sim.throughput`, rule 6) and the ``energy``
policy's (:class:`accelnet.sched.policies.energy.PowerTable`): a device of catalog model
``m`` draws ``idle_w`` idle and ``max_w`` busy; under a cap below ``max_w`` a busy device
draws the cap (never less than ``idle_w``: a cap below idle cannot be met), and runs at
``(cap / max_w) ** (1/3)`` of its speed, at least :data:`DVFS_FLOOR` of it. A job on a
``share`` of a device adds ``share`` of its dynamic power. :class:`DevicePower` holds one
device's figures and allowed cap range; ``tests/devices/test_power.py`` checks that its draw
and speed equal :meth:`ThroughputModel.power_w` and :meth:`ThroughputModel.rate` for every
catalog model, so the three stay one model.

**Limits.** A :class:`PowerControl` reads a device's power limits (:class:`PowerLimits`) and
sets one: :class:`EmulatedPowerControl` (here) records caps for CPU and emulated devices and
the simulator; :class:`~accelnet.devices.samplers.nvml_power.NvmlPowerControl` sets NVIDIA
GPUs' limits through NVML. A limit outside the allowed range, a missing permission or an
unsupported device raise :class:`PowerLimitError` naming the device, the watts asked for and
why; nothing is changed then.

Everything here except the NVML control is pure: no I/O, no clock.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, Self

from accelnet.fabric.catalog import device_model

if TYPE_CHECKING:
    from accelnet.fabric.model import Device

__all__ = [
    "DVFS_FLOOR",
    "MIN_CAP_FRACTION",
    "DevicePower",
    "EmulatedPowerControl",
    "PowerControl",
    "PowerLimitError",
    "PowerLimits",
    "busy_draw_w",
    "cap_speed",
    "check_limit",
]

DVFS_FLOOR: Final = 0.3
"""The lowest fraction of its speed a capped device keeps (the simulator's ``DVFS_FLOOR``)."""

MIN_CAP_FRACTION: Final = 0.3
"""Lowest cap, as a fraction of ``max_w``, of a device whose driver does not say (CPU,
emulated devices). NVIDIA data-centre GPUs allow 0.25-0.5 (H100 SXM 200-700 W)."""


def busy_draw_w(idle_w: float, max_w: float, cap_w: float | None = None) -> float:
    """Draw (W) of a fully busy device: ``max_w``, or the cap below it, never below idle."""
    if cap_w is None:
        return max_w
    _check_watts(cap_w, "power cap")
    return max(idle_w, min(cap_w, max_w))


def cap_speed(cap_w: float | None, max_w: float) -> float:
    """Fraction of its uncapped speed a device keeps under ``cap_w``:
    ``max(DVFS_FLOOR, (cap / max_w) ** (1/3))``, 1.0 at or above ``max_w`` (or no cap)."""
    if cap_w is None or cap_w >= max_w:
        return 1.0
    _check_watts(cap_w, "power cap")
    return max(DVFS_FLOOR, float((cap_w / max_w) ** (1.0 / 3.0)))


@dataclass(frozen=True, slots=True)
class DevicePower:
    """One device's power figures (W): ``idle_w``, ``max_w`` (busy, uncapped: the catalog's
    figure, or a better one the caller measured), and the range a cap may take.

    Raises ValueError unless ``0 <= idle_w <= max_w``, ``0 < cap_min_w <= cap_max_w``, all
    finite.
    """

    device: str
    model: str
    idle_w: float
    max_w: float
    cap_min_w: float
    cap_max_w: float

    def __post_init__(self) -> None:
        values = (self.idle_w, self.max_w, self.cap_min_w, self.cap_max_w)
        if not all(math.isfinite(v) for v in values):
            raise ValueError(f"{self.device}: power figures must be finite, got {values}")
        if not 0 <= self.idle_w <= self.max_w or self.max_w <= 0:
            raise ValueError(
                f"{self.device}: need 0 <= idle_w <= max_w and max_w > 0, "
                f"got idle {self.idle_w} W, max {self.max_w} W"
            )
        if not 0 < self.cap_min_w <= self.cap_max_w:
            raise ValueError(
                f"{self.device}: need 0 < cap_min_w <= cap_max_w, "
                f"got {self.cap_min_w}-{self.cap_max_w} W"
            )

    @classmethod
    def of_model(
        cls,
        device: str,
        model: str,
        cap_range_w: tuple[float, float] | None = None,
    ) -> Self:
        """The figures of catalog ``model`` (aliases accepted; an unknown name raises
        :class:`~accelnet.fabric.catalog.UnknownNameError` listing known ones). The cap range
        defaults to ``[max(idle, MIN_CAP_FRACTION * max), max]``."""
        m = device_model(model)
        lo, hi = cap_range_w or (max(m.idle_w, MIN_CAP_FRACTION * m.max_w), m.max_w)
        return cls(device, m.name, m.idle_w, m.max_w, lo, hi)

    @classmethod
    def of(cls, device: Device, limits: PowerLimits | None = None) -> Self:
        """A fabric device's figures; the cap range from ``limits`` where they give it
        (NVML's constraints), else the catalog default."""
        rng = None
        if limits is not None and limits.min_w is not None and limits.max_w is not None:
            rng = (limits.min_w, limits.max_w)
        return cls.of_model(device.id, device.model.name, rng)

    def busy_w(self, cap_w: float | None = None) -> float:
        """Draw when fully busy under ``cap_w`` (see :func:`busy_draw_w`)."""
        return busy_draw_w(self.idle_w, self.max_w, cap_w)

    def draw_w(self, share: float = 1.0, cap_w: float | None = None, util: float = 1.0) -> float:
        """Draw of the device with ``share`` of it busy at utilization ``util`` (0..1):
        ``idle + share * util * (busy(cap) - idle)``."""
        return self.idle_w + share * util * (self.busy_w(cap_w) - self.idle_w)

    def speed(self, cap_w: float | None) -> float:
        """Fraction of its speed the device keeps under ``cap_w`` (see :func:`cap_speed`)."""
        return cap_speed(cap_w, self.max_w)


# ----- limits ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PowerLimits:
    """A device's power limits (W); ``None`` where the device cannot say.

    ``limit_w`` is the limit set (NVML's power management limit), ``enforced_w`` the one in
    force (the lowest of every limit, e.g. also an out-of-band one), ``default_w`` the limit
    after a reset, ``min_w``/``max_w`` the range a limit may take.
    """

    device: str
    limit_w: float | None
    enforced_w: float | None
    default_w: float | None
    min_w: float | None
    max_w: float | None

    def allows(self, watts: float) -> bool:
        """Whether ``watts`` is within the known range (True where a bound is unknown)."""
        return (self.min_w is None or watts >= self.min_w) and (
            self.max_w is None or watts <= self.max_w
        )


class PowerLimitError(RuntimeError):
    """A power limit could not be read or set; nothing was changed. ``device``,
    ``requested_w`` (None for a read) and ``reason`` say which, what and why."""

    def __init__(self, device: str, requested_w: float | None, reason: str) -> None:
        self.device = device
        self.requested_w = requested_w
        self.reason = reason
        what = (
            f"cannot set the power limit of {device} to {_w(requested_w)} W"
            if requested_w is not None
            else f"cannot read the power limits of {device}"
        )
        super().__init__(f"{what}: {reason}")


def check_limit(limits: PowerLimits, watts: float) -> None:
    """Raise :class:`PowerLimitError` unless ``watts`` is within ``limits``' range (the
    message names the range); ValueError unless it is a finite number > 0."""
    if isinstance(watts, bool) or not isinstance(watts, int | float):
        raise ValueError(f"{limits.device}: a power limit must be a number of W, got {watts!r}")
    _check_watts(watts, f"{limits.device}: a power limit")
    if not limits.allows(watts):
        lo = "?" if limits.min_w is None else _w(limits.min_w)
        hi = "?" if limits.max_w is None else _w(limits.max_w)
        raise PowerLimitError(
            limits.device, watts, f"outside the allowed range {lo}-{hi} W; nothing changed"
        )


class PowerControl(ABC):
    """Reads and sets the power limits of a fixed set of devices.

    ``limits`` may block for the driver calls (milliseconds); ``set_limit`` too, and is
    idempotent (setting the limit in force again changes nothing). Both raise KeyError for a
    device the control does not manage (naming those it does) and :class:`PowerLimitError`
    when the device cannot (a limit outside its range, no permission, unsupported): then
    nothing changed. ``close()`` releases what the control holds; idempotent.
    """

    @abstractmethod
    def devices(self) -> tuple[str, ...]:
        """The device ids this control manages, in a fixed order."""

    @abstractmethod
    def limits(self, device: str) -> PowerLimits:
        """The power limits of ``device`` now."""

    @abstractmethod
    def set_limit(self, device: str, watts: float) -> PowerLimits:
        """Cap ``device`` at ``watts``; returns the limits after the change."""

    def reset_limit(self, device: str) -> PowerLimits:
        """Set ``device``'s limit back to its default; PowerLimitError if it has none."""
        default = self.limits(device).default_w
        if default is None:
            raise PowerLimitError(device, None, "the device reports no default limit")
        return self.set_limit(device, default)

    def close(self) -> None:  # noqa: B027 (an emulated control holds nothing)
        """Release what the control holds. Idempotent."""

    def _unknown(self, device: str) -> KeyError:
        return KeyError(f"no power control for device {device!r}; managed: {list(self.devices())}")

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class EmulatedPowerControl(PowerControl):
    """Power limits of devices without a driver to ask (CPU cores, emulated devices, the
    simulator): it records the cap set and reports it. Limits range over each device's
    ``[cap_min_w, cap_max_w]``, default ``cap_max_w``. ``permitted=False`` refuses every
    change as a non-root NVML user would (for testing callers). Not thread-safe.
    """

    def __init__(self, devices: Iterable[DevicePower], *, permitted: bool = True) -> None:
        self._power = {d.device: d for d in devices}
        self._caps: dict[str, float] = {}
        self._permitted = permitted

    def devices(self) -> tuple[str, ...]:
        """See :class:`PowerControl`."""
        return tuple(self._power)

    def limits(self, device: str) -> PowerLimits:
        """See :class:`PowerControl`."""
        p = self._power.get(device)
        if p is None:
            raise self._unknown(device)
        cap = self._caps.get(device, p.cap_max_w)
        return PowerLimits(device, cap, cap, p.cap_max_w, p.cap_min_w, p.cap_max_w)

    def set_limit(self, device: str, watts: float) -> PowerLimits:
        """See :class:`PowerControl`."""
        limits = self.limits(device)
        check_limit(limits, watts)
        if not self._permitted:
            raise PowerLimitError(device, watts, "not permitted (emulated NoPermission)")
        self._caps[device] = float(watts)
        return self.limits(device)

    def caps(self) -> dict[str, float]:
        """Device -> cap for the devices capped below their default (what
        ``SimBackend(power_caps=...)`` takes)."""
        return {d: c for d, c in self._caps.items() if c < self._power[d].cap_max_w}

    def power(self) -> Mapping[str, DevicePower]:
        """The devices' power figures, by id."""
        return dict(self._power)


def _check_watts(value: float, what: str) -> None:
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"{what} must be a finite number of W > 0, got {value!r}")


def _w(value: float) -> str:
    """Watts for a message: ``250``, ``1,250``, ``87.5``."""
    return f"{value:,.0f}" if abs(value - round(value)) < 0.05 else f"{value:,.1f}"
