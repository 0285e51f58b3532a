"""Fault schedules (pure), fault plans from YAML, worker signalling on a real process, the
probes (run here, in-process) and the NVIDIA GPU reset (through a fake nvidia-smi)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import psutil
import pytest

from accelnet.devices.faults import Fault, FaultPlanError, FaultSchedule, WorkerFaults, load_faults
from accelnet.devices.health import Status, worst
from accelnet.devices.probes import judge, no_answer, run_probe
from accelnet.devices.reset import NvidiaSmiReset
from accelnet.fabric import load_fabric
from accelnet.fabric.model import DeviceKind


def test_the_schedule_begins_ends_and_clears_faults() -> None:
    sched = FaultSchedule(
        [Fault(device="a", kind="fail", at=1.0),
         Fault(device="b", kind="fail", at=2.0, for_s=3.0, note="ECC storm"),
         Fault(device="a", kind="slow", at=2.0)],
        start=100.0,
    )  # fmt: skip
    assert sched.begin(100.5) == [] and sched.next_time() == 101.0
    [once] = sched.begin(101.0)
    assert once.device == "a" and sched.failing("a") is None  # one failed check only
    assert [i.device for i in sched.begin(102.0)] == ["b", "a"]
    storm = sched.failing("b")
    assert storm is not None and storm.evidence() == "injected fail #2 for 3 s: ECC storm"
    assert storm.finding(102.5).status is Status.FAIL
    assert sched.active("a")[0].finding(102.5).status is Status.WARN  # slow: a throttle
    assert sched.end(104.9) == [] and [i.seq for i in sched.end(105.0)] == [2]
    assert [i.fault.kind for i in sched.reset("a")] == ["slow"]  # a reset ends it
    late = sched.add(Fault(device="c", kind="fail", for_s=9.0), now=200.0)
    assert late.start == 200.0 and sched.clear("c") == []  # not begun: dropped
    assert sched.begin(300.0) == []


def test_fault_plans_load_from_yaml_with_errors_naming_the_key(tmp_path: Path) -> None:
    good = tmp_path / "faults.yaml"
    good.write_text("faults:\n  - {device: x/gpu0, kind: kill, at: 3}\n")
    assert load_faults(good) == (Fault(device="x/gpu0", kind="kill", at=3.0),)
    bad = tmp_path / "bad.yaml"
    bad.write_text("faults:\n  - {device: x/gpu0, kind: melt}\n")
    with pytest.raises(FaultPlanError, match=r"bad.yaml:2: faults\[0\].kind = 'melt'"):
        load_faults(bad)


def test_worker_faults_hang_throttle_and_kill_a_real_process() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "while True: pass"], start_new_session=True)
    try:
        faults = WorkerFaults(lambda dev: proc.pid)
        sched = FaultSchedule()
        hang = sched.add(Fault(device="d", kind="hang"), 0.0)
        assert "stopped (SIGSTOP" in faults.apply(hang)
        end = time.monotonic() + 60  # the signal is delivered asynchronously
        while psutil.Process(proc.pid).status() != psutil.STATUS_STOPPED:
            assert time.monotonic() < end
            time.sleep(0.01)
        assert "SIGCONT" in faults.undo("d", "hang")
        slow = sched.add(Fault(device="d", kind="slow", factor=0.2), 0.0)
        assert "throttled to 20%" in faults.apply(slow)
        p = psutil.Process(proc.pid)
        before = sum(p.cpu_times()[:2])
        time.sleep(0.5)
        used = sum(p.cpu_times()[:2]) - before
        assert used < 0.4  # a busy loop kept about 20% of 0.5 s (one core)
        faults.close()
        assert p.status() != psutil.STATUS_STOPPED
        assert "SIGKILL" in faults.apply(sched.add(Fault(device="d", kind="kill"), 0.0))
        assert proc.wait(5) == -9
    finally:
        proc.kill()
        proc.wait()


def test_probes_check_memory_and_computation_and_report_injected_faults(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    result = run_probe(1)
    assert result["backend"] == "numpy" and result["pid"] == os.getpid()
    findings = judge("d", result, 5.0, answered_s=0.012)
    assert {f.check: f.status for f in findings} == {
        "answer": Status.PASS, "memory": Status.PASS, "compute": Status.PASS}  # fmt: skip
    assert findings[0].value.endswith("answered in 12 ms")
    stress = judge("d", run_probe(2, stress_s=0.05), 5.0)
    assert next(f for f in stress if f.check == "stress").status is Status.PASS
    hurt = judge("d", run_probe(1, inject="injected fail #1"), 6.0)
    assert worst(f.status for f in hurt) is Status.FAIL
    assert [f.value for f in hurt if f.status is Status.FAIL] == ["injected fail #1"]
    assert judge("d", "garbage", 7.0)[0].status is Status.FAIL
    timed_out = no_answer("d", "failed: timed out after 3 s\nmore", 8.0)
    assert (timed_out.status, timed_out.value) == (Status.FAIL, "failed: timed out after 3 s")
    with pytest.raises(ValueError, match="level must be 1 or 2"):
        run_probe(3)


def test_a_gpu_probe_without_a_cuda_torch_says_what_it_could_not_check(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    monkeypatch.setenv("ACCELNET_EMULATED", "0")
    cpu_build = SimpleNamespace(__version__="2.x+cpu", version=SimpleNamespace(cuda=None))
    monkeypatch.setitem(sys.modules, "torch", cpu_build)
    result = run_probe(1)
    assert result["backend"] == "torch (cpu build)"
    assert [(c["check"], c["status"]) for c in result["checks"]] == [("compute", "warn")]
    no_gpu = SimpleNamespace(__version__="2.x", version=SimpleNamespace(cuda="12.8"),
                             cuda=SimpleNamespace(is_available=lambda: False))  # fmt: skip
    monkeypatch.setitem(sys.modules, "torch", no_gpu)
    [check] = run_probe(1)["checks"]
    assert (check["check"], check["status"], check["detail"]) == (
        "answer", "fail", "CUDA_VISIBLE_DEVICES=0")  # fmt: skip
    monkeypatch.setitem(sys.modules, "torch", None)  # not installed
    checks = run_probe(1)["checks"]
    assert checks[0]["status"] == "warn" and "accelnet[torch]" in checks[0]["detail"]
    assert [c["status"] for c in checks[1:]] == ["pass", "pass"]  # the host side still


@pytest.mark.gpu
def test_gpu_probes_on_a_real_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", os.environ.get("CUDA_VISIBLE_DEVICES") or "0")
    monkeypatch.setenv("ACCELNET_EMULATED", "0")
    for level in (1, 2):
        result = run_probe(level, stress_s=2.0)
        assert result["backend"] == "torch.cuda", result
        findings = judge("gpu", result, 0.0)
        assert worst(f.status for f in findings) is Status.PASS, findings


def test_nvidia_smi_reset_names_the_gpu_and_reads_refusals() -> None:
    calls: list[list[str]] = []

    def runner(answer: tuple[int, str]):  # type: ignore[no-untyped-def]
        def run(argv, timeout):  # type: ignore[no-untyped-def]
            calls.append(list(argv))
            return answer

        return run

    gpu = load_fabric("pcie-4xL4").devices["l4box/gpu2"]
    ok = NvidiaSmiReset(runner((0, "GPU 00000000:41:00.0 was successfully reset.")))(gpu)
    assert ok == (True, "GPU 2 reset (GPU 00000000:41:00.0 was successfully reset.)")
    assert calls[-1] == ["nvidia-smi", "--gpu-reset", "-i", "2"]
    denied = NvidiaSmiReset(runner((4, "Insufficient Permissions")))(gpu)
    assert denied == (False, "GPU reset not done: not permitted (needs root) "
                             "(Insufficient Permissions)")  # fmt: skip
    busy = NvidiaSmiReset(runner((255, "GPU is in use by another process")))(gpu)
    assert busy[0] is False and "in use" in busy[1]
    host_cpu = replace(gpu, model=replace(gpu.model, kind=DeviceKind.CPU, vendor="intel"))
    assert NvidiaSmiReset(runner((0, "")))(host_cpu) == (False, "")
