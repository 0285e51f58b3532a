"""``accelnet demo``: a guided tour of what accelnet runs today, on this machine.

It discovers this machine, then loads the mixed-lab preset and shows how accelnet sees a
heterogeneous network: the topology matrix, routes of every locality level with their
bandwidth, latency and loss, and the placement domains a scheduler keeps jobs inside.
"""

from __future__ import annotations

from typing import Annotated

import typer
from rich.console import Console
from rich.rule import Rule
from rich.table import Table

from accelnet.cli.fabric_cmd import fail, note
from accelnet.cli.render import route_table, show_fabric
from accelnet.fabric import DomainLevel, load_preset
from accelnet.fabric.discovery import discover

_PAIRS = (
    ("h100box/gpu0", "h100box/gpu0"),
    ("h100box/gpu0", "h100box/gpu5"),
    ("l4box/gpu0", "l4box/gpu1"),
    ("t4box/gpu0", "t4box/gpu1"),
    ("l4box/gpu0", "l4box/gpu3"),
    ("h100box/gpu0", "l4box/gpu0"),
    ("h100box/gpu0", "t4box/gpu0"),
    ("t4box/gpu0", "jetson0/gpu0"),
)


def demo(
    preset: Annotated[str, typer.Option(help="fabric to tour after this machine")] = "mixed-lab",
) -> None:
    """Discover this machine, then tour a heterogeneous lab fabric: topology, routes, domains."""
    console = Console()
    console.print(Rule("1. this machine (discovered: psutil, and NVML when a GPU is present)"))
    found = discover("per-core")
    for text in found.notes:
        note(text)
    show_fabric(console, found.fabric)

    console.print(Rule(f"2. the {preset} fabric"))
    try:
        fabric = load_preset(preset)
    except (KeyError, ValueError) as exc:
        fail(exc.args[0] if exc.args else exc, 2)
    show_fabric(console, fabric, max_hosts=3)

    console.print(Rule("3. routes: every locality level, bottleneck bandwidth, latency, loss"))
    routes = []
    for a, b in _PAIRS:
        if a in fabric.devices and b in fabric.devices:
            routes.append(fabric.route(a, b))
    if not routes:
        devices = list(fabric.devices)
        routes = [fabric.route(devices[0], d) for d in devices[: min(8, len(devices))]]
    console.print(route_table(routes))

    console.print(Rule("4. placement domains (a scheduler keeps a job inside the tightest)"))
    table = Table("level", "domains", "largest (devices)", box=None)
    for level in DomainLevel:
        members = fabric.domains.members(level)
        biggest = max(members.items(), key=lambda kv: len(kv[1]))
        table.add_row(level.value, str(len(members)), f"{biggest[0]} ({len(biggest[1])})")
    console.print(table)
    console.print(
        "\nNext: [bold]accelnet fabric show dgx-h100[/], "
        "[bold]accelnet fabric route nvl72 tray00/gpu0 tray17/gpu3[/], "
        "[bold]accelnet fabric presets[/]."
    )
