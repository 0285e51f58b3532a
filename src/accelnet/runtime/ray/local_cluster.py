"""A multi-node Ray cluster on this machine, for the demo, tests and benchmarks.

``with local_ray_cluster() as address:`` starts ``ray.cluster_utils.Cluster`` with one
Ray node per entry of ``nodes`` (host name -> emulated devices, as the
``accelnet.io/emulate`` label takes them), each a raylet of its own with ``cpus`` CPUs and
a small object store, no dashboard; yields the cluster's address (give it to
``RayOptions(address=...)``) and shuts everything down at the end. The nodes share this
machine's CPU: their devices are emulated, as ``--fabric`` emulates locally.

Loopback only: every node is started with ``node_ip_address=127.0.0.1``, so each Ray
process of the cluster (GCS, raylets, their agents and metrics ports, the workers) binds
and advertises 127.0.0.1 and the cluster's address is ``127.0.0.1:port``; nothing listens
on the machine's network address. A driver in this process joins it on 127.0.0.1 too
(:func:`keep_loopback`).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping
from typing import Any

from accelnet.runtime.ray.connect import LOOPBACK, import_ray, keep_loopback
from accelnet.runtime.ray.nodes import EMULATE_LABEL, HOST_LABEL

LOCAL_CLUSTER = "local-cluster"  # the address that asks for a cluster on this machine
DEMO_NODES: Mapping[str, str] = {
    "ray-head": "2xT4",
    "ray-node1": "3xL4",
    "ray-node2": "2xL4_1xA100-SXM4-80GB",
}
_QUIET = {"RAY_USAGE_STATS_ENABLED": "0"}


def node_args(
    host: str, emulate: str, cpus: int = 1, object_store_mb: int = 100, gpus: int = 0
) -> dict[str, Any]:
    """``Cluster.add_node`` arguments of one emulated node, on 127.0.0.1 (``gpus``: the GPUs
    Ray counts on it, as a GPU node's Ray would; none by default)."""
    return {
        "node_ip_address": LOOPBACK,
        "num_cpus": cpus,
        "num_gpus": gpus,
        "object_store_memory": object_store_mb * 1024 * 1024,
        "labels": {HOST_LABEL: host, EMULATE_LABEL: emulate},
    }


def new_cluster(head_args: Mapping[str, Any]) -> Any:
    """A ``ray.cluster_utils.Cluster`` whose head node is started with ``head_args``
    (:func:`node_args` and more), on 127.0.0.1 whatever they say, its dashboard off
    unless they ask for it (and then on 127.0.0.1); :func:`keep_loopback` done. Blocks
    until the head is up (seconds). RayUnavailableError without Ray."""
    import_ray()
    from ray.cluster_utils import Cluster  # noqa: PLC0415

    for key, value in _QUIET.items():
        os.environ.setdefault(key, value)
    keep_loopback()
    head = {"include_dashboard": False, **head_args, "dashboard_host": LOOPBACK,
            "node_ip_address": LOOPBACK}  # fmt: skip
    return Cluster(initialize_head=True, head_node_args=head)


def start_cluster(
    nodes: Mapping[str, str] = DEMO_NODES,
    cpus: int = 1,
    object_store_mb: int = 100,
    gpus: Mapping[str, int] | None = None,
    dashboard: bool = False,
) -> Any:
    """Start the cluster (the first node is the head) on 127.0.0.1; the ``Cluster``, whose
    ``address`` is ``127.0.0.1:port``. ``gpus``: GPUs Ray counts on some nodes (by host);
    ``dashboard``: run Ray's dashboard (on 127.0.0.1; its state API needs it). Blocks until
    every node is up (seconds per node). RayUnavailableError without Ray."""
    (head, emulate), *rest = nodes.items()
    gpus = gpus or {}
    head_args = node_args(head, emulate, cpus, object_store_mb, gpus.get(head, 0))
    cluster = new_cluster({**head_args, "include_dashboard": dashboard})
    try:
        for host, emulate in rest:
            args = node_args(host, emulate, cpus, object_store_mb, gpus.get(host, 0))
            cluster.add_node(wait=False, **args)
        cluster.wait_for_nodes()
    except BaseException:
        cluster.shutdown()
        raise
    return cluster


@contextlib.contextmanager
def local_ray_cluster(
    nodes: Mapping[str, str] = DEMO_NODES, cpus: int = 1, object_store_mb: int = 100
) -> Iterator[str]:
    """A cluster for the duration of the block; its address (``127.0.0.1:port``)."""
    cluster = start_cluster(nodes, cpus, object_store_mb)
    try:
        yield str(cluster.address)
    finally:
        ray = import_ray()
        if ray.is_initialized():
            ray.shutdown()
        cluster.shutdown()
