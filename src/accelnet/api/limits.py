"""Limits: the request body size (413), a request rate per token and one per client
address for requests without a valid token (429), and a fair share of the server per
sender.

:class:`BodyLimitMiddleware` refuses a body over the limit before reading it: at once when
``Content-Length`` says so, and, for a chunked body, as soon as the bytes read pass the
limit (the rest is never read). :class:`RateLimiter` is a token bucket per key (a token
id, a client address) on an injected clock: ``rate`` requests per second on average,
``burst`` at once.

Requests without a valid token spend from their client address's bucket (``accelnet
serve --anon-rate``, ``--anon-burst``): one without an ``Authorization`` header in
:class:`AnonymousLimitMiddleware`, before its body is read or anything is written, one
whose token is invalid or revoked where authentication fails (:mod:`accelnet.api.deps`).
Over the rate they get 429 ``rate_limited`` with ``Retry-After`` instead of 401 or
whatever else. ``GET``/``HEAD`` of the pages that need no token and write nothing
(``/healthz``, ``/docs``, ``/openapi.json``, the dashboard's files) are not counted;
``/metrics`` and everything under ``/api/`` are. The address is the connection's peer:
behind a proxy, every client shares the proxy's.

:class:`FairShareMiddleware` lets at most ``limit`` requests of one sender (its
``Authorization`` header, or its client address without one) be worked on at once; the
others wait their turn in the event loop, in order, costing nothing. One process serves
every tenant, on one interpreter lock: without this a tenant with many connections at its
rate limit takes a share of the CPU as large as its number of requests in flight, and
every other tenant's requests queue behind them. A request's turn ends when its answer
starts (a stream's body, which follows, does not hold it).
"""

from __future__ import annotations

import json
import math
import threading
from collections import OrderedDict
from dataclasses import dataclass

import anyio

from accelnet.api.audit import ASGIApp, Message, Receive, Scope, Send, client_address
from accelnet.api.errors import error_body
from accelnet.runtime.clock import Clock

MAX_KEYS = 100_000  # buckets kept (least recently used dropped: they are full again anyway)


@dataclass(slots=True)
class _Bucket:
    tokens: float
    at: float


class RateLimiter:
    """A token bucket per key; ``rate <= 0`` disables it. Thread-safe."""

    def __init__(self, rate: float, burst: int, clock: Clock) -> None:
        if burst < 1 and rate > 0:
            raise ValueError(f"burst must be at least 1, got {burst}")
        self.rate = rate
        self.burst = burst
        self.clock = clock
        self._buckets: OrderedDict[str, _Bucket] = OrderedDict()
        self._lock = threading.Lock()

    def take(self, key: str) -> float:
        """Spend one request of ``key``'s bucket: 0 if allowed, else the seconds until it
        would be (nothing is spent then)."""
        if self.rate <= 0:
            return 0.0
        now = self.clock.now()
        with self._lock:
            bucket = self._buckets.pop(key, None) or _Bucket(float(self.burst), now)
            bucket.tokens = min(self.burst, bucket.tokens + max(0.0, now - bucket.at) * self.rate)
            bucket.at = now
            self._buckets[key] = bucket
            if len(self._buckets) > MAX_KEYS:
                self._buckets.popitem(last=False)
            if bucket.tokens >= 1.0:
                bucket.tokens -= 1.0
                return 0.0
            return (1.0 - bucket.tokens) / self.rate


def retry_after(wait_s: float) -> str:
    """The ``Retry-After`` header value: whole seconds, at least 1."""
    return str(max(1, math.ceil(wait_s)))


ANON_SPENT = "anon_spent"  # request state: this request spent its address's bucket already


def is_public(method: str, path: str) -> bool:
    """Whether a request needs no token and writes nothing (not counted per address)."""
    return method in ("GET", "HEAD") and not (path.startswith("/api/") or path == "/metrics")


def without_token_message(limiter: RateLimiter, address: str, wait_s: float) -> str:
    """What a 429 for too many requests without a valid token says."""
    return (
        f"too many requests without a valid token from {address}: at most "
        f"{limiter.rate:g} per second (bursts of {limiter.burst}); retry in {wait_s:.2f} s"
    )


class AnonymousLimitMiddleware:
    """ASGI middleware: a request without an ``Authorization`` header (and not
    :func:`is_public`) spends one from its client address's bucket of ``limiter``; 429
    at once, body unread, when the bucket is empty (see the module docstring)."""

    def __init__(self, app: ASGIApp, limiter: RateLimiter) -> None:
        self.app = app
        self.limiter = limiter

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] != "http"
            or self.limiter.rate <= 0
            or is_public(scope["method"], str(scope.get("path", "")))
            or any(name == b"authorization" for name, _ in scope.get("headers", ()))
        ):
            await self.app(scope, receive, send)
            return
        address = client_address(scope)
        state = scope.setdefault("state", {})
        state[ANON_SPENT] = True
        wait = self.limiter.take(address)
        if wait <= 0:
            await self.app(scope, receive, send)
            return
        state["error_code"] = "rate_limited"
        message = without_token_message(self.limiter, address, wait)
        body = json.dumps(error_body("rate_limited", message)).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 429,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                    (b"retry-after", retry_after(wait).encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})


@dataclass(slots=True)
class _Turns:
    slots: anyio.Semaphore
    users: int = 0


class FairShareMiddleware:
    """ASGI middleware: at most ``limit`` requests of one sender in progress at once (see
    the module docstring); ``limit <= 0``: no bound. Runs in the event loop only (no lock)."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit
        self._senders: dict[bytes, _Turns] = {}  # the senders with a request here now

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or self.limit <= 0:
            await self.app(scope, receive, send)
            return
        key = next((v for k, v in scope.get("headers", ()) if k == b"authorization"), None)
        if key is None:
            key = b"address " + client_address(scope).encode()
        turns = self._senders.get(key)
        if turns is None:
            turns = self._senders[key] = _Turns(anyio.Semaphore(self.limit))
        turns.users += 1
        held = False

        def release() -> None:
            nonlocal held
            if held:
                held = False
                turns.slots.release()

        async def send_and_release(message: Message) -> None:
            if message["type"] == "http.response.start":
                release()
            await send(message)

        try:
            await turns.slots.acquire()
            held = True
            await self.app(scope, receive, send_and_release)
        finally:
            release()
            turns.users -= 1
            if turns.users == 0:
                del self._senders[key]


class BodyLimitMiddleware:
    """ASGI middleware: 413 ``too_large`` for a request body over ``max_bytes``."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        length = None
        for name, value in scope.get("headers", ()):
            if name == b"content-length":
                try:
                    length = int(value)
                except ValueError:
                    length = None
        if length is not None and length > self.max_bytes:
            await self._refuse(scope, send)
            return
        if length is None:  # chunked: read it here, up to the limit, then hand it on
            chunks: list[bytes] = []
            seen = 0
            while True:
                message = await receive()
                if message["type"] != "http.request":  # the client went away
                    return
                chunk = message.get("body", b"")
                seen += len(chunk)
                if seen > self.max_bytes:
                    await self._refuse(scope, send)
                    return
                chunks.append(chunk)
                if not message.get("more_body", False):
                    break
            whole: Message = {"type": "http.request", "body": b"".join(chunks), "more_body": False}
            replayed = False

            async def replay() -> Message:
                nonlocal replayed
                if not replayed:
                    replayed = True
                    return whole
                return await receive()

            await self.app(scope, replay, send)
            return
        await self.app(scope, receive, send)

    async def _refuse(self, scope: Scope, send: Send) -> None:
        scope.setdefault("state", {})["error_code"] = "too_large"
        body = json.dumps(
            error_body("too_large", f"the request body is larger than {self.max_bytes} bytes")
        ).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 413,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                    (b"connection", b"close"),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})
