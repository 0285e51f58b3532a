"""The pieces of ``accelnet run``'s closing report, on hand-made inputs."""

from __future__ import annotations

from pathlib import Path

from accelnet.cli.run_report import json_safe, resume_message, stopped_message, tail


def test_tail_is_the_last_lines_of_a_big_log_and_empty_for_a_missing_one(tmp_path: Path) -> None:
    log = tmp_path / "big.out"
    log.write_text("".join(f"line {i}\n" for i in range(100_000)))  # far over what is read
    assert tail(log, 3) == "line 99997\nline 99998\nline 99999"
    assert tail(tmp_path / "missing.out") == ""


def test_the_resume_message_names_each_kind_of_job() -> None:
    db = Path("state.db")
    assert resume_message([], [], ["a"], db) is None  # nothing of this file in the store
    assert resume_message(["a", "b"], ["c", "d", "e"], [], db) == (
        "resumed 2 jobs (a, b) from state.db; 3 already finished (c, d, e): not run again"
    )
    assert resume_message([], ["c"], ["f"], db) == (
        "1 job already finished in state.db (c): not run again; 1 new (f)"
    )
    many = [f"j{i}" for i in range(10)]
    said = resume_message(many, [], [], db)
    assert said is not None and said.endswith("j6, j7 and 2 more) from state.db")


def test_a_stopped_run_says_how_a_rerun_goes_on() -> None:
    assert stopped_message("interrupted", ["a"], Path("s.db")) == (
        "interrupted: 1 job unfinished (a); rerun with --db s.db to resume"
    )
    assert stopped_message("interrupted", ["a", "b"], None).startswith(
        "interrupted: 2 jobs unfinished (a, b); they were stopped"
    )


def test_a_result_json_cannot_hold_is_given_as_its_repr() -> None:
    assert json_safe([1, "x", None]) == [1, "x", None]
    assert json_safe({1, 2}) == "{1, 2}"
    assert json_safe(float("nan")) == "nan"
