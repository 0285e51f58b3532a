"""Task isolation on one machine: a task never sees the server's tokens, credentials or
database path in its environment, and its job's folders are the service user's only (0700)."""

from __future__ import annotations

import stat
from collections.abc import Iterator

import pytest

from accelnet.runtime.taskenv import scrub_env
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
    run = 'env; echo "MODE $(stat -c %a "$ACCELNET_SCRATCH")"; echo "$PASSED"'
    with srv.client("alice") as c:
        r = c.post(f"{V1}/jobs", json={"name": "envdump", "run": run, "env": {"PASSED": "yes"}})
        assert r.status_code == 201, r.text
        jid = str(r.json()["jobs"][0]["id"])
        job = wait_state(c, jid, {"succeeded", "failed", "cancelled"})
        assert job["state"] == "succeeded", job
        out = c.get(f"{V1}/jobs/{jid}/logs").text
    assert "ACCELNET_JOB=" in out and "MODE 700" in out and out.rstrip().endswith("yes")
    for key, value in SECRETS.items():
        assert f"{key}=" not in out and value not in out, key
    assert str(srv.db) not in out
    work = srv.db.parent / "work"
    private = [work / "scratch", work / "workers", work / "logs", work / "outputs"]
    for path in private:
        assert stat.S_IMODE(path.stat().st_mode) == 0o700, path
