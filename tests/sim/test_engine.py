"""The simulator on small traces whose outcome can be computed by hand."""

from __future__ import annotations

from typing import Any

import pytest

from accelnet.fabric import Fabric
from accelnet.fabric.build import build_fabric, parse_spec
from accelnet.sched import Scheduler
from accelnet.sim.engine import Simulation
from accelnet.sim.records import JobOutcome, SimResult
from accelnet.sim.throughput import ThroughputModel
from accelnet.sim.workload import DeviceFailure, SimJob

# "toy" runs 1 step/s on one V100 and 2 steps/s on two (and 1.5 when they are on two hosts)
RATES = ThroughputModel(
    {"v100": {"toy": {1: 1.0, 2: 2.0}}},
    reference="V100",
    unconsolidated={"v100": {"toy": {2: 1.5}}},
)


def fabric(hosts: int, per_host: int) -> Fabric:
    spec: dict[str, Any] = {
        "name": f"v100x{hosts * per_host}",
        "switches": [{"name": "leaf", "kind": "leaf"}],
        "hosts": [{"name": "h{i}", "count": hosts, "devices": f"{per_host}xV100",
                   "nics": "IB-EDR", "network": "leaf"}],
    }  # fmt: skip
    return build_fabric(parse_spec(spec, "<test>"))


def job(jid: str, arrival: float, work: float, gpus: int = 1, **kw: Any) -> SimJob:
    return SimJob(jid, arrival, "toy", gpus, work, **kw)


def run(fab: Fabric, jobs: list[SimJob], **kw: Any) -> dict[str, JobOutcome]:
    sim = Simulation(fab, jobs, Scheduler(), RATES, **kw)
    result = sim.run()
    return {o.id: o for o in result.jobs}


def times(o: JobOutcome) -> tuple[float | None, float | None]:
    return o.first_start, o.end


def test_fifo_on_one_gpu() -> None:
    out = run(fabric(1, 1), [job("a", 0, 100), job("b", 10, 50), job("c", 20, 10)])
    assert [times(out[j]) for j in "abc"] == [(0, 100), (100, 150), (150, 160)]
    assert [out[j].jct for j in "abc"] == [100, 140, 140]
    assert all(o.state == "succeeded" and o.attempts == 1 for o in out.values())
    assert out["b"].queueing == 90 and out["b"].run_s == 50
    assert out["b"].device_s == {"V100": 50}


def test_a_gang_waits_while_a_small_job_behind_it_starts() -> None:
    # two GPUs on one host: b needs both and waits for a; c (one GPU) fits beside a at once
    out = run(fabric(1, 2), [job("a", 0, 100), job("b", 1, 100, gpus=2), job("c", 2, 10)])
    assert times(out["a"]) == (0, 100)
    assert times(out["c"]) == (2, 12)
    assert times(out["b"]) == (100, 150)  # 100 steps at 2 steps/s on two V100s
    assert out["b"].device_s == {"V100": 100}


def test_a_gang_spread_over_hosts_runs_at_the_unconsolidated_rate() -> None:
    out = run(fabric(2, 1), [job("b", 0, 150, gpus=2)])
    assert times(out["b"]) == (0, 100)  # 1.5 steps/s across two hosts


@pytest.mark.parametrize(("checkpointable", "end"), [(False, 155.0), (True, 125.0)])
def test_a_failure_requeues_the_job_and_it_restarts_after_repair(
    checkpointable: bool, end: float
) -> None:
    fab = fabric(1, 1)
    (dev,) = fab.devices
    failure = DeviceFailure(at=30, device=dev, repair_s=20)
    out = run(fab, [job("a", 0, 100, checkpointable=checkpointable)], failures=[failure],
              restart_s=5)  # fmt: skip
    a = out["a"]
    # stopped at 30; the device is back at 50; 5 s of warm-up; then the work that is left
    # (all 100 steps without a checkpoint, 70 with one)
    assert (a.state, a.first_start, a.end) == ("succeeded", 0, end)
    assert a.attempts == 2 and a.failures == 1
    assert a.run_s == 30 + (end - 50)


def test_a_job_out_of_retries_fails() -> None:
    fab = fabric(1, 1)
    (dev,) = fab.devices
    failures = [DeviceFailure(at=10, device=dev, repair_s=1), DeviceFailure(at=40, device=dev)]
    out = run(fab, [job("a", 0, 100, max_retries=1)], failures=failures, restart_s=0)
    assert out["a"].state == "failed" and out["a"].failures == 2 and out["a"].end == 40


def test_priority_preemption_in_the_simulator() -> None:
    sched = Scheduler("priority", "best-fit", "priority")
    jobs = [job("low", 0, 100, checkpointable=True), job("high", 10, 20, priority=5)]
    result = Simulation(fabric(1, 1), jobs, sched, RATES, restart_s=0).run()
    out = {o.id: o for o in result.jobs}
    assert times(out["high"]) == (10, 30)
    assert out["low"].preemptions == 1
    assert out["low"].end == 120  # 10 steps kept, 90 left after high ends at 30


def test_rounds_wake_the_scheduler_and_samples_follow_the_fabric() -> None:
    sim = Simulation(fabric(1, 2), [job("a", 0, 100), job("b", 0, 50)], Scheduler(), RATES,
                     round_s=30)  # fmt: skip
    result: SimResult = sim.run()
    assert result.decisions >= 4  # 30, 60, 90 and the events
    busy = {s.t: s.busy for s in result.samples}
    assert busy[0] == 2 and busy[60] == 1 and result.samples[-1].busy == 0
    assert result.end == 100


def test_unknown_device_in_a_failure_schedule_is_an_error() -> None:
    with pytest.raises(ValueError, match="unknown device 'nope'"):
        Simulation(fabric(1, 1), [job("a", 0, 1)], Scheduler(), RATES,
                   failures=[DeviceFailure(at=1, device="nope")])  # fmt: skip


def test_a_preempted_job_saves_its_checkpoint_before_the_devices_free() -> None:
    sched = Scheduler("priority", "best-fit", "priority")
    jobs = [job("low", 0, 100, checkpointable=True), job("high", 10, 20, priority=5)]
    result = Simulation(fabric(1, 1), jobs, sched, RATES, restart_s=3, checkpoint_s=5).run()
    out = {o.id: o for o in result.jobs}
    # low is told to stop at 10 and saves until 15; high runs 15..35; low resumes at 35
    # with 90 steps left after 3 s of warm-up
    assert times(out["high"]) == (15, 35)
    assert out["low"].end == 35 + 3 + 90
    assert out["low"].run_s == 15 + 93


# ----- regressions found in review --------------------------------------------------


def test_rounds_end_when_nothing_else_can_happen() -> None:
    # the only device fails for good before the job arrives: rounds must not spin forever
    fab = fabric(1, 1)
    (dev,) = fab.devices
    sim = Simulation(fab, [job("a", 20, 10)], Scheduler(), RATES, round_s=30,
                     failures=[DeviceFailure(at=10, device=dev, repair_s=None)])  # fmt: skip
    result = sim.run()
    assert result.end == 20 and result.jobs[0].state == "unfinished"


def test_until_charges_what_is_still_running() -> None:
    result = Simulation(fabric(1, 1), [job("a", 0, 100)], Scheduler(), RATES).run(until=50)
    (a,) = result.jobs
    assert result.end == 50 and a.state == "unfinished"
    assert a.run_s == 50 and a.device_s == {"V100": 50} and a.energy_j > 0
    assert result.samples[-1].t == 50 and result.samples[-1].busy == 1


def test_a_failure_on_a_dead_device_and_its_repair_change_nothing() -> None:
    fab = fabric(1, 1)
    (dev,) = fab.devices
    failures = [
        DeviceFailure(at=10, device=dev, repair_s=100),  # down 10..110
        DeviceFailure(at=50, device=dev, repair_s=10),  # already down: its repair at 60 too
    ]
    out = run(fab, [job("a", 0, 100, checkpointable=True)], failures=failures, restart_s=0)
    assert out["a"].end == 110 + 90  # back at 110, not 60


def test_a_job_that_ends_when_its_device_fails_has_succeeded() -> None:
    fab = fabric(1, 1)
    (dev,) = fab.devices
    out = run(fab, [job("a", 0, 100, max_retries=0)],
              failures=[DeviceFailure(at=100, device=dev)])  # fmt: skip
    assert out["a"].state == "succeeded" and out["a"].end == 100


def test_shares_of_one_device_run_and_draw_in_proportion() -> None:
    fab = fabric(1, 1)
    jobs = [job("a", 0, 50, accelerators="V100:0.5"), job("b", 0, 25, accelerators="V100:0.5")]
    sim = Simulation(fab, jobs, Scheduler(), RATES)
    result = sim.run()
    out = {o.id: o for o in result.jobs}
    assert times(out["a"]) == (0, 100) and times(out["b"]) == (0, 50)  # half the rate each
    idle, busy = RATES.power_w("V100", False), RATES.power_w("V100", True)
    by_t = {s.t: s for s in result.samples}
    assert by_t[0].busy == 1 and by_t[0].power_w == pytest.approx(busy)
    assert by_t[50].busy == 1 and by_t[50].power_w == pytest.approx((idle + busy) / 2)
    assert sim.backend.power_w == pytest.approx(idle) and not sim.backend.busy
    assert out["b"].energy_j == pytest.approx(50 * busy / 2)


def test_a_job_the_fabric_can_never_run_is_reported_not_fatal() -> None:
    result = Simulation(fabric(1, 2), [job("big", 0, 10, gpus=4), job("a", 0, 10)],
                        Scheduler(), RATES).run()  # fmt: skip
    out = {o.id: o for o in result.jobs}
    assert out["big"].state == "rejected" and out["a"].state == "succeeded"
    assert any("rejected big" in n for n in result.notes)


def test_a_device_failure_during_a_checkpoint_leaves_the_preemption_standing() -> None:
    fab = fabric(1, 1)
    (dev,) = fab.devices
    sched = Scheduler("priority", "best-fit", "priority")
    jobs = [job("low", 0, 100, checkpointable=True, max_retries=0),
            job("high", 10, 20, priority=5)]  # fmt: skip
    out = {o.id: o for o in Simulation(
        fab, jobs, sched, RATES, restart_s=0, checkpoint_s=5,
        failures=[DeviceFailure(at=12, device=dev, repair_s=8)],
    ).run().jobs}  # fmt: skip
    # low is preempted at 10 and saving when the device fails at 12: it stops there (no
    # failure counted, its 10 steps kept); the device is back at 20 for high, then low
    assert out["low"].failures == 0 and out["low"].preemptions == 1
    assert times(out["high"]) == (20, 40)
    assert out["low"].state == "succeeded" and out["low"].end == 40 + 90


def test_every_rank_of_a_stopping_gang_saves_its_checkpoint() -> None:
    sched = Scheduler("priority", "best-fit", "priority")
    jobs = [job("low", 0, 200, gpus=2, checkpointable=True), job("high", 10, 20, priority=5)]
    sim = Simulation(fabric(1, 2), jobs, sched, RATES, restart_s=0, checkpoint_s=5)
    sim.run()
    ends = [e.at for e in sim.store.events("low") if e.kind == "task:cancelled"]
    assert ends == [15, 15]


def test_without_the_spread_penalty_a_gang_over_hosts_runs_at_the_one_host_rate() -> None:
    out = run(fabric(2, 1), [job("b", 0, 200, gpus=2)], spread_penalty=False)
    assert times(out["b"]) == (0, 100)  # 2 steps/s, as on one host


def test_policies_rate_a_gang_no_host_holds_as_spread() -> None:
    """On a fabric, the policies' rates are what the gang can get there: spread over
    hosts where no host has the devices (toy: 1.5 steps/s on two V100s of two hosts)."""
    from accelnet.sim.policies import model_rates
    from accelnet.sim.workload import SimJob

    spec = SimJob("g", 0.0, "toy", 2, 100.0).spec()
    plain = model_rates(RATES)
    assert plain(spec, "V100", 2) == 2.0  # a gang in one host, the fabric not known
    assert plain.on(fabric(2, 1))(spec, "V100", 2) == 1.5  # one V100 per host: spread
    assert plain.on(fabric(1, 2))(spec, "V100", 2) == 2.0  # a host holds both
    assert plain.on(fabric(2, 1))(SimJob("o", 0.0, "toy", 1, 1.0).spec(), "V100", 1) == 1.0


@pytest.mark.parametrize(
    ("setting", "talks", "rate"),
    [({}, False, 1.5), ({"spread_penalty": False}, False, 2.0),
     ({"comm_model": True}, False, 1.5), ({"comm_model": True}, True, 2.0)],
)  # fmt: skip
def test_a_simulation_rates_its_policys_gangs_as_it_runs_them(
    setting: dict[str, Any], talks: bool, rate: float
) -> None:
    """A round policy in a simulation with the spread penalty rates a gang no host holds at
    its spread rate (its LP and order then judge its speed and time left as it runs);
    without the penalty at one host's; with the communication model, a gang that
    communicates at one host's (the model prices its spread), one that does not, spread."""
    from accelnet.sim.policies import make_scheduler

    sched = make_scheduler("hetero-jct", RATES)
    jobs = [job("g", 0, 30, gpus=2, bytes_per_step=1e6 if talks else None)]
    Simulation(fabric(2, 1), jobs, sched, RATES, **setting)
    assert sched.rates is not None
    assert sched.rates(jobs[0].spec(), "V100", 2) == rate


def test_a_scheduler_reused_gets_each_simulations_rates() -> None:
    """A scheduler handed to a second simulation is rated for that one's fabric and
    setting, not the first's."""
    from accelnet.sim.policies import make_scheduler

    sched = make_scheduler("hetero-jct", RATES)
    spec = job("g", 0, 30, gpus=2).spec()
    Simulation(fabric(2, 1), [job("g", 0, 30, gpus=2)], sched, RATES)
    assert sched.rates is not None and sched.rates(spec, "V100", 2) == 1.5
    Simulation(fabric(2, 1), [job("g", 0, 30, gpus=2)], sched, RATES, spread_penalty=False)
    assert sched.rates(spec, "V100", 2) == 2.0
    Simulation(fabric(1, 2), [job("g", 0, 30, gpus=2)], sched, RATES)
    assert sched.rates(spec, "V100", 2) == 2.0


def test_a_spread_gang_runs_as_its_policy_rates_it() -> None:
    from accelnet.sim.policies import make_scheduler

    sched = make_scheduler("hetero-jct", RATES)
    (out,) = Simulation(fabric(2, 1), [job("g", 0, 30, gpus=2)], sched, RATES).run().jobs
    assert out.end == pytest.approx(30 / 1.5, abs=1.0)  # 1.5 steps/s, as rated
