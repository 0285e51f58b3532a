"""HTTP/1.1 to one replica: a keep-alive pool of asyncio connections parsed by httptools.

The router's hop to a replica is on every request, so it is kept to what it needs: a
request written in one ``write`` and the answer parsed by httptools (llhttp, the C parser
uvicorn itself uses), on connections kept open between requests. httpx took about 1.3 ms
per request for the same hop where a raw socket took 0.3 ms (see BENCHMARKS.md).

:class:`Pool` keeps the idle connections to one replica (at most ``keep`` of them, none
idle longer than ``idle_s``: less than uvicorn's 5 s keep-alive, so the router does not
send on a connection the replica is closing). :meth:`Pool.send` raises
:class:`NotConnectedError` when no connection could be made (nothing was sent: safe to try
elsewhere) and :class:`BrokenError` when the connection failed once the request was on its way
(retry only what may be sent twice). The answer's body comes whole
(:meth:`UpstreamAnswer.read`) or chunk by chunk as it arrives
(:meth:`UpstreamAnswer.chunks`); reading stops while more than ``_HIGH`` bytes wait (the
replica is held back, not the router's memory filled).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import AsyncIterator, Callable

import httptools

_HIGH = 1 << 20  # bytes buffered before reading pauses
_NO_BODY = frozenset({"GET", "HEAD", "OPTIONS", "DELETE"})


class UpstreamError(Exception):
    """The hop to a replica failed."""


class NotConnectedError(UpstreamError):
    """No connection could be made: the request was not sent."""


class BrokenError(UpstreamError):
    """The connection failed after the request was sent (or timed out)."""


class _Conn(asyncio.Protocol):
    """One connection, one request at a time; httptools calls the ``on_*`` methods."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.lost = False
        self.idle_since = 0.0
        self._reset()

    def _reset(self) -> None:
        self.status = 0
        self.headers: list[tuple[bytes, bytes]] = []
        self.head: asyncio.Future[None] = self.loop.create_future()
        self.chunks: deque[bytes] = deque()
        self.buffered = 0
        self.complete = False
        self.keep = False
        self.error: UpstreamError | None = None
        self.more = asyncio.Event()
        self.paused = False

    # asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(BrokenError(f"bad answer: {exc}"))

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        if not self.complete:
            self._fail(BrokenError("the replica closed the connection"))

    # httptools
    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers.append((name, value))

    def on_headers_complete(self) -> None:
        self.status = self.parser.get_status_code()
        if not self.head.done():
            self.head.set_result(None)

    def on_body(self, body: bytes) -> None:
        self.chunks.append(body)
        self.buffered += len(body)
        self.more.set()
        if self.buffered > _HIGH and self.transport is not None and not self.paused:
            self.paused = True
            self.transport.pause_reading()

    def on_message_complete(self) -> None:
        self.keep = self.parser.should_keep_alive()
        self.complete = True
        self.more.set()

    def _fail(self, error: UpstreamError) -> None:
        if self.error is None:
            self.error = error
        if not self.head.done():
            self.head.set_exception(error)
            self.head.exception()  # marked retrieved: the waiter may have gone
        self.more.set()
        if self.transport is not None:
            self.transport.close()

    def take(self) -> bytes:
        """The body bytes buffered so far (reading resumes if it had paused)."""
        data = b"".join(self.chunks)
        self.chunks.clear()
        self.buffered = 0
        if self.paused and self.transport is not None:
            self.paused = False
            self.transport.resume_reading()
        return data

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()


class UpstreamAnswer:
    """A replica's answer: status and headers now, the body as it comes."""

    def __init__(self, pool: Pool, conn: _Conn, head_only: bool) -> None:
        self._pool = pool
        self._conn = conn
        self.head_only = head_only
        self._done = False
        self.status: int = conn.status
        self.headers: list[tuple[bytes, bytes]] = conn.headers

    def length(self) -> int | None:
        """The body's length the answer declares (None: not said, or chunked)."""
        for k, v in self.headers:
            if k.lower() == b"content-length" and v.strip().isdigit():
                return int(v)
        return None

    async def read(self, timeout_s: float) -> bytes:
        """The whole body."""
        parts = [c async for c in self.chunks(timeout_s)]
        return b"".join(parts)

    async def chunks(self, timeout_s: float) -> AsyncIterator[bytes]:
        """The body as it arrives; BrokenError if the connection fails or stalls ``timeout_s``."""
        conn = self._conn
        if self.head_only:
            self._finish(reuse=False)
            return
        while True:
            if conn.chunks:
                yield conn.take()
                continue
            if conn.error is not None:
                self._finish(reuse=False)
                raise conn.error
            if conn.complete:
                self._finish(reuse=conn.keep)
                return
            conn.more.clear()
            try:
                await asyncio.wait_for(conn.more.wait(), timeout_s)
            except TimeoutError:
                self._finish(reuse=False)
                raise BrokenError(f"no data from the replica for {timeout_s:g} s") from None

    def _finish(self, reuse: bool) -> None:
        if not self._done:
            self._done = True
            self._pool.release(self._conn, reuse=reuse)

    def close(self) -> None:
        """Give the connection back (closed unless its answer was read to the end)."""
        self._finish(reuse=self._conn.complete and self._conn.keep and not self.head_only)


class Pool:
    """Keep-alive connections to one replica at ``host:port``. Loop thread only."""

    def __init__(
        self,
        host: str,
        port: int,
        clock: Callable[[], float],
        keep: int = 64,
        idle_s: float = 2.0,
    ) -> None:
        self.host = host
        self.port = port
        self.keep = keep
        self.idle_s = idle_s
        self._clock = clock
        self._idle: list[_Conn] = []
        self._host_header = f"{host}:{port}".encode()
        self.closed = False

    async def _conn(self) -> _Conn:
        now = self._clock()
        while self._idle:
            conn = self._idle.pop()
            if not conn.lost and now - conn.idle_since < self.idle_s:
                conn._reset()
                return conn
            conn.close()
        loop = asyncio.get_running_loop()
        try:
            _, proto = await loop.create_connection(lambda: _Conn(loop), self.host, self.port)
        except OSError as exc:
            raise NotConnectedError(f"{self.host}:{self.port}: {exc.strerror or exc}") from None
        return proto

    async def send(
        self,
        method: str,
        target: bytes,
        headers: list[tuple[bytes, bytes]],
        body: bytes,
        timeout_s: float,
    ) -> UpstreamAnswer:
        """Send one request; its answer once the status and headers are in."""
        conn = await self._conn()
        head = [method.encode("ascii"), b" ", target, b" HTTP/1.1\r\nhost: ", self._host_header,
                b"\r\n"]  # fmt: skip
        for k, v in headers:
            head += (k, b": ", v, b"\r\n")
        if body or method not in _NO_BODY:
            head += (b"content-length: ", str(len(body)).encode(), b"\r\n")
        head.append(b"\r\n")
        assert conn.transport is not None
        if conn.lost:
            raise NotConnectedError(f"{self.host}:{self.port}: closed before the request")
        conn.transport.write(b"".join(head) + body)
        try:
            await asyncio.wait_for(conn.head, timeout_s)
        except TimeoutError:
            conn.close()
            raise BrokenError(f"no answer from the replica in {timeout_s:g} s") from None
        except UpstreamError:
            conn.close()
            raise
        except asyncio.CancelledError:
            conn.close()
            raise
        return UpstreamAnswer(self, conn, head_only=method == "HEAD")

    def release(self, conn: _Conn, reuse: bool) -> None:
        """Back to the idle list when it may carry another request, else closed."""
        if reuse and not conn.lost and not self.closed and len(self._idle) < self.keep:
            conn.idle_since = self._clock()
            self._idle.append(conn)
        else:
            conn.close()

    def close(self) -> None:
        """Close the idle connections; those in use close when their answer is done."""
        self.closed = True
        for conn in self._idle:
            with contextlib.suppress(Exception):
                conn.close()
        self._idle.clear()
