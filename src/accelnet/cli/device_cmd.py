"""``accelnet device``: list devices with their health; drain, undrain, reset, probe one.

accelnet has no daemon yet (the REST API comes later), so the commands reach a system
through what it leaves on disk:

- ``list`` discovers this machine (or reads ``--fabric``), samples its devices now and,
  with ``--db``, shows the states, health findings, remediation phases, running jobs, the
  jobs' energy and the power caps a controller recorded in that store;
- ``history`` shows the downsampled telemetry a controller kept in a store;
- ``drain``, ``undrain``, ``reset`` and ``probe`` with ``--db`` append a request to the
  store; a controller running on it (``accelnet run --db``, ``accelnet.local(db=...)``)
  carries it out within a second and answers, and a controller started later carries out
  the requests nobody answered. ``reset`` and ``probe`` without ``--db`` act directly on
  this machine, in a worker of their own (for a device no controller is using).
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
import uuid
from dataclasses import replace
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table
from rich.text import Text

from accelnet.cli.fabric_cmd import CpuOpt, load_or_exit
from accelnet.cli.output import fail, note, out_console
from accelnet.cli.render import print_wide
from accelnet.devices.health import Finding, Status, worst
from accelnet.devices.remediation import PolicyError, RemediationPolicy, load_policy
from accelnet.devices.reset import NvidiaSmiReset
from accelnet.devices.telemetry import DeviceSample
from accelnet.fabric import Fabric
from accelnet.fabric.model import DeviceKind
from accelnet.runtime.care.device_view import DeviceStatus, devices_json, from_store
from accelnet.runtime.clock import SystemClock
from accelnet.runtime.control.sqlite_store import SqliteStore
from accelnet.runtime.control.store import MemoryStore
from accelnet.runtime.local.backend import LocalBackend
from accelnet.runtime.sdk_devices import probe_directly

device_app = typer.Typer(
    help="Devices: list with health; history; drain, undrain, reset, probe.",
    no_args_is_help=True,
)

FabricOpt = Annotated[
    str | None, typer.Option(help="the fabric (preset or file) the store's controller runs")
]
DbOpt = Annotated[Path | None, typer.Option(help="the SQLite store of a running system")]
JsonOpt = Annotated[bool, typer.Option("--json", help="JSON for scripts")]
WaitOpt = Annotated[float, typer.Option(help="seconds to wait for a controller's answer")]
PolicyOpt = Annotated[Path | None, typer.Option(help="remediation policy file (YAML)")]
_HEALTH_STYLE = {"pass": "green", "warn": "yellow", "fail": "red"}


def _fabric(ref: str | None, cpu: str) -> tuple[Fabric, bool]:
    return load_or_exit(ref, cpu), ref is not None and ref != "local"


def _policy(path: Path | None) -> RemediationPolicy:
    if path is None:
        return RemediationPolicy()
    try:
        return load_policy(path)
    except PolicyError as exc:
        fail(exc, 1)


def _sample_now(fabric: Fabric, emulated: bool) -> dict[str, DeviceSample]:
    """Two samples of this machine's devices, 0.2 s apart (utilization is a difference)."""
    if emulated:
        return {}
    from accelnet.devices.samplers import HostSampler, NvmlSampler  # noqa: PLC0415
    from accelnet.devices.telemetry import Sampler, SamplerUnavailableError  # noqa: PLC0415

    devices = list(fabric.devices.values())
    samplers: list[Sampler] = []
    if any(d.kind is DeviceKind.CPU for d in devices):
        samplers.append(HostSampler(devices))
    if any(d.kind is DeviceKind.GPU for d in devices):
        try:
            samplers.append(NvmlSampler(devices))
        except SamplerUnavailableError as exc:
            note(f"GPUs not sampled: {exc}")
    out: dict[str, DeviceSample] = {}
    for rnd in range(2):
        for s in samplers:
            out.update((x.device, x) for x in s.sample(time.time()))
        if rnd == 0 and samplers:
            time.sleep(0.2)
    for s in samplers:
        s.close()
    return out


def _fmt(value: float | None, unit: str, scale: float = 1.0) -> str:
    return "-" if value is None else f"{value / scale:.0f}{unit}"


def _joules(value: float | None) -> str:
    if not value:
        return "-"
    return f"{value:.0f} J" if value < 1000 else f"{value / 1000:,.1f} kJ"


def _table(rows: list[DeviceStatus]) -> Table:
    table = Table()
    for col in ("device", "model", "state", "phase", "health", "util", "memory", "power",
                "temp", "energy", "jobs", "why"):  # fmt: skip
        table.add_column(col, overflow="fold")
    for r in rows:
        s = r.sample
        mem = "-"
        if s is not None and s.mem_used_bytes is not None:
            total = f"/{s.mem_total_bytes / 1e9:.1f}" if s.mem_total_bytes else ""
            mem = f"{s.mem_used_bytes / 1e9:.1f}{total} GB"
        why = r.findings[0].text() if r.findings else ""
        power = _fmt(s.power_w if s else None, " W")
        if r.power_cap_w is not None:
            power += f" (cap {r.power_cap_w:.0f} W)"
        table.add_row(
            r.device, r.model, r.state, r.phase,
            Text(r.health.value, _HEALTH_STYLE[r.health.value]),
            _fmt(s.utilization_pct if s else None, "%"), mem,
            power, _fmt(s.temperature_c if s else None, " C"),
            _joules(r.energy_j),
            ", ".join(r.jobs) or "-", Text(why[:100]),
        )  # fmt: skip
    return table


@device_app.command("list")
def list_devices(
    fabric: FabricOpt = None,
    db: DbOpt = None,
    as_json: JsonOpt = False,
    policy: PolicyOpt = None,
    cpu_devices: CpuOpt = "per-core",
) -> None:
    """This machine's devices, read here: state, remediation phase, health, utilization,
    memory, power, temperature, current jobs (states and jobs need --db: the store of a
    running system). A server's devices over its API: accelnet devices."""
    fab, emulated = _fabric(fabric, cpu_devices)
    samples = _sample_now(fab, emulated)
    if db is not None:
        if not db.exists():
            fail(f"--db {db}: no such file", 2)
        store = SqliteStore(db)
        try:
            rows = from_store(store, fab, samples)
            known = set(store.devices())
        finally:
            store.close()
        if known and not known & set(fab.devices):
            note(f"{db} holds devices of another fabric ({sorted(known)[0]}, ...): --fabric?")
    else:
        rows = from_store(MemoryStore(), fab, samples)
    rules = _policy(policy)
    rows = [_judged(r, rules) for r in rows]
    if as_json:
        sys.stdout.write(json.dumps(devices_json(rows, str(db or "sampled now")), indent=2) + "\n")
        return
    print_wide(out_console(), _table(rows))
    if db is None:
        note("no --db: states and jobs come from a store (accelnet run --db FILE)")
    if emulated:
        note("emulated devices are sampled by their running cluster (cluster.devices())")


def _judged(row: DeviceStatus, policy: RemediationPolicy) -> DeviceStatus:
    """Add the passive checks on the sample taken now to what the store says."""
    from accelnet.devices.health import check_sample  # noqa: PLC0415

    if row.sample is None:
        return row
    checks = policy.for_kind(row.kind).checks
    now = [f for f in check_sample(row.sample, checks) if f.check not in
           {g.check for g in row.findings}]  # fmt: skip
    found = (*row.findings, *now)
    return replace(row, health=worst(f.status for f in found), findings=found)


@device_app.command("history")
def history(
    db: Annotated[Path, typer.Option(help="the SQLite store of a system")],
    device: Annotated[str | None, typer.Argument(help="device id (default: all)")] = None,
    since: Annotated[
        float | None, typer.Option(help="only the last this many seconds", min=0.0)
    ] = None,
    width: Annotated[
        float | None, typer.Option(help="merge into buckets this many seconds wide", min=1.0)
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """The telemetry history a controller kept in a store (one-minute buckets: samples,
    mean and max utilization, memory, power, temperature, Xid codes, errors)."""
    from accelnet.devices.history import coarsen  # noqa: PLC0415

    if not db.exists():
        fail(f"--db {db}: no such file", 2)
    store = SqliteStore(db)
    try:
        buckets = store.history(device, None if since is None else time.time() - since)
        known = sorted(store.devices())
        if device is not None and not buckets and device not in known:
            known = sorted(set(known) | {b.device for b in store.history()})
    finally:
        store.close()
    if device is not None and device not in known and not buckets:
        fail(f"unknown device {device!r} in {db}; known: {', '.join(known[:8]) or 'none'}", 2)
    if width is not None:
        try:
            buckets = coarsen(buckets, width)
        except ValueError as exc:
            fail(exc, 2)
    if as_json:
        data = {"schema": "accelnet.device-history-list/v1", "db": str(db),
                "buckets": [b.to_json() for b in buckets]}  # fmt: skip
        sys.stdout.write(json.dumps(data, indent=2) + "\n")
        return
    table = Table()
    for col in ("device", "from", "s", "samples", "util mean/max", "memory", "power mean/max",
                "temp max", "events"):  # fmt: skip
        table.add_column(col, overflow="fold")

    def stat(b: Any, name: str, pick: str, unit: str, scale: float = 1.0) -> str:
        st = b.stats.get(name)
        return "-" if st is None else f"{getattr(st, pick) / scale:.0f}{unit}"

    for b in buckets:
        events = [*(f"xid {x}" for x in b.xid_events), *b.throttle_reasons, *b.errors]
        table.add_row(
            b.device, time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(b.start)),
            f"{b.width_s:g}", str(b.samples),
            f"{stat(b, 'utilization_pct', 'mean', '')}/{stat(b, 'utilization_pct', 'max', '%')}",
            stat(b, "mem_used_bytes", "mean", " MB", 1e6),
            f"{stat(b, 'power_w', 'mean', '')}/{stat(b, 'power_w', 'max', ' W')}",
            stat(b, "temperature_c", "max", " C"), Text(", ".join(events)[:80]),
        )  # fmt: skip
    print_wide(out_console(), table)
    if not buckets:
        note(f"no history in {db}" + (f" for {device}" if device else ""))


# ----- requests to a running system ---------------------------------------------------------


def _request(db: Path, op: str, device: str, wait: float, **args: Any) -> dict[str, Any]:
    """Append a request to the store; the answer of a controller within ``wait`` seconds,
    or ``{"answered": False}``."""
    if not db.exists():
        fail(f"--db {db}: no such file", 2)
    store = SqliteStore(db)
    try:
        known = store.devices()
        if known and device not in known:
            shown = ", ".join(sorted(known)[:8])
            fail(f"unknown device {device!r} in {db}; known: {shown}", 2)
        nonce = uuid.uuid4().hex
        before = max((e.seq for e in store.events_since(0, ("device:request",))), default=0)
        body = {"op": op, "device": device, "id": nonce, **{k: v for k, v in args.items()
                                                             if v is not None}}  # fmt: skip
        store.log(None, time.time(), "device:request", json.dumps(body))
        mine = [e.seq for e in store.events_since(before, ("device:request",))
                if json.loads(e.detail).get("id") == nonce]  # fmt: skip
        seq = mine[0]
        end = time.monotonic() + wait
        while True:
            for ev in store.events_since(seq, ("device:answer",)):
                data = json.loads(ev.detail)
                if data.get("request") == seq:
                    return {"answered": True, "request": seq, **data}
            if time.monotonic() >= end:
                return {"answered": False, "request": seq}
            time.sleep(0.1)
    finally:
        store.close()


def _report(result: dict[str, Any], as_json: bool, db: Path) -> None:
    if as_json:
        sys.stdout.write(json.dumps(result, indent=2) + "\n")
    elif not result["answered"]:
        note(f"request #{result['request']} is queued in {db}: no controller answered; one "
             "running on this store carries it out when it starts (accelnet run --db)")  # fmt: skip
    else:
        style = "green" if result["ok"] else "red"
        word = "ok: " if result["ok"] else "refused/failed: "
        out_console().print(Text(word + result["detail"], style))
        _print_findings(result.get("findings", []))
    if result["answered"] and not result["ok"]:
        raise typer.Exit(1)


def _print_findings(findings: list[dict[str, Any]]) -> None:
    console = out_console()
    for f in findings:
        style = _HEALTH_STYLE.get(f["status"], "")
        limit = f"  (limit {f['limit']})" if f["limit"] else ""
        seen = f"{f['check']}: {f['value']}"
        console.print(Text.assemble((f"  {f['status']:<4} ", style), seen, (limit, "dim")))


@device_app.command("drain")
def drain(
    device: Annotated[str, typer.Argument(help="device id, e.g. vm/cpu1")],
    db: Annotated[Path, typer.Option(help="the SQLite store of the system")],
    reason: Annotated[str | None, typer.Option(help="why (recorded)")] = None,
    wait: WaitOpt = 10.0,
    as_json: JsonOpt = False,
) -> None:
    """Take a device out of service: no new work; its jobs finish."""
    _report(_request(db, "drain", device, wait, reason=reason or "operator: drain"), as_json, db)


@device_app.command("undrain")
def undrain(
    device: Annotated[str, typer.Argument(help="device id")],
    db: Annotated[Path, typer.Option(help="the SQLite store of the system")],
    wait: WaitOpt = 60.0,
    as_json: JsonOpt = False,
) -> None:
    """Back into service (an idle device is refreshed and probed first)."""
    _report(_request(db, "undrain", device, wait, reason="operator: undrain"), as_json, db)


@device_app.command("reset")
def reset(
    device: Annotated[str, typer.Argument(help="device id")],
    db: DbOpt = None,
    fabric: FabricOpt = None,
    wait: WaitOpt = 120.0,
    as_json: JsonOpt = False,
    cpu_devices: CpuOpt = "per-core",
) -> None:
    """Reset a device (worker recycled; NVIDIA GPUs: nvidia-smi --gpu-reset where
    permitted) and probe it: through the running system with --db, else right here."""
    if db is not None:
        _report(_request(db, "reset", device, wait, reason="operator: reset"), as_json, db)
        return
    fab, emulated = _fabric(fabric, cpu_devices)
    _direct(fab, emulated, device, 1, True, as_json)


@device_app.command("probe")
def probe(
    device: Annotated[str, typer.Argument(help="device id")],
    level: Annotated[int, typer.Option(min=1, max=2, help="1: seconds; 2: a stress")] = 1,
    db: DbOpt = None,
    fabric: FabricOpt = None,
    wait: WaitOpt = 300.0,
    as_json: JsonOpt = False,
    policy: PolicyOpt = None,
    cpu_devices: CpuOpt = "per-core",
) -> None:
    """Probe a device (level 1: it answers, memory, a checked computation; level 2: a
    stress with checked results): through the running system with --db, else right here."""
    if db is not None:
        _report(_request(db, "probe", device, wait, level=level, reason="operator: probe"),
                as_json, db)  # fmt: skip
        return
    fab, emulated = _fabric(fabric, cpu_devices)
    _direct(fab, emulated, device, level, False, as_json, _policy(policy))


def _direct(
    fab: Fabric, emulated: bool, device: str, level: int, reset_first: bool, as_json: bool,
    policy: RemediationPolicy | None = None,
) -> None:  # fmt: skip
    """Reset and/or probe ``device`` in a worker of this process."""
    if device not in fab.devices:
        shown = ", ".join(sorted(fab.devices)[:8])
        fail(f"unknown device {device!r} in fabric {fab.name}; known: {shown}", 2)
    rules = (policy or RemediationPolicy()).for_kind(fab.devices[device].kind)
    steps: list[str] = []
    with tempfile.TemporaryDirectory(prefix="accelnet-device-") as work:
        backend = LocalBackend(fab.devices, work, SystemClock(), emulated=emulated,
                               device_reset=NvidiaSmiReset())  # fmt: skip
        with backend:
            if reset_first:
                ok, detail = backend.reset(device, hardware=rules.gpu_reset)
                steps.append(f"reset: {detail}")
                if not ok:
                    _direct_report(device, False, steps, [], as_json)
            findings = probe_directly(backend, device, level, rules, Path(work) / "logs")
    status = worst(f.status for f in findings)
    steps.append(f"probe level {level}: {status.value}")
    _direct_report(device, status is not Status.FAIL, steps, findings, as_json)


def _direct_report(
    device: str, ok: bool, steps: list[str], findings: list[Finding], as_json: bool
) -> None:
    detail = "; ".join(steps)
    found = [f.to_json() for f in findings]
    if as_json:
        data = {"device": device, "ok": ok, "detail": detail, "findings": found}
        sys.stdout.write(json.dumps(data, indent=2) + "\n")
    else:
        out_console().print(Text(f"{device}: {detail}", "green" if ok else "red"))
        _print_findings(found)
    if not ok:
        raise typer.Exit(1)


@device_app.command("policy")
def show_policy(
    file: Annotated[Path | None, typer.Argument(help="a policy file to check")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Check a remediation policy file and show the effective policy of every kind."""
    rules = _policy(file)
    data = {k.value: rules.for_kind(k).model_dump(mode="json") for k in DeviceKind}
    if as_json:
        sys.stdout.write(json.dumps(data, indent=2) + "\n")
        return
    console = out_console()
    for kind, p in data.items():
        checks = ", ".join(f"{k}={v}" for k, v in p.pop("checks").items() if v is not None)
        console.print(
            Text.assemble((f"{kind}: ", "bold"), ", ".join(f"{k}={v}" for k, v in p.items()))
        )
        console.print(Text(f"  checks: {checks}", "dim"))
