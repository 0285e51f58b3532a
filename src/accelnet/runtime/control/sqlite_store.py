"""The durable store: one SQLite file in WAL mode with ``synchronous=FULL``.

A submission is acknowledged only after its transaction commits, and with FULL
synchronisation a committed transaction survives a crash of the process or the machine.
The schema is versioned (``meta.version``): a file of an older version is migrated when it is
opened (version 1 -> 2 adds each job's attained service and kept work, 2 -> 3 its input
jobs and its name as a column of its own, indexed, 3 -> 4 its energy and the devices'
telemetry history, 4 -> 5 the idempotency keys of submissions: table ``idempotency``, one
row per tenant and key with the ids of the jobs that request made, written in the same
transaction as those jobs), 5 -> 6 the time a job that failed may start again
(``retry_at``: its retry backoff, kept across a restart), 6 -> 7 how a job's latest
attempt ended (``outcome``, an :class:`~accelnet.sched.reasons.OutcomeCode`); a file of a
newer version raises with a message naming both versions. :meth:`SqliteStore.atomic` is one
``BEGIN IMMEDIATE`` ... ``COMMIT`` around several writes.

Pages (:meth:`SqliteStore.jobs_page`, :meth:`SqliteStore.events_page`, what the REST API
lists with) are read from indexes, newest or oldest first from a key, so that a page
costs the same with ten jobs stored or a million: jobs by tenant (an index on the spec's
``$.tenant``, kept by SQLite itself), by state and by name; events by the tenant of their
job (column ``events.tenant``, written with the event). These indexes, and the column,
are added to a file of this schema version when it is opened, not by a version step: a
file they are missing from (written by an older accelnet) is complete once opened here,
and events an older accelnet appends meanwhile get their tenant at the next opening.
"""

from __future__ import annotations

import contextlib
import functools
import json
import math
import pickle
import sqlite3
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from accelnet.devices import DeviceState
from accelnet.devices.history import HistoryBucket, coarsen
from accelnet.fabric import DomainLevel
from accelnet.runtime.control.store import (
    Event,
    IdempotencyRecord,
    JobExistsError,
    JobRecord,
    Store,
    StoreError,
)
from accelnet.sched import JobSpec, JobState, Placement
from accelnet.sched.reasons import OutcomeCode

SCHEMA_VERSION = 7
_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS jobs (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT UNIQUE NOT NULL,
    spec TEXT NOT NULL,
    state TEXT NOT NULL,
    submitted_at REAL NOT NULL,
    attempts INTEGER NOT NULL,
    started_at REAL,
    finished_at REAL,
    placement TEXT,
    nominated TEXT NOT NULL,
    result BLOB,
    error TEXT,
    payload BLOB,
    failures INTEGER NOT NULL DEFAULT 0,
    attained TEXT NOT NULL DEFAULT '',
    done REAL NOT NULL DEFAULT 0,
    inputs TEXT NOT NULL DEFAULT '',
    name TEXT,
    energy TEXT,
    retry_at REAL,
    outcome TEXT
);
CREATE INDEX IF NOT EXISTS jobs_state ON jobs(state);
CREATE TABLE IF NOT EXISTS events (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    at REAL NOT NULL,
    job TEXT,
    kind TEXT NOT NULL,
    detail TEXT NOT NULL,
    tenant TEXT
);
CREATE INDEX IF NOT EXISTS events_job ON events(job);
CREATE TABLE IF NOT EXISTS devices (id TEXT PRIMARY KEY, state TEXT NOT NULL, at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS device_history (
    device TEXT NOT NULL,
    start REAL NOT NULL,
    width REAL NOT NULL,
    data TEXT NOT NULL,
    PRIMARY KEY (device, start, width)
);
CREATE TABLE IF NOT EXISTS idempotency (
    tenant TEXT NOT NULL,
    key TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    jobs TEXT NOT NULL,
    at REAL NOT NULL,
    PRIMARY KEY (tenant, key)
);
CREATE INDEX IF NOT EXISTS idempotency_at ON idempotency(at);
"""
_TENANT = "json_extract(spec, '$.tenant')"  # a job's tenant (indexed as this expression)
_INDEXES = (  # after migrations
    "CREATE INDEX IF NOT EXISTS jobs_name ON jobs(name, seq);"
    "CREATE INDEX IF NOT EXISTS events_kind ON events(kind, seq);"  # device requests, health
    # pages of jobs (jobs_page): by tenant; each of tenant, name, both with the state
    f"CREATE INDEX IF NOT EXISTS jobs_tenant ON jobs({_TENANT}, seq);"
    f"CREATE INDEX IF NOT EXISTS jobs_tenant_state ON jobs({_TENANT}, state, seq);"
    f"CREATE INDEX IF NOT EXISTS jobs_tenant_name_state ON jobs({_TENANT}, name, state, seq);"
    "CREATE INDEX IF NOT EXISTS jobs_name_state ON jobs(name, state, seq);"
    "CREATE INDEX IF NOT EXISTS events_tenant ON events(tenant, seq);"  # events_page
)
_EVENT_TENANTS = (  # events an older accelnet appended (or a file from before the column)
    f"UPDATE events SET tenant = (SELECT {_TENANT} FROM jobs WHERE jobs.id = events.job) "
    "WHERE tenant IS NULL AND job IS NOT NULL"
)
_NO_TENANT = "SELECT 1 FROM events WHERE tenant IS NULL AND job IS NOT NULL LIMIT 1"
_NO_SEQ = 2**63 - 1  # above every seq
SPEC_CACHE = 2048  # job specs kept decoded (by their JSON text)
_COLUMNS = (
    "id, spec, state, submitted_at, attempts, started_at, finished_at, placement, nominated, "
    "result, error, payload, failures, attained, done, inputs, energy, retry_at, outcome"
)
_MIGRATIONS = {  # from version N to N + 1
    1: (
        "ALTER TABLE jobs ADD COLUMN attained TEXT NOT NULL DEFAULT ''",
        "ALTER TABLE jobs ADD COLUMN done REAL NOT NULL DEFAULT 0",
    ),
    2: (
        "ALTER TABLE jobs ADD COLUMN inputs TEXT NOT NULL DEFAULT ''",
        "ALTER TABLE jobs ADD COLUMN name TEXT",
        "UPDATE jobs SET name = json_extract(spec, '$.name')",
    ),
    3: ("ALTER TABLE jobs ADD COLUMN energy TEXT",),  # device_history: made by _SCHEMA
    4: (),  # idempotency: made by _SCHEMA
    5: ("ALTER TABLE jobs ADD COLUMN retry_at REAL",),
    6: ("ALTER TABLE jobs ADD COLUMN outcome TEXT",),
}


def _pairs_text(pairs: tuple[tuple[str, str], ...]) -> str:
    return ";".join(f"{a}={b}" for a, b in pairs)


def _pairs_of(text: str) -> tuple[tuple[str, str], ...]:
    return tuple((a, b) for a, _, b in (item.partition("=") for item in text.split(";") if item))


def _attained_text(attained: tuple[tuple[str, float], ...]) -> str:
    return ";".join(f"{m}={s!r}" for m, s in attained)


def _attained_of(text: str) -> tuple[tuple[str, float], ...]:
    pairs = (item.rsplit("=", 1) for item in text.split(";") if item)
    return tuple((m, float(s)) for m, s in pairs)


def _placement_text(p: Placement | None) -> str | None:
    if p is None:
        return None
    text = f"{p.share}|{p.model}|{p.span.value}|{','.join(p.devices)}"
    if p.hosts:  # host=cpus:memory_gb;... after a second bar (older rows have none)
        text += "|" + ";".join(f"{h}={c!r}:{g!r}" for h, c, g in p.hosts)
    return text


def _placement_of(text: str | None) -> Placement | None:
    if not text:
        return None
    share, model, span, rest = text.split("|", 3)
    devices, _, hosts = rest.partition("|")
    held = []
    for item in filter(None, hosts.split(";")):
        host, _, amounts = item.rpartition("=")
        cpus, _, gb = amounts.partition(":")
        held.append((host, float(cpus), float(gb)))
    return Placement(
        tuple(filter(None, devices.split(","))), float(share), model, DomainLevel(span),
        tuple(held),
    )  # fmt: skip


class SqliteStore(Store):
    """Jobs, events and devices in one SQLite file (created if missing)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._lock = threading.RLock()
        # specs are immutable: the text of the last ones read -> the spec (a page read
        # again, a job the controller moves on, costs no validation)
        self._spec_of = functools.lru_cache(maxsize=SPEC_CACHE)(JobSpec.model_validate_json)
        self._db = sqlite3.connect(
            self.path, check_same_thread=False, isolation_level=None, timeout=30.0
        )
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.execute("PRAGMA foreign_keys=ON")
        self._db.executescript(_SCHEMA)
        row = self._db.execute("SELECT value FROM meta WHERE key='version'").fetchone()
        if row is None:  # a new file (OR IGNORE: another process may be creating it too)
            self._db.execute(
                "INSERT OR IGNORE INTO meta(key, value) VALUES('version', ?)",
                (str(SCHEMA_VERSION),),
            )
            row = self._db.execute("SELECT value FROM meta WHERE key='version'").fetchone()
        if int(row[0]) != SCHEMA_VERSION:
            self._migrate(int(row[0]))
        columns = {r[1] for r in self._db.execute("PRAGMA table_info(events)")}
        if "tenant" not in columns:
            try:
                self._db.execute("ALTER TABLE events ADD COLUMN tenant TEXT")
            except sqlite3.OperationalError as exc:  # another process added it meanwhile
                if "duplicate column" not in str(exc):
                    raise
        self._db.executescript(_INDEXES)
        if self._db.execute(_NO_TENANT).fetchone() is not None:  # write only if need be
            self._db.execute(_EVENT_TENANTS)

    def _migrate(self, version: int) -> None:
        """Bring a file of schema ``version`` (as read before) to this one's. The version is
        read again inside the write transaction: another process opening the same old file
        at the same time may have migrated it meanwhile (then there is nothing to do)."""
        self._check_version(version)
        with self._tx():
            row = self._db.execute("SELECT value FROM meta WHERE key='version'").fetchone()
            version = int(row[0])
            self._check_version(version)
            while version < SCHEMA_VERSION:
                for statement in _MIGRATIONS[version]:
                    self._db.execute(statement)
                version += 1
            self._db.execute("UPDATE meta SET value=? WHERE key='version'", (str(version),))

    def _check_version(self, version: int) -> None:
        if version > SCHEMA_VERSION or (version != SCHEMA_VERSION and version not in _MIGRATIONS):
            raise StoreError(
                f"{self.path}: store schema version {version}, this accelnet reads "
                f"version {SCHEMA_VERSION}"
            )

    def _tx(self) -> _Transaction:
        return _Transaction(self._db, self._lock)

    # ----- jobs ---------------------------------------------------------------------
    def add(self, record: JobRecord, cause: str = "submitted") -> None:
        """See :class:`Store`."""
        with self._tx():
            try:
                marks = ",".join("?" * (_COLUMNS.count(",") + 2))
                self._db.execute(f"INSERT INTO jobs({_COLUMNS}, name) VALUES({marks})",
                                 (*self._row(record), record.spec.name))  # fmt: skip
            except sqlite3.IntegrityError:
                raise JobExistsError(f"job {record.id!r} exists") from None
            self._insert_event(record.id, record.submitted_at, f"job:{record.state.value}", cause)

    def get(self, job_id: str) -> JobRecord:
        """See :class:`Store`."""
        with self._lock:
            row = self._db.execute(f"SELECT {_COLUMNS} FROM jobs WHERE id=?", (job_id,)).fetchone()
        if row is None:
            raise StoreError(f"no job {job_id!r}")
        return self._record(row)

    def latest_named(self, name: str, tenant: str | None = None) -> JobRecord | None:
        """See :class:`Store`."""
        mine = "" if tenant is None else " AND json_extract(spec, '$.tenant') = ?"
        args = (name,) if tenant is None else (name, tenant)
        with self._lock:
            row = self._db.execute(
                f"SELECT {_COLUMNS} FROM jobs WHERE name=?{mine} ORDER BY seq DESC LIMIT 1", args
            ).fetchone()
        return None if row is None else self._record(row)

    def jobs(self, states: Iterable[JobState] | None = None) -> list[JobRecord]:
        """See :class:`Store`."""
        with self._lock:
            if states is None:
                rows = self._db.execute(f"SELECT {_COLUMNS} FROM jobs ORDER BY seq").fetchall()
            else:
                wanted = [s.value for s in states]
                marks = ",".join("?" * len(wanted))
                rows = self._db.execute(
                    f"SELECT {_COLUMNS} FROM jobs WHERE state IN ({marks}) ORDER BY seq", wanted
                ).fetchall()
        return [self._record(r) for r in rows]

    def jobs_page(
        self,
        limit: int,
        *,
        tenant: str | None = None,
        states: Iterable[JobState] | None = None,
        name: str | None = None,
        before: str | None = None,
    ) -> list[JobRecord]:
        """See :class:`Store`: the page's rows are found from at most eight index ranges
        of at most ``limit`` entries each (:func:`job_page_queries`), then read by key."""
        wanted = None if states is None else sorted({s.value for s in states})
        with self._lock:
            top = None
            if before is not None:
                row = self._db.execute("SELECT seq FROM jobs WHERE id=?", (before,)).fetchone()
                if row is None:
                    raise StoreError(f"no job {before!r}")
                top = int(row[0])
            seqs: list[int] = []
            for sql, args in job_page_queries(limit, tenant, wanted, name, top):
                seqs += (r[0] for r in self._db.execute(sql, args))
            seqs = sorted(set(seqs), reverse=True)[: max(0, limit)]
            if not seqs:
                return []
            marks = ",".join("?" * len(seqs))
            rows = self._db.execute(
                f"SELECT {_COLUMNS} FROM jobs WHERE seq IN ({marks}) ORDER BY seq DESC", seqs
            ).fetchall()
        return [self._record(r) for r in rows]

    def _write(self, record: JobRecord, event: tuple[float, str, str] | None) -> None:
        with self._tx():
            row = self._row(record)
            self._db.execute(
                "UPDATE jobs SET spec=?, state=?, submitted_at=?, attempts=?, started_at=?, "
                "finished_at=?, placement=?, nominated=?, result=?, error=?, payload=?, "
                "failures=?, attained=?, done=?, inputs=?, energy=?, retry_at=?, outcome=? "
                "WHERE id=?",
                (*row[1:], row[0]),
            )
            if event is not None:
                self._insert_event(record.id, *event)

    @staticmethod
    def _row(r: JobRecord) -> tuple[Any, ...]:
        return (
            r.id,
            r.spec.model_dump_json(),
            r.state.value,
            r.submitted_at,
            r.attempts,
            r.started_at,
            r.finished_at,
            _placement_text(r.placement),
            ",".join(r.nominated),
            None if r.result is None else pickle.dumps(r.result),
            r.error,
            r.payload,
            r.failures,
            _attained_text(r.attained),
            r.done,
            _pairs_text(r.inputs),
            None if r.energy is None else json.dumps(r.energy),
            r.retry_at,
            None if r.outcome is None else r.outcome.value,
        )

    def _record(self, row: tuple[Any, ...]) -> JobRecord:
        return JobRecord(
            id=row[0],
            spec=self._spec_of(row[1]),
            state=JobState(row[2]),
            submitted_at=row[3],
            attempts=row[4],
            started_at=row[5],
            finished_at=row[6],
            placement=_placement_of(row[7]),
            nominated=tuple(x for x in row[8].split(",") if x),
            result=None if row[9] is None else pickle.loads(row[9]),
            error=row[10],
            payload=row[11],
            failures=row[12],
            attained=_attained_of(row[13]),
            done=row[14],
            inputs=_pairs_of(row[15]),
            energy=None if row[16] is None else json.loads(row[16]),
            retry_at=row[17],
            outcome=None if row[18] is None else OutcomeCode(row[18]),
        )

    # ----- events -------------------------------------------------------------------
    def _insert_event(self, job_id: str | None, at: float, kind: str, detail: str) -> None:
        self._db.execute(
            "INSERT INTO events(at, job, kind, detail, tenant) "
            f"VALUES(?,?,?,?,(SELECT {_TENANT} FROM jobs WHERE id=?))",
            (at, job_id, kind, detail, job_id),
        )

    def _append_event(self, job_id: str | None, at: float, kind: str, detail: str) -> None:
        with self._tx():
            self._insert_event(job_id, at, kind, detail)

    def events(self, job_id: str | None = None) -> list[Event]:
        """See :class:`Store`."""
        with self._lock:
            if job_id is None:
                rows = self._db.execute("SELECT seq, at, job, kind, detail FROM events "
                                        "ORDER BY seq").fetchall()  # fmt: skip
            else:
                rows = self._db.execute(
                    "SELECT seq, at, job, kind, detail FROM events WHERE job=? ORDER BY seq",
                    (job_id,),
                ).fetchall()
        return [Event(*r) for r in rows]

    def events_since(self, seq: int, kinds: Iterable[str] | None = None) -> list[Event]:
        """See :class:`Store` (also what other processes appended since)."""
        query = "SELECT seq, at, job, kind, detail FROM events WHERE seq > ?"
        args: list[Any] = [seq]
        wanted = None if kinds is None else list(kinds)
        if wanted is not None:
            query += f" AND kind IN ({','.join('?' * len(wanted))})"
            args += wanted
        with self._lock:
            rows = self._db.execute(query + " ORDER BY seq", args).fetchall()
        return [Event(*r) for r in rows]

    def events_page(
        self, since: int, limit: int, tenant: str | None = None
    ) -> tuple[list[Event], int]:
        """See :class:`Store`: from the primary key (everyone's events) or from two ranges
        of index ``events_tenant`` (the tenant's, and those of no job), each of at most
        ``limit`` rows (:func:`event_page_queries`)."""
        with self._lock:
            newest = self._db.execute("SELECT MAX(seq) FROM events").fetchone()[0] or 0
            found: list[Event] = []
            for sql, args in event_page_queries(since, limit, tenant, newest):
                found += (Event(*r) for r in self._db.execute(sql, args))
        found.sort(key=lambda e: e.seq)
        if len(found) >= limit:
            found = found[: max(0, limit)]
            return found, found[-1].seq if found else since
        return found, max(since, newest)

    # ----- devices ------------------------------------------------------------------
    def set_device(self, device: str, state: DeviceState, at: float, cause: str) -> None:
        """See :class:`Store`."""
        with self._tx():
            self._db.execute(
                "INSERT INTO devices(id, state, at) VALUES(?,?,?) "
                "ON CONFLICT(id) DO UPDATE SET state=excluded.state, at=excluded.at",
                (device, state.value, at),
            )
            self._insert_event(None, at, f"device:{state.value}", f"{device}: {cause}")

    def devices(self) -> dict[str, DeviceState]:
        """See :class:`Store`."""
        with self._lock:
            rows = self._db.execute("SELECT id, state FROM devices").fetchall()
        return {d: DeviceState(s) for d, s in rows}

    # ----- telemetry history --------------------------------------------------------
    def add_history(self, buckets: Iterable[HistoryBucket]) -> None:
        """See :class:`Store`."""
        with self._tx():
            touched: set[str] = set()
            for new in buckets:
                key = (new.device, new.start, new.width_s)
                row = self._db.execute("SELECT data FROM device_history WHERE device=? AND "
                                       "start=? AND width=?", key).fetchone()  # fmt: skip
                kept = new
                if row is not None:  # merged into the bucket kept (partial, from a close)
                    old = HistoryBucket.from_json(json.loads(row[0]))
                    kept = coarsen([old, new], new.width_s)[0]
                self._db.execute(
                    "INSERT OR REPLACE INTO device_history(device, start, width, data) "
                    "VALUES(?,?,?,?)", (*key, json.dumps(kept.to_json())),
                )  # fmt: skip
                touched.add(new.device)
            for dev in sorted(touched):
                self._prune_history(dev)

    def _prune_history(self, dev: str) -> None:
        newest = self._db.execute("SELECT MAX(start) FROM device_history WHERE device=?",
                                  (dev,)).fetchone()[0]  # fmt: skip
        self._db.execute("DELETE FROM device_history WHERE device=? AND start + width < ?",
                         (dev, newest - self.history_keep_s))  # fmt: skip
        self._db.execute(
            "DELETE FROM device_history WHERE device=? AND start < (SELECT start FROM "
            "device_history WHERE device=? ORDER BY start DESC LIMIT 1 OFFSET ?)",
            (dev, dev, self.history_rows - 1),
        )

    def history(self, device: str | None = None, since: float | None = None) -> list[HistoryBucket]:
        """See :class:`Store`."""
        query = "SELECT data FROM device_history WHERE start + width > ?"
        args: list[Any] = [-math.inf if since is None else since]
        if device is not None:
            query += " AND device=?"
            args.append(device)
        with self._lock:
            rows = self._db.execute(query + " ORDER BY device, start, width", args).fetchall()
        return [HistoryBucket.from_json(json.loads(r[0])) for r in rows]

    # ----- idempotency keys ---------------------------------------------------------
    def atomic(self) -> _Transaction:
        """See :class:`Store`: one transaction (nested ones join it, each a savepoint)."""
        return self._tx()

    def batch(self) -> _Transaction:
        """See :class:`Store`: one transaction, one commit (one fsync) for every write in
        it; each write stays atomic on its own (a savepoint), and what completed is
        committed even if the block ends with an exception."""
        return _Transaction(self._db, self._lock, keep_on_error=True)

    def idempotency(self, tenant: str, key: str, since: float) -> IdempotencyRecord | None:
        """See :class:`Store`."""
        with self._lock:
            row = self._db.execute(
                "SELECT tenant, key, fingerprint, jobs, at FROM idempotency "
                "WHERE tenant=? AND key=? AND at >= ?",
                (tenant, key, since),
            ).fetchone()
        return None if row is None else _idempotency_of(row)

    def keep_idempotency(self, record: IdempotencyRecord, forget_before: float) -> None:
        """See :class:`Store`."""
        with self._tx():
            self._db.execute("DELETE FROM idempotency WHERE at < ?", (forget_before,))
            try:
                self._db.execute(
                    "INSERT INTO idempotency(tenant, key, fingerprint, jobs, at) "
                    "VALUES(?,?,?,?,?)",
                    (record.tenant, record.key, record.fingerprint, json.dumps(record.jobs),
                     record.at),
                )  # fmt: skip
            except sqlite3.IntegrityError:
                raise StoreError(
                    f"idempotency key {record.key!r} of {record.tenant} is kept"
                ) from None

    def idempotency_records(self) -> list[IdempotencyRecord]:
        """See :class:`Store`."""
        with self._lock:
            rows = self._db.execute("SELECT tenant, key, fingerprint, jobs, at FROM "
                                    "idempotency ORDER BY at, rowid").fetchall()  # fmt: skip
        return [_idempotency_of(r) for r in rows]

    def close(self) -> None:
        """Close the file (idempotent)."""
        with self._lock, contextlib.suppress(sqlite3.ProgrammingError):
            self._db.close()


def job_page_queries(
    limit: int,
    tenant: str | None,
    states: list[str] | None,
    name: str | None,
    top: int | None,
) -> list[tuple[str, tuple[Any, ...]]]:
    """The statements :meth:`SqliteStore.jobs_page` finds a page's rows with: the ``seq``
    of at most ``limit`` jobs each, newest first, below ``top`` (None: from the newest).
    Every one is a search of one index range in the index's own order (no sort, no scan):
    one statement per wanted state (every state when both ``tenant`` and ``name`` are
    given without states), else one. Public so that tests can ``EXPLAIN`` them."""
    conds: list[str] = []
    args: list[Any] = []
    if tenant is not None:
        conds.append(f"{_TENANT} = ?")
        args.append(tenant)
    if name is not None:
        conds.append("name = ?")
        args.append(name)
    conds.append("seq < ?")  # always: a search of the index from a key, never a scan
    args.append(_NO_SEQ if top is None else top)
    if states is None and tenant is not None and name is not None:
        states = [s.value for s in JobState]
    variants: list[tuple[list[str], list[Any]]] = (
        [([], [])] if states is None else [(["state = ?"], [s]) for s in states]
    )
    out = []
    for extra, values in variants:
        where = " AND ".join(extra + conds)
        sql = f"SELECT seq FROM jobs WHERE {where} ORDER BY seq DESC LIMIT ?"
        out.append((sql, (*values, *args, limit)))
    return out


def event_page_queries(
    since: int, limit: int, tenant: str | None, newest: int
) -> list[tuple[str, tuple[Any, ...]]]:
    """The statements :meth:`SqliteStore.events_page` reads a page with: at most ``limit``
    events each, oldest first, after ``since`` and up to ``newest``; with a ``tenant``, its
    jobs' events and the events of no job, from one range of ``events_tenant`` each."""
    cols = "SELECT seq, at, job, kind, detail FROM events"
    if tenant is None:
        return [(f"{cols} WHERE seq > ? AND seq <= ? ORDER BY seq LIMIT ?", (since, newest, limit))]
    return [
        (f"{cols} WHERE tenant = ? AND seq > ? AND seq <= ? ORDER BY seq LIMIT ?",
         (tenant, since, newest, limit)),
        (f"{cols} WHERE tenant IS NULL AND seq > ? AND seq <= ? AND job IS NULL "
         "ORDER BY seq LIMIT ?", (since, newest, limit)),
    ]  # fmt: skip


def _idempotency_of(row: tuple[Any, ...]) -> IdempotencyRecord:
    return IdempotencyRecord(row[0], row[1], row[2], tuple(json.loads(row[3])), row[4])


class _Transaction:
    """``BEGIN IMMEDIATE`` ... ``COMMIT`` (or ``ROLLBACK`` on error), under the lock. Inside
    another transaction, a savepoint: an error undoes this block's writes alone, and the
    outer transaction decides the rest. ``keep_on_error``: the outermost block commits
    what its completed inner blocks wrote even when it ends with an exception (a batch)."""

    def __init__(
        self, db: sqlite3.Connection, lock: threading.RLock, keep_on_error: bool = False
    ) -> None:
        self._db = db
        self._lock = lock
        self._keep = keep_on_error
        self._outer = False
        self._savepoint: str | None = None

    def __enter__(self) -> None:
        self._lock.acquire()
        try:
            self._outer = not self._db.in_transaction
            if self._outer:
                self._db.execute("BEGIN IMMEDIATE")
            else:
                self._savepoint = f"sp{id(self):x}"
                self._db.execute(f"SAVEPOINT {self._savepoint}")
        except BaseException:
            self._lock.release()
            raise

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        try:
            if self._outer:
                ok = exc_type is None or self._keep
                self._db.execute("COMMIT" if ok else "ROLLBACK")
            elif self._savepoint is not None:
                if exc_type is not None:
                    self._db.execute(f"ROLLBACK TO {self._savepoint}")
                self._db.execute(f"RELEASE {self._savepoint}")
        finally:
            self._lock.release()
