"""``accelnet serve``: the controller and the API in one process.

Threads: the controller runs in its own thread (:class:`~accelnet.runtime.sdk.LocalCluster`,
over the local backend: one worker process per device in use); uvicorn's event loop runs
in the main thread and the routes' blocking work in its thread pool. The cluster's lock
guards the controller (the SDK takes it; :class:`~accelnet.api.port.LocalClusterPort`
where the SDK has no call); the store and the API tables are thread-safe on their own;
submissions are serialised by :class:`~accelnet.api.admission.Admission` (quotas).

Start-up: options are checked first (a host other than loopback needs TLS or
``--insecure-bind``), the socket is bound (port 0: any free port) before the controller
starts, and the URL is printed once the server listens. SIGTERM or Ctrl-C: uvicorn stops
taking requests and ends the open streams, then the controller stops and its workers
and their tasks are ended; the store keeps every accepted job.
"""

from __future__ import annotations

import contextlib
import gc
import ipaddress
import logging
import math
import os
import shutil
import signal
import socket
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

import uvicorn
from fastapi import FastAPI

from accelnet.api.app import create_app
from accelnet.api.audit import MAX_ROWS, RETENTION_DAYS, AuditKeeper
from accelnet.api.context import ApiContext, ApiSettings, build_context
from accelnet.api.dashboard import mount_dashboard
from accelnet.api.db import ApiDb
from accelnet.api.metrics import mount_metrics
from accelnet.api.port import LocalClusterPort
from accelnet.api.tokens import Role
from accelnet.runtime.clock import SystemClock
from accelnet.runtime.local.runas import RunAsError, TenantUsers, parse_run_as, untraversable
from accelnet.runtime.ray.connect import RayOptions
from accelnet.runtime.sdk import LocalCluster
from accelnet.sched.policies import QUEUE_POLICIES, make_scheduler

BACKENDS = ("local", "ray")
LOG_LEVELS = ("critical", "error", "warning", "info", "debug")


class ServeError(RuntimeError):
    """The server cannot start as asked; the message says why."""


@dataclass(frozen=True, slots=True)
class ServeOptions:
    """What ``accelnet serve`` was asked for."""

    backend: str = "local"
    ray_address: str | None = None  # with backend "ray": auto, ray://host:port, host:port
    db: Path | None = None
    fabric: str | None = None
    workdir: Path | None = None
    host: str = "127.0.0.1"
    port: int = 8765
    policy: str = "fifo"
    placement: str | None = None
    round_s: float = 360.0
    min_reallocation_s: float = 0.0  # round policies: re-solve at most this often
    reserve_after_s: float | None = None  # hold a domain for a gang that waited this long
    rate: float = 50.0
    burst: int = 100
    anon_rate: float = 10.0  # per client address, requests without a valid token
    anon_burst: int = 100
    audit_retention_days: float = RETENTION_DAYS  # 0: keep forever
    audit_max_rows: int = MAX_ROWS  # 0: no bound
    max_body: int = 1 << 20
    tls_cert: Path | None = None
    tls_key: Path | None = None
    insecure_bind: bool = False
    device_policy: Path | None = None
    log_level: str = "info"
    metrics_token: str | None = None  # /metrics needs this bearer token (None: open)
    run_as: tuple[str, ...] = ()  # TENANT=USER: that tenant's tasks run as USER (root only)
    trusted_tasks: bool = False  # every task runs as the server's own user (no isolation)


def is_loopback(host: str) -> bool:
    """Whether ``host`` only reaches this machine (``localhost``, 127.0.0.0/8, ``::1``)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a name: it may resolve to anything


def check(opts: ServeOptions) -> None:
    """ServeError for options that cannot work (before anything starts)."""
    if opts.backend not in BACKENDS:
        raise ServeError(f"backend {opts.backend!r} is not available; valid: {', '.join(BACKENDS)}")
    if (opts.tls_cert is None) != (opts.tls_key is None):
        raise ServeError("TLS needs both --tls-cert and --tls-key")
    for path in (opts.tls_cert, opts.tls_key):
        if path is not None and not path.is_file():
            raise ServeError(f"{path}: no such file")
    if not is_loopback(opts.host) and opts.tls_cert is None and not opts.insecure_bind:
        raise ServeError(
            f"refusing to listen on {opts.host} without TLS: anyone who can reach it could "
            "try tokens in the clear. Give --tls-cert and --tls-key, or --insecure-bind if "
            "something in front of it (a TLS proxy, a private network) protects it"
        )
    if not 0 <= opts.port <= 65535:
        raise ServeError(f"--port {opts.port}: 0 (any free port) to 65535")
    if opts.log_level not in LOG_LEVELS:
        raise ServeError(f"--log-level {opts.log_level!r}; valid: {', '.join(LOG_LEVELS)}")
    if opts.burst < 1:
        raise ServeError(f"--burst {opts.burst}: at least 1")
    if not (math.isfinite(opts.min_reallocation_s) and opts.min_reallocation_s >= 0):
        raise ServeError(f"--min-reallocation-s {opts.min_reallocation_s}: a number of s >= 0")
    if opts.anon_burst < 1:
        raise ServeError(f"--anon-burst {opts.anon_burst}: at least 1")
    if opts.audit_retention_days < 0 or opts.audit_max_rows < 0:
        raise ServeError("--audit-retention-days and --audit-max-rows: 0 (no bound) or more")
    if opts.max_body < 1024:
        raise ServeError(f"--max-body {opts.max_body}: at least 1024 bytes")
    if opts.run_as and opts.backend != "local":
        raise ServeError("--run-as works with the local backend only")
    if opts.run_as and opts.trusted_tasks:
        raise ServeError("--run-as and --trusted-tasks contradict each other: choose one")


def run_as_users(
    opts: ServeOptions, workdir: Path | None, euid: int | None = None
) -> tuple[TenantUsers, str]:
    """Who runs each tenant's tasks, and the line ``serve`` prints about it.

    As root (``euid``, default this process's) each tenant's tasks run as a user of the
    tenant's own (``--run-as`` names some; the others are made on first use). Without root,
    on the Ray backend, or with ``--trusted-tasks``, tasks would run as the server's own user
    and could read its database (and so mint tokens of any role), every tenant's files and
    the server's environment, and signal the server: that needs ``--trusted-tasks``, said in
    so many words. ServeError naming the problem otherwise, or the folder above ``workdir``
    that the users could not pass (they work in folders under it)."""
    uid = os.geteuid() if euid is None else euid
    if opts.trusted_tasks:
        return TenantUsers(), (
            f"isolation: NONE (--trusted-tasks): every task runs as this server's user "
            f"(uid {uid}) and can read its database and tokens, every tenant's files and "
            "output, and signal the server"
        )
    if opts.backend != "local":
        raise ServeError(
            f"the {opts.backend} backend runs every tenant's tasks as the user of its own "
            "workers, with no isolation between tenants or from the service: pass "
            "--trusted-tasks if every job is trusted"
        )
    if uid != 0:
        raise ServeError(
            f"this server runs as uid {uid}, not root, so it cannot run each tenant's tasks "
            "as a user of its own: they would run as the server's user and could read its "
            "database (and mint an admin token), every tenant's output and its environment, "
            "and signal it. Run it as root (tenants then get users of their own), or pass "
            "--trusted-tasks if every job is trusted"
        )
    try:
        mapped = parse_run_as(opts.run_as, euid=uid)
    except RunAsError as exc:
        raise ServeError(str(exc)) from None
    if workdir is None:
        raise ServeError(
            "tasks run as their tenants' users in folders under --workdir (or beside --db): "
            "give one of them"
        )
    blocked = untraversable(workdir.resolve().parent)
    if blocked is not None:
        raise ServeError(
            f"{blocked} is not passable by other users (mode "
            f"{blocked.stat().st_mode & 0o777:o}), so tasks run as their tenants' users cannot "
            f"reach their folders in {workdir}; give it o+x (chmod o+x {blocked}) or choose "
            "another --workdir"
        )
    named = ", ".join(f"{t}={u.name}" for t, u in sorted(mapped.items()))
    said = (
        "isolation: each tenant's tasks run as a user of its own"
        + (f" ({named}; the others as acn-<tenant>-<hash>, made on first use)" if named
           else " (acn-<tenant>-<hash>, made on first use)")
        + "; the database, logs, other tenants' folders and this process are closed to them"
    )  # fmt: skip
    python = untraversable(Path(sys.base_prefix))
    if python is not None:  # e.g. pyenv under a 0700 /root
        said += (
            f"\n  warning: {python} is closed to other users, so tasks cannot reach this "
            f"Python ({sys.base_prefix}): a Python entry point that imports a module the "
            f"worker has not loaded fails; chmod o+x {python} or install Python where "
            "other users can read it"
        )
    return TenantUsers(mapped, auto=True), said


def bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host:port`` (port 0: a free one)."""
    bare = host.strip("[]")
    family = socket.AF_INET6 if ":" in bare else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((bare, port))
        sock.listen(128)  # connections wait in the backlog until the server takes them
    except OSError as exc:
        sock.close()
        raise ServeError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    return sock


def url_of(sock: socket.socket, tls: bool) -> str:
    """``http://127.0.0.1:8765`` (``[::1]`` for IPv6)."""
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    return f"{'https' if tls else 'http'}://{shown}:{port}"


def build_app(ctx: ApiContext, metrics_token: str | None = None) -> FastAPI:
    """The whole server's application: the API, and what mounts next to it (``/metrics``
    and the dashboard install themselves here, each given ``app`` and ``ctx``)."""
    app = create_app(ctx)
    mount_metrics(app, ctx, metrics_token)
    mount_dashboard(app, ctx)
    return app


@contextlib.contextmanager
def _quiet_signals(server: uvicorn.Server) -> Iterator[None]:
    """While uvicorn runs: SIGINT and SIGTERM are its (it stops gracefully); after it
    returns it raises them again, and these handlers take them, so that the cleanup that
    follows runs instead of the process dying on the spot. One that comes before uvicorn
    has taken them (during :func:`_upkeep`'s start) tells it to stop at once."""
    old = {s: signal.signal(s, lambda *_: setattr(server, "should_exit", True))
           for s in (signal.SIGINT, signal.SIGTERM)}  # fmt: skip
    try:
        yield
    finally:
        for s, handler in old.items():
            signal.signal(s, handler)


@contextlib.contextmanager
def _upkeep(ctx: ApiContext, settings: ApiSettings) -> Iterator[None]:
    """While uvicorn runs: the audit log pruned now, then every minute
    (:class:`~accelnet.api.audit.AuditKeeper`); and what start-up left on the heap frozen
    (``gc.freeze``), so that the collector's full passes, which a busy API sets off every
    few seconds, look at what was made since rather than at every module and the fabric:
    each such pass stopped every request for 50-140 ms (bench/api_flood_bench.py)."""
    with AuditKeeper(ctx.audit, ctx.clock, settings.audit_retention_s, settings.audit_max_rows):
        gc.collect()
        gc.freeze()
        try:
            yield
        finally:
            gc.unfreeze()


def _bootstrap_admin(ctx: ApiContext, workdir: Path, now: float) -> Path:
    """A server without ``--db``: an admin token (tenant ``admin``), written (mode 0600) to
    a file in its working folder, whose path is printed (the secret never is)."""
    _, token = ctx.tokens.create("admin", Role.ADMIN, "bootstrap", now)
    ctx.tenants.ensure("admin", now)
    path = workdir / "admin.token"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(token + "\n")
    return path


def _log_to_stderr(level: str) -> None:
    logging.getLogger("accelnet").setLevel(level.upper())
    if not logging.getLogger("accelnet").handlers:
        logging.getLogger("accelnet").addHandler(logging.StreamHandler(sys.stderr))


def work_folder(opts: ServeOptions) -> tuple[Path | None, Path | None]:
    """Where logs, outputs and scratch go (``--workdir``, else beside ``--db``), and a
    folder to remove at the end: with neither, and tasks run as their tenants' users, a
    temporary folder of the server's own (they need a place they can reach)."""
    if opts.workdir is not None:
        return opts.workdir, None
    if opts.db is not None:
        return opts.db.resolve().parent / f"{opts.db.stem}-work", None
    if opts.trusted_tasks:
        return None, None
    made = Path(tempfile.mkdtemp(prefix="accelnet-serve-"))
    return made, made


def serve(opts: ServeOptions, out: TextIO = sys.stdout) -> None:
    """Run the server until SIGTERM or Ctrl-C (see the module docstring). ServeError if it
    cannot start; fabric, policy and remediation-policy errors propagate."""
    check(opts)
    realloc = 0.0 if opts.policy in QUEUE_POLICIES else opts.min_reallocation_s  # rounds only
    scheduler = make_scheduler(opts.policy, round_s=opts.round_s, placement=opts.placement,
                               reserve_after_s=opts.reserve_after_s,
                               min_reallocation_s=realloc)  # fmt: skip
    tls = opts.tls_cert is not None
    _log_to_stderr(opts.log_level)
    workdir, scratch_work = work_folder(opts)
    try:
        users, isolation = run_as_users(opts, workdir)
        sock = bind(opts.host, opts.port)
    except ServeError:
        if scratch_work is not None:
            shutil.rmtree(scratch_work, ignore_errors=True)
        raise
    clock = SystemClock()
    db = ApiDb(opts.db)
    ray = RayOptions(opts.ray_address or "auto") if opts.backend == "ray" else None
    cluster = LocalCluster(opts.fabric, workdir, opts.db, scheduler, policy=opts.device_policy,
                           ray=ray, run_as=users, task_cwd="scratch")  # fmt: skip
    port = LocalClusterPort(cluster)
    try:
        cluster.start()
        settings = ApiSettings(max_body=opts.max_body, rate=opts.rate, burst=opts.burst,
                               policy=opts.policy, anon_rate=opts.anon_rate,
                               min_reallocation_s=opts.min_reallocation_s,
                               anon_burst=opts.anon_burst,
                               audit_retention_s=opts.audit_retention_days * 86400,
                               audit_max_rows=opts.audit_max_rows)  # fmt: skip
        ctx = build_context(port, db, clock, settings)
        notes = [f"fabric {cluster.fabric.name} ({len(cluster.fabric.devices)} devices), "
                 f"policy {opts.policy}, work in {cluster.workdir}", isolation]  # fmt: skip
        if opts.db is None:
            path = _bootstrap_admin(ctx, cluster.workdir, clock.now())
            notes.append(f"no --db: state is in memory; an admin token is in {path}")
        elif not any(t.active and t.role is Role.ADMIN for t in ctx.tokens.list()):
            notes.append(f"no admin token yet: accelnet token create --db {opts.db} "
                         "--tenant ops --role admin")  # fmt: skip
        notes += ctx.services.restore()  # the services a server on this --db ran
        config = uvicorn.Config(
            build_app(ctx, opts.metrics_token),
            log_level=opts.log_level,
            lifespan="off",
            timeout_graceful_shutdown=5,
            ssl_certfile=str(opts.tls_cert) if opts.tls_cert else None,
            ssl_keyfile=str(opts.tls_key) if opts.tls_key else None,
        )
        server = uvicorn.Server(config)
        ctx.stopping = lambda: server.should_exit
        url = url_of(sock, tls)
        with _quiet_signals(server), _upkeep(ctx, settings):
            # the URL is printed once SIGTERM/SIGINT stop the server gracefully: a caller
            # that stops it as soon as it is printed got the default action (exit -15)
            out.write(f"accelnet serving on {url}\n")
            for note in notes:
                out.write(f"  {note}\n")
            out.write(f"  API docs: {url}/docs; stop with Ctrl-C or SIGTERM\n")
            out.flush()
            server.run(sockets=[sock])
    finally:
        sock.close()
        port.close()
        cluster.close()
        db.close()
        if scratch_work is not None:
            shutil.rmtree(scratch_work, ignore_errors=True)
