"""Limits: the request body size (413) and a request rate per token (429).

:class:`BodyLimitMiddleware` refuses a body over the limit before reading it: at once when
``Content-Length`` says so, and, for a chunked body, as soon as the bytes read pass the
limit (the rest is never read). :class:`RateLimiter` is a token bucket per key (a token
id) on an injected clock: ``rate`` requests per second on average, ``burst`` at once.
"""

from __future__ import annotations

import json
import math
import threading
from collections import OrderedDict
from dataclasses import dataclass

from accelnet.api.audit import ASGIApp, Message, Receive, Scope, Send
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
