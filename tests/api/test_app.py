"""The API in-process (FastAPI's TestClient over a real embedded cluster): the logic the
process tests do not reach quickly."""

from __future__ import annotations

import contextlib
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from accelnet.api.app import create_app
from accelnet.api.context import ApiContext, ApiSettings, build_context
from accelnet.api.db import ApiDb
from accelnet.api.port import LocalClusterPort
from accelnet.runtime.clock import SystemClock
from accelnet.runtime.sdk import LocalCluster
from accelnet.sched import Scheduler
from accelnet.sched.policies import make_scheduler
from tests.api.conftest import TOKENS, issue_tokens

with warnings.catch_warnings():  # starlette would rather have httpx2 behind its TestClient
    warnings.filterwarnings("ignore", message="Using `httpx` with `starlette.testclient`")
    from fastapi.testclient import TestClient

V1 = "/api/v1"


@dataclass
class Api:
    ctx: ApiContext
    client: TestClient
    tokens: dict[str, str]

    def as_(self, who: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.tokens[who]}"}

    def wait(self, job: str, states: set[str], timeout: float = 20.0) -> dict[str, object]:
        end = time.monotonic() + timeout
        while True:
            body = self.client.get(f"{V1}/jobs/{job}", headers=self.as_("admin")).json()
            if body["state"] in states or time.monotonic() > end:
                assert body["state"] in states, body
                return dict(body)
            time.sleep(0.05)


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Api]:
    tmp = tmp_path_factory.mktemp("app")
    db = ApiDb(tmp / "state.db")
    tokens = issue_tokens(db, TOKENS[:3])  # admin (ops), alice (vision), bob (speech)
    cluster = LocalCluster("mixed-lab", workdir=tmp / "work", db=tmp / "state.db")
    cluster.start()
    port = LocalClusterPort(cluster)
    ctx = build_context(port, db, SystemClock(), ApiSettings(poll_s=0.05))
    with TestClient(create_app(ctx), raise_server_exceptions=False) as client:
        yield Api(ctx, client, tokens)
    port.close()
    cluster.close()
    db.close()


def test_a_policy_change_keeps_the_queue(api: Api) -> None:
    c, admin = api.client, api.as_("admin")
    jetsons = [
        d["id"]
        for d in c.get(f"{V1}/devices", headers=admin).json()["devices"]
        if d["model"].startswith("Jetson")
    ]
    for dev in jetsons:
        assert c.post(f"{V1}/devices/{dev}/drain", headers=admin).status_code == 202
    job = c.post(
        f"{V1}/jobs",
        headers=api.as_("alice"),
        json={
            "name": "edge",
            "run": "echo edge",
            "resources": {"accelerators": "Jetson-AGX-Orin:1"},
        },
    )
    jid = job.json()["jobs"][0]["id"]
    assert api.wait(jid, {"admitted"})["reason"]
    r = c.put(f"{V1}/policy", headers=admin, json={"policy": "las", "round_s": 5})
    assert r.json() == {**r.json(), "policy": "las", "round_s": 5.0}
    queued = c.get(f"{V1}/jobs/{jid}", headers=admin).json()
    assert queued["state"] == "admitted" and queued["reason"]
    for dev in jetsons:
        assert c.post(f"{V1}/devices/{dev}/undrain", headers=admin).status_code == 202
    api.wait(jid, {"succeeded"})
    c.put(f"{V1}/policy", headers=admin, json={"policy": "fifo"})


def test_admins_submit_for_any_known_tenant_and_inputs_stay_in_the_tenant(api: Api) -> None:
    c = api.client
    r = c.post(
        f"{V1}/jobs",
        headers=api.as_("admin"),
        json={"name": "forbob", "run": "true", "tenant": "speech"},
    )
    theirs = r.json()["jobs"][0]
    assert r.status_code == 201 and theirs["tenant"] == "speech"
    r = c.post(
        f"{V1}/jobs",
        headers=api.as_("alice"),
        json={"name": "steal", "run": "true", "inputs": {"x": theirs["id"]}},
    )
    err = r.json()["error"]
    assert (r.status_code, err["field"]) == (422, "inputs.x") and "tenant vision" in err["message"]
    r = c.post(
        f"{V1}/jobs",
        headers=api.as_("bob"),
        json={"name": "mine", "run": "true", "inputs": {"x": "forbob"}},
    )
    assert r.json()["jobs"][0]["inputs"] == {"x": theirs["id"]}


def test_logs_of_each_attempt(api: Api) -> None:
    script = (
        'if [ -e "$ACCELNET_OUTPUT/once" ]; then echo second; else mkdir -p '
        '"$ACCELNET_OUTPUT"; touch "$ACCELNET_OUTPUT/once"; echo first; exit 3; fi'
    )
    r = api.client.post(
        f"{V1}/jobs",
        headers=api.as_("alice"),
        json={"name": "flaky", "run": script, "max_retries": 1},
    )
    jid = r.json()["jobs"][0]["id"]
    job = api.wait(jid, {"succeeded"})
    assert (job["attempts"], job["failures"]) == (2, 1)
    logs = f"{V1}/jobs/{jid}/logs"
    assert api.client.get(logs, headers=api.as_("alice")).text == "second\n"
    first = api.client.get(logs, params={"attempt": 1}, headers=api.as_("alice"))
    assert first.text == "first\n" and first.headers["x-accelnet-attempt"] == "1"
    assert api.client.get(logs, params={"attempt": 3}, headers=api.as_("alice")).status_code == 422
    with api.client.stream("GET", logs, params={"follow": True}, headers=api.as_("alice")) as s:
        assert "".join(s.iter_text()) == "second\n"  # finished: all of it, then the end
    # the failed attempt's error names its log as the API does, not the server's path
    events = api.client.get(f"{V1}/jobs/{jid}/events", headers=api.as_("alice")).json()
    requeued = [e["detail"] for e in events["events"] if "requeued" in e["detail"]]
    assert requeued and "(log: attempt 1, rank 0, stderr)" in requeued[0]
    assert not [e for e in events["events"] if "/logs/" in e["detail"]]


def test_a_failed_jobs_error_names_its_log_without_the_servers_paths(api: Api) -> None:
    r = api.client.post(f"{V1}/jobs", headers=api.as_("alice"),
                        json={"name": "broken", "run": "exit 4"})  # fmt: skip
    job = api.wait(r.json()["jobs"][0]["id"], {"failed"})
    assert job["error"].endswith("(log: attempt 1, rank 0, stderr)"), job["error"]
    assert "/" not in job["error"].split("(log: ")[1]


def test_non_admins_see_device_events_without_details(api: Api) -> None:
    c = api.client
    c.post(f"{V1}/jobs", headers=api.as_("bob"), json={"name": "seen", "run": "true"})
    mine = c.get(f"{V1}/events?limit=5000", headers=api.as_("alice")).json()["events"]
    full = c.get(f"{V1}/events?limit=5000", headers=api.as_("admin")).json()["events"]
    devices = [e for e in mine if e["job"] is None]
    assert devices and all(": " not in e["detail"] for e in devices)
    assert any(": " in e["detail"] for e in full if e["job"] is None)
    bobs = {e["job"] for e in full if e["job"] and e["job"].startswith("seen-")}
    assert bobs and not bobs & {e["job"] for e in mine}


def test_event_stream_resumes_from_the_last_event_id(api: Api) -> None:
    c, who = api.client, api.as_("admin")
    last = c.get(f"{V1}/events?limit=5000", headers=who).json()["next"]
    looks = iter([False, True])  # one look at the log, then the server "stops"
    api.ctx.stopping = lambda: next(looks, True)
    try:
        headers = {**who, "Accept": "text/event-stream", "Last-Event-ID": str(last - 2)}
        with c.stream("GET", f"{V1}/events", headers=headers) as s:
            text = "".join(s.iter_text())
    finally:
        api.ctx.stopping = lambda: False
    ids = [int(line[4:]) for line in text.splitlines() if line.startswith("id: ")]
    assert text.startswith("retry: 2000\n\n") and ids[:2] == [last - 1, last]


def test_unexpected_errors_are_500_without_details(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    def boom(*_: object) -> None:
        raise RuntimeError("the secret internals")

    monkeypatch.setattr(api.ctx.jobs, "list", boom)
    r = api.client.get(f"{V1}/jobs", headers=api.as_("alice"))
    assert r.status_code == 500 and r.json()["error"]["code"] == "internal"
    assert "secret" not in r.text


def test_refused_calls_are_audited(api: Api) -> None:
    c = api.client
    before = c.get(f"{V1}/audit", headers=api.as_("admin")).json()["next"]
    c.post(f"{V1}/jobs", headers=api.as_("alice"), content=b"x" * (2 << 20))
    c.put(f"{V1}/policy", headers=api.as_("alice"), json={"policy": "fifo"})
    entries = c.get(f"{V1}/audit", params={"since": before}, headers=api.as_("admin")).json()
    got = [(e["status"], e["detail"], e["role"]) for e in entries["entries"]]
    assert got == [(413, "too_large", None), (403, "forbidden", "user")]


def test_tenant_quotas_reach_the_scheduler(api: Api) -> None:
    c, admin = api.client, api.as_("admin")
    r = c.put(f"{V1}/tenants/speech", headers=admin, json={"quota": {"*": 4}, "weight": 3})
    assert r.status_code == 200
    session = api.ctx.port.cluster.controller.session  # type: ignore[attr-defined]
    assert session.tenants["speech"].weight == 3 and "vision" in session.tenants
    c.put(f"{V1}/tenants/speech", headers=admin, json={"quota": {}, "weight": 1})
    assert dict(api.ctx.port.cluster.controller.session.tenants) == {}  # type: ignore[attr-defined]


def test_metrics_need_the_scrape_token_when_one_is_set(api: Api) -> None:
    from accelnet.api.server import build_app

    with TestClient(build_app(api.ctx, "s3cret"), raise_server_exceptions=False) as c:
        assert c.get("/metrics").status_code == 401
        assert c.get("/metrics", headers={"Authorization": "Bearer wrong"}).status_code == 401
        ok = c.get("/metrics", headers={"Authorization": "Bearer s3cret"})
        assert ok.status_code == 200
        assert "accelnet_jobs" in ok.text
    with TestClient(build_app(api.ctx), raise_server_exceptions=False) as c:
        assert c.get("/metrics").status_code == 200  # no token set: open (loopback)


@contextlib.contextmanager
def policy_api(
    tmp_path: Path, scheduler: Scheduler | None = None, **settings: Any
) -> Iterator[tuple[TestClient, LocalClusterPort, dict[str, str]]]:
    """A real cluster on mixed-lab behind the API (``scheduler``: its own, else fifo), an
    admin's headers: what the policy tests talk to."""
    db = ApiDb(tmp_path / "state.db")
    tokens = issue_tokens(db, TOKENS[:1])  # admin
    cluster = LocalCluster("mixed-lab", workdir=tmp_path / "work", scheduler=scheduler)
    cluster.start()
    port = LocalClusterPort(cluster)
    ctx = build_context(port, db, SystemClock(), ApiSettings(poll_s=0.05, **settings))
    try:
        with TestClient(create_app(ctx), raise_server_exceptions=False) as c:
            yield c, port, {"Authorization": f"Bearer {tokens['admin']}"}
    finally:
        port.close()
        cluster.close()
        db.close()


def test_a_policy_change_sets_or_keeps_the_reallocation_interval(tmp_path: Path) -> None:
    las = make_scheduler("las", min_reallocation_s=1920.0)
    with policy_api(tmp_path, las) as (c, port, admin):
        assert c.get(f"{V1}/policy", headers=admin).json()["min_reallocation_s"] == 1920.0
        # another round policy keeps the server's interval; one may set another
        r = c.put(f"{V1}/policy", headers=admin, json={"policy": "hetero-fair"})
        assert r.status_code == 200 and r.json()["min_reallocation_s"] == 1920.0
        assert port.scheduler().min_reallocation_s == 1920.0  # type: ignore[attr-defined]
        r = c.put(f"{V1}/policy", headers=admin,
                  json={"policy": "hetero-fair", "min_reallocation_s": 360})  # fmt: skip
        assert r.status_code == 200 and r.json()["min_reallocation_s"] == 360.0
        # a queue policy allocates nothing: none shown, and asking for one is a 422
        r = c.put(f"{V1}/policy", headers=admin, json={"policy": "fifo"})
        assert r.status_code == 200 and r.json()["min_reallocation_s"] is None
        r = c.put(f"{V1}/policy", headers=admin,
                  json={"policy": "fifo", "min_reallocation_s": 60})  # fmt: skip
        assert r.status_code == 422 and "min_reallocation_s" in r.text
        r = c.put(f"{V1}/policy", headers=admin,
                  json={"policy": "las", "min_reallocation_s": -1})  # fmt: skip
        assert r.status_code == 422 and "min_reallocation_s" in r.text
        assert c.get(f"{V1}/policy", headers=admin).json()["policy"] == "fifo"  # unchanged


def test_a_server_started_on_a_queue_policy_keeps_its_interval_for_round_ones(
    tmp_path: Path,
) -> None:
    with policy_api(tmp_path, min_reallocation_s=1920.0) as (c, _, admin):  # fifo
        assert c.get(f"{V1}/policy", headers=admin).json()["min_reallocation_s"] is None
        r = c.put(f"{V1}/policy", headers=admin, json={"policy": "hetero-fair"})
        assert r.status_code == 200 and r.json()["min_reallocation_s"] == 1920.0


def test_a_policy_change_keeps_the_servers_reservation_wait(tmp_path: Path) -> None:
    with policy_api(tmp_path, make_scheduler("fifo", reserve_after_s=600.0)) as (c, port, admin):
        assert c.get(f"{V1}/policy", headers=admin).json()["reserve_after_s"] == 600.0
        r = c.put(f"{V1}/policy", headers=admin, json={"policy": "priority"})
        assert r.status_code == 200 and r.json()["reserve_after_s"] == 600.0
        assert port.scheduler().reserve_after_s == 600.0  # it used to be dropped
        r = c.put(f"{V1}/policy", headers=admin, json={"policy": "las", "round_s": 5})
        assert r.json()["reserve_after_s"] is None  # a round policy plans afresh
        r = c.put(f"{V1}/policy", headers=admin, json={"policy": "fifo"})
        assert r.json()["reserve_after_s"] == 600.0  # and back: the server's again
