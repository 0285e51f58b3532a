"""The API against a real ``accelnet serve`` process on 127.0.0.1 (mixed-lab, emulated):
every endpoint, every role, tenant isolation, quotas, bad payloads, limits, audit."""

from __future__ import annotations

import json
import time

import httpx
import pytest
from typer.testing import CliRunner

from accelnet.cli.main import app
from tests.api.conftest import Server, wait_state

V1 = "/api/v1"
LONG = "sleep 30"


def submit(c: httpx.Client, body: dict, status: int = 201) -> dict:
    r = c.post(f"{V1}/jobs", json=body)
    assert r.status_code == status, r.text
    return r.json()


def one(c: httpx.Client, **spec: object) -> str:
    """Submit one job; its id."""
    return str(submit(c, dict(spec))["jobs"][0]["id"])


def error(r: httpx.Response, status: int, code: str) -> dict:
    assert r.status_code == status, r.text
    body = r.json()["error"]
    assert body["code"] == code, body
    return dict(body)


def test_health_and_openapi_need_no_token(server: Server) -> None:
    with server.client() as c:
        assert c.get("/healthz").json() == {"status": "ok", "version": "0.1.0", "controller": True}
        paths = c.get("/openapi.json").json()["paths"]
        assert c.get("/docs").status_code == 200
    expected = {
        "/api/v1/jobs",
        "/api/v1/jobs/{job_id}",
        "/api/v1/jobs/{job_id}/cancel",
        "/api/v1/jobs/{job_id}/events",
        "/api/v1/jobs/{job_id}/logs",
        "/api/v1/devices",
        "/api/v1/devices/{device_id}",
        "/api/v1/devices/{device_id}/drain",
        "/api/v1/devices/{device_id}/undrain",
        "/api/v1/devices/{device_id}/reset",
        "/api/v1/devices/{device_id}/probe",
        "/api/v1/fabric",
        "/api/v1/tenants",
        "/api/v1/tenants/{name}",
        "/api/v1/policy",
        "/api/v1/events",
        "/api/v1/audit",
        "/api/v1/whoami",
        "/healthz",
    }
    assert expected <= set(paths)


# (method, path, body, lowest role); the bodies are harmless for the roles allowed
ENDPOINTS = [
    ("GET", "/jobs", None, "viewer"),
    ("GET", "/devices", None, "viewer"),
    ("GET", "/devices/h100box/gpu0", None, "viewer"),
    ("GET", "/fabric", None, "viewer"),
    ("GET", "/tenants", None, "viewer"),
    ("GET", "/policy", None, "viewer"),
    ("GET", "/events?since=0&limit=5", None, "viewer"),
    ("GET", "/whoami", None, "viewer"),
    (
        "POST",
        "/jobs",
        {"name": "bad", "run": "true", "resources": {"accelerators": "H9:1"}},
        "user",
    ),
    ("GET", "/services", None, "viewer"),
    ("GET", "/services/nosuch", None, "viewer"),
    (
        "POST",
        "/services",
        {"name": "bad", "run": "true", "resources": {"accelerators": "H9:1"}},
        "user",
    ),
    ("PUT", "/services/nosuch", {"run": "true"}, "user"),
    ("DELETE", "/services/nosuch", None, "user"),
    ("GET", "/audit", None, "admin"),
    ("PUT", "/policy", {"policy": "fifo"}, "admin"),
    ("PUT", "/tenants/vision", {}, "admin"),
    ("POST", "/devices/nosuch/drain", None, "admin"),
    ("POST", "/devices/nosuch/undrain", None, "admin"),
    ("POST", "/devices/nosuch/reset", None, "admin"),
    ("POST", "/devices/nosuch/probe", None, "admin"),
]
RANK = {"viewer": 0, "user": 1, "admin": 2}
ROLE_OF = {"val": "viewer", "alice": "user", "admin": "admin"}


@pytest.mark.parametrize(("method", "path", "body", "needs"), ENDPOINTS)
def test_every_endpoint_checks_the_role(
    server: Server, method: str, path: str, body: dict | None, needs: str
) -> None:
    with server.client() as anon:
        error(anon.request(method, V1 + path, json=body), 401, "unauthenticated")
        bad = {"Authorization": "Bearer acn_000000000000_" + "0" * 64}
        error(anon.request(method, V1 + path, json=body, headers=bad), 401, "unauthenticated")
    for who, role in ROLE_OF.items():
        with server.client(who) as c:
            r = c.request(method, V1 + path, json=body)
        if RANK[role] < RANK[needs]:
            error(r, 403, "forbidden")
        else:  # allowed: it answers (the harmless bodies end in 2xx, 404 or 422)
            assert r.status_code in (200, 202, 404, 422), (who, r.text)


def test_a_job_runs_with_its_logs_and_events(server: Server) -> None:
    with server.client("alice") as c:
        out = submit(c, {"name": "hello", "run": "echo hello; echo oops >&2"})["jobs"][0]
        assert (out["tenant"], out["name"]) == ("vision", "hello")
        job = wait_state(c, out["id"], {"succeeded"})
        assert job["devices"] and job["attempts"] == 1 and job["reason"] is None
        r = c.get(f"{V1}/jobs/{out['id']}/logs")
        assert r.text == "hello\n" and r.headers["x-accelnet-offset"] == "6"
        assert c.get(f"{V1}/jobs/{out['id']}/logs?stream=err").text == "oops\n"
        assert c.get(f"{V1}/jobs/{out['id']}/logs?offset=2").text == "llo\n"
        error(c.get(f"{V1}/jobs/{out['id']}/logs?rank=1"), 422, "invalid")
        kinds = [e["kind"] for e in c.get(f"{V1}/jobs/{out['id']}/events").json()["events"]]
        assert kinds[0] == "job:pending" and kinds[-1] == "job:succeeded"
        assert c.get(f"{V1}/whoami").json()["tenant"] == "vision"


def test_logs_follow_streams_until_the_job_ends(server: Server) -> None:
    with server.client("alice") as c:
        jid = one(c, name="count", run="for i in 1 2 3; do echo $i; sleep 0.2; done")
        with c.stream("GET", f"{V1}/jobs/{jid}/logs", params={"follow": "true"}) as r:
            assert r.status_code == 200
            text = "".join(r.iter_text())
        assert text == "1\n2\n3\n"
        assert c.get(f"{V1}/jobs/{jid}").json()["state"] == "succeeded"


def test_a_batch_with_inputs_runs_in_order(server: Server) -> None:
    with server.client("alice") as c:
        jobs = submit(
            c,
            {
                "jobs": [
                    {
                        "name": "make",
                        "run": 'mkdir -p "$ACCELNET_OUTPUT" && echo 41 > "$ACCELNET_OUTPUT/x"',
                    },
                    {
                        "name": "use",
                        "inputs": {"src": "make"},
                        "run": 'cat "$ACCELNET_INPUT_SRC/x"',
                    },
                ]
            },
        )["jobs"]
        assert jobs[1]["inputs"] == {"src": jobs[0]["id"]}
        wait_state(c, jobs[1]["id"], {"succeeded"})
        assert c.get(f"{V1}/jobs/{jobs[1]['id']}/logs").text == "41\n"
        r = c.post(
            f"{V1}/jobs",
            json={
                "jobs": [
                    {"name": "late", "inputs": {"a": "early"}, "run": "true"},
                    {"name": "early", "run": "true"},
                ]
            },
        )
        assert error(r, 422, "invalid")["field"] == "jobs[0].inputs.a"


def test_tenants_are_isolated(server: Server) -> None:
    with server.client("alice") as alice, server.client("bob") as bob:
        jid = one(alice, name="secret", run=LONG)
        wait_state(alice, jid, {"running"})
        for path in (f"/jobs/{jid}", f"/jobs/{jid}/events", f"/jobs/{jid}/logs"):
            assert error(bob.get(V1 + path), 404, "not_found")["message"] == f"no job '{jid}'"
        error(bob.post(f"{V1}/jobs/{jid}/cancel"), 404, "not_found")
        assert jid not in [j["id"] for j in bob.get(f"{V1}/jobs?limit=500").json()["jobs"]]
        assert bob.get(f"{V1}/jobs?tenant=vision").json()["jobs"] == []
        events = bob.get(f"{V1}/events?since=0&limit=5000").json()["events"]
        assert all(jid not in (e["job"] or "") and jid not in e["detail"] for e in events)
        devices = bob.get(f"{V1}/devices").json()["devices"]
        busy = [d for d in devices if d["busy"]]
        assert busy and all(jid not in d["jobs"] for d in devices)
        assert [t["name"] for t in bob.get(f"{V1}/tenants").json()["tenants"]] == ["speech"]
        error(
            bob.post(f"{V1}/jobs", json={"name": "x", "run": "true", "tenant": "vision"}),
            403,
            "forbidden",
        )
        with server.client("val") as viewer:  # same tenant, but read-only
            assert viewer.get(f"{V1}/jobs/{jid}").json()["id"] == jid
            error(viewer.post(f"{V1}/jobs/{jid}/cancel"), 403, "forbidden")
        with server.client("admin") as admin:
            assert admin.get(f"{V1}/jobs/{jid}").json()["tenant"] == "vision"
            assert jid in [
                d for dev in admin.get(f"{V1}/devices").json()["devices"] for d in dev["jobs"]
            ]
        r = alice.post(f"{V1}/jobs/{jid}/cancel")
        assert r.status_code == 202 and r.json()["id"] == jid
        wait_state(alice, jid, {"cancelled"})
        assert (
            "finished" in error(alice.post(f"{V1}/jobs/{jid}/cancel"), 409, "conflict")["message"]
        )


def test_quotas_are_enforced_at_admission(server: Server) -> None:
    with server.client("admin") as admin, server.client("bob") as bob:
        r = admin.put(f"{V1}/tenants/speech", json={"quota": {"L4": 1}, "weight": 2})
        assert r.status_code == 200 and r.json()["quota"] == {"L4": 1.0}
        err = error(
            bob.post(
                f"{V1}/jobs",
                json={"name": "big", "run": "true", "resources": {"accelerators": "L4:2"}},
            ),
            422,
            "over_quota",
        )
        assert err["field"] == "resources.accelerators"
        assert err["message"] == (
            "tenant speech is over its quota: L4 quota 1 device, 0 in use "
            "or queued; this job needs 2 more"
        )
        first = one(bob, name="one", run=LONG, resources={"accelerators": "L4:1"})
        err = error(
            bob.post(
                f"{V1}/jobs",
                json={
                    "jobs": [{"name": "two", "run": "true", "resources": {"accelerators": "L4:1"}}]
                },
            ),
            422,
            "over_quota",
        )
        assert "L4 quota 1 device, 1 in use or queued" in err["message"]
        assert err["field"] == "jobs[0].resources.accelerators"
        one(bob, name="elsewhere", run="true", resources={"accelerators": "T4:1"})  # no limit
        tenants = {t["name"]: t for t in admin.get(f"{V1}/tenants").json()["tenants"]}
        assert tenants["speech"]["committed"]["L4"] == 1.0 and tenants["speech"]["weight"] == 2
        error(admin.put(f"{V1}/tenants/speech", json={"quota": {"H900": 1}}), 422, "invalid")
        bob.post(f"{V1}/jobs/{first}/cancel")
        wait_state(bob, first, {"cancelled"})
        one(bob, name="again", run="true", resources={"accelerators": "L4:1"})  # room again
        admin.put(f"{V1}/tenants/speech", json={"quota": {}, "weight": 1})


def test_bad_payloads_name_the_field(server: Server) -> None:
    with server.client("alice") as c:
        cases = [
            (
                {"name": "x", "run": "true", "resources": {"accelerators": "H100:0"}},
                "resources.accelerators",
            ),
            (
                {
                    "jobs": [
                        {"name": "ok", "run": "true"},
                        {"name": "x", "run": "true", "resources": {"accelerators": "T4:1.5"}},
                    ]
                },
                "jobs[1].resources.accelerators",
            ),
            ({"name": "x", "run": "true", "resourcez": {}}, "resourcez"),
            ({"run": "true"}, "name"),
            ({"name": "x", "run": "true", "priority": 5000}, "priority"),
            (
                {"name": "x", "run": "true", "resources": {"accelerators": "MI300X:1"}},
                "resources.accelerators",
            ),
            ({"name": "x", "run": "true", "inputs": {"a": "nosuchjob"}}, "inputs.a"),
            ({"jobs": []}, "jobs"),
        ]
        for body, field in cases:
            assert error(c.post(f"{V1}/jobs", json=body), 422, "invalid")["field"] == field
        err = error(c.post(f"{V1}/jobs", content=b"{not json"), 422, "invalid")
        assert "not valid JSON" in err["message"]
        assert error(c.get(f"{V1}/jobs?limit=0"), 422, "invalid")["field"] == "limit"
        assert error(c.get(f"{V1}/jobs?state=runing"), 422, "invalid")["field"] == "state"
        assert error(c.get(f"{V1}/jobs?cursor=zzz"), 422, "invalid")["field"] == "cursor"
        assert "no such path" in error(c.get(f"{V1}/nothing"), 404, "not_found")["message"]
    with server.client("admin") as admin:
        r = admin.put(f"{V1}/policy", json={"policy": "fastest"})
        assert error(r, 422, "invalid")["field"] == "policy"
        r = admin.put(f"{V1}/tenants/x", json={"weight": -1})
        assert error(r, 422, "invalid")["field"] == "weight"
        err = error(
            admin.post(f"{V1}/jobs", json={"name": "x", "run": "true", "tenant": "nobody"}),
            422,
            "invalid",
        )
        assert err["field"] == "tenant" and "unknown tenant" in err["message"]


def test_oversize_bodies_are_refused(server: Server) -> None:
    big = {"name": "big", "run": "true", "env": {"X": "a" * 70_000}}
    with server.client("alice") as c:
        error(c.post(f"{V1}/jobs", json=big), 413, "too_large")

        def chunks():  # no Content-Length: refused once 64 KiB have been read
            for _ in range(100):
                yield b"x" * 4096

        error(c.post(f"{V1}/jobs", content=chunks()), 413, "too_large")


def test_pages_of_jobs_newest_first(server: Server) -> None:
    with server.client("alice") as c:
        ids = [j["id"] for j in submit(c, {"jobs": [{"name": "page", "run": "true"}] * 5})["jobs"]]
        seen, cursor = [], None
        while True:
            params = {"name": "page", "limit": 2, **({"cursor": cursor} if cursor else {})}
            body = c.get(f"{V1}/jobs", params=params).json()
            seen += [j["id"] for j in body["jobs"]]
            cursor = body["next"]
            if cursor is None:
                break
        assert seen == ids[::-1]
        done = c.get(f"{V1}/jobs", params={"state": "succeeded,failed", "limit": 500}).json()
        assert all(j["state"] in ("succeeded", "failed") for j in done["jobs"])


def test_device_operations(server: Server) -> None:
    dev = "t4box/gpu1"
    with server.client("admin") as c:
        r = c.post(f"{V1}/devices/{dev}/drain", json={"reason": "fan noise"})
        assert r.status_code == 202 and r.json()["state"] == "drained", r.text
        assert r.json()["answer"]["ok"]
        assert c.get(f"{V1}/devices/t4box%2Fgpu1").json()["phase"] == "held"
        r = c.post(f"{V1}/devices/{dev}/probe", json={"level": 1})
        assert r.status_code == 202 and r.json()["answer"]["findings"], r.text
        r = c.post(f"{V1}/devices/{dev}/undrain")
        assert r.status_code == 202 and r.json()["state"] == "ready", r.text
        r = c.post(f"{V1}/devices/{dev}/reset")
        assert r.status_code == 202 and r.json()["answer"]["ok"], r.text
        error(c.get(f"{V1}/devices/nosuch"), 404, "not_found")
        fabric = c.get(f"{V1}/fabric").json()
        assert fabric["schema"] == "accelnet.fabric/v1"
        assert dev in [d["id"] for h in fabric["hosts"] for d in h["devices"]]
        kinds = {e["kind"] for e in c.get(f"{V1}/events?limit=5000").json()["events"]}
        assert {"device:drained", "remedy:drain"} <= kinds


def test_policy_can_be_read_and_changed(server: Server) -> None:
    with server.client("val") as viewer, server.client("admin") as admin:
        assert viewer.get(f"{V1}/policy").json()["policy"] == "fifo"
        r = admin.put(f"{V1}/policy", json={"policy": "priority", "placement": "first-fit"})
        assert (r.json()["policy"], r.json()["placement"]) == ("priority", "first-fit")
        with server.client("alice") as alice:  # jobs still run under the new policy
            wait_state(alice, one(alice, name="after", run="true"), {"succeeded"})
        r = admin.put(f"{V1}/policy", json={"policy": "fifo", "placement": "best-fit"})
        assert viewer.get(f"{V1}/policy").json()["policy"] == "fifo"


def test_events_stream_as_server_sent_events(server: Server) -> None:
    with server.client("alice") as c:
        since = c.get(f"{V1}/events?since=0&limit=5000").json()["next"]
        headers = {"Accept": "text/event-stream"}
        with c.stream("GET", f"{V1}/events", params={"since": since}, headers=headers) as r:
            assert r.headers["content-type"].startswith("text/event-stream")
            jid = one(c, name="watched", run="true")
            lines = r.iter_lines()
            assert next(lines) == "retry: 2000"
            kinds = []
            for line in lines:
                if line.startswith("data: "):
                    ev = json.loads(line.removeprefix("data: "))
                    assert ev["seq"] > since
                    if ev["job"] == jid:
                        kinds.append(ev["kind"])
                if "job:succeeded" in kinds:
                    break
        assert kinds[0] == "job:pending"


def test_every_change_is_audited_without_secrets(server: Server) -> None:
    with server.client("admin") as admin:
        start = admin.get(f"{V1}/audit?since=0&limit=5000").json()["next"]
        with server.client("bob") as bob:
            jid = one(bob, name="audited", run="true")
        with server.client() as anon:
            anon.post(f"{V1}/jobs", json={}, headers={"Authorization": "Bearer nonsense"})
        entries = admin.get(f"{V1}/audit", params={"since": start}).json()["entries"]
        ours = [e for e in entries if e["detail"] == f"submitted {jid}"]
        assert len(ours) == 1 and ours[0]["tenant"] == "speech" and ours[0]["status"] == 201
        assert ours[0]["token_id"] == server.tokens["bob"].split("_")[1]
        refused = [e for e in entries if e["status"] == 401]
        assert refused and refused[-1]["token_id"] is None
        every = json.dumps(admin.get(f"{V1}/audit?limit=5000").json())
        assert all(t.split("_")[2] not in every for t in server.tokens.values())
        with server.client("alice") as alice:
            error(alice.get(f"{V1}/audit"), 403, "forbidden")


def test_tokens_from_the_cli_work_until_revoked(server: Server) -> None:
    runner = CliRunner()
    r = runner.invoke(
        app,
        [
            "token",
            "create",
            "--db",
            str(server.db),
            "--tenant",
            "audio",
            "--role",
            "viewer",
            "--name",
            "ci",
        ],
    )
    assert r.exit_code == 0, r.output
    token = r.stdout.strip()
    listed = runner.invoke(app, ["token", "list", "--db", str(server.db), "--json"])
    rows = {t["id"]: t for t in json.loads(listed.stdout)["tokens"]}
    tid = token.split("_")[1]
    assert rows[tid]["tenant"] == "audio" and token.split("_")[2] not in listed.stdout
    headers = {"Authorization": f"Bearer {token}"}
    with server.client() as c:
        assert c.get(f"{V1}/whoami", headers=headers).json()["role"] == "viewer"
        assert runner.invoke(app, ["token", "revoke", tid, "--db", str(server.db)]).exit_code == 0
        error(c.get(f"{V1}/whoami", headers=headers), 401, "unauthenticated")
    assert runner.invoke(app, ["token", "revoke", tid, "--db", str(server.db)]).exit_code == 1


def test_no_secret_reaches_the_server_log(server: Server) -> None:
    # its own requests, with every token and a wrong one (not those of other tests, which
    # may run after it in a shuffled order)
    for who in server.tokens:
        with server.client(who) as c:
            c.post(f"{V1}/jobs", json={"name": "logged", "run": "true"})
    with server.client() as anon:
        anon.post(f"{V1}/jobs", json={}, headers={"Authorization": "Bearer nonsense"})
    end = time.monotonic() + 10.0
    while "POST /api/v1/jobs" not in server.output() and time.monotonic() < end:
        time.sleep(0.05)  # the access log lines come as the server writes them
    printed = server.output()
    assert "POST /api/v1/jobs" in printed  # the access log is there
    for token in server.tokens.values():
        assert token.split("_")[2] not in printed
    assert "nonsense" not in printed
