"""``accelnet comm``: the communication model: collective estimates, ring orders, placement."""

from __future__ import annotations

import typer

comm_app = typer.Typer(
    help="The communication model: collective estimates, ring orders, placement.",
    no_args_is_help=True,
)
