"""Job files: one job (a mapping), or several under ``jobs:``; YAML or JSON.

Errors name the file, the line, the key path (``jobs[1].resources.accelerators``) and the
value, as fabric files do. A file is a self-contained graph of jobs: ``inputs`` name jobs
of the same file, without cycles, and the jobs come back in an order in which each one
follows the jobs it consumes (file order otherwise), ready to submit.
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
    jobs: list[tuple[int, JobSpec]] = []
    issues: list[SpecIssue] = []
    for i, item in enumerate(items):
        loc: list[str | int] = [*prefix, i] if prefix else []
        sub = _subnode(node, loc)
        if not isinstance(item, dict):
            issues.append(SpecIssue(_path(loc), "a job is a mapping", item, line_of(node, loc)))
            continue
        try:
            jobs.append((i, JobSpec.model_validate(item)))
        except ValidationError as exc:
            for issue in validation_issues(exc, item, sub, JobSpec):
                path = _path(loc) + ("." if loc and issue.path else "") + issue.path
                issues.append(SpecIssue(path, issue.message, issue.value, issue.line))
    names = [j.name for _, j in jobs]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        issues.append(SpecIssue("name", "job names must be unique in a file", ", ".join(dupes)))
    if issues:
        raise JobSpecError(source, issues)
    ordered, graph_issues = input_order(jobs, prefix)
    for path, value, message in graph_issues:
        issues.append(SpecIssue(path, message, value, line_of(node, _loc(path))))
    if issues:
        raise JobSpecError(source, issues)
    return ordered


def input_order(
    jobs: list[tuple[int, JobSpec]], prefix: list[str]
) -> tuple[list[JobSpec], list[tuple[str, str, str]]]:
    """The jobs (``(position in the file, spec)``) with each after the jobs its ``inputs``
    name, file order otherwise; and the problems, as ``(key path, value, message)``: an
    input naming no job of the file, or a cycle (reported once, at its first edge)."""
    by_name = {spec.name: (i, spec) for i, spec in jobs}

    def key(i: int, alias: str) -> str:
        return f"{prefix[0]}[{i}].inputs.{alias}" if prefix else f"inputs.{alias}"

    issues: list[tuple[str, str, str]] = []
    for i, spec in jobs:
        for alias, name in spec.inputs.items():
            if name not in by_name:
                known = ", ".join(sorted(by_name))
                why = f"no job {name!r} in this file (jobs: {known})"
                issues.append((key(i, alias), name, why))
    if issues:
        return [s for _, s in jobs], issues
    done: dict[str, bool] = {}  # name -> finished (False: on the current path)
    ordered: list[JobSpec] = []

    def visit(name: str, path: list[str]) -> None:
        state = done.get(name)
        if state is True:
            return
        if state is False:
            cycle = [*path[path.index(name) :], name]
            i, spec = by_name[cycle[0]]
            alias = next(a for a, up in sorted(spec.inputs.items()) if up == cycle[1])
            why = "a cycle of inputs (each takes the next one's outputs): " + " <- ".join(cycle)
            issues.append((key(i, alias), cycle[1], why))
            return
        done[name] = False
        spec = by_name[name][1]
        for up in sorted(set(spec.inputs.values()), key=lambda n: by_name[n][0]):  # file order
            visit(up, [*path, name])
            if issues:
                return
        done[name] = True
        ordered.append(spec)

    for _, spec in jobs:
        visit(spec.name, [])
        if issues:
            return [s for _, s in jobs], issues
    return ordered, []


def _loc(path: str) -> list[str | int]:
    """``jobs[2].inputs.tiles`` -> ``["jobs", 2, "inputs", "tiles"]``."""
    out: list[str | int] = []
    for part in path.split("."):
        name, _, index = part.partition("[")
        if name:
            out.append(name)
        if index:
            out.append(int(index.rstrip("]")))
    return out


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
