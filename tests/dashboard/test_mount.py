"""The dashboard's files as the server serves them (no browser, no cluster)."""

from __future__ import annotations

import re
import warnings
from importlib import resources

from fastapi import FastAPI

from accelnet.api.dashboard import mount_dashboard, static_file

with warnings.catch_warnings():  # starlette would rather have httpx2 behind its TestClient
    warnings.filterwarnings("ignore", message="Using `httpx` with `starlette.testclient`")
    from fastapi.testclient import TestClient


NAMES = sorted(p.name for p in (resources.files("accelnet.api.dashboard") / "static").iterdir())


def client() -> TestClient:
    app = FastAPI()
    mount_dashboard(app)
    return TestClient(app)


def test_the_page_is_served_at_the_root_and_under_ui_without_a_token() -> None:
    c = client()
    for path in ("/", "/ui", "/ui/", "/ui/jobs/anything"):
        r = c.get(path)
        assert r.status_code == 200, path
        assert r.headers["content-type"].startswith("text/html")
        assert '<script type="module" src="/ui/static/app.js"></script>' in r.text
    assert c.head("/").status_code == 200


def test_static_files_with_their_types_and_a_strict_policy() -> None:
    c = client()
    for name, media in (("app.js", "text/javascript"), ("fabric.js", "text/javascript"),
                        ("style.css", "text/css"), ("favicon.svg", "image/svg+xml")):  # fmt: skip
        r = c.get(f"/ui/static/{name}")
        assert r.status_code == 200
        assert r.headers["content-type"].startswith(media)
        csp = r.headers["content-security-policy"]
        assert "script-src 'self'" in csp and "connect-src 'self'" in csp
        assert "frame-ancestors 'none'" in csp
        assert r.headers["x-content-type-options"] == "nosniff"
    for bad in ("nope.js", "..%2Fmount.py", "app.js.map", "index", "%2E%2E/mount.py"):
        assert c.get(f"/ui/static/{bad}").status_code == 404, bad
    # a path with ../ is resolved by the client first: /ui/mount.py, the page itself
    r = c.get("/ui/static/../mount.py")
    assert "mount_dashboard" not in r.text and "<!doctype html>" in r.text
    assert static_file("../__init__.py") is None
    assert static_file("mount.py") is None


def test_the_page_needs_nothing_from_elsewhere() -> None:
    """Every reference in the files is to this server: no CDN, no font service."""
    for name in NAMES:
        found = static_file(name)
        assert found is not None
        text = found[0].decode()
        urls = re.findall(r"(?:https?:)?//[\\w.-]+\\.[a-z]{2,}[^\\s'\\\"]*", text)
        assert urls in ([], ["http://www.w3.org/2000/svg"]), (name, urls)
    html = static_file("index.html")
    assert html is not None
    assert re.search(rb"<script(?![^>]*\bsrc=)", html[0]) is None  # no inline script


def test_the_files_are_in_the_package() -> None:
    assert set(NAMES) >= {"index.html", "app.js", "dom.js", "fabric.js", "views.js", "style.css"}
    for name in NAMES:  # each one is served
        assert client().get(f"/ui/static/{name}").status_code == 200, name
