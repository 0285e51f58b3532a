"""CPU and memory requests on real worker processes: CPU-only jobs run on their host with
no accelerator in sight, tasks that ask for cores are pinned to that many (Linux CPU
affinity), and a host's declared cores bound what runs there at once."""

from __future__ import annotations

import itertools
import os
import sys
from pathlib import Path

import pytest

from accelnet.runtime.control.controller import JobRejectedError
from accelnet.runtime.local.cores import CoreBook
from accelnet.runtime.sdk import LocalCluster
from accelnet.sched import JobSpec, JobState

FABRIC = """\
name: cpu-pair
switches:
  - {name: leaf0, kind: leaf}
hosts:
  - {name: "node{i}", count: 2, devices: "2xL4", cpus: 4, memory_gb: 16, nics: "1xEth-100G",
     network: leaf0}
"""

# what a task sees: its CPU affinity, the accelerators it was given, its OpenMP threads
PROBE = (
    f'{sys.executable} -c "import os; print(len(os.sched_getaffinity(0)), '
    "repr(os.environ.get('CUDA_VISIBLE_DEVICES')), repr(os.environ.get('ACCELNET_DEVICE')), "
    "os.environ.get('OMP_NUM_THREADS'))\" > {out}"
)

needs_affinity = pytest.mark.skipif(
    not hasattr(os, "sched_setaffinity"), reason="no CPU affinity on this OS"
)


def spec(**fields: object) -> JobSpec:
    return JobSpec.model_validate(fields)


@pytest.fixture
def fabric(tmp_path: Path) -> str:
    path = tmp_path / "cpu-pair.yaml"
    path.write_text(FABRIC)
    return str(path)


@needs_affinity
def test_a_cpu_only_job_runs_on_its_host_pinned_and_without_accelerators(
    fabric: str, tmp_path: Path
) -> None:
    out = tmp_path / "seen"
    with LocalCluster(fabric, workdir=tmp_path / "work") as cluster:
        job = cluster.submit_spec(
            spec(name="etl", run=PROBE.format(out=out), resources={"cpus": 1, "memory_gb": 2})
        )
        rec = job.wait(120)
        assert rec.state is JobState.SUCCEEDED, rec.error
        assert rec.placement is not None and rec.placement.devices == ()
        ((host, cpus, gb),) = rec.placement.hosts
        assert host in {"node0", "node1"} and (cpus, gb) == (1.0, 2.0)
        placed = [e.detail for e in cluster.store.events(rec.id) if e.kind == "job:starting"]
        assert placed == [f"placed on host {host} (1 CPUs, 2 GB)"]
    cores, visible, device, threads = out.read_text().split()
    assert int(cores) == 1  # pinned to the one core it asked for
    assert visible == device == "''"  # no accelerator, though it ran beside an L4's worker
    assert threads == "1"  # OpenMP runs a thread per core it asked for


@needs_affinity
def test_a_gpu_job_asking_for_cores_is_pinned_to_that_many(fabric: str, tmp_path: Path) -> None:
    machine = len(os.sched_getaffinity(0))
    out = tmp_path / "seen"
    with LocalCluster(fabric, workdir=tmp_path / "work") as cluster:
        job = cluster.submit_spec(
            spec(name="g", run=PROBE.format(out=out), resources={"accelerators": "L4:1", "cpus": 2})
        )
        rec = job.wait(120)
        assert rec.state is JobState.SUCCEEDED, rec.error
        assert rec.placement is not None and rec.placement.hosts[0][1:] == (2.0, 0.0)
    cores, _, device, threads = out.read_text().split()
    assert int(cores) == min(2, machine)
    assert device.strip("'").startswith("node")  # its L4
    assert threads == cores  # as many OpenMP threads as cores


def test_openmp_threads_follow_the_cores_asked_for_unless_the_job_sets_them(
    fabric: str, tmp_path: Path
) -> None:
    """A task that asked for no cores gets one OpenMP thread, not one per core of the
    machine (Ray's and torchrun's default), whatever the backend's own environment says;
    a fraction of a core rounds down; a job's own env wins."""
    machine = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 4
    cases = {
        "none": ({"accelerators": "L4:1"}, {}, "1"),
        "half": ({"accelerators": "L4:1", "cpus": 2.5}, {}, str(min(2, machine))),
        # a host that declares more cores than this machine has: no more threads than
        # the cores the task is pinned to
        "all": ({"cpus": 4}, {}, str(min(4, machine))),
        "own": ({"accelerators": "L4:1", "cpus": 2}, {"OMP_NUM_THREADS": "3"}, "3"),
    }
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("OMP_NUM_THREADS", "7")  # the server's own: not the tasks'
        with LocalCluster(fabric, workdir=tmp_path / "work") as cluster:
            jobs = [
                cluster.submit_spec(
                    spec(name=name, run=PROBE.format(out=tmp_path / name), resources=res, env=env)
                )
                for name, (res, env, _) in cases.items()
            ]
            for job in jobs:
                rec = job.wait(120)
                assert rec.state is JobState.SUCCEEDED, rec.error
    for name, (_, _, want) in cases.items():
        assert (tmp_path / name).read_text().split()[3] == want, name


def test_a_task_launched_per_host_shares_its_cores_among_its_ranks() -> None:
    from accelnet.runtime.backend import TaskSpec
    from accelnet.runtime.local.taskenv import omp_threads, task_env_delta

    def task(cpus: float, local: int) -> TaskSpec:
        devices = tuple(f"h/gpu{i}" for i in range(local))
        return TaskSpec("t", "j", 0, 1, "h/gpu0", devices, cpus=cpus,
                        local_devices=devices if local > 1 else ())  # fmt: skip

    assert [omp_threads(task(c, n)) for c, n in [(8, 4), (8, 1), (6, 4), (0, 4), (0.5, 1)]] == [
        2, 8, 1, 1, 1,
    ]  # fmt: skip
    assert task_env_delta(task(8, 4))["OMP_NUM_THREADS"] == "2"
    # pinned to fewer cores than asked for (a fabric declaring more than the machine has)
    assert [omp_threads(task(8, 1), 2), omp_threads(task(8, 2), 2), omp_threads(task(2, 1), 4)] == [
        2, 1, 2,
    ]  # fmt: skip


def test_a_hosts_cores_bound_what_runs_there_at_once(fabric: str, tmp_path: Path) -> None:
    # four jobs of 3 cores on two hosts of 4 cores: at most one per host at a time
    with LocalCluster(fabric, workdir=tmp_path / "work") as cluster:
        jobs = [
            cluster.submit_spec(spec(name=f"c{i}", run="sleep 0.2", resources={"cpus": 3}))
            for i in range(4)
        ]
        recs = [j.wait(120) for j in jobs]
        assert all(r.state is JobState.SUCCEEDED for r in recs), [r.error for r in recs]
        spans: dict[str, list[tuple[float, float]]] = {}
        for r in recs:
            assert r.placement is not None and r.started_at is not None
            assert r.finished_at is not None
            spans.setdefault(r.placement.hosts[0][0], []).append((r.started_at, r.finished_at))
    for host, runs in spans.items():
        runs.sort()
        for (_, end), (start, _) in itertools.pairwise(runs):
            assert start >= end, (host, runs)  # never two 3-core jobs on one 4-core host


def test_a_cpu_only_job_larger_than_any_host_is_refused_at_submit(
    fabric: str, tmp_path: Path
) -> None:
    with LocalCluster(fabric, workdir=tmp_path / "work") as cluster:
        with pytest.raises(JobRejectedError) as caught:
            cluster.submit_spec(spec(name="big", run="true", resources={"cpus": 8}))
        assert cluster.store.jobs() == []  # nothing kept of it
    message = str(caught.value)
    assert "resources.cpus" in message
    assert "needs 8 CPU cores per rank; the largest host has 4" in message


def test_the_core_book_lends_distinct_cores_then_shares_the_least_used() -> None:
    book = CoreBook({0, 1, 2, 3})
    assert book.lend("a", 2) == (0, 1)
    assert book.lend("b", 1.5) == (2, 3)  # 1.5 cores: two of them
    assert book.lend("c", 1) == (0,)  # none free: the least used
    book.give_back("b")
    assert book.lend("d", 2) == (2, 3)
    assert book.lend("e", 9) == (0, 1, 2, 3)  # never more than there are
    assert CoreBook(set()).lend("x", 2) == ()  # nothing to lend: not pinned


def test_a_cpu_only_task_beside_a_gpu_does_not_keep_it_from_being_refreshed(
    tmp_path: Path,
) -> None:
    one = tmp_path / "one.yaml"
    one.write_text(
        "name: one\nswitches: [{name: leaf0, kind: leaf}]\n"
        "hosts: [{name: node0, devices: 1xL4, cpus: 4, nics: 1xEth-100G, network: leaf0}]\n"
    )
    gate = tmp_path / "gate"
    with LocalCluster(str(one), workdir=tmp_path / "work") as cluster:
        # the CPU-only job waits for the GPU job to end, so it runs across its refresh
        etl = cluster.submit_spec(
            spec(name="etl", resources={"cpus": 1},
                 run=f"while [ ! -e {gate} ]; do sleep 0.05; done; sleep 0.5")
        )  # fmt: skip
        gpu = cluster.submit_spec(
            spec(name="gpu", run=f"touch {gate}", resources={"accelerators": "L4:1"})
        )
        assert gpu.wait(120).state is JobState.SUCCEEDED
        rec = etl.wait(120)
        assert rec.state is JobState.SUCCEEDED, rec.error
        again = cluster.submit_spec(
            spec(name="again", run="true", resources={"accelerators": "L4:1"})
        )
        assert again.wait(120).state is JobState.SUCCEEDED  # the L4 came back READY
        states = cluster.store.devices()
        events = [e for e in cluster.store.events(None) if e.kind.startswith("device:")]
    assert states["node0/gpu0"].value == "ready", states
    # it used to fail the GPU's refresh ("running task etl...") and mark it unhealthy
    assert not [e for e in events if e.kind == "device:unhealthy"], events
