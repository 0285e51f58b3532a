"""Space sharing live: two jobs that say they keep most of their rate beside another are
packed by ``hetero-jct-packed`` onto the one GPU, real worker processes both running at
once, each told its half share."""

from __future__ import annotations

from pathlib import Path

import accelnet
from accelnet.runtime.control.invariants import check
from accelnet.sched import JobSpec
from accelnet.sched.policies import make_scheduler

from ..sim.test_engine import fabric


def spec(name: str, steps: float, out: Path, colocated: bool) -> JobSpec:
    record = f"echo $ACCELNET_DEVICE $ACCELNET_DEVICE_SHARE $(date +%s.%N) > {out}/{name}.start"
    workload = {"total_steps": steps, "throughput": {"V100": 1000.0}}
    if colocated:
        workload["colocated"] = {"V100": 0.9}
    return JobSpec.model_validate({
        "name": name, "run": f"{record}; sleep 1.5; date +%s.%N > {out}/{name}.end",
        "resources": {"accelerators": "V100:1"}, "workload": workload,
    })  # fmt: skip


def run(tmp_path: Path, colocated: bool) -> dict[str, list[str]]:
    out = tmp_path / "out"
    out.mkdir()
    sched = make_scheduler("hetero-jct-packed", round_s=600.0)
    with accelnet.local(fabric=fabric(1, 1), workdir=tmp_path / "w", scheduler=sched) as c:
        # both arrive before the controller's next decision (holding its lock), as two jobs
        # submitted together would: otherwise a could start alone before b is there
        with c._lock:
            for n, steps in (("a", 800.0), ("b", 1200.0)):
                c.controller.submit(spec(n, steps, out, colocated), None, n)
            c.controller.wake()
        c.backend.wakeup()
        jobs = [c.job(n) for n in "ab"]
        assert all(j.wait(timeout=60).state.value == "succeeded" for j in jobs)
    return {n: [*(out / f"{n}.start").read_text().split(), (out / f"{n}.end").read_text().strip()]
            for n in "ab"}  # fmt: skip


def test_jobs_that_share_well_run_together_on_one_gpu(tmp_path: Path) -> None:
    got = run(tmp_path, colocated=True)
    (dev_a, share_a, start_a, end_a), (dev_b, share_b, start_b, end_b) = got["a"], got["b"]
    assert dev_a == dev_b and share_a == share_b == "0.5"
    assert float(start_b) < float(end_a) and float(start_a) < float(end_b)  # at once


def test_jobs_without_the_hint_run_one_after_the_other(tmp_path: Path) -> None:
    got = run(tmp_path, colocated=False)
    (_, share_a, start_a, end_a), (_, share_b, start_b, end_b) = got["a"], got["b"]
    assert share_a == share_b == "1"
    assert float(end_a) <= float(start_b) or float(end_b) <= float(start_a)


def test_two_half_shares_of_one_gpu_run_at_once(tmp_path: Path) -> None:
    # two jobs asking for half a V100 each share the one V100 (this crashed the controller
    # when the local backend ran one task per device)
    out = tmp_path / "out"
    out.mkdir()
    with accelnet.local(fabric=fabric(1, 1), workdir=tmp_path / "w") as c:
        jobs = [c.submit_spec(JobSpec.model_validate({
            "name": n, "resources": {"accelerators": "V100:0.5"},
            "run": f"echo $ACCELNET_DEVICE_SHARE $(date +%s.%N) > {out}/{n}; sleep 1; "
                   f"date +%s.%N >> {out}/{n}",
        }), job_id=n) for n in "ab"]  # fmt: skip
        assert [j.wait(timeout=60).state.value for j in jobs] == ["succeeded", "succeeded"]
        # a third takes the half the first one left: the log records each release, so the
        # audit of the device's holders finds no over-commit
        third = c.submit_spec(
            JobSpec.model_validate(
                {"name": "c", "resources": {"accelerators": "V100:0.5"}, "run": "true"}
            ),
            job_id="c",
        )
        assert third.wait(timeout=60).state.value == "succeeded"
        check(c.store)
        released = [e.detail for e in c.store.events() if e.detail.endswith("released it")]
        assert len(released) == 3
        allocated = [e.detail for e in c.store.events() if "allocated to" in e.detail]
        assert sorted(d.split(": ", 1)[1] for d in allocated) == [
            f"allocated to {n} (share 0.5)" for n in "abc"
        ]
    (share_a, start_a, end_a), (share_b, start_b, end_b) = ((out / n).read_text().split()
                                                            for n in "ab")  # fmt: skip
    assert share_a == share_b == "0.5"
    assert float(start_b) < float(end_a) and float(start_a) < float(end_b)  # at once
