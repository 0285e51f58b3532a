"""Fixtures for the dashboard tests: a real ``accelnet serve`` process (the mixed-lab fabric
emulated on this CPU), tokens made with the real CLI, and the system Chromium."""

from __future__ import annotations

import os
import queue
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.api.conftest import served_folder

CHROMIUM = Path(os.environ.get("ACCELNET_CHROMIUM", "/usr/bin/chromium"))
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-dev-shm-usage",
]
CLI = [sys.executable, "-c", "from accelnet.cli.main import main; main()"]


@dataclass
class Served:
    """A running ``accelnet serve``: URL, database, working folder, its process."""

    proc: subprocess.Popen[str]
    url: str
    db: Path
    tmp: Path
    stderr: Path

    def token(self, tenant: str, role: str, name: str) -> str:
        """A new token, made as a user would: ``accelnet token create`` (it prints the
        token on stdout)."""
        args = ["--db", str(self.db), "--tenant", tenant, "--role", role, "--name", name]
        out = subprocess.run(
            [*CLI, "token", "create", *args],
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        )
        return out.stdout.strip().splitlines()[-1]

    def client(self, token: str) -> httpx.Client:
        """An httpx client for the API with ``token``."""
        return httpx.Client(
            base_url=self.url, headers={"Authorization": f"Bearer {token}"}, timeout=30
        )


def serve(tmp: Path, *args: str, ready_s: float = 60.0) -> Served:
    """Start ``accelnet serve --port 0 --db tmp/state.db ARGS``; wait for the URL it
    prints."""
    tmp = served_folder(tmp)  # as root, tasks run as their tenants' users
    if os.geteuid() != 0:  # no users to switch to: the tasks are the test's own
        args = ("--trusted-tasks", *args)
    db = tmp / "state.db"
    stderr = tmp / "serve.err"
    proc = subprocess.Popen(
        [*CLI, "serve", "--port", "0", "--db", str(db), "--workdir", str(tmp / "work"), *args],
        stdout=subprocess.PIPE,
        stderr=stderr.open("w"),
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    found: queue.SimpleQueue[str] = queue.SimpleQueue()

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            url = re.search(r"serving on (https?://\S+)", line)
            if url:
                found.put(url.group(1))

    threading.Thread(target=read, daemon=True).start()
    try:
        url = found.get(timeout=ready_s)
    except queue.Empty:
        proc.kill()
        proc.wait()
        raise RuntimeError(f"accelnet serve did not start: {stderr.read_text()[-2000:]}") from None
    return Served(proc, url, db, tmp, stderr)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """One server per test module (tokens can be made while it runs: it reads the token
    table on every request)."""
    tmp = tmp_path_factory.mktemp("dash")
    yield from serving(tmp, "--fabric", "mixed-lab", "--rate", "1000", "--burst", "1000")


def serving(tmp: Path, *args: str) -> Iterator[Served]:
    """:func:`serve`, yielded, then stopped (SIGTERM; killed after 20 s): a fixture's body."""
    srv = serve(tmp, *args)
    try:
        yield srv
    finally:
        if srv.proc.poll() is None:
            srv.proc.send_signal(signal.SIGTERM)
        try:
            srv.proc.wait(20)
        except subprocess.TimeoutExpired:
            srv.proc.kill()
            srv.proc.wait()


@pytest.fixture(scope="module")
def chromium() -> Iterator[object]:
    """The system Chromium under Playwright (skips, saying what is missing)."""
    sync_api = pytest.importorskip(
        "playwright.sync_api", reason="the dashboard tests need playwright (pip install playwright)"
    )
    if not CHROMIUM.is_file():
        pytest.skip(
            f"no Chromium at {CHROMIUM}: the dashboard tests drive the system Chromium "
            "(Debian: apt-get install chromium; or set ACCELNET_CHROMIUM)"
        )
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()
