"""``accelnet`` command: the root typer app and its sub-commands."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.text import Text

from accelnet.cli.lazy import LazyCommand, LazyGroup
from accelnet.cli.output import err_console, missing_extra

_C = "accelnet.cli."
COMMANDS: dict[str, LazyCommand] = {
    "demo": LazyCommand(_C + "demo:demo", "Run inference, rendering, big-data and video jobs "
                        "on this machine's devices (or a Ray cluster's)."),
    "plan": LazyCommand(_C + "plan_cmd:plan", "Plan jobs on a fabric without running them: "
                        "placements and reasons to wait."),
    "run": LazyCommand(_C + "run_cmd:run", "Run job files to completion on this machine (or an "
                       "emulated fabric, or a Ray cluster) and report."),
    "simulate": LazyCommand(_C + "simulate_cmd:simulate", "Replay a trace on a fabric with "
                            "the live scheduler, in virtual time, and report."),
    "serve": LazyCommand(_C + "serve_cmd:serve", "Serve the REST API (docs/api.md) and run the "
                         "controller, until Ctrl-C or SIGTERM."),
    "submit": LazyCommand(_C + "client_cmd:submit", "Submit the jobs of job files, all or "
                          "none (checked here first, then by the server)."),
    "status": LazyCommand(_C + "client_cmd:status", "One job (its fields and event log), or "
                          "the running services and the latest jobs."),
    "logs": LazyCommand(_C + "client_cmd:logs", "A job's output (stdout of rank 0 of its "
                        "latest attempt, unless told otherwise)."),
    "cancel": LazyCommand(_C + "client_cmd:cancel", "Cancel jobs: queued ones at once, running "
                          "ones once their tasks stop."),
    "devices": LazyCommand(_C + "client_cmd:devices", "The server's devices, over its API: "
                           "state, health, readings, jobs."),
    "top": LazyCommand(_C + "client_cmd:top", "A live view of the devices and the queue (why "
                       "each job waits); Ctrl-C ends it."),
    "fabric": LazyCommand(_C + "fabric_cmd:fabric_app", "The physical network: show, route, "
                          "validate."),
    "job": LazyCommand(_C + "job_cmd:job_app", "Job files: validate, schema."),
    "comm": LazyCommand(_C + "comm_cmd:comm_app", "The communication model: collective "
                        "estimates, ring orders, placement."),
    "bench": LazyCommand(_C + "bench_cmd:bench_app", "Real measurements on this machine's "
                         "devices."),
    "device": LazyCommand(_C + "device_cmd:device_app", "Devices: list with health; history; "
                          "drain, undrain, reset, probe."),
    "token": LazyCommand(_C + "token_cmd:token_app", "API tokens: create, list, revoke."),
    "service": LazyCommand(_C + "service_cmd:service_app", "Services: replicas of a model "
                           "behind one address, scaled with their load."),
}  # fmt: skip
"""Every command, in the order ``--help`` lists them, imported only when it runs."""


class _Commands(LazyGroup):
    lazy = COMMANDS


app = typer.Typer(
    name="accelnet",
    help="Run work on a network of heterogeneous accelerators.",
    no_args_is_help=True,
    cls=_Commands,
    add_completion=True,  # --install-completion, --show-completion (bash, zsh, fish)
    pretty_exceptions_enable=False,
)


def _print_version(wanted: bool) -> None:
    if not wanted:
        return
    from importlib.metadata import PackageNotFoundError, version  # noqa: PLC0415 (start-up)

    try:
        found = version("accelnet")
    except PackageNotFoundError:  # run from a source tree that was never installed
        found = "unknown (not installed)"
    typer.echo(f"accelnet {found}")
    raise typer.Exit()


@app.callback()
def _root(
    _version: Annotated[
        bool,
        typer.Option(
            "--version",
            callback=_print_version,
            is_eager=True,
            metavar="",
            help="print accelnet's version and exit",
        ),
    ] = False,
) -> None:
    """Run work on a network of heterogeneous accelerators."""


def main() -> None:
    """Console-script entry point: a command that needs an extra this installation lacks
    says which to install (exit 1), not a traceback."""
    try:
        app()
    except ModuleNotFoundError as exc:
        hint = missing_extra(exc)
        if hint is None:
            raise
        err_console().print(Text(hint, style="red"))
        raise SystemExit(1) from None
