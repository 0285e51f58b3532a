"""The LP lower bound on the average JCT: tight on a case solved by hand, never above what
a real schedule reaches, and reported by the simulation when asked for."""

from __future__ import annotations

import pytest

from accelnet.fabric import Fabric, load_fabric
from accelnet.fabric.build import build_fabric, parse_spec
from accelnet.sim.bounds import jct_lp
from accelnet.sim.engine import Simulation
from accelnet.sim.metrics import compute
from accelnet.sim.policies import make_scheduler, model_rates
from accelnet.sim.throughput import ThroughputModel
from accelnet.sim.traces import generate_gavel
from accelnet.sim.workload import SimJob

TOY = ThroughputModel({"v100": {"toy": {1: 1.0}}}, reference="V100")
GAVEL = ThroughputModel.gavel()


def v100s(n: int) -> Fabric:
    spec = {
        "name": f"v100x{n}",
        "switches": [{"name": "leaf", "kind": "leaf"}],
        "hosts": [{"name": "h", "devices": f"{n}xV100", "nics": "IB-EDR", "network": "leaf"}],
    }
    return build_fabric(parse_spec(spec, "<test>"))


def test_two_jobs_on_one_device_by_hand() -> None:
    # 100 s and 200 s of work at t=0 on one V100: the best schedule runs the short one
    # first, JCTs 100 and 300 s, average 200 s. Cut in 1 s intervals, the LP finds that
    # order: mean busy times 49.5 and 199.5 (intervals counted from their start), plus
    # half the run times: (99.5 + 299.5) / 2 = 199.5 s
    jobs = [SimJob("a", 0.0, "toy", 1, 100.0), SimJob("b", 0.0, "toy", 1, 200.0)]
    assert jct_lp(v100s(1), jobs, model_rates(TOY), step_s=1.0) == pytest.approx(199.5)
    # two devices: no waiting, each job its own run time, (100 + 200) / 2; the relaxation
    # gives away the half interval of start-of-interval times (149.5 s), so the run-alone
    # bound, the larger, is the bound
    assert jct_lp(v100s(2), jobs, model_rates(TOY), step_s=1.0) == pytest.approx(150.0)


def test_a_late_arrival_counts_from_its_arrival() -> None:
    # b arrives after a is done: neither waits; each ends 100 s after it arrives. With
    # 10 s intervals the relaxation gives away half of one (95 s): the run-alone bound,
    # 100 s, is the larger, and the bound
    jobs = [SimJob("a", 0.0, "toy", 1, 100.0), SimJob("b", 500.0, "toy", 1, 100.0)]
    assert jct_lp(v100s(1), jobs, model_rates(TOY), step_s=10.0) == pytest.approx(100.0)
    late = [SimJob("a", 0.0, "toy", 1, 100.0), SimJob("b", 505.0, "toy", 1, 100.0)]
    assert jct_lp(v100s(1), late, model_rates(TOY), step_s=10.0) == pytest.approx(100.0)


def test_nothing_to_bound() -> None:
    assert jct_lp(v100s(1), [], model_rates(TOY)) is None
    never = [SimJob("big", 0.0, "toy", 4, 100.0)]  # four GPUs on a one-GPU fabric
    assert jct_lp(v100s(1), never, model_rates(TOY)) is None


@pytest.mark.parametrize("seed", [0, 1])
def test_no_policy_beats_the_bound(seed: int) -> None:
    # Gavel-style jobs on Gavel's cluster: every policy's average JCT is at least the bound
    fab = load_fabric("gavel-48")
    jobs = generate_gavel(30, 900.0, seed, GAVEL)
    bound = jct_lp(fab, jobs, model_rates(GAVEL))
    assert bound is not None
    alone = [j.work / max(GAVEL.rate(j.job_type, m, j.gpus) for m in ("V100", "P100", "K80"))
             for j in jobs]  # fmt: skip
    assert bound >= sum(alone) / len(alone)  # at least as tight as the run-alone bound
    for policy in ("fifo", "srtf", "hetero-jct"):
        sim = Simulation(fab, jobs, make_scheduler(policy, GAVEL), GAVEL, restart_s=0.0,
                         spread_penalty=False, jct_bound=True)  # fmt: skip
        m = compute(sim.run())
        assert m.jct_lp_avg_s == pytest.approx(bound)
        assert m.jct.avg is not None and m.jct.avg >= bound - 1e-6, policy


def test_no_bound_beside_a_policy_that_packs() -> None:
    # packed pairs do more than a device's worth of work: the bound does not hold for them
    jobs = [SimJob("a", 0.0, "toy", 1, 100.0)]
    sim = Simulation(v100s(1), jobs, make_scheduler("hetero-jct-packed", TOY), TOY,
                     jct_bound=True)  # fmt: skip
    assert compute(sim.run()).jct_lp_avg_s is None
