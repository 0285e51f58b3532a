"""The room a round's plan fills, device by device (``accelnet.sched.planroom``)."""

from __future__ import annotations

import pytest

from accelnet.sched.planroom import PlanRoom


def test_shares_go_best_fit_and_gangs_need_wholly_free_devices() -> None:
    room = PlanRoom({"T4": 2})
    room.take("T4", 1, 0.6)
    room.take("T4", 1, 0.6)  # 0.4 left on each: a third 0.6 does not fit
    assert not room.fits("T4", 1, 0.6) and room.fits("T4", 1, 0.4)
    assert not room.fits("T4", 1, 1.0)  # no wholly free device left
    room.take("T4", 1, 0.3)
    room.take("T4", 1, 0.4)  # best fit: on the device with 0.4 left, not the one with 0.1
    assert room.parts["T4"] == [pytest.approx(0.1)]
    assert not room.fits("T4", 1, 0.2)
    gangs = PlanRoom({"V100": 4})
    assert gangs.fits("V100", 4, 1.0) and not gangs.fits("V100", 5, 1.0)
    gangs.take("V100", 1, 0.5)
    assert not gangs.fits("V100", 4, 1.0) and gangs.fits("V100", 3, 1.0)


def test_running_shares_hold_the_devices_they_are_on() -> None:
    room = PlanRoom({"T4": 3})
    room.hold("T4", [(("t/gpu0",), 0.6), (("t/gpu0",), 0.4), (("t/gpu1",), 0.5)])
    assert room.whole["T4"] == 1 and room.parts["T4"] == [0.5]
    assert room.fits("T4", 1, 0.5) and room.fits("T4", 1, 1.0) and not room.fits("T4", 2, 1.0)
