"""``accelnet`` command: the root typer app and its sub-commands."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
from typing import Annotated

import typer

from accelnet.cli import client_cmd
from accelnet.cli.bench_cmd import bench_app
from accelnet.cli.comm_cmd import comm_app
from accelnet.cli.demo import demo
from accelnet.cli.device_cmd import device_app
from accelnet.cli.fabric_cmd import fabric_app
from accelnet.cli.job_cmd import job_app
from accelnet.cli.plan_cmd import plan
from accelnet.cli.run_cmd import run
from accelnet.cli.serve_cmd import serve
from accelnet.cli.service_cmd import service_app
from accelnet.cli.simulate_cmd import simulate
from accelnet.cli.token_cmd import token_app

app = typer.Typer(
    name="accelnet",
    help="Run work on a network of heterogeneous accelerators.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _print_version(wanted: bool) -> None:
    if not wanted:
        return
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
            help="print accelnet's version and exit",
        ),
    ] = False,
) -> None:
    """Run work on a network of heterogeneous accelerators."""


app.add_typer(fabric_app, name="fabric")
app.add_typer(job_app, name="job")
app.add_typer(comm_app, name="comm")
app.add_typer(bench_app, name="bench")
app.add_typer(device_app, name="device")
app.add_typer(token_app, name="token")
app.add_typer(service_app, name="service")
app.command("demo")(demo)
app.command("plan")(plan)
app.command("run")(run)
app.command("simulate")(simulate)
app.command("serve")(serve)
app.command("submit")(client_cmd.submit)  # the client commands: over accelnet.Client
app.command("status")(client_cmd.status)
app.command("logs")(client_cmd.logs)
app.command("cancel")(client_cmd.cancel)
app.command("devices")(client_cmd.devices)
app.command("top")(client_cmd.top)


def main() -> None:
    """Console-script entry point."""
    app()
