"""A hostile tenant's job against ``accelnet serve`` in its default configuration (issue 21,
items 1 and 4): as root the server runs each tenant's tasks as a user of the tenant's own,
so a job cannot mint an admin token in the database, read the server's environment or
another tenant's output and scratch, or signal another tenant's task or the server. Without
root ``serve`` refuses to start unless told, in so many words, that tasks are trusted.

Each attack runs as a real job of tenant ``speech`` (bob, role ``user``) and prints what it
managed; the victim is tenant ``vision`` (alice) and the server itself."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from accelnet.api.server import ServeError, ServeOptions, run_as_users
from accelnet.runtime.local.runas import RunAsError, parse_run_as, tenant_user_name
from tests.api.conftest import Server, spawn, wait_state

V1 = "/api/v1"
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="switching users needs root")


@pytest.fixture(scope="module")
def default_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """``accelnet serve`` with no isolation flag at all, as the README starts it."""
    srv = spawn(tmp_path_factory.mktemp("attack"), "--fabric", "mixed-lab", "--rate", "1000",
                "--burst", "1000")  # fmt: skip
    yield srv
    srv.stop()


def submit(srv: Server, who: str, name: str, run: str) -> str:
    with srv.client(who) as c:
        r = c.post(f"{V1}/jobs", json={"name": name, "run": run})
        assert r.status_code == 201, r.text
        return str(r.json()["jobs"][0]["id"])


def finish(srv: Server, who: str, jid: str) -> tuple[dict[str, Any], str]:
    with srv.client(who) as c:
        job = wait_state(c, jid, {"succeeded", "failed", "cancelled"}, timeout=120)
        return job, c.get(f"{V1}/jobs/{jid}/logs").text


def attack(srv: Server, run: str, name: str = "attack") -> str:
    """Run ``run`` as a job of bob (tenant speech, role user); what it printed."""
    job, out = finish(srv, "bob", submit(srv, "bob", name, run))
    assert job["state"] in ("succeeded", "failed"), (job, out)  # it ran to its end
    return out


@needs_root
def test_the_server_says_which_isolation_is_in_force(default_server: Server) -> None:
    want = "isolation: each tenant's tasks run as a user of its own"
    for _ in range(600):  # printed right after the URL: wait for the reader to get it
        if any(want in line for line in default_server.lines):
            break
        threading.Event().wait(0.1)
    assert any(want in line for line in default_server.lines), default_server.lines


@needs_root
def test_a_user_job_cannot_mint_an_admin_token_in_the_database(default_server: Server) -> None:
    srv = default_server
    secret = "ab" * 32
    script = (
        "import hashlib, sqlite3, time\n"
        "try:\n"
        f"    db = sqlite3.connect({str(srv.db)!r})\n"
        "    db.execute('INSERT INTO api_tokens(id, tenant, role, name, secret_sha256, '\n"
        "               'created_at) VALUES(?,?,?,?,?,?)', ('deadbeef0001', 'ops', 'admin',\n"
        f"               'minted', hashlib.sha256({secret!r}.encode()).hexdigest(), time.time()))\n"
        "    db.commit(); print('MINTED')\n"
        "except Exception as e:\n"
        "    print('REFUSED', type(e).__name__, e)\n"
    )
    out = attack(srv, f"python3 - <<'EOF'\n{script}EOF\ncat {srv.db} >/dev/null && echo READ")
    assert "REFUSED" in out and "MINTED" not in out and "READ" not in out, out
    with httpx.Client(base_url=srv.url, timeout=30) as c:  # the token it tried to make
        r = c.get(f"{V1}/whoami", headers={"Authorization": f"Bearer acn_deadbeef0001_{secret}"})
        assert r.status_code == 401, r.text
    with srv.client("bob") as c:
        assert c.get(f"{V1}/whoami").json()["role"] == "user"


@needs_root
def test_a_job_cannot_read_another_tenants_output_scratch_or_the_servers_environment(
    default_server: Server,
) -> None:
    srv = default_server
    victim = submit(srv, "alice", "victim",
                    'mkdir -p "$ACCELNET_OUTPUT"; echo alice-secret > "$ACCELNET_OUTPUT/s"; '
                    'echo alice-scratch > s; echo "AT $ACCELNET_OUTPUT $PWD"')  # fmt: skip
    job, out = finish(srv, "alice", victim)
    assert job["state"] == "succeeded", (job, out)
    _, output, scratch = next(ln for ln in out.splitlines() if ln.startswith("AT ")).split()
    got = attack(srv, f"cat {output}/s; cat {scratch}/s; ls {output} {scratch}; "
                      f"cat /proc/{srv.proc.pid}/environ; ls {srv.db.parent}/work/logs; "
                      "echo DONE")  # fmt: skip
    assert "alice-secret" not in got and "alice-scratch" not in got, got
    assert "ACCELNET" not in got.split("DONE")[0].replace("ACCELNET_", ""), got  # no environ
    assert got.rstrip().endswith("DONE")


@needs_root
def test_a_job_cannot_signal_another_tenants_task_or_the_server(default_server: Server) -> None:
    srv = default_server
    victim = submit(srv, "alice", "sleeper", "echo PID $$; exec sleep 600")
    with srv.client("alice") as c:
        wait_state(c, victim, {"running"}, timeout=120)
    out = ""
    with srv.client("alice") as c:  # its pid, once it printed it
        for _ in range(600):
            out = c.get(f"{V1}/jobs/{victim}/logs").text
            if "PID " in out:
                break
            threading.Event().wait(0.1)
    pid = int(out.split("PID ")[1].split()[0])
    got = attack(srv, f"kill -9 {pid} && echo KILLED-TASK; kill -9 {srv.proc.pid} && "
                      "echo KILLED-SERVER; kill -9 $PPID && echo KILLED-WORKER; "
                      "echo DONE")  # fmt: skip
    assert "KILLED" not in got and "DONE" in got, got
    assert srv.proc.poll() is None  # the server lives
    with srv.client("alice") as c:
        assert c.get(f"{V1}/jobs/{victim}").json()["state"] == "running"
        assert c.post(f"{V1}/jobs/{victim}/cancel").status_code in (200, 202)
        assert wait_state(c, victim, {"cancelled"}, timeout=120)["state"] == "cancelled"


@needs_root
def test_two_tenants_run_as_two_users_neither_the_servers(default_server: Server) -> None:
    srv = default_server
    _, a = finish(srv, "alice", submit(srv, "alice", "who", "id -un; id -u"))
    b = attack(srv, "id -un; id -u", name="who")
    assert a.split()[0] == tenant_user_name("vision") and b.split()[0] == tenant_user_name("speech")
    assert a.split()[1] != b.split()[1] and "0" not in (a.split()[1], b.split()[1])


# ----- what cannot be configured --------------------------------------------------------------


def test_one_user_for_every_tenant_or_two_tenants_is_refused() -> None:
    with pytest.raises(RunAsError, match="one user for every tenant"):
        parse_run_as(["*=nobody"], euid=0)
    with pytest.raises(RunAsError, match="already tenant 'a''s"):
        parse_run_as(["a=nobody", "b=nobody"], euid=0)
    with pytest.raises(RunAsError, match="tasks never run as root"):
        parse_run_as(["a=root"], euid=0)


def test_without_root_serve_refuses_unless_tasks_are_declared_trusted(tmp_path: Path) -> None:
    opts = ServeOptions(db=tmp_path / "s.db")
    with pytest.raises(ServeError, match=r"not root.*--trusted-tasks"):
        run_as_users(opts, tmp_path / "work", euid=1000)
    users, said = run_as_users(ServeOptions(trusted_tasks=True), None, euid=1000)
    assert not users.active and said.startswith("isolation: NONE (--trusted-tasks)")
    with pytest.raises(ServeError, match="ray backend runs every tenant's tasks"):
        run_as_users(ServeOptions(backend="ray"), tmp_path / "work", euid=0)


@needs_root
def test_the_readme_style_wildcard_mapping_stops_the_server(tmp_path: Path) -> None:
    cmd = [sys.executable, "-c", "from accelnet.cli.main import main; main()", "serve",
           "--port", "0", "--db", str(tmp_path / "s.db"), "--run-as", "*=nobody"]  # fmt: skip
    done = subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=120)
    assert done.returncode != 0
    assert "one user for every tenant" in " ".join(done.stderr.split()), done.stderr
