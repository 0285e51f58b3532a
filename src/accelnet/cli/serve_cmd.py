"""``accelnet serve``: the controller and the REST API in one process (docs/api.md)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from accelnet.cli.output import fail
from accelnet.cli.ray_opts import ADDRESS_HELP, BACKEND_HELP, ray_backend
from accelnet.cli.round_opts import ReallocationOpt
from accelnet.specio import SpecError

if TYPE_CHECKING:
    from accelnet.api.server import ServeOptions


def serve(
    backend: Annotated[str, typer.Option(help=BACKEND_HELP)] = "local",
    ray_address: Annotated[str | None, typer.Option(help=ADDRESS_HELP + "; default auto")] = None,
    db: Annotated[
        Path | None,
        typer.Option(help="SQLite file: jobs, tokens, tenants, audit (default: in memory)"),
    ] = None,
    fabric: Annotated[
        str | None, typer.Option(help="emulate this fabric (preset or file) on this CPU")
    ] = None,
    workdir: Annotated[
        Path | None, typer.Option(help="logs, outputs, scratch (default: beside --db)")
    ] = None,
    host: Annotated[str, typer.Option(help="address to listen on")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="port (0: any free one; the URL is printed)")] = 8765,
    policy: Annotated[str, typer.Option(help="scheduling policy (docs/policies.md)")] = "fifo",
    placement: Annotated[str | None, typer.Option(help="placement strategy")] = None,
    round_s: Annotated[float, typer.Option(help="round length of round-based policies")] = 360.0,
    min_reallocation_s: ReallocationOpt = 0.0,
    reserve_after: Annotated[
        float | None,
        typer.Option(
            "--reserve-after",
            help="hold a domain for a gang that has waited this many s and does not fit "
            "(queue policies; docs/policies.md); default: plain backfill",
        ),
    ] = None,
    rate: Annotated[float, typer.Option(help="requests per second per token (0: no limit)")] = 50.0,
    burst: Annotated[int, typer.Option(help="requests at once per token")] = 100,
    anon_rate: Annotated[
        float,
        typer.Option(
            help="requests per second per client address without a valid token (0: no limit)"
        ),
    ] = 10.0,
    anon_burst: Annotated[
        int, typer.Option(help="requests at once per client address without a valid token")
    ] = 100,
    audit_retention_days: Annotated[
        float, typer.Option(help="audit log entries older than this are pruned (0: kept)")
    ] = 90.0,
    audit_max_rows: Annotated[
        int, typer.Option(help="audit log entries kept at most, the newest (0: no bound)")
    ] = 1_000_000,
    max_body: Annotated[int, typer.Option(help="largest request body, bytes")] = 1 << 20,
    tls_cert: Annotated[Path | None, typer.Option(help="TLS certificate (PEM)")] = None,
    tls_key: Annotated[Path | None, typer.Option(help="TLS private key (PEM)")] = None,
    insecure_bind: Annotated[
        bool, typer.Option(help="allow a non-loopback --host without TLS")
    ] = False,
    device_policy: Annotated[
        Path | None, typer.Option(help="device remediation policy (YAML; docs/devices.md)")
    ] = None,
    log_level: Annotated[str, typer.Option(help="critical, error, warning, info, debug")] = "info",
    metrics_token: Annotated[
        str | None,
        typer.Option(
            envvar="ACCELNET_METRICS_TOKEN",
            help="bearer token a /metrics scrape must carry (default: open on this host)",
        ),
    ] = None,
    run_as: Annotated[
        list[str] | None,
        typer.Option(
            help="TENANT=USER: run that tenant's tasks as USER (the others get users of "
            "their own, made on first use); the server must run as root (docs/api.md)"
        ),
    ] = None,
    trusted_tasks: Annotated[
        bool,
        typer.Option(
            "--trusted-tasks",
            help="NO ISOLATION: run every task as the server's own user, where it can read "
            "the database (mint tokens), every tenant's files and signal the server; for "
            "one trusted team, or a server that is not root",
        ),
    ] = False,
) -> None:
    """Serve the REST API (docs/api.md) and run the controller, until Ctrl-C or SIGTERM.
    --backend ray runs the tasks on a Ray cluster (docs/ray.md)."""
    # fastapi and uvicorn only when serving: the other commands start faster without them
    from accelnet.api.server import ServeOptions  # noqa: PLC0415

    with ray_backend(backend, ray_address, "auto") as ray:  # a local cluster: while serving
        opts = ServeOptions(
            backend=backend, ray_address=None if ray is None else ray.address, db=db,
            fabric=fabric, workdir=workdir, host=host, port=port, policy=policy,
            placement=placement, round_s=round_s, reserve_after_s=reserve_after, rate=rate,
            min_reallocation_s=min_reallocation_s,
            burst=burst, max_body=max_body,
            anon_rate=anon_rate, anon_burst=anon_burst,
            audit_retention_days=audit_retention_days, audit_max_rows=audit_max_rows,
            tls_cert=tls_cert, tls_key=tls_key, insecure_bind=insecure_bind,
            device_policy=device_policy, log_level=log_level, metrics_token=metrics_token,
            run_as=tuple(run_as or ()), trusted_tasks=trusted_tasks,
        )  # fmt: skip
        _serve(opts)


def _serve(opts: ServeOptions) -> None:
    """Run the server; exit with a message if it cannot start."""
    from accelnet.api.db import ApiDbError  # noqa: PLC0415
    from accelnet.api.server import ServeError  # noqa: PLC0415
    from accelnet.api.server import serve as run_server  # noqa: PLC0415
    from accelnet.fabric.load import FabricNotFoundError  # noqa: PLC0415

    try:
        run_server(opts)
    except (ServeError, FabricNotFoundError, LookupError) as exc:
        fail(exc.args[0] if exc.args else exc, 2)
    except (SpecError, ApiDbError, ValueError) as exc:
        fail(exc, 1)
