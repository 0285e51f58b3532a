"""``/metrics`` on the served cluster, read with Prometheus' own text parser."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from tests.api.conftest import Server, spawn, wait_state


def test_metrics_are_prometheus_text_with_jobs_and_devices(server: Server) -> None:
    job = {"name": "m1", "run": "true", "resources": {"accelerators": "any:1"}}
    with server.client("alice") as user:
        sent = user.post("/api/v1/jobs", json=job)
    assert sent.status_code == 201, sent.text
    with server.client() as anyone:
        found = anyone.get("/metrics")
    assert found.status_code == 200
    assert found.headers["content-type"].startswith("text/plain")
    families = {f.name: f for f in text_string_to_metric_families(found.text)}
    assert sum(s.value for s in families["accelnet_jobs"].samples) >= 1
    devices = {s.labels["accelnet_device"] for s in families["accelnet_device_state"].samples}
    assert len(devices) >= 2
    assert "/metrics" not in anyone_paths(server)


def anyone_paths(server: Server) -> set[str]:
    """The paths the published OpenAPI document lists."""
    with server.client() as anyone:
        return set(anyone.get("/openapi.json").json()["paths"])


def test_scheduler_decision_times_are_exported(server: Server) -> None:
    with server.client() as anyone:
        text = anyone.get("/metrics").text
    families = {f.name: f for f in text_string_to_metric_families(text)}
    hist = families["accelnet_scheduler_decision_seconds"]
    counts = [s.value for s in hist.samples if s.name.endswith("_count")]
    assert counts and counts[0] >= 1  # the job above was scheduled


def test_queue_waits_are_observed_when_jobs_start(server: Server) -> None:
    def count(text: str) -> float:
        fams = {f.name: f for f in text_string_to_metric_families(text)}
        return sum(s.value for s in fams["accelnet_queue_wait_seconds"].samples
                   if s.name.endswith("_count") and s.labels["tenant"] == "speech")  # fmt: skip

    job = {"name": "w1", "run": "true", "resources": {"accelerators": "any:1"}}
    with server.client("bob") as user, server.client() as anyone:
        before = count(anyone.get("/metrics").text)
        sent = user.post("/api/v1/jobs", json=job)
        assert sent.status_code == 201, sent.text
        wait_state(user, sent.json()["jobs"][0]["id"], {"succeeded"})
        assert count(anyone.get("/metrics").text) == before + 1


def test_a_running_job_ties_its_devices_to_it_and_its_tenant_and_counts_once_ended(
    server: Server,
) -> None:
    def scrape(anyone: httpx.Client) -> dict[str, Any]:
        return {f.name: f for f in text_string_to_metric_families(anyone.get("/metrics").text)}

    def total(fams: dict[str, Any], family: str, sample: str, **labels: str) -> float:
        return sum(s.value for s in fams[family].samples if s.name == sample
                   and all(s.labels.get(k) == v for k, v in labels.items()))  # fmt: skip

    job = {"name": "held", "run": "sleep 60", "resources": {"accelerators": "any:1"}}
    with server.client("bob") as user, server.client() as anyone:
        before = scrape(anyone)
        sent = user.post("/api/v1/jobs", json=job)
        assert sent.status_code == 201, sent.text
        jid = sent.json()["jobs"][0]["id"]
        wait_state(user, jid, {"running"})
        now = scrape(anyone)
        # an open /metrics names no job (any tenant can read it): the device is tied to
        # the tenant on it, valued at its share
        assert jid not in anyone.get("/metrics").text
        on = [s for s in now["accelnet_device_job"].samples if s.labels["tenant"] == "speech"]
        assert (
            on and all(s.labels["accelnet_job"] == "" for s in on) and sum(s.value for s in on) >= 1
        )
        assert total(now, "accelnet_tenant_devices", "accelnet_tenant_devices",
                     tenant="speech") >= 1  # fmt: skip
        posts = total(now, "accelnet_api_requests", "accelnet_api_requests_total",
                      method="POST", route="/api/v1/jobs", code="201", tenant="speech")  # fmt: skip
        assert posts >= 1 + total(before, "accelnet_api_requests", "accelnet_api_requests_total",
                                  method="POST", route="/api/v1/jobs", code="201",
                                  tenant="speech")  # fmt: skip
        assert user.post(f"/api/v1/jobs/{jid}/cancel").status_code in (200, 202)
        wait_state(user, jid, {"cancelled"})
        after = scrape(anyone)
        ended = total(after, "accelnet_job_attempts", "accelnet_job_attempts_total",
                      tenant="speech", outcome="cancelled")  # fmt: skip
        assert ended == 1 + total(before, "accelnet_job_attempts", "accelnet_job_attempts_total",
                                  tenant="speech", outcome="cancelled")  # fmt: skip
        assert not [
            s for s in after["accelnet_device_job"].samples if s.labels["accelnet_job"] == jid
        ]
        family = "accelnet_tenant_device_seconds"
        used = total(after, family, family + "_total", tenant="speech")
        assert used > 0


def test_with_the_metrics_token_devices_are_tied_to_their_jobs(tmp_path: Path) -> None:
    srv = spawn(tmp_path, "--fabric", "mixed-lab", "--metrics-token", "scrape-me")
    try:
        with srv.client("alice") as user, srv.client() as anyone:
            job = {"name": "seen", "run": "sleep 60", "resources": {"accelerators": "any:1"}}
            sent = user.post("/api/v1/jobs", json=job)
            jid = sent.json()["jobs"][0]["id"]
            wait_state(user, jid, {"running"})
            assert anyone.get("/metrics").status_code == 401  # no token: nothing to read
            text = anyone.get("/metrics", headers={"Authorization": "Bearer scrape-me"}).text
            fams = {f.name: f for f in text_string_to_metric_families(text)}
            on = [
                s.labels
                for s in fams["accelnet_device_job"].samples
                if s.labels["accelnet_job"] == jid
            ]
            assert len(on) == 1 and on[0]["tenant"] == "vision"
            user.post(f"/api/v1/jobs/{jid}/cancel")
    finally:
        srv.stop()
