"""What a page of the list endpoints costs, counted (rows decoded, SQLite's own steps),
never timed: the same with 1,000 jobs stored as with 3,000; the statements are index
searches; the pages are the same as filtering every job; and the limits that keep
refused calls from costing anything (the sampler of the audit log, pruning, the rate of
requests without a token per address, each sender's fair share)."""

from __future__ import annotations

import random
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from accelnet.api.audit import AuditLog, AuditMiddleware, RefusalSampler
from accelnet.api.db import ApiDb
from accelnet.api.jobs import JobService
from accelnet.api.limits import AnonymousLimitMiddleware, FairShareMiddleware, RateLimiter
from accelnet.api.tokens import Principal, Role
from accelnet.runtime.clock import ManualClock
from accelnet.runtime.control.sqlite_store import SqliteStore, event_page_queries, job_page_queries
from accelnet.runtime.control.store import JobRecord, MemoryStore, Store
from accelnet.sched import JobSpec, JobState

STATES = list(JobState)


def fill(store: Store, n: int, start: int = 0, seed: int = 0) -> None:
    """``n`` jobs, nine in ten of tenant a, in random states; some device events."""
    rng = random.Random(seed)
    with store.atomic():
        for i in range(start, start + n):
            tenant = "b" if i % 10 == 0 else "a"
            spec = JobSpec.model_validate(
                {"name": rng.choice(("x", "y")), "run": f"echo {i}", "tenant": tenant}
            )
            store.add(JobRecord(f"{tenant}-{i}", spec, rng.choice(STATES), float(i)))
            store.log(f"{tenant}-{i}", float(i), "task:news", "started")
            if i % 7 == 0:
                store.log(None, float(i), "device:ready", f"h/gpu{i % 4}: after {tenant}-{i}")


class Port:
    """What JobService needs of a cluster: a store, and reasons (none)."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def reason(self, job_id: str) -> str | None:
        return None

    def reasons(self, job_ids: list[str]) -> dict[str, str | None]:
        return dict.fromkeys(job_ids)


class Counted:
    """Rows a SqliteStore decodes and SQLite virtual-machine steps (in hundreds) while
    ``with`` is open."""

    def __init__(self, store: SqliteStore, monkeypatch: pytest.MonkeyPatch) -> None:
        self.store = store
        self.rows = 0
        self.steps = 0
        decode = store._record

        def counting(row: tuple[Any, ...]) -> JobRecord:
            self.rows += 1
            return decode(row)

        monkeypatch.setattr(store, "_record", counting)

    def __enter__(self) -> Counted:
        self.rows = self.steps = 0

        def step() -> int:
            self.steps += 1
            return 0

        self.store._db.set_progress_handler(step, 100)
        return self

    def __exit__(self, *exc: object) -> None:
        self.store._db.set_progress_handler(None, 100)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SqliteStore]:
    s = SqliteStore(tmp_path / "s.db")
    yield s
    s.close()


LISTS = [  # (who, state, tenant, name, limit)
    (Principal("t", "b", Role.VIEWER), None, None, None, 10),
    (Principal("t", "b", Role.VIEWER), "failed", None, None, 2),
    (Principal("t", "b", Role.VIEWER), "pending,admitted,running", None, "x", 2),
    (Principal("t", "b", Role.VIEWER), None, None, "y", 1),
    (Principal("t", "a", Role.USER), None, None, None, 100),
    (Principal("t", "ops", Role.ADMIN), None, None, None, 50),
    (Principal("t", "ops", Role.ADMIN), "succeeded", "b", None, 2),
    (Principal("t", "ops", Role.ADMIN), "cancelled", None, "x", 5),
]


def test_a_page_of_jobs_costs_the_same_with_three_times_the_jobs(
    store: SqliteStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    jobs = JobService(Port(store), None, None)  # type: ignore[arg-type]
    count = Counted(store, monkeypatch)
    costs: dict[int, list[tuple[int, int]]] = {}
    for total in (1000, 3000):
        fill(store, total - len(store.jobs()), start=len(store.jobs()))
        costs[total] = []
        for who, state, tenant, name, limit in LISTS:
            first = jobs.list(who, state, tenant, name, limit, None)
            assert first.next is not None, (who, state, name)  # a second page exists
            with count:
                page = jobs.list(who, state, tenant, name, limit, first.next)
            assert len(page.jobs) == limit  # a whole page, at both sizes
            assert count.rows <= limit + 1, (who.tenant, state, name, count.rows)
            costs[total].append((count.rows, count.steps))
    for (rows1, steps1), (rows3, steps3) in zip(costs[1000], costs[3000], strict=True):
        assert rows1 == rows3  # the rows decoded: the page's (and one more)
        assert steps3 <= steps1 + 5, (steps1, steps3)  # SQLite's work: no scan of all jobs


def test_a_page_of_events_costs_the_same_with_three_times_the_jobs(store: SqliteStore) -> None:
    steps = [0]

    def step() -> int:
        steps[0] += 1
        return 0

    costs = []
    for total in (1000, 3000):
        fill(store, total - len(store.jobs()), start=len(store.jobs()))
        for tenant in ("b", "a", None):
            store._db.set_progress_handler(step, 100)
            steps[0] = 0
            found, _ = store.events_page(0, 20, tenant)
            store._db.set_progress_handler(None, 100)
            assert len(found) == 20
            costs.append((total, tenant, steps[0]))
    for (_, tenant, few), (_, _, many) in zip(costs[:3], costs[3:], strict=True):
        assert many <= few + 5, (tenant, few, many)


def _plan(con: sqlite3.Connection, sql: str, args: tuple[Any, ...]) -> list[str]:
    return [row[3] for row in con.execute("EXPLAIN QUERY PLAN " + sql, args)]


def test_every_page_statement_searches_an_index_in_its_order(store: SqliteStore) -> None:
    fill(store, 300)
    for tenant in (None, "b"):
        for states in (None, ["running"], ["pending", "failed"]):
            for name in (None, "x"):
                for top in (None, 100):
                    for sql, args in job_page_queries(10, tenant, states, name, top):
                        plan = _plan(store._db, sql, args)
                        assert len(plan) == 1 and plan[0].startswith("SEARCH jobs USING"), plan
                        assert "INDEX" in plan[0] or "PRIMARY KEY" in plan[0], plan
        for sql, args in event_page_queries(0, 10, tenant, 500):
            plan = _plan(store._db, sql, args)
            assert len(plan) == 1 and plan[0].startswith("SEARCH events USING"), plan


def _all_pages(store: Store, limit: int, **filters: Any) -> list[str]:
    got: list[str] = []
    before = None
    while True:
        page = store.jobs_page(limit + 1, before=before, **filters)
        got += [r.id for r in page[:limit]]
        if len(page) <= limit:
            return got
        before = page[limit - 1].id


@pytest.mark.parametrize("kind", ["sqlite", "memory"])
def test_pages_hold_what_filtering_every_job_holds(tmp_path: Path, kind: str) -> None:
    store: Store = SqliteStore(tmp_path / "s.db") if kind == "sqlite" else MemoryStore()
    fill(store, 400, seed=3)
    everything = store.jobs()
    for tenant in (None, "a", "b", "nobody"):
        for states in (None, [JobState.RUNNING], [JobState.PENDING, JobState.FAILED], []):
            for name in (None, "x"):
                wanted = [
                    r.id
                    for r in reversed(everything)
                    if tenant in (None, r.spec.tenant)
                    and (states is None or r.state in states)
                    and name in (None, r.spec.name)
                ]
                for limit in (1, 7, 500):
                    got = _all_pages(store, limit, tenant=tenant, states=states, name=name)
                    assert got == wanted, (kind, tenant, states, name, limit)
    with pytest.raises(Exception, match="no job"):
        store.jobs_page(5, before="nosuch")
    for tenant in (None, "a", "b"):
        seen: list[int] = []
        since = 0
        while True:
            found, nxt = store.events_page(since, 9, tenant)
            seen += [e.seq for e in found]
            if nxt == since:
                break
            since = nxt
        mine = [e.seq for e in Store.events_page(store, 0, 10**9, tenant)[0]]
        assert seen == mine and mine, (kind, tenant)
    store.close()


def test_a_file_without_event_tenants_gets_them_when_opened(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    store = SqliteStore(path)
    fill(store, 50)
    before = store.events_page(0, 1000, "b")[0]
    store.close()
    con = sqlite3.connect(path)  # as an accelnet before the column wrote it
    con.executescript("DROP INDEX events_tenant; ALTER TABLE events DROP COLUMN tenant;")
    con.close()
    again = SqliteStore(path)
    assert again.events_page(0, 1000, "b")[0] == before and before
    again.close()


def test_refused_calls_are_written_while_the_sender_has_allowance() -> None:
    clock = ManualClock(1000.0)
    sampler = RefusalSampler(clock, burst=3, every_s=60.0, all_burst=5, all_rate=1.0)
    assert [sampler.admit("10.0.0.1", 401) for _ in range(5)] == [True] * 3 + [False] * 2
    assert sampler.admit("10.0.0.2", 401) and sampler.admit("10.0.0.2", 429)
    assert not sampler.admit("10.0.0.3", 401)  # every sender's allowance is spent too
    clock.advance(60.0)
    assert sampler.admit("10.0.0.1", 429) and not sampler.admit("10.0.0.1", 429)
    found = sampler.summary()
    assert found is not None
    total, status, text = found
    assert (total, status) == (4, 401)
    assert "4 refused calls" in text and "3 from 10.0.0.1 (401: 2, 429: 1)" in text
    assert "1 from 10.0.0.3" in text
    assert sampler.summary() is None  # counted anew


def test_pruning_keeps_the_newest_within_the_bounds_in_batches(tmp_path: Path) -> None:
    db = ApiDb(tmp_path / "a.db")
    audit = AuditLog(db)
    for i in range(300):
        audit.record(float(i), None, "POST", "/x", 401, "")
    assert audit.prune(before=100.0, max_rows=0, batch=40) == 100  # older than 100
    assert [e.at for e in audit.since(0, 1)] == [100.0]
    assert audit.prune(before=0.0, max_rows=50, batch=40) == 150  # the newest 50 kept
    kept = audit.since(0, 1000)
    assert [e.at for e in kept] == [float(i) for i in range(250, 300)]
    assert audit.prune(before=0.0, max_rows=50) == 0
    db.close()


async def _ok(scope: dict[str, Any], receive: Any, send: Any) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"ok"})


def test_requests_without_a_token_are_limited_per_address() -> None:
    calls = []

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        calls.append(scope["path"])
        await _ok(scope, receive, send)

    limiter = RateLimiter(1.0, 3, ManualClock(0.0))
    guarded = AnonymousLimitMiddleware(app, limiter)

    async def main() -> list[httpx.Response]:
        transport = httpx.ASGITransport(app=guarded, client=("10.1.1.1", 5000))
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as c:
            got = [await c.post("/api/v1/jobs", content=b"{}") for _ in range(5)]
            got.append(await c.get("/healthz"))  # public: not counted
            got.append(await c.get("/api/v1/whoami", headers={"Authorization": "Bearer x"}))
            return got

    got = anyio.run(main)
    assert [r.status_code for r in got] == [200, 200, 200, 429, 429, 200, 200]
    assert got[3].headers["Retry-After"] == "1"
    assert got[3].json()["error"]["code"] == "rate_limited"
    assert calls == ["/api/v1/jobs"] * 3 + ["/healthz", "/api/v1/whoami"]


def test_each_sender_has_two_requests_in_progress_at_most() -> None:
    inside: dict[str, int] = {}
    most: dict[str, int] = {}
    entered = [0]
    release = anyio.Event()

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        who = dict(scope["headers"]).get(b"authorization", b"-").decode()
        entered[0] += 1
        inside[who] = inside.get(who, 0) + 1
        most[who] = max(most.get(who, 0), inside[who])
        await release.wait()  # hold the turn until the test has seen who got one
        inside[who] -= 1
        await _ok(scope, receive, send)

    fair = FairShareMiddleware(app, limit=2)
    answers: list[int] = []

    async def get(c: httpx.AsyncClient, who: str) -> None:
        answers.append((await c.get("/x", headers={"Authorization": who})).status_code)

    async def main() -> None:
        transport = httpx.ASGITransport(app=fair)
        async with (
            httpx.AsyncClient(transport=transport, base_url="http://t") as c,
            anyio.create_task_group() as tg,
        ):
            for who in ("a", "a", "a", "a", "a", "a", "b", "b", "b"):
                tg.start_soon(get, c, who)
            with anyio.fail_after(60):
                while entered[0] < 4:
                    await anyio.sleep(0.001)
            await anyio.sleep(0.05)  # room for a fifth to enter, if it could
            assert entered[0] == 4 and inside == {"a": 2, "b": 2}
            release.set()

    anyio.run(main)
    assert most == {"a": 2, "b": 2} and answers == [200] * 9
    assert fair._senders == {}  # nothing kept once the requests are answered


def test_a_change_is_in_the_audit_log_before_its_caller_hears_the_answer(
    tmp_path: Path,
) -> None:
    # the server sends what the app sends as it goes: an entry written after the answer
    # (as it was) let a caller read the log without its own change (seen under load)
    db = ApiDb(tmp_path / "a.db")
    audit = AuditLog(db)
    seen: list[tuple[str, int]] = []

    async def send(message: dict[str, Any]) -> None:
        seen.append((message["type"], len(audit.since(0, 10))))

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def crash(scope: dict[str, Any], receive: Any, send: Any) -> None:
        raise RuntimeError("the handler crashed before answering")

    scope = {"type": "http", "method": "POST", "path": "/api/v1/jobs", "state": {}}
    anyio.run(AuditMiddleware(_ok, audit, ManualClock(1.0)), dict(scope), receive, send)
    assert seen[0] == ("http.response.start", 1)  # written before the caller hears
    assert [(e.status, e.path) for e in audit.since(0, 10)] == [(200, "/api/v1/jobs")]
    with pytest.raises(RuntimeError, match="crashed"):
        anyio.run(AuditMiddleware(crash, audit, ManualClock(2.0)), dict(scope), receive, send)
    assert [e.status for e in audit.since(0, 10)] == [200, 500]  # once each
    db.close()
