"""API chaos run: submissions through the REST API while the server is SIGKILLed and
restarted on the same SQLite file; afterwards every acknowledged submission is in the store,
once.

    python bench/api_chaos_bench.py              # 10,000 submissions, 8 clients, 20 restarts
    python bench/api_chaos_bench.py --submissions 400 --restarts 4 --seed 3

The driver (this process) starts ``accelnet serve`` on 127.0.0.1 (a fixed free port, a
SQLite file in a temporary folder, an emulated fabric, rate limit off), creates one user
token per tenant in the file beforehand, and, unless ``--run``, drains every device first
so the jobs stay queued (the API, admission, the store and the scheduler's queue are what
is measured, not the jobs). ``--clients`` threads, each an :class:`accelnet.Client` of its
own, submit the jobs one call at a time: job ``n`` is ``{"name": "s<n>", "run": "true",
"resources": {"accelerators": "any:1"}}``, sent under an ``Idempotency-Key`` of its own
and retried by the client with that key after no answer, a timeout or a 5xx (for up to
``--retry-s``). Meanwhile the driver SIGKILLs the server (and its children) at seeded
random points of the run (when the acknowledgements reach seeded fractions of the total)
and restarts it at once on the same file and port.

Recorded: each acknowledged (201) submission's key, job ids and time. Afterwards the server
is stopped with SIGTERM and the file is opened with
:class:`~accelnet.runtime.control.sqlite_store.SqliteStore`: **lost** (acknowledged ids not stored),
**duplicated** (submissions with more than one stored job: the names are unique),
**mismatched** (acknowledged keys whose stored key record names other jobs), jobs stored
without an acknowledgement (a submission given up on), and the invariants
(:mod:`accelnet.runtime.control.invariants`; ``quiescent=False`` while jobs are live). Figures:
acknowledged submissions per second (first send to last answer), client retries, retries
the server answered from their key (its audit log's ``replayed``: without the key each
would have been a duplicate), and
each restart's downtime: SIGKILL -> the restarted server prints its URL, and SIGKILL -> the
first acknowledgement after it. Prints a table and writes
``bench/results/api_chaos_bench.json``. Also imported by
``tests/api/test_submit_during_restarts.py`` at a reduced size.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import random
import re
import shutil
import signal
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psutil
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from accelnet.client import ApiError, Client
from benchutil import outlive

ROOT = Path(__file__).resolve().parent
RESULTS = ROOT / "results" / "api_chaos_bench.json"


@dataclass
class ApiChaosConfig:
    """The size of a run: submissions, client threads, restarts, seed, and where."""

    submissions: int = 10_000
    clients: int = 8
    restarts: int = 20
    seed: int = 1
    tenants: int = 4
    fabric: str = "pcie-4xL4"
    run_jobs: bool = False  # False: every device drained first, the jobs stay queued
    retry_s: float = 120.0  # how long a client retries one submission
    call_timeout_s: float = 15.0  # per HTTP call
    ready_s: float = 120.0  # a (re)started server prints its URL within this
    timeout_s: float = 1800.0


@dataclass
class ApiChaosReport:
    """What a run did and found."""

    config: dict[str, Any]
    submissions: int = 0
    acknowledged: int = 0
    given_up: int = 0  # submissions still failing after retry_s (not acknowledged)
    restarts: int = 0
    client_retries: int = 0
    lost: list[str] = field(default_factory=list)  # acknowledged ids not in the store
    duplicated: list[str] = field(default_factory=list)  # submissions stored more than once
    mismatched: list[str] = field(default_factory=list)  # key record names other jobs
    unacknowledged_stored: int = 0  # stored jobs of submissions that were given up on
    replayed: int = 0  # retries answered from their key (the audit log's "replayed ...")
    stored: int = 0
    keys_kept: int = 0
    states: dict[str, int] = field(default_factory=dict)
    violations: list[str] = field(default_factory=list)
    up_s: list[float] = field(default_factory=list)  # SIGKILL -> restarted server's URL
    downtime_s: list[float] = field(default_factory=list)  # SIGKILL -> next acknowledgement
    submit_s: float = 0.0  # first send -> last answer
    wall_s: float = 0.0
    server_exit: int | None = None

    def ok(self) -> bool:
        """Nothing lost, duplicated or mismatched; every invariant holds."""
        return not (self.lost or self.duplicated or self.mismatched or self.violations)


@dataclass
class Ack:
    """An acknowledged submission: its number, key, job ids and when (monotonic)."""

    n: int
    key: str
    ids: list[str]
    at: float


def accelnet_cmd() -> list[str]:
    """The installed console script (or the module, without one)."""
    script = Path(sys.executable).parent / "accelnet"
    if script.exists():
        return [str(script)]
    return [sys.executable, "-c", "from accelnet.cli.main import main; main()"]


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now (the server binds it with SO_REUSEADDR)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def make_tokens(db: Path, tenants: list[str]) -> tuple[str, list[str]]:
    """An admin token and one user token per tenant, created in ``db``."""
    from accelnet.api.db import ApiDb
    from accelnet.api.tenants import Tenants
    from accelnet.api.tokens import Role, Tokens

    api = ApiDb(db)
    try:
        tokens, known = Tokens(api), Tenants(api)
        now = time.time()
        admin = tokens.create("ops", Role.ADMIN, "chaos-admin", now)[1]
        known.ensure("ops", now)
        users = []
        for t in tenants:
            users.append(tokens.create(t, Role.USER, f"chaos-{t}", now)[1])
            known.ensure(t, now)
        return admin, users
    finally:
        api.close()


def tasks_folder(work: Path) -> Path:
    """The server's work folder (logs, outputs, scratch): beside ``work`` in the system's
    temp dir, passable by other users (as root the server runs each tenant's tasks as a user
    of its own, who must reach its folders; ``work`` may be a private tmp folder); the same
    for every life of a run."""
    digest = hashlib.sha256(str(work.resolve()).encode()).hexdigest()[:16]
    folder = Path(tempfile.gettempdir()) / f"accelnet-api-chaos-{digest}"
    folder.mkdir(mode=0o711, exist_ok=True)
    folder.chmod(0o711)
    return folder


class ServerProcess:
    """``accelnet serve`` on a fixed port and database; one instance per life."""

    def __init__(self, work: Path, port: int, cfg: ApiChaosConfig, life: int) -> None:
        self.url = f"http://127.0.0.1:{port}"
        cmd = [*accelnet_cmd(), "serve", "--port", str(port), "--db", str(work / "state.db"),
               "--workdir", str(tasks_folder(work)), "--fabric", cfg.fabric, "--rate", "0",
               "--log-level", "warning"]  # fmt: skip
        err = (work / f"serve.{life}.err").open("wb")
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, text=True,
                                     env={**os.environ, "PYTHONUNBUFFERED": "1"})  # fmt: skip
        err.close()
        self.ready = threading.Event()
        self.ready_at: float | None = None
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if not self.ready.is_set() and re.search(r"serving on ", line):
                self.ready_at = time.monotonic()
                self.ready.set()

    def wait_ready(self, timeout: float) -> None:
        """Until it prints its URL; RuntimeError if it exits or takes longer."""
        end = time.monotonic() + timeout
        while not self.ready.wait(0.05):
            if self.proc.poll() is not None or time.monotonic() > end:
                raise RuntimeError(f"accelnet serve did not come up (exit {self.proc.poll()})")

    def kill(self) -> None:
        """SIGKILL it and its children (workers and their tasks)."""
        kids: list[psutil.Process] = []
        with contextlib.suppress(psutil.NoSuchProcess):
            kids = psutil.Process(self.proc.pid).children(recursive=True)
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.proc.pid, signal.SIGKILL)
        for p in kids:
            with contextlib.suppress(psutil.NoSuchProcess):
                p.kill()
        self.proc.wait(timeout=30)
        outlive(kids, 15.0)

    def stop(self, timeout: float = 60.0) -> int:
        """SIGTERM; its exit code (-9 if it had to be killed)."""
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            return -9


def job_spec(n: int) -> dict[str, Any]:
    """Submission ``n``'s job: a unique name, a trivial command, one device of any kind."""
    return {"name": f"s{n:05d}", "run": "true", "resources": {"accelerators": "any:1"}}


def kill_points(cfg: ApiChaosConfig) -> list[int]:
    """The acknowledgement counts at which the server is killed (seeded, sorted)."""
    rng = random.Random(cfg.seed)
    return sorted(int(rng.uniform(0.03, 0.97) * cfg.submissions) for _ in range(cfg.restarts))


class Clients:
    """The client threads and what they record (acknowledgements, retries, give-ups)."""

    def __init__(self, cfg: ApiChaosConfig, url: str, tokens: list[str]) -> None:
        self.cfg = cfg
        self.url = url
        self.tokens = tokens
        self.lock = threading.Lock()
        self.acks: list[Ack] = []
        self.given_up: list[tuple[int, str, str]] = []  # (n, key, error)
        self.retries = 0
        self.errors: list[BaseException] = []
        self._next = 0
        self.threads = [threading.Thread(target=self._client, args=(k,), daemon=True)
                        for k in range(cfg.clients)]  # fmt: skip

    def start(self) -> None:
        for t in self.threads:
            t.start()

    def alive(self) -> bool:
        return any(t.is_alive() for t in self.threads)

    def acked(self) -> int:
        with self.lock:
            return len(self.acks)

    def _take(self) -> int | None:
        with self.lock:
            if self._next >= self.cfg.submissions:
                return None
            self._next += 1
            return self._next - 1

    def _client(self, k: int) -> None:
        cfg = self.cfg
        api = Client(self.url, self.tokens[k % len(self.tokens)], timeout=cfg.call_timeout_s,
                     submit_retry_s=cfg.retry_s)  # fmt: skip
        try:
            while (n := self._take()) is not None:
                key = str(uuid.uuid4())
                try:
                    job = api.submit(job_spec(n), idempotency_key=key)
                except ApiError as exc:
                    with self.lock:
                        self.given_up.append((n, key, str(exc)))
                    continue
                ack = Ack(n, key, [job.id], time.monotonic())
                with self.lock:
                    self.acks.append(ack)
        except BaseException as exc:
            with self.lock:
                self.errors.append(exc)
            raise
        finally:
            with self.lock:
                self.retries += api.submit_retries
            api.close()


def run_api_chaos(cfg: ApiChaosConfig, work: Path, progress: bool = False) -> ApiChaosReport:
    """One seeded run in ``work`` (created); returns the report. Bounded by
    ``cfg.timeout_s`` (TimeoutError)."""
    work.mkdir(parents=True, exist_ok=True)
    report = ApiChaosReport(config=asdict(cfg), submissions=cfg.submissions)
    admin, users = make_tokens(work / "state.db", [f"team{i}" for i in range(cfg.tenants)])
    port = free_port()
    t0 = time.monotonic()
    server = ServerProcess(work, port, cfg, 0)
    server.wait_ready(cfg.ready_s)
    if not cfg.run_jobs:
        with Client(server.url, admin, timeout=cfg.call_timeout_s) as api:
            for d in api.devices():
                api.drain(d.id, reason="api chaos bench: hold the jobs")
    clients = Clients(cfg, server.url, users)
    began = time.monotonic()
    server, kills = _havoc(cfg, work, port, server, clients, report, t0 + cfg.timeout_s, progress)
    for t in clients.threads:
        t.join()
    if clients.errors:
        server.kill()
        raise RuntimeError(f"a client failed: {clients.errors[0]!r}") from clients.errors[0]
    report.server_exit = server.stop()
    ack_times = sorted(a.at for a in clients.acks)
    report.submit_s = (ack_times[-1] if ack_times else time.monotonic()) - began
    report.restarts = len(kills)
    report.acknowledged = len(clients.acks)
    report.given_up = len(clients.given_up)
    report.client_retries = clients.retries
    for k in kills:
        nxt = next((t for t in ack_times if t > k), None)
        if nxt is not None:
            report.downtime_s.append(nxt - k)
    audit(work / "state.db", clients.acks, report)
    report.wall_s = time.monotonic() - t0
    shutil.rmtree(tasks_folder(work), ignore_errors=True)
    return report


def _havoc(
    cfg: ApiChaosConfig,
    work: Path,
    port: int,
    server: ServerProcess,
    clients: Clients,
    report: ApiChaosReport,
    deadline: float,
    progress: bool,
) -> tuple[ServerProcess, list[float]]:
    """Start the clients; kill and restart the server at the seeded points until they are
    done. The live server, and when each kill was (monotonic)."""
    points = kill_points(cfg)
    kills: list[float] = []
    bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                   TimeElapsedColumn(), disable=not progress)  # fmt: skip
    with bar:
        task = bar.add_task("acknowledged (0 restarts)", total=cfg.submissions)
        clients.start()
        while clients.alive():
            if time.monotonic() > deadline:
                server.kill()
                raise TimeoutError(f"api chaos run did not finish in {cfg.timeout_s} s: {work}")
            acked = clients.acked()
            bar.update(task, completed=acked)
            with clients.lock:  # the restarted server has answered: it may be killed again
                answered = not kills or any(a.at > kills[-1] for a in clients.acks[-50:])
            if points and acked >= points[0] and answered:
                points.pop(0)
                server.kill()
                kills.append(time.monotonic())
                server = ServerProcess(work, port, cfg, len(kills))
                server.wait_ready(cfg.ready_s)
                assert server.ready_at is not None
                report.up_s.append(server.ready_at - kills[-1])
                bar.update(task, description=f"acknowledged ({len(kills)} restarts)")
                continue
            time.sleep(0.01)
        bar.update(task, completed=clients.acked())
    return server, kills


def audit(db: Path, acks: list[Ack], report: ApiChaosReport) -> None:
    """Read the store: lost, duplicated, mismatched, unacknowledged, states, violations;
    and the audit log: how many retries were answered from their key."""
    from accelnet.runtime.control.invariants import violations
    from accelnet.runtime.control.sqlite_store import SqliteStore

    store = SqliteStore(db)
    try:
        records = store.jobs()
        stored = {r.id for r in records}
        names = Counter(r.spec.name for r in records)
        kept = {r.key: r for r in store.idempotency_records()}
        report.stored = len(records)
        report.keys_kept = len(kept)
        report.lost = sorted(i for a in acks for i in a.ids if i not in stored)
        report.duplicated = sorted(n for n, c in names.items() if c > 1)
        report.mismatched = sorted(
            a.key for a in acks if a.key not in kept or list(kept[a.key].jobs) != a.ids
        )
        acked_names = {job_spec(a.n)["name"] for a in acks}
        report.unacknowledged_stored = sum(c for n, c in names.items() if n not in acked_names)
        report.states = dict(Counter(r.state.value for r in records))
        live = any(not r.state.is_finished() for r in records)
        report.violations = [str(v) for v in violations(store, quiescent=not live)]
    finally:
        store.close()
    con = sqlite3.connect(db)
    try:
        query = "SELECT COUNT(*) FROM api_audit WHERE detail LIKE 'replayed %'"
        report.replayed = int(con.execute(query).fetchone()[0])
    finally:
        con.close()


def figures(report: ApiChaosReport) -> dict[str, Any]:
    """The headline numbers of a run."""
    down, up = report.downtime_s, report.up_s

    def r3(x: float | None) -> float | None:
        return None if x is None else round(x, 3)

    return {
        "submissions": report.submissions,
        "acknowledged": report.acknowledged,
        "given up": report.given_up,
        "restarts": report.restarts,
        "client retries": report.client_retries,
        "replayed by key": report.replayed,
        "lost": len(report.lost),
        "duplicated": len(report.duplicated),
        "mismatched keys": len(report.mismatched),
        "stored": report.stored,
        "stored unacknowledged": report.unacknowledged_stored,
        "keys kept": report.keys_kept,
        "violations": len(report.violations),
        "acks per s": round(report.acknowledged / report.submit_s, 1) if report.submit_s else None,
        "downtime median s": r3(statistics.median(down)) if down else None,
        "downtime max s": r3(max(down)) if down else None,
        "server up median s": r3(statistics.median(up)) if up else None,
        "server up max s": r3(max(up)) if up else None,
        "final states": report.states,
        "server exit": report.server_exit,
        "submit s": round(report.submit_s, 1),
        "wall s": round(report.wall_s, 1),
    }


def print_report(report: ApiChaosReport, console: Console) -> None:
    """The figures as a table, and the first violations."""
    cfg = report.config
    table = Table(title=f"API chaos: {cfg['submissions']:,} submissions, {cfg['clients']} "
                        f"clients, {cfg['restarts']} restarts, seed {cfg['seed']} — "
                        f"{os.cpu_count()} cores")  # fmt: skip
    table.add_column("figure")
    table.add_column("value", justify="right")
    for k, v in figures(report).items():
        table.add_row(k, str(v))
    console.print(table)
    for v in report.violations[:20]:
        console.print(f"VIOLATION {v}")
    for i in report.lost[:20]:
        console.print(f"LOST {i}")


def main() -> None:
    """Command line: run once, print a table, write JSON under bench/results/."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    d = ApiChaosConfig()
    ap.add_argument("--submissions", type=int, default=d.submissions)
    ap.add_argument("--clients", type=int, default=d.clients, help="client threads")
    ap.add_argument("--restarts", type=int, default=d.restarts, help="SIGKILL + restart")
    ap.add_argument("--seed", type=int, default=d.seed)
    ap.add_argument("--tenants", type=int, default=d.tenants, help="one user token each")
    ap.add_argument("--fabric", default=d.fabric, help="a preset, emulated")
    ap.add_argument("--run", action="store_true", help="let the jobs run (default: queued)")
    ap.add_argument("--retry-s", type=float, default=d.retry_s, help="per submission")
    ap.add_argument("--work", type=Path, default=None, help="keep the run here (default: temp)")
    ap.add_argument("--out", type=Path, default=RESULTS)
    a = ap.parse_args()
    cfg = ApiChaosConfig(a.submissions, a.clients, a.restarts, a.seed, a.tenants, a.fabric,
                         a.run, a.retry_s)  # fmt: skip
    console = Console()
    with tempfile.TemporaryDirectory(prefix="accelnet-api-chaos-") as tmp:
        report = run_api_chaos(cfg, a.work or Path(tmp), progress=True)
    print_report(report, console)
    from benchutil import source_state  # next to this file (run as a script)

    cmd = " ".join([".venv/bin/python", "bench/api_chaos_bench.py", *sys.argv[1:]])
    data = {"command": cmd, "when": datetime.now(UTC).isoformat(timespec="seconds"),
            "source": source_state(), "cores": os.cpu_count(), "figures": figures(report),
            "report": asdict(report)}  # fmt: skip
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(data, indent=2, default=str) + "\n")
    console.print(f"wrote {a.out}")
    sys.exit(0 if report.ok() else 1)


if __name__ == "__main__":
    main()
