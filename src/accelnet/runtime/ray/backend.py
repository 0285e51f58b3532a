"""Run tasks across a Ray cluster: accelnet decides, Ray carries processes, messages, data.

One agent per Ray node (:mod:`accelnet.runtime.ray.agent`, an actor pinned to its node)
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

This module holds the backend (the Backend contract, its capabilities, task dispatch and
the loop over Ray's answers); its node membership is in :mod:`accelnet.runtime.ray.members`,
its gangs in :mod:`accelnet.runtime.ray.gangs`, its traffic with the agents in
:mod:`accelnet.runtime.ray.courier`, its records of nodes, tasks and outputs in
:mod:`accelnet.runtime.ray.parts`.
"""

from __future__ import annotations

import contextlib
import re
import secrets
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import replace
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
from accelnet.runtime.ray.agent import token_file, unpack_into
from accelnet.runtime.ray.courier import Courier
from accelnet.runtime.ray.gangs import Gangs
from accelnet.runtime.ray.members import Members
from accelnet.runtime.ray.nodes import NodeReport
from accelnet.runtime.ray.parts import (
    CALL_S,
    Checkpoints,
    NodeRecord,
    Outputs,
    RayTask,
    first_line,
    keep_logs,
)

if TYPE_CHECKING:
    from accelnet.runtime.ray.connect import RayOptions

_SLICE_S = 0.02  # poll waits on Ray in slices this long (wakeup() is seen between them)
_CHECK_S = 1.0  # membership, silent agents and gang deadlines are looked at this often
_MASTERS_KEPT = 64  # gangs' rendezvous addresses kept (launches of an attempt come together)


class RayBackend(
    Backend,
    SupportsRefresh,
    SupportsLiveLogs,
    SupportsHandoff,
    SupportsWorkers,
    SupportsMembership,
):
    """Runs tasks on a Ray cluster's nodes (see the module docstring). Made by
    :meth:`RayOptions.connect <accelnet.runtime.ray.connect.RayOptions.connect>`, which
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
        self._waiting: dict[Any, tuple[str, Any]] = {}  # ObjectRef -> (what, key)
        self._members = Members(
            ray, fabric, options, clock, self._workdir, self._session, self._token,
            self._waiting, self.notes, seen, self._lost,
        )  # fmt: skip
        self._nodes = self._members.nodes
        self._tasks: dict[str, RayTask] = {}
        self._busy: dict[str, list[str]] = {}  # device -> its running tasks (shares, pairs)
        self._fresh: dict[str, tuple[bool, str]] = {}  # device -> refreshed since its task
        self._outputs = Outputs()
        self._checkpoints = Checkpoints()
        self._courier = Courier(
            ray,
            self._nodes,
            self._waiting,
            self._outputs,
            self._checkpoints,
            self._finish,
            self._members.down,
        )
        self._gangs = Gangs(
            ray, options, self._nodes, self._tasks, self._waiting, self._finish, self._courier.send
        )
        self._events: list[TaskEvent] = []
        self._losses: list[WorkerLoss] = []
        self._masters: dict[tuple[str, int], dict[str, str]] = {}  # (job, attempt) -> MASTER_*
        self._wake = threading.Event()
        self._checked = 0.0
        self._closed = False
        self._members.start(reports)
        self._checked = time.monotonic()

    # ----- the Backend contract ---------------------------------------------------------
    def launch(self, task: TaskSpec) -> None:
        """Send ``task`` to the agent of its device's node; returns at once. A task whose
        node is down ends LOST; the ranks of a gang that spans nodes wait for its placement
        group. Raises as :meth:`LocalBackend.launch` does for a malformed spec, an
        unknown device, or a closed backend; a device running another task runs this one
        beside it (in a spare worker of the node's backend)."""
        self._check_open()
        check_launch(task, self._tasks)
        device = self._device(task.device)
        t = self._tasks[task.task_id] = RayTask(task, device.host)
        self._busy.setdefault(device.id, []).append(task.task_id)
        self._fresh.pop(device.id, None)
        node = self._nodes[device.host]
        if not node.up:
            self._finish(task.task_id, TaskEventKind.LOST, error=f"node {node.host} is down")
            return
        hosts = list(dict.fromkeys(self._devices[d].host for d in task.devices
                                   if d in self._devices))  # fmt: skip
        if task.world > 1 and len(hosts) > 1:
            master = self._master(task)
            if isinstance(master, str):
                self._finish(task.task_id, TaskEventKind.LOST, error=master)
                return
            t.spec = replace(task, rendezvous={**task.rendezvous, **master})
            self._gangs.hold(t, tuple(hosts))
        else:  # the node's backend points the ranks at itself
            self._courier.send(t)

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
        # the launch first (the agent also copes with a cancel that overtakes)
        self._courier.flush()
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
            self._members.kill_agent(n)
        self._gangs.close()
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
            return False, f"device {dev.id} is running task {self._busy[dev.id][0]}"
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
        return self._members.take_changes()

    def live_log(self, task_id: str, stream: str) -> Path | None:
        """Where a running task's output is meanwhile, if its node shares the driver's
        files (else None: its logs arrive when it ends). Thread-safe."""
        t = self._tasks.get(task_id)
        node = None if t is None else self._nodes[t.host]
        if t is None or node is None or not t.sent or not node.up or not node.shared:
            return None
        with contextlib.suppress(Exception):
            path = self._ray.get(node.agent.live_log.remote(task_id, stream), timeout=CALL_S)
            return None if path is None else Path(path)
        return None

    def output_location(self, job_id: str) -> str:
        """``<workdir>/outputs/<job>`` on the driver: where :meth:`collect_output` puts the
        job's outputs (a consumer's tasks get them on their own node)."""
        name = re.sub(r"[^\w.-]", "_", job_id)
        return str(self._workdir / "outputs" / ("_" if name in ("", ".", "..") else name))

    def address_of(self, host: str) -> str:
        """``host``'s node address, as its agent reported it (127.0.0.1 for the nodes of a
        cluster on this machine)."""
        node = self._nodes.get(host)
        return node.address if node is not None else "127.0.0.1"

    def output_hosts(self, job_id: str) -> list[str]:
        """The hosts that hold parts of ``job_id``'s outputs (where the tasks of its last
        attempt succeeded). Thread-safe."""
        return self._outputs.hosts(job_id)

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
    def _finish(self, task_id: str, kind: TaskEventKind, **fields: Any) -> None:
        """The terminal event of a task; frees its device and settles its gang."""
        t = self._tasks.pop(task_id, None)
        if t is None:
            return
        running = self._busy.get(t.spec.device, [])
        if task_id in running:
            running.remove(task_id)
            if not running:
                del self._busy[t.spec.device]
        if t.sent and kind is TaskEventKind.SUCCEEDED:
            self._outputs.keep(t)
        if t.sent:
            self._checkpoints.ran(t)
        self._gangs.settle(t)
        self._events.append(TaskEvent(task_id, kind, self._clock.now(), **fields))

    def _on_batch(self, node: NodeRecord, batch: Mapping[str, Any]) -> None:
        if not node.up:
            return
        now = self._clock.now()
        node.heard = time.monotonic()
        late = batch["seq"] < node.seq  # overtaken by a later answer: its events still count
        node.seq = max(node.seq, batch["seq"])
        for task_id, kind, code, error, result, logs, timed_out, fresh in batch["events"]:
            t = self._tasks.get(task_id)
            if t is None or t.host != node.host:
                continue  # news of a task already settled here
            k = TaskEventKind(kind)
            if fresh is not None and not late and self._busy.get(t.spec.device) == [task_id]:
                # the device was refreshed on its node as its last task ended (a refresh
                # while another task still runs there says only that; an overtaken answer
                # may carry a refresh refused for a device-mate that has ended since: the
                # controller's refresh then asks the node)
                self._fresh[t.spec.device] = (bool(fresh[0]), str(fresh[1]))
            if k is TaskEventKind.STARTED:
                info = {**(result or {}), "host": node.host, "node_id": node.node_id}
                self._events.append(TaskEvent(task_id, k, now, result=info))
                continue
            if logs:
                keep_logs(t.spec, logs)
            self._finish(
                task_id, k, exit_code=code, error=error, result=result, timed_out=timed_out
            )
        if not late:
            node.beats = {d: (now - age, pid) for d, (age, pid) in batch["beats"].items()}
            node.pids = dict(batch["pids"])
        self._losses += [WorkerLoss(d, now - age, pid, how, task)
                         for d, age, pid, how, task in batch["losses"]]  # fmt: skip

    # ----- the loop ---------------------------------------------------------------------
    def _turn(self, wait_s: float) -> None:
        """Send the launches of the last turn; handle what Ray has ready, waiting up to
        ``wait_s`` for the first thing; then look for silent agents and dead nodes.

        The look comes after the answers are handled: an agent is silent only if its
        answer has not arrived, not if this driver has not read it. When the caller had
        not polled for longer than ``node_timeout_s`` (a busy or loaded driver), looking
        first took every node whose answer sat ready in Ray for gone, and LOST its tasks."""
        self._courier.flush()
        self._handle_ready(wait_s)
        if time.monotonic() - self._checked >= _CHECK_S:
            self._check()

    def _handle_ready(self, wait_s: float) -> None:
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
                answers.append(self._courier.answer(key, ref))
        for host, batch in sorted((a for a in answers if a is not None),
                                  key=lambda a: (a[0], a[1]["seq"])):  # fmt: skip
            self._on_batch(self._nodes[host], batch)
        for ref in ready:
            if ref not in self._waiting:
                continue
            what, key = self._waiting.pop(ref)
            if what == "gang":
                self._gangs.ready(key, ref)
            elif what == "launch":
                self._launched(key, ref)
            elif what == "join":
                self._members.joined(key, ref)
            elif what == "hello":
                self._members.greeted(key, ref)

    def _launched(self, task_id: str, ref: Any) -> None:
        try:
            self._ray.get(ref, timeout=CALL_S)
        except Exception as exc:
            t = self._tasks.get(task_id)
            if t is not None and self._nodes[t.host].up:
                why = f"its inputs could not be fetched: {first_line(exc)}"
                self._finish(task_id, TaskEventKind.FAILED, error=why)

    def _check(self) -> None:
        """Silent agents, nodes Ray says are dead, nodes that joined, late gangs."""
        self._checked = now = time.monotonic()
        self._members.check(now)
        self._gangs.check_late(now)

    def _lost(self, host: str, cause: str) -> None:
        """``host``'s node went away (its agent is killed): its launches not sent yet are
        dropped, its tasks LOST, its gangs that had not started failed."""
        self._courier.drop(host)
        for task_id, t in list(self._tasks.items()):
            if t.host == host:
                self._finish(task_id, TaskEventKind.LOST, error=cause)
        self._gangs.fail_on(host, cause)

    # ----- helpers ----------------------------------------------------------------------
    def _master(self, task: TaskSpec) -> dict[str, str] | str:
        """``MASTER_ADDR`` and ``MASTER_PORT`` of a gang across nodes: rank 0's node
        address and a port free there, asked of its agent once per attempt (the same for
        every rank); why not, if that failed. Kept only while the attempt's ranks are being
        launched (the controller launches them one after the other)."""
        if not task.rendezvous or "MASTER_PORT" in task.rendezvous:
            return {}
        key = (task.job_id, task.attempt)
        got = self._masters.get(key)
        if got is None:
            first = self._device(task.devices[0])
            addr, port = self._ask(first, "rendezvous", failed=(None, None))
            if port is None:
                return f"no rendezvous port on {first.host}, rank 0's node: {addr or 'no answer'}"
            got = self._masters[key] = {"MASTER_ADDR": str(addr), "MASTER_PORT": str(port)}
            while len(self._masters) > _MASTERS_KEPT:
                del self._masters[next(iter(self._masters))]
        return got

    def _ask(self, dev: Device, method: str, *args: Any, failed: Any = None) -> Any:
        """A blocking call to ``dev``'s agent; ``(False, why)`` (or ``failed``) if its node
        is down or does not answer."""
        node = self._nodes[dev.host]
        if not node.up:
            return (False, f"node {dev.host} is down") if failed is None else failed
        self._courier.flush()
        try:
            ref = getattr(node.agent, method).remote(*args)
            return self._ray.get(ref, timeout=self.options.ping_timeout_s + CALL_S)
        except Exception as exc:
            why = f"node {dev.host} did not answer: {first_line(exc)}"
            return (False, why) if failed is None else failed

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("the backend is closed")

    def _device(self, device_id: str) -> Device:
        return lookup_device(self._devices, device_id)
