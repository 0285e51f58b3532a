"""A service's router: one address, each request sent to one of the ready replicas.

The choice is least outstanding requests, weighted by measured speed: a request goes to the
ready replica with the least ``(in flight + 1) / weight``, where a replica's weight starts at
its device model's relative speed (the catalog's figures, given by the caller) and then
follows its own measured service time (an exponentially weighted mean), so an H100 replica
takes more of the load than a T4 beside it. A request that could not reach its replica (the
connection refused or dropped before a response: the replica died or is stopping) is sent
to another one when that is safe: always if the connection was never made, else for
idempotent methods (GET, HEAD, OPTIONS, PUT, DELETE) and for requests that carry an
``Idempotency-Key``. When every ready replica has ``max_inflight`` requests the router
answers 429 with ``Retry-After`` (back-pressure, not a queue that grows without end); with
no replica ready yet (a service scaled to zero, or starting) a request waits up to
``queue_s`` in a bounded queue (``max_queued``), then 503. Responses are streamed through
as they come (video frames, token streams). A request carrying ``X-Accelnet-Affinity``
goes to the replica that key hashes to among the free ones (rendezvous hashing), so a
stateful stream (a video's background model, a chat's cache) stays on one replica while it
is there and not saturated.

The router is a plain ASGI app (no framework: every layer is time on every request; an
answer up to 1 MiB that says its length is relayed in one write) and runs its own uvicorn
server on 127.0.0.1 in a thread of its own
(:meth:`Router.start`); its replica table is changed from other threads (:meth:`add`,
:meth:`remove`) and its figures read from them (:meth:`stats`). Every request's latency (as
the router saw it, to the last byte) and outcome go into a window the autoscaler reads.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import math
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from accelnet.monitor.timing import SERVICE_BUCKETS, Counts, HistogramSnapshot
from accelnet.serve.upstream import BrokenError, NotConnectedError, Pool, UpstreamAnswer

IDEMPOTENT = frozenset({"GET", "HEAD", "OPTIONS", "PUT", "DELETE"})
AFFINITY = b"x-accelnet-affinity"  # requests with the same value go to the same replica
_HOP = frozenset({"connection", "keep-alive", "proxy-authenticate", "proxy-authorization",
                  "te", "trailers", "transfer-encoding", "upgrade", "host",
                  "content-length"})  # fmt: skip
_HOP_B = frozenset(h.encode() for h in _HOP)
_WHOLE = 1 << 20  # answers up to this long (and saying so) are relayed in one write
_EWMA = 0.2  # weight of a new service time in a replica's mean
_WINDOW_KEPT = 100_000  # request records kept at most


@dataclass(slots=True, eq=False)
class Replica:
    """One ready replica as the router sees it."""

    rid: str
    url: str  # http://host:port
    model: str
    speed: float = 1.0  # relative speed of its device model (the initial weight)
    inflight: int = 0
    served: int = 0
    failed: int = 0
    mean_s: float | None = None  # measured mean service time
    up: bool = True

    @property
    def weight(self) -> float:
        """How much load it should take relative to the others."""
        if self.mean_s is None or self.mean_s <= 0:
            return self.speed
        return 1.0 / self.mean_s


@dataclass(frozen=True, slots=True)
class Record:
    """One request as the router answered it."""

    at: float  # when it ended (the router's clock)
    latency_s: float
    status: int  # 0: no response could be given (every try failed)
    replica: str | None
    retried: int


@dataclass(frozen=True, slots=True)
class Stats:
    """The router's figures over a window."""

    window_s: float
    requests: int
    rate: float  # requests/s ended in the window
    p50_ms: float | None
    p95_ms: float | None
    p99_ms: float | None
    errors: int  # 5xx and requests no replica answered
    rejected: int  # 429: every replica saturated
    inflight: int
    queued: int
    mean_inflight: float  # Little's law: rate x mean latency (the load the window carried)
    by_replica: dict[str, int] = field(default_factory=dict)  # requests served


@dataclass(frozen=True, slots=True)
class Totals:
    """The router's counts since it started (what ``/metrics`` exports): every request's
    latency, requests by status (``"none"``: no replica answered), retries."""

    latency: HistogramSnapshot
    codes: dict[str, int]
    retries: int


def _rendezvous(key: bytes, rid: str) -> int:
    """Highest-random-weight hashing: the replica with the largest value takes the key, so
    a key moves only when its replica leaves (or is busy), never when another one comes or
    goes."""
    digest = hashlib.blake2b(key + b"\0" + rid.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


def _quantile(sorted_values: list[float], q: float) -> float:
    k = max(0, min(len(sorted_values) - 1, math.ceil(q * len(sorted_values)) - 1))
    return sorted_values[k]


class Router:
    """See the module docstring. ``clock``: seconds (monotonic) for latencies and windows."""

    def __init__(
        self,
        name: str,
        max_inflight: int = 8,
        retries: int = 2,
        queue_s: float = 30.0,
        max_queued: int = 256,
        timeout_s: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if max_inflight < 1:
            raise ValueError(f"max_inflight must be at least 1, got {max_inflight}")
        self.name = name
        self.max_inflight = max_inflight
        self.retries = retries
        self.queue_s = queue_s
        self.max_queued = max_queued
        self.timeout_s = timeout_s
        self._clock = clock
        self._lock = threading.Lock()
        self._replicas: dict[str, Replica] = {}
        self._records: deque[Record] = deque(maxlen=_WINDOW_KEPT)
        self._queued = 0
        self._latency = Counts(SERVICE_BUCKETS)
        self._codes: dict[str, int] = {}
        self._retries = 0
        self._last: float | None = None
        self._ready = asyncio.Event()  # set while some replica is ready (loop thread only)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: Any = None
        self._thread: threading.Thread | None = None
        self._pools: dict[str, Pool] = {}  # by replica id (loop thread only)
        self.url = ""
        self.app = self._asgi

    # ----- the replica table (any thread) ------------------------------------------------
    def add(self, replica: Replica) -> None:
        """Send requests to ``replica`` from now on."""
        with self._lock:
            self._replicas[replica.rid] = replica
        self._wake()

    def remove(self, rid: str) -> Replica | None:
        """Send no new request to replica ``rid`` (those in flight finish)."""
        with self._lock:
            gone = self._replicas.pop(rid, None)
        if gone is not None:
            gone.up = False
            loop = self._loop
            if loop is not None and not loop.is_closed():
                with contextlib.suppress(RuntimeError):
                    loop.call_soon_threadsafe(self._drop_pool, rid)
        return gone

    def replicas(self) -> list[Replica]:
        """The ready replicas."""
        with self._lock:
            return list(self._replicas.values())

    def last_request_at(self) -> float | None:
        """When the last request ended or arrived (None: never)."""
        with self._lock:
            return self._last

    def stats(self, window_s: float = 10.0) -> Stats:
        """Figures of the requests that ended in the last ``window_s`` seconds."""
        now = self._clock()
        with self._lock:
            recs = [r for r in self._records if r.at >= now - window_s]
            inflight = sum(r.inflight for r in self._replicas.values())
            queued = self._queued
        lat = sorted(r.latency_s * 1e3 for r in recs if r.status and r.status != 429)
        by: dict[str, int] = {}
        for r in recs:
            if r.replica is not None:
                by[r.replica] = by.get(r.replica, 0) + 1
        served = [r for r in recs if r.status and r.status != 429]
        return Stats(
            window_s=window_s,
            requests=len(recs),
            rate=len(recs) / window_s,
            p50_ms=_quantile(lat, 0.50) if lat else None,
            p95_ms=_quantile(lat, 0.95) if lat else None,
            p99_ms=_quantile(lat, 0.99) if lat else None,
            errors=sum(1 for r in recs if r.status == 0 or r.status >= 500),
            rejected=sum(1 for r in recs if r.status == 429),
            inflight=inflight,
            queued=queued,
            mean_inflight=sum(r.latency_s for r in served) / window_s,
            by_replica=by,
        )

    def totals(self) -> Totals:
        """Counts since the router started (see :class:`Totals`)."""
        with self._lock:
            return Totals(self._latency.snapshot(), dict(self._codes), self._retries)

    # ----- its server -------------------------------------------------------------------
    def start(self, port: int = 0) -> str:
        """Serve on 127.0.0.1:``port`` (0: a free one) in a thread; the router's URL."""
        import uvicorn  # noqa: PLC0415 (only a running router needs it)

        config = uvicorn.Config(self.app, host="127.0.0.1", port=port, log_level="warning",
                                lifespan="off", access_log=False, interface="asgi3")  # fmt: skip
        self._server = uvicorn.Server(config)
        started = threading.Event()
        server = self._server

        async def serve() -> None:
            task = asyncio.ensure_future(server.serve())
            while not (server.started or task.done()):
                await asyncio.sleep(0.01)
            started.set()
            await task

        def run() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            asyncio.set_event_loop(loop)
            self._ready = asyncio.Event()
            if self.replicas():
                self._ready.set()
            try:
                loop.run_until_complete(serve())
            finally:
                started.set()
                for pool in self._pools.values():
                    pool.close()
                self._pools.clear()
                loop.close()

        self._thread = threading.Thread(target=run, name=f"router-{self.name}", daemon=True)
        self._thread.start()
        if not started.wait(10) or not server.started:
            raise RuntimeError(f"the router of {self.name} did not start")
        bound = self._server.servers[0].sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{bound}"
        return self.url

    def close(self) -> None:
        """Stop serving (requests in flight are cut); idempotent."""
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(10)
            self._thread = None

    def _wake(self) -> None:
        loop = self._loop
        if loop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(self._sync_ready)

    def _drop_pool(self, rid: str) -> None:
        pool = self._pools.pop(rid, None)
        if pool is not None:
            pool.close()

    def _pool(self, replica: Replica) -> Pool:
        pool = self._pools.get(replica.rid)
        if pool is None:
            parts = urlsplit(replica.url)
            pool = Pool(parts.hostname or "127.0.0.1", parts.port or 80, self._clock,
                        keep=self.max_inflight)  # fmt: skip
            self._pools[replica.rid] = pool
        return pool

    def _sync_ready(self) -> None:
        if self.replicas():
            self._ready.set()
        else:
            self._ready.clear()

    # ----- requests (the router's loop) --------------------------------------------------
    def _pick(self, tried: set[str], affinity: bytes | None = None) -> Replica | None:
        with self._lock:
            free = [r for r in self._replicas.values()
                    if r.up and r.rid not in tried and r.inflight < self.max_inflight]  # fmt: skip
            if not free:
                return None
            if affinity is not None:  # the same key, the same replica while it is there
                best = max(free, key=lambda r: _rendezvous(affinity, r.rid))
            else:
                best = min(free, key=lambda r: ((r.inflight + 1) / r.weight, r.rid))
            best.inflight += 1
            return best

    def _record(self, t0: float, status: int, replica: Replica | None, retried: int) -> None:
        now = self._clock()
        with self._lock:
            rid = None if replica is None else replica.rid
            took = max(0.0, now - t0)
            self._records.append(Record(now, took, status, rid, retried))
            self._latency.add(took)
            code = str(status) if status else "none"
            self._codes[code] = self._codes.get(code, 0) + 1
            self._retries += retried

    def _done(self, replica: Replica, t0: float, ok: bool) -> None:
        with self._lock:
            replica.inflight -= 1
            if ok:
                replica.served += 1
                took = self._clock() - t0
                replica.mean_s = took if replica.mean_s is None else (
                    (1 - _EWMA) * replica.mean_s + _EWMA * took)  # fmt: skip
            else:
                replica.failed += 1

    async def _wait_for_replica(self) -> bool:
        """Wait (bounded) for a replica to be ready; False if the queue is full or the wait
        ran out."""
        with self._lock:
            if self._queued >= self.max_queued:
                return False
            self._queued += 1
        try:
            await asyncio.wait_for(self._ready.wait(), self.queue_s)
            return True
        except TimeoutError:
            return False
        finally:
            with self._lock:
                self._queued -= 1

    async def _asgi(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        """The router as a plain ASGI app (no framework between the socket and the proxy:
        each layer is time on every request)."""
        if scope["type"] != "http":
            return
        t0 = self._clock()
        with self._lock:
            self._last = t0
        body = await _body(receive)
        raw = scope["headers"]
        method = scope["method"]
        retry_ok = method in IDEMPOTENT or any(k == b"idempotency-key" for k, _ in raw)
        affinity = next((v for k, v in raw if k == AFFINITY), None)
        headers = [(k, v) for k, v in raw if k.lower() not in _HOP_B]
        target = scope.get("raw_path") or scope["path"].encode()
        if scope.get("query_string"):
            target += b"?" + scope["query_string"]
        tried: set[str] = set()
        retried = 0
        while True:
            replica = self._pick(tried, affinity)
            if replica is None:
                if self.replicas() and all(r.rid not in tried for r in self.replicas()):
                    self._record(t0, 429, None, retried)  # all saturated: push back
                    await _plain(send, 429, f"{self.name}: every replica is busy",
                                 [(b"retry-after", b"1")])  # fmt: skip
                    return
                if not self.replicas() and not tried and await self._wait_for_replica():
                    continue
                self._record(t0, 0 if tried else 503, None, retried)
                why = "no replica answered" if tried else "no replica is ready"
                await _plain(send, 502 if tried else 503, f"{self.name}: {why}")
                return
            try:
                resp = await self._pool(replica).send(method, target, headers, body,
                                                      self.timeout_s)  # fmt: skip
            except NotConnectedError:
                self._done(replica, t0, ok=False)  # never reached it: safe to send elsewhere
                replica.up = False  # until it answers its readiness check again
                tried.add(replica.rid)
                retried += 1
                if retried > self.retries:
                    self._record(t0, 0, replica, retried)
                    await _plain(send, 502, f"{self.name}: no replica answered")
                    return
                continue
            except BrokenError as exc:
                self._done(replica, t0, ok=False)
                tried.add(replica.rid)
                retried += 1
                if retry_ok and retried <= self.retries:
                    continue
                self._record(t0, 0, replica, retried)
                await _plain(send, 502, f"{self.name}: replica {replica.rid} failed: {exc}")
                return
            await self._relay(resp, replica, t0, retried, send)
            return

    async def _relay(
        self, resp: UpstreamAnswer, replica: Replica, t0: float, retried: int, send: Any
    ) -> None:
        """The replica's answer to the client: whole when it is small and says its length
        (one write), else passed through as it comes (streams of frames or tokens)."""
        out = [(k, v) for k, v in resp.headers if k.lower() not in _HOP_B]
        out.append((b"x-accelnet-replica", replica.rid.encode()))
        length = resp.length()
        ok = False
        try:
            if length is not None and length <= _WHOLE:
                try:
                    data = await resp.read(self.timeout_s)
                except BrokenError as exc:  # nothing sent to the client yet: say so
                    await _plain(send, 502, f"{self.name}: replica {replica.rid} failed: {exc}")
                    return
                said = length if resp.head_only else len(data)
                out.append((b"content-length", str(said).encode()))
                await send({"type": "http.response.start", "status": resp.status,
                            "headers": out})  # fmt: skip
                await send({"type": "http.response.body", "body": data})
            else:
                await send({"type": "http.response.start", "status": resp.status,
                            "headers": out})  # fmt: skip
                async for chunk in resp.chunks(self.timeout_s):
                    await send({"type": "http.response.body", "body": chunk, "more_body": True})
                await send({"type": "http.response.body", "body": b""})
            ok = True
        finally:
            resp.close()
            self._done(replica, t0, ok=ok and resp.status < 500)
            self._record(t0, resp.status if ok else 0, replica, retried)


async def _body(receive: Any) -> bytes:
    """A request's whole body, from its ASGI messages."""
    chunks = []
    while True:
        msg = await receive()
        chunks.append(msg.get("body", b""))
        if not msg.get("more_body", False):
            return b"".join(chunks)


async def _plain(send: Any, status: int, text: str,
                 extra: list[tuple[bytes, bytes]] | None = None) -> None:  # fmt: skip
    body = text.encode()
    headers = [(b"content-type", b"text/plain; charset=utf-8"),
               (b"content-length", str(len(body)).encode()), *(extra or [])]  # fmt: skip
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
