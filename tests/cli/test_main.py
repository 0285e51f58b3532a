"""The root ``accelnet`` command."""

from __future__ import annotations

import os
import subprocess
import sys
from importlib.metadata import version

import pytest
from typer.testing import CliRunner

from accelnet.cli.lazy import load
from accelnet.cli.main import COMMANDS, app


def test_version_prints_the_installed_version() -> None:
    r = CliRunner().invoke(app, ["--version"])
    assert r.exit_code == 0, r.output
    assert r.stdout == f"accelnet {version('accelnet')}\n"


def _modules_after(argv: list[str]) -> set[str]:
    """The modules a fresh interpreter holds after running ``accelnet <argv>``."""
    code = (
        "import sys\n"
        "from accelnet.cli.main import app\n"
        "try:\n"
        f"    app({argv!r}, prog_name='accelnet')\n"
        "except SystemExit:\n"
        "    pass\n"
        "print('\\n'.join(sys.modules), file=sys.stderr)\n"
    )
    env = {**os.environ, "ACCELNET_TOKEN": "x", "COLUMNS": "100"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=env, timeout=120, check=False)  # fmt: skip
    return set(done.stderr.split())


HEAVY = ("numpy", "scipy", "matplotlib", "sklearn", "polars", "accelnet.sim",
         "accelnet.runtime", "accelnet.api", "uvicorn", "fastapi")  # fmt: skip


@pytest.mark.parametrize(
    "argv", [["--help"], ["status", "--url", "http://127.0.0.1:9"], ["submit", "--help"]]
)
def test_help_and_the_client_commands_import_nothing_heavy(argv: list[str]) -> None:
    """Issue 26 item 8: ``accelnet --help`` and the client commands start fast because they
    import no command they do not run (the simulator's scipy, the demo's numpy...)."""
    loaded = _modules_after(argv)
    assert "accelnet.cli.main" in loaded
    heavy = sorted(m for m in loaded if any(m == h or m.startswith(h + ".") for h in HEAVY))
    assert heavy == []


def test_the_help_listing_is_each_commands_own_help() -> None:
    """The root help lists commands from a table (no import); each line is the start of
    the command's own help, so the two cannot drift apart."""
    for name, entry in COMMANDS.items():
        cmd = load(name, entry)
        own = " ".join((cmd.help or "").split())
        assert own.startswith(entry.help), (name, own, entry.help)
    r = CliRunner().invoke(app, ["--help"], env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    for name, entry in COMMANDS.items():
        assert name in r.stdout and entry.help in " ".join(r.stdout.split())


def test_a_lazy_command_runs_and_an_unknown_one_is_refused() -> None:
    r = CliRunner().invoke(app, ["fabric", "presets"])
    assert r.exit_code == 0 and "dgx-h100" in r.stdout
    r = CliRunner().invoke(app, ["fabrik"])
    assert r.exit_code == 2 and "No such command 'fabrik'" in r.output
    assert "Did you mean 'fabric'" in r.output
