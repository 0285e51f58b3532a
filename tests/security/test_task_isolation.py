"""Task isolation on one machine: a task never sees the server's tokens, credentials or
database path in its environment, it starts in its own scratch folder, and its job's
folders are the service user's only (0700)."""

from __future__ import annotations

import os
import pwd
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from accelnet.runtime.local.runas import tenant_user_name
from accelnet.runtime.local.taskenv import scrub_env
from tests.api.conftest import Server, spawn, wait_state

V1 = "/api/v1"
SECRETS = {
    "ACCELNET_TOKEN": "acn_0123456789ab_servers-own-secret",
    "ACCELNET_URL": "http://admin:pw@127.0.0.1:1",
    "ACCELNET_DB": "/srv/accelnet/state.db",
    "HF_TOKEN": "hf_secret",
    "MY_API_KEY": "k-secret",
    "AWS_SECRET_ACCESS_KEY": "aws-secret",
    "DB_PASSWORD": "pw-secret",
}


def test_scrub_env_drops_credentials_and_keeps_the_rest() -> None:
    env = {**SECRETS, "PATH": "/usr/bin", "HOME": "/root", "LANG": "C.UTF-8",
           "ACCELNET_RAY_NODE": "n1", "ACCELNET_EMULATE": "lab", "api_key": "x"}  # fmt: skip
    assert scrub_env(env) == {"PATH": "/usr/bin", "HOME": "/root", "LANG": "C.UTF-8",
                              "ACCELNET_RAY_NODE": "n1", "ACCELNET_EMULATE": "lab"}  # fmt: skip


@pytest.fixture(scope="module")
def secret_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A server started with credentials in its environment."""
    tmp = tmp_path_factory.mktemp("isolated")
    with pytest.MonkeyPatch.context() as mp:
        for key, value in SECRETS.items():
            mp.setenv(key, value)
        srv = spawn(tmp, "--fabric", "mixed-lab", "--rate", "1000", "--burst", "1000")
    yield srv
    srv.stop()


def test_tasks_see_no_server_secrets_and_private_dirs(secret_server: Server) -> None:
    srv = secret_server
    run = ('env; echo "CWD $(pwd) $ACCELNET_SCRATCH"; '
           'echo "MODE $(stat -c %a "$ACCELNET_SCRATCH")"; echo "$PASSED"')  # fmt: skip
    with srv.client("alice") as c:
        r = c.post(f"{V1}/jobs", json={"name": "envdump", "run": run, "env": {"PASSED": "yes"}})
        assert r.status_code == 201, r.text
        jid = str(r.json()["jobs"][0]["id"])
        job = wait_state(c, jid, {"succeeded", "failed", "cancelled"})
        assert job["state"] == "succeeded", job
        out = c.get(f"{V1}/jobs/{jid}/logs").text
    assert "ACCELNET_JOB=" in out and "MODE 700" in out and out.rstrip().endswith("yes")
    cwd = next(line.split()[1:] for line in out.splitlines() if line.startswith("CWD "))
    assert cwd[0] == cwd[1] and "/scratch/" in cwd[0]  # it starts in its own scratch dir
    for key, value in SECRETS.items():
        assert f"{key}=" not in out and value not in out, key
    assert str(srv.db) not in out
    work = srv.db.parent / "work"
    for path in (work / "workers", work / "logs"):  # the service's own: closed to tasks
        assert stat.S_IMODE(path.stat().st_mode) == 0o700, path
    for path in (work / "scratch", work / "outputs"):  # passable to the tenants' users only
        assert stat.S_IMODE(path.stat().st_mode) & 0o066 == 0, path  # never listable


needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="switching users needs root")


@pytest.fixture(scope="module")
def runas_server() -> Iterator[Server]:
    """A root server whose tenant ``vision`` (alice's) runs as ``nobody`` (the others as
    users of their own); its folders in a place other users can pass."""
    base = Path(tempfile.mkdtemp(prefix="accelnet-runas-"))
    base.chmod(0o711)
    srv = spawn(base, "--fabric", "mixed-lab", "--rate", "1000", "--burst", "1000",
                "--run-as", "vision=nobody")  # fmt: skip
    yield srv
    srv.stop()
    shutil.rmtree(base, ignore_errors=True)


def _run(srv: Server, who: str, run: str) -> tuple[dict[str, Any], str]:
    with srv.client(who) as c:
        r = c.post(f"{V1}/jobs", json={"name": "whoami", "run": run})
        assert r.status_code == 201, r.text
        jid = str(r.json()["jobs"][0]["id"])
        job = wait_state(c, jid, {"succeeded", "failed", "cancelled"})
        return job, c.get(f"{V1}/jobs/{jid}/logs").text


@needs_root
def test_a_mapped_tenants_tasks_run_as_its_user_and_cannot_read_the_service(
    runas_server: Server,
) -> None:
    srv = runas_server
    work = srv.db.parent / "work"
    nobody = pwd.getpwnam("nobody")
    run = (f'id -u; pwd; echo "SCRATCH $ACCELNET_SCRATCH"; cat {srv.db} >/dev/null && echo DB; '
           f"ls {work}/logs >/dev/null && echo LOGS; ls {work}/scratch >/dev/null && echo LIST; "
           'mkdir -p "$ACCELNET_OUTPUT" && echo o > "$ACCELNET_OUTPUT/o" && echo OUT')  # fmt: skip
    job, out = _run(srv, "alice", run)
    assert job["state"] == "succeeded", (job, out)
    lines = out.splitlines()
    assert lines[0] == str(nobody.pw_uid)
    assert lines[2] == f"SCRATCH {lines[1]}"  # it works in its own scratch folder
    assert "DB" not in lines and "LOGS" not in lines and "LIST" not in lines  # all refused
    assert "OUT" in lines  # its job's output folder is its own
    assert stat.S_IMODE(srv.db.stat().st_mode) == 0o600
    job, out = _run(srv, "bob", "id -un")  # tenant speech: not mapped, a user of its own
    assert job["state"] == "succeeded" and out.strip() == tenant_user_name("speech")


@needs_root
def test_run_as_refuses_a_bad_mapping_or_a_workdir_the_user_cannot_reach(
    tmp_path: Path,
) -> None:
    for args, message in (
        (["--run-as", "vision=no-such-user-x"], "no user 'no-such-user-x' on this machine"),
        (["--run-as", "vision"], "expected TENANT=USER"),
        (["--run-as", "vision=nobody"], "is not passable by other users"),  # pytest's tmp
    ):
        cmd = [sys.executable, "-c", "from accelnet.cli.main import main; main()", "serve",
               "--port", "0", "--db", str(tmp_path / "s.db"), *args]  # fmt: skip
        done = subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=60)
        assert done.returncode != 0 and message in " ".join(done.stderr.split()), done.stderr
