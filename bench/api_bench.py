"""The REST API under load: ``--jobs`` submissions from ``--clients`` concurrent clients,
then a check that no job was lost.

Each repeat starts a fresh ``accelnet serve --port 0 --db FILE --rate 0 --log-level
warning`` (the console script; rate limit off, access log off) on this machine's fabric,
creates ``--tenants`` user tokens and one admin token with ``accelnet token create``, and
runs ``--clients`` threads, each an :class:`accelnet.Client` of its own (keep-alive
connection) on token ``client % tenants``, that submit their share of the jobs one call
at a time, as fast as the answers come. Every job is ``{"name": "b<client>", "run":
"true", "resources": {"accelerators": "any:1"}}``. Timed: each ``submit`` call (latency:
p50, p90, p99, max), and the whole (submissions/s: jobs over first send to last answer).

Modes, side by side in each repeat:

- ``held``: the admin drains every device first, so the jobs queue (each with its
  reason): the API, admission, the store and the scheduler's queue, without running
  anything;
- ``run``: the devices are in service and the jobs run (``/bin/sh -c true``) while the
  submissions go on; after them, the bench waits until every job has finished and
  requires every one to have succeeded;
- ``batch``: as ``held``, but ``{"jobs": [...]}`` of ``--batch`` jobs per call (jobs/s;
  the latency is per call).

No job lost: the ids the calls returned are distinct and ``--jobs`` many; the admin's
listing (``Client.jobs``, pages of 500) holds each exactly once and nothing else; each
tenant's listing holds its own; after the server has stopped (SIGTERM), the SQLite file
holds each id exactly once.

Run from the project root::

    .venv/bin/python bench/api_bench.py [--jobs 10000 --clients 16 --tenants 4
        --repeats 3 --modes held,run,batch --batch 100]

It prints a table and writes ``bench/results/api.json``. About 6 min on 2 cores.
"""

from __future__ import annotations

import argparse
import itertools
import os
import platform
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psutil
from rich.console import Console
from rich.table import Table

from accelnet.client import Client
from benchutil import run_and_report, source_state, src_label
from serveproc import ServeProcess, accelnet_cmd

ROOT = Path(__file__).resolve().parent
RESULTS = ROOT / "results" / "api.json"
MODES = ("held", "run", "batch")


def token(db: Path, tenant: str, role: str) -> str:
    """``accelnet token create``: the token it prints."""
    done = subprocess.run([*accelnet_cmd(), "token", "create", "--db", str(db), "--tenant",
                           tenant, "--role", role], capture_output=True, text=True,
                          check=True)  # fmt: skip
    return done.stdout.strip()


def pct(xs: list[float], q: float) -> float:
    """The ``q`` quantile (0..1) of sorted ``xs``, nearest rank."""
    return xs[min(len(xs) - 1, max(0, round(q * len(xs)) - 1))]


def submit_all(
    url: str, tokens: list[str], jobs: int, clients: int, batch: int
) -> tuple[float, list[float], list[tuple[int, str]], list[float]]:
    """Every client's submissions: wall seconds, per-call latencies (s), (client, id),
    and when each job's call returned (s after the start)."""
    per_call = max(1, batch)
    calls = -(-jobs // per_call)
    shares = [calls // clients + (k < calls % clients) for k in range(clients)]
    latencies: list[list[float]] = [[] for _ in range(clients)]
    ids: list[list[tuple[int, str]]] = [[] for _ in range(clients)]
    done_at: list[list[float]] = [[] for _ in range(clients)]
    began = [0.0]
    errors: list[BaseException] = []
    start = threading.Barrier(clients + 1)
    left = [jobs]
    lock = threading.Lock()

    def client(k: int) -> None:
        with Client(url, tokens[k % len(tokens)], timeout=120, rate_retries=0) as api:
            spec = {"name": f"b{k}", "run": "true", "resources": {"accelerators": "any:1"}}
            api.whoami()  # connect before the clock starts
            start.wait()
            try:
                for _ in range(shares[k]):
                    with lock:
                        n = min(per_call, left[0])
                        left[0] -= n
                    if n == 0:
                        return
                    t0 = time.perf_counter()
                    out = api.submit([spec] * n) if batch else [api.submit(spec)]
                    t1 = time.perf_counter()
                    latencies[k].append(t1 - t0)
                    done_at[k] += [t1 - began[0]] * len(out)
                    ids[k] += [(k, j.id) for j in out]
            except BaseException as exc:
                errors.append(exc)
                raise

    threads = [threading.Thread(target=client, args=(k,), daemon=True) for k in range(clients)]
    for t in threads:
        t.start()
    began[0] = time.perf_counter()
    start.wait()
    t0 = time.perf_counter()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    if errors:
        raise RuntimeError(f"a client failed: {errors[0]!r}") from errors[0]
    flat = sorted(x for xs in done_at for x in xs)
    return wall, sorted(x for xs in latencies for x in xs), [x for xs in ids for x in xs], flat


def tenths(done_at: list[float]) -> list[float]:
    """Jobs/s in each tenth of the submissions (in the order they were answered): does
    the rate hold as the store fills?"""
    n = len(done_at)
    edges = [0.0] + [done_at[min(n - 1, (i * n) // 10 - 1)] for i in range(1, 11)]
    return [(n / 10) / max(1e-9, b - a) for a, b in itertools.pairwise(edges)]


def verify(
    url: str, admin: str, tokens: list[str], tenants: list[str], sent: list[tuple[int, str]],
    jobs: int, clients: int, mode: str,
) -> dict[str, Any]:  # fmt: skip
    """Every returned id exactly once in the listings; for ``run``, every job succeeded.
    AssertionError naming what is wrong."""
    ids = [i for _, i in sent]
    assert len(ids) == jobs, f"{len(ids)} ids returned for {jobs} jobs"
    assert len(set(ids)) == jobs, f"{jobs - len(set(ids))} ids returned twice"
    out: dict[str, Any] = {}
    with Client(url, admin, timeout=300) as api:
        wait_s = None
        if mode == "run":
            t0 = time.perf_counter()
            while True:
                live = api.jobs_page("pending,admitted,starting,running", limit=1).jobs
                if not live:
                    break
                time.sleep(0.5)
            wait_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        listed = list(api.jobs(page_size=500))
        out["list_all_s"] = time.perf_counter() - t0
        out["drain_after_submit_s"] = wait_s
    listed_ids = [j.id for j in listed]
    dupes = len(listed_ids) - len(set(listed_ids))
    assert dupes == 0, f"{dupes} jobs listed twice"
    assert set(listed_ids) == set(ids), (
        f"lost: {len(set(ids) - set(listed_ids))}, unknown: {len(set(listed_ids) - set(ids))}"
    )
    states = Counter(j.state for j in listed)
    out["states"] = dict(states)
    if mode == "run":
        assert states == Counter({"succeeded": jobs}), f"states after the run: {dict(states)}"
    per_tenant = Counter(tenants[k % len(tenants)] for k, _ in sent)
    for t, tok in zip(tenants, tokens, strict=True):
        with Client(url, tok, timeout=300) as api:
            mine = [j.id for j in api.jobs(page_size=500)]
        assert len(mine) == len(set(mine)) == per_tenant[t], f"tenant {t}: {len(mine)} listed"
    out["per_tenant"] = dict(per_tenant)
    return out


def verify_db(db: Path, ids: list[str]) -> int:
    """Jobs in the SQLite file after the server stopped; AssertionError unless each
    returned id is there exactly once and nothing else."""
    con = sqlite3.connect(db)
    try:
        rows = [r[0] for r in con.execute("SELECT id FROM jobs")]
    finally:
        con.close()
    assert len(rows) == len(set(rows)) == len(ids) and set(rows) == set(ids), (
        f"store holds {len(rows)} rows ({len(set(rows))} distinct) for {len(ids)} ids"
    )
    return len(rows)


def one_run(args: argparse.Namespace, mode: str, console: Console) -> dict[str, Any]:
    """One fresh server, one mode: the figures and the checks."""
    with tempfile.TemporaryDirectory(prefix="api-bench-") as tmp:
        tmpdir = Path(tmp)
        tmpdir.chmod(0o711)  # as root the server runs tasks as tenants' users: they pass it
        tenants = [f"team{i}" for i in range(args.tenants)]
        tokens = [token(tmpdir / "state.db", t, "user") for t in tenants]
        admin = token(tmpdir / "state.db", "ops", "admin")
        server = ServeProcess(tmpdir, tmpdir / "state.db", "--rate", "0",
                              *(["--fabric", args.fabric] if args.fabric else []))  # fmt: skip
        try:
            with Client(server.url, admin) as api:
                devices = api.devices()
                if mode in ("held", "batch"):
                    for d in devices:
                        api.drain(d.id, reason="api bench: hold the jobs")
            cpu0, load0 = server.cpu_s(children=True), os.getloadavg()[0]
            me0 = psutil.Process().cpu_times()
            batch = args.batch if mode == "batch" else 0
            wall, lat, sent, done_at = submit_all(
                server.url, tokens, args.jobs, args.clients, batch
            )
            me1 = psutil.Process().cpu_times()
            cpu1, load1 = server.cpu_s(children=True), os.getloadavg()[0]
            checks = verify(server.url, admin, tokens, tenants, sent, args.jobs, args.clients,
                            mode)  # fmt: skip
        finally:
            code = server.stop()
        stored = verify_db(tmpdir / "state.db", [i for _, i in sent])
    row = {
        "mode": mode, "jobs": args.jobs, "clients": args.clients, "tenants": args.tenants,
        "per_call": max(1, batch), "devices": len(devices), "wall_s": wall,
        "jobs_per_s": args.jobs / wall, "calls_per_s": len(lat) / wall,
        "p50_ms": pct(lat, 0.50) * 1e3, "p90_ms": pct(lat, 0.90) * 1e3,
        "p99_ms": pct(lat, 0.99) * 1e3, "max_ms": lat[-1] * 1e3,
        "server_cpu_s": cpu1 - cpu0,
        "bench_cpu_s": (me1.user + me1.system) - (me0.user + me0.system),
        "load_before": load0, "load_after": load1, "stored": stored, "server_exit": code,
        "lost": 0, "jobs_per_s_by_tenth": tenths(done_at), **checks,
    }  # fmt: skip
    drained = checks["drain_after_submit_s"]
    tail = "" if drained is None else f"; all ran in {drained:.1f} s more"
    console.print(f"  {mode}: {row['jobs_per_s']:,.0f} jobs/s, p50 {row['p50_ms']:.1f} ms, "
                  f"p99 {row['p99_ms']:.1f} ms; {stored} stored, none lost{tail}")  # fmt: skip
    return row


def run(args: argparse.Namespace, console: Console) -> dict[str, Any]:
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    bad = [m for m in modes if m not in MODES]
    if bad:
        sys.exit(f"--modes: unknown {', '.join(bad)}; valid: {', '.join(MODES)}")
    rows = []
    for r in range(args.repeats):
        console.print(f"repeat {r + 1}/{args.repeats}")
        rows += [{"repeat": r, **one_run(args, mode, console)} for mode in modes]
    keys = ("jobs_per_s", "calls_per_s", "p50_ms", "p90_ms", "p99_ms", "max_ms", "wall_s",
            "server_cpu_s", "bench_cpu_s", "list_all_s")  # fmt: skip
    medians = {}
    for mode in modes:
        mine = [x for x in rows if x["mode"] == mode]
        medians[mode] = {k: statistics.median(x[k] for x in mine) for k in keys}
        for name, i in (("first_tenth_jobs_per_s", 0), ("last_tenth_jobs_per_s", -1)):
            medians[mode][name] = statistics.median(x["jobs_per_s_by_tenth"][i] for x in mine)
        runs = [x["drain_after_submit_s"] for x in mine if x["drain_after_submit_s"] is not None]
        if runs:
            medians[mode]["drain_after_submit_s"] = statistics.median(runs)
    cpu = next((ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text()
                .splitlines() if ln.startswith("model name")), platform.processor())  # fmt: skip
    return {
        "benchmark": "api",
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "source": source_state(),
        "machine": {"cores": os.cpu_count(), "cpu": cpu, "python": platform.python_version()},
        "isolation": "per-tenant users" if os.geteuid() == 0 else "trusted tasks (not root)",
        "args": {k: v for k, v in vars(args).items() if k != "out"},
        "runs": rows,
        "medians": medians,
    }


def report(result: dict[str, Any], console: Console) -> None:
    a, m = result["args"], result["machine"]
    title = (f"API submissions: {a['jobs']:,} jobs, {a['clients']} clients, {a['tenants']} "
             f"tenants; medians of {a['repeats']} — {m['cores']} cores, "
             f"{src_label(result['source'])}")  # fmt: skip
    t = Table(title=title)
    cols = ("mode", "jobs/call", "jobs/s", "calls/s", "p50 ms", "p90 ms", "p99 ms", "max ms",
            "server CPU s", "bench CPU s", "list all s", "ran in s", "first/last tenth jobs/s",
            "runs: jobs/s")  # fmt: skip
    for col in cols:
        t.add_column(col, justify="left" if col == "mode" else "right")
    for mode, med in result["medians"].items():
        mine = [x for x in result["runs"] if x["mode"] == mode]
        per = mine[0]["per_call"]
        drain = med.get("drain_after_submit_s")
        t.add_row(
            mode, str(per), f"{med['jobs_per_s']:,.0f}", f"{med['calls_per_s']:,.0f}",
            f"{med['p50_ms']:.1f}", f"{med['p90_ms']:.1f}", f"{med['p99_ms']:.1f}",
            f"{med['max_ms']:.0f}", f"{med['server_cpu_s']:.1f}", f"{med['bench_cpu_s']:.1f}",
            f"{med['list_all_s']:.1f}", "-" if drain is None else f"{drain:.1f}",
            f"{med['first_tenth_jobs_per_s']:,.0f} / {med['last_tenth_jobs_per_s']:,.0f}",
            " ".join(f"{x['jobs_per_s']:,.0f}" for x in mine),
        )  # fmt: skip
    console.print(t)
    console.print("no job lost: every returned id listed once (admin and per tenant) and "
                  "stored once in the SQLite file, in every run")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=10_000, help="submissions per run")
    parser.add_argument("--clients", type=int, default=16, help="concurrent clients (threads)")
    parser.add_argument("--tenants", type=int, default=4, help="user tokens, one per tenant")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--modes", default=",".join(MODES), help="held, run, batch")
    parser.add_argument("--batch", type=int, default=100, help="jobs per call in batch mode")
    parser.add_argument("--fabric", default=None, help="default: this machine")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    run_and_report(args, run, report, args.out)


if __name__ == "__main__":
    main()
