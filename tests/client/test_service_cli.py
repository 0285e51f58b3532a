"""``accelnet service up|ls|show|update|down`` and the services in ``accelnet status``,
against a real server (the replica: Python's own http.server, which every tenant's user
may run), and the errors a bad service file gets (file, line, key; nothing started)."""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path

import httpx

from tests.client.conftest import Server
from tests.client.test_cli import run

REPLICA = "exec /usr/bin/python3 -m http.server $ACCELNET_PORT --bind 127.0.0.1"


def service_file(tmp: Path, name: str, extra: str = "") -> Path:
    path = tmp / f"{name}.yaml"
    path.write_text(f"name: {name}\nrun: {REPLICA}\nresources: {{accelerators: 'L4:0.5'}}\n"
                    f"replicas: {{min: 1, max: 2}}\nreadiness: {{path: /}}\n{extra}")  # fmt: skip
    return path


def test_a_service_from_a_file_is_started_shown_listed_updated_and_stopped(
    server: Server, tmp_path: Path, no_config: Path
) -> None:
    env = server.env("alice")
    name = f"web-{uuid.uuid4().hex[:6]}"
    up = run(["service", "up", str(service_file(tmp_path, name)), "--json"], env)
    assert up.exit_code == 0, up.output
    svc = json.loads(up.stdout)
    assert svc["ready"] == 1 and svc["tenant"] == "vision"  # up waits for the first replica
    try:
        for _ in range(5):
            assert httpx.get(svc["url"] + "/", timeout=30).status_code == 200
        shown = run(["service", "show", name], env)
        assert shown.exit_code == 0, shown.output
        assert name in shown.stdout and "ready" in shown.stdout and "replicas" in shown.stdout
        assert svc["replicas"][0]["job"] in shown.stdout
        listed = run(["service", "ls"], env)
        assert listed.exit_code == 0 and name in listed.stdout and "1x L4" in listed.stdout
        status = run(["status"], env)
        assert status.exit_code == 0 and "services" in status.stdout and name in status.stdout
        assert name in {s["name"] for s in json.loads(run(["status", "--json"], env).stdout)
                        ["services"]}  # fmt: skip
        # another tenant sees nothing of it
        bob = run(["service", "ls", "--json"], server.env("bob"))
        assert name not in bob.stdout
        assert run(["service", "show", name], server.env("bob")).exit_code == 1
        # a rolling update: a new version, still answering
        newer = service_file(tmp_path, name, "env: {VERSION: '2'}\n")
        updated = run(["service", "update", str(newer)], env)
        assert updated.exit_code == 0 and "version 2" in updated.stdout, updated.output
        end = time.monotonic() + 90
        while True:
            now = json.loads(run(["service", "show", name, "--json"], env).stdout)
            assert httpx.get(now["url"] + "/", timeout=30).status_code == 200
            if not now["updating"] and now["ready"] >= 1:
                break
            assert time.monotonic() < end, now
            time.sleep(0.3)
        assert now["version"] == 2
    finally:
        down = run(["service", "down", name], env)
    assert down.exit_code == 0 and "stopped" in down.stdout, down.output
    assert run(["service", "show", name], env).exit_code == 1


def test_a_bad_service_file_names_the_line_and_key_and_starts_nothing(
    server: Server, tmp_path: Path, no_config: Path
) -> None:
    env = server.env("alice")
    path = tmp_path / "bad.yaml"
    path.write_text(f"name: bad\nrun: {REPLICA}\nreplicas: {{min: 1, max: 2}}\n"
                    "goal: {p95_ms: -5}\n")  # fmt: skip
    r = run(["service", "up", str(path)], env)
    assert r.exit_code == 1
    assert f"{path}:4: goal.p95_ms = -5" in r.output.replace("\n", "")
    never = service_file(tmp_path, "never").read_text().replace("L4:0.5", "H9:1")
    path.write_text(never)
    r = run(["service", "up", str(path)], env)
    assert r.exit_code == 1 and "H9" in r.output  # the server: no such model here
    assert run(["service", "ls", "--json"], env).stdout.count('"name": "never"') == 0
