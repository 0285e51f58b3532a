"""Fixtures for the client tests: one real ``accelnet serve`` process on 127.0.0.1 for
the whole package (the ``mixed-lab`` fabric emulated on this CPU), tokens created with
the real CLI (``accelnet token create``) in its database."""

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

import pytest
from typer.testing import CliRunner

from accelnet.cli.main import app
from accelnet.client import Client
from tests.api.conftest import served_folder

# name -> (tenant, role)
TOKENS = {
    "admin": ("ops", "admin"),
    "alice": ("vision", "user"),
    "bob": ("speech", "user"),
    "val": ("vision", "viewer"),
}


def console_script() -> list[str]:
    """The installed ``accelnet`` console script (or the module, without one)."""
    script = Path(sys.executable).parent / "accelnet"
    if script.exists():
        return [str(script)]
    return [sys.executable, "-c", "from accelnet.cli.main import main; main()"]


def create_token(db: Path, tenant: str, role: str, name: str = "") -> str:
    """``accelnet token create`` (in this process): the token it prints."""
    result = CliRunner().invoke(
        app, ["token", "create", "--db", str(db), "--tenant", tenant, "--role", role,
              "--name", name],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    found = re.search(r"acn_[0-9a-f]+_[0-9a-f]+", result.stdout)
    assert found, result.output
    return found.group(0)


@dataclass
class Server:
    """A running server: URL, database, tokens by name."""

    proc: subprocess.Popen[str]
    url: str
    db: Path
    tokens: dict[str, str]
    err: Path

    def client(self, who: str, timeout: float = 30.0) -> Client:
        """A client authenticated as token ``who``."""
        return Client(self.url, self.tokens[who], timeout=timeout)

    def env(self, who: str) -> dict[str, str]:
        """ACCELNET_URL and ACCELNET_TOKEN for ``who``."""
        return {"ACCELNET_URL": self.url, "ACCELNET_TOKEN": self.tokens[who]}


def spawn(tmp: Path, *extra: str) -> Server:
    """``accelnet serve --port 0 --db tmp/state.db --fabric mixed-lab EXTRA`` (the console
    script), tokens :data:`TOKENS` created first; returns once it prints its URL."""
    tmp = served_folder(tmp)  # as root, tasks run as their tenants' users
    if os.geteuid() != 0:  # no users to switch to: the tasks are the test's own
        extra = ("--trusted-tasks", *extra)
    db = tmp / "state.db"
    tokens = {who: create_token(db, t, r, who) for who, (t, r) in TOKENS.items()}
    err = tmp / "serve.err"
    cmd = [*console_script(), "serve", "--port", "0", "--db", str(db), "--fabric",
           "mixed-lab", "--log-level", "warning", *extra]  # fmt: skip
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=err.open("w"), text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )  # fmt: skip
    found: queue.SimpleQueue[str] = queue.SimpleQueue()

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            url = re.search(r"serving on (https?://\S+)", line)
            if url:
                found.put(url.group(1))

    threading.Thread(target=read, daemon=True).start()
    try:
        url = found.get(timeout=60)
    except queue.Empty:
        proc.kill()
        raise RuntimeError(f"accelnet serve did not start: {err.read_text()[-2000:]}") from None
    return Server(proc, url, db, tokens, err)


def stop(server: Server) -> None:
    """SIGTERM, then wait (kill after 30 s)."""
    server.proc.send_signal(signal.SIGTERM)
    try:
        server.proc.wait(30)
    except subprocess.TimeoutExpired:
        server.proc.kill()


@pytest.fixture(scope="package")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """One server for the package's tests, with a high rate limit."""
    srv = spawn(tmp_path_factory.mktemp("client-serve"), "--rate", "1000", "--burst", "1000")
    yield srv
    stop(srv)


@pytest.fixture
def no_config(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """No ACCELNET_* in the environment, and a config folder of the test's own
    (returned: where ``accelnet/client.toml`` goes)."""
    monkeypatch.delenv("ACCELNET_URL", raising=False)
    monkeypatch.delenv("ACCELNET_TOKEN", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    return tmp_path / "config"
