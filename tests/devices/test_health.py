"""Passive health checks over telemetry samples and heartbeats; the board of findings."""

from __future__ import annotations

from accelnet.devices.health import (
    Finding,
    HealthBoard,
    HealthChecks,
    Status,
    check_heartbeat,
    check_lost,
    check_sample,
    worst,
)
from accelnet.devices.telemetry import DeviceSample

GPU = HealthChecks(temperature_warn_c=85.0, temperature_fail_c=95.0)


def sample(t: float = 1.0, **fields: object) -> DeviceSample:
    return DeviceSample("box/gpu0", t, "nvml", **fields)  # type: ignore[arg-type]


def verdicts(findings: list[Finding]) -> dict[str, Status]:
    return {f.check: f.status for f in findings}


def test_a_healthy_busy_or_idle_sample_has_no_findings() -> None:
    ok = sample(utilization_pct=0.0, temperature_c=60.0, ecc_uncorrected=0, xid_events=(),
                throttle_reasons=("sw_power_cap",), nvlink_down=0, remap_pending=False)  # fmt: skip
    # utilization stuck at 0 while a job runs is not a failure: nothing looks at it
    assert check_sample(ok, GPU, previous=ok, baseline=ok) == []


def test_temperature_warns_then_fails_with_the_value_and_limit() -> None:
    assert check_sample(sample(temperature_c=84.9), GPU) == []
    [warn] = check_sample(sample(temperature_c=85.0), GPU)
    [fail] = check_sample(sample(temperature_c=97.0), GPU)
    assert (warn.check, warn.status) == ("temperature", Status.WARN)
    assert (fail.status, fail.value, fail.limit) == (Status.FAIL, "97 C", ">= 95 C")
    assert fail.source == "telemetry" and fail.at == 1.0
    assert "box/gpu0 temperature fail: 97 C (limit >= 95 C; telemetry at 1.000)" in fail.text()
    assert check_sample(sample(temperature_c=120.0), HealthChecks()) == []  # no thresholds


def test_critical_xids_fail_and_others_warn() -> None:
    for code in (48, 63, 64, 74, 79, 92, 94, 95):
        assert verdicts(check_sample(sample(xid_events=(code,)), GPU)) == {"xid": Status.FAIL}
    [other] = check_sample(sample(xid_events=(13, 31)), GPU)
    assert other.status is Status.WARN and other.value == "Xid 13, 31"
    quiet = HealthChecks(xid_other="ignore")
    assert check_sample(sample(xid_events=(13,)), quiet) == []
    assert verdicts(check_sample(sample(xid_events=(13, 79)), quiet)) == {"xid": Status.FAIL}


def test_counters_compare_with_the_previous_sample_and_links_with_the_first() -> None:
    first = sample(0.0, ecc_uncorrected=2, nvlink_down=0)
    grew = sample(1.0, ecc_uncorrected=3, nvlink_down=0)
    [ecc] = check_sample(grew, GPU, previous=first, baseline=first)
    assert (ecc.check, ecc.status, ecc.value) == ("ecc_uncorrected", Status.FAIL, "2 -> 3")
    assert check_sample(sample(2.0, ecc_uncorrected=3), GPU, previous=grew) == []
    reset = sample(3.0, ecc_uncorrected=0)  # a GPU reset clears the volatile counter
    assert check_sample(reset, GPU, previous=grew) == []
    down = sample(4.0, nvlink_down=2)
    [link] = check_sample(down, GPU, previous=grew, baseline=first)
    assert (link.check, link.status, link.value) == ("nvlink_down", Status.FAIL, "2 link(s) down")
    assert check_sample(down, GPU, baseline=down) == []  # as it was at the first sample


def test_remapping_throttles_and_read_errors() -> None:
    found = check_sample(
        sample(remap_pending=True, remap_failed=True,
               throttle_reasons=("hw_thermal_slowdown", "sw_power_cap"),
               errors=("power_w: GpuIsLost", "energy_j: Unknown")),
        GPU,
    )  # fmt: skip
    assert verdicts(found) == {
        "remap_failed": Status.FAIL,
        "remap_pending": Status.WARN,
        "throttle": Status.WARN,
        "gpu_lost": Status.FAIL,
        "read_errors": Status.WARN,
    }
    throttle = next(f for f in found if f.check == "throttle")
    assert throttle.value == "hw_thermal_slowdown"


def test_heartbeats_fail_after_the_timeout_and_a_lost_worker_fails() -> None:
    checks = HealthChecks(heartbeat_timeout_s=2.0)
    assert check_heartbeat("d", last_beat=10.0, now=11.9, checks=checks) is None
    silent = check_heartbeat("d", last_beat=10.0, now=12.5, checks=checks, pid=42)
    assert silent is not None and silent.status is Status.FAIL
    assert silent.value == "no heartbeat for 2.5 s" and "pid 42" in silent.detail
    lost = check_lost("d", 3.0, "killed by SIGKILL", checks, pid=7)
    assert lost is not None and lost.value == "worker pid 7 killed by SIGKILL"
    assert check_lost("d", 3.0, "x", HealthChecks(worker_lost="ignore")) is None


def test_the_board_reports_changes_and_clears_per_source() -> None:
    board = HealthBoard()
    hot = Finding("d", "temperature", Status.WARN, 1.0, "telemetry", "90 C")
    hotter = Finding("d", "temperature", Status.FAIL, 2.0, "telemetry", "96 C")
    beat = Finding("d", "heartbeat", Status.FAIL, 2.0, "heartbeat", "silent")
    assert board.update("d", "telemetry", [hot], 1.0) == [hot]
    assert board.update("d", "telemetry", [hot], 1.5) == []  # unchanged: nothing to say
    assert board.update("d", "telemetry", [hotter], 2.0) == [hotter]
    assert board.update("d", "heartbeat", [beat], 2.0) == [beat]
    assert board.status("d") is Status.FAIL
    [cleared] = board.update("d", "telemetry", [], 3.0)
    assert (cleared.check, cleared.status) == ("temperature", Status.PASS)
    assert "was fail" in cleared.detail
    assert [f.check for f in board.findings("d")] == ["heartbeat"]  # the other source stays
    assert worst([]) is Status.PASS and board.status("other") is Status.PASS
