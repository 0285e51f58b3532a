"""The router against real upstream HTTP servers on 127.0.0.1: streaming passed through,
429 back-pressure, a bounded wait while no replica is ready, the faster replica preferred,
and a request its replica never answered sent to another one."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Iterator

import httpx
import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, StreamingResponse
from starlette.routing import Route

from accelnet.runtime.local.worker import free_port
from accelnet.serve.router import Replica, Router


class Upstream:
    """A replica stand-in: ``/hello`` answers its name, ``/stream`` three chunks, the
    last two only once ``first_seen`` is set (by the client that got the first; after
    10 s without, ``held_out`` says so), ``/hold`` waits until ``release`` is set."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.release = threading.Event()
        self.first_seen = threading.Event()
        self.held_out = False

        async def hello(request: Request) -> PlainTextResponse:
            return PlainTextResponse(self.name)

        async def stream(request: Request) -> StreamingResponse:
            async def chunks() -> AsyncIterator[bytes]:
                yield b"chunk0;"
                end = time.monotonic() + 10
                while not self.first_seen.is_set():  # the rest once the client has this
                    if time.monotonic() > end:
                        self.held_out = True
                        break
                    await asyncio.sleep(0.01)
                yield b"chunk1;"
                yield b"chunk2;"

            return StreamingResponse(chunks())

        async def hold(request: Request) -> PlainTextResponse:
            while not self.release.is_set():
                await asyncio.sleep(0.01)
            return PlainTextResponse("released")

        app = Starlette(routes=[Route("/hello", hello), Route("/stream", stream),
                                Route("/hold", hold)])  # fmt: skip
        port = free_port()
        assert port is not None
        self.url = f"http://127.0.0.1:{port}"
        config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning",
                                lifespan="off")  # fmt: skip
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        end = time.monotonic() + 10
        while not self.server.started:
            assert time.monotonic() < end
            time.sleep(0.01)

    def close(self) -> None:
        self.release.set()
        self.server.should_exit = True
        self.thread.join(10)


@pytest.fixture
def router() -> Iterator[Router]:
    r = Router("svc", max_inflight=1, queue_s=5.0)
    r.start()
    yield r
    r.close()


@pytest.fixture
def upstreams() -> Iterator[list[Upstream]]:
    made = [Upstream("a"), Upstream("b")]
    yield made
    for u in made:
        u.close()


def test_a_stream_is_passed_through_as_it_comes(router: Router, upstreams: list[Upstream]) -> None:
    router.add(Replica("a", upstreams[0].url, "L4"))
    seen: list[bytes] = []
    with httpx.stream("GET", f"{router.url}/stream", timeout=30) as r:
        assert r.headers["x-accelnet-replica"] == "a"
        for chunk in r.iter_raw():
            seen.append(chunk)
            upstreams[0].first_seen.set()
    assert b"".join(seen) == b"chunk0;chunk1;chunk2;"
    # the upstream sends the rest only once the client has the first chunk: a router that
    # held the stream back until it ended would have kept it waiting (whatever the load)
    assert not upstreams[0].held_out


def test_every_replica_busy_is_a_429_with_retry_after(
    router: Router, upstreams: list[Upstream]
) -> None:
    router.add(Replica("a", upstreams[0].url, "L4"))
    held: list[httpx.Response] = []
    t = threading.Thread(target=lambda: held.append(httpx.get(f"{router.url}/hold", timeout=10)))
    t.start()
    end = time.monotonic() + 10
    while router.stats().inflight < 1:
        assert time.monotonic() < end
        time.sleep(0.01)
    busy = httpx.get(f"{router.url}/hello", timeout=10)
    assert busy.status_code == 429 and busy.headers["retry-after"] == "1"
    upstreams[0].release.set()
    t.join(10)
    assert held[0].text == "released"
    assert router.stats().rejected == 1


def test_with_no_replica_a_request_waits_for_one_then_gives_up(
    router: Router, upstreams: list[Upstream]
) -> None:
    got: list[httpx.Response] = []
    t = threading.Thread(target=lambda: got.append(httpx.get(f"{router.url}/hello", timeout=10)))
    t.start()
    time.sleep(0.3)
    assert router.stats().queued == 1
    router.add(Replica("b", upstreams[1].url, "T4"))
    t.join(10)
    assert got[0].status_code == 200 and got[0].text == "b"
    router.remove("b")
    quick = Router("q", queue_s=0.2)
    quick.start()
    try:
        assert httpx.get(f"{quick.url}/hello", timeout=10).status_code == 503
    finally:
        quick.close()


def test_the_faster_replica_is_preferred_and_a_dead_one_is_skipped(
    upstreams: list[Upstream],
) -> None:
    r = Router("svc", max_inflight=4)
    r.start()
    try:
        r.add(Replica("slow", upstreams[1].url, "T4", speed=65.0))
        r.add(Replica("fast", upstreams[0].url, "H100", speed=990.0))
        assert httpx.get(f"{r.url}/hello", timeout=10).text == "a"  # idle: the faster one
        port = free_port()
        r.add(Replica("dead", f"http://127.0.0.1:{port}", "H100", speed=1e6))  # nobody there
        for _ in range(3):  # tried first (fastest), refused, sent on: nothing fails
            assert httpx.get(f"{r.url}/hello", timeout=10).status_code == 200
        dead = next(x for x in r.replicas() if x.rid == "dead")
        assert not dead.up and dead.failed == 1  # out until it passes a readiness check
    finally:
        r.close()


class _Dropper:
    """A replica that reads each request and closes the connection without an answer (it
    died with the request in hand); counts the requests it took."""

    def __init__(self) -> None:
        import socket

        self.sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.took = 0
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                if conn.recv(65536):
                    self.took += 1

    def close(self) -> None:
        self.sock.close()


def test_a_request_its_replica_dropped_is_retried_only_when_it_may_be_sent_twice(
    upstreams: list[Upstream],
) -> None:
    r = Router("svc", max_inflight=4, retries=2)
    r.start()
    drop = _Dropper()
    try:
        r.add(Replica("dropper", drop.url, "H100", speed=1e6))  # always tried first
        r.add(Replica("good", upstreams[0].url, "T4", speed=1.0))
        posted = httpx.post(f"{r.url}/hello", content=b"charge my card", timeout=10)
        assert posted.status_code == 502 and "dropper" in posted.text  # not sent twice
        assert drop.took == 1
        keyed = httpx.post(f"{r.url}/hello", content=b"x", timeout=10,
                           headers={"Idempotency-Key": "k1"})  # fmt: skip
        assert keyed.status_code == 405  # the good replica's answer (no POST route)
        assert keyed.headers["x-accelnet-replica"] == "good" and drop.took == 2
        got = httpx.get(f"{r.url}/hello", timeout=10)
        assert got.status_code == 200 and got.text == "a" and drop.took == 3
        assert r.stats().errors == 1  # only the POST without a key failed
    finally:
        r.close()
        drop.close()


def test_an_affinity_key_keeps_its_replica_and_moves_only_when_that_one_leaves() -> None:
    made = [Upstream(n) for n in ("a", "b", "c")]
    r = Router("svc", max_inflight=4)
    r.start()
    try:
        for u in made:
            r.add(Replica(u.name, u.url, "L4"))
        keys = [f"stream-{i}" for i in range(12)]

        def where(key: str) -> str:
            got = httpx.get(f"{r.url}/hello", timeout=10, headers={"X-Accelnet-Affinity": key})
            assert got.status_code == 200
            return got.text

        first = {k: where(k) for k in keys}
        assert all(where(k) == first[k] for k in keys for _ in range(3))  # sticky
        assert len(set(first.values())) >= 2  # spread over the replicas
        gone = first[keys[0]]
        r.remove(gone)
        after = {k: where(k) for k in keys}
        assert all(after[k] == first[k] for k in keys if first[k] != gone)  # others stay
        assert all(after[k] != gone for k in keys)
    finally:
        r.close()
        for u in made:
            u.close()
