"""The simulator's backend keeps the backends' event protocol (tests/runtime/backend_contract.py,
``EventContract``): a task starts first and ends exactly once, a cancel ends a gang once and
later cancels do nothing, tasks sharing a device both finish; in virtual time, the clock moved
from one event to the next."""

from __future__ import annotations

from typing import Any

import pytest

from accelnet.fabric import load_fabric
from accelnet.runtime.backend import TaskEvent, TaskSpec
from accelnet.runtime.clock import ManualClock
from accelnet.sched import JobSpec
from accelnet.sim.backend import SimBackend
from accelnet.sim.throughput import ThroughputModel
from tests.runtime.backend_contract import T0, EventContract, EventHarness

FABRIC = "examples/fabrics/l4-pair.yaml"
STEPS_SHORT, STEPS_LONG = 10.0, 1e12  # a few seconds; longer than any test moves the clock
MAX_EVENTS = 1_000  # of clock moves before a wait gives up (instead of hanging)


class TestSimBackendEvents(EventContract):
    @pytest.fixture
    def protocol(self) -> EventHarness:
        fabric = load_fabric(FABRIC)
        clock = ManualClock(T0)
        specs: dict[str, JobSpec] = {}
        backend = SimBackend(fabric, clock, ThroughputModel.gavel(), specs.__getitem__)

        def maker(steps: float) -> Any:
            def make(
                tid: str, device: str, job: str, gang: tuple[str, ...], share: float
            ) -> TaskSpec:
                model = fabric.devices[device].model.name
                asked = f"{model}:{share:g}" if share < 1 else f"{model}:{len(gang)}"
                body = {"name": job, "run": "x", "resources": {"accelerators": asked},
                        "workload": {"total_steps": steps}}  # fmt: skip
                specs[job] = JobSpec.model_validate(body)
                return TaskSpec(task_id=tid, job_id=job, rank=gang.index(device),
                                world=len(gang), device=device, devices=gang, share=share,
                                command="x", log_dir="")  # fmt: skip

            return make

        def wait(done: Any) -> list[TaskEvent]:
            events: list[TaskEvent] = []
            for _ in range(MAX_EVENTS):
                events += backend.poll(0.0)
                if done(events):
                    return events
                at = backend.next_time()
                assert at is not None, f"nothing more will happen; events so far: {events}"
                clock.set(max(at, clock.now()))
            raise AssertionError(f"gave up after {MAX_EVENTS} events: {events}")

        def quiet() -> list[TaskEvent]:
            left = backend.poll(0.0)
            for _ in range(MAX_EVENTS):
                at = backend.next_time()
                if at is None or at > clock.now() + 1e6:  # a long task still running
                    return left
                clock.set(max(at, clock.now()))
                left += backend.poll(0.0)
            return left

        devices = tuple(sorted(fabric.devices))[:4]
        assert len(devices) == 4
        return EventHarness(backend, devices, maker(STEPS_SHORT), maker(STEPS_LONG),  # type: ignore[arg-type]
                            wait, quiet)  # fmt: skip
