"""The remediation policy (YAML, per kind, errors naming file/line/key/value) and the pure
remediation machine: one transition table, actions out, failures counted in a window."""

from __future__ import annotations

from pathlib import Path

import pytest

from accelnet.devices.remediation import (
    PHASES,
    ActionKind,
    KindPolicy,
    Phase,
    PolicyError,
    RefusedError,
    RemediationPolicy,
    Remediator,
    load_policy,
)
from accelnet.statemachine import IllegalTransitionError

A = ActionKind


def machine(**policy: object) -> Remediator:
    p = KindPolicy.model_validate(policy)
    return Remediator(lambda dev: p)


def kinds(actions: list) -> list[tuple[ActionKind, Phase]]:  # type: ignore[type-arg]
    return [(a.kind, a.phase) for a in actions]


# ----- policy ---------------------------------------------------------------------------


def test_policy_layers_builtin_kind_defaults_and_the_file(tmp_path: Path) -> None:
    default = RemediationPolicy()
    gpu, cpu = default.for_kind("gpu"), default.for_kind("cpu")
    assert gpu.on_fail == ("drain", "requeue", "reset", "probe") and gpu.max_failures == 3
    assert (gpu.checks.temperature_warn_c, gpu.checks.temperature_fail_c) == (85.0, 95.0)
    assert (cpu.checks.temperature_warn_c, cpu.checks.temperature_fail_c) == (95.0, None)
    path = tmp_path / "p.yaml"
    path.write_text(
        "defaults:\n  max_failures: 5\n  checks: {heartbeat_timeout_s: 5}\n"
        "kinds:\n  gpu:\n    on_fail: [drain, reset, probe]\n    probe_level: 2\n"
        "    checks: {temperature_fail_c: 90}\n"
    )
    policy = load_policy(path)
    gpu, tpu = policy.for_kind("gpu"), policy.for_kind("tpu")
    assert gpu.on_fail == ("drain", "reset", "probe") and gpu.probe_level == 2
    assert gpu.max_failures == 5 and gpu.checks.heartbeat_timeout_s == 5.0
    assert (gpu.checks.temperature_warn_c, gpu.checks.temperature_fail_c) == (85.0, 90.0)
    assert tpu.on_fail == ("drain", "requeue", "reset", "probe") and tpu.max_failures == 5
    assert load_policy(tmp_path / "p.yaml") == policy


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("defaults:\n  max_failure: 3\n",
         ":2: defaults.max_failure: unknown key (allowed here: on_fail"),
        ("kinds:\n  gpu:\n    max_failures: 0\n",
         ":3: kinds.gpu.max_failures = 0: Input should be greater"),
        ("kinds:\n  xpu: {}\n", "kinds.xpu"),
        ("defaults:\n  on_fail: [drain, probe, reset]\n", "steps must come in the order drain"),
        ("defaults:\n  on_fail: [requeue]\n", "need drain first"),
        ("defaults:\n  warn_action: panic\n", "warn_action = 'panic'"),
        ("defaults:\n  checks: {xid_other: loud}\n", "defaults.checks.xid_other = 'loud'"),
        ("defaults: [\n", "not valid YAML"),
    ],
)  # fmt: skip
def test_policy_errors_name_the_file_line_key_and_value(
    tmp_path: Path, text: str, expected: str
) -> None:
    path = tmp_path / "policy.yaml"
    path.write_text(text)
    with pytest.raises(PolicyError) as err:
        load_policy(path)
    assert str(path) in str(err.value) and expected in str(err.value)


# ----- the machine --------------------------------------------------------------------


def test_a_failure_drains_requeues_resets_probes_and_returns_to_service() -> None:
    m = machine()
    [fail] = m.failed("d", "xid 79", 10.0, busy=True)
    assert (fail.kind, fail.phase, fail.stop_jobs) == (A.FAIL, Phase.DRAINING, True)
    assert fail.cause == "xid 79 (failure 1 of 3 within 3600 s)"
    assert m.failed("d", "xid 79 again", 10.5, busy=True) == []  # out of service: not counted
    [reset] = m.idle("d", 11.0)
    assert (reset.kind, reset.phase, reset.hard) == (A.RESET, Phase.RESETTING, True)
    [probe] = m.reset_done("d", True, "worker restarted", 11.5)
    assert (probe.kind, probe.phase, probe.level) == (A.PROBE, Phase.PROBING, 1)
    [ready] = m.probe_done("d", True, "compute pass", 12.0)
    assert (ready.kind, ready.phase) == (A.READY, Phase.HEALTHY)
    assert m.failures("d", 12.0) == 1
    history = [(t.src, t.dst) for t in m.case("d").phase.history]
    assert history == [
        (Phase.HEALTHY, Phase.DRAINING), (Phase.DRAINING, Phase.RESETTING),
        (Phase.RESETTING, Phase.PROBING), (Phase.PROBING, Phase.HEALTHY),
    ]  # fmt: skip


def test_an_idle_device_is_reset_at_once_and_a_failing_one_goes_offline() -> None:
    m = machine(backoff_s=5.0)
    assert kinds(m.failed("d", "injected", 0.0, busy=False)) == [
        (A.FAIL, Phase.DRAINING), (A.RESET, Phase.RESETTING)]  # fmt: skip
    assert kinds(m.reset_done("d", True, "ok", 0.1)) == [(A.PROBE, Phase.PROBING)]
    [back] = m.probe_done("d", False, "injected", 0.5)  # failure 2
    assert (back.kind, back.phase) == (A.FAIL, Phase.BACKOFF) and "next try in 5 s" in back.cause
    assert m.due(4.9) == []
    assert kinds(m.due(5.5)) == [(A.RESET, Phase.RESETTING)]
    assert kinds(m.reset_done("d", False, "worker did not answer", 6.0)) == [
        (A.OFFLINE, Phase.OFFLINE)]  # failure 3 of 3  # fmt: skip
    assert m.phase("d") is Phase.OFFLINE and m.failures("d", 6.0) == 3
    assert m.failed("d", "more", 7.0, busy=False) == []


def test_failures_outside_the_window_do_not_count_and_backoff_zero_retries_at_once() -> None:
    m = machine(window_s=10.0, backoff_s=0.0, max_failures=2)
    m.failed("d", "x", 0.0, busy=False)
    m.reset_done("d", True, "ok", 0.0)
    m.probe_done("d", True, "ok", 0.0)
    acts = m.failed("d", "y", 20.0, busy=False)  # the first failure is out of the window
    assert acts[0].phase is Phase.DRAINING and "failure 1 of 2" in acts[0].cause
    m.reset_done("d", True, "ok", 20.0)
    assert kinds(m.probe_done("d", False, "bad", 21.0)) == [(A.OFFLINE, Phase.OFFLINE)]


def test_policies_without_requeue_reset_or_probe() -> None:
    m = machine(on_fail=["drain", "probe"], backoff_s=0.0)
    [fail] = m.failed("d", "x", 0.0, busy=True)
    assert fail.stop_jobs is False  # its jobs finish first
    assert kinds(m.idle("d", 1.0)) == [(A.PROBE, Phase.PROBING)]
    assert kinds(m.probe_done("d", False, "bad", 2.0)) == [
        (A.FAIL, Phase.BACKOFF), (A.PROBE, Phase.PROBING)]  # fmt: skip
    held = machine(on_fail=["drain", "requeue"])
    held.failed("d", "x", 0.0, busy=True)
    assert kinds(held.idle("d", 1.0)) == [(A.NOTE, Phase.HELD)]
    report_only = machine(on_fail=[])
    assert report_only.failed("d", "x", 0.0, busy=True) == []
    assert report_only.phase("d") is Phase.HEALTHY


def test_warnings_follow_warn_action() -> None:
    assert machine().warned("d", "hot", 0.0, busy=True) == []
    assert kinds(machine(warn_action="drain").warned("d", "hot", 0.0, busy=True)) == [
        (A.DRAIN, Phase.HELD)]  # fmt: skip
    assert kinds(machine(warn_action="fail").warned("d", "hot", 0.0, busy=True)) == [
        (A.FAIL, Phase.DRAINING)]  # fmt: skip


def test_operator_drain_undrain_reset_and_probe() -> None:
    m = machine()
    assert kinds(m.drain("d", 0.0, "maintenance")) == [(A.DRAIN, Phase.HELD)]
    assert m.drain("d", 0.5, "again") == []
    assert kinds(m.undrain("d", 1.0, busy=True, reason="back")) == [(A.UNDRAIN, Phase.HEALTHY)]
    m.drain("d", 2.0, "maintenance")
    undrain = m.undrain("d", 3.0, busy=False, reason="back")
    assert [(a.kind, a.phase, a.hard) for a in undrain] == [(A.RESET, Phase.RESETTING, False)]
    with pytest.raises(RefusedError, match="resetting already"):
        m.reset("d", 3.1, busy=False, reason="r")
    m.reset_done("d", True, "refreshed", 3.2)
    m.probe_done("d", True, "ok", 3.5)
    assert kinds(m.reset("d", 4.0, busy=True, reason="r")) == [(A.DRAIN, Phase.DRAINING)]
    assert kinds(m.idle("d", 5.0)) == [(A.RESET, Phase.RESETTING)]
    m.reset_done("d", True, "ok", 5.1)
    m.probe_done("d", True, "ok", 5.2)
    assert kinds(m.probe("d", 6.0, 2, "check")) == [(A.PROBE, Phase.PROBING)]
    assert m.case("d").level == 2
    m.probe_done("d", True, "ok", 7.0)
    with pytest.raises(RefusedError, match="not drained"):
        m.undrain("d", 8.0, busy=False, reason="x")


def test_an_operator_brings_an_offline_device_back_and_its_failures_are_forgotten() -> None:
    m = machine(max_failures=1)
    assert kinds(m.failed("d", "x", 0.0, busy=True)) == [(A.OFFLINE, Phase.OFFLINE)]
    with pytest.raises(RefusedError, match="use reset or undrain"):
        m.drain("d", 1.0, "x")
    with pytest.raises(RefusedError):
        m.probe("d", 1.0, 1, "x")  # the caller runs a diagnostic probe instead
    assert kinds(m.reset("d", 2.0, busy=False, reason="fixed")) == [(A.RESET, Phase.RESETTING)]
    assert m.failures("d", 2.0) == 0


def test_the_table_has_a_row_per_phase_and_refuses_the_rest() -> None:
    assert set(PHASES.rows) == set(Phase)
    assert PHASES.allowed(Phase.PROBING, Phase.HEALTHY)
    with pytest.raises(IllegalTransitionError, match="offline -> healthy is not allowed"):
        PHASES.check("d", Phase.OFFLINE, Phase.HEALTHY)
    for src, row in PHASES.rows.items():
        for dst, why in row.items():
            assert why, f"{src} -> {dst} has no comment"
