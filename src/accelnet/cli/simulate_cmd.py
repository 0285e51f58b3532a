"""``accelnet simulate``: replay a trace on a fabric under one or more policies."""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)

from accelnet.cli.fabric_cmd import CpuOpt, JsonOpt, load_or_exit
from accelnet.cli.output import fail, note, out_console
from accelnet.cli.placement_opt import PLACEMENT_HELP, FragMixOpt, placement_maker
from accelnet.cli.round_opts import ReallocationOpt
from accelnet.fabric import Fabric, UnknownNameError
from accelnet.sched import Scheduler
from accelnet.sched.placement import PlacementStrategy
from accelnet.sched.policies import QUEUE_POLICIES
from accelnet.sim import metrics as sim_metrics
from accelnet.sim import report
from accelnet.sim.engine import Simulation
from accelnet.sim.policies import POLICY_NAMES, make_scheduler
from accelnet.sim.records import SimResult
from accelnet.sim.throughput import ThroughputModel
from accelnet.sim.traces import TraceError, load_failures, mtbf_failures, stream_trace
from accelnet.sim.workload import SimJob, prefer_one_host


def simulate(
    fabric: Annotated[str, typer.Option("--fabric", help="preset, generator or fabric file")],
    trace: Annotated[
        str,
        typer.Option(
            "--trace",
            help="a Gavel .trace, philly:PATH[,scale=S][,repeat=R][,limit=N], "
            "gavel-gen:n=N,lam=S, or a CSV/JSON trace of your own",
        ),
    ],
    policy: Annotated[
        str,
        typer.Option(
            "--policy",
            help="policy, or several to compare (fifo,hetero-fair,...): " + ", ".join(POLICY_NAMES),
        ),
    ] = "fifo",
    round_s: Annotated[
        float | None,
        typer.Option("--round", help="round length, s (round-based policies: default 360)"),
    ] = None,
    min_reallocation_s: ReallocationOpt = 0.0,
    seed: Annotated[int, typer.Option(help="seed for generated traces and random faults")] = 0,
    out: Annotated[
        Path | None, typer.Option(help="write metrics.json, per-job CSVs and plots here")
    ] = None,
    restart_s: Annotated[
        float, typer.Option("--restart-s", help="warm-up after a restart (checkpoint load)")
    ] = 30.0,
    checkpoint_s: Annotated[
        float, typer.Option("--checkpoint-s", help="time a stopped checkpointable job saves")
    ] = 0.0,
    power_cap: Annotated[
        float | None, typer.Option("--power-cap", help="cap every device at this many W")
    ] = None,
    failures: Annotated[
        Path | None, typer.Option(help="device failures: CSV at,device,repair_s")
    ] = None,
    mtbf_s: Annotated[
        float | None, typer.Option("--mtbf", help="random device failures: MTBF per device, s")
    ] = None,
    repair_s: Annotated[
        float, typer.Option("--repair-s", help="repair time of MTBF faults, s")
    ] = 3600.0,
    rates: Annotated[
        Path | None, typer.Option(help="Gavel throughput JSON (default: the bundled copy)")
    ] = None,
    until: Annotated[float | None, typer.Option(help="stop after N s of virtual time")] = None,
    spread_penalty: Annotated[
        bool,
        typer.Option(
            "--spread-penalty/--no-spread-penalty",
            help="a gang spread over hosts runs slower (Gavel's *_unconsolidated figures); "
            "off: at the one-host rate, as Gavel's simulator assumes",
        ),
    ] = True,
    comm_model: Annotated[
        bool,
        typer.Option(
            "--comm-model",
            help="price communicating gangs with the communication model, links shared "
            "between jobs (instead of the table's spread penalty)",
        ),
    ] = False,
    placement: Annotated[
        str | None, typer.Option(help=f"{PLACEMENT_HELP} (default: the policy's own)")
    ] = None,
    frag_mix: FragMixOpt = None,
    reserve_after: Annotated[
        float | None,
        typer.Option(
            "--reserve-after",
            help="hold a domain for a gang that has waited this many s and does not fit, "
            "so that smaller jobs behind it cannot take every device that frees up "
            "(queue policies; default: plain backfill)",
        ),
    ] = None,
    locality_wait: Annotated[
        float | None,
        typer.Option(
            "--locality-wait",
            help="every gang of the trace prefers one host and waits up to this many s for "
            "one (topology.wait_s; 1e12: never spreads a gang one host could hold)",
        ),
    ] = None,
    jct_bound: Annotated[
        bool,
        typer.Option(
            "--jct-bound",
            help="also compute the LP lower bound on the average JCT (a time-indexed "
            "fluid LP; up to a few seconds for a few hundred jobs)",
        ),
    ] = False,
    as_json: JsonOpt = False,
    cpu_devices: CpuOpt = "per-core",
) -> None:
    """Replay a trace on a fabric with the live scheduler, in virtual time, and report."""
    fab = load_or_exit(fabric, cpu_devices)
    names = [p.strip() for p in policy.split(",") if p.strip()]
    if not names:
        fail("--policy: give at least one policy", 2)
    try:
        model = _rates(rates, fab)
        schedulers = _schedulers(
            names, model, (round_s, placement_maker(placement, frag_mix), reserve_after,
                           locality_wait, min_reallocation_s)
        )  # fmt: skip
        stream = stream_trace(trace, model, seed)  # lazy: read as the simulation runs
        notes = stream.notes
        faults = load_failures(failures) if failures is not None else []
        if mtbf_s is not None:  # in addition to the schedule's
            last = max((j.arrival for j in stream_trace(trace, model, seed).jobs), default=0.0)
            horizon = last * 2 + 7 * 86400
            faults += mtbf_failures(sorted(fab.devices), mtbf_s, horizon, seed, repair_s)
    except (TraceError, ValueError, OSError) as exc:
        fail(exc, 2)
    except UnknownNameError as exc:
        fail(f"--placement: {exc}", 2)
    if power_cap is not None and not power_cap > 0:
        fail(f"--power-cap must be > 0 W, got {power_cap}", 2)
    caps = dict.fromkeys(fab.devices, power_cap) if power_cap is not None else None
    for n in notes:
        note(n)
    console = Console(stderr=True)
    results, figures = [], []
    with Progress(
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
        TimeElapsedColumn(), console=console, transient=as_json,
    ) as progress:  # fmt: skip
        for i, (name, scheduler) in enumerate(zip(names, schedulers, strict=True)):
            task = progress.add_task(f"{name}: jobs finished", total=stream.count)
            try:
                if i:  # a stream is read once: each policy reads the trace anew
                    stream = stream_trace(trace, model, seed)
                sim = Simulation(
                    fab, _jobs(stream.jobs, locality_wait), scheduler, model, failures=faults,
                    round_s=round_s,
                    restart_s=restart_s, checkpoint_s=checkpoint_s, power_caps=caps,
                    spread_penalty=spread_penalty, comm_model=comm_model,
                    seed=seed, policy=name, trace=trace, forget_finished=True,
                    total=stream.count, jct_bound=jct_bound,
                )  # fmt: skip
            except (TraceError, ValueError) as exc:
                fail(exc, 2)

            def show(done: int, total: int, task: TaskID = task) -> None:
                progress.update(task, completed=done, total=total)

            try:
                result: SimResult = sim.run(until=until, progress=show)
            except (TraceError, ValueError) as exc:  # a bad line of a lazily read trace
                fail(exc, 2)
            result.notes.extend(notes)
            results.append(result)
            figures.append(sim_metrics.compute(result))
    if out is not None:
        written = report.write_outputs(out, results, figures)
        note(f"wrote {len(written)} files under {out}")
    if as_json:
        data = {
            "schema": "accelnet.simulate/v1",
            "fabric": fab.name,
            "trace": trace,
            "runs": [{"policy": r.policy, "metrics": m.to_json()}
                     for r, m in zip(results, figures, strict=True)],
        }  # fmt: skip
        sys.stdout.write(json.dumps(data, indent=2, allow_nan=False) + "\n")
        return
    out_console().print(report.table(results, figures))


def _jobs(jobs: Iterable[SimJob], locality_wait: float | None) -> Iterable[SimJob]:
    """The trace's jobs, each gang waiting ``locality_wait`` s for one host if given."""
    return jobs if locality_wait is None else prefer_one_host(jobs, locality_wait)


def _rates(rates: Path | None, fab: Fabric) -> ThroughputModel:
    """Gavel's table (or ``rates``), knowing the models the fabric declares itself."""
    model = ThroughputModel.gavel(rates)
    model.add_models(d.model for d in fab.devices.values())
    return model


def _schedulers(
    names: list[str],
    model: ThroughputModel,
    how: tuple[
        float | None,
        Callable[[], str | PlacementStrategy | None],
        float | None,
        float | None,
        float,
    ],
) -> list[Scheduler]:
    """One scheduler per policy name; ``how``: round length, placement, reserve-after,
    locality wait and re-allocation interval (given to the round policies only: the queue
    policies allocate nothing, so a comparison may mix both). ValueError for a locality
    wait with a round policy (it plans every round afresh and does not wait for a level),
    or a negative interval."""
    round_s, placement, reserve_after, locality_wait, realloc = how
    if not (math.isfinite(realloc) and realloc >= 0):
        raise ValueError(f"--min-reallocation-s must be a number of s >= 0, got {realloc}")
    if locality_wait is not None:
        rounds = [n for n in names if n not in QUEUE_POLICIES]
        if rounds:
            raise ValueError(
                f"--locality-wait applies to the queue policies ({', '.join(QUEUE_POLICIES)}),"
                f" not to {', '.join(rounds)}"
            )
    return [
        make_scheduler(n, model, round_s or 360.0, placement(), reserve_after,
                       0.0 if n in QUEUE_POLICIES else realloc)
        for n in names
    ]  # fmt: skip
