"""The lower bounds printed beside a simulation hold for the policy they are printed for:
packed policies (space sharing) get a makespan bound that allows for packing, and the LP
bound on the average JCT is never looser than the run-alone bound, in bounded size."""

from __future__ import annotations

from typing import Any

import pytest

from accelnet.fabric import build_fabric, load_fabric, parse_spec
from accelnet.sim import bounds
from accelnet.sim.engine import Simulation
from accelnet.sim.metrics import compute
from accelnet.sim.policies import make_scheduler, model_rates
from accelnet.sim.throughput import ThroughputModel
from accelnet.sim.traces import load_trace
from accelnet.sim.workload import SimJob

MODEL = ThroughputModel.gavel()
R18 = "ResNet-18 (batch size 64)"  # Gavel measured two of them sharing a V100 at 1.0 each


def eight_jobs() -> list[SimJob]:
    rate = MODEL.rate(R18, "V100", 1)
    return [SimJob(f"j{i}", 0.0, R18, 1, rate * 3600) for i in range(8)]  # an hour alone


@pytest.mark.parametrize("policy", ["hetero-fair-packed", "hetero-jct-packed", "hetero-fair"])
def test_the_makespan_bound_holds_for_packed_and_unpacked_policies(policy: str) -> None:
    # eight one-hour jobs on two V100s: alone they need four hours of both devices; packed
    # two to a device (each at its full rate, as Gavel measured) they need two. The area
    # bound printed for a packed policy used to be the unpacked 4 h: above its makespan
    fab = load_fabric("fat-tree:hosts=1,gpus_per_host=2,model=V100")
    result = Simulation(fab, eight_jobs(), make_scheduler(policy, MODEL), MODEL,
                        restart_s=0.0, spread_penalty=False).run()  # fmt: skip
    m = compute(result)
    assert m.jobs_finished == 8
    assert m.makespan_lb_s is not None and m.makespan_s >= m.makespan_lb_s
    if policy.endswith("-packed"):
        assert m.makespan_s < 4 * 3600  # it did pack: faster than any unpacked schedule
        assert result.makespan_lp_s is None and result.pair_gain == pytest.approx(2.0)
        assert any("packs jobs" in n for n in result.notes)
    else:
        assert m.makespan_lb_s == pytest.approx(4 * 3600) and result.pair_gain == 1.0


def test_the_jct_lp_bound_is_never_below_the_run_alone_bound() -> None:
    # one 100 s job: the relaxation counts its work from its interval's start and gives
    # 50 s; the run-alone bound is 100 s, and a bound is the larger of the two
    fab = load_fabric("fat-tree:hosts=1,gpus_per_host=2,model=V100")
    job = SimJob("a", 0.0, R18, 1, MODEL.rate(R18, "V100", 1) * 100)
    assert bounds.jct_lp(fab, [job], model_rates(MODEL)) == pytest.approx(100.0)


def test_the_jct_lp_stays_within_its_size_on_a_long_trace(monkeypatch: pytest.MonkeyPatch) -> None:
    hosts = [{"name": f"{m.lower()}-{{i:02d}}", "count": 12, "devices": f"1x{m}",
              "nics": "1xEth-10G", "network": "leaf0"}
             for m in ("V100", "P100", "K80")]  # fmt: skip
    spec = {"name": "g12", "switches": [{"name": "leaf0", "kind": "leaf"}], "hosts": hosts}
    fab = build_fabric(parse_spec(spec, "g12"), "g12")
    jobs, _ = load_trace("gavel-gen:n=300,lam=1200,seed=1", MODEL, 1)
    sizes: list[int] = []
    solve = bounds.linprog

    def counting(c: Any, **kw: Any) -> Any:
        sizes.append(len(c))
        return solve(c, **kw)

    monkeypatch.setattr(bounds, "linprog", counting)
    found = bounds.jct_lp(fab, jobs, model_rates(MODEL))
    # at 360 s intervals this trace would need several times the cap: it took 2.8 GB and
    # 55 s with up to 2,000,000 columns; 100,000 keep the process under 300 MB
    (n,) = sizes
    assert 0 < n <= bounds.JCT_LP_MAX_COLUMNS <= 100_000
    alone = [j.work / max(MODEL.rate(j.job_type, m, j.gpus) for m in ("V100", "P100", "K80"))
             for j in jobs]  # fmt: skip
    assert found is not None and found >= sum(alone) / len(alone) - 1e-6


def test_the_printed_jct_lp_bound_is_never_below_the_printed_run_alone_bound() -> None:
    # two V100s on two hosts: a 2-GPU gang spans them, and with the spread penalty it runs
    # alone slower than at the LP's one-host rate: the LP's own figure (5,000 s at the
    # one-host rate, against 21,713 s spread) used to be printed below the run-alone bound
    fab = load_fabric("fat-tree:hosts=2,gpus_per_host=1,model=V100")
    lm = "LM (batch size 20)"
    job = SimJob("a", 0.0, lm, 2, MODEL.rate(lm, "V100", 2) * 5000)
    result = Simulation(fab, [job], make_scheduler("fifo", MODEL), MODEL,
                        jct_bound=True).run()  # fmt: skip
    m = compute(result)
    assert result.jct_lp_s is not None and m.jct_lb_avg_s is not None
    assert result.jct_lp_s < m.jct_lb_avg_s  # the LP's own figure, at the one-host rate
    assert m.jct_lp_avg_s == m.jct_lb_avg_s <= m.jct.avg
