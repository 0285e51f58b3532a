"""Connecting to a Ray cluster: Ray imported lazily, every node discovered, one fabric.

``RayOptions(address="auto").connect(fabric, workdir, clock)`` (what ``accelnet.local(...,
ray=RayOptions(...))`` and ``--backend ray`` do) joins the cluster with
``ray.init(address=...)`` (``auto``, ``ray://host:port`` for Ray Client, or a cluster's
GCS address such as a test cluster's), runs :func:`~accelnet.runtime.ray.nodes.describe_node`
on every live node (a task pinned to it: node affinity, ``soft=False``), and builds the
fabric: one host per node on a leaf switch, or, given a ``fabric`` (a file or preset that
declares the machines), that fabric, each node claiming the host named by its
``accelnet.io/host`` label (or its host name) whose devices it has. Declared hosts with no
node yet start OFFLINE and come up when their node joins. A cluster on 127.0.0.1 (the
local one of ``accelnet.runtime.ray.local_cluster``) is joined on 127.0.0.1 (:func:`keep_loopback`).
"""

from __future__ import annotations

import ipaddress
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from accelnet.fabric import Fabric, load_fabric
from accelnet.runtime.clock import Clock
from accelnet.runtime.local.backend import Recycle
from accelnet.runtime.ray.nodes import (
    DEFAULT_NETWORK,
    NodeReport,
    build_fabric_of,
    describe_node,
    mismatch,
    unique_hosts,
)

if TYPE_CHECKING:
    from accelnet.fabric.discovery import CpuMode
    from accelnet.runtime.ray.backend import RayBackend

EXTRA_HINT = "pip install 'accelnet[ray]'"
_GONE_S = 10.0  # a node that failed to describe itself: how long Ray may take to say it died
NODE_ID_LABEL = "ray.io/node-id"
LOOPBACK = "127.0.0.1"  # what every node of a local cluster binds and advertises


class RayUnavailableError(ImportError):
    """Ray is not installed (the ``ray`` extra)."""


class RayConnectError(RuntimeError):
    """The cluster could not be joined or described; the message says why."""


def import_ray() -> Any:
    """The ``ray`` module; :class:`RayUnavailableError` naming the extra if missing."""
    try:
        import ray  # noqa: PLC0415 (optional: only the Ray backend needs it)
    except ImportError as exc:
        raise RayUnavailableError(
            f"the Ray backend needs Ray, which is not installed: {EXTRA_HINT}"
        ) from exc
    return ray


def is_loopback_address(address: str) -> bool:
    """Whether a Ray address (``host:port``, ``[v6]:port``, ``localhost:port``) names a
    loopback host. ``auto``, ``ray://...`` and other names: False."""
    host = address.rsplit(":", 1)[0] if ":" in address else address
    host = host.strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def keep_loopback() -> None:
    """Let ``ray.init`` in this process join a cluster on 127.0.0.1 at 127.0.0.1.

    Ray rewrites a loopback address given to ``ray.init`` (``127.0.0.1``, ``localhost``,
    ``::1``) into this machine's network address, so a driver could not join a cluster
    that listens on 127.0.0.1 only (ray-project/ray#59110). Ray keeps loopback where it
    treats the machine as a single-node one (its ``ENABLE_RAY_CLUSTER`` switch, off on
    macOS and Windows); this turns that switch off in this process: a loopback address
    is used as given, and a Ray instance that a plain ``ray.init()`` starts here is on
    127.0.0.1 too. An address naming another host is used as given either way, and a
    driver advertises the address of the node it joins. Process-wide (Ray's own state,
    not undone), idempotent, no I/O; RayUnavailableError without Ray."""
    import_ray()
    from ray._private import ray_constants  # noqa: PLC0415 (Ray's switch; no public API)

    ray_constants.ENABLE_RAY_CLUSTER = False


def pinned(node_id: str) -> Any:
    """A scheduling strategy that runs on ``node_id`` or not at all."""
    from ray.util.scheduling_strategies import (  # noqa: PLC0415
        NodeAffinitySchedulingStrategy,
    )

    return NodeAffinitySchedulingStrategy(node_id, soft=False)


def alive_nodes(ray: Any) -> dict[str, Mapping[str, str]]:
    """Live nodes: node id -> labels."""
    return {n["NodeID"]: dict(n.get("Labels") or {}) for n in ray.nodes() if n.get("Alive")}


@dataclass(frozen=True, slots=True)
class RayOptions:
    """How to run on a Ray cluster.

    ``address``: ``auto`` (the cluster this machine belongs to), ``ray://host:10001``
    (Ray Client) or a GCS address; ``namespace``: the Ray namespace of accelnet's actors;
    ``cpu_devices``: how discovery turns a node's cores into devices; ``network``: the
    link type joining each node to the leaf switch (when the fabric is discovered).
    ``recycle``, ``kill_grace_s``, ``heartbeat_s``, ``ping_timeout_s``: as for
    :class:`~accelnet.runtime.local.backend.LocalBackend`, on every node. A gang that
    spans nodes must get its placement group within ``gang_timeout_s``; a node whose
    agent has not answered for ``node_timeout_s`` is taken for gone (its agent is killed,
    its tasks end LOST). ``connect_timeout_s`` bounds discovery and the agents' start.
    ``share_files``: nodes that can see the driver's working folder keep their folders
    there and write logs straight into its log folder; False: every node keeps its own,
    in its temporary folder, and logs travel back with each task's end. ``hold_gpus``:
    each node's agent holds accelnet's GPUs there in Ray's resource view (as many as Ray
    counts on the node), so that other Ray work on the cluster is never given them (a node
    whose GPUs another holder keeps waits for them, up to ``connect_timeout_s``); False
    leaves them free in Ray's view (a second accelnet on the same GPUs, knowingly).
    """

    address: str = "auto"
    namespace: str | None = "accelnet"
    cpu_devices: CpuMode = "per-core"
    network: str = DEFAULT_NETWORK
    recycle: Recycle = "per-tenant"
    kill_grace_s: float = 1.0
    heartbeat_s: float | None = 1.0
    ping_timeout_s: float = 10.0
    gang_timeout_s: float = 30.0
    node_timeout_s: float = 30.0
    connect_timeout_s: float = 120.0
    share_files: bool = True
    hold_gpus: bool = True

    def connect(self, fabric: Fabric | str | None, workdir: str | Path, clock: Clock) -> RayBackend:
        """Join the cluster and start an agent on every node; the backend. ``fabric``
        (a Fabric, preset or file) declares the machines; None discovers them.
        RayUnavailableError without Ray; RayConnectError if the cluster cannot be
        joined or a node cannot be described."""
        from accelnet.runtime.ray.backend import RayBackend  # noqa: PLC0415

        ray = import_ray()
        owns = not ray.is_initialized()
        if owns:
            if self.address == "auto" or is_loopback_address(self.address):
                keep_loopback()  # a cluster on 127.0.0.1 is joined on 127.0.0.1
            try:
                ray.init(address=self.address, namespace=self.namespace, log_to_driver=False,
                         logging_level="warning")  # fmt: skip
            except (ConnectionError, RuntimeError, ValueError) as exc:
                raise RayConnectError(f"cannot join Ray at {self.address!r}: {exc}") from exc
        try:
            declared = load_fabric(fabric) if isinstance(fabric, str) else fabric
            notes: list[str] = []
            reports = self.describe(ray, notes)
            seen = [r.node_id for r in reports]
            if declared is None:
                reports = unique_hosts(reports)
                built = build_fabric_of(reports, network=self.network)
            else:
                built, reports = declared, claim(declared, reports, notes)
            return RayBackend(ray, built, reports, workdir, clock, self, owns_ray=owns,
                              notes=notes, seen=seen)  # fmt: skip
        except BaseException:
            if owns:
                ray.shutdown()
            raise

    def describe(self, ray: Any, notes: list[str] | None = None) -> list[NodeReport]:
        """Run discovery on every live node, in parallel; the reports by node id order.
        A node that dies meanwhile (Ray reports it dead within ``_GONE_S``) is left out,
        with a note: it is down, as if it had died just before. RayConnectError if a
        live node cannot be described in time."""
        remote = ray.remote(num_cpus=0, max_retries=0)(describe_node)
        nodes = alive_nodes(ray)
        refs = {
            node: remote.options(scheduling_strategy=pinned(node)).remote(
                node, labels, self.cpu_devices
            )
            for node, labels in sorted(nodes.items())
        }
        _, late = ray.wait(list(refs.values()), num_returns=len(refs),
                               timeout=self.connect_timeout_s)  # fmt: skip
        out, failed = [], {}
        for node, ref in refs.items():
            if ref in late:
                failed[node] = f"did not describe itself within {self.connect_timeout_s:g} s"
                continue
            try:
                out.append(ray.get(ref))
            except Exception as exc:
                failed[node] = f"could not be described: {exc}"
        gone = _dead(ray, failed) if failed else set()
        for node, why in failed.items():
            if node not in gone:
                raise RayConnectError(f"Ray node {node[:8]} {why}")
            if notes is not None:
                notes.append(f"Ray node {node[:8]} died while it was described; not used")
        return out


def _dead(ray: Any, nodes: Mapping[str, str], wait_s: float = _GONE_S) -> set[str]:
    """Those of ``nodes`` that Ray reports dead (or forgot) within ``wait_s``."""
    end = time.monotonic() + wait_s
    while True:
        alive = alive_nodes(ray)
        gone = {n for n in nodes if n not in alive}
        if len(gone) == len(nodes) or time.monotonic() >= end:
            return gone
        time.sleep(0.1)


def claim(fabric: Fabric, reports: list[NodeReport], notes: list[str]) -> list[NodeReport]:
    """The reports of nodes that are hosts of a declared ``fabric``: each node claims the
    host named by its label (or its host name); a node whose devices differ, or whose
    host another node claimed first, is left out (with a note)."""
    taken: set[str] = set()
    out = []
    for r in reports:
        why = mismatch(fabric, r)
        if why is None and r.host in taken:
            why = f"another node already is host {r.host}"
        if why is not None:
            notes.append(f"Ray node {r.node_id[:8]} not used: {why}")
            continue
        taken.add(r.host)
        out.append(r)
    return out
