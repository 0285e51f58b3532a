"""Rich renderings of fabrics and routes, shared by ``fabric show``, ``route`` and ``demo``."""

from __future__ import annotations

from collections import Counter

from rich.console import Console, Group
from rich.table import Table
from rich.text import Text
from rich.tree import Tree

from accelnet.fabric import Fabric, Route
from accelnet.fabric.export import topology_matrix
from accelnet.fabric.model import Host, SwitchKind

LEGEND = (
    "X = self, NV# = # NVLinks (through NVSwitch or direct), XL# = other accelerator links, "
    "PIX = one PCIe switch, PXB = several PCIe switches, PHB = through a CPU host bridge, "
    "SYS = across CPU sockets, NET = across the network, WIFI = a radio link on the way"
)
JOB_STATE_STYLE = {"succeeded": "green", "failed": "red", "cancelled": "red", "running": "cyan"}
_STYLE = {"X": "dim", "PIX": "green", "PXB": "green", "PHB": "yellow", "SYS": "red"}


def _n(count: int, word: str) -> str:
    return f"{count} {word}{'s' * (count != 1)}"


def _models(fabric: Fabric, ids: tuple[str, ...] | None = None) -> str:
    counts = (
        fabric.model_counts() if ids is None else Counter(fabric.devices[d].model.name for d in ids)
    )
    return ", ".join(f"{n} x {m}" for m, n in counts.most_common())


def _host_line(host: Host) -> str:
    kinds = Counter(s.kind for s in host.layout.switches)
    parts = [f"{host.layout.sockets} socket{'s' * (host.layout.sockets > 1)}"]
    if host.cpus is not None:
        parts.append(f"{host.cpus:g} CPUs")
    if host.memory_gb is not None:
        parts.append(f"{round(host.memory_gb, 1):g} GB RAM")
    if kinds[SwitchKind.PCIE_SWITCH]:
        parts.append(f"{kinds[SwitchKind.PCIE_SWITCH]} PCIe switches")
    if kinds[SwitchKind.NVSWITCH]:
        parts.append("NVSwitch")
    if kinds[SwitchKind.NIC]:
        n = kinds[SwitchKind.NIC]
        parts.append(f"{n} NIC{'s' * (n > 1)}")
    return ", ".join(parts)


def fabric_tree(fabric: Fabric, max_hosts: int) -> Tree:
    """Hosts and their devices (the first ``max_hosts`` hosts; 0 for all)."""
    tree = Tree(
        Text.assemble(
            (fabric.name, "bold"),
            f"  {_n(len(fabric.hosts), 'host')}, {_n(len(fabric.devices), 'device')}: "
            f"{_models(fabric)}",
        )
    )
    hosts = fabric.hosts if max_hosts <= 0 else fabric.hosts[:max_hosts]
    for h in hosts:
        node = tree.add(Text.assemble((h.name, "bold cyan"), f"  {_host_line(h)}"))
        for d in (fabric.devices[i] for i in h.device_ids):
            extra = f"  {d.detail}" if d.detail else ""
            node.add(Text(f"{d.name}  {d.model.name}  {d.memory_gb:g} GB  NUMA {d.numa}{extra}"))
    if len(hosts) < len(fabric.hosts):
        tree.add(Text(f"... {len(fabric.hosts) - len(hosts)} more hosts (--hosts 0 for all)"))
    if fabric.switches:
        net = tree.add(Text("network", style="bold magenta"))
        kinds = Counter(s.kind.value for s in fabric.switches.values())
        net.add(", ".join(f"{n} {k}" for k, n in kinds.items()) + " switches")
        media = Counter(lk.medium.value for lk in fabric.external_links)
        net.add(", ".join(f"{n} {m}" for m, n in media.items()) + " links")
    return tree


def matrix_table(fabric: Fabric, host: str) -> Table:
    """The ``nvidia-smi topo -m``-style matrix of one host, with a NUMA column."""
    names, rows = topology_matrix(fabric, host)
    table = Table(title=f"topology of {host}", box=None, pad_edge=False)
    table.add_column("")
    for n in names:
        table.add_column(n, justify="center")
    table.add_column("NUMA", justify="right")
    h = fabric.host(host)
    numa = {d.name: str(d.numa) for d in h.layout.devices}
    numa.update({s.name: str(s.numa) if s.numa is not None else "-" for s in h.layout.switches})
    for name, row in zip(names, rows, strict=True):
        cells = [
            Text(c, style=_STYLE.get(c, "bold green" if c.startswith("NV") else "")) for c in row
        ]
        table.add_row(Text(name, style="bold"), *cells, Text(numa.get(name, "-")))
    return table


def print_wide(console: Console, table: Table) -> None:
    """Print ``table`` at its natural width, wider than the terminal if need be (like
    ``nvidia-smi topo -m``), instead of squeezing cells to unreadable stubs."""
    natural = console.measure(table, options=console.options.update_width(10_000)).maximum
    if natural <= console.width:
        console.print(table)
        return
    wide = Console(file=console.file, width=natural)
    wide.print(table, crop=False)


def show_fabric(console: Console, fabric: Fabric, max_hosts: int = 8) -> None:
    """Tree, then one matrix per distinct host layout among the shown hosts."""
    console.print(fabric_tree(fabric, max_hosts))
    shown: dict[int, str] = {}
    hosts = fabric.hosts if max_hosts <= 0 else fabric.hosts[:max_hosts]
    for h in hosts:
        if h.layout_key in shown:
            continue
        shown[h.layout_key] = h.name
        same = [x.name for x in fabric.hosts if x.layout_key == h.layout_key and x is not h]
        console.print()
        print_wide(console, matrix_table(fabric, h.name))
        if same:
            more = f", ... ({len(same)} hosts)" if len(same) > 3 else ""
            console.print(Text(f"same layout: {', '.join(same[:3])}{more}", style="dim"))
    console.print(Text(LEGEND, style="dim"))


def route_table(routes: list[Route]) -> Table:
    """Routes side by side: level, label, bandwidth, latency, loss, path."""
    table = Table(box=None)
    for col in ("from", "to", "level", "label"):
        table.add_column(col, no_wrap=True)
    for col in ("GB/s each way", "latency us", "loss", "hops"):
        table.add_column(col, justify="right")
    for r in routes:
        loss = f"{r.loss_rate:.2%}" if r.loss_rate else "0"
        cells = (r.src, r.dst, r.level.name, r.label, f"{r.bandwidth_gbps:g}",
                 f"{r.latency_us:.2f}", loss, str(r.hops))  # fmt: skip
        table.add_row(*(Text(c) for c in cells))
    return table


def route_detail(route: Route) -> Group:
    """One route: the summary line and every hop."""
    head = Text.assemble(
        (f"{route.src} -> {route.dst}", "bold"),
        f"  {route.level.name} ({route.label}), {route.bandwidth_gbps:g} GB/s each way "
        f"({route.bidirectional_gbps:g} both), {route.latency_us:.2f} us",
    )
    if route.loss_rate:
        head.append(f", loss {route.loss_rate:.2%}")
    hops = Table(box=None, show_header=True)
    for col in ("from", "to", "medium", "gen", "links", "GB/s", "us"):
        hops.add_column(col)
    for a, b, lk in zip(route.nodes[:-1], route.nodes[1:], route.links, strict=True):
        cells = (a, b, lk.medium.value, lk.type.generation, str(lk.type.count),
                 f"{lk.bandwidth_gbps:g}", f"{lk.latency_us:g}")  # fmt: skip
        hops.add_row(*(Text(c) for c in cells))
    return Group(head, hops)
