"""Serve the dashboard's files: ``/`` and ``/ui/...`` (docs/dashboard.md).

Paths (none needs a token, none is in the OpenAPI document):

- ``/``, ``/ui`` and ``/ui/<anything else>``: ``index.html`` (the page routes itself by
  its URL fragment, ``#/jobs/<id>``);
- ``/ui/static/<name>``: a file of the package's ``static/`` folder (``app.js`` and the
  modules it imports, ``style.css``, ``favicon.svg``); a name that is not a plain file
  name there is 404.

Every answer carries a Content-Security-Policy that allows scripts, styles and
connections to this server only (nothing is fetched from anywhere else), and forbids
framing; ``Cache-Control: no-cache`` so that an upgraded server serves its own files.
"""

from __future__ import annotations

import re
from importlib import resources
from typing import TYPE_CHECKING

from fastapi import FastAPI
from fastapi.responses import Response

if TYPE_CHECKING:
    from accelnet.api.context import ApiContext

MEDIA_TYPES = {
    "html": "text/html; charset=utf-8",
    "js": "text/javascript; charset=utf-8",
    "css": "text/css; charset=utf-8",
    "svg": "image/svg+xml",
}
_NAME = re.compile(r"^[A-Za-z0-9_-]+\.(html|js|css|svg)$")
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}


def static_file(name: str) -> tuple[bytes, str] | None:
    """The bytes and media type of ``static/<name>``; None for a name that is not a plain
    file name with a known extension, or no such file. Reads the file on every call
    (they are small), so an edited file is served at once. Never raises for a bad name."""
    match = _NAME.match(name)
    if match is None:
        return None
    path = resources.files(__package__ or "accelnet.api.dashboard") / "static" / name
    if not path.is_file():
        return None
    return path.read_bytes(), MEDIA_TYPES[match.group(1)]


def _answer(name: str) -> Response:
    found = static_file(name)
    if found is None:
        return Response(
            b"not found\n", status_code=404, media_type="text/plain", headers=SECURITY_HEADERS
        )
    body, media_type = found
    return Response(body, media_type=media_type, headers=SECURITY_HEADERS)


def mount_dashboard(app: FastAPI, ctx: ApiContext | None = None) -> None:
    """Add the dashboard's routes (``/``, ``/ui``, ``/ui/...``) to ``app``. ``ctx`` is
    accepted like every part mounted by :func:`accelnet.api.server.build_app`; the
    dashboard needs nothing from it (the page reads the API as its user). Call once."""
    del ctx

    @app.api_route("/", methods=["GET", "HEAD"], include_in_schema=False)
    def index() -> Response:
        return _answer("index.html")

    @app.api_route("/ui", methods=["GET", "HEAD"], include_in_schema=False)
    def ui_root() -> Response:
        return _answer("index.html")

    @app.api_route("/ui/{rest:path}", methods=["GET", "HEAD"], include_in_schema=False)
    def ui(rest: str) -> Response:
        if rest.startswith("static/"):
            return _answer(rest.removeprefix("static/"))
        return _answer("index.html")
