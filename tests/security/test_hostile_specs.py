"""Hostile job and fabric specs: random, deep, huge, unicode and control-character input
never raises anything but the documented spec error (``JobSpecError`` / ``FabricSpecError``),
whose issues name the offending key; a job name with shell metacharacters is refused."""

from __future__ import annotations

import contextlib
import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from accelnet.fabric.build import parse_spec
from accelnet.fabric.errors import FabricSpecError
from accelnet.sched.jobfile import JobSpecError, parse_jobs
from accelnet.specio import parse_text

FAST = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# text with control characters, surrogates aside, and astral unicode
nasty_text = st.text(
    alphabet=st.characters(exclude_categories=["Cs"]), max_size=40
) | st.sampled_from(["", "\x00", "\u202e", "a" * 5000, "../../etc/passwd", "$(id)", "'; --"])
scalars = st.none() | st.booleans() | st.integers() | st.floats() | nasty_text
values: st.SearchStrategy[Any] = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(nasty_text, inner, max_size=4),
    max_leaves=20,
)
JOB_KEYS = ["name", "run", "resources", "env", "inputs", "tenant", "priority", "retries"]
FABRIC_KEYS = ["name", "hosts", "switches", "links", "devices", "kind", "model"]


def _deep(depth: int) -> Any:
    out: Any = "x"
    for _ in range(depth):
        out = {"a": [out]}
    return out


@FAST
@given(st.dictionaries(st.sampled_from(JOB_KEYS) | nasty_text, values, max_size=6) | values)
def test_random_job_specs_raise_only_spec_errors(data: Any) -> None:
    try:
        parse_jobs(data, "hostile.yaml")
    except JobSpecError as e:
        assert e.issues and "hostile.yaml" in str(e)


@FAST
@given(st.dictionaries(st.sampled_from(FABRIC_KEYS) | nasty_text, values, max_size=6) | values)
def test_random_fabric_specs_raise_only_spec_errors(data: Any) -> None:
    try:
        parse_spec(data, "hostile-fabric.yaml")
    except FabricSpecError as e:
        assert e.issues and "hostile-fabric.yaml" in str(e)


@FAST
@given(st.text(max_size=300))
def test_random_text_parses_or_raises_spec_error(text: str) -> None:
    for error in (JobSpecError, FabricSpecError):
        try:
            data, _ = parse_text(text, "t.yaml", error)
        except error:
            continue
        with contextlib.suppress(error):
            parse_jobs(data, "t.yaml") if error is JobSpecError else parse_spec(data, "t.yaml")


@FAST
@given(key=nasty_text.filter(lambda k: k not in JOB_KEYS and k.strip() != ""))
def test_unknown_job_key_is_named(key: str) -> None:
    with pytest.raises(JobSpecError) as info:
        parse_jobs({"name": "ok", "run": "true", key: 1}, "k.yaml")
    assert any(key in issue.path or key == issue.path for issue in info.value.issues)


@pytest.mark.parametrize("depth", [50, 500, 5000])
def test_deep_nesting_is_a_spec_error(depth: int) -> None:
    nested = _deep(depth)
    with pytest.raises(JobSpecError):
        parse_jobs({"name": "deep", "run": "true", "env": nested}, "deep.yaml")
    with pytest.raises(FabricSpecError):
        parse_spec({"hosts": nested}, "deep.yaml")
    text = json.dumps({"name": "deep", "run": "true", "x": _deep(min(depth, 400))})
    with pytest.raises(JobSpecError):
        data, _ = parse_text(text, "deep.json", JobSpecError, as_json=True)
        parse_jobs(data, "deep.json")


def test_huge_spec_is_a_spec_error() -> None:
    with pytest.raises(JobSpecError):
        parse_jobs({"name": "n" * 1_000_000, "run": "true"}, "huge.yaml")
    with pytest.raises(JobSpecError):
        parse_jobs({"jobs": [{"name": f"j{i}", "bogus": i} for i in range(20_000)]}, "h.yaml")


@pytest.mark.parametrize(
    "name",
    [
        "x;touch /tmp/pwned",
        "x && rm -rf ~",
        "$(touch /tmp/pwned)",
        "`id`",
        "a|b",
        "a\nb",
        "a b",
        "x>/tmp/pwned",
        "../x",
        "a\x00b",
        "-rf",
    ],
)
def test_shell_metacharacters_in_job_names_are_refused(name: str) -> None:
    with pytest.raises(JobSpecError) as info:
        parse_jobs({"name": name, "run": "true"}, "sh.yaml")
    assert any(issue.path == "name" for issue in info.value.issues)
