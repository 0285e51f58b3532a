"""``accelnet submit|status|logs|cancel|devices|top`` against a real server (typer's
CliRunner, and the installed console script once)."""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from pathlib import Path

from typer.testing import CliRunner, Result

from accelnet.cli.main import app
from tests.client.conftest import Server, console_script


def run(args: list[str], env: dict[str, str] | None = None) -> Result:
    return CliRunner().invoke(app, args, env={"COLUMNS": "200", **(env or {})})


def job_file(tmp: Path, run_cmd: str, name: str | None = None) -> tuple[Path, str]:
    name = name or f"cli-{uuid.uuid4().hex[:8]}"
    path = tmp / f"{name}.yaml"
    path.write_text(f"name: {name}\nresources: {{accelerators: 'any:1'}}\nrun: {run_cmd}\n")
    return path, name


def test_submit_wait_status_logs(server: Server, tmp_path: Path, no_config: Path) -> None:
    env = server.env("alice")
    path, name = job_file(tmp_path, "echo hello from $ACCELNET_JOB_NAME; echo done")
    r = run(["submit", str(path), "--wait"], env)
    assert r.exit_code == 0, r.output
    assert f"submitted {name}-" in r.stdout and "succeeded" in r.stdout
    job = r.stdout.split()[1]
    r = run(["status", job, "--json"], env)
    assert r.exit_code == 0 and json.loads(r.stdout)["state"] == "succeeded"
    r = run(["status", job], env)
    assert r.exit_code == 0 and "job:succeeded" in r.stdout and "events" in r.stdout
    r = run(["status", "--state", "succeeded", "--limit", "100"], env)
    assert r.exit_code == 0 and job in r.stdout
    r = run(["status", "--json", "--limit", "3"], env)
    listed = json.loads(r.stdout)["jobs"]
    assert len(listed) <= 3 and all(j["tenant"] == "vision" for j in listed)
    r = run(["logs", job], env)
    assert r.exit_code == 0 and r.stdout.endswith("done\n") and "hello from" in r.stdout
    r = run(["logs", "-f", job], env)
    assert r.exit_code == 0 and r.stdout.endswith("done\n")
    assert run(["logs", "--err", job], env).stdout == ""


def test_submit_json_failure_and_cancel(server: Server, tmp_path: Path, no_config: Path) -> None:
    env = server.env("alice")
    path, _ = job_file(tmp_path, "exit 3")
    r = run(["submit", str(path), "--wait", "--json"], env)
    assert r.exit_code == 1
    (failed,) = json.loads(r.stdout)["jobs"]
    assert failed["state"] == "failed" and failed["error"]
    path, _ = job_file(tmp_path, "sleep 30")
    r = run(["submit", str(path), "--json"], env)
    assert r.exit_code == 0
    job = json.loads(r.stdout)["jobs"][0]["id"]
    r = run(["cancel", job, "no-such-job"], env)
    assert r.exit_code == 1
    assert job in r.stdout and "no-such-job: 404 not_found" in r.output
    r = run(["submit", str(path), "--wait", "--timeout", "0.2"], env)
    assert r.exit_code == 1 and "gave up after 0.2 s; not finished: cli-" in r.output
    late = r.stdout.split()[1]
    assert run(["cancel", late], env).exit_code == 0


def test_devices_and_top(server: Server, no_config: Path) -> None:
    env = server.env("val")
    r = run(["devices", "--json"], env)
    assert r.exit_code == 0 and len(json.loads(r.stdout)["devices"]) == 18
    r = run(["devices"], env)
    assert r.exit_code == 0 and "h100box/gpu0" in r.stdout and "Jetson-AGX-Orin" in r.stdout
    r = run(["top", "--once"], env)
    assert r.exit_code == 0, r.output
    assert "accelnet top" in r.stdout and "as vision/viewer" in r.stdout
    assert "devices 18" in r.stdout and "queue" in r.stdout


def test_config_file_and_errors(server: Server, no_config: Path, tmp_path: Path) -> None:
    r = run(["devices"])
    assert r.exit_code == 2 and "no server url or token given" in r.output
    assert "ACCELNET_URL" in r.output and str(no_config) in r.output
    cfg = no_config / "accelnet" / "client.toml"
    cfg.parent.mkdir(parents=True)
    cfg.write_text(f'url = "{server.url}"\ntoken = "{server.tokens["bob"]}"\n')
    r = run(["status", "--json"])
    assert r.exit_code == 0 and all(j["tenant"] == "speech" for j in json.loads(r.stdout)["jobs"])
    r = run(["devices", "--url", "http://127.0.0.1:1"])
    assert r.exit_code == 2
    assert "cannot reach the accelnet server at http://127.0.0.1:1" in r.output
    assert "URL from --url" in r.output
    r = run(["devices"], {"ACCELNET_TOKEN": "acn_000000000000_" + "0" * 64})
    assert r.exit_code == 1 and "401 unauthenticated" in r.output
    assert "token from ACCELNET_TOKEN" in r.output
    r = run(["status", "nope"])
    assert r.exit_code == 1 and "404 not_found" in r.output
    bad, _ = job_file(tmp_path, "true")
    bad.write_text(bad.read_text() + "prority: 3\n")
    r = run(["submit", str(bad)])
    assert r.exit_code == 1 and "prority" in r.output


def test_console_script(server: Server, tmp_path: Path) -> None:
    path, name = job_file(tmp_path, "echo via console script")
    env = {**os.environ, **server.env("alice"), "XDG_CONFIG_HOME": str(tmp_path)}
    done = subprocess.run([*console_script(), "submit", str(path), "--wait"], env=env,
                          capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    job = done.stdout.split()[1]
    assert job.startswith(name) and f"{job} succeeded" in done.stdout
    logs = subprocess.run([*console_script(), "logs", job], env=env, capture_output=True,
                          text=True, timeout=60, check=False)  # fmt: skip
    assert logs.stdout == "via console script\n"
