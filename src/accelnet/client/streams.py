"""Streamed answers: a task's log as it is written, the event log as server-sent events."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TypeVar

import httpx

from accelnet.client.errors import unreachable
from accelnet.client.models import EventOut

_T = TypeVar("_T")


class Stream(Iterator[_T]):
    """What a streamed answer yields, as it comes (log text, events). Iterate it; it
    closes its connection when exhausted, on :meth:`close`, or as a context manager.
    ApiError (status 0) if the connection breaks midway."""

    def __init__(self, response: httpx.Response, items: Iterator[_T], url: str) -> None:
        self._response = response
        self._items = items
        self._url = url

    def __next__(self) -> _T:
        try:
            return next(self._items)
        except StopIteration:
            self.close()
            raise
        except httpx.TransportError as exc:
            self.close()
            raise unreachable(self._url, exc) from None

    def close(self) -> None:
        """Close the connection (idempotent)."""
        self._response.close()

    def __enter__(self) -> Stream[_T]:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        self.close()


def sse_events(r: httpx.Response) -> Iterator[EventOut]:
    """Server-sent events: ``data:`` lines up to a blank line make one event."""
    data: list[str] = []
    for line in r.iter_lines():
        if line.startswith("data:"):
            data.append(line[5:].removeprefix(" "))
        elif not line and data:
            yield EventOut.model_validate_json("\n".join(data))
            data = []
