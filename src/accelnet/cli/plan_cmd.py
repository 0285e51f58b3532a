"""``accelnet plan FABRIC JOB.yaml...``: where each job would go, and why others wait.

Nothing runs: the jobs are queued in the order given on an idle fabric and the scheduler
makes one decision. A job that consumes other jobs' outputs (``inputs``) waits for them.
"""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from typing import Annotated

import typer
from rich.table import Table
from rich.text import Text

from accelnet.cli.fabric_cmd import CpuOpt, JsonOpt, load_or_exit
from accelnet.cli.job_cmd import load_or_exit_jobs
from accelnet.cli.output import fail, out_console
from accelnet.cli.placement_opt import PLACEMENT_HELP, FragMixOpt, placement_maker
from accelnet.fabric import UnknownNameError
from accelnet.sched import JobState, JobView, Scheduler, Snapshot
from accelnet.sched.reasons import WaitCode, make_reason


def plan(
    fabric: Annotated[str, typer.Argument(help="preset, generator, fabric file, or 'local'")],
    job_files: Annotated[list[str], typer.Argument(help="job files (YAML or JSON)")],
    as_json: JsonOpt = False,
    ordering: Annotated[str, typer.Option(help="fifo or priority")] = "fifo",
    placement: Annotated[str, typer.Option(help=PLACEMENT_HELP)] = "best-fit",
    preemption: Annotated[str, typer.Option(help="none or priority")] = "none",
    cpu_devices: CpuOpt = "per-core",
    frag_mix: FragMixOpt = None,
) -> None:
    """Plan jobs on a fabric without running them: placements and reasons to wait."""
    fab = load_or_exit(fabric, cpu_devices)
    try:
        strategy = placement_maker(placement, frag_mix)()
        scheduler = Scheduler(ordering, strategy or placement, preemption)
    except UnknownNameError as exc:
        fail(exc, 2)
    except ValueError as exc:
        fail(exc, 2)
    specs = load_or_exit_jobs(job_files, scheduler.topology(fab))
    names = [s.name for s in specs]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        fail(f"job names must be unique across files: {', '.join(dupes)}", 1)
    views = tuple(
        JobView(s.name, s, JobState.PENDING if s.inputs else JobState.ADMITTED, float(i))
        for i, s in enumerate(specs)
    )
    decision = scheduler.decide(Snapshot.all_ready(fab, views))
    held = {s.name: make_reason("waits for its inputs: "
                                + ", ".join(sorted(set(s.inputs.values()))),
                                WaitCode.AWAITING_INPUTS)
            for s in specs if s.inputs}  # fmt: skip
    decision = replace(decision, waiting={**decision.waiting, **held})
    if as_json:
        data = {"fabric": fab.name, "jobs": names, **decision.to_json()}
        sys.stdout.write(json.dumps(data, indent=2, allow_nan=False) + "\n")
        return
    started = {s.job: s.placement for s in decision.starts}
    table = Table(title=f"plan on {fab.name} ({ordering}, {placement})", box=None)
    for col in ("job", "", "devices", "model", "span", "why"):
        table.add_column(col, overflow="fold")
    for s in specs:
        p = started.get(s.name)
        if p is not None:
            devs = (
                ", ".join(p.devices)
                if len(p.devices) <= 4
                else (f"{', '.join(p.devices[:3])}, ... ({len(p.devices)})")
            )
            if not p.devices:  # a CPU-only job
                devs = p.where()
            share = "" if p.share == 1 else f" x {p.share:g}"
            span = "device" if len(p.devices) == 1 else p.span.value
            table.add_row(Text(s.name), Text("start", "green"), Text(devs + share),
                          Text(p.model), Text(span), Text(""))  # fmt: skip
        else:
            table.add_row(Text(s.name), Text("wait", "yellow"), Text(""), Text(""), Text(""),
                          Text(decision.waiting.get(s.name, "")))  # fmt: skip
    out_console().print(table)
