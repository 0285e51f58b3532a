"""Job specs and job files: the forms users write, and errors that name key and value."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from accelnet.fabric import load_preset
from accelnet.sched import JobSpec
from accelnet.sched.jobfile import JobSpecError, check_runnable, load_jobs
from accelnet.sched.topology import Topology


def spec(**kw: object) -> JobSpec:
    return JobSpec.model_validate({"name": "j", "run": "true", **kw})


@pytest.mark.parametrize(
    ("text", "models", "count", "share"),
    [
        ("H100:8", ("H100",), 8, 1.0),
        ("any:2", (), 2, 1.0),
        ("T4:0.25", ("T4",), 1, 0.25),
        ("T4:0.999999999", ("T4",), 1, 1.0),  # within rounding of a step: kept on the grid
        ({"models": ["T4"], "share": 0.2900000001}, ("T4",), 1, 0.29),
        ("L4", ("L4",), 1, 1.0),
        ("A100-80GB|H100:4", ("A100-80GB", "H100"), 4, 1.0),
        ({"any_of": ["A100-80GB", "H100"], "count": 4}, ("A100-80GB", "H100"), 4, 1.0),
    ],
)
def test_accelerator_forms(text: object, models: tuple[str, ...], count: int, share: float) -> None:
    acc = spec(resources={"accelerators": text}).resources.accelerators
    assert (acc.models, acc.count, acc.share) == (models, count, share)


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("H100:0", "the count must be at least 1"),
        ("T4:1.5", "a count is a whole number of devices (8) and a share is a part"),
        ("H100:x", "'x' is not a number of devices"),
        (":4", "write MODEL:COUNT"),
        ({"models": ["T4"], "count": 2, "share": 0.5}, "count must be 1"),
        ("T4:1e-10", "greater than or equal to 0.01"),
        ("T4:0.333", "shares come in steps of 0.01"),
    ],
)
def test_bad_accelerators(text: object, needle: str) -> None:
    with pytest.raises(ValidationError) as info:
        spec(resources={"accelerators": text})
    assert needle in str(info.value)


def test_exactly_one_program() -> None:
    with pytest.raises(ValidationError, match="exactly one of run"):
        JobSpec.model_validate({"name": "j"})
    with pytest.raises(ValidationError, match="exactly one of run"):
        spec(entrypoint={"function": "m:f"})
    assert spec(run=None, entrypoint={"function": "pkg.mod:main", "args": [1]}).entrypoint


def test_entrypoint_and_env_names() -> None:
    with pytest.raises(ValidationError, match="is not module:function"):
        spec(run=None, entrypoint={"function": "rm -rf /"})
    with pytest.raises(ValidationError, match="not an environment variable name"):
        spec(env={"A B": "1"})


def test_deadline_iso_or_seconds() -> None:
    assert spec(deadline="2026-12-01T00:00:00+00:00").deadline == 1796083200.0
    assert spec(deadline="2026-12-01T00:00:00").deadline == 1796083200.0  # no zone: UTC
    assert spec(deadline=3600).deadline == 3600
    with pytest.raises(ValidationError, match="neither seconds nor an ISO time"):
        spec(deadline="tomorrow")


def test_topology_preferred_within_required() -> None:
    with pytest.raises(ValidationError, match="preferred leaf is looser than required host"):
        spec(topology={"required": "host", "preferred": "leaf"})


def test_names_are_never_shell_words() -> None:
    with pytest.raises(ValidationError):
        spec(name="x; rm -rf /")
    with pytest.raises(ValidationError):
        spec(name="a\nb")


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "jobs.yaml"
    p.write_text(text)
    return p


def test_job_file_errors_name_file_line_key_and_value(tmp_path: Path) -> None:
    p = write(
        tmp_path,
        "jobs:\n"
        "  - {name: a, run: x, resources: {accelerators: 'H100:8'}}\n"
        "  - name: b\n"
        "    run: x\n"
        "    resources: {accelerators: 'T4:1.5', gpus: 2}\n",
    )
    with pytest.raises(JobSpecError) as info:
        load_jobs(p)
    msg = str(info.value)
    assert "jobs.yaml:5: jobs[1].resources.accelerators = 'T4:1.5'" in msg
    assert "jobs.yaml:5: jobs[1].resources.gpus: unknown key (allowed here: accelerators" in msg


def test_single_job_file_and_duplicate_names(tmp_path: Path) -> None:
    jobs = load_jobs(write(tmp_path, "name: solo\nrun: x\nresources: {accelerators: 'any:1'}\n"))
    assert [j.name for j in jobs] == ["solo"]
    with pytest.raises(JobSpecError, match="job names must be unique"):
        load_jobs(write(tmp_path, "jobs:\n  - {name: a, run: x}\n  - {name: a, run: y}\n"))


def test_a_model_no_fabric_has(tmp_path: Path) -> None:
    topo = Topology(load_preset("mixed-lab"))
    jobs = load_jobs(
        write(
            tmp_path,
            "jobs:\n  - {name: a, run: x, resources: {accelerators: 'B200:1'}}\n"
            "  - {name: b, run: x, resources: {accelerators: 'H900:1'}}\n"
            "  - {name: c, run: x, resources: {accelerators: 'H100:16'}}\n"
            "  - {name: d, run: x, resources: {accelerators: 'L4:4'},\n"
            "     topology: {required: nvlink}}\n"
            "  - {name: e, run: x, resources: {accelerators: 'T4:1', min_memory_gb: 40}}\n",
        )
    )
    with pytest.raises(JobSpecError) as info:
        check_runnable(jobs, topo, "jobs.yaml")
    msg = str(info.value)
    assert "jobs[0].resources.accelerators = 'B200': job a: fabric 'mixed-lab' has no B200" in msg
    assert "models here: H100-SXM, Jetson-AGX-Orin, L4, T4" in msg
    assert "jobs[1].resources.accelerators = 'H900'" in msg
    assert "jobs[2].resources.accelerators = '16 x H100': job c: needs 16 x H100-SXM; " in msg
    assert "jobs[3].topology.required = 'nvlink': job d: needs 4 devices in one NVLink" in msg
    assert "jobs[4].resources.min_memory_gb = 40.0: job e: no matching device has 40 GB" in msg


def test_alias_bomb_in_entrypoint_args_is_refused(tmp_path: Path) -> None:
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    for i in range(1, 8):
        lines.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]")
    text = "\n".join(lines) + "\nname: j\nentrypoint: {function: 'm:f', args: *a7}\n"
    with pytest.raises(JobSpecError, match="expands to more than 2,000,000 values"):
        load_jobs(write(tmp_path, text))


def test_job_schema_accepts_the_compact_forms() -> None:
    import jsonschema
    import yaml

    from accelnet.sched.spec import job_json_schema

    schema = job_json_schema()
    example = Path(__file__).parents[2] / "examples" / "jobs" / "lab.yaml"
    for job in yaml.safe_load(example.read_text())["jobs"]:
        jsonschema.validate(job, schema)
