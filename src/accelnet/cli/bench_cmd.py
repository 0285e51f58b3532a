"""``accelnet bench``: real measurements on this machine's devices.

``accelnet bench comm`` runs allreduce and allgather across one worker process per device
and prints nccl-tests' columns beside the cost model's prediction; ``--calibrate`` fits the
model's latency and bandwidth for the devices' locality level and writes a calibration
file that ``--calibration`` then uses (docs/comm-bench.md).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.text import Text

from accelnet.comm import Calibration, CommError, CostModel
from accelnet.commbench import (
    BenchError,
    BenchInputError,
    BenchPlan,
    Settings,
    bench_json,
    benchmark,
    calibrate,
    calibration_steps,
    make_steps,
    parse_sizes,
    plan_bench,
)
from accelnet.commbench.affinity import machine_info, physical_cores
from accelnet.commbench.calibrate import RingFit
from accelnet.commbench.plan import parse_devices
from accelnet.commbench.report import fit_table, rows_table, summary_lines
from accelnet.commbench.results import prediction_algorithm
from accelnet.commbench.sizes import format_size
from accelnet.commbench.worker import Step
from accelnet.fabric import Fabric, FabricNotFoundError, FabricSpecError, load_fabric
from accelnet.fabric.discovery import discover

bench_app = typer.Typer(help="Real measurements on this machine's devices.", no_args_is_help=True)

DEFAULT_SIZES = "1K..64M"
DEFAULT_OUT = Path("comm-calibration.json")


def _out() -> Console:
    """stdout; piped or logged, wide enough for the tables (no wrapping at 80 columns)."""
    console = Console()
    if not console.is_terminal:
        console = Console(width=max(console.width, 132))
    return console


def _err() -> Console:
    return Console(stderr=True)


def _fail(message: object, code: int) -> NoReturn:
    _err().print(Text(str(message), style="red"))
    raise typer.Exit(code)


def _note(message: str) -> None:
    _err().print(Text.assemble(("note: ", "yellow"), message))


def _fabrics(ref: str) -> tuple[Fabric, Fabric]:
    """(the fabric to plan on, this machine's discovered fabric)."""
    local = discover("per-core").fabric
    if ref == "local":
        return local, local
    try:
        return load_fabric(ref), local
    except (FabricSpecError, FabricNotFoundError, KeyError) as e:
        raise BenchInputError(f"--fabric: {e.args[0] if e.args else e}") from None


def _calibration(path: Path | None) -> Calibration | None:
    if path is None:
        return None
    try:
        return Calibration.load(path)
    except CommError as e:
        raise BenchInputError(f"--calibration: {e}") from None


@contextmanager
def _progress(steps: Sequence[Step], quiet: bool) -> Iterator[Callable[[int], None]]:
    """A progress bar on stderr, advanced by the callback it yields."""
    bar = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=_err(),
        transient=True,
        disable=quiet,
    )

    def label(i: int) -> str:
        return f"{steps[i].collective} {format_size(steps[i].nbytes)}" if i < len(steps) else ""

    with bar:
        task = bar.add_task(f"starting workers; {label(0)}", total=len(steps))

        def done(i: int) -> None:
            bar.update(task, advance=1, description=label(i + 1))

        yield done


def _header(plan: BenchPlan, settings: Settings, machine: dict[str, object]) -> str:
    ring = " -> ".join(
        f"{b.device} (cpu {','.join(map(str, b.cpus))})" if b.cpus else b.device
        for b in plan.bindings
    )
    return (
        f"# {plan.backend}, {plan.ranks} ranks in ring order: {ring}; "
        f"level {', '.join(plan.levels)}\n"
        f"# {settings.warmup} warm-up + {settings.iters} timed iterations, median of "
        f"{settings.repeats} repeat(s); time = slowest rank's mean; machine {machine['host']}: "
        f"{machine['cores']} core(s)"
    )


def _model_note(plan: BenchPlan, model: CostModel, source: Path | None) -> str:
    alg = prediction_algorithm(plan.backend) or "the model's fastest"
    cal = model.calibration
    if cal is None:
        return f"# model: {alg}; no calibration: the fabric's figures (see --calibrate)"
    fits = [
        f"{lv} alpha {cal.levels[lv].alpha_us:.1f} us, B {cal.levels[lv].bandwidth_gbps:.3f} GB/s"
        for lv in plan.levels
        if lv in cal.levels
    ]
    if not fits:
        _note(f"{source} has no figures for {', '.join(plan.levels)}; the fabric's are used")
    return f"# model: {alg}; calibration {source}: {'; '.join(fits) or 'not for this level'}"


def _dump(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, allow_nan=False) + "\n")


def _calibrate(
    plan: BenchPlan,
    sizes: Sequence[int],
    settings: Settings,
    model: CostModel,
    out: Path,
    as_json: bool,
    machine: dict[str, object],
) -> None:
    steps = calibration_steps(plan, sizes)  # checks before any process starts
    with _progress(steps, as_json) as on_step:
        fit: RingFit = calibrate(plan, sizes, settings, model, on_step)
    level = plan.levels[0]
    source = (
        f"accelnet bench comm --calibrate: {plan.backend} ring allreduce, {plan.ranks} ranks "
        f"({', '.join(plan.comm.ranks)}) on {machine['host']} ({machine['cores']} cores), "
        f"{format_size(min(sizes))}..{format_size(max(sizes))}"
    )
    cal = fit.calibration(level, source)
    try:
        cal.save(out)
    except OSError as e:
        raise BenchInputError(f"--out: cannot write {out}: {e.strerror or e}") from None
    if as_json:
        _dump(
            {
                "schema": "accelnet.comm-bench-calibration/v1",
                "machine": machine,
                "backend": plan.backend,
                "devices": list(plan.comm.ranks),
                "level": level,
                "fit": fit.to_json(),
                "calibration": cal.to_json(),
                "out": str(out),
            }
        )
        return
    console = _out()
    console.print(Text(_header(plan, settings, machine)))
    console.print(fit_table(fit, f"ring allreduce, fitted to the model's formula ({level})"))
    console.print(
        Text(
            f"{level}: alpha {fit.alpha_us:.2f} us per step, B {fit.bandwidth_gbps:.3f} GB/s "
            f"per rank each way (launch {fit.launch_us:g} us kept); worst factor "
            f"{fit.worst_factor:.2f}\nwrote {out}"
        )
    )


@bench_app.command("comm")
def comm(
    devices: Annotated[
        str | None,
        typer.Option(help="comma list of devices (default: this machine's GPUs, else its cores)"),
    ] = None,
    sizes: Annotated[
        str, typer.Option(help="bytes: LO..HI stepped by --factor, or a comma list (1K,1M)")
    ] = DEFAULT_SIZES,
    factor: Annotated[int, typer.Option(help="multiplier between sizes of a range")] = 2,
    collectives: Annotated[
        str, typer.Option(help="comma list: allreduce, allgather")
    ] = "allreduce,allgather",
    warmup: Annotated[int, typer.Option(help="untimed calls per size (nccl-tests -w)")] = 5,
    iters: Annotated[int, typer.Option(help="timed calls per repeat (nccl-tests -n)")] = 20,
    repeats: Annotated[int, typer.Option(help="timed blocks per size; the median counts")] = 1,
    fabric: Annotated[
        str, typer.Option(help="'local' (discovered), a preset or a file naming this machine")
    ] = "local",
    calibration: Annotated[
        Path | None, typer.Option(help="a calibration file for the predictions")
    ] = None,
    do_calibrate: Annotated[
        bool,
        typer.Option("--calibrate", help="fit alpha and bandwidth (ring allreduce); write --out"),
    ] = False,
    out: Annotated[Path, typer.Option(help="where --calibrate writes")] = DEFAULT_OUT,
    pin: Annotated[bool, typer.Option(help="pin each CPU worker to its core")] = True,
    timeout: Annotated[
        float, typer.Option(help="give up when no rank reports for this many seconds")
    ] = 300.0,
    as_json: Annotated[
        bool, typer.Option("--json", help="a document (schema accelnet.comm-bench/v1)")
    ] = False,
) -> None:
    """Allreduce and allgather across worker processes, beside the model's prediction."""
    try:
        size_list = parse_sizes(sizes, factor)
        settings = Settings(warmup, iters, repeats, timeout)
        settings.check()
        if do_calibrate and calibration is not None:
            raise BenchInputError("--calibrate and --calibration: give one or the other")
        model = CostModel(calibration=_calibration(calibration))
        names = [c.strip() for c in collectives.split(",") if c.strip()]
        target, local = _fabrics(fabric)
        refs = parse_devices(devices) if devices is not None else None
        plan = plan_bench(target, refs, local, physical_cores(), model, pin)
        machine = machine_info()
        if do_calibrate:
            _calibrate(plan, size_list, settings, model, out, as_json, machine)
            return
        steps = make_steps(names, size_list, plan.ranks)
        with _progress(steps, as_json) as on_step:
            rows = benchmark(plan, steps, settings, model, on_step)
    except BenchInputError as e:
        _fail(e, 2)
    except BenchError as e:
        _fail(e, 1)
    except KeyboardInterrupt:
        _fail("interrupted; workers stopped", 130)
    if as_json:
        _dump(bench_json(plan, rows, settings, model, machine))
        return
    console = _out()
    console.print(Text(_header(plan, settings, machine)))
    console.print(Text(_model_note(plan, model, calibration)))
    for name in dict.fromkeys(r.collective for r in rows):
        console.print(rows_table([r for r in rows if r.collective == name], name))
    for line in summary_lines(rows):
        console.print(Text(line))
