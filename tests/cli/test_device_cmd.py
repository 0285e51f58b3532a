"""``accelnet device``: list, and drain/undrain/probe through the store of a running system
(and queued for a controller that starts later); reset and probe right here; policies."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

import accelnet
from accelnet.cli.main import app

runner = CliRunner()
FABRIC = ["--fabric", "pcie-4xL4"]


def run(*args: str) -> tuple[int, str]:
    """Exit code and stdout (JSON goes there; notes to stderr), or all output on failure."""
    result = runner.invoke(app, ["device", *args])
    return result.exit_code, result.stdout if "--json" in args else result.output


def listed(db: Path) -> dict[str, dict[str, object]]:
    code, out = run("list", *FABRIC, "--db", str(db), "--json")
    assert code == 0, out
    data = json.loads(out)
    assert data["schema"] == "accelnet.devices/v1"
    return {d["device"]: d for d in data["devices"]}


def test_requests_reach_a_running_controller_through_its_store(tmp_path: Path) -> None:
    db = tmp_path / "state.db"
    with accelnet.local(fabric="pcie-4xL4", workdir=tmp_path / "w", db=db) as cluster:
        code, out = run("drain", "l4box/gpu1", "--db", str(db), "--reason", "fan", "--json")
        assert code == 0, out
        answer = json.loads(out)
        assert answer["answered"] and answer["ok"] and answer["detail"] == "drained"
        rows = listed(db)
        assert (rows["l4box/gpu1"]["state"], rows["l4box/gpu1"]["phase"]) == ("drained", "held")
        assert rows["l4box/gpu0"]["state"] == "ready"
        code, out = run("probe", "l4box/gpu1", "--db", str(db))  # diagnostic: stays drained
        assert code == 0 and "ok: probe level 1 pass" in out and "pass compute" in out, out
        code, out = run("undrain", "l4box/gpu1", "--db", str(db))
        assert code == 0 and "ok: healthy: probe passed" in out, out
        code, out = run("undrain", "l4box/gpu1", "--db", str(db))
        assert code == 1 and "not drained" in out
        code, out = run("drain", "l4box/gpu9", "--db", str(db))
        assert code == 2 and "unknown device 'l4box/gpu9'" in out
        assert cluster.devices()[1].state == "ready"
    # no controller: the request waits in the store for the next one
    code, out = run("drain", "l4box/gpu2", "--db", str(db), "--wait", "0.2")
    assert code == 0 and "queued" in out
    with accelnet.local(fabric="pcie-4xL4", workdir=tmp_path / "w", db=db) as cluster:
        assert {r.device: r.phase for r in cluster.devices()}["l4box/gpu2"] == "held"
        answers = cluster.events(kinds=("device:answer",))
        assert json.loads(answers[-1].detail)["ok"] is True
    rows = listed(db)
    assert rows["l4box/gpu2"]["state"] == "drained"
    assert rows["l4box/gpu1"]["state"] == "ready" and rows["l4box/gpu1"]["health"] == "pass"


def test_list_and_probe_this_machine_without_a_store(tmp_path: Path) -> None:
    code, out = run("list", "--json")
    assert code == 0, out
    rows = json.loads(out)["devices"]
    assert rows and all(r["state"] == "-" for r in rows)
    cpu = rows[0]["device"]
    assert rows[0]["mem_total_bytes"] > 0  # sampled now
    code, out = run("probe", cpu, "--json")
    assert code == 0, out
    assert {f["check"] for f in json.loads(out)["findings"]} == {"answer", "memory", "compute"}
    code, out = run("reset", "mixed-lab/nope", "--fabric", "mixed-lab")
    assert code == 2 and "unknown device" in out


def test_policy_files_are_checked_naming_file_line_and_key(tmp_path: Path) -> None:
    good = tmp_path / "good.yaml"
    good.write_text("kinds:\n  gpu: {max_failures: 5, probe_level: 2}\n")
    code, out = run("policy", str(good), "--json")
    assert code == 0, out
    data = json.loads(out)
    assert data["gpu"]["max_failures"] == 5 and data["cpu"]["max_failures"] == 3
    bad = tmp_path / "bad.yaml"
    bad.write_text("defaults:\n  warn_action: log\n  max_failure: 3\n")
    code, out = run("policy", str(bad))
    assert code == 1
    assert "bad.yaml:3: defaults.max_failure: unknown key" in out.replace("\n", "")
