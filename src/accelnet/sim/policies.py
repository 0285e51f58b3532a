"""Named scheduling policies for the simulator's ``--policy`` (and for comparing them).

A policy name stands for a :class:`~accelnet.sched.Scheduler` configuration: the ordering
policy, the placement strategy and the preemption rule. The live controller takes the very
same objects. More policies come with the policies issue; each is one entry here.
"""

from __future__ import annotations

from typing import Any

from accelnet.sched import Scheduler

POLICIES: dict[str, dict[str, Any]] = {
    "fifo": {"ordering": "fifo"},
    "fifo-first-fit": {"ordering": "fifo", "placement": "first-fit"},
    "priority": {"ordering": "priority"},
    "priority-preempt": {"ordering": "priority", "preemption": "priority"},
}


def make_scheduler(name: str) -> Scheduler:
    """A fresh scheduler for policy ``name``; ValueError listing the known ones."""
    config = POLICIES.get(name)
    if config is None:
        raise ValueError(f"unknown policy {name!r}; known: {', '.join(POLICIES)}")
    return Scheduler(**config)
