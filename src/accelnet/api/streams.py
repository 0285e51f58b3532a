"""Streams: the cluster event log as server-sent events, a task's log as it grows.

The event stream (``GET /api/v1/events`` with ``Accept: text/event-stream``) is the
standard SSE format: a ``retry: 2000`` line first, then one message per event::

    id: 42
    data: {"seq":42,"at":1767225600.5,"job":"a-1a2b3c4d","kind":"job:running","detail":"..."}

with a blank line after each, and a ``: keepalive`` comment when nothing happened for
``keepalive_s``. ``id`` is the event's sequence number: a client that reconnects sends it
back as ``Last-Event-ID`` (or ``?since=``) and misses nothing. Browsers' ``EventSource``
cannot send an ``Authorization`` header; read the stream with ``fetch`` and a reader (or
an EventSource polyfill that sends headers).

Streams end when the client goes away, when the server shuts down, when the token that
opened them is revoked (the event stream with a last comment, ``: token revoked``) and
(logs) when the job has finished and everything it wrote has been sent. A stream asks
whether its token is still valid after each read and before sending what it read, and
reads at least once a second (``poll_s``, at most :data:`RECHECK_S`): nothing written
after a revocation is sent, and the stream ends within about a second of it.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from functools import partial
from typing import TypeVar

import anyio.to_thread

from accelnet.api.context import ApiContext
from accelnet.api.tokens import Principal

BATCH = 500
RECHECK_S = 1.0  # an open stream reads, and asks whether its token is valid, this often
REVOKED = ": token revoked\n\n"  # the event stream's last line when its token is revoked
T = TypeVar("T")


def sse_message(seq: int, data: dict[str, object]) -> str:
    """One SSE message: ``id: <seq>``, ``data: <json>``, a blank line."""
    return f"id: {seq}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n"


def unless_revoked(ctx: ApiContext, who: Principal, read: Callable[[], T]) -> T | None:
    """What ``read()`` returns, or None if ``who``'s token is revoked by the time it has
    read (asked after the read, so nothing written after a revocation gets through).
    Blocks on the database: call it in a thread."""
    out = read()
    return out if ctx.tokens.active(who.token_id) else None


async def event_stream(ctx: ApiContext, who: Principal, since: int) -> AsyncIterator[str]:
    """The events after ``since`` that ``who`` may see, then every new one, as SSE."""
    yield "retry: 2000\n\n"
    settings = ctx.settings
    wait = min(settings.poll_s, RECHECK_S)
    idle_polls = 0
    keepalive = max(1, round(settings.keepalive_s / wait))
    while not ctx.stopping():
        read = partial(ctx.control.events, who, since, BATCH)
        page = await anyio.to_thread.run_sync(unless_revoked, ctx, who, read)
        if page is None:
            yield REVOKED
            return
        for ev in page.events:
            yield sse_message(ev.seq, ev.model_dump())
        if page.next != since:
            since = page.next
            idle_polls = 0
            continue
        idle_polls += 1
        if idle_polls % keepalive == 0:
            yield ": keepalive\n\n"
        await ctx.pause(wait)


async def follow_log(
    ctx: ApiContext, who: Principal, job_id: str, rank: int, stream: str, offset: int
) -> AsyncIterator[bytes]:
    """A rank's stream from ``offset`` as it grows, until the job has finished and all
    of it was sent. A new attempt (a retry) starts over on its own log, after a line
    ``[accelnet] attempt N``."""
    attempt: int | None = None
    while not ctx.stopping():
        read = partial(ctx.jobs.read_log, who, job_id, rank, stream, offset, None, 1 << 20)
        chunk = await anyio.to_thread.run_sync(unless_revoked, ctx, who, read)
        if chunk is None:
            return
        if attempt is not None and chunk.attempt != attempt:
            yield f"\n[accelnet] attempt {chunk.attempt}\n".encode()
            offset, attempt = 0, chunk.attempt
            continue
        if chunk.attempt:
            attempt = chunk.attempt
        if chunk.data:
            offset = chunk.next_offset
            yield chunk.data
            continue
        if chunk.finished:
            return
        await ctx.pause(min(ctx.settings.poll_s, RECHECK_S))
