"""The audit log: every state-changing call (POST, PUT, PATCH, DELETE), who made it,
what it was and how it ended, refused ones included (401, 403, 413, 429, ...).

An entry names the token by its id, with its tenant and role, never its secret (the
``Authorization`` header is not read here at all). ``detail`` holds what the call did
(``submitted a-1f2e3d4c``) or the error code it ended with.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from typing import Any

import anyio
import anyio.to_thread

from accelnet.api.db import ApiDb
from accelnet.api.tokens import Principal
from accelnet.runtime.clock import Clock

MUTATING = frozenset({"POST", "PUT", "PATCH", "DELETE"})
Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class AuditEntry:
    """One audited call."""

    seq: int
    at: float
    token_id: str | None
    tenant: str | None
    role: str | None
    method: str
    path: str
    status: int
    detail: str


class AuditLog:
    """The ``api_audit`` table: append-only."""

    def __init__(self, db: ApiDb) -> None:
        self._db = db

    def record(
        self,
        at: float,
        who: Principal | None,
        method: str,
        path: str,
        status: int,
        detail: str = "",
    ) -> int:
        """Append an entry; returns its sequence number."""
        return self._db.insert(
            "INSERT INTO api_audit(at, token_id, tenant, role, method, path, status, detail) "
            "VALUES(?,?,?,?,?,?,?,?)",
            (
                at,
                who.token_id if who else None,
                who.tenant if who else None,
                who.role.value if who else None,
                method,
                path[:1024],
                status,
                detail[:2048],
            ),
        )

    def since(self, seq: int, limit: int) -> list[AuditEntry]:
        """Entries after ``seq``, oldest first, at most ``limit``."""
        rows = self._db.query(
            "SELECT seq, at, token_id, tenant, role, method, path, status, detail "
            "FROM api_audit WHERE seq > ? ORDER BY seq LIMIT ?",
            (seq, limit),
        )
        return [AuditEntry(*r) for r in rows]


class AuditMiddleware:
    """ASGI middleware writing an :class:`AuditLog` entry for every state-changing call,
    once it has been answered (or has crashed: status 500). The principal and the detail
    come from the request's state (``principal``, ``audit_detail``, ``error_code``), set
    by the authentication dependency, the handlers and the error handlers."""

    def __init__(self, app: ASGIApp, audit: AuditLog, clock: Clock) -> None:
        self.app = app
        self.audit = audit
        self.clock = clock

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] not in MUTATING:
            await self.app(scope, receive, send)
            return
        state = scope.setdefault("state", {})
        status = [500]

        async def send_status(message: Message) -> None:
            if message["type"] == "http.response.start":
                status[0] = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, send_status)
        finally:
            who = state.get("principal")
            detail = str(state.get("audit_detail") or state.get("error_code") or "")
            with anyio.CancelScope(shield=True):  # recorded even if the client went away
                await anyio.to_thread.run_sync(
                    lambda: self.audit.record(
                        self.clock.now(),
                        who if isinstance(who, Principal) else None,
                        scope["method"],
                        str(scope.get("path", "")),
                        status[0],
                        detail,
                    )
                )
