"""Job files as graphs: ``inputs`` name jobs of the same file, without cycles; errors name
the file, line, key and value; jobs come back in an order ready to submit."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from accelnet.sched import JobSpec
from accelnet.sched.jobfile import JobSpecError, load_jobs
from accelnet.sched.spec import job_json_schema


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "dag.yaml"
    p.write_text(text)
    return p


def test_inputs_are_aliases_to_job_names() -> None:
    spec = JobSpec.model_validate({"name": "merge", "run": "x", "inputs": {"parts": "split"}})
    assert spec.inputs == {"parts": "split"}
    with pytest.raises(ValidationError, match="input alias 'Parts'"):
        JobSpec.model_validate({"name": "m", "run": "x", "inputs": {"Parts": "split"}})
    with pytest.raises(ValidationError, match="pattern"):
        JobSpec.model_validate({"name": "m", "run": "x", "inputs": {"parts": "a b"}})
    with pytest.raises(ValidationError, match=r"inputs\.me: job m cannot consume its own"):
        JobSpec.model_validate({"name": "m", "run": "x", "inputs": {"me": "m"}})
    props = job_json_schema()["properties"]
    assert "ACCELNET_INPUT_<ALIAS>" in props["inputs"]["description"]


def test_jobs_come_after_the_jobs_they_consume(tmp_path: Path) -> None:
    jobs = load_jobs(write(tmp_path, """jobs:
  - {name: report, run: x, inputs: {a: merge, b: clean}}
  - {name: merge, run: x, inputs: {parts: split}}
  - {name: split, run: x}
  - {name: clean, run: x}
  - {name: other, run: x}
"""))  # fmt: skip
    names = [j.name for j in jobs]
    assert sorted(names) == ["clean", "merge", "other", "report", "split"]
    for job in jobs:
        for up in job.inputs.values():
            assert names.index(up) < names.index(job.name)
    assert names == ["split", "merge", "clean", "report", "other"]


def test_an_unknown_input_names_file_line_key_and_value(tmp_path: Path) -> None:
    p = write(tmp_path, "jobs:\n  - {name: a, run: x}\n  - name: b\n    run: x\n"
                        "    inputs: {tiles: nope}\n")  # fmt: skip
    with pytest.raises(JobSpecError) as info:
        load_jobs(p)
    assert "dag.yaml:5: jobs[1].inputs.tiles = 'nope': no job 'nope' in this file (jobs: a, b)" in (
        str(info.value)
    )


def test_a_cycle_is_named_with_its_key(tmp_path: Path) -> None:
    p = write(tmp_path, """jobs:
  - {name: a, run: x, inputs: {up: c}}
  - {name: b, run: x, inputs: {up: a}}
  - {name: c, run: x, inputs: {up: b}}
""")  # fmt: skip
    with pytest.raises(JobSpecError) as info:
        load_jobs(p)
    msg = str(info.value)
    assert "1 problem" in msg
    assert "dag.yaml:2: jobs[0].inputs.up = 'c': a cycle of inputs" in msg
    assert "(each takes the next one's outputs): a <- c <- b <- a" in msg


def test_a_single_job_file_can_only_consume_nothing(tmp_path: Path) -> None:
    with pytest.raises(JobSpecError, match=r"inputs.x = 'gone': no job 'gone' in this file"):
        load_jobs(write(tmp_path, "name: solo\nrun: x\ninputs: {x: gone}\n"))
