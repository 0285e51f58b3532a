"""The environment a task runs in: the accelnet variables and the GPU it may see."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from pathlib import Path

from accelnet.fabric.model import Device, DeviceKind
from accelnet.runtime.backend import TaskSpec

_GPU_NUMBER = re.compile(r"(\d+)$")

# What a task never inherits from the process running the backend (the server, the CLI): the
# accelnet variables (``ACCELNET_TOKEN``, ``ACCELNET_URL``, the server's own settings; the
# backend sets a task's own ones afresh) except those in KEPT_ENV, and anything whose name says
# it is a secret. A task that needs a secret gets it from its spec's ``env``.
KEPT_ENV = frozenset({"ACCELNET_RAY_NODE", "ACCELNET_EMULATE", "ACCELNET_HOST", "ACCELNET_BIND"})
_SECRET_NAME = re.compile(r"TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|API_?KEY|PRIVATE_?KEY|_DB$")


def scrub_env(environ: Mapping[str, str]) -> dict[str, str]:
    """``environ`` without what a task must not see (see :data:`KEPT_ENV`): accelnet's
    variables and anything named like a token, secret, password, key or database."""
    return {
        k: v
        for k, v in environ.items()
        if k in KEPT_ENV
        or not (k.upper().startswith("ACCELNET_") or _SECRET_NAME.search(k.upper()))
    }


def cuda_visible_devices(device: Device, emulated: bool) -> str:
    """``CUDA_VISIBLE_DEVICES`` for a task on ``device``.

    A real NVIDIA GPU gets its host-local number: the digits ending its name (``gpu3`` ->
    ``"3"``; ``Device.index`` counts all of a host's devices, not its GPUs), else its UUID,
    else its index. Anything else, and every device of an emulated fabric, gets ``""``, so
    the task sees no real GPU.
    """
    if emulated or device.kind is not DeviceKind.GPU or device.model.vendor != "nvidia":
        return ""
    number = _GPU_NUMBER.search(device.name)
    if number:
        return number.group(1)
    return device.uuid or str(device.index)


def device_path(device_id: str) -> Path:
    """A relative path for a device id (``host/gpu0`` -> ``host/gpu0``), safe to join."""
    parts = [re.sub(r"[^\w.-]", "_", p) for p in device_id.split("/")]
    return Path(*("_" if p in ("", ".", "..") else p for p in parts))


def device_env(device: Device, scratch: Path, emulated: bool) -> dict[str, str]:
    """What a device's worker process and every task on the device see."""
    return {
        "ACCELNET_DEVICE": device.id,
        "ACCELNET_DEVICE_MODEL": device.model.name,
        "ACCELNET_EMULATED": "1" if emulated else "0",
        "ACCELNET_SCRATCH": str(scratch),
        "CUDA_VISIBLE_DEVICES": cuda_visible_devices(device, emulated),
    }


def mps_env(device: Device, share: float, emulated: bool) -> dict[str, str]:
    """CUDA MPS limits for a task holding ``share`` of a real NVIDIA GPU (a fractional
    request, or one of a packed pair), as NVIDIA's Kubernetes device plugin sets them for
    MPS sharing: ``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE`` (that share of the GPU's threads,
    at least 1 %) and ``CUDA_MPS_PINNED_DEVICE_MEM_LIMIT`` (that share of its memory, on
    device 0: the task sees only its GPU). Where the operator runs the MPS control daemon,
    they hold each tenant to its share; where it does not, CUDA ignores them and the tasks
    time-share the GPU. Empty for a whole device, an emulated fabric or any other device.
    """
    if share >= 1.0 or cuda_visible_devices(device, emulated) == "":
        return {}
    env = {"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": str(max(1, round(share * 100)))}
    mib = int(device.memory_gb * 1024 * share)
    if mib > 0:
        env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] = f"0={mib}M"
    return env


def rendezvous_env(rank: int, hosts: Sequence[str]) -> dict[str, str]:
    """The launcher variables of rank ``rank`` of a gang whose rank ``r`` runs on host
    ``hosts[r]``: torchrun's (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``,
    ``LOCAL_WORLD_SIZE``, ``NODE_RANK`` and its alias ``GROUP_RANK``, ``GROUP_WORLD_SIZE``:
    the number of hosts) and accelnet's (``ACCELNET_NODE_RANK``, ``ACCELNET_NUM_NODES``,
    ``ACCELNET_LOCAL_RANK``, ``ACCELNET_LOCAL_WORLD_SIZE``, ``ACCELNET_HOSTS``: the hosts
    by node rank, comma-separated). Hosts are numbered in the order of their first rank,
    so rank 0's host is node 0 (where ``MASTER_ADDR`` points); a host's ranks are numbered
    locally in rank order. ``MASTER_ADDR`` and ``MASTER_PORT`` are the backend's."""
    return rendezvous_envs(hosts)[rank]


def rendezvous_envs(hosts: Sequence[str]) -> list[dict[str, str]]:
    """:func:`rendezvous_env` of every rank of the gang, in one pass over ``hosts``."""
    nodes = list(dict.fromkeys(hosts))
    node_of = {h: str(i) for i, h in enumerate(nodes)}
    counts: dict[str, int] = {}
    local_ranks = []
    for h in hosts:
        local_ranks.append(counts.get(h, 0))
        counts[h] = local_ranks[-1] + 1
    world, n, joined = str(len(hosts)), str(len(nodes)), ",".join(nodes)
    out = []
    for rank, (host, local) in enumerate(zip(hosts, local_ranks, strict=True)):
        node, local_rank, local_world = node_of[host], str(local), str(counts[host])
        out.append({
            "RANK": str(rank),
            "WORLD_SIZE": world,
            "LOCAL_RANK": local_rank,
            "LOCAL_WORLD_SIZE": local_world,
            "NODE_RANK": node,
            "GROUP_RANK": node,
            "GROUP_WORLD_SIZE": n,
            "ACCELNET_NODE_RANK": node,
            "ACCELNET_NUM_NODES": n,
            "ACCELNET_LOCAL_RANK": local_rank,
            "ACCELNET_LOCAL_WORLD_SIZE": local_world,
            "ACCELNET_HOSTS": joined,
        })  # fmt: skip
    return out


def host_launch_env(node: int, nodes: Sequence[str], local_world: int) -> dict[str, str]:
    """The launcher variables of the task of a job launched per host (one process on each
    of ``nodes``, driving ``local_world`` devices) that runs on ``nodes[node]``: those
    ``torchrun`` reads its options from (``PET_NNODES``, ``PET_NODE_RANK``,
    ``PET_NPROC_PER_NODE``; ``PET_MASTER_ADDR`` and ``PET_MASTER_PORT`` follow the backend's
    ``MASTER_*``), so a plain ``torchrun train.py`` starts the host's ranks and meets the
    other hosts; ``NODE_RANK``, ``GROUP_RANK``, ``GROUP_WORLD_SIZE``, ``LOCAL_WORLD_SIZE``
    and accelnet's ``ACCELNET_NODE_RANK``, ``ACCELNET_NUM_NODES``,
    ``ACCELNET_LOCAL_WORLD_SIZE``, ``ACCELNET_HOSTS``. No ``RANK``/``WORLD_SIZE``/
    ``LOCAL_RANK``: the launcher gives each of its processes its own."""
    n, me, local = str(len(nodes)), str(node), str(local_world)
    return {
        "PET_NNODES": n,
        "PET_NODE_RANK": me,
        "PET_NPROC_PER_NODE": local,
        "NODE_RANK": me,
        "GROUP_RANK": me,
        "GROUP_WORLD_SIZE": n,
        "LOCAL_WORLD_SIZE": local,
        "ACCELNET_NODE_RANK": me,
        "ACCELNET_NUM_NODES": n,
        "ACCELNET_LOCAL_WORLD_SIZE": local,
        "ACCELNET_HOSTS": ",".join(nodes),
        "ACCELNET_LAUNCH": "per-host",
    }


def omp_threads(task: TaskSpec, pinned: int = 0) -> int:
    """``OMP_NUM_THREADS`` for ``task``: the cores it asked for (``cpus``, rounded down, at
    least 1; no more than the ``pinned`` cores it runs on, where the machine has fewer than
    it asked for; shared among the processes of a task launched per host), or 1 if it asked
    for none, as Ray sets it for its tasks and ``torchrun`` for its ranks: OpenMP, MKL and
    OpenBLAS (numpy, torch, ...) otherwise start a thread per core of the machine in every
    task, and a machine running many tasks is oversubscribed."""
    cores = min(task.cpus, pinned) if pinned else task.cpus
    per_process = cores / max(1, len(task.local_devices))
    return max(1, math.floor(per_process + 1e-9))


def task_env_delta(task: TaskSpec, extra: dict[str, str] | None = None) -> dict[str, str]:
    """What a task's environment adds to its worker's (which has the parent's environment
    and :func:`device_env` from its start): the task's accelnet variables,
    ``OMP_NUM_THREADS`` (:func:`omp_threads`), its ``rendezvous`` variables, the backend's
    ``extra`` (data hand-off, ``MASTER_ADDR`` and ``MASTER_PORT``), then ``task.env`` (a
    job's own ``env`` sets ``OMP_NUM_THREADS`` otherwise)."""
    env = {
        "ACCELNET_JOB": task.job_id,
        "ACCELNET_TASK": task.task_id,
        "ACCELNET_RANK": str(task.rank),
        "ACCELNET_WORLD_SIZE": str(task.world),
        "ACCELNET_ATTEMPT": str(task.attempt),
        "ACCELNET_DEVICES": ",".join(task.devices),
        "ACCELNET_DEVICE_SHARE": f"{task.share:g}",
        "OMP_NUM_THREADS": str(omp_threads(task)),
        **task.rendezvous,
    }
    if task.local_devices:
        env["ACCELNET_LOCAL_DEVICES"] = ",".join(task.local_devices)
    if extra:
        env.update(extra)
    if "PET_NNODES" in env and "MASTER_PORT" in env:  # launched per host: torchrun's too
        # the backend's rendezvous, whatever MASTER_* a job's env sets (torchrun reads
        # PET_*; a MASTER_ADDR=localhost copied from a one-machine script must not send a
        # gang across nodes to its own machine): a job sets PET_MASTER_* to choose its own
        env["PET_MASTER_ADDR"] = env.get("MASTER_ADDR", "127.0.0.1")
        env["PET_MASTER_PORT"] = env["MASTER_PORT"]
    env.update(task.env)
    return env
