"""Power and energy in the live system: the governor delays starts and caps devices under a
budget (with real worker processes), refused caps pin the device, energy per job from
power readings or the model, and the telemetry history kept in the store across restarts."""

from __future__ import annotations

import itertools
import os
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import cloudpickle
import pytest

from accelnet.devices import EmulatedPowerControl
from accelnet.devices.power import DevicePower
from accelnet.devices.samplers.nvml_power import NvmlPowerControl
from accelnet.devices.telemetry import DeviceSample
from accelnet.fabric import DomainLevel, load_fabric
from accelnet.fabric.discovery import discover
from accelnet.runtime.care.energy_book import energy_from_json
from accelnet.runtime.care.power import PowerCare, default_controls
from accelnet.runtime.control.sqlite_store import SqliteStore
from accelnet.runtime.control.store import JobRecord, MemoryStore
from accelnet.runtime.sdk import LocalCluster
from accelnet.sched import JobSpec, JobState, Placement
from accelnet.sched.snapshot import Start
from tests.devices import nvml_telemetry_fake as nft
from tests.fabric import nvml_fake as nf

cloudpickle.register_pickle_by_value(sys.modules[__name__])
L4 = load_fabric("pcie-4xL4")
GPU0, GPU1 = "l4box/gpu0", "l4box/gpu1"
SPEC = JobSpec.model_validate({"name": "j", "run": "true"})


def nap(seconds: float) -> str:
    time.sleep(seconds)
    return os.environ["ACCELNET_DEVICE"]


def boom() -> None:
    raise RuntimeError("broken on purpose")


def wait_until(pred: Callable[[], object], timeout: float = 30.0) -> None:
    end = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < end, "timed out"
        time.sleep(0.02)


def start(job: str, *devices: str, model: str = "L4") -> Start:
    return Start(job, Placement(devices, 1.0, model, DomainLevel.HOST))


# ----- with real worker processes -------------------------------------------------------------


def test_a_budget_for_one_job_delays_the_next_with_its_reason_then_runs_it(
    tmp_path: Path,
) -> None:
    # 4 x L4 (16 W idle, 72 W busy, caps 21.6-72 W): three idle and one busy at its lowest cap
    # draw 69.6 W; a second busy one would need 75.2 W. 72 W runs one job at a time, capped.
    with LocalCluster("pcie-4xL4", tmp_path, power_budget_w=72.0, sample_period_s=0.2) as c:
        jobs = [c.submit(nap, 0.8, name="a"), c.submit(nap, 0.3, name="b"),
                c.submit(boom, name="c")]  # fmt: skip
        wait_until(lambda: jobs[0].state is JobState.RUNNING and c.reason(jobs[1].id))
        waiting = c.reason(jobs[1].id)
        rows = {r.device: r for r in c.devices()}
        running_on = jobs[0].record.placement.devices[0]  # type: ignore[union-attr]
        assert jobs[0].result(timeout=30) and jobs[1].result(timeout=30)
        c.wait_for(jobs[2].id, timeout=30)
        live = {r.device: r.energy_j for r in c.devices()}
        events = c.events()
    assert waiting is not None and waiting.startswith("power budget 72 W: ")
    assert f"starting job {jobs[1].id} adds >= " in waiting
    assert rows[running_on].power_cap_w == pytest.approx(24.0)  # 72 - 3 x 16 W idle
    recs = [j.record for j in jobs]
    assert [r.state for r in recs] == [JobState.SUCCEEDED, JobState.SUCCEEDED, JobState.FAILED]
    # one at a time: each started after the one before had ended
    for before, after in itertools.pairwise(recs):
        assert after.started_at is not None and before.finished_at is not None
        assert after.started_at >= before.finished_at
    done = Counter(e.job for e in events if e.kind in ("job:succeeded", "job:failed"))
    assert done == {r.id: 1 for r in recs}  # none lost, none twice
    delays = [e for e in events if e.kind == "power:delay"]
    assert {e.job for e in delays} == {recs[1].id, recs[2].id}
    caps = [e.detail for e in events if e.kind == "power:cap"]
    assert caps[0].startswith(f"{running_on}: 24 W (was 72 W): power budget 72 W, 1 job running")
    assert {c.split(": ", 2)[1] for c in caps} == {"24 W (was 72 W)", "72 W (was 24 W)"}
    assert caps[-1].endswith("power budget 72 W, 0 jobs running, projected 64 W")
    # energy on every record, however the job ended: modelled (emulated devices give none)
    for r in recs:
        assert r.energy is not None and r.energy["source"] == "modelled"
        e = energy_from_json(r.energy)
        held = (r.finished_at or 0) - (r.started_at or 0)
        assert e.joules > 0 and e.held_s >= held * 0.5
        # never above the device's cap for the time it held it
        assert e.joules <= e.held_s * 24.0 + 1e-6
    used = sum(energy_from_json(r.energy).joules for r in recs if r.energy)
    assert sum(j or 0.0 for j in live.values()) == pytest.approx(used)


def test_history_survives_a_restart_and_a_cancelled_job_has_its_energy(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    with LocalCluster("pcie-4xL4", tmp_path / "w1", db, sample_period_s=0.1, history_s=0.5) as c:
        job = c.submit(nap, 30.0, name="long")
        wait_until(lambda: job.state is JobState.RUNNING)
        time.sleep(0.6)
        live = job.energy
        job.cancel()
        rec = c.wait_for(job.id, timeout=30)
        first = c.store.history(GPU0)
    assert live is not None and live.held_s > 0.3
    assert rec.state is JobState.CANCELLED and rec.energy is not None
    assert rec.energy["held_s"] >= live.held_s
    assert first and all(b.width_s == 0.5 for b in first)
    assert any("utilization_pct" in b.stats for b in first)
    with LocalCluster("pcie-4xL4", tmp_path / "w2", db, sample_period_s=0.1, history_s=0.5) as c:
        old = c.store.history(GPU0)
        assert [b.to_json() for b in old[: len(first)]] == [b.to_json() for b in first]
        time.sleep(0.7)
    again = SqliteStore(db)
    later = again.history(GPU0)
    since = again.history(GPU0, since=first[-1].end)
    again.close()
    starts = [b.start for b in later]
    assert starts == sorted(set(starts)) and len(later) > len(first)
    assert since and all(b.end > first[-1].end for b in since)


# ----- the hook alone -----------------------------------------------------------------------


def record(job: str = "j-1", energy: dict[str, object] | None = None) -> JobRecord:
    return JobRecord(job, SPEC, JobState.RUNNING, 0.0, energy=energy)


def test_a_refused_cap_is_an_event_pins_the_device_and_the_start_waits() -> None:
    store = MemoryStore()
    em = EmulatedPowerControl([DevicePower.of(d) for d in L4.devices.values()], permitted=False)
    care = PowerCare(L4, store, budget_w=110.0, controls=dict.fromkeys(em.devices(), em))
    # uncapped, one busy L4 and three idle draw 120 W: it needs a cap the control refuses
    assert care.admit([start("a", GPU0)], 1.0) == []
    [err] = [e for e in store.events() if e.kind == "power:error"]
    assert err.detail.startswith(f"{GPU0}: cannot set the power limit of {GPU0} to 62 W")
    assert "not permitted" in err.detail and err.detail.endswith("its cap stays at 72 W")
    assert care.governor is not None and care.governor.cap_range(GPU0) == (72.0, 72.0)
    reason = care.reason("a")
    assert reason is not None and reason.startswith(
        "power budget 110 W: 64 W drawn even at the lowest caps, starting job a adds >= 56 W"
    )
    # another device is tried as it comes, and pinned when refused in turn
    assert care.admit([start("b", GPU1)], 2.0) == []
    assert len([e for e in store.events() if e.kind == "power:error"]) == 2
    assert care.caps() == {}


def test_nvml_caps_without_root_are_refused_with_the_fix_named() -> None:
    nvml = nft.fake(nf.dgx_h100(), root=False)
    fabric = discover(cpu_devices="none", nvml=nvml, hostname="dgx").fabric
    ctl = NvmlPowerControl(list(fabric.devices.values()), nvml=nvml)
    store = MemoryStore()
    # one H100 busy needs 7 x 70 W idle + 700 W uncapped: 1,000 W needs a cap
    care = PowerCare(fabric, store, budget_w=1000.0, controls=dict.fromkeys(ctl.devices(), ctl))
    assert care.admit([start("train", "dgx/gpu0", model="H100-SXM")], 0.0) == []
    [err] = [e.detail for e in store.events() if e.kind == "power:error"]
    assert err.startswith("dgx/gpu0: cannot set the power limit of dgx/gpu0 to 510 W")
    assert "NoPermission" in err and "nvidia-smi -i 0 -pl 510" in err
    care.close(1.0)


def test_caps_go_down_before_the_launch_and_back_up_after_and_at_close() -> None:
    store = MemoryStore()
    controls, made = default_controls(L4, emulated=True)
    care = PowerCare(L4, store, budget_w=72.0, controls=controls, owned=made)
    assert care.admit([start("a", GPU0), start("b", GPU1)], 0.0) == [start("a", GPU0)]
    assert care.caps() == {GPU0: 24.0}
    assert controls[GPU0].limits(GPU0).limit_w == 24.0  # set before the launch
    care.started(record("a"), start("a", GPU0).placement, 1, 0.0)
    care.launched(0.0)
    care.close(5.0)
    assert controls[GPU0].limits(GPU0).limit_w == 72.0
    seen = [(e.kind, e.job, e.detail.split(" (")[0]) for e in store.events()]
    assert seen == [
        ("power:cap", None, f"{GPU0}: 24 W"),
        ("power:delay", "b", "power budget 72 W: 70 W drawn even at the lowest caps, "
                             "starting job b adds >= 6 W"),
        ("power:cap", None, f"{GPU0}: 72 W"),
    ]  # fmt: skip


def sample(
    t: float, power: float | None = None, util: float | None = None, device: str = GPU0
) -> DeviceSample:
    return DeviceSample(device, t, "test", utilization_pct=util, power_w=power)


def test_energy_is_measured_from_power_readings_and_attempts_add_up() -> None:
    care = PowerCare(L4, MemoryStore())
    care.observe([sample(0.0, 50.0)], 0.0)
    care.started(record(), start("j-1", GPU0).placement, 1, 1.0)
    for t in (2.0, 3.0, 4.0):
        care.observe([sample(t, 50.0)], t)
    first = care.ended(record(), 1, 3.0)
    assert first is not None and first["source"] == "measured"
    assert first["joules"] == pytest.approx(100.0) and first["by_device"] == {GPU0: 100.0}
    # the second attempt, on a device without power readings: modelled at its utilization
    care.started(record(energy=first), start("j-1", GPU1).placement, 2, 10.0)
    for t in (10.5, 11.0, 12.0):
        care.observe([sample(t, util=50.0, device=GPU1)], t)
    both = care.ended(record(energy=first), 2, 12.0)
    assert both is not None and both["source"] == "mixed"
    assert both["modelled_j"] == pytest.approx(2.0 * (16 + 0.5 * (72 - 16)))
    assert both["measured_j"] == pytest.approx(100.0) and both["held_s"] == pytest.approx(4.0)
    assert both["by_device"] == {GPU0: 100.0, GPU1: pytest.approx(88.0)}
    assert care.device_energy(12.0) == both["by_device"]


def test_an_unsampled_device_is_modelled_busy() -> None:
    care = PowerCare(L4, MemoryStore())
    care.started(record(), start("j-1", GPU0, GPU1).placement, 1, 0.0)
    live = care.job_energy(record(), 1.0)
    assert live is not None and live.joules == pytest.approx(2 * 72.0)
    done = care.ended(record(), 1, 2.0)
    assert done is not None and done["source"] == "modelled"
    assert done["joules"] == pytest.approx(2 * 2 * 72.0)
