"""README.md's command blocks: what the README doctest (scripts/readme_doctest.py) would do.

CI runs the whole doctest after the suite (``.ci/run``). Here: the checks that cost nothing
(every block has a step, every placeholder a value, every file the page names exists, the
generated shell scripts parse) and the blocks that run in a second or two (Python, YAML).
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def _load_doctest() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "readme_doctest", ROOT / "scripts" / "readme_doctest.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is made
    spec.loader.exec_module(module)
    return module


rd = _load_doctest()
BLOCKS = rd.parse_blocks(README)
STEPS = rd.plan(BLOCKS, shared=ROOT / "no-such-folder-here")


def test_only_the_setup_block_and_shared_data_blocks_are_skipped() -> None:
    skipped = [s for s in STEPS if s.kind == "skip"]
    assert skipped[0].block.number == 1 and "CI runs these itself" in skipped[0].why
    assert all("../shared" in s.block.text for s in skipped[1:]), [s.block.where for s in skipped]
    with_shared = rd.plan(BLOCKS, shared=ROOT)  # any folder that exists
    assert [s.block.number for s in with_shared if s.kind == "skip"] == [1]
    kinds = {s.kind for s in with_shared}
    assert {"run", "serve", "validate"} <= kinds
    assert {b.lang for b in BLOCKS} <= {"bash", "python", "yaml"}


def test_the_readme_starts_with_the_demo_and_the_tests() -> None:
    first = BLOCKS[0]
    assert first.lang == "bash" and README.index("```bash") < README.index("## ")
    assert ".venv/bin/accelnet demo" in first.text
    assert ".venv/bin/python -m pytest -q" in first.text


def test_every_placeholder_has_a_value_and_every_script_parses(tmp_path: Path) -> None:
    for step in STEPS:
        if step.block.lang != "bash":
            continue
        assert rd.unknown_placeholders(step.block.text) == [], step.block.where
        script = rd.bash_script(step.block, 40123)
        assert not rd.PLACEHOLDER.search(script), step.block.where
        path = tmp_path / f"{step.block.number}.sh"
        path.write_text(script)
        checked = subprocess.run(
            ["bash", "-n", str(path)], check=False, capture_output=True, text=True
        )
        assert checked.returncode == 0, f"{step.block.where}: {checked.stderr}"


def test_the_server_block_runs_a_server_in_the_background_on_a_free_port() -> None:
    (serve,) = [s for s in STEPS if s.kind == "serve"]
    script = rd.bash_script(serve.block, 40123)
    assert rd.README_PORT not in script and "127.0.0.1:40123" in script
    assert re.search(r"^\{\naccelnet serve .*\n\} >serve\.log 2>&1 &$", script, re.M)
    assert script.index("readme_wait_for_server\n") < script.index("curl -H")
    assert "trap readme_stop_server EXIT" in script


def test_files_the_readme_names_exist() -> None:
    named = set(re.findall(r"(?<![\w/.])((?:examples|docs|scripts)/[\w./-]*\w)", README))
    assert named, "the README names no example files"
    missing = sorted(n for n in named if not (ROOT / n).exists())
    assert not missing, f"README.md names files that do not exist: {missing}"


def test_the_fabric_file_shown_is_the_example_file() -> None:
    (yaml_block,) = [b for b in BLOCKS if b.lang == "yaml"]
    assert yaml_block.text in (ROOT / "examples" / "fabrics" / "lab.yaml").read_text()


def test_unclosed_blocks_are_an_error() -> None:
    with pytest.raises(ValueError, match="never closed"):
        rd.parse_blocks("# t\n\n```bash\necho hi\n")


@pytest.mark.slow
def test_the_python_and_yaml_blocks_run(tmp_path: Path) -> None:
    entries = rd.repo_entries(ROOT)
    cheap = [s for s in STEPS if s.kind == "validate" or s.block.lang == "python"]
    assert len(cheap) >= 3
    for step in cheap:
        outcome = rd.run_step(step, tmp_path, entries, 120.0)
        assert outcome.ok, f"{step.block.where}: {outcome.detail}\n{outcome.output}"
