"""The router's hop to a replica against raw asyncio servers on 127.0.0.1: connections kept
and reused, HEAD and chunked answers, a big body read with reading paused, and every way a
replica can fail told apart (never reached vs failed after the request went out)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

import pytest

from accelnet.serve.upstream import BrokenError, NotConnectedError, Pool

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


async def _request(reader: asyncio.StreamReader) -> tuple[str, dict[str, str], bytes]:
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    headers = {k.lower(): v.strip() for k, _, v in (x.partition(":") for x in lines[1:] if x)}
    body = await reader.readexactly(int(headers.get("content-length", "0")))
    return lines[0], headers, body


async def _serve(handler: Handler) -> tuple[asyncio.Server, int, list[int]]:
    accepted = [0]

    async def on(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted[0] += 1
        try:
            await handler(reader, writer)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(on, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1], accepted


async def _echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    while True:
        line, headers, body = await _request(reader)
        out = f"{line}|{headers.get('x-n', '')}|".encode() + body
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n" % len(out) + out)
        await writer.drain()


def test_connections_are_kept_and_reused_and_requests_arrive_whole() -> None:
    async def main() -> None:
        server, port, accepted = await _serve(_echo)
        pool = Pool("127.0.0.1", port, time.monotonic)
        for n in range(20):
            answer = await pool.send("POST", b"/x?q=1", [(b"x-n", str(n).encode())],
                                     b"body%d" % n, timeout_s=10)  # fmt: skip
            assert answer.status == 200
            assert await answer.read(10) == b"POST /x?q=1 HTTP/1.1|%d|body%d" % (n, n)
        assert accepted[0] == 1  # one connection for twenty requests
        # two at once need two connections; both go back to the pool
        a, b = await asyncio.gather(pool.send("GET", b"/a", [], b"", 10),
                                    pool.send("GET", b"/b", [], b"", 10))  # fmt: skip
        assert await a.read(10) == b"GET /a HTTP/1.1||" and await b.read(10) == b"GET /b HTTP/1.1||"
        assert accepted[0] == 2
        pool.close()
        server.close()

    asyncio.run(main())


def test_an_idle_connection_older_than_idle_s_is_not_reused() -> None:
    async def main() -> None:
        server, port, accepted = await _serve(_echo)
        now = [0.0]
        pool = Pool("127.0.0.1", port, lambda: now[0], idle_s=2.0)
        await (await pool.send("GET", b"/", [], b"", 10)).read(10)
        now[0] = 1.0
        await (await pool.send("GET", b"/", [], b"", 10)).read(10)
        assert accepted[0] == 1
        now[0] = 3.5  # idle 2.5 s: the replica may be closing it
        await (await pool.send("GET", b"/", [], b"", 10)).read(10)
        assert accepted[0] == 2
        pool.close()
        server.close()

    asyncio.run(main())


def test_head_and_chunked_answers() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            line, _, _ = await _request(reader)
            if line.startswith("HEAD"):
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 1234\r\n\r\n")
            else:
                writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n")
                for part in (b"frame1", b"frame2"):
                    writer.write(b"%x\r\n%s\r\n" % (len(part), part))
                    await writer.drain()
                    await asyncio.sleep(0.05)
                writer.write(b"0\r\n\r\n")
            await writer.drain()

    async def main() -> None:
        server, port, accepted = await _serve(handler)
        pool = Pool("127.0.0.1", port, time.monotonic)
        head = await pool.send("HEAD", b"/", [], b"", 10)
        assert head.status == 200 and head.length() == 1234
        assert await head.read(10) == b""  # a HEAD answer has no body, whatever it says
        answer = await pool.send("GET", b"/video", [], b"", 10)
        assert answer.length() is None
        got = [c async for c in answer.chunks(10)]
        assert b"".join(got) == b"frame1frame2" and len(got) >= 2  # as they came
        again = await pool.send("GET", b"/video", [], b"", 10)
        assert await again.read(10) == b"frame1frame2"
        assert accepted[0] == 2  # the HEAD's connection is not reused; the chunked one is
        pool.close()
        server.close()

    asyncio.run(main())


def test_a_body_bigger_than_the_buffer_arrives_whole() -> None:
    blob = bytes(range(256)) * (5 * 4096)  # 5 MiB: reading pauses and resumes

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n" % len(blob))
        writer.write(blob)
        await writer.drain()
        await asyncio.sleep(1)

    async def main() -> None:
        server, port, _ = await _serve(handler)
        pool = Pool("127.0.0.1", port, time.monotonic)
        answer = await pool.send("GET", b"/", [], b"", 10)
        total = 0
        async for chunk in answer.chunks(10):
            assert len(chunk) <= 2 << 20  # never much more than the buffer's bound at once
            total += len(chunk)
            await asyncio.sleep(0.01)  # a slow client: the pool must not buffer it all
        assert total == len(blob)
        pool.close()
        server.close()

    asyncio.run(main())


def test_failures_are_told_apart() -> None:
    async def close_at_once(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _request(reader)

    async def close_mid_body(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _request(reader)
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\nonly-part")
        await writer.drain()

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _request(reader)
        await asyncio.sleep(5)

    async def garbage(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await _request(reader)
        writer.write(b"NOT HTTP AT ALL\r\n\r\n")
        await writer.drain()
        await asyncio.sleep(1)

    async def main() -> None:
        server, port, _ = await _serve(_echo)
        server.close()
        await server.wait_closed()
        with pytest.raises(NotConnectedError):  # nobody listens: nothing was sent
            await Pool("127.0.0.1", port, time.monotonic).send("POST", b"/", [], b"x", 10)
        for handler in (close_at_once, garbage):
            server, port, _ = await _serve(handler)
            with pytest.raises(BrokenError):
                await Pool("127.0.0.1", port, time.monotonic).send("POST", b"/", [], b"x", 10)
            server.close()
        server, port, _ = await _serve(silent)
        t0 = time.monotonic()
        with pytest.raises(BrokenError, match="no answer"):
            await Pool("127.0.0.1", port, time.monotonic).send("GET", b"/", [], b"", 0.3)
        assert time.monotonic() - t0 < 4  # the timeout cut it, not the server
        server.close()
        server, port, _ = await _serve(close_mid_body)
        pool = Pool("127.0.0.1", port, time.monotonic)
        answer = await pool.send("GET", b"/", [], b"", 10)
        with pytest.raises(BrokenError):
            await answer.read(10)
        server.close()

    asyncio.run(main())
