"""``accelnet bench``: real measurements on this machine's devices."""

from __future__ import annotations

import typer

bench_app = typer.Typer(help="Real measurements on this machine's devices.", no_args_is_help=True)
