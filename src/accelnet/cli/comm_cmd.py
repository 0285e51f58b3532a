"""``accelnet comm``: the communication model: collective estimates, ring orders, placement."""

from __future__ import annotations

import json
import sys
from typing import Annotated, Any

import typer
from rich.table import Table

from accelnet.cli.fabric_cmd import CpuOpt, JsonOpt, load_or_exit
from accelnet.cli.output import fail, out_console
from accelnet.comm import CommError, Communicator, CostModel
from accelnet.comm.algorithms import ALGORITHMS, Collective
from accelnet.comm.ring import ring_order, ring_score
from accelnet.commbench.errors import BenchInputError
from accelnet.commbench.sizes import format_size, parse_size, parse_sizes
from accelnet.fabric import Fabric
from accelnet.sched.commcompare import compare_placements

comm_app = typer.Typer(
    help="The communication model: collective estimates, ring orders, placement.",
    no_args_is_help=True,
)

FabricArg = Annotated[str, typer.Argument(help="preset, generator, fabric file or 'local'")]
DevicesOpt = Annotated[
    str, typer.Option("--devices", help="comma-separated devices (host/gpu0,...) or 'all'")
]


def _dump(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, allow_nan=False) + "\n")


def _comm(fabric: Fabric, devices: str) -> Communicator:
    refs = list(fabric.devices) if devices == "all" else [d.strip() for d in devices.split(",")]
    try:
        return Communicator(fabric, [r for r in refs if r])
    except CommError as exc:
        fail(f"--devices: {exc}", 2)


@comm_app.command("estimate")
def estimate(
    spec: FabricArg,
    devices: DevicesOpt,
    collective: Annotated[str, typer.Option(help=", ".join(c.value for c in Collective))] = (
        "allreduce"
    ),
    sizes: Annotated[str, typer.Option(help="1K..1G (factor --factor) or a list")] = "1K..1G",
    factor: Annotated[int, typer.Option(help="step between sizes of a range")] = 4,
    ring: Annotated[bool, typer.Option(help="put the ranks in the best ring order first")] = True,
    as_json: JsonOpt = False,
    cpu_devices: CpuOpt = "per-core",
) -> None:
    """Predicted time, algbw and busbw per message size, every algorithm side by side (the
    fastest, as NCCL's tuner would pick it, first)."""
    fabric = load_or_exit(spec, cpu_devices)
    comm = _comm(fabric, devices)
    if collective not in {c.value for c in Collective}:
        known = ", ".join(c.value for c in Collective)
        fail(f"--collective: unknown {collective!r}; known: {known}", 2)
    coll = Collective(collective)
    try:
        byte_sizes = parse_sizes(sizes, factor)
    except BenchInputError as exc:
        fail(exc, 2)
    model = CostModel()
    if ring:
        comm = ring_order(comm, model)
    rows = [(n, model.estimates(comm, coll, n)) for n in byte_sizes]
    if as_json:
        _dump({
            "schema": "accelnet.comm-estimate/v1",
            "fabric": fabric.name,
            "ranks": list(comm.ranks),
            "collective": coll.value,
            "rows": [{"bytes": n, "best": ests[0].algorithm.value,
                      "estimates": [e.to_json() for e in ests]} for n, ests in rows],
        })  # fmt: skip
        return
    algs = ALGORITHMS[coll]
    table = Table(title=f"{coll.value} on {comm.size} ranks of {fabric.name}")
    table.add_column("size", justify="right")
    table.add_column("best")
    table.add_column("time us", justify="right")
    table.add_column("algbw GB/s", justify="right")
    table.add_column("busbw GB/s", justify="right")
    for alg in algs:
        table.add_column(f"{alg.value} us", justify="right")
    for n, ests in rows:
        best = ests[0]
        by_alg = {e.algorithm: e for e in ests}
        table.add_row(
            format_size(n), best.algorithm.value, f"{best.time_s * 1e6:,.1f}",
            f"{best.algbw_gbps:,.2f}", f"{best.busbw_gbps:,.2f}",
            *(f"{by_alg[a].time_s * 1e6:,.1f}" if a in by_alg else "-" for a in algs),
        )  # fmt: skip
    out_console().print(table)
    out_console().print(f"ranks in ring order: {', '.join(comm.ranks)}")


@comm_app.command("ring")
def ring_cmd(
    spec: FabricArg,
    devices: DevicesOpt,
    as_json: JsonOpt = False,
    cpu_devices: CpuOpt = "per-core",
) -> None:
    """The ring order that maximises the ring's bottleneck bandwidth, against the given order."""
    fabric = load_or_exit(spec, cpu_devices)
    comm = _comm(fabric, devices)
    best = ring_order(comm)
    given, found = ring_score(comm, range(comm.size)), ring_score(best, range(best.size))
    hops = [best.route(i, (i + 1) % best.size) for i in range(best.size)] if best.size > 1 else []
    if as_json:
        _dump({
            "schema": "accelnet.comm-ring/v1",
            "fabric": fabric.name,
            "given": list(comm.ranks),
            "ring": list(best.ranks),
            "given_bottleneck_gbps": given[0] / 1e9 if comm.size > 1 else None,
            "ring_bottleneck_gbps": found[0] / 1e9 if best.size > 1 else None,
            "hops": [{"from": r.src, "to": r.dst, "level": r.level.name,
                      "bandwidth_gbps": r.bandwidth_gbps} for r in hops],
        })  # fmt: skip
        return
    console = out_console()
    table = Table(title=f"ring over {best.size} devices of {fabric.name}")
    for col in ("from", "to", "level", "GB/s"):
        table.add_column(col)
    for r in hops:
        table.add_row(r.src, r.dst, r.label, f"{r.bandwidth_gbps:g}")
    console.print(table)
    if best.size > 1:
        console.print(
            f"bottleneck (max-min share of the slowest hop): {found[0] / 1e9:,.2f} GB/s; "
            f"in the given order: {given[0] / 1e9:,.2f} GB/s"
        )


@comm_app.command("place")
def place(
    spec: FabricArg,
    accelerators: Annotated[str, typer.Option(help="the gang: any:4, H100:8, ...")] = "any:4",
    nbytes: Annotated[str, typer.Option("--bytes", help="allreduce per step")] = "256M",
    busy: Annotated[int, typer.Option(help="devices held already (drawn at random)")] = 0,
    trials: Annotated[int, typer.Option(help="draws of the oblivious placement")] = 101,
    seed: Annotated[int, typer.Option(help="seed of the draws")] = 0,
    as_json: JsonOpt = False,
    cpu_devices: CpuOpt = "per-core",
) -> None:
    """Communication-aware placement of an allreduce-heavy gang against best fit, first fit
    and a topology-oblivious scheduler (labels only; the median of seeded draws)."""
    fabric = load_or_exit(spec, cpu_devices)
    try:
        size = parse_size(nbytes, "--bytes")
        placed = compare_placements(fabric, accelerators, size, busy, trials, seed)
    except BenchInputError as exc:
        fail(exc, 2)
    except ValueError as exc:  # a bad gang (pydantic) or one that cannot be placed
        fail(f"--accelerators {accelerators!r} / --busy {busy}: {exc}", 2)
    aware = placed[0].busbw_gbps
    if as_json:
        _dump({
            "schema": "accelnet.comm-place/v1", "fabric": fabric.name,
            "accelerators": accelerators, "bytes": size, "busy": busy, "seed": seed,
            "placements": [p.to_json() | {"vs_comm_aware": aware / p.busbw_gbps}
                           for p in placed],
        })  # fmt: skip
        return
    table = Table(title=f"{accelerators}, allreduce of {format_size(size)} per step, "
                  f"on {fabric.name} ({busy} devices busy)")  # fmt: skip
    for col in ("placement", "devices", "algorithm", "allreduce ms", "busbw GB/s", "comm-aware x"):
        table.add_column(col)
    for p in placed:
        table.add_row(p.strategy, ", ".join(p.devices), p.algorithm, f"{p.time_s * 1e3:,.3f}",
                      f"{p.busbw_gbps:,.1f}", f"{aware / p.busbw_gbps:,.2f}")  # fmt: skip
    out_console().print(table)
