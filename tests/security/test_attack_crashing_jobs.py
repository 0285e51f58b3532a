"""A job may crash itself in any way; none of that may take a device offline, fail another
tenant's job or stop the server (issue 21, item 3).

Against a real ``accelnet serve`` in its default configuration (and, where the server has
it, with ``--trusted-tasks``: tasks then run in the device's worker process itself, the
mode in which a crashing task takes its worker with it): a NUL byte in ``run`` or ``env``
is refused at submit (422 naming the key); a job that ends its own process (``os._exit``,
``os.abort``, SIGKILL of itself, a segfault, ``kill -9 $PPID`` from a command) fails, while
another tenant's job holding the other half of the same device succeeds, and the device
stays healthy with no failure counted. Below the server, the local backend's worker fails a
task it cannot start (``Popen``'s ValueError on a NUL byte) and serves the next one.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import cloudpickle
import httpx
import pytest

import accelnet
from accelnet.api.server import ServeOptions
from accelnet.fabric import load_fabric
from accelnet.runtime.backend import TaskEvent, TaskEventKind, TaskSpec
from accelnet.runtime.clock import ManualClock
from accelnet.runtime.local.backend import LocalBackend
from accelnet.sched import JobState
from tests.api.conftest import Server, spawn, wait_state

V1 = "/api/v1"
WAIT_S = 60.0
DONE = {"succeeded", "failed", "cancelled"}
# a server that can run tasks as its own user, in the worker (the flag of issue 21's isolation)
MODES = ["default"] + (
    ["trusted"] if "trusted_tasks" in {f.name for f in dataclasses.fields(ServeOptions)} else []
)
# each crash, and what its job's error says (the worker's end, or its own process's)
CRASHES: dict[str, tuple[dict[str, Any], tuple[str, ...]]] = {
    "os._exit": ({"entrypoint": {"function": "os:_exit", "args": [3]}}, ("code 3",)),
    "os.abort": ({"entrypoint": {"function": "os:abort"}}, ("SIGABRT",)),
    "sigkill-self": (
        {"entrypoint": {"function": "signal:raise_signal", "args": [9]}},
        ("SIGKILL",),
    ),
    # (faulthandler is built in: a tenant's user may not read the interpreter's own files)
    "segfault": ({"entrypoint": {"function": "faulthandler:_sigsegv"}}, ("SIGSEGV",)),
    # a command's parent is the worker: killed with it, or (another user's) refused
    "kill-parent": ({"run": "kill -9 $PPID; sleep 5; exit 3"}, ("SIGKILL", "code 3")),
}


@pytest.fixture(scope="module", params=MODES)
def srv(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Server]:
    """``accelnet serve`` on the emulated mixed-lab fabric (4 T4s), as started by default."""
    tmp = tmp_path_factory.mktemp(f"crash-{request.param}")
    extra = ("--trusted-tasks",) if request.param == "trusted" else ()
    server = spawn(tmp, "--fabric", "mixed-lab", "--rate", "1000", "--burst", "1000", *extra)
    yield server
    server.stop()


@pytest.fixture
def go() -> Iterator[Path]:
    """A file the test creates when a waiting job may end (in a folder every user may
    read: tasks may run as their tenants' users)."""
    folder = Path(tempfile.mkdtemp(prefix="accelnet-go-"))
    folder.chmod(0o755)
    yield folder / "go"
    shutil.rmtree(folder, ignore_errors=True)


def submit(client: httpx.Client, body: dict[str, Any]) -> str:
    r = client.post(f"{V1}/jobs", json=body)
    assert r.status_code == 201, r.text
    return str(r.json()["jobs"][0]["id"])


def refused(client: httpx.Client, body: dict[str, Any]) -> dict[str, Any]:
    r = client.post(f"{V1}/jobs", json=body)
    assert r.status_code == 422, r.text
    error: dict[str, Any] = r.json()["error"]
    assert error["code"] == "invalid"
    return error


def test_nul_bytes_and_oversized_env_are_refused_at_submit(srv: Server) -> None:
    with srv.client("alice") as alice:
        before = alice.get(f"{V1}/jobs").json()["jobs"]
        err = refused(alice, {"name": "nul-run", "run": "echo a\x00b"})
        assert err["field"] == "run" and "NUL" in err["message"], err
        err = refused(alice, {"name": "nul-env", "run": "true", "env": {"X": "a\x00"}})
        assert err["field"] == "env.X" and "NUL" in err["message"], err
        err = refused(alice, {"name": "nul-key", "run": "true", "env": {"X\x00Y": "a"}})
        assert str(err["field"]).startswith("env.X") and "not an environment variable" in str(
            err["message"]
        ), err
        err = refused(alice, {"name": "big-env", "run": "true", "env": {"BIG": "x" * 900_000}})
        assert err["field"] == "env.BIG" and "32,768" in err["message"], err
        err = refused(alice, {"name": "blank", "run": "   "})
        assert err["field"] == "run" and "empty command" in err["message"], err
        err = refused(alice, {"name": "own", "run": "true", "env": {"ACCELNET_JOB": "x"}})
        assert err["field"] == "env.ACCELNET_JOB", err
        assert alice.get(f"{V1}/jobs").json()["jobs"] == before  # nothing was stored


def test_numbers_and_flags_are_not_coerced_at_the_api(srv: Server) -> None:
    with srv.client("alice") as alice, srv.client("admin") as admin:
        for value, said in (("10", "'10': text, not a whole number"), (True, "True: true/false")):
            err = refused(alice, {"name": "p", "run": "true", "priority": value})
            assert err["field"] == "priority" and said in err["message"], err
        err = refused(alice, {"name": "c", "run": "true", "checkpointable": "yes"})
        assert err["field"] == "checkpointable" and "not true or false" in err["message"], err
        bodies = (
            ({"weight": True}, "weight = True: true/false, not a number"),
            ({"weight": "2"}, "weight = '2': text, not a number"),
            ({"quota": {"T4": True}}, "quota.T4 = True: true/false, not a number"),
        )
        for body, said in bodies:
            r = admin.put(f"{V1}/tenants/strict", json=body)
            assert r.status_code == 422, r.text
            err = r.json()["error"]
            assert str(err["field"]).startswith(next(iter(body))) and said in err["message"], err
        assert admin.put(f"{V1}/tenants/strict", json={"weight": 2}).json()["weight"] == 2.0


def devices_of(job: dict[str, object]) -> list[str]:
    """The devices a job (as the API shows it) runs on."""
    devices = job["devices"]
    assert isinstance(devices, list)
    return [str(d) for d in devices]


def _hold_until(path: Path) -> str:
    """A command that ends (0) once ``path`` exists, or fails (7) after about 60 s."""
    return f'for i in $(seq 1200); do [ -e "{path}" ] && exit 0; sleep 0.05; done; exit 7'


def _settle(client: httpx.Client, jobs: list[str]) -> None:
    """Cancel what is left of ``jobs`` (a failed test leaves no device taken)."""
    for jid in jobs:
        if client.get(f"{V1}/jobs/{jid}").json().get("state") not in DONE:
            client.post(f"{V1}/jobs/{jid}/cancel")


@pytest.mark.parametrize("crash", list(CRASHES))
def test_a_job_that_crashes_itself_fails_alone(srv: Server, go: Path, crash: str) -> None:
    with srv.client("alice") as alice, srv.client("bob") as bob, srv.client("admin") as admin:
        since = admin.get(f"{V1}/events", params={"limit": 1}).json()["next"]
        last = admin.get(f"{V1}/events", params={"since": since, "limit": 5000}).json()["next"]
        # bob (tenant speech) holds half of a T4 until the test says go
        half = {"accelerators": "T4:0.5"}
        mate = submit(bob, {"name": f"mate-{crash}", "run": _hold_until(go), "resources": half})
        started: list[tuple[httpx.Client, str]] = [(bob, mate)]
        try:
            (dev,) = devices_of(wait_state(bob, mate, {"running"}, timeout=WAIT_S))
            # alice (tenant vision) takes the other half of that T4 and crashes, twice
            program, said = CRASHES[crash]
            body = {"name": f"crash-{crash}", "resources": half, "max_retries": 1, **program}
            job = wait_state(alice, submit(alice, body), DONE, timeout=WAIT_S)
            assert job["state"] == "failed" and job["failures"] == 2, job
            assert any(s in str(job["error"]) for s in said), job  # it did crash
            assert job["devices"] == [dev], "the crashing job shared the mate's device"
            assert bob.get(f"{V1}/jobs/{mate}").json()["state"] == "running"
            go.touch()
            mate_job = wait_state(bob, mate, DONE, timeout=WAIT_S)
            assert mate_job["state"] == "succeeded", mate_job
            end = time.monotonic() + WAIT_S
            while (device := admin.get(f"{V1}/devices/{dev}").json())["state"] != "ready":
                assert time.monotonic() < end, device
                time.sleep(0.1)
            assert (device["phase"], device["failures"]) == ("healthy", 0), device
            events = admin.get(f"{V1}/events", params={"since": last, "limit": 5000}).json()
            bad = [e for e in events["events"]
                   if e["kind"] in ("health:fail", "device:offline", "device:unhealthy")
                   or e["kind"].startswith("remedy:")]  # fmt: skip
            assert not bad, bad
            # the device still runs work: four whole-T4 jobs at once hold every T4, it too
            again = go.with_name("again")
            whole = {"run": _hold_until(again), "resources": {"accelerators": "T4:1"}}
            for i, c in enumerate((alice, bob, alice, bob)):
                started.append((c, submit(c, {"name": f"after-{crash}-{i}", **whole})))
            held = {devices_of(wait_state(c, jid, {"running"}, timeout=WAIT_S))[0]
                    for c, jid in started[1:]}  # fmt: skip
            assert dev in held and len(held) == 4, held
            again.touch()
            for c, jid in started[1:]:
                assert wait_state(c, jid, DONE, timeout=WAIT_S)["state"] == "succeeded"
            assert admin.get("/healthz").json()["status"] == "ok"
        finally:
            for c, jid in started:
                _settle(c, [jid])
    assert srv.proc.poll() is None


# -- below the server: the local backend's worker ------------------------------------------


def _until_done(b: LocalBackend, task_id: str) -> TaskEvent:
    end = time.monotonic() + WAIT_S
    while time.monotonic() < end:
        for ev in b.poll(0.5):
            if ev.task_id == task_id and ev.kind is not TaskEventKind.STARTED:
                return ev
    raise AssertionError(f"task {task_id} did not end in {WAIT_S} s")


def test_the_worker_fails_a_task_it_cannot_start_and_serves_the_next(tmp_path: Path) -> None:
    fabric = load_fabric("pcie-4xL4")
    dev = sorted(fabric.devices)[0]
    bad: dict[str, dict[str, Any]] = {
        "nul-run": {"command": "echo a\x00b"},
        "nul-env": {"command": "true", "env": {"X": "a\x00"}},
        "nul-key": {"command": "true", "env": {"X\x00": "a"}},
        "surrogate": {"command": "echo \ud800"},
    }
    with LocalBackend(fabric.devices, tmp_path / "work", ManualClock(0.0), emulated=True) as b:
        for tid, fields in bad.items():
            b.launch(TaskSpec(tid, "j", 0, 1, dev, (dev,), log_dir=str(tmp_path / "logs"),
                              **fields))  # fmt: skip
            ev = _until_done(b, tid)
            assert ev.kind is TaskEventKind.FAILED, ev
            assert f"cannot start the task {tid}" in (ev.error or ""), ev
        pid = b.worker_pid(dev)
        b.launch(TaskSpec("fine", "j", 0, 1, dev, (dev,), command="echo ok",
                          log_dir=str(tmp_path / "logs")))  # fmt: skip
        assert _until_done(b, "fine").kind is TaskEventKind.SUCCEEDED
        assert b.worker_pid(dev) == pid is not None  # the same worker served them all
        assert b.take_losses() == []
    assert not os.path.exists(tmp_path / "work" / "payloads")


def test_a_worker_that_dies_running_a_task_is_blamed_on_that_task(tmp_path: Path) -> None:
    fabric = load_fabric("pcie-4xL4")
    dev = sorted(fabric.devices)[0]
    logs = str(tmp_path / "logs")
    with LocalBackend(fabric.devices, tmp_path / "work", ManualClock(0.0), emulated=True) as b:
        payload = cloudpickle.dumps((os._exit, (3,), {}))
        b.launch(TaskSpec("exit", "j", 0, 1, dev, (dev,), payload=payload, log_dir=logs))
        ev = _until_done(b, "exit")
        assert ev.kind is TaskEventKind.LOST and "exited with code 3" in (ev.error or ""), ev
        (loss,) = b.take_losses()
        assert (loss.device, loss.task, loss.how) == (dev, "exit", "exited with code 3")
        b.launch(TaskSpec("after", "j", 0, 1, dev, (dev,), command="true", log_dir=logs))
        assert _until_done(b, "after").kind is TaskEventKind.SUCCEEDED  # a fresh worker
        pid = b.worker_pid(dev)
        assert pid is not None
        os.kill(pid, 9)  # an idle worker that dies: the device's, not a task's
        end = time.monotonic() + WAIT_S
        while not (losses := b.take_losses()):
            assert time.monotonic() < end
            b.poll(0.2)
        assert [(x.device, x.task) for x in losses] == [(dev, None)]


def hold(path: str) -> str:
    """A job that holds its device until ``path`` exists (about 60 s at most)."""
    end = time.monotonic() + WAIT_S
    while not os.path.exists(path):
        assert time.monotonic() < end, "never told to go"
        time.sleep(0.05)
    return os.environ["ACCELNET_DEVICE"]


def test_in_process_three_crashes_leave_the_device_and_its_other_job_alone(
    tmp_path: Path,
) -> None:
    # the SDK's cluster runs payloads in the device's worker: each crash takes the worker
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    go = tmp_path / "go"
    with accelnet.local(fabric="pcie-4xL4", workdir=tmp_path / "work") as c:
        mate = c.submit(hold, str(go), accelerators="L4:0.5", tenant="speech")
        end = time.monotonic() + WAIT_S
        while mate.state is not JobState.RUNNING:
            assert time.monotonic() < end, mate.state
            time.sleep(0.05)
        placement = mate.record.placement
        assert placement is not None
        dev = placement.devices[0]
        crash = c.submit(os._exit, 3, accelerators="L4:0.5", tenant="vision", max_retries=2)
        with pytest.raises(Exception, match="exited with code 3"):
            crash.result(timeout=WAIT_S)
        crashed = crash.record
        assert crashed.failures == 3 and crashed.placement is not None
        assert crashed.placement.devices == (dev,)  # beside the mate, every time
        go.touch()
        assert mate.result(timeout=WAIT_S) == dev
        row = next(r for r in c.devices() if r.device == dev)
        events = c.events()
    assert (row.phase, row.failures) == ("healthy", 0), row
    lost = [e.detail for e in events if e.kind == "worker:lost"]
    assert len(lost) == 3 and all(d.startswith(f"{dev}: worker pid") for d in lost), lost
    assert not [e for e in events if e.kind.startswith(("health:fail", "remedy:"))]
