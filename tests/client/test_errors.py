"""Errors: what the server refuses becomes ApiError(status, code, message, field); a server
that cannot be reached names its URL; 429s are retried after Retry-After."""

from __future__ import annotations

import uuid

import httpx
import pytest

from accelnet.client import ApiError, Client
from tests.client.conftest import Server


def raised(call: object) -> ApiError:
    assert callable(call)
    with pytest.raises(ApiError) as err:
        call()
    return err.value


def test_another_tenants_job_is_not_found(server: Server) -> None:
    with server.client("alice") as alice, server.client("bob") as bob:
        job = alice.submit({"name": f"mine-{uuid.uuid4().hex[:6]}", "run": "sleep 30"})
        try:
            for call in (lambda: bob.job(job), lambda: bob.cancel(job.id),
                         lambda: bob.logs(job), lambda: bob.events(job)):  # fmt: skip
                err = raised(call)
                assert (err.status, err.code, err.field) == (404, "not_found", None)
                assert err.message == raised(lambda: bob.job(job.id + "x")).message.replace(
                    job.id + "x", job.id
                )  # fmt: skip  the answer an unknown id gets
            err = raised(lambda: bob.logs(job, follow=True))  # raised at once, not at next()
            assert err.status == 404
            assert alice.job(job).tenant == "vision"
        finally:
            alice.cancel(job)


def test_invalid_names_the_field_and_stores_nothing(server: Server) -> None:
    with server.client("alice") as api:
        name = f"batch-{uuid.uuid4().hex[:6]}"
        err = raised(lambda: api.submit([
            {"name": name, "run": "true"},
            {"name": name + "-b", "run": "true", "resources": {"accelerators": "H100:0"}},
        ]))  # fmt: skip
        assert (err.status, err.code, err.field) == (
            422,
            "invalid",
            "jobs[1].resources.accelerators",
        )
        assert "H100:0" in err.message and "jobs[1].resources.accelerators" in str(err)
        assert list(api.jobs(name=name)) == []  # all or none
        err = raised(lambda: api.jobs_page(limit=0))
        assert (err.status, err.field) == (422, "limit")
        err = raised(lambda: api.jobs_page(state="sleeping"))
        assert (err.code, err.field) == ("invalid", "state")
        err = raised(lambda: api.submit({"name": "x", "run": "true", "tenant": "speech"}))
        assert (err.status, err.code, err.field) == (403, "forbidden", "tenant")


def test_bad_token_and_roles(server: Server) -> None:
    for token in ("acn_000000000000_" + "0" * 64, "nonsense", None):
        with Client(server.url, token) as api:
            err = raised(api.whoami)
            assert (err.status, err.code) == (401, "unauthenticated")
            assert api.health().status == "ok"  # needs no token
    with server.client("val") as viewer:
        err = raised(lambda: viewer.submit({"name": "v", "run": "true"}))
        assert (err.status, err.code) == (403, "forbidden")


def test_unreachable_names_the_url() -> None:
    with Client("127.0.0.1:1", "t", timeout=5) as api:
        assert api.url == "http://127.0.0.1:1"
        err = raised(api.whoami)
    assert (err.status, err.code) == (0, "unreachable")
    assert "http://127.0.0.1:1" in err.message and str(err).startswith("unreachable: ")


def mock(handler: object) -> Client:
    assert callable(handler)
    api = Client("http://accelnet.test/api/v1/", "tok", transport=httpx.MockTransport(handler))
    assert api.url == "http://accelnet.test"
    return api


def test_rate_limited_calls_are_retried_after_retry_after() -> None:
    answers = [429, 429, 200]
    slept: list[float] = []

    def handler(request: httpx.Request) -> httpx.Response:
        assert request.headers["authorization"] == "Bearer tok"
        status = answers.pop(0)
        if status == 429:
            body = {"error": {"code": "rate_limited", "message": "slow down", "field": None}}
            return httpx.Response(429, json=body, headers={"Retry-After": "2"})
        return httpx.Response(200, json={"token_id": "a", "tenant": "t", "role": "user",
                                         "name": ""})  # fmt: skip

    api = mock(handler)
    api._sleep = slept.append
    assert api.whoami().tenant == "t" and slept == [2.0, 2.0]
    answers[:] = [429] * 5
    api.rate_retries = 1
    err = raised(api.whoami)
    assert (err.status, err.code, err.retry_after) == (429, "rate_limited", 2.0)


def test_answers_that_are_not_the_apis() -> None:
    def html(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("whoami"):
            return httpx.Response(200, text="<html>a proxy</html>")
        return httpx.Response(502, text="<html>Bad gateway</html>")

    api = mock(html)
    err = raised(api.whoami)
    assert (err.status, err.code) == (200, "bad_response") and "accelnet.test" in err.message
    err = raised(api.devices)
    assert (err.status, err.code) == (502, "http_502") and "Bad gateway" in err.message
