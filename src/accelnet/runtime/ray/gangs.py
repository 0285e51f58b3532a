"""Gangs across Ray nodes: the ranks of a task group that spans nodes start all-or-nothing.

Their ranks are held until one placement group, a bundle pinned to each of their nodes
(``STRICT_SPREAD``, label selector ``ray.io/node-id``; checked once ready), is ready; a gang
whose group is not ready within ``gang_timeout_s`` or one of whose nodes goes away fails
without any rank having run. Internal to :class:`~accelnet.runtime.ray.backend.RayBackend`,
which owns one :class:`Gangs` (called from its thread only).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from accelnet.runtime.backend import TaskEventKind
from accelnet.runtime.ray.connect import NODE_ID_LABEL
from accelnet.runtime.ray.parts import CALL_S, NodeRecord, RayTask, first_line

if TYPE_CHECKING:
    from accelnet.runtime.ray.connect import RayOptions

_GANG_BUNDLE = {"memory": 1.0}  # each node's bundle: a byte (every node has memory)


@dataclass(slots=True, eq=False)
class _Gang:
    hosts: tuple[str, ...]
    group: Any  # the placement group
    deadline: float  # time.monotonic()
    ready: bool = False
    held: list[str] = field(default_factory=list)  # task ids waiting for the group
    members: set[str] = field(default_factory=set)  # task ids not ended


class Gangs:
    """The backend's gangs, keyed by (job, attempt). Shares the backend's ``nodes``,
    ``tasks`` and ``waiting`` (ObjectRef -> (what, key)) maps; ``finish`` ends a task
    with an event, ``send`` hands a rank to its node's agent."""

    def __init__(
        self,
        ray: Any,
        options: RayOptions,
        nodes: dict[str, NodeRecord],
        tasks: dict[str, RayTask],
        waiting: dict[Any, tuple[str, Any]],
        finish: Callable[..., None],
        send: Callable[[RayTask], None],
    ) -> None:
        self._ray = ray
        self._options = options
        self._nodes = nodes
        self._tasks = tasks
        self._waiting = waiting
        self._finish = finish
        self._send = send
        self.gangs: dict[tuple[str, int], _Gang] = {}

    def hold(self, t: RayTask, hosts: tuple[str, ...]) -> None:
        """A rank of a gang across ``hosts``: sent once the gang's placement group (one
        bundle pinned to each host's node) is ready."""
        key = (t.spec.job_id, t.spec.attempt)
        gang = self.gangs.get(key)
        if gang is None:
            down = [h for h in hosts if not self._nodes[h].up]
            if down:
                why = f"the gang cannot start: node(s) {', '.join(down)} down"
                self._finish(t.spec.task_id, TaskEventKind.FAILED, error=why)
                return
            from ray.util.placement_group import placement_group  # noqa: PLC0415

            group = placement_group(
                [dict(_GANG_BUNDLE) for _ in hosts], strategy="STRICT_SPREAD",
                bundle_label_selector=[{NODE_ID_LABEL: str(self._nodes[h].node_id)}
                                       for h in hosts],
                name=f"accelnet/{key[0]}/{key[1]}",
            )  # fmt: skip
            gang = self.gangs[key] = _Gang(
                hosts, group, time.monotonic() + self._options.gang_timeout_s
            )
            self._waiting[group.ready()] = ("gang", key)
        gang.members.add(t.spec.task_id)
        if gang.ready:
            self._send(t)
        else:
            gang.held.append(t.spec.task_id)

    def ready(self, key: tuple[str, int], ref: Any) -> None:
        """The placement group of gang ``key`` is ready (or failed): send its held ranks."""
        gang = self.gangs.get(key)
        if gang is None:
            return
        try:
            self._ray.get(ref, timeout=CALL_S)
            placed = self._placed(gang)
        except Exception as exc:
            self.fail(gang, f"its placement group failed: {first_line(exc)}")
            return
        want = [self._nodes[h].node_id for h in gang.hosts]
        if placed != want:  # a Ray that ignored the bundles' label selectors
            self.fail(gang, f"Ray put its bundles on nodes {placed}, not {want}")
            return
        gang.ready = True
        held, gang.held = gang.held, []
        for task_id in held:
            t = self._tasks.get(task_id)
            if t is not None:
                self._send(t)

    @staticmethod
    def _placed(gang: _Gang) -> list[str]:
        """The node of each of the group's bundles, as Ray reports it."""
        from ray.util import placement_group_table  # noqa: PLC0415

        where = placement_group_table(gang.group)["bundles_to_node_id"]
        return [str(where[i]) for i in range(len(gang.hosts))]

    def fail(self, gang: _Gang, why: str) -> None:
        """Every held rank fails (none of them has run); the group goes with the last."""
        for task_id in list(gang.held):
            self._finish(task_id, TaskEventKind.FAILED, error=f"the gang did not start: {why}")

    def settle(self, t: RayTask) -> None:
        """Task ``t`` ended: it leaves its gang; the gang's group goes with its last task."""
        gang = self.gangs.get((t.spec.job_id, t.spec.attempt))
        if gang is not None:
            task_id = t.spec.task_id
            gang.members.discard(task_id)
            if task_id in gang.held:
                gang.held.remove(task_id)
            if not gang.members:
                self._remove_group(gang)
                del self.gangs[(t.spec.job_id, t.spec.attempt)]

    def fail_on(self, host: str, cause: str) -> None:
        """``host``'s node went away: its gangs that had not started fail."""
        for gang in list(self.gangs.values()):
            if host in gang.hosts and not gang.ready:
                self.fail(gang, cause)

    def check_late(self, now: float) -> None:
        """Gangs whose group was not ready by their deadline (``now``: time.monotonic())."""
        for gang in list(self.gangs.values()):
            if not gang.ready and gang.held and now > gang.deadline:
                self.fail(gang, f"no placement group on {', '.join(gang.hosts)} within "
                                f"{self._options.gang_timeout_s:g} s")  # fmt: skip

    def close(self) -> None:
        """Remove every gang's placement group."""
        for gang in self.gangs.values():
            self._remove_group(gang)
        self.gangs.clear()

    @staticmethod
    def _remove_group(gang: _Gang) -> None:
        from ray.util.placement_group import remove_placement_group  # noqa: PLC0415

        with contextlib.suppress(Exception):
            remove_placement_group(gang.group)
