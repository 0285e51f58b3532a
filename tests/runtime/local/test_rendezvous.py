"""Rendezvous for gangs (issue 23 item 1): every rank gets torchrun's variables, rank 0's
address and a port free there, so an unmodified ``torch.distributed`` script runs across
the gang's hosts."""

from __future__ import annotations

import dataclasses
import json
import os
import socket
import sys
import textwrap
from pathlib import Path

import pytest

from accelnet.runtime.backend import TaskEventKind, TaskSpec
from accelnet.runtime.clock import ManualClock
from accelnet.runtime.local.backend import LocalBackend
from accelnet.runtime.local.taskenv import host_launch_env, rendezvous_env, task_env_delta
from accelnet.runtime.local.worker import hand_off
from accelnet.runtime.sdk import LocalCluster
from accelnet.sched import JobSpec, JobState
from tests.runtime.backend_contract import T0, until
from tests.runtime.local.test_local_backend import DEVICES, GPU0, GPU1, GPU2


def test_ranks_are_numbered_per_host_in_the_order_of_their_first_rank() -> None:
    hosts = ("b", "b", "a", "b", "a")  # a gang placed over two hosts, ranks interleaved
    envs = [rendezvous_env(r, hosts) for r in range(5)]
    assert [e["RANK"] for e in envs] == ["0", "1", "2", "3", "4"]
    assert {e["WORLD_SIZE"] for e in envs} == {"5"}
    assert [e["NODE_RANK"] for e in envs] == ["0", "0", "1", "0", "1"]  # rank 0's host: node 0
    assert [e["LOCAL_RANK"] for e in envs] == ["0", "1", "0", "2", "1"]
    assert [e["LOCAL_WORLD_SIZE"] for e in envs] == ["3", "3", "2", "3", "2"]
    for e in envs:
        assert e["GROUP_RANK"] == e["NODE_RANK"] == e["ACCELNET_NODE_RANK"]
        assert e["LOCAL_RANK"] == e["ACCELNET_LOCAL_RANK"]
        assert e["GROUP_WORLD_SIZE"] == e["ACCELNET_NUM_NODES"] == "2"
        assert e["ACCELNET_HOSTS"] == "b,a"
        assert "MASTER_ADDR" not in e and "MASTER_PORT" not in e  # the backend's to add
    single = rendezvous_env(0, ("h",))
    assert (single["RANK"], single["WORLD_SIZE"], single["LOCAL_RANK"]) == ("0", "1", "0")


def _spec(tid: str, rank: int, dev: str, tmp: Path, attempt: int = 1, **extra: str) -> TaskSpec:
    devices = (GPU0, GPU1, GPU2)
    hosts = ("l4box",) * 3
    out = tmp / f"{tid}.json"
    keep = '("MASTER_", "RANK", "LOCAL_")'
    dump = f"{{k: v for k, v in os.environ.items() if k.startswith({keep})}}"
    cmd = f'{sys.executable} -c \'import json, os; json.dump({dump}, open("{out}", "w"))\''
    return TaskSpec(
        tid, "job", rank, 3, dev, devices, command=cmd, log_dir=str(tmp / "logs"),
        attempt=attempt, rendezvous={**rendezvous_env(rank, hosts), **extra},
    )  # fmt: skip


def test_the_ranks_of_an_attempt_on_one_machine_share_a_port_free_there(tmp_path: Path) -> None:
    b = LocalBackend(DEVICES, tmp_path / "work", ManualClock(T0), emulated=True)
    try:
        for rank, dev in enumerate((GPU0, GPU1, GPU2)):
            b.launch(_spec(f"a{rank}", rank, dev, tmp_path))
        done = until(b, lambda evs: sum(e.kind is TaskEventKind.SUCCEEDED for e in evs) == 3)
        assert len([e for e in done if e.kind is TaskEventKind.SUCCEEDED]) == 3
        seen = [json.loads((tmp_path / f"a{r}.json").read_text()) for r in range(3)]
        assert {s["MASTER_ADDR"] for s in seen} == {"127.0.0.1"}
        (port,) = {s["MASTER_PORT"] for s in seen}
        assert 0 < int(port) < 65536
        assert [s["RANK"] for s in seen] == ["0", "1", "2"]
        assert [s["LOCAL_RANK"] for s in seen] == ["0", "1", "2"]
        # a launcher that set them (a gang across machines) keeps its own
        b.launch(_spec("b0", 0, GPU0, tmp_path, 2, MASTER_ADDR="10.0.0.7", MASTER_PORT="29500"))
        until(b, lambda evs: any(e.task_id == "b0" and e.kind is TaskEventKind.SUCCEEDED
                                 for e in evs))  # fmt: skip
        kept = json.loads((tmp_path / "b0.json").read_text())
        assert (kept["MASTER_ADDR"], kept["MASTER_PORT"]) == ("10.0.0.7", "29500")
    finally:
        b.close()


def _single(tid: str, tmp: Path, **env: str) -> TaskSpec:
    """A one-rank task (an attempt of one task) that records its launcher variables and
    its shared-memory folder's owner and mode as it starts."""
    out = tmp / f"{tid}.json"
    code = (
        "import json, os; s = os.stat(os.environ['ACCELNET_SHM']); "
        "v = {k: x for k, x in os.environ.items() if k.startswith(('MASTER_', 'PET_'))}; "
        f"json.dump({{**v, 'shm': [s.st_uid, s.st_mode & 0o777]}}, open('{out}', 'w'))"
    )
    return TaskSpec(
        tid, tid, 0, 1, GPU0, (GPU0,), command=f'{sys.executable} -c "{code}"',
        log_dir=str(tmp / "logs"), rendezvous=rendezvous_env(0, ("l4box",)), env=env,
    )  # fmt: skip


def test_a_one_rank_attempt_gets_a_port_and_its_folder_from_its_worker(tmp_path: Path) -> None:
    # the worker picks the port and makes the folder as the task starts, off the
    # controller's per-task path: the task sees a real port and its own private folder
    base = tmp_path / "shm"
    b = LocalBackend(DEVICES, tmp_path / "work", ManualClock(T0), emulated=True, shm_base=base)
    try:
        per_host = host_launch_env(0, ("l4box",), 1)  # torchrun's variables follow
        specs = (
            _single("a", tmp_path),
            _single("b", tmp_path, MASTER_PORT="29511"),
            dataclasses.replace(_single("c", tmp_path), rendezvous=per_host),
            dataclasses.replace(_single("d", tmp_path, MASTER_PORT="29512"),
                                rendezvous=per_host),
            _single("e", tmp_path, MASTER_PORT=""),
            dataclasses.replace(_single("f", tmp_path, MASTER_PORT=""), rendezvous=per_host),
        )  # fmt: skip
        for spec in specs:
            b.launch(spec)
            until(b, lambda evs, t=spec.task_id: any(
                e.task_id == t and e.kind is TaskEventKind.SUCCEEDED for e in evs))  # fmt: skip
        seen = {t: json.loads((tmp_path / f"{t}.json").read_text()) for t in "abcdef"}
        assert seen["a"]["MASTER_ADDR"] == "127.0.0.1" and 0 < int(seen["a"]["MASTER_PORT"]) < 65536
        assert seen["a"]["shm"] == [os.geteuid(), 0o700]
        assert seen["b"]["MASTER_PORT"] == "29511"  # the job's own env wins
        c = seen["c"]
        assert c["PET_MASTER_PORT"] == c["MASTER_PORT"] and 0 < int(c["MASTER_PORT"]) < 65536
        assert c["PET_MASTER_ADDR"] == "127.0.0.1"
        d = seen["d"]  # torchrun's rendezvous stays the backend's, whatever MASTER_* says
        assert d["MASTER_PORT"] == "29512" and 0 < int(d["PET_MASTER_PORT"]) < 65536
        assert seen["e"]["MASTER_PORT"] == ""  # the job's own value, even an empty one
        f = seen["f"]  # ... and torchrun's rendezvous the backend's, a real port
        assert f["MASTER_PORT"] == "" and 0 < int(f["PET_MASTER_PORT"]) < 65536
        # each attempt's folder went with its task: only the backend's owner file is left
        assert [p.suffix for p in base.iterdir()] == [".owner"]
    finally:
        b.close()


def test_a_hand_off_that_cannot_be_made_fails_the_launch_not_the_backend(tmp_path: Path) -> None:
    base = tmp_path / "not-a-folder"
    base.write_text("x")  # the shared-memory base cannot be made
    b = LocalBackend(DEVICES, tmp_path / "work", ManualClock(T0), emulated=True, shm_base=base)
    try:
        b.launch(_single("a", tmp_path))  # returns: the task fails with the reason
        (event,) = until(b, lambda evs: any(e.task_id == "a" for e in evs))
        assert event.kind is TaskEventKind.FAILED and "could not start" in (event.error or "")
        assert str(base) in (event.error or "")
    finally:
        b.close()


def test_a_rank_whose_launch_fails_early_still_counts_for_its_attempts_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # rank 1's lane cannot be cleaned: its launch fails before the worker; when rank 0 ends,
    # every rank of the attempt has ended and its shared-memory folder goes
    b = LocalBackend(DEVICES, tmp_path / "work", ManualClock(T0), emulated=True,
                     shm_base=tmp_path / "shm")  # fmt: skip
    clean = b._clean_lane

    def failing(task: TaskSpec, *args: object) -> tuple[object, str | None]:
        if task.rank == 1:
            return None, "its scratch could not be emptied"
        return clean(task, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(b, "_clean_lane", failing)
    try:
        for rank, dev in enumerate((GPU0, GPU1)):
            spec = _spec(f"r{rank}", rank, dev, tmp_path)
            b.launch(dataclasses.replace(spec, world=2, devices=(GPU0, GPU1)))
        ended = lambda evs: {e.task_id: e.kind for e in evs  # noqa: E731
                             if e.kind is not TaskEventKind.STARTED}  # fmt: skip
        kinds = ended(until(b, lambda evs: len(ended(evs)) == 2))
        assert kinds == {"r0": TaskEventKind.SUCCEEDED, "r1": TaskEventKind.FAILED}
        assert b.live_shm() == []
    finally:
        b.close()


def test_a_worker_that_gets_no_port_sets_no_rendezvous_address(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def refuse(self: socket.socket, address: object) -> None:
        raise OSError("no port")

    monkeypatch.setattr(socket.socket, "bind", refuse)
    env = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "", "PET_MASTER_ADDR": "127.0.0.1",
           "PET_MASTER_PORT": "", "RANK": "0"}  # fmt: skip
    hand_off({"env": env, "port_vars": ["MASTER_PORT", "PET_MASTER_PORT"], "shm": None,
              "addr_vars": ["MASTER_ADDR", "PET_MASTER_ADDR"]})  # fmt: skip
    assert env == {"RANK": "0"}  # as where the backend finds no port: none, not half of one
    mine = {"MASTER_ADDR": "10.1.2.3", "MASTER_PORT": ""}  # the job set the address itself
    hand_off({"env": mine, "port_vars": ["MASTER_PORT"], "shm": None, "addr_vars": []})
    assert mine == {"MASTER_ADDR": "10.1.2.3"}


def test_torchruns_rendezvous_across_nodes_is_the_backends_whatever_the_jobs_env() -> None:
    # a gang launched per host across nodes (the Ray backend puts rank 0's node and a port
    # there in the rendezvous): a MASTER_ADDR=localhost copied from a one-machine script
    # must not send each node's torchrun to its own machine
    across = {**host_launch_env(1, ("n0", "n1"), 2), "MASTER_ADDR": "10.0.0.1",
              "MASTER_PORT": "40000"}  # fmt: skip
    spec = TaskSpec("t", "j", 0, 2, GPU1, (GPU1,), command="true", rendezvous=across,
                    env={"MASTER_ADDR": "localhost", "MASTER_PORT": "29500"})  # fmt: skip
    env = task_env_delta(spec)
    assert (env["PET_MASTER_ADDR"], env["PET_MASTER_PORT"]) == ("10.0.0.1", "40000")
    assert (env["MASTER_ADDR"], env["MASTER_PORT"]) == ("localhost", "29500")  # its own
    own = dataclasses.replace(spec, env={"PET_MASTER_PORT": "29400"})
    assert task_env_delta(own)["PET_MASTER_PORT"] == "29400"  # a job may choose torchrun's


TRAIN = textwrap.dedent(
    """
    import json, os, sys
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")  # env:// - nothing accelnet-specific
    rank, world = dist.get_rank(), dist.get_world_size()
    t = torch.tensor([float(rank + 1)])
    dist.all_reduce(t)
    names = [None] * world
    dist.all_gather_object(names, os.environ["ACCELNET_DEVICE"])
    out = os.path.join(sys.argv[1], f"rank{rank}.json")
    json.dump({"rank": rank, "world": world, "sum": t.item(), "devices": names,
               "local_rank": int(os.environ["LOCAL_RANK"]),
               "node_rank": int(os.environ["NODE_RANK"]),
               "group_rank": int(os.environ["GROUP_RANK"]),
               "host_devices": os.environ.get("ACCELNET_LOCAL_DEVICES", ""),
               "cwd": os.getcwd()}, open(out, "w"))
    dist.destroy_process_group()
    """
)


@pytest.mark.slow
def test_an_unmodified_torch_distributed_script_runs_across_a_gangs_hosts(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    script = tmp_path / "allreduce.py"
    script.write_text(TRAIN)
    out = tmp_path / "out"
    out.mkdir()
    with LocalCluster("mixed-lab", workdir=tmp_path / "work") as cluster:
        # two hosts: one Orin on each of jetson0 and jetson1; then 3 L4s of one host
        specs = [
            {"name": "two-hosts", "resources": {"accelerators": "Jetson-AGX-Orin:2"}},
            {"name": "one-host", "resources": {"accelerators": "L4:3"}},
        ]
        jobs = []
        for fields in specs:
            dest = out / fields["name"]
            dest.mkdir()
            spec = JobSpec.model_validate(
                {**fields, "run": f"{sys.executable} {script} {dest}", "timeout_s": 120}
            )
            jobs.append(cluster.submit_spec(spec))
        for job in jobs:
            rec = job.wait(180)
            assert rec.state is JobState.SUCCEEDED, (rec.error, job.id)
    two = [json.loads((out / "two-hosts" / f"rank{r}.json").read_text()) for r in range(2)]
    assert [r["sum"] for r in two] == [3.0, 3.0]  # 1 + 2, reduced across the hosts
    assert [r["node_rank"] for r in two] == [0, 1] and [r["local_rank"] for r in two] == [0, 0]
    assert {d.split("/")[0] for d in two[0]["devices"]} == {"jetson0", "jetson1"}
    one = [json.loads((out / "one-host" / f"rank{r}.json").read_text()) for r in range(3)]
    assert [r["sum"] for r in one] == [6.0] * 3
    assert [r["local_rank"] for r in one] == [0, 1, 2] and {r["node_rank"] for r in one} == {0}
