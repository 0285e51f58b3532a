"""``accelnet service``: start, list, show, update and stop services on a running server
(docs/serve.md), through :class:`accelnet.Client`. URL and token as for ``accelnet submit``;
exit codes as there (1: the server refused; 2: no server or token)."""

from __future__ import annotations

import time
from typing import Annotated

import typer

from accelnet.cli.client_cmd import JsonOpt, TokenOpt, UrlOpt, dump, session
from accelnet.cli.output import fail, note, out_console
from accelnet.client.views import service_detail, services_table

service_app = typer.Typer(
    help="Services: replicas of a model behind one address, scaled with their load.",
    no_args_is_help=True,
)
FileArg = Annotated[str, typer.Argument(help="a service file (YAML or JSON; docs/serve.md)")]
NameArg = Annotated[str, typer.Argument(help="the service's name")]
TenantOpt = Annotated[str | None, typer.Option(help="the owning tenant (admin)")]


@service_app.command("up")
def up(
    file: FileArg,
    wait: Annotated[
        float, typer.Option(help="seconds to wait for the first replica to be ready (0: none)")
    ] = 120.0,
    as_json: JsonOpt = False,
    url: UrlOpt = None,
    token: TokenOpt = None,
) -> None:
    """Start the service of a service file (checked here first, then by the server)."""
    with session(url, token) as api:
        svc = api.create_service(file)
        if not as_json:
            out_console().print(f"service [bold]{svc.name}[/] (tenant {svc.tenant}) answers at "
                            f"{svc.url}", highlight=False)  # fmt: skip
        end = time.monotonic() + wait
        while wait > 0 and svc.ready < min(1, svc.max_replicas) and svc.min_replicas > 0:
            if time.monotonic() > end:
                fail(f"no replica of {svc.name} ready after {wait:g} s: accelnet service "
                     f"show {svc.name}", 1)  # fmt: skip
            time.sleep(0.5)
            svc = api.service(svc.name, svc.tenant)
        if as_json:
            dump(svc.model_dump(mode="json"))
        else:
            out_console().print(services_table([svc]))


@service_app.command("ls")
def ls(as_json: JsonOpt = False, url: UrlOpt = None, token: TokenOpt = None) -> None:
    """The services (yours; an admin's: all), replicas, requests/s and latencies."""
    with session(url, token) as api:
        services = api.services()
        if as_json:
            dump({"services": [s.model_dump(mode="json") for s in services]})
        elif not services:
            note("no services")
        else:
            out_console().print(services_table(services))


@service_app.command("show")
def show(
    name: NameArg,
    tenant: TenantOpt = None,
    as_json: JsonOpt = False,
    url: UrlOpt = None,
    token: TokenOpt = None,
) -> None:
    """One service: figures, replicas (job, device model, state) and latest events."""
    with session(url, token) as api:
        svc = api.service(name, tenant)
        if as_json:
            dump(svc.model_dump(mode="json"))
        else:
            out_console().print(service_detail(svc))


@service_app.command("update")
def update(
    file: FileArg,
    tenant: TenantOpt = None,
    as_json: JsonOpt = False,
    url: UrlOpt = None,
    token: TokenOpt = None,
) -> None:
    """Roll the service named in the file onto it: one new replica at a time, an old one
    leaves once a new one is ready; no request is cut."""
    with session(url, token) as api:
        svc = api.update_service(file, tenant)
        if as_json:
            dump(svc.model_dump(mode="json"))
        else:
            out_console().print(f"service [bold]{svc.name}[/] rolling to version {svc.version}",
                            highlight=False)  # fmt: skip


@service_app.command("down")
def down(
    name: NameArg,
    tenant: TenantOpt = None,
    as_json: JsonOpt = False,
    url: UrlOpt = None,
    token: TokenOpt = None,
) -> None:
    """Stop a service: its router closes and its replicas are cancelled."""
    with session(url, token) as api:
        svc = api.delete_service(name, tenant)
        if as_json:
            dump(svc.model_dump(mode="json"))
        else:
            gone = len(svc.replicas)
            out_console().print(f"service [bold]{svc.name}[/] stopped ({gone} replicas cancelled)",
                            highlight=False)  # fmt: skip
