"""``accelnet fabric``: show, route, validate, presets, models, schema."""

from __future__ import annotations

import json
import sys
from typing import Annotated, Any

import typer
from rich.table import Table
from rich.text import Text

from accelnet.cli.output import fail, note, out_console
from accelnet.cli.render import route_detail, show_fabric
from accelnet.fabric import (
    Fabric,
    FabricNotFoundError,
    FabricSpecError,
    NoRouteError,
    Precision,
    device_models,
    load_fabric,
    preset_names,
)
from accelnet.fabric.build import load_fabric_file
from accelnet.fabric.discovery import CpuMode, discover
from accelnet.fabric.errors import short_repr
from accelnet.fabric.export import fabric_to_json, model_to_json
from accelnet.fabric.presets import FAT_TREE_HELP, POD_HELP, preset_spec
from accelnet.fabric.spec import fabric_json_schema

MAX_CPU_DEVICES = 4096

fabric_app = typer.Typer(help="The physical network: show, route, validate.", no_args_is_help=True)

SpecArg = Annotated[
    str | None,
    typer.Argument(help="preset name, generator (fat-tree:hosts=N), file, or 'local'"),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="stable JSON for scripts (docs/json.md)")]
CpuOpt = Annotated[
    str, typer.Option("--cpu-devices", help="for 'local': per-core, per-socket, none or N")
]


def _cpu_mode(value: str) -> CpuMode:
    if value in ("per-core", "per-socket", "none"):
        return value  # type: ignore[return-value]
    if value.isdigit() and 1 <= int(value) <= MAX_CPU_DEVICES:
        return int(value)
    fail(
        f"--cpu-devices: {value!r} is not per-core, per-socket, none or a number "
        f"from 1 to {MAX_CPU_DEVICES}",
        2,
    )


def load_or_exit(ref: str | None, cpu: str) -> Fabric:
    """The fabric ``ref`` names; prints the error and exits (1 invalid, 2 unknown) if none."""
    try:
        if ref is None or ref == "local":
            found = discover(_cpu_mode(cpu))
            for text in found.notes:
                note(text)
            return found.fabric
        return load_fabric(ref)
    except FabricSpecError as exc:
        fail(exc, 1)
    except (FabricNotFoundError, KeyError) as exc:
        fail(exc.args[0] if exc.args else exc, 2)


def _dump(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, allow_nan=False) + "\n")


@fabric_app.command("show")
def show(
    spec: SpecArg = None,
    as_json: JsonOpt = False,
    hosts: Annotated[int, typer.Option(help="hosts to draw (0 for all)")] = 8,
    cpu_devices: CpuOpt = "per-core",
) -> None:
    """Hosts, devices and a topology matrix per host (default: this machine)."""
    fabric = load_or_exit(spec, cpu_devices)
    if as_json:
        _dump(fabric_to_json(fabric))
        return
    show_fabric(out_console(), fabric, hosts)


@fabric_app.command("route")
def route(
    spec: Annotated[str, typer.Argument(help="preset, generator, file, or 'local'")],
    dev_a: Annotated[str, typer.Argument(help="device id (host/gpu0) or unique name (gpu0)")],
    dev_b: Annotated[str, typer.Argument(help="the other device")],
    as_json: JsonOpt = False,
    cpu_devices: CpuOpt = "per-core",
) -> None:
    """The route between two devices: level, bottleneck bandwidth, latency, hops."""
    fabric = load_or_exit(spec, cpu_devices)
    try:
        r = fabric.route(dev_a, dev_b)
    except KeyError as exc:
        fail(exc.args[0], 2)
    except NoRouteError as exc:
        fail(exc, 1)
    if as_json:
        _dump(r.to_json())
        return
    out_console().print(route_detail(r))


@fabric_app.command("validate")
def validate(
    file: Annotated[str, typer.Argument(help="a YAML or JSON fabric file")],
    as_json: JsonOpt = False,
) -> None:
    """Check a fabric file; exit 1 and name every problem (file:line: key = value: why)."""
    try:
        fabric = load_fabric_file(file)
    except FabricSpecError as exc:
        if as_json:
            _dump(
                {
                    "schema": "accelnet.validation/v1",
                    "valid": False,
                    "file": file,
                    "issues": [
                        {
                            "path": i.path,
                            "line": i.line,
                            "value": short_repr(i.value),
                            "message": i.message,
                        }
                        for i in exc.issues
                    ],
                }
            )
            raise typer.Exit(1) from None
        fail(exc, 1)
    summary = {
        "hosts": len(fabric.hosts),
        "devices": len(fabric.devices),
        "switches": len(fabric.switches),
        "external_links": len(fabric.external_links),
    }
    if as_json:
        _dump({"schema": "accelnet.validation/v1", "valid": True, "file": file, **summary})
        return
    counts = ", ".join(f"{v} {k.replace('_', ' ')}" for k, v in summary.items())
    out_console().print(
        Text.assemble(("ok ", "green"), f"{file}: fabric {fabric.name!r}, {counts}")
    )


@fabric_app.command("presets")
def presets() -> None:
    """The preset fabrics and the generator."""
    table = Table("preset", "description", box=None)
    for name in preset_names():
        table.add_row(name, preset_spec(name).get("description", ""))
    table.add_row("fat-tree:...", FAT_TREE_HELP)
    table.add_row("dgx-h100:...", POD_HELP)
    out_console().print(table)


@fabric_app.command("models")
def models(as_json: JsonOpt = False) -> None:
    """The device-model catalog with its published figures."""
    if as_json:
        _dump([model_to_json(m) for m in device_models()])
        return
    table = Table(
        "model",
        "kind",
        "memory GB",
        "mem GB/s",
        "bf16/fp16 TF",
        "fp32 TF",
        "W idle-max",
        "accel link",
        box=None,
    )
    for m in device_models():
        half = max(m.tflops(Precision.BF16), m.tflops(Precision.FP16))
        link = f"{m.nvlink_links}x {m.nvlink_type}" if m.nvlink_type else "-"
        table.add_row(
            m.name,
            m.kind.value,
            f"{m.memory_gb:g}",
            f"{m.mem_bw_gbps:g}",
            f"{half:g}",
            f"{m.tflops(Precision.FP32):g}",
            f"{m.idle_w:g}-{m.max_w:g}",
            link,
        )
    out_console().print(table)


@fabric_app.command("schema")
def schema() -> None:
    """JSON schema of fabric files (for editors and CI checks)."""
    _dump(fabric_json_schema())
