"""The scaling rule and the choice of device model, without a cluster."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from accelnet.serve.autoscale import Autoscaler, ModelFigures, Observation, pick_model
from accelnet.serve.spec import ServiceSpec


def spec(**fields: Any) -> ServiceSpec:
    body: dict[str, Any] = {"name": "svc", "run": "serve", "replicas": {"min": 1, "max": 4},
                            "goal": {"p95_ms": 100, "target_inflight": 2},
                            "scaling": {"up_s": 1, "down_s": 5, "idle_s": 30}}  # fmt: skip
    body.update(fields)
    return ServiceSpec.model_validate(body)


def obs(now: float, replicas: int, load: float = 0.0, p95: float | None = None,
        last: float | None = 0.0, queued: int = 0) -> Observation:  # fmt: skip
    return Observation(now, replicas, replicas, load, round(load), queued, p95, last)


def test_it_grows_to_the_load_after_up_s_and_shrinks_one_at_a_time_after_down_s() -> None:
    a = Autoscaler(spec())
    assert a.target(obs(0.0, 1, load=7.0)) == 1  # 7 in flight / 2 each = 4, not yet
    assert a.target(obs(0.5, 1, load=7.0)) == 1
    assert a.target(obs(1.0, 1, load=7.0)) == 4  # the need lasted up_s: all at once
    assert a.target(obs(2.0, 4, load=1.0)) == 4  # surplus: the timer starts
    assert a.target(obs(6.9, 4, load=1.0)) == 4
    assert a.target(obs(7.0, 4, load=1.0)) == 3  # one replica after down_s
    assert a.target(obs(8.0, 3, load=1.0)) == 3  # and the next one waits as long again
    assert a.target(obs(8.5, 3, load=3.0)) == 3  # a burst back: 2 needed, 3 kept
    assert a.target(obs(12.0, 3, load=1.0)) == 2
    assert a.target(obs(30.0, 1, load=50.0)) == 1
    assert a.target(obs(31.0, 1, load=50.0)) == 4  # never above max


def test_a_p95_near_the_goal_adds_a_replica_before_it_is_broken() -> None:
    a = Autoscaler(spec())
    assert a.need(obs(0.0, 2, load=2.0, p95=70.0)) == 1  # under 80 % of 100 ms: load decides
    assert a.need(obs(0.0, 2, load=2.0, p95=85.0)) == 3  # over it: one more than there are


def test_only_a_service_allowed_to_reaches_zero_after_idle_s() -> None:
    zero = Autoscaler(spec(replicas={"min": 0, "max": 2}, scaling={"down_s": 0, "idle_s": 30}))
    assert zero.target(obs(10.0, 1, last=0.0)) == 1  # idle 10 s of 30: one stays
    assert zero.target(obs(31.0, 1, last=0.0)) == 0
    assert zero.target(obs(40.0, 0, queued=1, last=40.0)) == 1  # a request waits: one starts
    one = Autoscaler(spec(scaling={"down_s": 0, "idle_s": 30}))
    assert one.target(obs(100.0, 1, last=0.0)) == 1


FIG = {"H100": ModelFigures("H100", 990.0, 700.0), "L4": ModelFigures("L4", 121.0, 72.0),
       "T4": ModelFigures("T4", 65.0, 70.0)}  # fmt: skip


def test_a_new_replica_goes_where_the_goal_is_met_at_the_least_energy_per_request() -> None:
    s = spec(goal={"p95_ms": 100})
    # nothing measured: the least power per unit of speed (L4: 0.6 W, H100 0.7, T4 1.1)
    assert pick_model(s, {"H100": 1, "L4": 1, "T4": 1}, FIG) == "L4"
    # measured 40 ms on the L4: an L4 meets a 100 ms goal (40 <= 50) at 2.9 J a request
    measured = {**FIG, "L4": ModelFigures("L4", 121.0, 72.0, 0.040)}
    assert pick_model(s, {"H100": 1, "L4": 1, "T4": 1}, measured) == "L4"
    # a tighter goal (60 ms: at most 30 ms each) only the H100 meets (40 * 121 / 990 = 5 ms)
    tight = spec(goal={"p95_ms": 60})
    assert pick_model(tight, {"H100": 1, "L4": 1, "T4": 1}, measured) == "H100"
    # none meets it: the fastest with a free device; none free: None
    assert pick_model(tight, {"H100": 0, "L4": 1, "T4": 1}, measured) == "L4"
    assert pick_model(tight, {"H100": 0, "L4": 0}, measured) is None
    # only the models the service accepts
    t4_only = spec(resources={"accelerators": {"any_of": ["T4"], "count": 1}})
    assert pick_model(t4_only, {"H100": 1, "T4": 1}, FIG) == "T4"


@pytest.mark.parametrize(
    ("fields", "where"),
    [({"replicas": {"min": 3, "max": 2}}, "replicas"), ({"goal": {"p95_ms": 0}}, "p95_ms"),
     ({"readiness": {"path": "healthz"}}, "path"), ({"name": "a b"}, "name")],
)  # fmt: skip
def test_a_bad_service_spec_names_what_is_wrong(fields: dict[str, Any], where: str) -> None:
    with pytest.raises(ValidationError, match=where):
        spec(**fields)


def test_a_replica_is_a_job_on_the_chosen_model_with_its_port() -> None:
    s = spec(resources={"accelerators": {"any_of": ["L4", "T4"], "count": 1}}, tenant="team-a")
    job = s.replica(3, "T4", 41000)
    assert job.name == "svc.3" and job.tenant == "team-a" and job.port == 41000
    assert job.resources.accelerators.models == ("T4",)
    assert s.replica(4, None, 41001).resources.accelerators.models == ("L4", "T4")
