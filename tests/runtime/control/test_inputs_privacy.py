"""``inputs`` names are the submitting tenant's own: a name resolves to the last job of that
name of the job's tenant, never to another tenant's job (both stores)."""

from __future__ import annotations

from pathlib import Path

import pytest

from accelnet.runtime.control.inputs import resolve
from accelnet.runtime.control.sqlite_store import SqliteStore
from accelnet.runtime.control.store import JobRecord, MemoryStore, Store
from accelnet.sched import JobSpec, JobState


@pytest.fixture(params=["memory", "sqlite"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    if request.param == "memory":
        return MemoryStore()
    return SqliteStore(tmp_path / "a.db")


def spec(name: str, tenant: str, **more: object) -> JobSpec:
    return JobSpec.model_validate({"name": name, "run": "true", "tenant": tenant, **more})


def test_a_name_resolves_among_the_tenants_own_jobs(store: Store) -> None:
    store.add(JobRecord("common-a", spec("common", "a"), JobState.PENDING, 1.0))
    store.add(JobRecord("common-b", spec("common", "b"), JobState.PENDING, 2.0))
    store.add(JobRecord("only-b", spec("onlyb", "b"), JobState.PENDING, 3.0))
    mine = store.latest_named("common", "a")
    assert mine is not None and mine.id == "common-a"
    theirs = store.latest_named("common", "b")
    assert theirs is not None and theirs.id == "common-b"
    assert store.latest_named("onlyb", "a") is None
    anyone = store.latest_named("common")  # no tenant: any tenant's, the last
    assert anyone is not None and anyone.id == "common-b"
    assert resolve(spec("use", "a", inputs={"d": "common"}), store) == (("d", "common-a"),)
    with pytest.raises(LookupError) as theirs_only:
        resolve(spec("use", "a", inputs={"d": "onlyb"}), store)
    with pytest.raises(LookupError) as nobody:
        resolve(spec("use", "a", inputs={"d": "nobody"}), store)
    assert str(theirs_only.value).replace("onlyb", "nobody") == str(nobody.value)
