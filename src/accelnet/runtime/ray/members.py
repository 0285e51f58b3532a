"""The Ray backend's cluster membership: the fabric's hosts, their nodes and agents.

A node whose agent dies (the node died, was removed, or Ray declared it dead) or stops
answering for ``node_timeout_s`` is gone; nodes that join are described like the first
ones, and one that is a host of the fabric (by its ``accelnet.io/host`` label or host
name, with the same devices) gets an agent. Each change is a
:class:`~accelnet.runtime.backend.NodeChange`. Internal to
:class:`~accelnet.runtime.ray.backend.RayBackend`, which owns one :class:`Members`
(called from its thread only).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from accelnet.fabric import Fabric
from accelnet.runtime.backend import NodeChange
from accelnet.runtime.clock import Clock
from accelnet.runtime.ray.agent import AgentSetup, NodeAgent
from accelnet.runtime.ray.connect import alive_nodes, pinned
from accelnet.runtime.ray.nodes import NodeReport, describe_node, mismatch
from accelnet.runtime.ray.parts import CALL_S, NodeRecord, first_line

if TYPE_CHECKING:
    from accelnet.runtime.ray.connect import RayOptions


class Members:
    """The hosts of ``fabric`` (``nodes``: host -> :class:`NodeRecord`) and the changes to
    report. Shares the backend's ``waiting`` map (ObjectRef -> (what, key)) and ``notes``;
    ``on_down(host, cause)`` ends what ran on a node that went away."""

    def __init__(
        self,
        ray: Any,
        fabric: Fabric,
        options: RayOptions,
        clock: Clock,
        workdir: Path,
        session: str,
        token: str,
        waiting: dict[Any, tuple[str, Any]],
        notes: list[str],
        seen: Sequence[str],
        on_down: Callable[[str, str], None],
    ) -> None:
        self._ray = ray
        self.fabric = fabric
        self.options = options
        self._clock = clock
        self._workdir = workdir
        self._session = session
        self._token = token
        self._waiting = waiting
        self.notes = notes
        self._on_down = on_down
        self.nodes = {h.name: NodeRecord(h.name, h.device_ids) for h in fabric.hosts}
        self._known: set[str] = set(seen)  # Ray node ids seen (used, refused, or gone)
        self._agent_cls = ray.remote(NodeAgent)
        self._describe = ray.remote(num_cpus=0, max_retries=0)(describe_node)
        self.changes: list[NodeChange] = []
        self._ray_gpus: dict[str, int] = {}  # Ray node id -> the GPUs Ray counts there

    def start(self, reports: Sequence[NodeReport]) -> None:
        """Start every reported node's agent and wait for it; the fabric's other hosts
        are down. The first :meth:`take_node_changes` reports every host, down or up: a
        controller restarted on a store that has a host's devices OFFLINE (its node had
        died before the restart, and is back) must hear that they are up again."""
        hellos = {r.host: self.spawn(r) for r in reports}
        timeout = self.options.connect_timeout_s
        refs = list(hellos.values())
        self._ray.wait(refs, num_returns=len(refs), timeout=timeout)
        now = self._clock.now()
        for host, ref in hellos.items():
            self._waiting.pop(ref, None)
            try:
                self._hello(host, self._ray.get(ref, timeout=0))
            except Exception as exc:
                self._refuse(host, f"its agent did not start: {first_line(exc)}")
        for node in self.nodes.values():
            if node.up:
                what = node.report.describe() if node.report else ""
                why = f"Ray node {str(node.node_id)[:8]} is this host: {what}"
                self.changes.append(NodeChange(node.host, node.devices, True, now, why))
            else:
                self.changes.append(NodeChange(node.host, node.devices, False, now,
                                               "no Ray node is this host"))  # fmt: skip

    def spawn(self, report: NodeReport) -> Any:
        """Start the agent of ``report``'s node (for host ``report.host``); its hello."""
        node = self.nodes[report.host]
        o = self.options
        setup = AgentSetup(
            report, self._session, str(self._workdir), self._token, recycle=o.recycle,
            kill_grace_s=o.kill_grace_s, heartbeat_s=o.heartbeat_s,
            ping_timeout_s=o.ping_timeout_s,
        )  # fmt: skip
        node.node_id, node.report = report.node_id, report
        node.epoch += 1
        self._known.add(report.node_id)
        node.agent = self._agent_cls.options(
            num_cpus=0, num_gpus=self._gpus_to_hold(report), max_concurrency=16,
            max_restarts=0, scheduling_strategy=pinned(report.node_id),
            name=f"accelnet-agent/{report.host}/{self._session[:8]}/{node.epoch}",
        ).remote(setup)  # fmt: skip
        ref = node.agent.hello.remote()
        self._waiting[ref] = ("hello", report.host)
        return ref

    def _gpus_to_hold(self, report: NodeReport) -> int:
        """How many GPUs the node's agent holds in Ray's resource view: accelnet's GPUs on
        the node, at most what Ray counts there (an emulated node declares none)."""
        ours = sum(1 for d in report.devices if d[1].get("kind") == "gpu")
        if not ours or not self.options.hold_gpus:
            return 0
        if report.node_id not in self._ray_gpus:  # one look at Ray's nodes per new node
            self._ray_gpus = {str(n.get("NodeID")): int(n.get("Resources", {}).get("GPU", 0))
                              for n in self._ray.nodes()}  # fmt: skip
        return min(ours, self._ray_gpus.get(report.node_id, 0))

    def _hello(self, host: str, info: Mapping[str, Any]) -> None:
        node = self.nodes[host]
        held = [str(i) for i in info.get("ray_gpus") or ()]
        runs = [str(self.fabric.devices[d].index) for d in node.devices
                if self.fabric.devices[d].model.kind.value == "gpu"]  # fmt: skip
        if held and sorted(held) != sorted(runs):
            self.notes.append(
                f"host {host}: Ray gave accelnet's agent GPUs {', '.join(held)} but accelnet "
                f"runs on GPUs {', '.join(runs)}: Ray may give others' tasks GPUs accelnet "
                "uses (let accelnet's fabric list every GPU of the node)"
            )
        node.up, node.shared, node.heard = True, bool(info["shared"]), time.monotonic()
        node.address = str(info.get("address") or node.address)
        node.sent_path, node.polls, node.seq = None, 0, 0

    def _refuse(self, host: str, why: str) -> None:
        node = self.nodes[host]
        self.notes.append(f"host {host} (Ray node {(node.node_id or '?')[:8]}) is down: {why}")
        self.kill_agent(node)

    def check(self, now: float) -> None:
        """Silent agents, nodes Ray says are dead, nodes that joined (``now``:
        time.monotonic())."""
        for node in self.nodes.values():
            if node.up and node.polls and now - node.heard > self.options.node_timeout_s:
                self.down(node, f"its agent has not answered for "
                                f"{self.options.node_timeout_s:g} s")  # fmt: skip
        try:
            alive = alive_nodes(self._ray)
        except Exception:
            alive = None
        if alive is not None:
            for node in self.nodes.values():
                if node.up and node.node_id not in alive:
                    self.down(node, "Ray reports its node dead")
            for node_id, labels in alive.items():
                if node_id not in self._known:
                    self._known.add(node_id)
                    ref = self._describe.options(scheduling_strategy=pinned(node_id)).remote(
                        node_id, labels, self.options.cpu_devices
                    )
                    self._waiting[ref] = ("join", node_id)

    def joined(self, node_id: str, ref: Any) -> None:
        """A node that joined has described itself: make it a host, if it is one."""
        try:
            report: NodeReport = self._ray.get(ref, timeout=CALL_S)
        except Exception as exc:
            self.notes.append(f"Ray node {node_id[:8]} joined but could not be described: "
                              f"{first_line(exc)}")  # fmt: skip
            return
        host = self._host_for(report)
        if host is None:
            self.notes.append(f"Ray node {node_id[:8]} ({report.describe()}, host "
                              f"{report.host}) joined but is no host of the fabric "
                              "that is down; not used")  # fmt: skip
            return
        self.spawn(replace(report, host=host))

    def _host_for(self, report: NodeReport) -> str | None:
        """The down host of the fabric a joining node is: the one it names, or (unnamed)
        its machine's name or a name made from it, with the same devices."""
        names = [report.host] if report.named else [
            h for h in self.nodes if h == report.host or h.startswith(report.host + "-")
        ]  # fmt: skip
        for name in names:
            node = self.nodes.get(name)
            if node is None or node.up or node.agent is not None:
                continue
            if mismatch(self.fabric, replace(report, host=name)) is None:
                return name
        return None

    def greeted(self, host: str, ref: Any) -> None:
        """The agent started for a node that joined said hello (or failed to start)."""
        node = self.nodes[host]
        try:
            info = self._ray.get(ref, timeout=CALL_S)
        except Exception as exc:
            self._refuse(host, f"its agent did not start: {first_line(exc)}")
            return
        self._hello(host, info)
        what = node.report.describe() if node.report else ""
        why = f"Ray node {str(node.node_id)[:8]} joined: {what}"
        self.changes.append(NodeChange(host, node.devices, True, self._clock.now(), why))

    def down(self, node: NodeRecord, why: str) -> None:
        """``node`` is gone: its agent killed (so that nothing of it runs on), its tasks
        LOST and its gangs that had not started failed (by ``on_down``), its devices
        OFFLINE."""
        if not node.up:
            return
        node.up = False
        cause = f"node {node.host} (Ray node {str(node.node_id)[:8]}) went away: {why}"
        self.kill_agent(node)
        self._on_down(node.host, cause)
        self.changes.append(NodeChange(node.host, node.devices, False, self._clock.now(), cause))

    def kill_agent(self, node: NodeRecord) -> None:
        """Kill ``node``'s agent (if any); the node is down."""
        agent, node.agent = node.agent, None
        node.up = False
        node.beats, node.pids = {}, {}
        if agent is not None:
            with contextlib.suppress(Exception):
                self._ray.kill(agent, no_restart=True)

    def take_changes(self) -> list[NodeChange]:
        """The changes since the last call."""
        out, self.changes = self.changes, []
        return out
