"""``/api/v1/services`` on a real ``accelnet serve``: a tenant starts the digits service, it
answers through its router, another tenant can neither see nor touch it, bad specs name
their field, ``/metrics`` counts its requests, a restarted server serves it again (the old
replica job cancelled), and DELETE stops it."""

from __future__ import annotations

import hashlib
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.api.conftest import spawn

V1 = "/api/v1"
# --trusted-tasks: the replicas run this test's Python, which a tenant's user may not reach
# (under root's home here); tasks run as tenant users: tests/security/
ARGS = ("--fabric", "mixed-lab", "--rate", "1000", "--burst", "1000", "--trusted-tasks")
SPEC: dict[str, Any] = {
    "name": "digits",
    "run": f"{sys.executable} -m accelnet.workloads.digits_service",
    "resources": {"accelerators": "any:1"},
    "replicas": {"min": 1, "max": 1},
}


def _ready(c: httpx.Client, name: str, timeout: float = 90.0) -> dict[str, Any]:
    end = time.monotonic() + timeout
    while True:
        body = c.get(f"{V1}/services/{name}").json()
        if body.get("ready", 0) >= 1:
            return dict(body)
        assert time.monotonic() < end, f"service {name} not ready: {body}"
        time.sleep(0.2)


def _samples(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = httpx.get(f"{url}/metrics", timeout=30).text
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[s.name, tuple(sorted(s.labels.items()))] = s.value
    return out


def test_a_tenant_runs_a_service_others_cannot_touch_and_it_survives_a_restart(
    tmp_path: Path,
) -> None:
    srv = spawn(tmp_path, *ARGS)
    try:
        with srv.client("alice") as alice, srv.client("bob") as bob:
            made = alice.post(f"{V1}/services", json=SPEC)
            assert made.status_code == 201, made.text
            assert made.json()["tenant"] == "vision" and made.json()["url"].startswith(
                "http://127.0.0.1:"
            )
            body = _ready(alice, "digits")
            url = body["url"]
            assert body["replicas"][0]["job"]  # a job of the tenant's
            job = alice.get(f"{V1}/jobs/{body['replicas'][0]['job']}").json()
            assert job["tenant"] == "vision" and job["state"] == "running"
            for k in range(20):
                r = httpx.get(f"{url}/predict", params={"index": k}, timeout=30)
                assert r.status_code == 200 and "digit" in r.json()

            # another tenant: nothing to see, nothing to change, no name squatting as alice
            assert bob.get(f"{V1}/services").json()["services"] == []
            for method in ("GET", "DELETE"):
                assert bob.request(method, f"{V1}/services/digits").status_code == 404
            assert bob.put(f"{V1}/services/digits", json=SPEC).status_code == 404
            assert bob.get(f"{V1}/services/digits?tenant=vision").status_code == 404
            as_alice = bob.post(f"{V1}/services", json={**SPEC, "tenant": "vision"})
            assert as_alice.status_code == 403 and as_alice.json()["error"]["field"] == "tenant"
            assert bob.post(f"{V1}/jobs/{job['id']}/cancel").status_code == 404

            # the same name twice, and bad specs: each names what is wrong, nothing starts
            assert alice.post(f"{V1}/services", json=SPEC).status_code == 409
            two = {**SPEC, "name": "two", "replicas": {"min": 3, "max": 1}}
            bad = alice.post(f"{V1}/services", json=two)
            assert bad.status_code == 422 and bad.json()["error"]["field"] == "replicas"
            three = {**SPEC, "name": "three", "resources": {"accelerators": "H9:1"}}
            never = alice.post(f"{V1}/services", json=three)
            assert never.status_code == 422, never.text
            assert "H9" in never.json()["error"]["message"]
            names = [s["name"] for s in alice.get(f"{V1}/services").json()["services"]]
            assert names == ["digits"]

        got = _samples(srv.url)
        # an open /metrics names the service by a digest of tenant and name, never its name
        # (the API shows a tenant only its own services)
        hidden = "svc-" + hashlib.sha256(b"vision/digits").hexdigest()[:10]
        assert not [lab for _, lab in got if ("service", "digits") in lab]
        labels = (("code", "200"), ("service", hidden), ("tenant", "vision"))
        assert got["accelnet_service_requests_total", labels] >= 20
        count = got["accelnet_service_request_duration_seconds_count",
                    (("service", hidden), ("tenant", "vision"))]  # fmt: skip
        assert count >= 20
        ready = [v for (n, lab), v in got.items()
                 if n == "accelnet_service_replicas" and ("state", "ready") in lab]  # fmt: skip
        assert sum(ready) == 1

        # a restart on the same --db serves it again; the old replica job does not linger
        old_job = body["replicas"][0]["job"]
        assert srv.stop() == 0
        srv = spawn(tmp_path, *ARGS)
        with srv.client("alice") as alice:
            again = _ready(alice, "digits")
            assert again["replicas"][0]["job"] != old_job
            r = httpx.get(f"{again['url']}/predict", params={"index": 1}, timeout=30)
            assert r.status_code == 200
            assert alice.get(f"{V1}/jobs/{old_job}").json()["state"] in (
                "cancelled", "failed", "succeeded")  # fmt: skip

            gone = alice.delete(f"{V1}/services/digits")
            assert gone.status_code == 200 and gone.json()["state"] == "stopped"
            assert alice.get(f"{V1}/services/digits").status_code == 404
            with_job = gone.json()["replicas"][0]["job"]
            end = time.monotonic() + 60
            while alice.get(f"{V1}/jobs/{with_job}").json()["state"] not in ("cancelled",):
                assert time.monotonic() < end
                time.sleep(0.2)
            with pytest.raises(httpx.ConnectError):  # its router is closed
                httpx.get(f"{again['url']}/predict", timeout=5)
    finally:
        srv.stop()
