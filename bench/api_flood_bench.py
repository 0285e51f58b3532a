"""One tenant floods the REST API at its rate limit: how much slower does another
tenant's service get?

Each repeat starts a fresh ``accelnet serve --port 0 --db FILE --log-level warning`` (the
console script, the default rate limit of 50 requests/s per token, bursts of 100) on a
database seeded beforehand with ``--jobs`` finished jobs of two tenants (``a`` and ``b``,
``--b-share`` of them ``b``'s; each with the five events of its life), on this machine's
fabric. Tenant ``b`` makes requests one at a time, paced at ``--b-rate`` per second
(``whoami``, a page of its 10 newest jobs, one of its jobs, its events after the newest
it has seen, in turn), ``--requests`` of them in each of two phases, side by side:

- ``alone``: nothing else happens;
- ``flood``: meanwhile tenant ``a`` sends at ``--a-rate`` per second (default: its rate
  limit) on a fixed schedule from ``--a-threads`` connections, whatever the answers:
  pages of 100 jobs (the default page, 4 in 10), the next page through its cursor (2 in
  10), pages of 1, pages of its failed jobs, 500 events from the start, one job (1 in 10
  each), and (1 in 20) a cancel of a finished job (409: an audit entry written and synced).

The phases alternate which goes first from one repeat to the next. Timed: every request
of ``b`` (latency: p50, p99), and ``a``'s answers (how many, how many 429, p50). The
target: ``b``'s p99 during the flood within 2x its p99 alone.

The server runs in the default isolation (as root: per-tenant users; without root
``--trusted-tasks``, as ``serve`` requires there; the JSON says which). Run from the
project root::

    .venv/bin/python bench/api_flood_bench.py [--jobs 10000 --requests 400 --repeats 3]

It prints a table and writes ``bench/results/api_flood.json``. About 4 min on 2 cores.
"""

from __future__ import annotations

import argparse
import itertools
import multiprocessing
import multiprocessing.queues
import os
import platform
import random
import statistics
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
from rich.console import Console
from rich.table import Table

from accelnet.api.db import ApiDb
from accelnet.api.tenants import Tenants
from accelnet.api.tokens import Role, Tokens
from accelnet.runtime.control.sqlite_store import SqliteStore
from accelnet.runtime.control.store import JobRecord
from accelnet.sched import JobSpec, JobState
from benchutil import run_and_report, source_state, src_label
from serveproc import ServeProcess

ROOT = Path(__file__).resolve().parent
RESULTS = ROOT / "results" / "api_flood.json"
V1 = "/api/v1"
LIFE = (JobState.ADMITTED, JobState.STARTING, JobState.RUNNING)
ENDS = (JobState.SUCCEEDED, JobState.SUCCEEDED, JobState.SUCCEEDED, JobState.FAILED,
        JobState.CANCELLED)  # fmt: skip


def seed(db: Path, jobs: int, b_share: float, seed_: int) -> dict[str, list[str]]:
    """``jobs`` finished jobs of tenants a and b in a fresh store (each its own spec), each
    with the events of its life (pending, admitted, starting, running, its end); their ids
    by tenant."""
    rng = random.Random(seed_)
    store = SqliteStore(db)
    ids: dict[str, list[str]] = {"a": [], "b": []}
    now = time.time() - jobs
    try:
        with store.atomic():
            for i in range(jobs):
                tenant = "b" if rng.random() < b_share else "a"
                jid = f"{tenant}-job-{i:08x}"
                at = now + i
                spec = JobSpec.model_validate(
                    {
                        "name": f"{tenant}-job",
                        "run": f"echo {i}",
                        "tenant": tenant,
                        "env": {"DATA": "x" * 200},
                    }
                )
                store.add(JobRecord(jid, spec, JobState.PENDING, at))
                for k, state in enumerate((*LIFE, rng.choice(ENDS)), start=1):
                    store.transition(jid, state, at + k * 0.1, f"bench seed {state.value}")
                ids[tenant].append(jid)
    finally:
        store.close()
    return ids


def make_tokens(db: Path) -> dict[str, str]:
    """A user token of each tenant."""
    api = ApiDb(db)
    try:
        tokens, tenants = Tokens(api), Tenants(api)
        out = {}
        for t in ("a", "b"):
            out[t] = tokens.create(t, Role.USER, f"bench-{t}", time.time())[1]
            tenants.ensure(t, time.time())
        return out
    finally:
        api.close()


def pct(xs: list[float], q: float) -> float:
    """The ``q`` quantile (0..1) of ``xs``, nearest rank."""
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, round(q * len(s)) - 1))]


def tenant_b(url: str, token: str, jobs: list[str], n: int, rate: float) -> dict[str, Any]:
    """``n`` requests of tenant b, one at a time, paced at ``rate`` per second: latencies
    (s) of all, and of ``whoami`` alone; AssertionError on an answer other than 200."""
    lat: list[float] = []
    who: list[float] = []
    since = 0
    rng = random.Random(1)
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"},
                      timeout=120) as c:  # fmt: skip
        c.get(f"{V1}/whoami")  # connect before the clock starts
        start = time.perf_counter()
        for i in range(n):
            pause = start + i / rate - time.perf_counter()
            if pause > 0:
                time.sleep(pause)
            kind = i % 4
            t0 = time.perf_counter()
            if kind == 0:
                r = c.get(f"{V1}/whoami")
            elif kind == 1:
                r = c.get(f"{V1}/jobs", params={"limit": 10})
            elif kind == 2:
                r = c.get(f"{V1}/jobs/{rng.choice(jobs)}")
            else:
                r = c.get(f"{V1}/events", params={"since": since, "limit": 100})
            dt = time.perf_counter() - t0
            assert r.status_code == 200, (r.status_code, r.text[:300])
            if kind == 3:
                since = int(r.json()["next"])
            lat.append(dt)
            if kind == 0:
                who.append(dt)
    return {"lat": lat, "whoami": who}


class Flood:
    """Tenant a at ``rate`` requests/s from ``threads`` connections on a fixed schedule
    (request i is sent at start + i / rate, or as soon as a connection is free after), in
    a process of its own (its work never delays b's measurements in this one)."""

    def __init__(self, url: str, token: str, jobs: list[str], rate: float, threads: int) -> None:
        ctx = multiprocessing.get_context("spawn")
        self._stop = ctx.Event()
        self._ready = ctx.Event()
        self._out: multiprocessing.queues.Queue[dict[str, Any]] = ctx.Queue()
        self._proc = ctx.Process(
            target=flood_main,
            args=(url, token, jobs, rate, threads, self._stop, self._ready, self._out),
            daemon=True,
        )
        self.result: dict[str, Any] = {}

    def __enter__(self) -> Flood:
        self._proc.start()
        if not self._ready.wait(120):
            raise RuntimeError("the flood did not start")
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self.result = self._out.get(timeout=300)
        self._proc.join(60)


def flood_main(
    url: str, token: str, jobs: list[str], rate: float, threads: int, stop: Any, ready: Any,
    out: Any,
) -> None:  # fmt: skip
    """The flood's process: ``threads`` senders until ``stop``; puts what they got."""
    counter = itertools.count()
    lock = threading.Lock()
    codes: dict[int, int] = {}
    lat: list[float] = []
    errors: list[str] = []
    start = time.perf_counter() + 0.2

    def send(k: int) -> None:
        rng = random.Random(k)
        cursor: str | None = None
        with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"},
                          timeout=120) as c:  # fmt: skip
            while not stop.is_set():
                with lock:
                    i = next(counter)
                pause = start + i / rate - time.perf_counter()
                if pause > 0 and stop.wait(pause):
                    return
                kind = i % 10
                t0 = time.perf_counter()
                try:
                    if kind in (0, 1, 2, 3):
                        r = c.get(f"{V1}/jobs")  # the default page: 100 jobs
                        cursor = r.json().get("next") if r.status_code == 200 else cursor
                    elif kind in (4, 5) and cursor:
                        r = c.get(f"{V1}/jobs", params={"cursor": cursor})
                        cursor = r.json().get("next") if r.status_code == 200 else None
                    elif kind == 6:
                        r = c.get(f"{V1}/jobs", params={"limit": 1})
                    elif kind == 7:
                        r = c.get(f"{V1}/jobs", params={"state": "failed"})
                    elif kind == 8:
                        r = c.get(f"{V1}/events", params={"since": 0, "limit": 500})
                    elif (i // 10) % 2:  # cancel a finished job: 409, and an audit entry
                        r = c.post(f"{V1}/jobs/{rng.choice(jobs)}/cancel")
                    else:
                        r = c.get(f"{V1}/jobs/{rng.choice(jobs)}")
                except httpx.HTTPError as exc:
                    with lock:
                        errors.append(repr(exc))
                    continue
                dt = time.perf_counter() - t0
                with lock:
                    codes[r.status_code] = codes.get(r.status_code, 0) + 1
                    lat.append(dt)

    senders = [threading.Thread(target=send, args=(k,), daemon=True) for k in range(threads)]
    for t in senders:
        t.start()
    ready.set()
    for t in senders:
        t.join()
    out.put({"codes": codes, "lat": lat, "errors": errors, "span": time.perf_counter() - start})


def phase(
    args: argparse.Namespace, server: ServeProcess, tokens: dict[str, str],
    ids: dict[str, list[str]],
    flood: bool,
) -> dict[str, Any]:  # fmt: skip
    """One phase of b's requests, alone or during a's flood: ``--blocks`` blocks of
    ``--requests / --blocks`` requests each, the two phases' blocks taking turns (see
    :func:`one_repeat`); this is one block."""
    n = max(1, args.requests // args.blocks)
    cpu0 = server.cpu_s()
    if not flood:
        t0 = time.perf_counter()
        b = tenant_b(server.url, tokens["b"], ids["b"], n, args.b_rate)
        wall = time.perf_counter() - t0
        return {"b": b, "wall_s": wall, "server_cpu_s": server.cpu_s() - cpu0}
    with Flood(server.url, tokens["a"], ids["a"], args.a_rate, args.a_threads) as f:
        time.sleep(1.0)  # the flood is on before b starts
        cpu0 = server.cpu_s()
        t0 = time.perf_counter()
        b = tenant_b(server.url, tokens["b"], ids["b"], n, args.b_rate)
        wall = time.perf_counter() - t0
        cpu1 = server.cpu_s()
    return {"b": b, "wall_s": wall, "server_cpu_s": cpu1 - cpu0, "a": f.result}


def summary(name: str, blocks: list[dict[str, Any]]) -> dict[str, Any]:
    """One phase's figures over its blocks (b's latencies pooled)."""
    lat = [x for blk in blocks for x in blk["b"]["lat"]]
    who = [x for blk in blocks for x in blk["b"]["whoami"]]
    row: dict[str, Any] = {
        "phase": name,
        "b_p50_ms": pct(lat, 0.50) * 1e3,
        "b_p99_ms": pct(lat, 0.99) * 1e3,
        "b_max_ms": max(lat) * 1e3,
        "b_whoami_p50_ms": pct(who, 0.50) * 1e3,
        "b_whoami_p99_ms": pct(who, 0.99) * 1e3,
        "b_requests": len(lat),
        "b_p99_ms_by_block": [pct(blk["b"]["lat"], 0.99) * 1e3 for blk in blocks],
        "wall_s": sum(blk["wall_s"] for blk in blocks),
        "server_cpu_s": sum(blk["server_cpu_s"] for blk in blocks),
        "server_cpu_share": sum(blk["server_cpu_s"] for blk in blocks)
        / sum(blk["wall_s"] for blk in blocks),
        "load": os.getloadavg()[0],
    }
    floods = [blk["a"] for blk in blocks if "a" in blk]
    if floods:
        codes: dict[int, int] = {}
        for got in floods:
            for k, v in got["codes"].items():
                codes[k] = codes.get(k, 0) + v
        span = sum(got["span"] for got in floods)
        a_lat = [x for got in floods for x in got["lat"]]
        row.update(
            a_answers=sum(codes.values()), a_per_s=sum(codes.values()) / span,
            a_ok_per_s=(sum(codes.values()) - codes.get(429, 0)) / span, a_429=codes.get(429, 0),
            a_codes={str(k): v for k, v in codes.items()},
            a_errors=sum(len(got["errors"]) for got in floods),
            a_p50_ms=pct(a_lat, 0.5) * 1e3, a_p99_ms=pct(a_lat, 0.99) * 1e3,
        )  # fmt: skip
    return row


def one_repeat(args: argparse.Namespace, r: int, console: Console) -> list[dict[str, Any]]:
    """A fresh seeded server; the blocks of both phases, taking turns (alone first in
    even repeats, the flood first in odd ones), so that both see the same machine."""
    with tempfile.TemporaryDirectory(prefix="api-flood-") as tmp:
        tmpdir = Path(tmp)
        db = tmpdir / "state.db"
        t0 = time.perf_counter()
        ids = seed(db, args.jobs, args.b_share, args.seed + r)
        seeded = time.perf_counter() - t0
        tokens = make_tokens(db)
        tmpdir.chmod(0o711)  # as root the server runs tasks as tenants' users: they pass it
        server = ServeProcess(tmpdir, db, *(["--fabric", args.fabric] if args.fabric else []))
        blocks: dict[bool, list[dict[str, Any]]] = {False: [], True: []}
        try:
            for k in range(2 * args.blocks):
                flood = (k % 2 == 1) != (r % 2 == 1)
                blocks[flood].append(phase(args, server, tokens, ids, flood))
        finally:
            code = server.stop()
        rows = []
        for flood in (False, True):
            row = summary("flood" if flood else "alone", blocks[flood])
            row.update(repeat=r, seed_s=seeded, jobs_a=len(ids["a"]), jobs_b=len(ids["b"]),
                       server_exit=code)  # fmt: skip
            rows.append(row)
            extra = (f"; a: {row['a_per_s']:.1f} answers/s ({row['a_429']} 429), "
                     f"p50 {row['a_p50_ms']:.0f} ms") if flood else ""  # fmt: skip
            console.print(f"  {row['phase']:>5}: b p50 {row['b_p50_ms']:.1f} ms, "
                          f"p99 {row['b_p99_ms']:.1f} ms; server CPU "
                          f"{row['server_cpu_share']:.0%}{extra}")  # fmt: skip
    return rows


def run(args: argparse.Namespace, console: Console) -> dict[str, Any]:
    rows = []
    for r in range(args.repeats):
        console.print(f"repeat {r + 1}/{args.repeats}")
        rows += one_repeat(args, r, console)
    keys = ("b_p50_ms", "b_p99_ms", "b_max_ms", "b_whoami_p50_ms", "b_whoami_p99_ms",
            "server_cpu_s", "server_cpu_share", "wall_s")  # fmt: skip
    medians: dict[str, dict[str, float]] = {}
    for ph in ("alone", "flood"):
        mine = [x for x in rows if x["phase"] == ph]
        medians[ph] = {k: statistics.median(x[k] for x in mine) for k in keys}
    flooded = [x for x in rows if x["phase"] == "flood"]
    for k in ("a_per_s", "a_ok_per_s", "a_p50_ms", "a_p99_ms", "a_429"):
        medians["flood"][k] = statistics.median(x[k] for x in flooded)
    ratios = []
    for r in range(args.repeats):
        pair = {x["phase"]: x for x in rows if x["repeat"] == r}
        ratios.append(pair["flood"]["b_p99_ms"] / pair["alone"]["b_p99_ms"])
    cpu = next((ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text()
                .splitlines() if ln.startswith("model name")), platform.processor())  # fmt: skip
    return {
        "benchmark": "api_flood",
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "source": source_state(),
        "machine": {"cores": os.cpu_count(), "cpu": cpu, "python": platform.python_version()},
        "isolation": "per-tenant users" if os.geteuid() == 0 else "trusted tasks (not root)",
        "args": {k: v for k, v in vars(args).items() if k != "out"},
        "runs": rows,
        "medians": medians,
        "p99_ratio_per_repeat": ratios,
        "p99_ratio_median": statistics.median(ratios),
        "p99_ratio_of_medians": medians["flood"]["b_p99_ms"] / medians["alone"]["b_p99_ms"],
    }


def report(result: dict[str, Any], console: Console) -> None:
    a, m, med = result["args"], result["machine"], result["medians"]
    title = (f"Tenant b while tenant a floods at {a['a_rate']:g}/s: {a['jobs']:,} stored jobs, "
             f"{a['requests']} requests of b per phase at {a['b_rate']:g}/s; medians of "
             f"{a['repeats']} — {m['cores']} cores, {src_label(result['source'])}")  # fmt: skip
    t = Table(title=title)
    cols = ("phase", "b p50 ms", "b p99 ms", "b max ms", "b whoami p50 ms", "b whoami p99 ms",
            "server CPU s", "a answers/s", "a served/s", "a 429", "a p50 ms", "a p99 ms",
            "runs: b p99 ms")  # fmt: skip
    for col in cols:
        t.add_column(col, justify="left" if col == "phase" else "right")
    for ph in ("alone", "flood"):
        x = med[ph]
        mine = [r for r in result["runs"] if r["phase"] == ph]
        flood = ph == "flood"
        t.add_row(
            ph, f"{x['b_p50_ms']:.1f}", f"{x['b_p99_ms']:.1f}", f"{x['b_max_ms']:.0f}",
            f"{x['b_whoami_p50_ms']:.1f}", f"{x['b_whoami_p99_ms']:.1f}",
            f"{x['server_cpu_s']:.1f}",
            f"{x['a_per_s']:.1f}" if flood else "-", f"{x['a_ok_per_s']:.1f}" if flood else "-",
            f"{x['a_429']:.0f}" if flood else "-", f"{x['a_p50_ms']:.1f}" if flood else "-",
            f"{x['a_p99_ms']:.1f}" if flood else "-",
            " ".join(f"{r['b_p99_ms']:.1f}" for r in mine),
        )  # fmt: skip
    console.print(t)
    ratios = " ".join(f"{x:.2f}" for x in result["p99_ratio_per_repeat"])
    verdict = "met" if result["p99_ratio_median"] <= 2.0 else "NOT met"
    console.print(f"b's p99 flood/alone: median {result['p99_ratio_median']:.2f}x "
                  f"(per repeat: {ratios}); target <= 2x: {verdict}")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=10_000, help="stored jobs (both tenants)")
    parser.add_argument("--b-share", type=float, default=0.5, help="share of them b's")
    parser.add_argument("--requests", type=int, default=400, help="b's requests per phase")
    parser.add_argument("--blocks", type=int, default=4,
                        help="blocks per phase (the phases' blocks take turns)")  # fmt: skip
    parser.add_argument("--b-rate", type=float, default=20.0, help="b's requests per second")
    parser.add_argument("--a-rate", type=float, default=50.0,
                        help="a's requests per second (default: serve's --rate)")  # fmt: skip
    parser.add_argument("--a-threads", type=int, default=8, help="a's connections")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--fabric", default=None, help="default: this machine")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    run_and_report(args, run, report, args.out)


if __name__ == "__main__":
    main()
