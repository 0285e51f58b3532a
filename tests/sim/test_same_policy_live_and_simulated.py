"""One scheduler class, one decision sequence: live on worker processes and simulated."""

from __future__ import annotations

from pathlib import Path

import accelnet
from accelnet.sched import JobSpec, Scheduler
from accelnet.sched.shortcuts import Walk
from accelnet.sched.snapshot import Decision
from accelnet.sim.engine import Simulation
from accelnet.sim.workload import SimJob

from .test_engine import RATES, fabric


class Recording(Scheduler):
    """A scheduler that remembers every start it decides (job, devices)."""

    def __init__(self) -> None:
        super().__init__("fifo", "best-fit")
        self.starts: list[tuple[str, tuple[str, ...]]] = []

    def walk(self, w: Walk) -> Decision:
        decision = super().walk(w)
        self.starts += [(s.job, s.placement.devices) for s in decision.starts]
        return decision


def spec(jid: str, gpus: int, secs: float) -> JobSpec:
    return JobSpec.model_validate(
        {"name": jid, "run": f"sleep {secs}", "resources": {"accelerators": f"any:{gpus}"}}
    )


# (id, gpus, seconds): b needs both GPUs and waits for a; c starts beside a
WORKLOAD = [("a", 1, 1.2), ("b", 2, 0.3), ("c", 1, 0.3)]


def test_the_live_controller_and_the_simulator_make_the_same_decisions(tmp_path: Path) -> None:
    fab = fabric(1, 2)
    live = Recording()
    with accelnet.local(fabric=fab, workdir=tmp_path, scheduler=live) as cluster:
        jobs = [
            cluster.submit_spec(spec(jid, gpus, secs), job_id=jid) for jid, gpus, secs in WORKLOAD
        ]
        assert all(j.wait(timeout=60).state.value == "succeeded" for j in jobs)
    simulated = Recording()
    # the same jobs in virtual time: "toy" runs 1 step/s per V100, 2 on two
    sim_jobs = [SimJob(jid, 0.0, "toy", gpus, secs * gpus) for jid, gpus, secs in WORKLOAD]
    result = Simulation(fab, sim_jobs, simulated, RATES).run()
    assert all(o.state == "succeeded" for o in result.jobs)
    assert [job for job, _ in live.starts] == ["a", "c", "b"]
    assert simulated.starts == live.starts
