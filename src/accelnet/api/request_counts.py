"""API requests answered, counted for ``/metrics`` (``accelnet_api_requests_total``).

:class:`RequestCountMiddleware` (the outermost middleware, so it sees every answer: a 413
of the body limit and a 429 of the rate limits too) counts each answer once, as it starts,
by method, route template (``/api/v1/jobs/{job_id}``, never the path: the ids would make a
series per job), status code and the caller's tenant (empty without a valid token).
"""

from __future__ import annotations

import threading

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from accelnet.api.tokens import Principal

UNMATCHED = "unmatched"
"""The route label of a request no route matched (a 404 for an unknown path)."""


def route_template(scope: Scope) -> str:
    """The template of the route that answered (``/api/v1/jobs/{job_id}``), the prefixes
    of the routers it is included through added (FastAPI keeps those in its own part of
    the scope); :data:`UNMATCHED` if none did."""
    effective = (scope.get("fastapi") or {}).get("effective_route_context")
    found = getattr(effective, "path_format", None)
    if found:
        return str(found)
    route = scope.get("route")
    return str(getattr(route, "path_format", None) or getattr(route, "path", None) or UNMATCHED)


class RequestCounts:
    """(method, route, code, tenant) -> requests answered; thread-safe."""

    def __init__(self) -> None:
        self._counts: dict[tuple[str, str, str, str], int] = {}
        self._lock = threading.Lock()

    def add(self, method: str, route: str, code: int, tenant: str) -> None:
        """One answer."""
        key = (method, route, str(code), tenant)
        with self._lock:
            self._counts[key] = self._counts.get(key, 0) + 1

    def snapshot(self) -> dict[tuple[str, str, str, str], int]:
        """The counts so far."""
        with self._lock:
            return dict(self._counts)


class RequestCountMiddleware:
    """ASGI middleware: each HTTP answer counted once in ``counts``, as it starts."""

    def __init__(self, app: ASGIApp, counts: RequestCounts) -> None:
        self.app = app
        self.counts = counts

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        state = scope.setdefault("state", {})
        counted = [False]

        def count(status: int) -> None:
            if counted[0]:
                return
            counted[0] = True
            template = route_template(scope)
            who = state.get("principal")
            tenant = who.tenant if isinstance(who, Principal) else ""
            self.counts.add(str(scope["method"]), str(template), status, tenant)

        async def counting(message: Message) -> None:
            if message["type"] == "http.response.start":
                count(int(message["status"]))
            await send(message)

        try:
            await self.app(scope, receive, counting)
        except Exception:
            count(500)  # crashed before answering
            raise
