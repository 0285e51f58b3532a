from __future__ import annotations

import gc
import math
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from accelnet.runtime.sdk import LocalCluster
from accelnet.runtime.spec_memo import SpecMemo, _plain, plain_key
from accelnet.sched import JobSpec


def _fields(**extra: Any) -> dict[str, Any]:
    return {"name": "t", "run": "true", "resources": {"accelerators": "any:1"}, **extra}


def test_the_same_fields_give_the_same_spec_and_other_fields_their_own() -> None:
    memo = SpecMemo()
    a = memo.spec(_fields(priority=3))
    assert memo.spec(_fields(priority=3)) is a
    assert a == JobSpec.model_validate(_fields(priority=3))
    other = memo.spec(_fields(priority=4))
    assert other is not a and other.priority == 4
    env = memo.spec(_fields(env={"A": "1", "B": "2"}))
    assert dict(env.env) == {"A": "1", "B": "2"}
    assert memo.spec(_fields(env={"B": "2", "A": "1"})) is not env  # order kept exactly
    assert len(memo) == 4


def test_a_value_is_told_from_one_equal_to_it_of_another_type() -> None:
    # 1 == 1.0 == True, but a strict field takes only one of them: each is validated
    memo = SpecMemo()
    assert memo.spec(_fields(priority=1)).priority == 1
    with pytest.raises(ValidationError, match="priority"):
        memo.spec(_fields(priority=True))
    with pytest.raises(ValidationError, match="priority"):
        memo.spec(_fields(priority=1.0))
    assert plain_key(0.0) != plain_key(-0.0)
    assert plain_key([1]) != plain_key((1,))


def test_a_spec_not_kept_is_made_of_exactly_the_fields_given() -> None:
    # the memo validates what it rebuilds from its key: every value and type as given
    value = {"a": [1, True, None, -0.0, 2.5, ("x", [])], "b": {"c": "d"}}
    again = _plain(plain_key(value))
    assert again == value
    assert type(again["a"][1]) is bool and type(again["a"][5]) is tuple
    assert math.copysign(1.0, again["a"][3]) == -1.0


def test_bad_fields_raise_every_time_and_are_not_kept() -> None:
    memo = SpecMemo()
    for _ in range(2):
        with pytest.raises(ValidationError, match="bogus"):
            memo.spec(_fields(bogus=1))
    assert len(memo) == 0


def test_fields_that_are_not_plain_are_validated_afresh() -> None:
    class Text(str):
        pass

    memo = SpecMemo()
    first = memo.spec(_fields(run=Text("true")))
    assert memo.spec(_fields(run=Text("true"))) is not first
    assert plain_key({1: "a"}) is None and plain_key({"a": object()}) is None
    assert len(memo) == 0


def test_a_cyclic_or_very_deep_value_gets_pydantics_error_not_a_recursion_error() -> None:
    memo = SpecMemo()
    loop: dict[str, Any] = {}
    loop["again"] = loop
    deep: Any = "x"
    for _ in range(2_000):
        deep = [deep]
    assert plain_key(loop) is None and plain_key(deep) is None
    for bad in (_fields(workload={"throughput": loop}), _fields(env={"A": deep})):
        with pytest.raises(ValidationError):
            memo.spec(bad)
    assert len(memo) == 0


def test_an_entrypoints_arguments_are_never_taken_from_an_earlier_call() -> None:
    # a spec holds an entrypoint's arguments as the caller's objects: a kept spec could show
    # what such an object became after its call, not what this call passes
    memo = SpecMemo()
    xs = [1]
    fields = {"name": "e", "entrypoint": {"function": "m:f", "kwargs": {"xs": xs}}}
    memo.spec(fields)
    xs.append(2)
    again = memo.spec({"name": "e", "entrypoint": {"function": "m:f", "kwargs": {"xs": [1]}}})
    assert again.entrypoint is not None and again.entrypoint.kwargs == {"xs": [1]}
    assert len(memo) == 0


def test_submits_from_many_threads_share_specs_and_never_trip_on_each_other() -> None:
    # a full memo drops its oldest at every new spec: threads doing that at once must not
    # drop the same one twice (KeyError) or read it while it changes; a spec asked for
    # twice in a row by one thread is one spec (unless another thread dropped it between)
    memo = SpecMemo(size=4)
    errors: list[BaseException] = []
    shared = [0]
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)

    go = threading.Barrier(8)

    def submit(start: int) -> None:
        try:
            go.wait(10)
            for k in range(12_000):
                fields = _fields(priority=(start + k) % 16)
                if memo.spec(fields) is memo.spec(fields):
                    shared[0] += 1
        except BaseException as e:
            errors.append(e)

    try:
        threads = [threading.Thread(target=submit, args=(t,), daemon=True) for t in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
    finally:
        sys.setswitchinterval(old)
    assert not any(t.is_alive() for t in threads)  # none stuck (a deadlock)
    assert errors == [] and len(memo) <= 4
    assert shared[0] > 0
    assert memo.spec(_fields(priority=15)).priority == 15


def test_it_keeps_at_most_its_size_dropping_the_oldest() -> None:
    memo = SpecMemo(size=3)
    first = memo.spec(_fields(priority=0))
    for p in range(1, 4):
        memo.spec(_fields(priority=p))
    assert len(memo) == 3
    assert memo.spec(_fields(priority=0)) is not first  # dropped, made again
    assert memo.spec(_fields(priority=3)).priority == 3


def _noop() -> None:
    return None


def test_submitted_calls_share_their_spec_and_leave_no_spec_objects_per_job(
    tmp_path: Path,
) -> None:
    with LocalCluster(workdir=tmp_path / "w") as cluster:
        gc.collect()
        before = _specs_alive()
        jobs = [cluster.submit(_noop, priority=2) for _ in range(20)]
        for job in jobs:
            job.result(60)
        specs = {id(cluster.store.get(job.id).spec) for job in jobs}
        assert len(specs) == 1
        other = cluster.submit(_noop, priority=3)
        other.result(60)
        assert cluster.store.get(other.id).spec.priority == 3
        gc.collect()
        assert _specs_alive() - before <= 2  # the two specs, not one per job


def _specs_alive() -> int:
    return sum(type(o) is JobSpec for o in gc.get_objects())  # no __class__ read: no warning
