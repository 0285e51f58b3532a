"""``accelnet token``: create, list and revoke the API's bearer tokens (docs/api.md).

Tokens live in the server's SQLite file (``--db``), hashed; ``create`` prints the token
once, on stdout alone (``TOKEN=$(accelnet token create ...)``), and what it is on stderr.
A running server sees a new or revoked token at its next request (and ends the streams a
revoked token opened within a second).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from accelnet.api.db import ApiDb, ApiDbError
from accelnet.api.tenants import Tenants
from accelnet.api.tokens import Role, Tokens
from accelnet.cli.output import fail, note, out_console

token_app = typer.Typer(help="API tokens: create, list, revoke.", no_args_is_help=True)
DbOpt = Annotated[Path, typer.Option(help="the server's SQLite file (accelnet serve --db)")]
JsonOpt = Annotated[bool, typer.Option("--json", help="JSON for scripts")]


def _open(db: Path, create: bool = False) -> ApiDb:
    if not create and not db.exists():
        fail(f"--db {db}: no such file", 2)
    try:
        return ApiDb(db)
    except ApiDbError as exc:
        fail(exc, 1)


@token_app.command("create")
def create(
    db: DbOpt,
    tenant: Annotated[str, typer.Option(help="the tenant whose jobs it submits and sees")],
    role: Annotated[str, typer.Option(help="viewer, user or admin")] = "user",
    name: Annotated[str, typer.Option(help="a name to tell tokens apart")] = "",
) -> None:
    """Create a token; print it once (stdout). Registers the tenant if it is new."""
    try:
        chosen = Role(role)
    except ValueError:
        fail(f"--role {role!r}: viewer, user or admin", 2)
    api = _open(db, create=True)
    try:
        now = time.time()
        info, token = Tokens(api).create(tenant, chosen, name, now)
        Tenants(api).ensure(tenant, now)
    except ValueError as exc:
        fail(exc, 2)
    finally:
        api.close()
    sys.stdout.write(token + "\n")
    note(f"token {info.id}: tenant {info.tenant}, role {info.role.value}; the secret is shown "
         "only now")  # fmt: skip


@token_app.command("list")
def list_tokens(db: DbOpt, as_json: JsonOpt = False) -> None:
    """Every token (ids, tenants, roles; never secrets)."""
    api = _open(db)
    try:
        tokens = Tokens(api).list()
    finally:
        api.close()
    if as_json:
        rows = [
            {
                "id": t.id,
                "tenant": t.tenant,
                "role": t.role.value,
                "name": t.name,
                "created_at": t.created_at,
                "revoked_at": t.revoked_at,
            }
            for t in tokens
        ]
        sys.stdout.write(json.dumps({"tokens": rows}, indent=2) + "\n")
        return
    table = Table()
    for col in ("id", "tenant", "role", "name", "created", "revoked"):
        table.add_column(col)
    for t in tokens:
        created = time.strftime("%Y-%m-%d %H:%M", time.localtime(t.created_at))
        revoked = "-" if t.revoked_at is None else time.strftime(
            "%Y-%m-%d %H:%M", time.localtime(t.revoked_at))  # fmt: skip
        table.add_row(t.id, t.tenant, t.role.value, t.name or "-", created, revoked)
    out_console().print(table)


@token_app.command("revoke")
def revoke(
    token_id: Annotated[str, typer.Argument(help="the token's id (accelnet token list)")],
    db: DbOpt,
) -> None:
    """Revoke a token: it fails from its next request on; its open streams end within a
    second."""
    api = _open(db)
    try:
        done = Tokens(api).revoke(token_id, time.time())
    finally:
        api.close()
    if not done:
        fail(f"no active token {token_id!r}", 1)
    note(f"token {token_id} revoked")
