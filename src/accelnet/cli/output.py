"""What every command prints on stderr: a failure (then exit) or a note. Light on purpose
(typer and rich only): the client commands import it, and they must start fast."""

from __future__ import annotations

from typing import NoReturn

import typer
from rich.console import Console
from rich.text import Text


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
