"""Job files: one job (a mapping), or several under ``jobs:``; YAML or JSON.

Errors name the file, the line, the key path (``jobs[1].resources.accelerators``) and the
value, as fabric files do.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from accelnet.sched.request import rejection
from accelnet.sched.spec import JobSpec
from accelnet.sched.topology import Topology
from accelnet.specio import SpecError, SpecIssue, line_of, parse_text, read_text, validation_issues


class JobSpecError(SpecError):
    """A job file that is not valid, or a job the fabric can never run."""

    what = "job spec"


def parse_jobs(data: Any, source: str, node: yaml.Node | None = None) -> list[JobSpec]:
    """Validate one job mapping, or ``{jobs: [...]}``; JobSpecError with every issue."""
    if isinstance(data, dict) and set(data) == {"jobs"}:
        items, prefix = data["jobs"], ["jobs"]
        if not isinstance(items, list) or not items:
            raise JobSpecError(source, [SpecIssue("jobs", "a non-empty list of jobs", items, 1)])
    elif isinstance(data, dict):
        items, prefix = [data], []
    else:
        raise JobSpecError(
            source, [SpecIssue("", "a job file is a job mapping or {jobs: [...]}", data, 1)]
        )
    jobs, issues = [], []
    for i, item in enumerate(items):
        loc: list[str | int] = [*prefix, i] if prefix else []
        sub = _subnode(node, loc)
        if not isinstance(item, dict):
            issues.append(SpecIssue(_path(loc), "a job is a mapping", item, line_of(node, loc)))
            continue
        try:
            jobs.append(JobSpec.model_validate(item))
        except ValidationError as exc:
            for issue in validation_issues(exc, item, sub, JobSpec):
                path = _path(loc) + ("." if loc and issue.path else "") + issue.path
                issues.append(SpecIssue(path, issue.message, issue.value, issue.line))
    names = [j.name for j in jobs]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        issues.append(SpecIssue("name", "job names must be unique in a file", ", ".join(dupes)))
    if issues:
        raise JobSpecError(source, issues)
    return jobs


def _path(loc: list[str | int]) -> str:
    return "".join(f"[{p}]" if isinstance(p, int) else p for p in loc)


def _subnode(node: yaml.Node | None, loc: list[str | int]) -> yaml.Node | None:
    for part in loc:
        if isinstance(node, yaml.MappingNode):
            node = next((v for k, v in node.value if k.value == part), None)
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int):
            node = node.value[part] if part < len(node.value) else None
        else:
            return None
    return node


def load_jobs(path: str | Path) -> list[JobSpec]:
    """Read and validate a job file."""
    source = str(path)
    text = read_text(path, JobSpecError)
    data, node = parse_text(text, source, JobSpecError, source.lower().endswith(".json"))
    return parse_jobs(data, source, node)


def check_runnable(jobs: list[JobSpec], topo: Topology, source: str) -> None:
    """JobSpecError naming the key and value of every job the fabric can never run."""
    issues = []
    for i, job in enumerate(jobs):
        why = rejection(job, topo)
        if why is not None:
            prefix = f"jobs[{i}]." if len(jobs) > 1 else ""
            issues.append(SpecIssue(f"{prefix}{why.key}", f"job {job.name}: {why.message}",
                                    why.value))  # fmt: skip
    if issues:
        raise JobSpecError(source, issues)
