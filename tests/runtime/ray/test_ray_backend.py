"""RayBackend against a real three-node Ray cluster on this machine (``ray.cluster_utils``):
the backend contract (backend_contract.py), discovery on each node, exact placement, gangs
across nodes behind a placement group, outputs handed between nodes as Ray objects, a
declared machine that is missing, and, through the whole stack, a node removed mid-job
(its job requeued and finished elsewhere) and a node that joins (its devices READY).

One cluster for the module (Ray's start is slow): 1 CPU and a 100 MB object store per
node, no dashboard. Each node emulates a different machine (``accelnet.io/emulate``).
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from accelnet.devices import DeviceState
from accelnet.fabric import SwitchKind, build_fabric, parse_spec
from accelnet.fabric.model import Level
from accelnet.runtime.backend import TaskEvent, TaskEventKind
from accelnet.runtime.clock import ManualClock
from accelnet.runtime.local.taskenv import rendezvous_env
from accelnet.runtime.ray.backend import RayBackend
from accelnet.runtime.ray.connect import RayOptions
from accelnet.runtime.ray.local_cluster import node_args
from accelnet.runtime.ray.nodes import HOST_LABEL, LEAF
from accelnet.runtime.sdk import LocalCluster
from accelnet.sched import JobState
from tests.runtime.backend_contract import (
    T0,
    BackendContract,
    EventContract,
    EventHarness,
    Harness,
    command_tasks,
    gone,
    pickled_by_value,
    run,
    started,
    task,
    tree,
    until,
)
from tests.runtime.ray.clusters import connected_cluster

ray = pytest.importorskip("ray", reason="the Ray backend needs the ray extra")
pytestmark = pytest.mark.ray

NODES = {"n0": "2xT4", "n1": "3xL4", "n2": "2xL4_1xA100-SXM4-80GB"}  # n0 is the head


@pytest.fixture(autouse=True, scope="module")
def _pickle_this_module_by_value() -> Iterator[None]:
    with pickled_by_value(__name__):
        yield


@pytest.fixture(scope="module")
def cluster() -> Iterator[Any]:
    yield from connected_cluster(NODES)


@pytest.fixture(scope="module")
def backend(cluster: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RayBackend]:
    work = tmp_path_factory.mktemp("ray") / "work"
    options = RayOptions(address=cluster.address, kill_grace_s=0.5)
    b = options.connect(None, work, ManualClock(T0))
    yield b
    b.close()


def settle(b: RayBackend, limit: float = 20.0) -> None:
    """Stop whatever a test left running and drain the events (the backend is shared)."""
    for tid in b.running():
        b.cancel(tid)
    end = time.monotonic() + limit
    while b.running():
        assert time.monotonic() < end, f"still running: {b.running()}"
        b.poll(0.2)
    b.poll(0.05)


class TestRayBackendContract(BackendContract):
    """The contract every backend keeps; gangs of two span nodes n0 and n1."""

    @pytest.fixture
    def harness(self, backend: RayBackend, tmp_path: Path) -> Iterator[Harness]:
        settle(backend)
        yield Harness(backend, ("n0/gpu0", "n1/gpu0", "n1/gpu1", "n2/gpu0"), tmp_path / "logs")
        settle(backend)


class TestRayBackendEvents(EventContract):
    """The event protocol every backend keeps, the simulator's included."""

    @pytest.fixture
    def protocol(self, backend: RayBackend, tmp_path: Path) -> Iterator[EventHarness]:
        settle(backend)
        logs = tmp_path / "logs"

        def quiet() -> list[TaskEvent]:
            return backend.poll(0.2)

        devices = ("n0/gpu0", "n1/gpu0", "n1/gpu1", "n2/gpu0")
        short, long = command_tasks(logs, "true"), command_tasks(logs, "sleep 100")
        yield EventHarness(backend, devices, short, long, lambda done: until(backend, done), quiet)
        settle(backend)


# -- payloads -------------------------------------------------------------------------------


WHERE = ("ACCELNET_RAY_NODE", "ACCELNET_DEVICE", "CUDA_VISIBLE_DEVICES", "ACCELNET_OUTPUT")


def where() -> dict[str, str]:
    return {k: os.environ.get(k, "") for k in WHERE}


def write_part() -> str:
    from accelnet.runtime.local.handoff import output_dir

    rank, device = os.environ["ACCELNET_RANK"], os.environ["ACCELNET_DEVICE"]
    (output_dir() / f"part{rank}.txt").write_text(f"rank {rank} on {device}")
    return str(output_dir())


def read_parts() -> dict[str, Any]:
    from accelnet.runtime.local.handoff import input_dirs

    folder = input_dirs()["parts"]
    return {"folder": str(folder),
            "parts": {p.name: p.read_text() for p in sorted(folder.glob("part*.txt"))}}  # fmt: skip


def slow_first_attempt(seconds: float) -> str:
    from accelnet.runtime.local.handoff import output_dir

    attempt = int(os.environ["ACCELNET_TASK"].rsplit(".", 2)[-2])
    if attempt == 1:
        time.sleep(seconds)
    (output_dir() / "made.txt").write_text(os.environ["ACCELNET_DEVICE"])
    return os.environ["ACCELNET_DEVICE"]


def read_made() -> str:
    from accelnet.runtime.local.handoff import input_dirs

    return (input_dirs()["made"] / "made.txt").read_text()


def quick() -> str:
    return os.environ["ACCELNET_DEVICE"]


def save_checkpoint(name: str, text: str) -> str:
    folder = Path(os.environ["ACCELNET_CHECKPOINT_DIR"])
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text(text)
    return str(folder)


def read_checkpoint() -> dict[str, str]:
    folder = Path(os.environ["ACCELNET_CHECKPOINT_DIR"])
    return {p.name: p.read_text() for p in sorted(folder.iterdir())} | {"@": str(folder)}


# -- discovery and placement ----------------------------------------------------------------


def test_every_node_is_discovered_on_itself_into_one_fabric(cluster: Any, tmp_path: Path) -> None:
    # a backend of its own: what it reports first is every host, whatever ran before
    options = RayOptions(address=cluster.address, kill_grace_s=0.5)
    with options.connect(None, tmp_path / "work", ManualClock(T0)) as backend:
        _discovered(backend, tmp_path)


def _discovered(backend: RayBackend, tmp_path: Path) -> None:
    fabric = backend.fabric
    models = {h.name: [fabric.devices[d].model.name for d in h.device_ids] for h in fabric.hosts}
    assert models == {
        "n0": ["T4", "T4"],
        "n1": ["L4"] * 3,
        "n2": ["L4", "L4", "A100-SXM4-80GB"],
    }
    assert fabric.switches[LEAF].kind is SwitchKind.LEAF
    uplinks = {(lk.a, lk.b, lk.type.generation) for lk in fabric.external_links}
    assert uplinks == {(f"{h}/nic0", LEAF, "25GbE") for h in NODES}
    assert fabric.level("n0/gpu0", "n1/gpu0") is Level.NETWORK_LEAF
    assert fabric.level("n1/gpu0", "n1/gpu2") < Level.NETWORK_LEAF
    assert backend.hosts() == dict.fromkeys(NODES, True)
    changes = backend.take_node_changes()  # every host had its node from the start
    assert sorted((c.host, c.up) for c in changes) == [(h, True) for h in NODES]
    assert backend.take_node_changes() == []  # each change once
    labels = {n["Labels"][HOST_LABEL]: n["NodeID"] for n in ray.nodes() if n["Alive"]}
    # each task runs on its device's node, with CUDA_VISIBLE_DEVICES set by accelnet
    specs = [task(f"w-{d.replace('/', '-')}", d, tmp_path, None, where) for d in
             ("n0/gpu1", "n1/gpu2", "n2/gpu2")]  # fmt: skip
    for tid, ev in run(backend, *specs).items():
        got = ev.result
        host = got["ACCELNET_DEVICE"].split("/")[0]
        assert got["ACCELNET_RAY_NODE"] == labels[host] == backend.node_id(host), tid
        assert got["CUDA_VISIBLE_DEVICES"] == ""  # emulated devices: no real GPU shows
        assert f"/nodes/{host}/" in got["ACCELNET_OUTPUT"]  # the node's own folders


def where_pinned() -> dict[str, Any]:
    return {**where(), "cores": len(os.sched_getaffinity(0))}


def test_a_cpu_only_task_runs_on_its_hosts_node_pinned_and_without_a_device(
    backend: RayBackend, tmp_path: Path
) -> None:
    spec = dataclasses.replace(
        task("cpu-only", "n2/gpu0", tmp_path, None, where_pinned), devices=(), cpus=1.0
    )
    gpu = dataclasses.replace(task("gpu-pinned", "n1/gpu0", tmp_path, None, where_pinned), cpus=1.0)
    got = run(backend, spec, gpu)
    alone, beside = got["cpu-only"].result, got["gpu-pinned"].result
    assert alone["ACCELNET_RAY_NODE"] == backend.node_id("n2")  # on its host's node
    assert alone["ACCELNET_DEVICE"] == "" and alone["CUDA_VISIBLE_DEVICES"] == ""
    assert alone["cores"] == beside["cores"] == 1  # each pinned to the one core it asked
    assert beside["ACCELNET_DEVICE"] == "n1/gpu0"


def test_a_gang_across_nodes_starts_once_its_placement_group_is_ready(
    backend: RayBackend, tmp_path: Path
) -> None:
    gang = ("n0/gpu1", "n1/gpu2", "n2/gpu0")
    specs = [task(f"g{r}", d, tmp_path, None, where, devices=gang, rank=r, job="gang1")
             for r, d in enumerate(gang)]  # fmt: skip
    events = run(backend, *specs)
    nodes = {e.result["ACCELNET_RAY_NODE"] for e in events.values()}
    assert len(nodes) == 3
    from ray.util import placement_group_table

    groups = [g for g in placement_group_table().values() if g["name"] == "accelnet/gang1/1"]
    assert len(groups) == 1
    assert groups[0]["strategy"] == "STRICT_SPREAD"
    assert len(groups[0]["bundles"]) == 3
    assert groups[0]["state"] == "REMOVED"  # removed once its last rank ended
    assert {str(n) for n in groups[0]["bundles_to_node_id"].values()} == nodes


def test_a_torch_gang_across_nodes_meets_at_rank_0s_node(
    backend: RayBackend, tmp_path: Path
) -> None:
    # issue 23: the driver asks rank 0's node for a free port; every rank gets the same
    # MASTER_ADDR and MASTER_PORT, and an unmodified torch.distributed script all-reduces
    pytest.importorskip("torch")
    from tests.runtime.local.test_rendezvous import TRAIN

    settle(backend)
    script, out = tmp_path / "allreduce.py", tmp_path / "out"
    script.write_text(TRAIN)
    out.mkdir()
    gang = ("n1/gpu0", "n0/gpu0", "n2/gpu1")  # rank 0 on n1
    hosts = tuple(d.split("/")[0] for d in gang)
    command = f"{sys.executable} {script} {out}"
    specs = [
        dataclasses.replace(
            task(f"t{r}", d, tmp_path, command, devices=gang, rank=r, job="torch1"),
            rendezvous=rendezvous_env(r, hosts),
            timeout_s=120.0,
        )
        for r, d in enumerate(gang)
    ]
    events = run(backend, *specs)
    assert {e.kind for e in events.values()} == {TaskEventKind.SUCCEEDED}, events
    ranks = [json.loads((out / f"rank{r}.json").read_text()) for r in range(3)]
    assert [r["sum"] for r in ranks] == [6.0] * 3  # 1 + 2 + 3 across three nodes
    assert [r["node_rank"] for r in ranks] == [0, 1, 2]
    assert ranks[0]["devices"] == list(gang)


def test_a_job_launched_per_host_runs_setup_then_torchrun_on_each_node(
    cluster: Any, tmp_path: Path
) -> None:
    # issue 23 items 2 and 3 on Ray: four L4s of n1 and n2 (3 + 2 there); setup once per
    # node, then one torchrun per node whose ranks meet at rank 0's node
    pytest.importorskip("torch")
    from accelnet.sched import JobSpec
    from tests.runtime.test_launch_modes import TORCHRUN_SCRIPT

    script, out = tmp_path / "allreduce.py", tmp_path / "out"
    script.write_text(TORCHRUN_SCRIPT)
    out.mkdir()
    spec = JobSpec.model_validate({
        "name": "ddp-ray", "resources": {"accelerators": "L4:4"}, "launch": "per-host",
        "setup": 'echo "${ACCELNET_DEVICE%%/*}" > "setup-$ACCELNET_NODE_RANK"',
        "workdir": str(out), "timeout_s": 240,
        "run": f"{sys.executable} -m torch.distributed.run {script} {out}",
    })  # fmt: skip
    options = RayOptions(address=cluster.address, kill_grace_s=0.5)
    with LocalCluster(workdir=tmp_path / "work", ray=options) as c:
        job = c.submit_spec(spec)
        rec = job.wait(300)
        assert rec.state is JobState.SUCCEEDED, rec.error
        placement = rec.placement
    assert placement is not None
    hosts = list(dict.fromkeys(d.split("/")[0] for d in placement.devices))
    assert sorted(hosts) == ["n1", "n2"]
    ranks = [json.loads((out / f"rank{r}.json").read_text()) for r in range(4)]
    assert [r["sum"] for r in ranks] == [10.0] * 4  # 1+2+3+4 across two Ray nodes
    assert {r["group_rank"] for r in ranks} == {0, 1}
    assert [(out / f"setup-{n}").read_text().strip() for n in range(2)] == hosts


@pytest.mark.slow
def test_a_service_serves_from_replicas_on_ray_nodes_through_its_router(
    cluster: Any, tmp_path: Path
) -> None:
    # issue 24 on Ray: two replicas of the digits service on the nodes' L4s, reached by
    # their node's address (ACCELNET_BIND; 127.0.0.1 for this cluster's nodes)
    import httpx

    spec = {"name": "digits", "run": f"{sys.executable} -m accelnet.workloads.digits_service",
            "resources": {"accelerators": "L4:1"}, "replicas": {"min": 2, "max": 2}}  # fmt: skip
    options = RayOptions(address=cluster.address, kill_grace_s=0.5)
    with LocalCluster(workdir=tmp_path / "work", ray=options) as c, c.serve(spec) as svc:
        wait_for(lambda: svc.ready_count() == 2, "two replicas on Ray nodes", 120)
        answered = set()
        for k in range(40):
            r = httpx.get(f"{svc.url}/predict", params={"index": k}, timeout=30)
            assert r.status_code == 200, r.text
            answered.add(r.headers["x-accelnet-replica"])
        assert answered == set(svc.replicas())  # both replicas took requests
        hosts = set()
        for rep in svc.replicas().values():
            placed = c.job(str(rep["job"])).record.placement
            assert placed is not None
            hosts |= {d.split("/")[0] for d in placed.devices}
        assert hosts <= {"n1", "n2"}  # the L4 nodes
        assert {r.url.split(":")[1] for r in svc.router.replicas()} == {"//127.0.0.1"}


@pytest.mark.slow
def test_a_preempted_ddp_job_resumes_across_ray_nodes_from_its_checkpoint(
    cluster: Any, tmp_path: Path, ddp_single: dict[str, Any]
) -> None:
    # issue 23's acceptance on Ray: the DDP example's 4 ranks on n1 and n2 (3 + 2 L4s),
    # preempted by a more important job and resumed; rank 0 saved on its node and every
    # rank of the resumed gang loads the same checkpoint, on whichever node it runs
    pytest.importorskip("torch")
    from tests.runtime.test_train_example import assert_resumed, preempted_once

    options = RayOptions(address=cluster.address, kill_grace_s=0.5)
    got, (first, second), _ = preempted_once("per-device", tmp_path, ray=options)
    assert_resumed(got, first, second, ddp_single)


def test_outputs_reach_consumers_on_other_nodes_as_ray_objects(
    backend: RayBackend, tmp_path: Path
) -> None:
    gang = ("n0/gpu1", "n1/gpu2")
    made = run(backend, *[task(f"prod{r}", d, tmp_path, None, write_part, devices=gang,
                               rank=r, job="producer") for r, d in enumerate(gang)])  # fmt: skip
    assert all(e.kind is TaskEventKind.SUCCEEDED for e in made.values())
    assert backend.output_hosts("producer") == ["n0", "n1"]
    inputs = {"parts": "producer"}
    got = run(
        backend,
        task("far", "n2/gpu1", tmp_path, None, read_parts, job="c1", inputs=inputs),
        task("near", "n1/gpu0", tmp_path, None, read_parts, job="c2", inputs=inputs),
    )
    want = {"part0.txt": "rank 0 on n0/gpu1", "part1.txt": "rank 1 on n1/gpu2"}
    for tid in ("far", "near"):
        assert got[tid].kind is TaskEventKind.SUCCEEDED, got[tid]
        assert got[tid].result["parts"] == want, tid
    # each consumer reads its own node's folder of the producer's outputs: n1 its own part
    # in place, the other part fetched from n0; n2 both parts, fetched
    assert "/nodes/n2/outputs/producer" in got["far"].result["folder"]
    assert "/nodes/n1/outputs/producer" in got["near"].result["folder"]
    folder = backend.collect_output("producer")
    assert folder == Path(backend.output_location("producer"))
    assert sorted(p.name for p in folder.iterdir()) == ["part0.txt", "part1.txt"]


def test_a_retry_on_another_node_finds_the_checkpoints_its_job_left_on_earlier_ones(
    backend: RayBackend, tmp_path: Path
) -> None:
    # issue 23 item 5: $ACCELNET_CHECKPOINT_DIR is a folder of each node's own; attempt 2
    # on n2 gets what attempts before left on n0 and n1, the newest copy of a file winning
    def attempt(n: int, tid: str, device: str, fn: Callable[..., Any], *args: Any) -> Any:
        spec = dataclasses.replace(task(tid, device, tmp_path, None, fn, *args, job="ck"),
                                   attempt=n)  # fmt: skip
        (event,) = run(backend, spec).values()
        assert event.kind is TaskEventKind.SUCCEEDED, event
        return event.result

    attempt(1, "ck.1.0", "n0/gpu0", save_checkpoint, "model.txt", "step 10 (n0)")
    attempt(1, "ck.1.0b", "n0/gpu0", save_checkpoint, "shard-n0.txt", "n0's shard")
    time.sleep(0.05)  # the later save is newer by its time stamp
    attempt(2, "ck.2.0", "n1/gpu0", save_checkpoint, "model.txt", "step 20 (n1)")
    got = attempt(3, "ck.3.0", "n2/gpu0", read_checkpoint)
    assert "/nodes/n2/" in got.pop("@")  # n2's own folder, filled from n0's and n1's
    assert got == {"model.txt": "step 20 (n1)", "shard-n0.txt": "n0's shard"}
    back = attempt(4, "ck.4.0", "n0/gpu1", read_checkpoint)  # n0 gets n1's newer model
    assert back["model.txt"] == "step 20 (n1)"


def test_a_declared_machine_that_is_missing_starts_offline_and_close_leaves_nothing(
    cluster: Any, tmp_path: Path
) -> None:
    """Also: nodes that keep their own files (share_files=False) send logs back."""
    spec = {"name": "declared", "hosts": [
        {"name": "n0", "devices": "2xT4"},
        {"name": "n1", "devices": "3xL4"},
        {"name": "n2", "devices": "4xT4"},  # not what node n2 has: it is not used
        {"name": "n3", "devices": "1xT4"},  # no node yet
    ]}  # fmt: skip
    declared = build_fabric(parse_spec(spec, "test"))
    options = RayOptions(address=cluster.address, kill_grace_s=0.5, share_files=False)
    with options.connect(declared, tmp_path / "work", ManualClock(T0)) as b:
        assert b.fabric is declared
        assert b.hosts() == {"n0": True, "n1": True, "n2": False, "n3": False}
        changes = b.take_node_changes()  # every host: the first two are up
        got = [(c.host, c.up) for c in changes]
        assert got == [("n0", True), ("n1", True), ("n2", False), ("n3", False)]
        assert changes[3].devices == ("n3/gpu0",)
        assert any("n2 should have" in n for n in b.notes), b.notes
        ev = run(b, task("off", "n3/gpu0", tmp_path, "true"))["off"]
        assert (ev.kind, ev.error) == (TaskEventKind.LOST, "node n3 is down")
        # a gang with a rank on the missing machine: no rank runs
        gang = ("n1/gpu0", "n3/gpu0")
        ranks = run(b, *[task(f"half{r}", d, tmp_path, "true", devices=gang, rank=r)
                         for r, d in enumerate(gang)])  # fmt: skip
        assert ranks["half0"].kind is TaskEventKind.FAILED
        assert ranks["half0"].error == "the gang cannot start: node(s) n3 down"
        assert ranks["half1"].kind is TaskEventKind.LOST
        logs = tmp_path / "logs"
        cmd = 'echo "$ACCELNET_OUTPUT"; echo to-err >&2'
        assert run(b, task("own", "n1/gpu1", logs, cmd))["own"].kind is TaskEventKind.SUCCEEDED
        output = Path((logs / "own.out").read_text().strip())  # the log came back
        assert (logs / "own.err").read_text() == "to-err\n"
        assert tmp_path not in output.parents  # the node's own folders, not the driver's
        assert b.live_log("own", "out") is None
        b.launch(task("tree", "n1/gpu0", tmp_path, "sleep 100 & sleep 100"))
        procs = tree(started(b, "tree"))
    assert gone([p.pid for p in procs])


def test_the_demo_runs_across_the_ray_cluster(cluster: Any, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from accelnet.cli.main import app

    out = tmp_path / "demo"
    result = CliRunner().invoke(
        app,
        ["demo", "--backend", "ray", "--ray-address", cluster.address, "--quick", "--out",
         str(out), "--json"],
        env={"COLUMNS": "200"},
    )  # fmt: skip
    assert result.exit_code == 0, result.stderr
    data = json.loads(result.stdout)
    jobs = data["jobs"]
    training = ["training"] if importlib.util.find_spec("torch") else []  # else skipped
    assert {j: v["state"] for j, v in jobs.items()} == dict.fromkeys(
        ["video-pipeline", "inference", "render-tiles", "data-partitions", "render-assemble",
         "data-merge", *training], "succeeded",
    )  # fmt: skip
    if training:  # the DDP gang across nodes; its loss read from rank 0's log
        assert data["training"]["last_loss"] < data["training"]["first_loss"]
    for gang in ("render-tiles", "data-partitions", *training):  # 4 devices: no node has as many
        assert len({d.split("/")[0] for d in jobs[gang]["devices"]}) >= 2
    service = data["service"]  # the inference service's replicas on Ray nodes
    assert service["requests"] > 0 and service["failed"] == 0, service
    video = {d.split("/")[0] for d in jobs["video-pipeline"]["devices"]}
    assert len(video) == 1  # a pipeline's stages share memory: one machine
    for rel in ("inference/report.json", "render/render.png", "data/summary.json",
                "video/latency.json"):  # fmt: skip
        assert (out / rel).stat().st_size > 0


# -- faults, through the whole stack ----------------------------------------------------------


def wait_for(check: Callable[[], bool], what: str, limit: float = 60.0) -> None:
    end = time.monotonic() + limit
    while not check():
        assert time.monotonic() < end, f"gave up waiting for {what}"
        threading.Event().wait(0.05)


@pytest.fixture
def nodes_put_back(cluster: Any, backend: RayBackend) -> Iterator[None]:
    """For a test that removes nodes of the module's cluster: afterwards every machine of
    ``NODES`` has a live node again (added back if the test did not) and the module's
    shared backend has seen each one up, so that no later test finds a host down."""
    yield

    def live() -> dict[str, str]:
        return {n["Labels"].get(HOST_LABEL): n["NodeID"] for n in ray.nodes() if n["Alive"]}

    for host, devices in NODES.items():
        if host not in live():
            cluster.add_node(**node_args(host, devices))
    end = time.monotonic() + 60
    while {h: backend.node_id(h) for h in NODES} != {h: live().get(h) for h in NODES}:
        assert time.monotonic() < end, f"the shared backend still has hosts down: {backend.hosts()}"
        backend.poll(0.2)
    backend.take_node_changes()


@pytest.mark.usefixtures("nodes_put_back")
def test_a_node_removed_mid_job_requeues_it_and_a_node_that_joins_comes_back(
    cluster: Any, tmp_path: Path
) -> None:
    options = RayOptions(address=cluster.address, kill_grace_s=0.5)
    with LocalCluster(workdir=tmp_path / "work", ray=options) as c:
        job = c.submit(slow_first_attempt, 60, accelerators="L4:1", max_retries=1)
        wait_for(lambda: job.state is JobState.RUNNING, "the job to run")
        placement = job.record.placement
        assert placement is not None
        first = placement.devices[0]
        host = first.split("/")[0]
        assert host in ("n1", "n2")  # L4s: never the head
        others = [c.submit(quick, accelerators="any:1", max_retries=1) for _ in range(4)]
        node_id = c.backend.node_id(host)
        (node,) = [n for n in cluster.worker_nodes if n.node_id == node_id]
        cluster.remove_node(node)
        device = job.result(timeout=60)
        assert device.split("/")[0] not in (host, "n0"), device  # on the other L4 node
        rec = job.record
        assert (rec.attempts, rec.failures) == (2, 1)
        kinds = [e.kind for e in job.events()]
        assert "task:lost" in kinds
        lost = next(e for e in job.events() if e.kind == "task:lost")
        assert f"node {host}" in lost.detail and "went away" in lost.detail
        assert all(o.result(timeout=60) for o in others)  # nothing lost
        consumer = c.submit(read_made, accelerators="T4:1", inputs={"made": job})  # on n0
        assert consumer.result(timeout=60) == device  # what the retry made, from its node
        host_devices = [d for d in c.fabric.devices if d.startswith(host + "/")]
        with c._lock:
            states = c.controller.device_states()
        assert {states[d] for d in host_devices} == {DeviceState.OFFLINE}
        # the node joins again (the same machine, a new Ray node): its devices come back
        cluster.add_node(**node_args(host, NODES[host]))

        def ready() -> bool:
            with c._lock:
                states = c.controller.device_states()
            return {states[d] for d in host_devices} == {DeviceState.READY}

        wait_for(ready, f"{host}'s devices to be READY again")
        l4s = [d for d, dev in c.fabric.devices.items() if dev.model.name == "L4"]
        every_l4 = c.submit(quick, accelerators=f"L4:{len(l4s)}")  # both L4 nodes again
        assert sorted(every_l4.result(timeout=60)) == sorted(l4s)


def test_an_overtaken_answer_leaves_no_stale_refresh_of_a_shared_device(
    backend: RayBackend, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a and b share a device; a ends first (the node's refresh is refused: b runs), then b
    # (refreshed). An agent's answers may overtake each other (two polls are outstanding):
    # the answer with a's end, handled last, left its refused refresh as the device's, and
    # the release refresh then failed with "running task b" on an idle device
    real = backend._on_batch
    held: list[tuple[Any, Any]] = []

    def reordering(node: Any, batch: Any) -> None:
        if any(e[0] == "late-a" and e[1] != "started" for e in batch["events"]):
            held.append((node, batch))
            return
        real(node, batch)
        if held and any(e[0] == "late-b" and e[1] != "started" for e in batch["events"]):
            real(*held.pop())

    monkeypatch.setattr(backend, "_on_batch", reordering)
    device, logs = "n0/gpu0", tmp_path / "logs"  # the head: never removed by a test
    got = run(
        backend,
        dataclasses.replace(task("late-a", device, logs, "sleep 0.5", job="ja"), share=0.5),
        dataclasses.replace(task("late-b", device, logs, "sleep 2", job="jb"), share=0.5),
    )
    ends = {t: (e.kind.value, e.error) for t, e in got.items()}
    assert {e.kind for e in got.values()} == {TaskEventKind.SUCCEEDED}, ends
    assert not held
    ok, detail = backend.refresh(device)
    assert ok, detail


def test_a_driver_that_did_not_poll_for_a_while_does_not_take_its_nodes_for_gone(
    cluster: Any, tmp_path: Path
) -> None:
    # the module's backend sat unpolled while other tests ran (longer than node_timeout_s
    # on a loaded machine): its next poll looked for silent agents before reading their
    # answers, already waiting in Ray, and took every node for gone (its tasks LOST)
    options = RayOptions(address=cluster.address, kill_grace_s=0.5, node_timeout_s=1.0)
    with options.connect(None, tmp_path / "work", ManualClock(T0)) as b:
        b.poll(0.2)  # the agents are being polled
        threading.Event().wait(3.0)  # nobody reads their answers for 3x node_timeout_s
        ev = run(b, task("after-a-pause", "n0/gpu0", tmp_path / "logs", "true"))
        assert (ev["after-a-pause"].kind, ev["after-a-pause"].error) == (
            TaskEventKind.SUCCEEDED, None
        )  # fmt: skip
        assert set(b.hosts().values()) == {True}, b.notes
