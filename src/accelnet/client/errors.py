"""The client's errors: one type, :class:`ApiError`, for everything the server refused and
for a server that could not be reached (``status`` 0)."""

from __future__ import annotations

from typing import Any

import httpx


class ApiError(Exception):
    """A call that did not succeed.

    ``status`` is the HTTP status (0: no answer came back), ``code`` the API's stable
    error code (``invalid``, ``not_found``, ``unauthenticated``, ``forbidden``,
    ``conflict``, ``over_quota``, ``rate_limited``, ``too_large``, ... docs/api.md; and,
    with status 0, ``unreachable`` or ``timeout``), ``message`` the server's sentence and
    ``field`` the key path of the offending value (``jobs[0].resources.accelerators``,
    ``limit``) when there is one. ``retry_after`` is the server's ``Retry-After`` (429).
    """

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        field: str | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.field = field
        self.retry_after = retry_after

    def __str__(self) -> str:
        where = f" (field {self.field})" if self.field else ""
        head = f"{self.status} {self.code}" if self.status else self.code
        return f"{head}: {self.message}{where}"

    def __repr__(self) -> str:
        return (f"ApiError(status={self.status}, code={self.code!r}, message={self.message!r}, "
                f"field={self.field!r})")  # fmt: skip

    @classmethod
    def from_response(cls, response: httpx.Response) -> ApiError:
        """The error a non-2xx answer carries (``{"error": {...}}``), or, for a body of
        another shape (a proxy's page), ``http_<status>`` and the start of the body."""
        retry = response.headers.get("retry-after")
        retry_after = float(retry) if retry and retry.replace(".", "", 1).isdigit() else None
        try:
            body: Any = response.json()
        except ValueError:
            body = None
        err = body.get("error") if isinstance(body, dict) else None
        if isinstance(err, dict) and isinstance(err.get("code"), str):
            field = err.get("field")
            return cls(
                response.status_code,
                err["code"],
                str(err.get("message", "")),
                field if isinstance(field, str) else None,
                retry_after,
            )
        text = response.text.strip()[:300] or response.reason_phrase
        return cls(response.status_code, f"http_{response.status_code}", text, None, retry_after)


def unreachable(url: str, exc: httpx.TransportError) -> ApiError:
    """Status 0: the server at ``url`` did not answer (refused, unknown host, timed out)."""
    if isinstance(exc, httpx.TimeoutException):
        return ApiError(0, "timeout", f"the accelnet server at {url} did not answer in time "
                        f"({type(exc).__name__})")  # fmt: skip
    why = str(exc) or type(exc).__name__
    return ApiError(0, "unreachable", f"cannot reach the accelnet server at {url}: {why}")
