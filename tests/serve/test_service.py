"""A service end to end on emulated ``mixed-lab``: real replica processes (the digits
classifier over HTTP) behind the router, a bounded load ramp from clients on 127.0.0.1, the
replicas growing with it, one of them SIGKILLed mid-ramp with no request failing, and the
service shrinking back once the load stops."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from accelnet.runtime.local.worker import free_port
from accelnet.runtime.sdk import LocalCluster
from accelnet.serve.spec import ServiceSpec

pytestmark = pytest.mark.slow

GOAL_MS = 1000.0  # generous: a loaded 2-core machine must meet it too
SPEC: dict[str, Any] = {
    "name": "digits",
    "run": f"{sys.executable} -m accelnet.workloads.digits_service --base-ms 20",
    # one compute thread per replica, as torchrun sets for its ranks: three replicas (torch
    # or BLAS), each spinning a thread per core, starved each other's start on 2 cores
    "env": {"OMP_NUM_THREADS": "1"},
    "resources": {"accelerators": {"any_of": ["H100-SXM", "L4", "T4"], "count": 1}},
    "replicas": {"min": 1, "max": 3},
    "goal": {"p95_ms": GOAL_MS, "target_inflight": 1},
    "scaling": {"up_s": 0.3, "down_s": 1.0, "window_s": 2.0},
}


def _port() -> int:
    port = free_port()
    assert port is not None
    return port


def wait_for(check: Callable[[], bool], what: str, limit: float = 90.0) -> None:
    end = time.monotonic() + limit
    while not check():
        assert time.monotonic() < end, f"gave up waiting for {what}"
        time.sleep(0.05)


class Load:
    """``clients`` threads, each sending ``budget`` requests one after another (a 429 is
    retried after its Retry-After, as a well-behaved client does), until :meth:`stop`."""

    def __init__(self, url: str, clients: int, budget: int) -> None:
        self.url, self.budget = url, budget
        self.stopped = threading.Event()
        self.codes: list[int] = []
        self.versions: list[tuple[float, str]] = []
        self.latencies: list[tuple[float, float]] = []  # (ended at, seconds)
        self.threads = [threading.Thread(target=self._client, args=(i,)) for i in range(clients)]

    def _client(self, i: int) -> None:
        with httpx.Client(timeout=60) as h:
            for k in range(self.budget):
                if self.stopped.is_set():
                    return
                key = uuid.uuid4().hex
                for _ in range(50):
                    t0 = time.monotonic()
                    r = h.get(f"{self.url}/predict", params={"index": i * 1000 + k},
                              headers={"Idempotency-Key": key})  # fmt: skip
                    if r.status_code != 429:
                        break
                    time.sleep(float(r.headers.get("retry-after", "1")))
                self.codes.append(r.status_code)
                if r.status_code == 200:
                    self.versions.append((time.monotonic(), r.json()["version"]))
                self.latencies.append((time.monotonic(), time.monotonic() - t0))

    def start(self) -> None:
        for t in self.threads:
            t.start()

    def join(self) -> None:
        for t in self.threads:
            t.join(300)

    def stop(self) -> None:
        """Send no more requests (those in flight end)."""
        self.stopped.set()

    def running(self) -> bool:
        return any(t.is_alive() for t in self.threads)


@pytest.mark.parametrize("classifier", ["logreg", "torch"])
def test_a_service_grows_with_its_load_survives_a_replica_kill_and_shrinks(
    tmp_path: Path, classifier: str
) -> None:
    spec = {**SPEC, "run": f"{SPEC['run']} --model {classifier}"}
    with LocalCluster("mixed-lab", workdir=tmp_path / "work") as cluster, \
            cluster.serve(spec) as svc:  # fmt: skip
        wait_for(lambda: svc.ready_count() == 1, "the first replica")
        (first,) = svc.router.replicas()
        assert first.model == "L4"  # least power per unit of speed before any measurement
        answer = httpx.get(f"{svc.url}/predict", params={"index": 0}, timeout=30).json()
        assert answer["classifier"] == classifier
        # the load goes on until replicas were added (however long they take to start on a
        # busy machine), one was killed, and 240 more requests were answered
        load = Load(svc.url, clients=6, budget=100_000)
        load.start()
        wait_for(lambda: svc.ready_count() >= 2, "a replica added for the load", 180)
        up_at = time.monotonic()
        # SIGKILL a ready replica's server mid-ramp: its requests go elsewhere
        victim = svc.router.replicas()[-1]
        pid = httpx.get(f"{victim.url}/pid", timeout=10).json()["pid"]
        os.kill(pid, signal.SIGKILL)
        killed_at = len(load.codes)
        wait_for(lambda: len(load.codes) >= killed_at + 240, "requests after the kill", 180)
        load.stop()
        load.join()
        assert not load.running()
        peak = max(int(e[2]) for e in svc.events if e[1] == "scale")
        gone = [e[2] for e in svc.events if e[1] == "gone"]
        wait_for(lambda: len(svc.replicas()) == 1, "the service to shrink once idle", 60)
        reps = svc.replicas()
        assert svc.ready_count() == 1
    assert load.codes.count(200) == len(load.codes) >= killed_at + 240, sorted(set(load.codes))
    assert peak == 3  # six clients, one in flight each wanted: as many as allowed
    assert any(victim.rid in g and "ended" in g for g in gone), gone
    # after the scale-up the goal held: the p95 of what ended once a second replica served
    late = sorted(s for at, s in load.latencies if at > up_at)
    assert late[int(0.95 * (len(late) - 1))] * 1e3 <= GOAL_MS
    assert [r["ready"] for r in reps.values()] == [True]  # the others' jobs have ended


def test_a_rolling_update_under_load_fails_no_request(tmp_path: Path) -> None:
    two = {**SPEC, "replicas": {"min": 2, "max": 2}}
    with LocalCluster("pcie-4xL4", workdir=tmp_path / "work") as cluster, \
            cluster.serve(two) as svc:  # fmt: skip
        wait_for(lambda: svc.ready_count() == 2, "two replicas")
        # the load goes on until 40 requests were answered more than a second after the
        # update finished (however long the update takes on a busy machine)
        load = Load(svc.url, clients=4, budget=100_000)
        load.start()
        wait_for(lambda: len(load.codes) >= 40, "the load to get going")
        v2 = ServiceSpec.model_validate({**two, "env": {**SPEC["env"], "SERVICE_VERSION": "2"}})
        assert svc.update(v2) == 2
        wait_for(lambda: not svc.updating(), "the update to finish")
        done_at = time.monotonic()
        wait_for(lambda: svc.ready_count() == 2, "two replicas of the new version")
        wait_for(lambda: sum(t > done_at + 1.0 for t, _ in list(load.versions)) >= 40,
                 "requests after the update", 180)  # fmt: skip
        load.stop()
        load.join()
        reps = svc.replicas()
        retired = [e[2] for e in svc.events if e[1] == "retire"]
    assert load.codes.count(200) == len(load.codes) >= 80, sorted(set(load.codes))
    assert len(retired) == 2  # both old replicas, one at a time
    assert {v for t, v in load.versions if t > done_at + 1.0} == {"2"}
    assert {v for _, v in load.versions} == {"1", "2"}
    assert len(reps) == 2 and all(r["ready"] for r in reps.values())


def test_a_service_allowed_to_scales_to_zero_and_the_first_request_waits_for_a_replica(
    tmp_path: Path,
) -> None:
    spec = {**SPEC, "replicas": {"min": 0, "max": 1},
            "scaling": {"up_s": 0.0, "down_s": 0.5, "idle_s": 1.0, "window_s": 1.0}}  # fmt: skip
    with LocalCluster("pcie-4xL4", workdir=tmp_path / "work") as cluster, \
            cluster.serve(spec) as svc:  # fmt: skip
        assert svc.replicas() == {}  # nothing runs before the first request
        first = httpx.get(f"{svc.url}/predict", params={"index": 1}, timeout=60)
        assert first.status_code == 200  # it waited in the router's queue for a replica
        asked = [e for e in svc.events if e[1] == "asked"]
        assert len(asked) == 1
        wait_for(lambda: svc.replicas() == {}, "the idle service to stop its replica", 60)
    assert [e[2] for e in svc.events if e[1] == "scale"][-1] == "0"


def test_replica_jobs_left_by_an_earlier_run_are_cancelled_and_names_are_one_per_tenant(
    tmp_path: Path,
) -> None:
    spec = {**SPEC, "replicas": {"min": 1, "max": 1}}
    with LocalCluster("pcie-4xL4", workdir=tmp_path / "work") as cluster:
        # what a crashed server leaves: a replica job of the service, with no router
        left = cluster.submit_spec(ServiceSpec.model_validate(spec).replica(0, None, _port()))
        other = cluster.submit_spec(ServiceSpec.model_validate(
            {**spec, "tenant": "someone-else"}).replica(0, None, _port()))  # fmt: skip
        with cluster.serve(spec) as svc:
            assert cluster.wait_for(left.id, 60).state.value == "cancelled"
            assert list(svc.replicas()) == ["digits.1"]  # numbered after the leftover
            assert not other.state.is_finished()  # another tenant's job of that name: kept
            with pytest.raises(ValueError, match="already"):
                cluster.serve(spec)
            assert cluster.service("digits") is svc and cluster.services() == [svc]
            elsewhere = cluster.serve({**spec, "tenant": "someone-else"})  # its own name space
            assert len(cluster.services()) == 2
            elsewhere.close()
        assert cluster.services() == []  # a closed service leaves the registry
        other.cancel()


def test_a_replica_that_fails_at_once_is_restarted_with_growing_waits(tmp_path: Path) -> None:
    spec = {"name": "broken", "run": "echo no model here >&2; exit 3",
            "resources": {"accelerators": "any:1"}, "replicas": {"min": 1, "max": 1}}  # fmt: skip
    with LocalCluster("pcie-4xL4", workdir=tmp_path / "work") as cluster, \
            cluster.serve(spec, tick_s=0.05) as svc:  # fmt: skip
        wait_for(lambda: sum(e[1] == "backoff" for e in svc.events) >= 3, "three back-offs", 60)
        asked_before = sum(e[1] == "asked" for e in svc.events)
        time.sleep(1.5)  # the 4th wait is 4 s: nothing new is asked meanwhile
        asked = [e for e in svc.events if e[1] == "asked"]
        assert len(asked) <= asked_before + 1, svc.events
        waits = [e[2] for e in svc.events if e[1] == "backoff"]
        assert "in 0.5 s" in waits[0] and "in 1 s" in waits[1] and "in 2 s" in waits[2]


def test_a_service_used_as_a_context_manager_starts_once(tmp_path: Path) -> None:
    with LocalCluster("pcie-4xL4", workdir=tmp_path / "work") as cluster:
        svc = cluster.serve({**SPEC, "replicas": {"min": 1, "max": 1}})
        url = svc.url
        with svc:  # started by serve(): entering it starts nothing more
            assert svc.url == url
            wait_for(lambda: svc.ready_count() == 1, "the replica")
            assert [e[1] for e in svc.events].count("asked") == 1
            assert not [e for e in svc.events if "earlier run" in e[2]]
        assert cluster.services() == []
