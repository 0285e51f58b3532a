"""Every operation the server publishes (its /openapi.json), called by another tenant
against tenant ``vision``'s resources (a running job, a finished one, the device running
it, the tenant itself), with a user's and with a viewer's token, then with hostile device
ids: never a 5xx, never a 2xx on something of vision's, never a byte of its jobs' output or
names in an answer, and afterwards nothing of vision's has changed (its jobs, their
devices, its tenant record). Operations added later are covered without editing this
test; one it cannot classify fails it."""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.api.conftest import Server, spawn, wait_state

V1 = "/api/v1"
FINISHED = {"succeeded", "failed", "cancelled"}
SECRET = "vision-secret-7f3a"
HOSTILE_DEVICE_IDS = ["../../etc/passwd", "..%2f..%2fetc", "x" * 300, "gpu0\x00", "ｇｐｕ０",
                      "a/b/c/d/e/f", "%00", "$(touch /tmp/pwned)", "gpu0;ls"]  # fmt: skip


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    s = spawn(tmp_path_factory.mktemp("every"), "--fabric", "pcie-4xL4", "--rate", "0")
    yield s
    s.stop()


def _operations(spec: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    ops = []
    for path, item in spec["paths"].items():
        for method, op in item.items():
            if method in ("get", "post", "put", "delete", "patch"):
                ops.append((method.upper(), path, op))
    return ops


def _fill(path: str, values: dict[str, str]) -> str:
    def one(m: re.Match[str]) -> str:
        name = m.group(1).split(":")[0]
        assert name in values, f"{path}: no value for path parameter {name!r}: classify it"
        return values[name]

    return re.sub(r"\{([^}]+)\}", one, path)


def _state(c: httpx.Client, jobs: list[str], device: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for j in jobs:
        job = c.get(f"{V1}/jobs/{j}").json()
        out[j] = {k: job.get(k) for k in ("state", "attempts", "devices", "name", "tenant")}
    dev = c.get(f"{V1}/devices/{device}").json()
    out[device] = {k: dev.get(k) for k in ("state", "jobs")}
    out["tenant"] = [t for t in c.get(f"{V1}/tenants").json()["tenants"] if t["name"] == "vision"]
    return out


def _call(c: httpx.Client, method: str, path: str, values: dict[str, str]) -> httpx.Response:
    """``method path`` with ``values`` for its path parameters and a body or query that
    aims at tenant vision."""
    body: Any = None
    if method in ("POST", "PUT"):
        body = {"name": "x", "run": "true", "tenant": "vision"}
        if "tenants" in path:
            body = {"weight": 99.0}
        elif "policy" in path:
            body = {"policy": "fifo"}
        elif "devices" in path:
            body = {"reason": "hostile"}
    params = {"tenant": "vision", "name": "vision-done"} if method == "GET" else None
    return c.request(method, _fill(path, values), json=body, params=params,
                     headers={"Accept": "application/json"}, timeout=10)  # fmt: skip


def test_another_tenant_gets_nothing_of_visions_from_any_endpoint(srv: Server) -> None:
    with srv.client("alice") as alice, srv.client("admin") as admin:
        spec = alice.get("/openapi.json").json()
        done = alice.post(f"{V1}/jobs", json={"name": "vision-done", "run": f"echo {SECRET}"})
        done_id = done.json()["jobs"][0]["id"]
        wait_state(alice, done_id, FINISHED)
        live = alice.post(f"{V1}/jobs", json={"name": "vision-live", "run": "sleep 60"})
        live_id = live.json()["jobs"][0]["id"]
        job = wait_state(alice, live_id, {"running"})
        device = str(job["devices"][0])  # type: ignore[index]
        before = _state(admin, [done_id, live_id], device)
        ops = _operations(spec)
        assert len(ops) >= 20, ops
        seen: list[str] = []
        with srv.client("bob") as other:  # a user of tenant speech
            for job_id in (live_id, done_id):
                values = {"job_id": job_id, "device_id": device, "name": "vision"}
                for method, path, _ in ops:
                    r = _call(other, method, path, values)
                    seen.append(f"{method} {path} -> {r.status_code}")
                    text = r.text.replace(job_id, "<the id asked for>")
                    assert r.status_code < 500, (method, path, r.status_code, r.text[:500])
                    assert SECRET not in text and "vision-" not in text, (method, path, text[:500])
                    touches_vision = "{job_id}" in path or "{name}" in path
                    if touches_vision or ("/devices/" in path and method == "POST"):
                        assert r.status_code in (401, 403, 404, 405, 422), (
                            method, path, r.status_code, r.text[:300])  # fmt: skip
                    if method == "POST" and path == f"{V1}/jobs":
                        assert r.status_code in (403, 422), r.text  # not as tenant vision
                    if method == "GET" and r.status_code == 200:
                        assert live_id not in r.text and done_id not in r.text, (path, text[:500])
        after = _state(admin, [done_id, live_id], device)
        assert after == before, (before, after)
        assert alice.post(f"{V1}/jobs/{live_id}/cancel").status_code == 202
        # hostile device ids, as an admin (who may operate devices): 4xx, never a file or 5xx
        for dev_id in HOSTILE_DEVICE_IDS:
            quoted = f"{V1}/devices/" + urllib.parse.quote(dev_id, safe="/")
            for method, suffix in (("GET", ""), ("POST", "/drain"), ("POST", "/reset"),
                                   ("POST", "/probe"), ("POST", "/undrain")):  # fmt: skip
                r = admin.request(method, f"{quoted}{suffix}", timeout=10)
                assert r.status_code in (400, 404, 405, 422), (dev_id, suffix, r.status_code)
                assert "root:" not in r.text
        assert len(admin.get(f"{V1}/devices").json()["devices"]) == 4
        assert all(d["state"] != "draining" for d in admin.get(f"{V1}/devices").json()["devices"])
    assert srv.proc.poll() is None
    assert len(seen) >= 2 * len(ops)
