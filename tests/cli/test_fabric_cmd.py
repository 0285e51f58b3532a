"""The ``accelnet fabric`` commands, through typer's runner and the real console script."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from typer.testing import CliRunner

from accelnet.cli.main import app

runner = CliRunner()
BIN = Path(sys.executable).parent / "accelnet"


def run(*args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, list(args), env={"COLUMNS": "220"})
    return result.exit_code, result.stdout, result.stderr


def test_show_preset_draws_tree_and_matrix() -> None:
    code, out, _ = run("fabric", "show", "dgx-h100")
    assert code == 0
    assert "8 x H100-SXM" in out
    assert "topology of dgx-h100" in out
    assert "NV18" in out and "PIX" in out and "SYS" in out


def test_show_limits_hosts_and_says_so() -> None:
    code, out, _ = run("fabric", "show", "gavel-48", "--hosts", "2")
    assert code == 0
    assert "46 more hosts" in out
    assert "same layout" in out


def test_show_json_schema_is_stable() -> None:
    code, out, _ = run("fabric", "show", "pcie-4xL4", "--json")
    assert code == 0
    data = json.loads(out)
    assert data["schema"] == "accelnet.fabric/v1"
    assert list(data) == [
        "schema", "name", "description", "summary", "models", "hosts", "switches", "links",
    ]  # fmt: skip
    host = data["hosts"][0]
    assert [d["id"] for d in host["devices"]] == [f"l4box/gpu{i}" for i in range(4)]
    assert host["matrix"]["nodes"][:2] == ["gpu0", "gpu1"]
    assert host["matrix"]["labels"][0][:4] == ["X", "PHB", "SYS", "SYS"]
    assert data["summary"]["models"] == {"L4": 4}
    assert data["models"]["L4"]["peak_tflops"]["bf16"] == 121


def test_show_local_machine() -> None:
    code, out, _ = run("fabric", "show", "--cpu-devices", "2")
    assert code == 0
    assert "cpu0" in out and "cpu1" in out


def test_route_text_and_json() -> None:
    code, out, _ = run("fabric", "route", "dgx-h100", "gpu0", "gpu5")
    assert code == 0
    assert "NVLINK (NV18), 450 GB/s each way (900 both)" in out
    code, out, _ = run("fabric", "route", "mixed-lab", "t4box/gpu0", "jetson0/gpu0", "--json")
    assert code == 0
    data = json.loads(out)
    assert data["level"] == "WIRELESS" and data["loss_rate"] > 0


def test_route_unknown_device_exits_2_with_message() -> None:
    code, _, err = run("fabric", "route", "dgx-h100", "gpu0", "gpu9")
    assert code == 2
    assert "no device 'gpu9'" in err


def test_unknown_fabric_lists_presets() -> None:
    code, _, err = run("fabric", "show", "dgx-h900")
    assert code == 2
    assert "not a preset" in err and "dgx-h100" in err


def test_validate_good_and_bad(tmp_path: Path) -> None:
    good = tmp_path / "good.yaml"
    good.write_text("name: g\nhosts:\n  - {name: a, devices: 2xT4}\n")
    code, out, _ = run("fabric", "validate", str(good))
    assert code == 0 and "ok" in out and "2 devices" in out
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: g\nhosts:\n  - {name: a, devices: 2xT5}\n")
    code, _, err = run("fabric", "validate", str(bad))
    assert code == 1
    flat = " ".join(err.split())  # rich may wrap long lines
    assert "bad.yaml:3: hosts[0].devices = '2xT5': unknown device model 'T5'" in flat
    code, out, _ = run("fabric", "validate", str(bad), "--json")
    assert code == 1
    issues = json.loads(out)["issues"]
    assert issues[0]["path"] == "hosts[0].devices" and issues[0]["line"] == 3


def test_presets_models_schema() -> None:
    code, out, _ = run("fabric", "presets")
    assert code == 0 and "mixed-lab" in out and "fat-tree" in out
    code, out, _ = run("fabric", "models", "--json")
    assert code == 0
    names = [m["name"] for m in json.loads(out)]
    assert {"H100-SXM", "TPU-v4", "Jetson-AGX-Orin", "K80"} <= set(names)
    code, out, _ = run("fabric", "schema")
    assert code == 0 and json.loads(out)["title"] == "FabricSpec"


def test_console_script_runs_for_real(tmp_path: Path) -> None:
    env = {**os.environ, "COLUMNS": "200", "HOME": str(tmp_path)}
    proc = subprocess.run(
        [str(BIN), "fabric", "route", "pcie-4xL4", "gpu0", "gpu2", "--json"],
        capture_output=True, text=True, timeout=60, env=env, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["label"] == "SYS"


def test_user_text_is_never_read_as_markup(tmp_path: Path) -> None:
    code, _, err = run("fabric", "route", "dgx-h100", "[/x]", "gpu0")
    assert code == 2 and "no device '[/x]'" in err
    code, _, err = run("fabric", "show", "[bold]x")
    assert code == 2 and "'[bold]x' is not a preset" in err
    bad = tmp_path / "[red]bad.yaml"
    bad.write_text("name: x\nhosts: [{name: h, devices: [{model: '[/oops]'}]}]\n")
    code, _, err = run("fabric", "validate", str(bad))
    assert code == 1 and "[/oops]" in err


def test_cpu_devices_out_of_range() -> None:
    code, _, err = run("fabric", "show", "--cpu-devices", "-1")
    assert code == 2 and "from 1 to 4096" in err


def test_matrix_is_never_squeezed_when_piped() -> None:
    result = runner.invoke(app, ["fabric", "show", "dgx-h100"], env={"COLUMNS": "60"})
    assert "gpu0  gpu1  gpu2" in result.stdout
    assert "nic7" in result.stdout


def test_show_lists_host_cpus_and_memory_in_text_and_json(tmp_path: Path) -> None:
    spec = tmp_path / "f.yaml"
    spec.write_text(
        "name: f\nhosts:\n"
        "  - {name: big, devices: 2xL4, cpus: 96, memory_gb: 768.5}\n"
        "  - {name: open, devices: 1xT4}\n"
    )
    code, out, _ = run("fabric", "show", str(spec))
    assert code == 0
    assert "96 CPUs, 768.5 GB RAM" in out
    code, out, _ = run("fabric", "show", str(spec), "--json")
    assert code == 0
    hosts = json.loads(out)["hosts"]
    assert [(h["cpus"], h["memory_gb"]) for h in hosts] == [(96, 768.5), (None, None)]


def test_show_local_machine_json_declares_cpus_and_memory() -> None:
    import psutil

    code, out, _ = run("fabric", "show", "local", "--cpu-devices", "none", "--json")
    assert code == 0
    host = json.loads(out)["hosts"][0]
    assert host["cpus"] == psutil.cpu_count(logical=True)
    assert host["memory_gb"] > 0
