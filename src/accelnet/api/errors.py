"""Errors of the REST API: one JSON shape, ``{"error": {"code", "message", "field"}}``.

Every failure leaves the service as an :class:`ApiError` (raised by the services) or is
turned into one here: FastAPI's request validation (its default 422 body is replaced; the
pydantic location becomes a key path such as ``jobs[0].resources.accelerators`` or
``limit``), Starlette's HTTP errors (unknown route, method not allowed) and anything
unexpected (500, logged with its traceback, never echoed to the client).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from accelnet.specio import TYPE_ERRORS, format_path, short_repr, strict_type_message

log = logging.getLogger("accelnet.api")

_CODES = {  # HTTP status -> error code, for errors not raised as ApiError
    400: "bad_request",
    401: "unauthenticated",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    406: "not_acceptable",
    409: "conflict",
    413: "too_large",
    415: "unsupported_media_type",
    422: "invalid",
    429: "rate_limited",
}
_LOCATIONS = ("body", "query", "path", "header", "cookie")


class ApiError(Exception):
    """A request that cannot be served: HTTP ``status``, a stable ``code``, a sentence, and
    the key path of the offending value (``field``) when there is one."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        field: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.field = field
        self.headers = dict(headers or {})

    def body(self) -> dict[str, Any]:
        """The JSON body."""
        return error_body(self.code, self.message, self.field)


def error_body(code: str, message: str, field: str | None = None) -> dict[str, Any]:
    """``{"error": {"code": ..., "message": ..., "field": ...}}``."""
    return {"error": {"code": code, "message": message, "field": field}}


def invalid(message: str, field: str | None = None) -> ApiError:
    """422 ``invalid``: a value that breaks the contract; ``field`` names its key path."""
    return ApiError(422, "invalid", message, field)


def not_found(message: str) -> ApiError:
    """404 ``not_found`` (also what a job of another tenant is, for a non-admin)."""
    return ApiError(404, "not_found", message)


def forbidden(message: str, field: str | None = None) -> ApiError:
    """403 ``forbidden``: the token's role (or tenant) does not allow this."""
    return ApiError(403, "forbidden", message, field)


def conflict(message: str) -> ApiError:
    """409 ``conflict``: not possible in the current state (cancelling a finished job)."""
    return ApiError(409, "conflict", message)


def unauthenticated(message: str) -> ApiError:
    """401 ``unauthenticated``, with the ``WWW-Authenticate`` challenge."""
    return ApiError(401, "unauthenticated", message, headers={"WWW-Authenticate": "Bearer"})


def field_path(loc: Sequence[str | int]) -> str:
    """A pydantic/FastAPI location as a key path: ``("body", "jobs", 0, "name")`` ->
    ``jobs[0].name``, ``("query", "limit")`` -> ``limit``."""
    parts = list(loc)
    if parts and parts[0] in _LOCATIONS:
        parts = parts[1:]
    return format_path([p if isinstance(p, int) else str(p) for p in parts])


def _validation_error(exc: RequestValidationError) -> ApiError:
    errors = exc.errors()
    if not errors:
        return invalid("invalid request")
    first = errors[0]
    loc = first.get("loc", ())
    field = field_path(loc) or None
    parts = []
    for err in errors[:5]:
        path = field_path(err.get("loc", ()))
        msg = str(err.get("msg", "invalid")).removeprefix("Value error, ")
        if err.get("type") in TYPE_ERRORS:  # ``"weight": true``: say what was given
            value = err.get("input")
            path = f"{path} = {short_repr(value)}" if path else short_repr(value)
            msg = strict_type_message(str(err["type"]), value)
        parts.append(f"{path}: {msg}" if path else msg)
    if first.get("type") == "json_invalid":
        return invalid(f"the body is not valid JSON: {first.get('ctx', {}).get('error', '')}")
    return invalid("; ".join(parts), field)


def _respond(request: Request, err: ApiError) -> JSONResponse:
    request.state.error_code = err.code  # for the audit log
    return JSONResponse(err.body(), status_code=err.status, headers=err.headers or None)


def install_error_handlers(app: FastAPI) -> None:
    """Make every error response of ``app`` the JSON error shape."""

    async def on_api_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, ApiError)
        return _respond(request, exc)

    async def on_validation(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)
        return _respond(request, _validation_error(exc))

    async def on_http(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, StarletteHTTPException)
        code = _CODES.get(exc.status_code, "error")
        message = str(exc.detail) if exc.detail else code.replace("_", " ")
        if exc.status_code == 404 and message == "Not Found":
            message = f"no such path: {request.url.path}"
        headers = dict(exc.headers or {})
        return _respond(request, ApiError(exc.status_code, code, message, headers=headers))

    async def on_crash(request: Request, exc: Exception) -> JSONResponse:
        log.error("internal error on %s %s", request.method, request.url.path, exc_info=exc)
        err = ApiError(500, "internal", "internal error (the server log has the details)")
        return _respond(request, err)

    app.add_exception_handler(ApiError, on_api_error)
    app.add_exception_handler(RequestValidationError, on_validation)
    app.add_exception_handler(StarletteHTTPException, on_http)
    app.add_exception_handler(Exception, on_crash)
