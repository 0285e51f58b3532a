"""``accelnet run JOB.yaml... [--fabric SPEC]``: run job files to completion and report."""

from __future__ import annotations

import json
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.live import Live
from rich.table import Table
from rich.text import Text

from accelnet.cli.fabric_cmd import load_or_exit
from accelnet.cli.job_cmd import load_or_exit_jobs
from accelnet.cli.output import fail, note, out_console
from accelnet.cli.ray_opts import ADDRESS_HELP, BACKEND_HELP, ray_backend
from accelnet.cli.render import JOB_STATE_STYLE
from accelnet.cli.run_report import (
    json_safe,
    outcome,
    render,
    resume_message,
    stopped_message,
)
from accelnet.devices.faults import FaultPlanError, load_faults
from accelnet.devices.remediation import PolicyError, load_policy
from accelnet.runtime.control.controller import JobRejectedError
from accelnet.runtime.control.store import StoreError
from accelnet.runtime.ray.connect import RayOptions
from accelnet.runtime.sdk import Job, LocalCluster
from accelnet.sched.jobstate import JobState
from accelnet.sched.spec import JobSpec
from accelnet.sched.topology import Topology

INTERRUPTED = 130  # the exit status after Ctrl-C (128 + SIGINT), as shells use


def _table(
    jobs: list[Job], emulated: bool, reason: Callable[[str], str | None], stopped: str | None
) -> Table:
    left = sum(1 for job in jobs if not job.state.is_finished())
    title = f"{stopped}: {left} job{'s' * (left != 1)} unfinished" if stopped else None
    table = Table(title=title, title_style="bold red")
    for col in ("job", "state", "devices", "wait", "run time", "attempts", "energy", "note"):
        table.add_column(col, overflow="fold")
    now = time.time()
    for job in jobs:
        r = job.record
        energy = job.energy
        devs = ", ".join(r.placement.devices) if r.placement else "-"
        if emulated and r.placement:
            devs += " (emulated)"
        wait = (r.started_at or now) - r.submitted_at
        run = ((r.finished_at or now) - r.started_at) if r.started_at else 0.0
        state = r.state.value
        why = "" if state == "succeeded" else (r.error or reason(r.id) or "")
        table.add_row(Text(r.id), Text(state, JOB_STATE_STYLE.get(state, "")), Text(devs),
                      Text(f"{max(0.0, wait):.1f} s"), Text(f"{max(0.0, run):.1f} s"),
                      Text(str(r.attempts)), Text(energy.describe() if energy else "-"),
                      Text(why[:120]))  # fmt: skip
    return table


def _resume_or_submit(
    cluster: LocalCluster, spec: JobSpec, durable: bool
) -> tuple[Job, JobState | None]:
    """With a store file, a job is known by its name: a job already in it (from an earlier,
    perhaps interrupted, run) is followed rather than submitted again. Returns the job and
    the state it was found in (None: submitted now)."""
    if not durable:
        return cluster.submit_spec(spec), None
    try:
        found = cluster.store.get(spec.name)
    except StoreError:
        return cluster.submit_spec(spec, job_id=spec.name), None
    return cluster.job(found.id), found.state


@contextmanager
def _ctrl_c_sets(event: threading.Event) -> Iterator[None]:
    """While inside (on the main thread), Ctrl-C (SIGINT) sets ``event`` instead of raising
    KeyboardInterrupt mid-call, so the caller stops where it can still report; the old
    handler is back on exit. Off the main thread (no signals there) it does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = signal.signal(signal.SIGINT, lambda *_: event.set())
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, old)


def _follow(
    cluster: LocalCluster,
    handles: list[Job],
    console: Console,
    emulated: bool,
    timeout: float,
    stop: threading.Event,
) -> str | None:
    """Show the live table until every job is finished, ``stop`` is set (Ctrl-C) or
    ``timeout`` seconds have passed. Returns None, ``interrupted`` or ``not finished within
    T s``: why it stopped with jobs unfinished (the last table's title says so)."""
    start = time.monotonic()
    stopped = None
    with Live(console=console, refresh_per_second=4) as live:
        while not all(h.state.is_finished() for h in handles) and stopped is None:
            live.update(_table(handles, emulated, cluster.reason, None))
            stop.wait(0.25)
            if stop.is_set():
                stopped = "interrupted"
            elif time.monotonic() - start > timeout:
                stopped = f"not finished within {timeout:g} s"
        live.update(_table(handles, emulated, cluster.reason, stopped))
    return stopped


def run(
    job_files: Annotated[list[str], typer.Argument(help="job files (YAML or JSON)")],
    fabric: Annotated[
        str | None, typer.Option(help="emulate this fabric (preset or file) on this CPU")
    ] = None,
    out: Annotated[Path, typer.Option(help="working folder: logs, scratch")] = Path("accelnet-run"),
    db: Annotated[
        Path | None,
        typer.Option(help="SQLite store: the run survives a crash; rerun to resume (jobs by name)"),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="a JSON summary for scripts")] = False,
    timeout: Annotated[float, typer.Option(help="give up after this many seconds")] = 3600.0,
    device_policy: Annotated[
        Path | None,
        typer.Option(help="device remediation policy (YAML; docs/devices.md; as serve's)"),
    ] = None,
    old_policy: Annotated[
        Path | None, typer.Option("--policy", hidden=True, help="the old --device-policy")
    ] = None,
    faults: Annotated[
        Path | None, typer.Option(help="faults to inject (YAML; docs/devices.md)")
    ] = None,
    power_budget: Annotated[
        float | None,
        typer.Option(
            "--power-budget",
            min=1.0,
            help="keep the devices' draw under this many W: cap devices, delay starts "
            "(docs/power.md)",
        ),
    ] = None,
    backend: Annotated[str, typer.Option(help=BACKEND_HELP)] = "local",
    ray_address: Annotated[str | None, typer.Option(help=ADDRESS_HELP + "; default auto")] = None,
) -> None:
    """Run job files to completion on this machine (or an emulated fabric, or a Ray
    cluster) and report."""
    if old_policy is not None:
        note(
            "--policy is now --device-policy (--policy is the scheduling policy of serve "
            "and simulate); taken as --device-policy"
        )
        device_policy = device_policy or old_policy
    try:
        with ray_backend(backend, ray_address, "auto") as ray:
            _run(job_files, fabric, out, db, as_json, timeout, device_policy, faults, power_budget,
                 ray)  # fmt: skip
    except KeyboardInterrupt:  # outside the wait for the jobs (starting, stopping)
        again = f"; rerun with --db {db} to resume" if db is not None else ""
        fail(f"interrupted{again}", INTERRUPTED)


def _run(
    job_files: list[str],
    fabric: str | None,
    out: Path,
    db: Path | None,
    as_json: bool,
    timeout: float,
    policy: Path | None,
    faults: Path | None,
    power_budget: float | None,
    ray: RayOptions | None,
) -> None:
    emulated = ray is not None or (fabric is not None and fabric != "local")
    fab = load_or_exit(fabric, "per-core") if ray is None or fabric is not None else None
    specs = load_or_exit_jobs(job_files, Topology(fab)) if fab is not None else []
    try:
        rules = load_policy(policy) if policy is not None else None
        injected = load_faults(faults) if faults is not None else ()
    except (PolicyError, FaultPlanError) as exc:
        fail(exc, 1)
    # with --json, stdout has the JSON only; piped, the table keeps one line per row
    console = Console(stderr=True) if as_json else out_console()
    stop = threading.Event()  # Ctrl-C from submitting the jobs until they end
    with (
        LocalCluster(
            fab,
            workdir=out.resolve(),
            db=db,
            policy=rules,
            faults=injected,
            power_budget_w=power_budget,
            ray=ray,
        ) as cluster,
        _ctrl_c_sets(stop),
    ):
        if fab is None:  # a Ray cluster's fabric: known once connected
            specs = load_or_exit_jobs(job_files, Topology(cluster.fabric))
        fab = cluster.fabric
        try:
            found = [_resume_or_submit(cluster, s, db is not None) for s in specs]
        except JobRejectedError as exc:
            fail(exc, 1)
        handles = [job for job, _ in found]
        earlier = [job.id for job, was in found if was is not None and was.is_finished()]
        resumed = [job.id for job, was in found if was is not None and not was.is_finished()]
        new = [job.id for job, was in found if was is None]
        said = resume_message(resumed, earlier, new, db) if db is not None else None
        if said:
            console.print(Text(said))
        stopped = _follow(cluster, handles, console, emulated, timeout, stop)
        records = [h.record for h in handles]
        log_dir = cluster.controller.log_dir
        outputs = {h.id: h.output for h in handles}
        outcomes = [outcome(r, log_dir, outputs[r.id], r.id in earlier) for r in records]
        caps = cluster.store.events_since(0, ("power:cap", "power:error"))
    console.line()  # off the table's last line (rich leaves it open off a terminal)
    console.print(render(outcomes, log_dir))
    if power_budget is not None and not as_json:
        changed = sum(1 for e in caps if e.kind == "power:cap")
        refused = sum(1 for e in caps if e.kind == "power:error")
        kind = " (recorded, not enforced: emulated devices)" if emulated else ""
        refusals = f", {refused} refused (power:error events)" if refused else ""
        note(f"power budget {power_budget:,.0f} W: {changed} cap changes{kind}{refusals}")
    unfinished = [r.id for r in records if not r.state.is_finished()]
    if stopped:
        console.print(Text(stopped_message(stopped, unfinished, db), "bold red"))
    if as_json:
        data = {
            "schema": "accelnet.run/v1",
            "fabric": fab.name,
            "emulated": emulated,
            "jobs": [
                {"id": r.id, "name": r.spec.name, "state": r.state.value, "attempts": r.attempts,
                 "devices": list(r.placement.devices) if r.placement else [],
                 "error": r.error, "logs": str(log_dir),
                 "output": str(outputs[r.id]),
                 "inputs": dict(r.inputs),
                 "log_prefix": f"{r.id}.{r.attempts}",
                 "energy": r.energy,
                 "result": json_safe(r.result) if r.spec.entrypoint else None}
                for r in records
            ],
            "power": {"budget_w": power_budget,
                      "changes": [{"at": e.at, "kind": e.kind, "detail": e.detail}
                                  for e in caps]},
            "resumed": resumed,
            "already_finished": earlier,
            "interrupted": stopped == "interrupted",
            "unfinished": unfinished,
        }  # fmt: skip
        sys.stdout.write(json.dumps(data, indent=2) + "\n")
    if stopped == "interrupted":
        raise typer.Exit(INTERRUPTED)
    if stopped or not all(r.state.value == "succeeded" for r in records):
        raise typer.Exit(1)
