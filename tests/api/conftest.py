"""Fixtures for the API tests: a real ``accelnet serve`` process on 127.0.0.1 (spawned,
its URL read from what it prints), and tokens created in its database beforehand."""

from __future__ import annotations

import hashlib
import os
import queue
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from accelnet.api.db import ApiDb
from accelnet.api.tenants import Tenants
from accelnet.api.tokens import Role, Tokens

# (name, tenant, role) of the tokens every spawned server has
TOKENS = (
    ("admin", "ops", Role.ADMIN),
    ("alice", "vision", Role.USER),
    ("bob", "speech", Role.USER),
    ("val", "vision", Role.VIEWER),
)


@dataclass
class Server:
    """A running ``accelnet serve``: its URL, tokens by name, and what it printed."""

    proc: subprocess.Popen[str]
    url: str
    db: Path
    tokens: dict[str, str]
    lines: list[str] = field(default_factory=list)
    stderr: Path | None = None

    def client(self, who: str | None = None, timeout: float = 30.0) -> httpx.Client:
        """An httpx client, authenticated as token ``who`` (none: anonymous)."""
        headers = {"Authorization": f"Bearer {self.tokens[who]}"} if who else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=timeout)

    def output(self) -> str:
        """Everything the server printed so far (stdout and stderr)."""
        err = self.stderr.read_text(errors="replace") if self.stderr else ""
        return "\n".join(self.lines) + "\n" + err

    def stop(self, timeout: float = 20.0) -> int:
        """SIGTERM, and its exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout)


def issue_tokens(api: ApiDb, people: tuple[tuple[str, str, Role], ...] = TOKENS) -> dict[str, str]:
    """A token for each of ``people`` (name, tenant, role) in ``api``, their tenants
    registered; by name."""
    tokens, tenants = Tokens(api), Tenants(api)
    out = {}
    for name, tenant, role in people:
        out[name] = tokens.create(tenant, role, name, time.time())[1]
        tenants.ensure(tenant, time.time())
    return out


def make_tokens(db: Path) -> dict[str, str]:
    """The :data:`TOKENS`, created in ``db`` (tenants registered)."""
    api = ApiDb(db)
    try:
        return issue_tokens(api)
    finally:
        api.close()


SERVED: set[Path] = set()  # the folders :func:`served_folder` made (removed at the end)


def served_folder(tmp: Path) -> Path:
    """Where a spawned server keeps its database and work folder: a folder of the system's
    temp dir named after ``tmp`` (the same one again for a restart on it), that other users
    may pass but not list (0711). As root a server runs each tenant's tasks as a user of its
    own, who must reach its folders there; pytest's own tmp folders are root's only (0700,
    and pytest makes its base private again whenever a session starts)."""
    digest = hashlib.sha256(str(tmp.resolve()).encode()).hexdigest()[:16]
    base = Path(tempfile.gettempdir()) / f"accelnet-served-{digest}"
    base.mkdir(mode=0o711, exist_ok=True)
    base.chmod(0o711)
    SERVED.add(base)
    return base


def spawn(tmp: Path, *args: str, ready_s: float = 60.0) -> Server:
    """Start ``accelnet serve --port 0 --db DIR/state.db ARGS`` (DIR: :func:`served_folder`
    of ``tmp``) and wait for its URL."""
    tmp = served_folder(tmp)
    if os.geteuid() != 0:  # no users to switch to: the tasks are the test's own
        args = ("--trusted-tasks", *args)
    db = tmp / "state.db"
    tokens = make_tokens(db)
    stderr = tmp / "serve.err"
    cmd = [
        sys.executable,
        "-c",
        "from accelnet.cli.main import main; main()",
        "serve",
        "--port",
        "0",
        "--db",
        str(db),
        "--workdir",
        str(tmp / "work"),
        *args,
    ]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=stderr.open("w"), text=True, env=env
    )
    lines: list[str] = []
    found: queue.SimpleQueue[str] = queue.SimpleQueue()

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line.rstrip("\n"))
            url = re.search(r"serving on (https?://\S+)", line)
            if url:
                found.put(url.group(1))

    threading.Thread(target=read, daemon=True).start()
    try:
        url = found.get(timeout=ready_s)
    except queue.Empty:
        proc.kill()
        raise RuntimeError(
            f"accelnet serve did not start: {lines} {stderr.read_text()[-2000:]}"
        ) from None
    return Server(proc, url, db, tokens, lines, stderr)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """One server per test module: the mixed-lab fabric emulated on this CPU, a high
    rate limit, a 64 KiB body limit."""
    tmp = tmp_path_factory.mktemp("serve")
    srv = spawn(
        tmp, "--fabric", "mixed-lab", "--rate", "1000", "--burst", "1000", "--max-body", "65536"
    )
    yield srv
    srv.stop()


def wait_state(
    client: httpx.Client, job: str, states: set[str], timeout: float = 60.0
) -> dict[str, object]:
    """Poll a job until it is in one of ``states``; returns it."""
    end = time.monotonic() + timeout
    while True:
        r = client.get(f"/api/v1/jobs/{job}")
        body = r.json()
        if r.status_code != 429 and body.get("state") in states:  # 429: a low rate limit
            return dict(body)
        if time.monotonic() > end:
            raise AssertionError(f"job {job} still {body.get('state')} after {timeout} s")
        time.sleep(0.25 if r.status_code == 429 else 0.05)
