"""The root ``accelnet`` command."""

from __future__ import annotations

from importlib.metadata import version

from typer.testing import CliRunner

from accelnet.cli.main import app


def test_version_prints_the_installed_version() -> None:
    r = CliRunner().invoke(app, ["--version"])
    assert r.exit_code == 0, r.output
    assert r.stdout == f"accelnet {version('accelnet')}\n"
