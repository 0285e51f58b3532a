"""Lean installs (issue 26 item 10): the base package is the client, the CLI and the local
runtime; the server, the simulator and the demo's workloads are extras, and a command that
needs one this installation lacks says which (exit 1), not a traceback. Checked with the
extras' modules made unimportable in a fresh interpreter."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXTRAS_ONLY = ("scipy", "sklearn", "polars", "matplotlib", "PIL", "fastapi", "uvicorn",
               "starlette", "prometheus_client", "threadpoolctl", "httptools", "ray")  # fmt: skip

RUN_WITHOUT_EXTRAS = f"""
import importlib.abc, sys
BLOCKED = {EXTRAS_ONLY!r}

class Absent(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None

sys.meta_path.insert(0, Absent())
sys.argv = ["accelnet", *sys.argv[1:]]
from accelnet.cli.main import main
main()
"""


def _accelnet(tmp: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "200", "HOME": str(tmp)}
    return subprocess.run([sys.executable, "-c", RUN_WITHOUT_EXTRAS, *argv], cwd=tmp, env=env,
                          capture_output=True, text=True, timeout=180, check=False)  # fmt: skip


def test_the_base_install_runs_jobs_locally(tmp_path: Path) -> None:
    job = tmp_path / "job.yaml"
    job.write_text('name: hello\nrun: "echo hi from the base install"\n', encoding="utf-8")
    done = _accelnet(tmp_path, "run", str(job), "--out", str(tmp_path / "out"))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "hi from the base install" in done.stdout and "succeeded" in done.stdout


@pytest.mark.parametrize(
    ("argv", "extra"),
    [(["serve", "--port", "0"], "server"),
     (["simulate", "--fabric", "mixed-lab", "--trace", "x.csv"], "sim"),
     (["demo", "--quick"], "demo")],
)  # fmt: skip
def test_a_command_that_needs_an_extra_names_it(
    tmp_path: Path, argv: list[str], extra: str
) -> None:
    done = _accelnet(tmp_path, *argv)
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"pip install 'accelnet[{extra}]'" in " ".join(done.stderr.split())
    assert "Traceback" not in done.stderr


def test_the_base_dependencies_leave_the_heavy_parts_to_extras() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    names = [d.split(">")[0].split("=")[0].split("[")[0].strip().lower()
             for d in project["dependencies"]]  # fmt: skip
    heavy = {"scipy", "scikit-learn", "polars", "matplotlib", "pillow", "fastapi", "uvicorn",
             "prometheus-client", "ray", "torch"}  # fmt: skip
    assert not heavy & set(names)
    extras = project["optional-dependencies"]
    assert {"server", "sim", "demo", "ray", "nvidia", "torch", "dev"} <= set(extras)
    every = [d.split(">")[0].strip().lower() for deps in extras.values() for d in deps]
    assert every.count("prometheus-client") == 1  # listed once
