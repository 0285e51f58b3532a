"""``accelnet job``: validate job files (optionally against a fabric), print the schema."""

from __future__ import annotations

import json
import sys
from typing import Annotated

import typer
from rich.text import Text

from accelnet.cli.fabric_cmd import CpuOpt, load_or_exit
from accelnet.cli.output import fail, out_console
from accelnet.sched.jobfile import JobSpecError, check_runnable, load_jobs
from accelnet.sched.spec import JobSpec, job_json_schema
from accelnet.sched.topology import Topology


def load_or_exit_jobs(paths: list[str], topo: Topology) -> list[JobSpec]:
    """Every job of ``paths``, each checked against the fabric; on the first bad file print
    what is wrong and exit 1."""
    specs: list[JobSpec] = []
    for path in paths:
        try:
            jobs = load_jobs(path)
            check_runnable(jobs, topo, path)
        except JobSpecError as exc:
            fail(exc, 1)
        specs += jobs
    return specs


job_app = typer.Typer(help="Job files: validate, schema.", no_args_is_help=True)


@job_app.command("validate")
def validate(
    files: Annotated[list[str], typer.Argument(help="job files (YAML or JSON)")],
    fabric: Annotated[
        str | None, typer.Option(help="also check that this fabric can run every job")
    ] = None,
    cpu_devices: CpuOpt = "per-core",
) -> None:
    """Check job files; exit 1 naming every problem (file:line: key = value: why)."""
    topo = Topology(load_or_exit(fabric, cpu_devices)) if fabric else None
    for path in files:
        try:
            jobs = load_jobs(path)
            if topo is not None:
                check_runnable(jobs, topo, path)
        except JobSpecError as exc:
            fail(exc, 1)
        where = f" on {topo.fabric.name}" if topo else ""
        out_console().print(Text.assemble(("ok ", "green"), f"{path}: {len(jobs)} job(s){where}"))


@job_app.command("schema")
def schema() -> None:
    """JSON schema of one job (a job file holds one, or several under jobs:)."""
    sys.stdout.write(json.dumps(job_json_schema(), indent=2) + "\n")
