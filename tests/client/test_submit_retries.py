"""``Client.submit``: an ``Idempotency-Key`` on every submission, and retries with that
same key after no answer, a timeout or a 5xx, for a bounded time; against a mock
transport, and against the real server with the answer to the first try lost."""

from __future__ import annotations

import uuid

import httpx
import pytest

from accelnet.client import ApiError, Client
from tests.client.conftest import Server

SPEC = {"name": "r", "run": "true", "resources": {"accelerators": "any:1"}}
JOB = {
    "id": "r-1", "name": "r", "tenant": "t", "state": "pending", "submitted_at": 1.0,
    "started_at": None, "finished_at": None, "attempts": 0, "failures": 0, "devices": [],
    "model": None, "share": None, "reason": None, "error": None, "inputs": {}, "spec": SPEC,
}  # fmt: skip


class Clock:
    """A fake clock for the client's waits: sleeping moves it on."""

    def __init__(self) -> None:
        self.t = 0.0
        self.slept: list[float] = []

    def now(self) -> float:
        return self.t

    def sleep(self, s: float) -> None:
        self.slept.append(s)
        self.t += s


def mock(answers: list[object], keys: list[str], retry_s: float = 30.0) -> tuple[Client, Clock]:
    """A client whose calls get ``answers`` in turn (a status, or an exception to raise);
    the Idempotency-Key of each request goes to ``keys``."""

    def handler(request: httpx.Request) -> httpx.Response:
        keys.append(request.headers["idempotency-key"])
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        assert isinstance(answer, int)
        if answer == 201:
            return httpx.Response(201, json={"jobs": [JOB]})
        body = {"error": {"code": "x", "message": "no", "field": None}}
        return httpx.Response(answer, json=body)

    api = Client("http://accelnet.test", "tok", transport=httpx.MockTransport(handler),
                 submit_retry_s=retry_s)  # fmt: skip
    clock = Clock()
    api._now, api._sleep = clock.now, clock.sleep
    return api, clock


def test_every_submission_has_a_key_of_its_own() -> None:
    keys: list[str] = []
    api, _ = mock([201, 201, 201], keys)
    api.submit(SPEC)
    api.submit([SPEC, SPEC])
    api.submit(SPEC, idempotency_key="mine")
    assert len(set(keys)) == 3 and keys[2] == "mine"
    assert all(uuid.UUID(k).version == 4 for k in keys[:2])


def test_lost_answers_timeouts_and_5xx_are_retried_with_the_same_key() -> None:
    keys: list[str] = []
    request = httpx.Request("POST", "http://accelnet.test/api/v1/jobs")
    answers: list[object] = [
        httpx.ConnectError("refused", request=request),
        503,
        httpx.ReadTimeout("slow", request=request),
        httpx.RemoteProtocolError("closed", request=request),
        500,
        201,
    ]
    api, clock = mock(answers, keys)
    job = api.submit(SPEC)
    assert job.id == "r-1" and api.submit_retries == 5
    assert len(keys) == 6 and len(set(keys)) == 1
    assert all(0.025 <= s <= 1.0 for s in clock.slept)  # jittered, doubling, capped
    assert clock.slept[-1] > clock.slept[0]


@pytest.mark.parametrize("status", [400, 401, 403, 404, 409, 413, 422])
def test_refusals_are_not_retried(status: int) -> None:
    keys: list[str] = []
    api, clock = mock([status, 201], keys)
    with pytest.raises(ApiError) as err:
        api.submit(SPEC)
    assert err.value.status == status and len(keys) == 1
    assert api.submit_retries == 0 and clock.slept == []


def test_retries_stop_after_submit_retry_s() -> None:
    keys: list[str] = []
    request = httpx.Request("POST", "http://accelnet.test/api/v1/jobs")
    api, clock = mock([httpx.ConnectError("refused", request=request)] * 100, keys, retry_s=5.0)
    with pytest.raises(ApiError) as err:
        api.submit(SPEC)
    assert (err.value.status, err.value.code) == (0, "unreachable")
    assert clock.t <= 5.0 and 5 < len(keys) < 30 and len(set(keys)) == 1
    none, clock = mock([httpx.ConnectError("refused", request=request)] * 2, [], retry_s=0.0)
    with pytest.raises(ApiError):
        none.submit(SPEC)
    assert none.submit_retries == 0


class LoseFirstAnswer(httpx.BaseTransport):
    """Sends every request to the server; the first answer is lost on the way back (the
    server stored the job, the client sees a broken connection)."""

    def __init__(self) -> None:
        self.inner = httpx.HTTPTransport()
        self.lost = 0

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = self.inner.handle_request(request)
        if request.method == "POST" and not self.lost:
            response.read()
            self.lost += 1
            raise httpx.ReadError("connection reset by peer", request=request)
        return response

    def close(self) -> None:
        self.inner.close()


def test_a_submission_whose_answer_was_lost_is_stored_once(server: Server) -> None:
    name = f"lost-{uuid.uuid4().hex[:8]}"
    transport = LoseFirstAnswer()
    with Client(server.url, server.tokens["alice"], transport=transport) as api:
        jobs = api.submit([{"name": name, "run": "true"}, {"name": name, "run": "true"}])
        assert transport.lost == 1 and api.submit_retries == 1
    with server.client("alice") as api:
        stored = sorted(j.id for j in api.jobs(name=name))
    assert stored == sorted(j.id for j in jobs) and len(stored) == 2
