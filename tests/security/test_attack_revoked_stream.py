"""A revoked token loses its open streams, against a real ``accelnet serve`` (issue 21,
item 9): a stream opened with token T ends soon after ``accelnet token revoke`` T, and
nothing written after the revocation reaches it: not the events of a job that another
token of T's tenant submits next (the event stream), not the output a running job goes on
writing (a followed log). A new request with T is refused (401).
"""

from __future__ import annotations

import queue
import subprocess
import sys
import threading
import time
from collections.abc import Iterator

import httpx
import pytest

from accelnet.api.db import ApiDb
from accelnet.api.tokens import Role, Tokens
from tests.api.conftest import Server, wait_state

V1 = "/api/v1"
WAIT_S = 60.0
MAIN = [sys.executable, "-c", "from accelnet.cli.main import main; main()"]
TICKS = "i=0; while :; do echo tick $i; i=$((i+1)); sleep 0.2; done"


def new_token(srv: Server, name: str) -> tuple[str, str]:
    """A new viewer token of tenant vision (alice's tenant) in the server's database:
    its id and the token string (the server reads the table on every request)."""
    api = ApiDb(srv.db)
    try:
        info, text = Tokens(api).create("vision", Role.VIEWER, name, time.time())
    finally:
        api.close()
    return info.id, text


def revoke(srv: Server, token_id: str) -> None:
    """``accelnet token revoke``, from another process, as an operator does it."""
    r = subprocess.run(
        [*MAIN, "token", "revoke", token_id, "--db", str(srv.db)],
        capture_output=True,
        text=True,
        timeout=WAIT_S,
        check=False,
    )
    assert r.returncode == 0, r.stderr


class Reader:
    """Reads a streamed GET line by line in a thread of its own: ``lines`` (a queue of
    every line as it arrives) and ``ended`` (the server ended the response)."""

    def __init__(self, srv: Server, token: str, path: str, headers: dict[str, str]) -> None:
        self.lines: queue.SimpleQueue[str] = queue.SimpleQueue()
        self.seen: list[str] = []
        self.ended = threading.Event()
        self.status = 0
        self.failure: BaseException | None = None
        auth = {"Authorization": f"Bearer {token}", **headers}
        timeout = httpx.Timeout(WAIT_S, read=None)  # the stream may stay quiet a while
        self._client = httpx.Client(base_url=srv.url, headers=auth, timeout=timeout)
        self._path = path
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        try:
            with self._client.stream("GET", self._path) as r:
                self.status = r.status_code
                for line in r.iter_lines():
                    self.lines.put(line)
        except BaseException as exc:  # reported by the test, not lost in the thread
            self.failure = exc
        finally:
            self.ended.set()

    def next_line(self, limit: float = WAIT_S) -> str:
        """The next line; AssertionError if none comes within ``limit`` seconds."""
        try:
            line = self.lines.get(timeout=limit)
        except queue.Empty:
            raise AssertionError(f"no line within {limit} s; so far {self.seen}") from None
        self.seen.append(line)
        return line

    def wait_for(self, text: str, limit: float = WAIT_S) -> None:
        """Read until a line containing ``text`` (AssertionError after ``limit`` s)."""
        end = time.monotonic() + limit
        while text not in self.next_line(max(0.1, end - time.monotonic())):
            pass

    def drain_until_end(self, stop_on: str, limit: float = WAIT_S) -> list[str]:
        """The lines that arrive until the stream ends or a line contains ``stop_on``,
        within ``limit`` seconds."""
        out: list[str] = []
        end = time.monotonic() + limit
        while time.monotonic() < end:
            try:
                line = self.lines.get(timeout=0.1)
            except queue.Empty:
                if self.ended.is_set() and self.lines.empty():
                    break
                continue
            out.append(line)
            if stop_on in line:
                break
        self.seen += out
        return out

    def close(self) -> None:
        self._client.close()


@pytest.fixture
def alice(server: Server) -> Iterator[httpx.Client]:
    with server.client("alice") as c:
        yield c


def submit(c: httpx.Client, name: str, run: str) -> str:
    r = c.post(f"{V1}/jobs", json={"name": name, "run": run})
    assert r.status_code == 201, r.text
    return str(r.json()["jobs"][0]["id"])


def wait_event(c: httpx.Client, job: str) -> None:
    """Until the job has an event in the event log (read as ``c``)."""
    end = time.monotonic() + WAIT_S
    while not c.get(f"{V1}/jobs/{job}/events").json().get("events"):
        assert time.monotonic() < end, f"no event of {job} within {WAIT_S} s"
        time.sleep(0.1)


def test_a_revoked_token_gets_no_event_written_after_and_its_stream_ends(
    server: Server, alice: httpx.Client
) -> None:
    token_id, token = new_token(server, "doomed-events")
    stream = Reader(server, token, f"{V1}/events", {"Accept": "text/event-stream"})
    try:
        assert stream.next_line() == "retry: 2000", stream.status
        before = submit(alice, "before-revoke", "true")
        stream.wait_for(before)  # the stream is live: it carries alice's jobs' events
        assert not stream.ended.is_set()

        revoke(server, token_id)
        after = submit(alice, "after-revoke", "true")
        wait_event(alice, after)  # the job has events: the old stream would carry them
        lines = stream.drain_until_end(stop_on=after)

        leaked = [line for line in lines if after in line]
        assert not leaked, f"a revoked token's stream got events written after: {leaked}"
        assert stream.ended.is_set(), f"the stream is still open; it got {lines}"
        assert stream.failure is None, stream.failure
        assert ": token revoked" in lines, lines  # the stream says why it ends
    finally:
        stream.close()
    with server.client() as c:
        r = c.get(f"{V1}/events", headers={"Authorization": f"Bearer {token}"})
        assert r.status_code == 401, r.text


def test_a_revoked_token_stops_following_a_log(server: Server, alice: httpx.Client) -> None:
    job = submit(alice, "ticker", TICKS)
    try:
        wait_state(alice, job, {"running"}, timeout=WAIT_S)
        token_id, token = new_token(server, "doomed-logs")
        follow = Reader(server, token, f"{V1}/jobs/{job}/logs?follow=true", {})
        try:
            follow.wait_for("tick")  # the job's output arrives as it is written
            revoke(server, token_id)
            end = time.monotonic() + WAIT_S
            while not follow.ended.wait(0.1):
                assert time.monotonic() < end, f"still following after {WAIT_S} s"
            assert follow.failure is None, follow.failure
            # the job writes on: the stream ended because of the revocation
            assert alice.get(f"{V1}/jobs/{job}").json()["state"] == "running"
        finally:
            follow.close()
    finally:
        alice.post(f"{V1}/jobs/{job}/cancel")
