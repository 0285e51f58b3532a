"""Strict validation at submit (issue 21, item 10): commands and environments a process could
never be given are refused, numbers and flags are taken as written (never coerced from text
or between booleans and numbers), the environment has limits and keeps accelnet's own names.
Every refusal names the key and the value; from a file, the file and line too."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from accelnet.api.models import DeviceOpIn, PolicyIn, TenantIn
from accelnet.sched import JobSpec
from accelnet.sched.jobfile import JobSpecError, load_jobs, parse_jobs
from accelnet.sched.spec import job_json_schema

KIB = 1024
MAX_RUN_BYTES = 64 * KIB  # the limits docs/job-spec.md states
MAX_ENV_VALUE_BYTES = 32 * KIB
MAX_ENV_BYTES = 128 * KIB


def spec(**kw: Any) -> JobSpec:
    return JobSpec.model_validate({"name": "j", "run": "true", **kw})


def refusal(fields: dict[str, Any]) -> str:
    """The one issue a job of ``fields`` is refused with, as a job file shows it."""
    with pytest.raises(JobSpecError) as info:
        parse_jobs({"name": "j", **fields}, "job.yaml")
    (issue,) = info.value.issues
    return issue.render("job.yaml")


# -- run -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("run", "said"),
    [
        ("", "run = '': an empty command"),
        ("   ", "run = '   ': an empty command"),
        ("\t\n ", "run = '\\t\\n ': an empty command"),
        (
            "echo a\x00b",
            "run = 'echo a\\x00b': the command holds a NUL byte (\\x00) at character 6",
        ),
        ("\x00", "a NUL byte (\\x00) at character 0"),
    ],
)
def test_a_command_that_could_never_run_is_refused(run: str, said: str) -> None:
    assert said in refusal({"run": run})


def test_a_command_is_measured_in_bytes() -> None:
    assert spec(run="x" * MAX_RUN_BYTES).run  # 64 KiB of ASCII: fine
    text = refusal({"run": "é" * (MAX_RUN_BYTES // 2 + 1)})  # 32 Ki characters, 64 KiB + 2 bytes
    assert "run = " in text and "the command is 65,538 bytes in UTF-8; at most 65,536" in text
    assert "String should have at most 65536 characters" in refusal({"run": "x" * 65537})


def test_an_entrypoint_needs_no_run() -> None:
    job = JobSpec.model_validate({"name": "j", "entrypoint": {"function": "os:getcwd"}})
    assert job.run is None


# -- env -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("env", "said"),
    [
        ({"X": "a\x00b"}, "env.X = 'a\\x00b': the value holds a NUL byte (\\x00) at character 1"),
        ({"X\x00": "1"}, "'X\\x00' is not an environment variable name"),
        ({"A B": "1"}, "env.A B = '1': 'A B' is not an environment variable name"),
        ({"1X": "1"}, "'1X' is not an environment variable name"),
        ({"X-Y": "1"}, "'X-Y' is not an environment variable name"),
        ({"ACCELNET_JOB": "other"}, "env.ACCELNET_JOB = 'other': ACCELNET_JOB is set by accelnet"),
        ({"ACCELNET_OUTPUT": "/"}, "ACCELNET_OUTPUT is set by accelnet for every task"),
        ({"ACCELNET_SCRATCH": "/"}, "a job cannot set it"),
        ({"CUDA_VISIBLE_DEVICES": "0,1,2,3"}, "CUDA_VISIBLE_DEVICES is set by accelnet"),
        ({"BIG": "x" * 900_000}, "env.BIG = 'xxx"),
        ({"BIG": "x" * 900_000}, "the value is 900,000 bytes; at most 32,768 (32 KiB) each"),
        ({"V": "é" * (MAX_ENV_VALUE_BYTES // 2 + 1)}, "the value is 32,770 bytes"),
    ],
)
def test_an_environment_a_process_could_not_take_is_refused(env: dict[str, str], said: str) -> None:
    assert said in refusal({"run": "true", "env": env})


def test_the_whole_environment_has_a_limit() -> None:
    each = "x" * (30 * KIB)
    assert len(spec(env={f"V{i}": each for i in range(4)}).env) == 4  # 120 KiB: fine
    text = refusal({"run": "true", "env": {f"V{i}": each for i in range(5)}})
    assert text.startswith("job.yaml: env: 5 variables of 153,620 bytes in all; at most 131,072")
    assert 4 * 30 * KIB < MAX_ENV_BYTES < 5 * 30 * KIB


def test_an_ordinary_environment_is_kept() -> None:
    env = {
        "X": "",
        "_UNDER": "a b\tc",
        "UNICODE": "héllo ☃",
        "EDGE": "x" * MAX_ENV_VALUE_BYTES,
        "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "40",  # a job may lower its MPS limits
        "accelnet_lower": "not the runtime's",  # names are case-sensitive
    }
    assert spec(env=env).env == env


# -- numbers and flags, as written -------------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "said"),
    [
        ({"priority": "10"}, "priority = '10': text, not a whole number (write it without quotes)"),
        ({"priority": True}, "priority = True: true/false, not a whole number"),
        ({"priority": False}, "priority = False: true/false, not a whole number"),
        ({"priority": 10.0}, "priority = 10.0: not a whole number"),
        ({"priority": 1.5}, "priority = 1.5: not a whole number"),
        ({"max_retries": "2"}, "max_retries = '2': text, not a whole number"),
        ({"max_retries": True}, "max_retries = True: true/false, not a whole number"),
        ({"checkpointable": "yes"}, "checkpointable = 'yes': text, not true or false"),
        ({"checkpointable": 1}, "checkpointable = 1: not true or false"),
        ({"checkpointable": "true"}, "checkpointable = 'true': text, not true or false"),
        ({"timeout_s": True}, "timeout_s = True: true/false, not a number"),
        ({"timeout_s": "60"}, "timeout_s = '60': text, not a number (write it without quotes)"),
        ({"deadline": True}, "deadline = True: true/false, not a number"),
        (
            {"resources": {"accelerators": {"any_of": ["T4"], "count": "2"}}},
            "resources.accelerators.count = '2': text, not a whole number",
        ),
        (
            {"resources": {"accelerators": {"any_of": ["T4"], "share": True}}},
            "resources.accelerators.share = True: true/false, not a number",
        ),
        ({"resources": {"min_memory_gb": "40"}}, "resources.min_memory_gb = '40': text"),
        ({"workload": {"total_steps": True}}, "workload.total_steps = True: true/false"),
        ({"workload": {"duration_s": "5"}}, "workload.duration_s = '5': text, not a number"),
        ({"workload": {"throughput": {"T4": True}}}, "workload.throughput.T4 = True"),
        ({"workload": {"colocated": {"T4": "0.5"}}}, "workload.colocated.T4 = '0.5': text"),
        ({"workload": {"bytes_per_step": False}}, "workload.bytes_per_step = False"),
    ],
)
def test_numbers_and_flags_are_not_coerced(fields: dict[str, Any], said: str) -> None:
    assert said in refusal({"run": "true", **fields})


def test_numbers_and_flags_as_written_are_kept() -> None:
    job = spec(
        priority=-5,
        max_retries=2,
        checkpointable=True,
        timeout_s=60,  # a whole number is a number of seconds
        deadline="2026-12-01T00:00:00+00:00",  # an ISO time is still a deadline
        resources={"accelerators": {"any_of": ["T4"], "count": 2}, "min_memory_gb": 16},
        workload={"total_steps": 100, "throughput": {"T4": 2}, "colocated": {"T4": 0.5}},
    )
    assert (job.priority, job.max_retries, job.checkpointable) == (-5, 2, True)
    assert job.timeout_s == 60.0 and job.deadline == 1796083200.0
    assert job.resources.accelerators.count == 2 and job.workload.throughput == {"T4": 2.0}
    assert spec(resources={"accelerators": "T4:0.5"}).resources.accelerators.share == 0.5
    stored = JobSpec.model_validate_json(job.model_dump_json())  # as the store reads it back
    assert stored == job


def test_a_job_file_names_the_file_line_and_key(tmp_path: Path) -> None:
    path = tmp_path / "job.yaml"
    path.write_text(
        "name: j\n"
        "priority: yes\n"  # YAML 1.1: a boolean
        'max_retries: "3"\n'
        "run: '  '\n"
        "env:\n"
        "  ACCELNET_TOKEN: x\n"
        '  NUL: "a\\0b"\n'
    )
    with pytest.raises(JobSpecError) as info:
        load_jobs(path)
    text = str(info.value)
    assert f"invalid job spec {path}: 5 problems" in text
    assert f"{path}:2: priority = True: true/false, not a whole number" in text
    assert f"{path}:3: max_retries = '3': text, not a whole number" in text
    assert f"{path}:4: run = '  ': an empty command" in text
    assert f"{path}:6: env.ACCELNET_TOKEN = 'x': ACCELNET_TOKEN is set by accelnet" in text
    assert f"{path}:7: env.NUL = 'a\\x00b': the value holds a NUL byte" in text


def test_the_schema_keeps_its_types_and_bounds() -> None:
    props = job_json_schema()["properties"]
    assert props["priority"]["type"] == "integer" and props["priority"]["maximum"] == 1000
    assert props["checkpointable"]["type"] == "boolean"
    assert {"type": "number", "exclusiveMinimum": 0} in props["timeout_s"]["anyOf"]


# -- the API's own bodies ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("model", "body", "field"),
    [
        (TenantIn, {"weight": True}, "weight"),
        (TenantIn, {"weight": "2"}, "weight"),
        (TenantIn, {"quota": {"T4": True}}, "quota"),
        (TenantIn, {"quota": {"T4": "2"}}, "quota"),
        (PolicyIn, {"policy": "fifo", "round_s": True}, "round_s"),
        (DeviceOpIn, {"level": True}, "level"),
        (DeviceOpIn, {"level": "2"}, "level"),
    ],
)
def test_api_bodies_do_not_coerce_either(model: Any, body: dict[str, Any], field: str) -> None:
    with pytest.raises(ValidationError) as info:
        model.model_validate(body)
    assert info.value.errors()[0]["loc"][0] == field


def test_api_bodies_take_numbers_as_written() -> None:
    assert TenantIn.model_validate({"weight": 2}).weight == 2.0
    assert TenantIn.model_validate({"quota": {"T4": 2, "*": 0.5}}).quota == {"T4": 2, "*": 0.5}
    assert PolicyIn.model_validate({"policy": "fifo", "round_s": 60}).round_s == 60.0
    assert DeviceOpIn.model_validate({"level": 2}).level == 2
