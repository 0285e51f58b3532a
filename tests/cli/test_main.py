"""The root ``accelnet`` command."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from accelnet.cli.lazy import load
from accelnet.cli.main import COMMANDS, app
from accelnet.fabric.presets import preset_spec


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


def _helps(cmd: Any, path: str) -> Iterator[tuple[str, str]]:
    yield path, cmd.help or ""
    for p in cmd.params:
        yield f"{path} {p.name}", getattr(p, "help", None) or ""
    for name, sub in getattr(cmd, "commands", {}).items():
        yield from _helps(sub, f"{path} {name}")


def test_help_texts_have_no_rst_markup() -> None:
    """Issue 26 item 9: help is read in a terminal, where RST's ``x`` shows literally."""
    found = [(path, text) for name, entry in COMMANDS.items()
             for path, text in _helps(load(name, entry), name)
             if "``" in text or ":class:`" in text or ":func:`" in text]  # fmt: skip
    assert found == []


@pytest.mark.parametrize("name", [*COMMANDS, None])
def test_flags_show_no_value_type_in_help(name: str | None) -> None:
    """``--wait``, ``--json``, ``--help`` take no value: no ``<bool>`` beside them."""
    argv = [name, "--help"] if name else ["--help"]
    r = CliRunner().invoke(app, argv, env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    assert "<bool>" not in r.stdout and "--help" in r.stdout


def test_shell_completion_completes_lazy_commands_and_their_options() -> None:
    def complete(words: str, cword: int) -> str:
        env = {**os.environ, "_ACCELNET_COMPLETE": "complete_bash", "COMP_WORDS": words,
               "COMP_CWORD": str(cword)}  # fmt: skip
        script = str(Path(sys.executable).parent / "accelnet")  # the installed console script
        done = subprocess.run([script], capture_output=True, text=True, env=env, timeout=120,
                              check=False)  # fmt: skip
        return done.stdout

    assert complete("accelnet sta", 1).split() == ["status"]
    assert "--policy" in complete("accelnet simulate --pol", 2).split()
    r = CliRunner().invoke(app, ["--help"], env={"COLUMNS": "200"})
    assert "--install-completion" in r.stdout


def test_run_and_serve_name_the_remediation_policy_alike(tmp_path: Path) -> None:
    """``--policy`` is the scheduling policy (serve, simulate); the device remediation
    policy is ``--device-policy`` in both run and serve."""
    for name in ("run", "serve"):
        r = CliRunner().invoke(app, [name, "--help"], env={"COLUMNS": "200"})
        assert "--device-policy" in r.stdout, name
    run_help = CliRunner().invoke(app, ["run", "--help"], env={"COLUMNS": "200"}).stdout
    assert "--policy " not in run_help
    # the old spelling still works for scripts, and says what it is now
    job = tmp_path / "job.yaml"
    job.write_text('name: j\nrun: "true"\n', encoding="utf-8")
    bad = CliRunner().invoke(app, ["run", str(job), "--policy", "/nonexistent/p.yaml"],
                             env={"COLUMNS": "200"})  # fmt: skip
    assert bad.exit_code == 1
    said = " ".join(bad.output.split())
    assert "--policy is now --device-policy" in said and "/nonexistent/p.yaml" in said


def test_a_piped_table_keeps_one_line_per_row() -> None:
    """Piped (no terminal, no COLUMNS), a table is not folded at 80 columns: each preset's
    row holds its whole description, for grep and awk."""
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    done = subprocess.run([sys.executable, "-c", "from accelnet.cli.main import main; main()",
                           "fabric", "presets"], capture_output=True, text=True, env=env,
                          timeout=120, check=True)  # fmt: skip
    row = next(line for line in done.stdout.splitlines() if "dgx-h100" in line)
    assert preset_spec("dgx-h100")["description"] in row
