"""What every command prints on stderr: a failure (then exit) or a note. Light on purpose
(typer and rich only): the client commands import it, and they must start fast."""

from __future__ import annotations

import os
import sys
from typing import NoReturn

import typer
from rich.console import Console
from rich.text import Text

PIPED_WIDTH = 10_000
"""Columns of a console whose output is piped: no row of a table wraps (one line per row,
for grep and awk), where a terminal's would fold a long cell into many lines."""


def out_console() -> Console:
    """A console on stdout for results: a terminal's width in a terminal; piped (and no
    ``COLUMNS`` set), :data:`PIPED_WIDTH`, so tables keep one line per row."""
    if sys.stdout.isatty() or "COLUMNS" in os.environ:
        return Console()
    return Console(width=PIPED_WIDTH)


def err_console() -> Console:
    """A console on stderr."""
    return Console(stderr=True)


def fail(message: object, code: int) -> NoReturn:
    """Print ``message`` in red on stderr (never read as markup) and exit with ``code``."""
    err_console().print(Text(str(message), style="red"))
    raise typer.Exit(code)


def note(message: str) -> None:
    """A yellow note on stderr."""
    err_console().print(Text.assemble(("note: ", "yellow"), message))


EXTRA_OF: dict[str, str] = {
    "fastapi": "server", "starlette": "server", "uvicorn": "server", "httptools": "server",
    "prometheus_client": "server", "scipy": "sim", "matplotlib": "sim", "sklearn": "demo",
    "polars": "demo", "PIL": "demo", "threadpoolctl": "demo", "ray": "ray", "torch": "torch",
    "pynvml": "nvidia",
}  # fmt: skip
"""The extra (``pip install 'accelnet[<extra>]'``) that brings each optional module."""


def missing_extra(exc: ModuleNotFoundError) -> str | None:
    """What to install for a command that needs a module of an extra this installation
    lacks (None: not one of the extras' modules)."""
    top = (exc.name or "").split(".")[0]
    extra = EXTRA_OF.get(top)
    if extra is None:
        return None
    return (f"this command needs the {extra!r} extra ({top} is not installed): "
            f"pip install 'accelnet[{extra}]'")  # fmt: skip
