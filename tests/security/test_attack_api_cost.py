"""What a request may cost the service, against a real ``accelnet serve`` (issue 21, items
6 and 7): with thousands of jobs stored, the list endpoints read a page from indexes by
key (their statements' query plans on the served file), never every job; anyone who
reaches the port without a token is answered 429 once past a rate per address, and its
refused calls write a bounded number of audit rows (the others summed up in one); the
audit log keeps its retention and its row bound."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from accelnet.api.audit import SENDER_BURST
from accelnet.runtime.control.sqlite_store import SqliteStore, event_page_queries, job_page_queries
from accelnet.runtime.control.store import JobRecord
from accelnet.sched import JobSpec, JobState
from tests.api.conftest import Server, spawn

V1 = "/api/v1"
STORED = 4000  # jobs: nine in ten of tenant vision (alice), the rest of speech (bob)
ENDS = (JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED)
INDEXES = {"jobs_tenant", "jobs_tenant_state", "jobs_tenant_name_state", "jobs_name_state",
           "events_tenant"}  # fmt: skip


def _read_only(db: Path) -> sqlite3.Connection:
    return sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30)


@pytest.fixture(scope="module")
def stored(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[Server, dict[str, list[str]]]]:
    """A server whose store holds :data:`STORED` finished jobs (written into its file
    while it runs, as another accelnet process would), their ids by tenant, oldest first."""
    srv = spawn(tmp_path_factory.mktemp("cost"), "--fabric", "mixed-lab")
    ids: dict[str, list[str]] = {"vision": [], "speech": []}
    store = SqliteStore(srv.db)
    try:
        with store.atomic():
            for i in range(STORED):
                tenant = "speech" if i % 10 == 0 else "vision"
                spec = JobSpec.model_validate(
                    {"name": f"old{i % 3}", "run": f"echo {i}", "tenant": tenant}
                )
                jid = f"old-{tenant}-{i}"
                store.add(JobRecord(jid, spec, ENDS[i % 3], 1000.0 + i), "stored before")
                ids[tenant].append(jid)
    finally:
        store.close()
    yield srv, ids
    srv.stop()


def test_lists_read_a_page_from_indexes_by_key(
    stored: tuple[Server, dict[str, list[str]]],
) -> None:
    srv, ids = stored
    con = _read_only(srv.db)  # the served file: the indexes are there, and searched
    try:
        names = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='index'")}
        assert names >= INDEXES, INDEXES - names
        newest = con.execute("SELECT MAX(seq) FROM events").fetchone()[0]
        statements = [
            q
            for tenant in ("speech", None)
            for states in (None, ["failed"], ["pending", "running", "failed"])
            for name in (None, "old1")
            for q in job_page_queries(101, tenant, states, name, 2000)
        ] + [q for tenant in ("speech", None) for q in event_page_queries(0, 500, tenant, newest)]
        for sql, args in statements:
            plan = [row[3] for row in con.execute("EXPLAIN QUERY PLAN " + sql, args)]
            assert len(plan) == 1 and plan[0].startswith("SEARCH "), (sql, plan)
            assert "INDEX" in plan[0] or "PRIMARY KEY" in plan[0], (sql, plan)
    finally:
        con.close()
    with srv.client("bob") as bob:  # speech: a tenth of the jobs, paged by its cursor
        seen, cursor, pages = [], None, 0
        while True:
            params = {"limit": 150, **({"cursor": cursor} if cursor else {})}
            body = bob.get(f"{V1}/jobs", params=params).json()
            assert len(body["jobs"]) <= 150
            seen += [j["id"] for j in body["jobs"]]
            pages += 1
            cursor = body["next"]
            if cursor is None:
                break
        assert seen == ids["speech"][::-1] and pages == -(-len(ids["speech"]) // 150)
        failed = [
            j["id"]
            for j in bob.get(f"{V1}/jobs", params={"state": "failed", "limit": 500}).json()["jobs"]
        ]
        assert failed == [j for j in ids["speech"][::-1] if int(j.rsplit("-", 1)[1]) % 3 == 1]
        events, since = [], 0
        while True:
            body = bob.get(f"{V1}/events", params={"since": since, "limit": 300}).json()
            events += body["events"]
            if body["next"] == since:
                break
            since = body["next"]
        mine = set(ids["speech"])
        assert {e["job"] for e in events if e["job"]} == mine  # each of its jobs, no other
    with srv.client("alice") as alice:
        assert [j["id"] for j in alice.get(f"{V1}/jobs?limit=1").json()["jobs"]] == [
            ids["vision"][-1]
        ]


def _audit_rows(db: Path, after: int) -> list[tuple[int, str, str, int, str | None, str]]:
    con = _read_only(db)
    try:
        return list(con.execute("SELECT seq, method, path, status, token_id, detail FROM "
                                "api_audit WHERE seq > ? ORDER BY seq", (after,)))  # fmt: skip
    finally:
        con.close()


def test_an_unauthenticated_flood_gets_429_and_writes_a_bounded_audit(tmp_path: Path) -> None:
    srv = spawn(tmp_path, "--fabric", "mixed-lab")  # the default limits
    try:
        start = max([r[0] for r in _audit_rows(srv.db, 0)], default=0)
        codes: list[int] = []
        sent = 1500
        began = time.monotonic()
        with srv.client() as anon:
            for i in range(sent):
                bad = {"Authorization": "Bearer acn_000000000000_" + "0" * 64} if i % 3 else {}
                r = anon.post(f"{V1}/jobs", json={"name": "flood", "run": "true"}, headers=bad)
                codes.append(r.status_code)
                if r.status_code == 429:
                    assert int(r.headers["Retry-After"]) >= 1
                    assert r.json()["error"]["code"] == "rate_limited"
        took = time.monotonic() - began
        assert set(codes) <= {401, 429}
        allowed = 100 + 10 * took + 1  # the default burst, and 10 a second since
        assert codes.count(401) <= allowed, (codes.count(401), took)
        assert codes.count(429) >= sent - allowed
        with srv.client("alice") as alice:  # a valid token from the same address: served
            assert alice.get(f"{V1}/whoami").json()["tenant"] == "vision"
        written = _audit_rows(srv.db, start)
        assert len(written) <= SENDER_BURST + 2 + 2 * took / 60, len(written)
    finally:
        assert srv.stop() == 0
    rows = _audit_rows(srv.db, start)  # the last summary is written when the server stops
    one_by_one = [r for r in rows if r[1] == "POST" and r[4] is None]
    summed = [r for r in rows if r[1] == "*"]
    assert summed and all("from 127.0.0.1" in r[5] for r in summed), summed
    counted = sum(int(r[5].split(" ", 1)[0]) for r in summed)
    assert len(one_by_one) + counted == sent  # every refused call: written, or counted
    assert len(rows) <= SENDER_BURST + 2 + 2 * took / 60 + 1


def test_the_audit_log_keeps_its_retention_and_its_bound(tmp_path: Path) -> None:
    first = spawn(tmp_path, "--fabric", "mixed-lab")
    assert first.stop() == 0
    now = time.time()
    con = sqlite3.connect(first.db)
    with con:
        for i in range(300):  # 100 of 100 days ago, then 200 of yesterday
            at = now - (100 if i < 100 else 1) * 86400 + i
            con.execute("INSERT INTO api_audit(at, method, path, status, detail) "
                        "VALUES(?, 'POST', '/api/v1/jobs', 201, ?)", (at, f"old {i}"))  # fmt: skip
    con.close()
    again = spawn(tmp_path, "--fabric", "mixed-lab", "--audit-retention-days", "30",
                  "--audit-max-rows", "150")  # fmt: skip
    try:
        with again.client("admin") as admin:
            kept = admin.get(f"{V1}/audit", params={"limit": 5000}).json()["entries"]
    finally:
        again.stop()
    assert len(kept) == 150  # the bound: the newest 150
    assert [e["detail"] for e in kept] == [f"old {i}" for i in range(150, 300)]
    assert all(e["at"] > now - 30 * 86400 for e in kept)  # none past the retention
