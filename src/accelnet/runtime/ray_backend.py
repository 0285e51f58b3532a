"""Run tasks across a Ray cluster: accelnet decides, Ray carries processes, messages, data.

One agent per Ray node (:mod:`accelnet.runtime.ray_agent`, an actor pinned to its node)
runs the node's devices as the local backend does on one machine; this driver-side
backend routes each task to the agent of its device's node and turns the agents' news
into :class:`~accelnet.runtime.backend.TaskEvent` s stamped with the injected clock.

- **Placement**: the controller chose the exact devices; a task runs on its device's node
  (node affinity, not soft), with ``CUDA_VISIBLE_DEVICES`` set by accelnet; Ray is asked
  for no CPU and no GPU, so it neither reserves nor remaps devices.
- **Gangs** spanning nodes start all-or-nothing: their ranks are held until one placement
  group, a bundle pinned to each of their nodes (``STRICT_SPREAD``, label selector
  ``ray.io/node-id``; checked once ready), is ready; a gang whose group is not ready within
  ``gang_timeout_s`` or one of whose nodes goes away fails without any rank having run.
- **Faults**: a node whose agent dies (the node died, was removed, or Ray declared it
  dead) or stops answering for ``node_timeout_s`` is gone: its tasks end LOST (the
  controller requeues their jobs within their retry budget) and its devices go OFFLINE
  (:class:`~accelnet.runtime.backend.SupportsMembership`). Nodes that join are described
  like the first ones; one that is a host of the fabric (by its ``accelnet.io/host``
  label or host name, with the same devices) gets an agent and its devices come back.
- **Hand-off**: jobs' outputs stay on the nodes that wrote them; a consumer on another
  node gets them as Ray objects (a tar of each node's part, fetched by Ray from node to
  node before the task starts, extracted into the consumer node's folder of that job),
  and on the same node by path. ``collect_output(job)`` brings them to the driver.

Methods are called from one thread (the controller's), except :meth:`RayBackend.wakeup`,
:meth:`RayBackend.live_log` and :meth:`RayBackend.collect_output`.
"""

from __future__ import annotations

import contextlib
import re
import secrets
import sys
import threading
import time
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from accelnet.fabric import Fabric
from accelnet.fabric.model import Device
from accelnet.runtime.backend import (
    Backend,
    NodeChange,
    SupportsHandoff,
    SupportsLiveLogs,
    SupportsMembership,
    SupportsRefresh,
    SupportsWorkers,
    TaskEvent,
    TaskEventKind,
    TaskSpec,
    WorkerLoss,
    check_launch,
    lookup_device,
)
from accelnet.runtime.clock import Clock
from accelnet.runtime.ray_agent import AgentSetup, NodeAgent, token_file, unpack_into
from accelnet.runtime.ray_connect import NODE_ID_LABEL, alive_nodes, pinned
from accelnet.runtime.ray_nodes import NodeReport, describe_node, mismatch

if TYPE_CHECKING:
    from accelnet.runtime.ray_connect import RayOptions

_SLICE_S = 0.02  # poll waits on Ray in slices this long (wakeup() is seen between them)
_AGENT_WAIT_S = 1.0  # an agent's long poll: it answers at least this often
_POLLS = 2  # long polls outstanding per agent at most (a launch beyond: a short call)
_CHECK_S = 1.0  # membership, silent agents and gang deadlines are looked at this often
_CALL_S = 30.0  # a blocking call to an agent (beyond the backend's own waits)
_PACKS_KEPT = 64
_GANG_BUNDLE = {"memory": 1.0}  # each node's bundle: a byte (every node has memory)


@dataclass(slots=True, eq=False)
class _Node:
    host: str
    devices: tuple[str, ...]
    node_id: str | None = None
    report: NodeReport | None = None
    agent: Any = None
    up: bool = False
    shared: bool = False  # its files are on the driver's file system
    heard: float = 0.0  # time.monotonic() of its last answer (or of asking, if later)
    polls: int = 0  # long polls outstanding (to its current agent)
    epoch: int = 0  # agents started for it (answers of an earlier one are ignored)
    seq: int = 0  # the last answer handled
    beats: dict[str, tuple[float, int]] = field(default_factory=dict)
    pids: dict[str, int] = field(default_factory=dict)
    sent_path: list[str] | None = None


@dataclass(slots=True)
class _Task:
    spec: TaskSpec
    host: str
    sent: bool = False  # handed to its agent (not held by its gang)


@dataclass(slots=True, eq=False)
class _Gang:
    hosts: tuple[str, ...]
    group: Any  # the placement group
    deadline: float  # time.monotonic()
    ready: bool = False
    held: list[str] = field(default_factory=list)  # task ids waiting for the group
    members: set[str] = field(default_factory=set)  # task ids not ended


class RayBackend(
    Backend,
    SupportsRefresh,
    SupportsLiveLogs,
    SupportsHandoff,
    SupportsWorkers,
    SupportsMembership,
):
    """Runs tasks on a Ray cluster's nodes (see the module docstring). Made by
    :meth:`RayOptions.connect <accelnet.runtime.ray_connect.RayOptions.connect>`, which
    discovered ``reports`` (the nodes that are hosts of ``fabric``) among the nodes
    ``seen``; starts their agents and waits for them. Usable as a context manager."""

    def __init__(
        self,
        ray: Any,
        fabric: Fabric,
        reports: Sequence[NodeReport],
        workdir: str | Path,
        clock: Clock,
        options: RayOptions,
        *,
        owns_ray: bool = False,
        notes: Sequence[str] = (),
        seen: Sequence[str] = (),
    ) -> None:
        self._ray = ray
        self.fabric = fabric
        self.options = options
        self.notes: list[str] = list(notes)
        self._clock = clock
        self._owns_ray = owns_ray
        self._workdir = Path(workdir).resolve()
        self._workdir.mkdir(parents=True, exist_ok=True)
        self._session = secrets.token_hex(4)
        self._token = secrets.token_hex(16)
        if options.share_files:  # agents that can read it share the driver's files
            token_file(self._workdir, self._session).write_text(self._token)
        self._devices: Mapping[str, Device] = fabric.devices
        self._nodes = {h.name: _Node(h.name, h.device_ids) for h in fabric.hosts}
        self._known: set[str] = set(seen)  # Ray node ids seen (used, refused, or gone)
        self._agent_cls = ray.remote(NodeAgent)
        self._describe = ray.remote(num_cpus=0, max_retries=0)(describe_node)
        self._waiting: dict[Any, tuple[str, Any]] = {}  # ObjectRef -> (what, key)
        self._tasks: dict[str, _Task] = {}
        self._busy: dict[str, str] = {}  # device -> its running task
        self._fresh: dict[str, tuple[bool, str]] = {}  # device -> refreshed since its task
        self._outbox: dict[str, list[tuple[TaskSpec, list[str] | None]]] = {}  # not sent yet
        self._gangs: dict[tuple[str, int], _Gang] = {}
        self._events: list[TaskEvent] = []
        self._changes: list[NodeChange] = []
        self._losses: list[WorkerLoss] = []
        self._outputs_lock = threading.Lock()
        # job -> (its last attempt that succeeded somewhere, host -> news counter)
        self._outputs: dict[str, tuple[int, dict[str, int]]] = {}
        self._news = 0
        self._packs: OrderedDict[tuple[str, str, int], Any] = OrderedDict()
        self._wake = threading.Event()
        self._checked = 0.0
        self._closed = False
        self._start(reports)

    # ----- start ------------------------------------------------------------------------
    def _start(self, reports: Sequence[NodeReport]) -> None:
        """Start every reported node's agent and wait for it; the fabric's other hosts
        are down. The first :meth:`take_node_changes` reports every host, down or up: a
        controller restarted on a store that has a host's devices OFFLINE (its node had
        died before the restart, and is back) must hear that they are up again."""
        hellos = {r.host: self._spawn(r) for r in reports}
        timeout = self.options.connect_timeout_s
        refs = list(hellos.values())
        self._ray.wait(refs, num_returns=len(refs), timeout=timeout)
        now = self._clock.now()
        for host, ref in hellos.items():
            self._waiting.pop(ref, None)
            try:
                self._hello(host, self._ray.get(ref, timeout=0))
            except Exception as exc:
                self._refuse(host, f"its agent did not start: {_first_line(exc)}")
        for node in self._nodes.values():
            if node.up:
                what = node.report.describe() if node.report else ""
                why = f"Ray node {str(node.node_id)[:8]} is this host: {what}"
                self._changes.append(NodeChange(node.host, node.devices, True, now, why))
            else:
                self._changes.append(NodeChange(node.host, node.devices, False, now,
                                                "no Ray node is this host"))  # fmt: skip
        self._checked = time.monotonic()

    def _spawn(self, report: NodeReport) -> Any:
        """Start the agent of ``report``'s node (for host ``report.host``); its hello."""
        node = self._nodes[report.host]
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
            num_cpus=0, num_gpus=0, max_concurrency=16, max_restarts=0,
            scheduling_strategy=pinned(report.node_id),
        ).remote(setup)  # fmt: skip
        ref = node.agent.hello.remote()
        self._waiting[ref] = ("hello", report.host)
        return ref

    def _hello(self, host: str, info: Mapping[str, Any]) -> None:
        node = self._nodes[host]
        node.up, node.shared, node.heard = True, bool(info["shared"]), time.monotonic()
        node.sent_path, node.polls, node.seq = None, 0, 0

    def _refuse(self, host: str, why: str) -> None:
        node = self._nodes[host]
        self.notes.append(f"host {host} (Ray node {(node.node_id or '?')[:8]}) is down: {why}")
        self._kill_agent(node)

    # ----- the Backend contract ---------------------------------------------------------
    def launch(self, task: TaskSpec) -> None:
        """Send ``task`` to the agent of its device's node; returns at once. A task whose
        node is down ends LOST; the ranks of a gang that spans nodes wait for its placement
        group. Raises as :meth:`LocalBackend.launch` does for a malformed spec, an
        unknown or busy device, or a closed backend."""
        self._check_open()
        check_launch(task, self._tasks)
        device = self._device(task.device)
        busy = self._busy.get(device.id)
        if busy is not None:
            raise RuntimeError(
                f"device {device.id} is busy with task {busy}; cannot launch {task.task_id}"
            )
        t = self._tasks[task.task_id] = _Task(task, device.host)
        self._busy[device.id] = task.task_id
        self._fresh.pop(device.id, None)
        node = self._nodes[device.host]
        if not node.up:
            self._finish(task.task_id, TaskEventKind.LOST, error=f"node {node.host} is down")
            return
        hosts = list(dict.fromkeys(self._devices[d].host for d in task.devices
                                   if d in self._devices))  # fmt: skip
        if task.world > 1 and len(hosts) > 1:
            self._hold(t, tuple(hosts))
        else:
            self._send(t)

    def cancel(self, task_id: str) -> None:
        """Stop a task and its process tree on its node (CANCELLED comes from :meth:`poll`);
        a rank still waiting for its gang's placement group is CANCELLED at once. A no-op
        for a task that is not running."""
        t = self._tasks.get(task_id)
        if t is None:
            return
        if not t.sent:
            self._finish(task_id, TaskEventKind.CANCELLED, error="cancelled")
            return
        self._flush()  # the launch first (the agent also copes with a cancel that overtakes)
        node = self._nodes[t.host]
        if node.up:
            node.agent.cancel.remote(task_id)

    def poll(self, timeout: float) -> list[TaskEvent]:
        """Events since the last call, waiting up to ``timeout`` s for the first (less after
        :meth:`wakeup`). Also where nodes that died or joined, silent agents and gangs'
        placement groups are seen to. Never raises for a task's or a node's failure."""
        end = time.monotonic() + max(0.0, timeout)
        wait_s = 0.0
        while not self._closed:
            self._turn(wait_s)
            if self._events or self._wake.is_set():
                self._wake.clear()
                events, self._events = self._events, []
                return events
            left = end - time.monotonic()
            if left <= 0:
                return []
            wait_s = min(left, _SLICE_S)
        return []

    def close(self) -> None:
        """Stop every task on every node, the agents and the gangs' placement groups;
        disconnect from Ray if :meth:`connect` joined it. Idempotent; tasks still running
        get no further events."""
        if self._closed:
            return
        self._closed = True
        ray = self._ray
        live = [n for n in self._nodes.values() if n.agent is not None]
        refs = [n.agent.close.remote() for n in live]
        with contextlib.suppress(Exception):
            ray.wait(refs, num_returns=len(refs), timeout=self.options.kill_grace_s + 10.0)
        for n in live:
            self._kill_agent(n)
        for gang in self._gangs.values():
            self._remove_group(gang)
        self._gangs.clear()
        self._tasks.clear()
        with contextlib.suppress(OSError):
            token_file(self._workdir, self._session).unlink()
        if self._owns_ray:
            ray.shutdown()

    def wakeup(self) -> None:
        """Make a :meth:`poll` in progress (or the next one) return early; thread-safe."""
        self._wake.set()

    def __enter__(self) -> RayBackend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ----- capabilities ---------------------------------------------------------------
    def refresh(self, device: str) -> tuple[bool, str]:
        """Clean ``device`` on its node (scratch emptied, worker recycled as the policy
        says; see :meth:`LocalBackend.refresh`); (False, why) if its node is down. The
        agent refreshes a device as its task ends and sends the outcome along, so after a
        task this answers at once, without a call to the node."""
        self._check_open()
        dev = self._device(device)
        if dev.id in self._busy:
            return False, f"device {dev.id} is running task {self._busy[dev.id]}"
        fresh = self._fresh.pop(dev.id, None)
        if fresh is not None and self._nodes[dev.host].up:
            return fresh  # done on its node as its last task ended; nothing ran since
        ok, detail = self._ask(dev, "refresh", dev.id)
        return bool(ok), str(detail)

    def reset(self, device: str, hardware: bool = False) -> tuple[bool, str]:
        """See :class:`SupportsWorkers` (done on the device's node)."""
        self._check_open()
        dev = self._device(device)
        self._fresh.pop(dev.id, None)
        ok, detail = self._ask(dev, "reset", dev.id, hardware)
        return bool(ok), str(detail)

    def kill_worker(self, device: str, why: str) -> bool:
        """See :class:`SupportsWorkers`; its task's LOST event comes from :meth:`poll`."""
        dev = self._device(device)
        self._fresh.pop(dev.id, None)
        return bool(self._ask(dev, "kill_worker", dev.id, why, failed=False))

    def worker_pid(self, device: str) -> int | None:
        """The pid (on its node) of ``device``'s worker, as last reported."""
        node = self._nodes[self._device(device).host]
        return node.pids.get(device) if node.up else None

    def heartbeats(self) -> dict[str, tuple[float, int]]:
        """See :class:`SupportsWorkers` (as the agents last reported them)."""
        out: dict[str, tuple[float, int]] = {}
        for node in self._nodes.values():
            if node.up:
                out.update(node.beats)
        return out

    def take_losses(self) -> list[WorkerLoss]:
        """Device workers that died on their own on live nodes (a node that goes away is
        a :class:`NodeChange`, not a loss)."""
        out, self._losses = self._losses, []
        return out

    def take_node_changes(self) -> list[NodeChange]:
        """See :class:`SupportsMembership`; the first call reports every host of the
        fabric, those up as well as those down."""
        out, self._changes = self._changes, []
        return out

    def live_log(self, task_id: str, stream: str) -> Path | None:
        """Where a running task's output is meanwhile, if its node shares the driver's
        files (else None: its logs arrive when it ends). Thread-safe."""
        t = self._tasks.get(task_id)
        node = None if t is None else self._nodes[t.host]
        if t is None or node is None or not t.sent or not node.up or not node.shared:
            return None
        with contextlib.suppress(Exception):
            path = self._ray.get(node.agent.live_log.remote(task_id, stream), timeout=_CALL_S)
            return None if path is None else Path(path)
        return None

    def output_location(self, job_id: str) -> str:
        """``<workdir>/outputs/<job>`` on the driver: where :meth:`collect_output` puts the
        job's outputs (a consumer's tasks get them on their own node)."""
        name = re.sub(r"[^\w.-]", "_", job_id)
        return str(self._workdir / "outputs" / ("_" if name in ("", ".", "..") else name))

    def output_hosts(self, job_id: str) -> list[str]:
        """The hosts that hold parts of ``job_id``'s outputs (where the tasks of its last
        attempt succeeded). Thread-safe."""
        with self._outputs_lock:
            return sorted(self._outputs.get(job_id, (0, {}))[1])

    def collect_output(self, job_id: str, timeout: float = 120.0) -> Path:
        """Gather ``job_id``'s outputs from every node that has a part into
        :meth:`output_location` (blocks; thread-safe); the folder. RuntimeError naming
        the nodes that are down."""
        dest = Path(self.output_location(job_id))
        dest.mkdir(parents=True, exist_ok=True)
        gone = []
        for host in self.output_hosts(job_id):
            node = self._nodes[host]
            if not node.up:
                gone.append(host)
                continue
            blob = self._ray.get(node.agent.pack.remote(job_id), timeout=timeout)
            if blob is not None:
                unpack_into(blob, dest)
        if gone:
            raise RuntimeError(f"outputs of {job_id} on {', '.join(gone)} are lost: node down")
        return dest

    def running(self) -> list[str]:
        """The tasks launched and not ended (diagnostics, tests)."""
        return sorted(self._tasks)

    def hosts(self) -> dict[str, bool]:
        """Every host of the fabric: whether its node is up."""
        return {h: n.up for h, n in self._nodes.items()}

    def node_id(self, host: str) -> str | None:
        """The Ray node id of ``host`` (None if no node is it now)."""
        node = self._nodes[host]
        return node.node_id if node.up else None

    # ----- tasks ------------------------------------------------------------------------
    def _send(self, t: _Task) -> None:
        """Hand a task to its node's agent, with the parts of its inputs that other nodes
        hold (as Ray objects, fetched to the node before the task starts)."""
        node = self._nodes[t.host]
        parts: list[tuple[str, str]] = []
        refs: list[Any] = []
        with self._outputs_lock:
            sources = {
                job: dict(self._outputs.get(job, (0, {}))[1]) for job in t.spec.inputs.values()
            }
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
                refs.append(self._pack(job, src, news))
        path = None
        if t.spec.payload is not None and node.sent_path != sys.path:
            path = node.sent_path = list(sys.path)
        t.sent = True
        if not refs:  # sent with the node's other launches of this turn (one Ray call)
            self._outbox.setdefault(t.host, []).append((t.spec, path))
            return
        self._flush()  # in order: what was launched before goes first
        ref = node.agent.launch.remote(t.spec, path, parts, *refs)
        self._waiting[ref] = ("launch", t.spec.task_id)

    def _flush(self) -> None:
        """Send each node's launches of this turn, in one call per node that is also a
        long poll (while the node has fewer than two); then make sure that every node is
        being polled."""
        outbox, self._outbox = self._outbox, {}
        for host, tasks in outbox.items():
            node = self._nodes[host]
            if node.up:
                self._ask_news(node, tasks)
        for node in self._nodes.values():
            if node.up and node.polls == 0:
                self._ask_news(node, [])

    def _ask_news(self, node: _Node, tasks: list[tuple[TaskSpec, list[str] | None]]) -> None:
        long = node.polls < _POLLS
        if long:
            if node.polls == 0:
                node.heard = max(node.heard, time.monotonic())  # silence counts from now
            node.polls += 1
        ref = node.agent.exchange.remote(tasks, _AGENT_WAIT_S if long else 0.0)
        self._waiting[ref] = ("poll", (node.host, long, node.epoch))

    def _pack(self, job: str, src: str, news: int) -> Any:
        key = (job, src, news)
        ref = self._packs.get(key)
        if ref is None:
            ref = self._packs[key] = self._nodes[src].agent.pack.remote(job)
            while len(self._packs) > _PACKS_KEPT:
                self._packs.popitem(last=False)
        return ref

    def _finish(self, task_id: str, kind: TaskEventKind, **fields: Any) -> None:
        """The terminal event of a task; frees its device and settles its gang."""
        t = self._tasks.pop(task_id, None)
        if t is None:
            return
        if self._busy.get(t.spec.device) == task_id:
            del self._busy[t.spec.device]
        if t.sent and kind is TaskEventKind.SUCCEEDED:
            self._keep_output(t)
        gang = self._gangs.get((t.spec.job_id, t.spec.attempt))
        if gang is not None:
            gang.members.discard(task_id)
            if task_id in gang.held:
                gang.held.remove(task_id)
            if not gang.members:
                self._remove_group(gang)
                del self._gangs[(t.spec.job_id, t.spec.attempt)]
        self._events.append(TaskEvent(task_id, kind, self._clock.now(), **fields))

    def _keep_output(self, t: _Task) -> None:
        """A task succeeded: its node holds part of its job's outputs (of the attempt a
        consumer will read: the job's last, which succeeded if the consumer runs)."""
        with self._outputs_lock:
            self._news += 1
            attempt, hosts = self._outputs.get(t.spec.job_id, (0, {}))
            if t.spec.attempt > attempt:
                attempt, hosts = t.spec.attempt, {}
            if t.spec.attempt == attempt:
                hosts[t.host] = self._news
                self._outputs[t.spec.job_id] = (attempt, hosts)

    def _on_batch(self, node: _Node, batch: Mapping[str, Any]) -> None:
        if not node.up:
            return
        now = self._clock.now()
        node.heard = time.monotonic()
        late = batch["seq"] < node.seq  # overtaken by a later answer: its events still count
        node.seq = max(node.seq, batch["seq"])
        for task_id, kind, code, error, result, logs, fresh in batch["events"]:
            t = self._tasks.get(task_id)
            if t is None or t.host != node.host:
                continue  # news of a task already settled here
            k = TaskEventKind(kind)
            if fresh is not None:  # the device was refreshed on its node as the task ended
                self._fresh[t.spec.device] = (bool(fresh[0]), str(fresh[1]))
            if k is TaskEventKind.STARTED:
                info = {**(result or {}), "host": node.host, "node_id": node.node_id}
                self._events.append(TaskEvent(task_id, k, now, result=info))
                continue
            if logs:
                self._keep_logs(t.spec, logs)
            self._finish(task_id, k, exit_code=code, error=error, result=result)
        if not late:
            node.beats = {d: (now - age, pid) for d, (age, pid) in batch["beats"].items()}
            node.pids = dict(batch["pids"])
        self._losses += [WorkerLoss(d, now - age, pid, how) for d, age, pid, how in batch["losses"]]

    @staticmethod
    def _keep_logs(spec: TaskSpec, logs: Mapping[str, bytes]) -> None:
        folder = Path(spec.log_dir)
        folder.mkdir(parents=True, exist_ok=True)
        for stream, data in logs.items():
            (folder / f"{spec.task_id}.{stream}").write_bytes(data)

    # ----- gangs ------------------------------------------------------------------------
    def _hold(self, t: _Task, hosts: tuple[str, ...]) -> None:
        """A rank of a gang across ``hosts``: sent once the gang's placement group (one
        bundle pinned to each host's node) is ready."""
        key = (t.spec.job_id, t.spec.attempt)
        gang = self._gangs.get(key)
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
            gang = self._gangs[key] = _Gang(
                hosts, group, time.monotonic() + self.options.gang_timeout_s
            )
            self._waiting[group.ready()] = ("gang", key)
        gang.members.add(t.spec.task_id)
        if gang.ready:
            self._send(t)
        else:
            gang.held.append(t.spec.task_id)

    def _gang_ready(self, key: tuple[str, int], ref: Any) -> None:
        gang = self._gangs.get(key)
        if gang is None:
            return
        try:
            self._ray.get(ref, timeout=_CALL_S)
            placed = self._placed(gang)
        except Exception as exc:
            self._fail_gang(gang, f"its placement group failed: {_first_line(exc)}")
            return
        want = [self._nodes[h].node_id for h in gang.hosts]
        if placed != want:  # a Ray that ignored the bundles' label selectors
            self._fail_gang(gang, f"Ray put its bundles on nodes {placed}, not {want}")
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

    def _fail_gang(self, gang: _Gang, why: str) -> None:
        """Every held rank fails (none of them has run); the group goes with the last."""
        for task_id in list(gang.held):
            self._finish(task_id, TaskEventKind.FAILED, error=f"the gang did not start: {why}")

    def _remove_group(self, gang: _Gang) -> None:
        from ray.util.placement_group import remove_placement_group  # noqa: PLC0415

        with contextlib.suppress(Exception):
            remove_placement_group(gang.group)

    # ----- the loop ---------------------------------------------------------------------
    def _turn(self, wait_s: float) -> None:
        """Send the launches of the last turn; handle what Ray has ready, waiting up to
        ``wait_s`` for the first thing."""
        self._flush()
        if time.monotonic() - self._checked >= _CHECK_S:
            self._check()
        refs = list(self._waiting)
        if not refs:
            if wait_s > 0:
                self._wake.wait(wait_s)
            return
        ray = self._ray
        ready, _ = ray.wait(refs, num_returns=1, timeout=wait_s)
        if ready and len(refs) > 1:
            ready, _ = ray.wait(refs, num_returns=len(refs), timeout=0)
        answers = []
        for ref in ready:
            what, key = self._waiting[ref]
            if what == "poll":
                del self._waiting[ref]
                answers.append(self._answer(key, ref))
        for host, batch in sorted((a for a in answers if a is not None),
                                  key=lambda a: (a[0], a[1]["seq"])):  # fmt: skip
            self._on_batch(self._nodes[host], batch)
        for ref in ready:
            if ref not in self._waiting:
                continue
            what, key = self._waiting.pop(ref)
            if what == "gang":
                self._gang_ready(key, ref)
            elif what == "launch":
                self._launched(key, ref)
            elif what == "join":
                self._joined(key, ref)
            elif what == "hello":
                self._greeted(key, ref)

    def _answer(self, key: tuple[str, bool, int], ref: Any) -> tuple[str, Any] | None:
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
            return host, self._ray.get(ref, timeout=_CALL_S)
        except Exception as exc:  # RayActorError and its kin: the agent (or node) is gone
            self._down(node, f"its agent died: {_first_line(exc)}")
            return None

    def _launched(self, task_id: str, ref: Any) -> None:
        try:
            self._ray.get(ref, timeout=_CALL_S)
        except Exception as exc:
            t = self._tasks.get(task_id)
            if t is not None and self._nodes[t.host].up:
                why = f"its inputs could not be fetched: {_first_line(exc)}"
                self._finish(task_id, TaskEventKind.FAILED, error=why)

    def _check(self) -> None:
        """Silent agents, nodes Ray says are dead, nodes that joined, late gangs."""
        self._checked = now = time.monotonic()
        for node in self._nodes.values():
            if node.up and node.polls and now - node.heard > self.options.node_timeout_s:
                self._down(node, f"its agent has not answered for "
                                 f"{self.options.node_timeout_s:g} s")  # fmt: skip
        try:
            alive = alive_nodes(self._ray)
        except Exception:
            alive = None
        if alive is not None:
            for node in self._nodes.values():
                if node.up and node.node_id not in alive:
                    self._down(node, "Ray reports its node dead")
            for node_id, labels in alive.items():
                if node_id not in self._known:
                    self._known.add(node_id)
                    ref = self._describe.options(scheduling_strategy=pinned(node_id)).remote(
                        node_id, labels, self.options.cpu_devices
                    )
                    self._waiting[ref] = ("join", node_id)
        for gang in list(self._gangs.values()):
            if not gang.ready and gang.held and now > gang.deadline:
                self._fail_gang(gang, f"no placement group on {', '.join(gang.hosts)} within "
                                      f"{self.options.gang_timeout_s:g} s")  # fmt: skip

    def _joined(self, node_id: str, ref: Any) -> None:
        """A node that joined has described itself: make it a host, if it is one."""
        try:
            report: NodeReport = self._ray.get(ref, timeout=_CALL_S)
        except Exception as exc:
            self.notes.append(f"Ray node {node_id[:8]} joined but could not be described: "
                              f"{_first_line(exc)}")  # fmt: skip
            return
        host = self._host_for(report)
        if host is None:
            self.notes.append(f"Ray node {node_id[:8]} ({report.describe()}, host "
                              f"{report.host}) joined but is no host of the fabric "
                              "that is down; not used")  # fmt: skip
            return
        self._spawn(replace(report, host=host))

    def _host_for(self, report: NodeReport) -> str | None:
        """The down host of the fabric a joining node is: the one it names, or (unnamed)
        its machine's name or a name made from it, with the same devices."""
        names = [report.host] if report.named else [
            h for h in self._nodes if h == report.host or h.startswith(report.host + "-")
        ]  # fmt: skip
        for name in names:
            node = self._nodes.get(name)
            if node is None or node.up or node.agent is not None:
                continue
            if mismatch(self.fabric, replace(report, host=name)) is None:
                return name
        return None

    def _greeted(self, host: str, ref: Any) -> None:
        node = self._nodes[host]
        try:
            info = self._ray.get(ref, timeout=_CALL_S)
        except Exception as exc:
            self._refuse(host, f"its agent did not start: {_first_line(exc)}")
            return
        self._hello(host, info)
        what = node.report.describe() if node.report else ""
        why = f"Ray node {str(node.node_id)[:8]} joined: {what}"
        self._changes.append(NodeChange(host, node.devices, True, self._clock.now(), why))

    def _down(self, node: _Node, why: str) -> None:
        """``node`` is gone: its tasks LOST, its gangs that had not started failed, its
        devices OFFLINE; its agent killed (so that nothing of it runs on)."""
        if not node.up:
            return
        node.up = False
        cause = f"node {node.host} (Ray node {str(node.node_id)[:8]}) went away: {why}"
        self._outbox.pop(node.host, None)
        self._kill_agent(node)
        for task_id, t in list(self._tasks.items()):
            if t.host == node.host:
                self._finish(task_id, TaskEventKind.LOST, error=cause)
        for gang in list(self._gangs.values()):
            if node.host in gang.hosts and not gang.ready:
                self._fail_gang(gang, cause)
        self._changes.append(NodeChange(node.host, node.devices, False, self._clock.now(), cause))

    def _kill_agent(self, node: _Node) -> None:
        agent, node.agent = node.agent, None
        node.up = False
        node.beats, node.pids = {}, {}
        if agent is not None:
            with contextlib.suppress(Exception):
                self._ray.kill(agent, no_restart=True)

    # ----- helpers ----------------------------------------------------------------------
    def _ask(self, dev: Device, method: str, *args: Any, failed: Any = None) -> Any:
        """A blocking call to ``dev``'s agent; ``(False, why)`` (or ``failed``) if its node
        is down or does not answer."""
        node = self._nodes[dev.host]
        if not node.up:
            return (False, f"node {dev.host} is down") if failed is None else failed
        self._flush()
        try:
            ref = getattr(node.agent, method).remote(*args)
            return self._ray.get(ref, timeout=self.options.ping_timeout_s + _CALL_S)
        except Exception as exc:
            why = f"node {dev.host} did not answer: {_first_line(exc)}"
            return (False, why) if failed is None else failed

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("the backend is closed")

    def _device(self, device_id: str) -> Device:
        return lookup_device(self._devices, device_id)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text.splitlines()[0][:300]
