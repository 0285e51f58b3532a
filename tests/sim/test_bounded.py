"""The engine on streamed traces with bounded memory: the same results as with a list and
every record kept, pinned to the figures the list-based engine gave before streaming, and
memory per job that does not grow with the trace."""

from __future__ import annotations

import dataclasses
import gc
import itertools
import os
from pathlib import Path
from typing import Any

import pytest

from accelnet.fabric import Fabric, load_fabric
from accelnet.sched import Scheduler
from accelnet.sim.columns import JobTable, SampleTable
from accelnet.sim.engine import Simulation
from accelnet.sim.metrics import compute
from accelnet.sim.policies import make_scheduler
from accelnet.sim.records import JobOutcome, Sample, SimResult
from accelnet.sim.throughput import ThroughputModel
from accelnet.sim.traces import generate_gavel, iter_gavel, mtbf_failures
from accelnet.sim.workload import SimJob
from tests.sim.test_engine import RATES, fabric, job

MODEL = ThroughputModel.gavel()


def scenario_jobs() -> list[SimJob]:
    """300 generated jobs with priorities, two tenants and some deadlines."""
    return [
        dataclasses.replace(j, priority=(i * 7) % 3, tenant="ab"[i % 2],
                            deadline=j.arrival + 20000.0 if i % 5 == 0 else None)
        for i, j in enumerate(generate_gavel(300, 120.0, 11, MODEL))
    ]  # fmt: skip


def scenario(jobs: Any, **kw: Any) -> tuple[Simulation, SimResult]:
    """Priorities with preemption, random failures, checkpoints, on gavel-48."""
    fab = load_fabric("gavel-48")
    fails = mtbf_failures(sorted(fab.devices), 30000.0, 60000.0, 2, 3600.0)
    sim = Simulation(fab, jobs, make_scheduler("priority-preempt", MODEL), MODEL,
                     failures=fails, checkpoint_s=20.0, seed=2, **kw)  # fmt: skip
    return sim, sim.run()


def outcomes(result: SimResult) -> list[JobOutcome]:
    return list(result.jobs)


def samples(result: SimResult) -> list[Sample]:
    return list(result.samples)


def test_streamed_and_forgetting_equals_the_list_and_keeping() -> None:
    _, kept = scenario(scenario_jobs())
    sim, streamed = scenario(iter(scenario_jobs()), forget_finished=True, total=300)
    assert outcomes(streamed) == outcomes(kept)
    assert samples(streamed) == samples(kept)
    a, b = compute(kept), compute(streamed)
    assert dataclasses.replace(a, wall_s=0, peak_rss_mb=0, events_per_s=None) == (
        dataclasses.replace(b, wall_s=0, peak_rss_mb=0, events_per_s=None)
    )
    assert streamed.makespan_lp_s == kept.makespan_lp_s is not None
    # nothing of an ended job is left behind
    assert not sim.store.jobs() and not sim.store.events() and not sim._specs
    assert not sim.backend.use and not sim._row


def test_figures_pinned_to_the_engine_before_streaming() -> None:
    # the list-based engine (every JobOutcome and Sample an object, the store keeping
    # every record and event) gave these on this scenario. The counts below are exact; the
    # aggregates are means and sums over hundreds of floats, whose last bits follow the
    # summation order and the CPU's libm (0.29190315052015464 on one machine,
    # 0.2919031505201546 on another), so they are compared to 1e-9 relative: far below any
    # change a scheduling difference would make (one job moved changes them by >1e-4).
    _, result = scenario(iter(scenario_jobs()), forget_finished=True)
    m = compute(result)
    got = (m.jct.avg, m.makespan_s, m.utilization, m.queueing.avg, m.rho_avg, m.energy_j)
    # (re-pinned when Gavel's measured zeros became infeasible, issue 27: five ResNet-50
    # bs128 gangs no longer run on K80s, where they were measured at 0 steps/s; one of
    # them, which had failed there, now holds 4 P100s for 148k s and the queue behind it
    # grows: it was 420,156 s avg JCT, 6,058,907 s makespan, 2 failed)
    assert got == pytest.approx((
        538852.637204946, 6544670.173611378, 0.2698339683245327, 388199.74592171895,
        0.4290456674657, 23934530206.42542,
    ), rel=1e-9)  # fmt: skip
    assert (m.preemptions, m.failures, m.deadline_missed, m.jobs_finished, m.jobs_failed) == (
        439, 75, 55, 299, 1,
    )  # fmt: skip


def test_tables_read_like_lists() -> None:
    sim = Simulation(fabric(1, 2), iter([job("a", 0, 100), job("b", 10, 50, gpus=2)]),
                     Scheduler(), RATES, forget_finished=True)  # fmt: skip
    result = sim.run()
    assert isinstance(result.jobs, JobTable) and isinstance(result.samples, SampleTable)
    a, b = result.jobs
    assert (a.id, a.end, a.device_s, b.first_start, b.end) == ("a", 100, {"V100": 100}, 100, 125)
    assert result.jobs[-1] == b and result.jobs[0:1] == [a] and len(result.jobs) == 2
    assert result.samples[0].busy == 1 and result.samples[-1].busy == 0
    with pytest.raises(IndexError):
        result.jobs[2]


def test_unarrived_jobs_of_a_stream_are_unfinished_rows() -> None:
    jobs = (job(f"j{i}", 10.0 * i, 5) for i in range(10))
    result = Simulation(fabric(1, 1), jobs, Scheduler(), RATES).run(until=42)
    # j4 (40 s) runs at 42 s; j5..j9 have not arrived: rows of their own all the same
    assert [o.state for o in result.jobs] == ["succeeded"] * 4 + ["unfinished"] * 6
    assert (result.jobs[4].first_start, result.jobs[4].run_s) == (40, 2)
    assert [o.id for o in result.jobs] == [f"j{i}" for i in range(10)]
    assert compute(result).jobs_unfinished == 6


def test_a_stream_out_of_order_or_with_a_duplicate_is_an_error() -> None:
    late = iter([job("a", 10, 1), job("b", 5, 1)])
    with pytest.raises(ValueError, match="not in arrival order: job 'b' arrives at 5 s"):
        Simulation(fabric(1, 1), late, Scheduler(), RATES).run()
    twice = iter([job("a", 0, 1), job("a", 5, 1)])
    with pytest.raises(ValueError, match="job id 'a' appears twice"):
        Simulation(fabric(1, 1), twice, Scheduler(), RATES, forget_finished=True).run()


def test_progress_counts_a_stream() -> None:
    seen: list[tuple[int, int]] = []
    jobs = iter_gavel(50, 30.0, 1, MODEL)
    Simulation(load_fabric("gavel-48"), jobs, make_scheduler("fifo", MODEL), MODEL,
               total=50).run(progress=lambda d, t: seen.append((d, t)))  # fmt: skip
    assert seen[-1] == (50, 50)


def _rss_mb() -> float:
    return int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/statm").exists(), reason="needs /proc (Linux)")
def test_memory_per_job_stays_bounded() -> None:
    """12,000 generated jobs on 64 GPUs: from the first 3,000 to the end the process grows
    by about 1 KB per further job (the table rows, ids and samples, and what the allocator
    keeps of the queue's peak); the engine used to keep a spec, a record and a dozen events
    per job (9 KB and more, measured with tracemalloc)."""
    fab: Fabric = load_fabric("fat-tree:hosts=8,gpus_per_host=8,model=V100")
    n = 12_000
    lam = 114_686 / (64 * 0.7)  # the generator's mean GPU-seconds per job, 70% load
    marks: dict[int, float] = {}

    def progress(done: int, total: int) -> None:
        for k in (3000, n):
            if done >= k and k not in marks:
                gc.collect()
                marks[k] = _rss_mb()

    sim = Simulation(fab, iter_gavel(n, lam, 3, MODEL), make_scheduler("fifo", MODEL), MODEL,
                     forget_finished=True, total=n)  # fmt: skip
    result = sim.run(progress=progress)
    progress(n, n)
    assert len(result.jobs) == n and compute(result).jobs_finished == n
    per_job_kb = (marks[n] - marks[3000]) * 1024 / (n - 3000)
    assert per_job_kb < 2.5, f"{per_job_kb:.2f} KB per job"  # it was 9 KB and more
    assert isinstance(result.jobs, JobTable) and result.jobs.nbytes() / n < 200
    assert len(result.samples) <= 3 * n
    assert not sim.store.jobs() and not sim._specs and not sim.backend.use
    assert next(itertools.islice(result.jobs, 1)).id == "gen-00000"
