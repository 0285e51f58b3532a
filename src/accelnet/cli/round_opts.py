"""``--min-reallocation-s``, shared by ``serve`` and ``simulate``."""

from __future__ import annotations

from typing import Annotated

import typer

ReallocationOpt = Annotated[
    float,
    typer.Option(
        "--min-reallocation-s",
        help="round policies re-solve their allocation only when the jobs or devices "
        "changed and at most once per this many s (Gavel: 1920); 0: at every round and "
        "change",
    ),
]
