"""The Ray backend's traffic with its agents: launches and the long polls for news.

A node's launches of one turn go in one call that is also a long poll (an agent answers
it at least every second, sooner with news); a launch that needs parts of its inputs from
other nodes goes alone, with those parts as Ray objects, and so does a retry's launch on a
node other than those its job ran on before, with their checkpoint folders. Internal to
:class:`~accelnet.runtime.ray.backend.RayBackend`, which owns one :class:`Courier`
(called from its thread only).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any

from accelnet.runtime.backend import TaskEventKind, TaskSpec
from accelnet.runtime.ray.parts import (
    CALL_S,
    CHECKPOINT_PART,
    Checkpoints,
    NodeRecord,
    Outputs,
    RayTask,
    first_line,
)

_AGENT_WAIT_S = 1.0  # an agent's long poll: it answers at least this often
_POLLS = 2  # long polls outstanding per agent at most (a launch beyond: a short call)


class Courier:
    """Sends launches and polls to the agents of the backend's ``nodes``; what it waits
    for goes into the backend's ``waiting`` map (ObjectRef -> (what, key)). ``finish``
    ends a task with an event; ``down(node, why)`` marks a node gone."""

    def __init__(
        self,
        ray: Any,
        nodes: dict[str, NodeRecord],
        waiting: dict[Any, tuple[str, Any]],
        outputs: Outputs,
        checkpoints: Checkpoints,
        finish: Callable[..., None],
        down: Callable[[NodeRecord, str], None],
    ) -> None:
        self._ray = ray
        self._nodes = nodes
        self._waiting = waiting
        self._outputs = outputs
        self._checkpoints = checkpoints
        self._finish = finish
        self._down = down
        self._pending: dict[str, list[tuple[TaskSpec, list[str] | None]]] = {}  # not sent yet

    def send(self, t: RayTask) -> None:
        """Hand a task to its node's agent, with the parts of its inputs that other nodes
        hold (as Ray objects, fetched to the node before the task starts) and, for a
        retry, the checkpoint folders its job's tasks left on other nodes (those on nodes
        that went away are lost: the task starts from what the others hold)."""
        node = self._nodes[t.host]
        parts: list[tuple[str, str]] = []
        refs: list[Any] = []
        sources = self._outputs.sources(t.spec.inputs.values())
        for alias, job in sorted(t.spec.inputs.items()):
            for src, news in sorted(sources[job].items()):
                if src == t.host:
                    continue
                if not self._nodes[src].up:
                    self._finish(t.spec.task_id, TaskEventKind.FAILED,
                                 error=f"input {alias}: the outputs job {job} left on {src} "
                                       "were lost with that node")  # fmt: skip
                    return
                parts.append((job, f"{src}:{news}"))
                refs.append(self._outputs.pack(job, src, news, self._nodes[src].agent))
        if t.spec.attempt > 1:
            job = t.spec.job_id
            for src, news in sorted(self._checkpoints.sources(job, t.host).items()):
                if self._nodes[src].up:
                    parts.append((job, f"{CHECKPOINT_PART}{src}:{news}"))
                    refs.append(self._checkpoints.pack(job, src, news, self._nodes[src].agent))
        path = None
        if t.spec.payload is not None and node.sent_path != sys.path:
            path = node.sent_path = list(sys.path)
        t.sent = True
        if not refs:  # sent with the node's other launches of this turn (one Ray call)
            self._pending.setdefault(t.host, []).append((t.spec, path))
            return
        self.flush()  # in order: what was launched before goes first
        launch = node.agent.launch.options(name=launch_name([t.spec.task_id]))
        ref = launch.remote(t.spec, path, parts, *refs)
        self._waiting[ref] = ("launch", t.spec.task_id)

    def flush(self) -> None:
        """Send each node's launches of this turn, in one call per node that is also a
        long poll (while the node has fewer than two); then make sure that every node is
        being polled."""
        outbox, self._pending = self._pending, {}
        for host, tasks in outbox.items():
            node = self._nodes[host]
            if node.up:
                self._ask_news(node, tasks)
        for node in self._nodes.values():
            if node.up and node.polls == 0:
                self._ask_news(node, [])

    def _ask_news(self, node: NodeRecord, tasks: list[tuple[TaskSpec, list[str] | None]]) -> None:
        long = node.polls < _POLLS
        if long:
            if node.polls == 0:
                node.heard = max(node.heard, time.monotonic())  # silence counts from now
            node.polls += 1
        call = node.agent.exchange
        if tasks:  # named after what it launches: accelnet's tasks in Ray's own dashboard
            call = call.options(name=launch_name([spec.task_id for spec, _ in tasks]))
        ref = call.remote(tasks, _AGENT_WAIT_S if long else 0.0)
        self._waiting[ref] = ("poll", (node.host, long, node.epoch))

    def answer(self, key: tuple[str, bool, int], ref: Any) -> tuple[str, Any] | None:
        """A node's answer to a poll (None if the node is down, or just went, or the
        answer is from an agent it had before)."""
        host, long, epoch = key
        node = self._nodes[host]
        if epoch != node.epoch:
            return None
        if long:
            node.polls -= 1
        if not node.up:
            return None
        try:
            return host, self._ray.get(ref, timeout=CALL_S)
        except Exception as exc:  # RayActorError and its kin: the agent (or node) is gone
            self._down(node, f"its agent died: {first_line(exc)}")
            return None

    def drop(self, host: str) -> None:
        """Forget ``host``'s launches not sent yet (its node went away)."""
        self._pending.pop(host, None)


def launch_name(task_ids: list[str], most: int = 4) -> str:
    """The name of a Ray call that launches accelnet tasks, as Ray's dashboard lists it:
    ``accelnet: train-1a2b.1.0, train-1a2b.1.1 (+6 more)``."""
    shown = ", ".join(task_ids[:most])
    more = f" (+{len(task_ids) - most} more)" if len(task_ids) > most else ""
    return f"accelnet: {shown}{more}"
