"""Device health and remediation with real worker processes: a device failing mid-job is
drained, its job requeued elsewhere (resuming from its checkpoint) and the device probed
back to READY; a device that keeps failing goes OFFLINE; killed and hung workers are
caught by their heartbeats; manual drain and undrain. No job is lost, none finishes twice."""

from __future__ import annotations

import json
import os
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import cloudpickle
import pytest

import accelnet
from accelnet.devices import DeviceState
from accelnet.devices.faults import Fault
from accelnet.devices.health import HealthChecks
from accelnet.devices.remediation import KindPolicy, PolicyError, RemediationPolicy
from accelnet.fabric import load_fabric
from accelnet.runtime.care.device_care import DeviceCare
from accelnet.runtime.clock import SystemClock
from accelnet.runtime.control.controller import Controller
from accelnet.runtime.control.store import Event, MemoryStore
from accelnet.runtime.local.backend import LocalBackend
from accelnet.runtime.sdk import LocalCluster
from accelnet.sched import JobSpec, JobState

FAST = RemediationPolicy(defaults=KindPolicy(backoff_s=0.0))
# the jobs below travel by value: a fresh worker need not import this module (and pytest)
cloudpickle.register_pickle_by_value(sys.modules[__name__])


def wait_until(pred: Callable[[], object], timeout: float = 30.0) -> None:
    end = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < end, "timed out"
        time.sleep(0.02)


def checkpointed(steps: int, step_s: float) -> dict[str, Any]:
    """A job that keeps its progress in its output folder and resumes from it."""
    from accelnet.runtime.local.handoff import output_dir

    ckpt = output_dir() / "ckpt.json"
    start = json.loads(ckpt.read_text())["done"] if ckpt.exists() else 0
    for i in range(start, steps):
        time.sleep(step_s)
        tmp = ckpt.with_suffix(".tmp")
        tmp.write_text(json.dumps({"done": i + 1}))
        os.replace(tmp, ckpt)
    with open(output_dir() / "finished", "a") as f:
        f.write(os.environ["ACCELNET_DEVICE"] + "\n")
    return {"resumed_from": start, "device": os.environ["ACCELNET_DEVICE"]}


def nap(seconds: float) -> str:
    time.sleep(seconds)
    return os.environ["ACCELNET_DEVICE"]


def add(a: int, b: int) -> int:
    return a + b


def device_events(events: list[Event], dev: str, prefix: str) -> list[str]:
    return [e.kind for e in events if e.job is None and e.kind.startswith(prefix)
            and e.detail.startswith((dev + " ", dev + ":"))]  # fmt: skip


def state_of(cluster: LocalCluster, dev: str) -> tuple[str, str]:
    row = next(r for r in cluster.devices() if r.device == dev)
    return row.state, row.phase


def assert_each_succeeded_once(events: list[Event], jobs: list[str]) -> None:
    done = Counter(e.job for e in events if e.kind == "job:succeeded")
    assert {j: done[j] for j in jobs} == dict.fromkeys(jobs, 1)


def test_a_device_failing_mid_job_drains_requeues_and_returns_to_ready(tmp_path: Path) -> None:
    with accelnet.local(fabric="pcie-4xL4", workdir=tmp_path, policy=FAST) as c:
        job = c.submit(checkpointed, 30, 0.03, max_retries=1, checkpointable=True)
        ckpt = job.output / "ckpt.json"
        wait_until(lambda: ckpt.exists() and json.loads(ckpt.read_text())["done"] >= 3)
        rec = job.record
        assert rec.placement is not None
        dev = rec.placement.devices[0]
        assert c.inject(device=dev, kind="fail", note="ECC storm").ok
        result = job.result(timeout=60)
        others = [c.submit(add, i, 1) for i in range(4)]
        assert [o.result(timeout=60) for o in others] == [1, 2, 3, 4]
        wait_until(lambda: state_of(c, dev) == ("ready", "healthy"))
        events = c.events()
        moved = job.events()
        recoveries = c.recoveries()
    # the job resumed from its checkpoint on another device and finished once
    assert result["device"] != dev and result["resumed_from"] >= 3
    assert (job.output / "finished").read_text().split() == [result["device"]]
    final = job.record
    assert final.state is JobState.SUCCEEDED and final.attempts == 2 and final.failures == 1
    kinds = [e.kind for e in moved]
    assert kinds.index("job:moved") < kinds.index("job:admitted", 2) < kinds.index("job:succeeded")
    requeued = [e.detail for e in moved if e.kind == "job:admitted"][-1]
    assert requeued.startswith(f"requeued (retry 1 of 1): device {dev} failed:")
    assert "injected fail #1: ECC storm" in requeued
    # every step of the device's remediation is an event with its cause
    assert device_events(events, dev, "remedy:") == [
        "remedy:fail", "remedy:reset", "remedy:probe", "remedy:ready"]  # fmt: skip
    states = device_events(events, dev, "device:")
    states = states[states.index("device:unhealthy") :]
    assert [s for s in states if s != "device:unhealthy"][:2] == [
        "device:refreshing", "device:ready"]  # fmt: skip
    assert "probe:pass" in device_events(events, dev, "probe:")
    assert_each_succeeded_once(events, [job.id, *(o.id for o in others)])
    [rec_time] = [r for r in recoveries if r.job == job.id]
    assert rec_time.elsewhere and rec_time.fault == "fail" and rec_time.seconds > 0


def test_a_device_that_keeps_failing_goes_offline_until_an_operator_resets_it(
    tmp_path: Path,
) -> None:
    dev = "l4box/gpu3"
    probe_only = RemediationPolicy(defaults=KindPolicy(on_fail=("drain", "requeue", "probe"),
                                                       backoff_s=0.0))  # fmt: skip
    with accelnet.local(fabric="pcie-4xL4", workdir=tmp_path, policy=probe_only) as c:
        assert c.inject(device=dev, kind="fail", for_s=600).ok
        jobs = [c.submit(nap, 0.05, name=f"j{i}") for i in range(8)]
        ran_on = [j.result(timeout=60) for j in jobs]
        wait_until(lambda: state_of(c, dev) == ("offline", "offline"))
        row = next(r for r in c.devices() if r.device == dev)
        assert row.failures == 3 and row.health.value == "fail"
        assert any(f.check == "injected" for f in row.findings)
        refused = c.undrain("l4box/gpu0")
        assert not refused.ok and "not drained" in refused.detail
        assert c.clear_faults(dev).ok
        back = c.reset_device(dev)
        assert back.ok and back.detail.startswith("healthy: probe passed"), back
        gang = c.submit(nap, 0.0, accelerators="L4:4")  # needs the device back
        assert dev in gang.result(timeout=60)
        events = c.events()
    assert dev not in ran_on
    assert device_events(events, dev, "remedy:") == [
        "remedy:fail", "remedy:probe",  # failure 1, its probe fails: 2
        "remedy:fail", "remedy:probe",  # backoff 0, the probe fails again: 3
        "remedy:offline",
        "remedy:reset", "remedy:probe", "remedy:ready",  # the operator's reset
    ]  # fmt: skip
    offline = next(e.detail for e in events if e.kind == "remedy:offline")
    assert "failure 3 of 3 within 3600 s" in offline
    assert_each_succeeded_once(events, [j.id for j in [*jobs, gang]])


def test_a_killed_worker_is_caught_by_its_heartbeat_and_replaced(tmp_path: Path) -> None:
    with accelnet.local(fabric="pcie-4xL4", workdir=tmp_path, policy=FAST) as c:
        # retried at once (no backoff): while its device is being checked, so elsewhere
        job = c.submit(nap, 0.6, max_retries=1, retry={"backoff_s": 0})
        wait_until(lambda: job.state is JobState.RUNNING)
        rec = job.record
        assert rec.placement is not None
        dev = rec.placement.devices[0]
        c.inject(device=dev, kind="kill")
        assert job.result(timeout=60) != dev
        wait_until(lambda: state_of(c, dev) == ("ready", "healthy"))
        pid = c.backend.worker_pid(dev)
        assert pid is not None  # its probe ran in a fresh worker, which is idle now
        c.inject(device=dev, kind="kill")  # an idle worker dies: nobody else would notice
        wait_until(lambda: len(device_events(c.events(), dev, "remedy:ready")) == 2)
        new_pid = c.backend.worker_pid(dev)
        events = c.events()
    assert new_pid not in (None, pid)
    lost = [e.detail for e in events if e.kind == "health:fail" and e.detail.startswith(dev)]
    assert len(lost) == 2 and all("heartbeat fail: worker pid" in d for d in lost)
    assert all("killed by SIGKILL" in d for d in lost)
    task = [e.detail for e in events if e.job == job.id and e.kind == "task:lost"]
    assert len(task) == 1 and "killed by SIGKILL" in task[0]
    assert_each_succeeded_once(events, [job.id])


def test_a_hung_worker_misses_its_heartbeats_and_is_killed(tmp_path: Path) -> None:
    fabric = load_fabric("pcie-4xL4")
    clock = SystemClock()
    store = MemoryStore()
    backend = LocalBackend(fabric.devices, tmp_path, clock, emulated=True, heartbeat_s=0.1)
    ctl = Controller(fabric, store, backend, clock, tmp_path)
    checks = HealthChecks(heartbeat_timeout_s=0.6)
    care = DeviceCare(ctl, RemediationPolicy(defaults=KindPolicy(backoff_s=0, checks=checks)))
    try:
        spec = JobSpec(name="long", run="sleep 0.5; echo $ACCELNET_DEVICE", max_retries=1)
        jid = ctl.submit(spec)

        def step_until(pred: Callable[[], bool]) -> None:
            end = time.monotonic() + 30
            while not pred():
                assert time.monotonic() < end
                ctl.step(0.02)

        step_until(lambda: store.get(jid).state is JobState.RUNNING)
        placement = store.get(jid).placement
        assert placement is not None
        dev = placement.devices[0]
        care.inject(Fault(device=dev, kind="hang"))
        step_until(lambda: store.get(jid).state in (JobState.SUCCEEDED, JobState.FAILED))
        step_until(lambda: ctl.device_states()[dev].value == "ready")
    finally:
        care.close()
        backend.close()
    rec = store.get(jid)
    assert rec.state is JobState.SUCCEEDED and rec.placement is not None
    assert dev not in rec.placement.devices
    silent = [e.detail for e in store.events() if e.kind == "health:fail"]
    assert silent and silent[0].startswith(f"{dev} heartbeat fail: no heartbeat for")
    log = (tmp_path / "logs" / f"{jid}.2.0.out").read_text().strip()
    assert log == rec.placement.devices[0]


def test_manual_drain_lets_the_job_finish_and_undrain_probes_first(tmp_path: Path) -> None:
    short = RemediationPolicy(defaults=KindPolicy(stress_s=0.3))  # level-2 probes
    with accelnet.local(fabric="pcie-4xL4", workdir=tmp_path, policy=short) as c:
        job = c.submit(nap, 0.5)
        wait_until(lambda: job.state is JobState.RUNNING)
        rec = job.record
        assert rec.placement is not None
        dev = rec.placement.devices[0]
        drained = c.drain(dev, reason="maintenance")
        assert drained.ok and f"1 job(s) finish first: {job.id}" in drained.detail
        assert state_of(c, dev) == ("draining", "held")
        others = [c.submit(nap, 0.0) for _ in range(6)]
        assert dev not in [o.result(timeout=60) for o in others]
        assert job.result(timeout=60) == dev and job.record.attempts == 1  # not moved
        wait_until(lambda: state_of(c, dev) == ("drained", "held"))
        back = c.undrain(dev)
        assert back.ok and "probe passed" in back.detail
        assert state_of(c, dev) == ("ready", "healthy")
        assert dev in c.submit(nap, 0.0, accelerators="L4:4").result(timeout=60)
        probed = c.probe(dev, level=2)
        assert probed.ok and {f.check for f in probed.findings} >= {"memory", "compute", "stress"}
        events = c.events()
    assert device_events(events, dev, "remedy:") == [
        "remedy:drain", "remedy:reset", "remedy:probe", "remedy:ready",  # drain, undrain
        "remedy:probe", "remedy:ready",  # the operator's probe
    ]  # fmt: skip


def test_a_bad_policy_file_stops_the_cluster_from_starting(tmp_path: Path) -> None:
    bad = tmp_path / "policy.yaml"
    bad.write_text("kinds:\n  gpu:\n    on_fail: [reset]\n")
    with pytest.raises(PolicyError, match=r"policy.yaml:3: kinds.gpu.on_fail"):
        accelnet.local(fabric="pcie-4xL4", workdir=tmp_path, policy=bad)


def test_a_restart_keeps_drains_and_offline_devices_and_repairs_unhealthy_ones(
    tmp_path: Path,
) -> None:
    fabric = load_fabric("pcie-4xL4")
    store = MemoryStore()
    before = {"l4box/gpu0": DeviceState.DRAINING, "l4box/gpu1": DeviceState.OFFLINE,
              "l4box/gpu2": DeviceState.UNHEALTHY}  # fmt: skip
    for dev, state in before.items():
        store.set_device(dev, state, 0.0, "before the restart")
    clock = SystemClock()
    backend = LocalBackend(fabric.devices, tmp_path, clock, emulated=True)
    ctl = Controller(fabric, store, backend, clock, tmp_path)
    care = DeviceCare(ctl, FAST)
    try:
        phases = {d: care.machine.phase(d).value for d in fabric.devices}
        assert phases == {"l4box/gpu0": "held", "l4box/gpu1": "offline",
                          "l4box/gpu2": "probing", "l4box/gpu3": "healthy"}  # fmt: skip
        end = time.monotonic() + 30
        while ctl.device_states()["l4box/gpu2"] is not DeviceState.READY:
            assert time.monotonic() < end
            ctl.step(0.02)
        states = {d: s.value for d, s in ctl.device_states().items()}
    finally:
        care.close()
        backend.close()
    assert states == {"l4box/gpu0": "drained", "l4box/gpu1": "offline",
                      "l4box/gpu2": "ready", "l4box/gpu3": "ready"}  # fmt: skip
