"""The audit log: every state-changing call (POST, PUT, PATCH, DELETE), who made it,
what it was and how it ended, refused ones included (401, 403, 413, 429, ...).

An entry names the token by its id, with its tenant and role, never its secret (the
``Authorization`` header is not read here at all). ``detail`` holds what the call did
(``submitted a-1f2e3d4c``) or the error code it ended with.

Refused calls cannot fill it. A call without a valid token (anything from anyone who
reaches the port), and a call a token's rate limit refused (429), is written one by one
only while its sender's allowance lasts (:class:`RefusalSampler`: per client address, or
per token; at first :data:`SENDER_BURST`, then one every :data:`SENDER_EVERY_S`; and
:data:`ALL_BURST` then one a second across all senders); the others are counted, and
every :data:`KEEP_EVERY_S` (and when the server stops) one row sums them up: how many
from whom, by status. The log keeps :data:`RETENTION_DAYS` days and at most
:data:`MAX_ROWS` rows by default (``accelnet serve --audit-retention-days``,
``--audit-max-rows``): :meth:`AuditLog.prune` deletes the oldest in batches, at start and
every :data:`KEEP_EVERY_S`, from :class:`AuditKeeper`'s thread.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final

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

SENDER_BURST: Final = 100
"""Refused calls of one sender (client address or token) written one by one at first..."""
SENDER_EVERY_S: Final = 60.0
"""...then one every this many seconds (the rest are counted)."""
ALL_BURST: Final = 1000
"""Refused calls written one by one across all senders at first, then one a second."""
KEEP_EVERY_S: Final = 60.0
"""How often the counts are written and old entries pruned."""
RETENTION_DAYS: Final = 90.0
"""Entries older than this are pruned (``--audit-retention-days``)."""
MAX_ROWS: Final = 1_000_000
"""At most this many entries are kept, the newest (``--audit-max-rows``)."""
PRUNE_BATCH: Final = 5000
"""Entries deleted in one transaction (writers wait for at most one batch)."""
MAX_SENDERS: Final = 10_000
"""Senders whose allowance is remembered (least recently seen forgotten)."""
_SHOWN = 20  # senders named in a summary row (the most refused first)
log = logging.getLogger("accelnet.api")


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


@dataclass(slots=True)
class _Sender:
    allowance: float
    at: float


@dataclass(slots=True)
class _Counted:
    since: float
    by_sender: dict[str, dict[int, int]] = field(default_factory=dict)

    @property
    def total(self) -> int:
        return sum(sum(s.values()) for s in self.by_sender.values())


class RefusalSampler:
    """Which refused calls are written one by one (see the module docstring); counts the
    others until :meth:`summary` takes them. Thread-safe; in memory, O(1) a call."""

    def __init__(
        self,
        clock: Clock,
        burst: int = SENDER_BURST,
        every_s: float = SENDER_EVERY_S,
        all_burst: int = ALL_BURST,
        all_rate: float = 1.0,
    ) -> None:
        self.clock = clock
        self.burst = burst
        self.every_s = every_s
        self.all_burst = all_burst
        self.all_rate = all_rate
        self._senders: OrderedDict[str, _Sender] = OrderedDict()
        self._all = _Sender(float(all_burst), clock.now())
        self._counted = _Counted(clock.now())
        self._lock = threading.Lock()

    def admit(self, sender: str, status: int) -> bool:
        """Whether this refused call of ``sender`` is written; if not, it is counted."""
        now = self.clock.now()
        with self._lock:
            own = self._senders.pop(sender, None) or _Sender(float(self.burst), now)
            own.allowance = min(self.burst, own.allowance + (now - own.at) / self.every_s)
            own.at = now
            self._senders[sender] = own
            if len(self._senders) > MAX_SENDERS:
                self._senders.popitem(last=False)
            every = self._all
            every.allowance += (now - every.at) * self.all_rate
            every.allowance, every.at = min(self.all_burst, every.allowance), now
            if own.allowance >= 1.0 and every.allowance >= 1.0:
                own.allowance -= 1.0
                every.allowance -= 1.0
                return True
            counts = self._counted.by_sender.setdefault(sender, {})
            counts[status] = counts.get(status, 0) + 1
            return False

    def summary(self) -> tuple[int, int, str] | None:
        """What was counted since the last summary, and start counting anew: (how many,
        the most frequent status, a sentence naming the senders), or None if nothing."""
        now = self.clock.now()
        with self._lock:
            counted, self._counted = self._counted, _Counted(now)
        total = counted.total
        if not total:
            return None
        statuses: dict[int, int] = {}
        for counts in counted.by_sender.values():
            for status, n in counts.items():
                statuses[status] = statuses.get(status, 0) + n
        ranked = sorted(counted.by_sender.items(), key=lambda kv: -sum(kv[1].values()))
        parts = [
            f"{sum(c.values())} from {sender} ("
            + ", ".join(f"{s}: {n}" for s, n in sorted(c.items()))
            + ")"
            for sender, c in ranked[:_SHOWN]
        ]
        if len(ranked) > _SHOWN:
            parts.append(f"and {len(ranked) - _SHOWN} more senders")
        since = datetime.fromtimestamp(counted.since, UTC).isoformat(timespec="seconds")
        text = f"{total} refused calls not logged one by one since {since}: " + "; ".join(parts)
        return total, max(statuses, key=lambda s: statuses[s]), text


class AuditLog:
    """The ``api_audit`` table: appended to, pruned from the oldest end."""

    def __init__(self, db: ApiDb, sampler: RefusalSampler | None = None) -> None:
        self._db = db
        self.sampler = sampler

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

    def write_summary(self, at: float) -> int | None:
        """One entry for the refused calls counted but not written since the last one
        (method and path ``*``); its sequence number, or None if there were none."""
        found = self.sampler.summary() if self.sampler is not None else None
        if found is None:
            return None
        _, status, text = found
        return self.record(at, None, "*", "*", status, text)

    def prune(self, before: float, max_rows: int, batch: int = PRUNE_BATCH) -> int:
        """Delete the entries older than ``before`` and all but the newest ``max_rows``
        (``max_rows`` <= 0: no bound), oldest first, ``batch`` rows a transaction at most:
        each step looks at the oldest ``batch`` entries only, and the steps end at the
        first that deletes nothing, so the work is bounded by what is deleted. Returns
        how many entries were deleted."""
        deleted = 0
        while True:
            with self._db.transaction() as con:
                low, high = con.execute("SELECT MIN(seq), MAX(seq) FROM api_audit").fetchone()
                if low is None:
                    return deleted
                cut = high - max_rows if max_rows > 0 else low - 1  # seq <= cut: over the bound
                n = con.execute(
                    "DELETE FROM api_audit WHERE seq < ? AND (seq <= ? OR at < ?)",
                    (low + batch, cut, before),
                ).rowcount
            deleted += n
            if n == 0:
                return deleted


class AuditKeeper:
    """A thread that, every ``every_s``, writes the summary of refused calls and prunes
    the log (entries older than ``retention_s``, beyond ``max_rows``); once at
    :meth:`start` too, and a last summary at :meth:`stop`."""

    def __init__(
        self,
        audit: AuditLog,
        clock: Clock,
        retention_s: float,
        max_rows: int,
        every_s: float = KEEP_EVERY_S,
    ) -> None:
        self.audit = audit
        self.clock = clock
        self.retention_s = retention_s
        self.max_rows = max_rows
        self.every_s = every_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def keep(self) -> int:
        """One round: the summary, then pruning; returns how many entries were pruned."""
        now = self.clock.now()
        self.audit.write_summary(now)
        before = now - self.retention_s if self.retention_s > 0 else float("-inf")
        return self.audit.prune(before, self.max_rows)

    def start(self) -> None:
        """Keep once now, then every ``every_s`` in a daemon thread."""
        self.keep()
        self._thread = threading.Thread(target=self._run, name="accelnet-audit", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """End the thread and write the last summary (idempotent)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None
            self.audit.write_summary(self.clock.now())

    def __enter__(self) -> AuditKeeper:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            try:
                self.keep()
            except Exception:  # a locked or failing file: try again next time
                log.exception("audit log upkeep failed")


def client_address(scope: Scope) -> str:
    """The client's address (the peer of the connection; ``unknown`` without one)."""
    client = scope.get("client")
    return str(client[0]) if client else "unknown"


class AuditMiddleware:
    """ASGI middleware writing an :class:`AuditLog` entry for every state-changing call, as its
    answer starts, before the caller gets it (or once it has crashed: status 500). The
    principal and the detail come from the request's state (``principal``,
    ``audit_detail``, ``error_code``), set by the authentication dependency, the handlers
    and the error handlers. A call without a principal, or refused with 429, is written
    only if the log's sampler admits it (decided here, in the event loop, without a thread:
    the others cost a count)."""

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
        done = [False]

        async def record() -> None:
            if done[0]:
                return
            done[0] = True
            found = state.get("principal")
            who = found if isinstance(found, Principal) else None
            detail = str(state.get("audit_detail") or state.get("error_code") or "")
            if (who is None or status[0] == 429) and self.audit.sampler is not None:
                sender = client_address(scope) if who is None else f"token {who.token_id}"
                if not self.audit.sampler.admit(sender, status[0]):
                    return
            with anyio.CancelScope(shield=True):  # recorded even if the client went away
                await anyio.to_thread.run_sync(
                    lambda: self.audit.record(
                        self.clock.now(), who, scope["method"], str(scope.get("path", "")),
                        status[0], detail,
                    )
                )  # fmt: skip

        async def send_status(message: Message) -> None:
            if message["type"] == "http.response.start":
                status[0] = int(message["status"])
                # before the caller hears the answer: an answered change is in the log by
                # the time its caller can read the log
                await record()
            await send(message)

        try:
            await self.app(scope, receive, send_status)
        finally:
            await record()  # a call that crashed before answering: 500
