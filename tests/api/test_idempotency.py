"""``Idempotency-Key`` on ``POST /api/v1/jobs``: a retried request answers the jobs the
first one made (in-process, over a real embedded cluster), and the key outlives a
SIGKILLed server (a real ``accelnet serve`` process)."""

from __future__ import annotations

import signal
import time
import uuid
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from accelnet.api.admission import KEY_KEEP_S
from accelnet.api.app import create_app
from accelnet.api.context import ApiContext, ApiSettings, build_context
from accelnet.api.db import ApiDb
from accelnet.api.port import LocalClusterPort
from accelnet.runtime.control.sqlite_store import SqliteStore
from accelnet.runtime.sdk import LocalCluster
from tests.api.conftest import TOKENS, issue_tokens, spawn

with warnings.catch_warnings():  # starlette would rather have httpx2 behind its TestClient
    warnings.filterwarnings("ignore", message="Using `httpx` with `starlette.testclient`")
    from fastapi.testclient import TestClient

V1 = "/api/v1"
KEY = "Idempotency-Key"


class ShiftedClock:
    """The wall clock, moved on by ``shift`` seconds (to outlive a key's 24 h)."""

    def __init__(self) -> None:
        self.shift = 0.0

    def now(self) -> float:
        return time.time() + self.shift


@dataclass
class Api:
    ctx: ApiContext
    client: TestClient
    tokens: dict[str, str]
    clock: ShiftedClock

    def post(self, who: str, body: object, key: str | None = None) -> httpx.Response:
        headers = {"Authorization": f"Bearer {self.tokens[who]}"}
        if key is not None:
            headers[KEY] = key
        return self.client.post(f"{V1}/jobs", json=body, headers=headers)

    def named(self, name: str) -> list[str]:
        """The ids of every job of that name (admin's view)."""
        headers = {"Authorization": f"Bearer {self.tokens['admin']}"}
        r = self.client.get(f"{V1}/jobs", params={"name": name, "limit": 500}, headers=headers)
        assert r.status_code == 200, r.text
        return [j["id"] for j in r.json()["jobs"]]


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Api]:
    """Every device drained: the jobs stay queued (nothing runs)."""
    tmp = tmp_path_factory.mktemp("idem")
    db = ApiDb(tmp / "state.db")
    tokens = issue_tokens(db, TOKENS[:3])  # admin (ops), alice (vision), bob (speech)
    cluster = LocalCluster("pcie-4xL4", workdir=tmp / "work", db=tmp / "state.db")
    cluster.start()
    port = LocalClusterPort(cluster)
    clock = ShiftedClock()
    ctx = build_context(port, db, clock, ApiSettings(poll_s=0.05, rate=0))
    with TestClient(create_app(ctx), raise_server_exceptions=False) as client:
        admin = {"Authorization": f"Bearer {tokens['admin']}"}
        for dev in client.get(f"{V1}/devices", headers=admin).json()["devices"]:
            assert client.post(f"{V1}/devices/{dev['id']}/drain", headers=admin).status_code == 202
        yield Api(ctx, client, tokens, clock)
    port.close()
    cluster.close()
    db.close()


def job(name: str) -> dict[str, object]:
    return {"name": name, "run": "true", "resources": {"accelerators": "any:1"}}


def ids(r: httpx.Response) -> list[str]:
    assert r.status_code == 201, r.text
    return [j["id"] for j in r.json()["jobs"]]


def test_the_same_key_answers_the_same_jobs_and_makes_none(api: Api) -> None:
    key = str(uuid.uuid4())
    first = api.post("alice", job("idem-one"), key)
    assert "idempotent-replayed" not in first.headers
    again = api.post("alice", job("idem-one"), key)
    assert ids(again) == ids(first)
    assert again.headers["idempotent-replayed"] == "true"
    # the body is compared as JSON: keys in another order are the same request
    reordered = {"resources": {"accelerators": "any:1"}, "run": "true", "name": "idem-one"}
    assert ids(api.post("alice", reordered, key)) == ids(first)
    assert api.named("idem-one") == ids(first)
    assert ids(api.post("alice", job("idem-one"))) != ids(first)  # no key: a new job


def test_a_drawn_id_that_meets_an_earlier_job_is_drawn_again(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    from accelnet.api import admission

    first = ids(api.post("alice", job("idem-draw")))
    taken = uuid.UUID(first[0].rsplit("-", 1)[1] + "0" * 24)
    other = uuid.UUID("a" * 32)
    draws = iter([taken, other])
    real = uuid.uuid4
    monkeypatch.setattr(admission.uuid, "uuid4", lambda: next(draws, None) or real())
    again = ids(api.post("alice", job("idem-draw")))  # drew the first one's id, then another
    assert again == ["idem-draw-aaaaaaaa"]
    assert sorted(api.named("idem-draw")) == sorted([*first, *again])


def test_a_batch_is_replayed_whole_in_order(api: Api) -> None:
    key = str(uuid.uuid4())
    body = {"jobs": [job("idem-b0"), job("idem-b1"), job("idem-b2")]}
    first = ids(api.post("alice", body, key))
    assert len(first) == 3
    assert ids(api.post("alice", body, key)) == first
    assert [len(api.named(f"idem-b{i}")) for i in range(3)] == [1, 1, 1]


def test_the_same_key_with_another_body_is_a_conflict_naming_the_key(api: Api) -> None:
    key = "order-7"
    made = ids(api.post("alice", job("idem-c"), key))
    r = api.post("alice", job("idem-c-other"), key)
    assert r.status_code == 409, r.text
    err = r.json()["error"]
    assert err["code"] == "conflict" and err["field"] == KEY
    assert "'order-7'" in err["message"] and made[0] in err["message"]
    assert api.named("idem-c-other") == []


def test_keys_are_per_tenant(api: Api) -> None:
    key = "shared-key"
    alice = ids(api.post("alice", job("idem-t"), key))
    bob = ids(api.post("bob", job("idem-t"), key))
    assert alice != bob
    assert ids(api.post("bob", job("idem-t"), key)) == bob
    assert sorted(api.named("idem-t")) == sorted(alice + bob)


@pytest.mark.parametrize(
    ("key", "words"),
    [("", "empty"), ("k" * 256, "at most 255"), ("a\tb", "control character")],
)
def test_bad_keys_are_invalid_naming_the_header(api: Api, key: str, words: str) -> None:
    r = api.post("alice", job("idem-bad"), key)
    assert r.status_code == 422, r.text
    err = r.json()["error"]
    assert err["code"] == "invalid" and err["field"] == KEY and words in err["message"]
    assert api.named("idem-bad") == []


def test_a_refused_request_keeps_no_key(api: Api) -> None:
    key = str(uuid.uuid4())
    bad = {"name": "idem-r", "run": "true", "resources": {"accelerators": "H9:1"}}
    assert api.post("alice", bad, key).status_code == 422
    assert len(ids(api.post("alice", job("idem-r"), key))) == 1  # the key was not used


def test_a_key_is_forgotten_after_24_hours(api: Api) -> None:
    key = str(uuid.uuid4())
    first = ids(api.post("alice", job("idem-old"), key))
    api.clock.shift = KEY_KEEP_S + 60
    try:
        later = ids(api.post("alice", job("idem-old"), key))
        assert later != first
        assert ids(api.post("alice", job("idem-old"), key)) == later
    finally:
        api.clock.shift = 0.0


def test_a_key_outlives_a_killed_server(tmp_path: Path) -> None:
    srv = spawn(tmp_path, "--fabric", "pcie-4xL4", "--log-level", "warning")
    body = {"jobs": [job("idem-k0"), job("idem-k1")]}
    try:
        with srv.client("alice") as c:
            first = ids(c.post(f"{V1}/jobs", json=body, headers={KEY: "survivor"}))
    finally:
        srv.proc.send_signal(signal.SIGKILL)
        srv.proc.wait(30)
    again = spawn(tmp_path, "--fabric", "pcie-4xL4", "--log-level", "warning")
    try:
        with again.client("alice") as c:
            r = c.post(f"{V1}/jobs", json=body, headers={KEY: "survivor"})
            assert ids(r) == first and r.headers["idempotent-replayed"] == "true"
            r = c.post(f"{V1}/jobs", json=job("idem-k2"), headers={KEY: "survivor"})
            assert r.status_code == 409
    finally:
        assert again.stop() == 0
    store = SqliteStore(srv.db)
    try:
        assert sorted(r.id for r in store.jobs()) == sorted(first)
        kept = store.idempotency_records()
        assert [(k.tenant, k.key, k.jobs) for k in kept] == [("vision", "survivor", tuple(first))]
    finally:
        store.close()
