"""``--placement`` with ``--frag-mix``, shared by ``plan`` and ``simulate``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated

import typer

from accelnet.sched.placement import PLACEMENTS, PlacementStrategy

PLACEMENT_HELP = f"placement strategy: {', '.join(PLACEMENTS)}"

FragMixOpt = Annotated[
    str | None,
    typer.Option(
        help="with frag-aware: the typical jobs it keeps room for, count:share:weight,... "
        "(e.g. 1:0.5:2,1:1:2,4:1:1)"
    ),
]


def placement_maker(
    placement: str | None, frag_mix: str | None
) -> Callable[[], str | PlacementStrategy | None]:
    """What makes the placement of each scheduler (a fresh strategy each: they keep state):
    the name, or frag-aware with its mix. ValueError naming ``--frag-mix`` for a bad mix
    or for a mix with another strategy."""
    if frag_mix is None:
        return lambda: placement
    if placement != "frag-aware":
        raise ValueError(f"--frag-mix is for --placement frag-aware, not {placement}")
    from accelnet.sched.packing import parse_mix  # noqa: PLC0415

    try:
        mix = parse_mix(frag_mix)
    except ValueError as exc:
        raise ValueError(f"--frag-mix: {exc}") from None
    return lambda: PLACEMENTS.create("frag-aware", mix=mix)
