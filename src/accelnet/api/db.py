"""The API's own tables (tokens, tenants, audit log), in the store's SQLite file.

``accelnet serve --db PATH`` and ``accelnet token create --db PATH`` open the same file as
the job store (:class:`~accelnet.runtime.control.sqlite_store.SqliteStore`), through a connection
of their own: the tables are prefixed ``api_`` and versioned in ``api_meta``, apart from the
store's. WAL mode lets the server and a CLI in another process use the file at once;
``synchronous=FULL`` makes a created or revoked token durable when the call returns.
Without a path the tables live in memory (a server without ``--db``).

Reads (:meth:`ApiDb.query`: the token looked up on every request) go through a second
connection of their own, which WAL lets read while the first writes: a request's
authentication never waits for an audit entry being written (and synced) for another.
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from accelnet.runtime.control.privacy import private_db

API_SCHEMA_VERSION = 1
_SCHEMA = """
CREATE TABLE IF NOT EXISTS api_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS api_tokens (
    id TEXT PRIMARY KEY,
    tenant TEXT NOT NULL,
    role TEXT NOT NULL,
    name TEXT NOT NULL,
    secret_sha256 TEXT NOT NULL,
    created_at REAL NOT NULL,
    revoked_at REAL
);
CREATE TABLE IF NOT EXISTS api_tenants (
    name TEXT PRIMARY KEY,
    weight REAL NOT NULL,
    quota TEXT NOT NULL,
    updated_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS api_audit (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    at REAL NOT NULL,
    token_id TEXT,
    tenant TEXT,
    role TEXT,
    method TEXT NOT NULL,
    path TEXT NOT NULL,
    status INTEGER NOT NULL,
    detail TEXT NOT NULL
);
"""


class ApiDbError(RuntimeError):
    """The API tables cannot be used (a newer schema, an unreadable file)."""


class ApiDb:
    """The API tables: one connection that writes, one that reads (a file only);
    thread-safe (a lock each), every write committed on return."""

    def __init__(self, path: str | Path | None = None) -> None:
        self.path = Path(path) if path is not None else None
        self._lock = threading.Lock()
        try:
            if self.path is not None:
                private_db(self.path)
            self._db = sqlite3.connect(
                str(self.path) if self.path is not None else ":memory:",
                check_same_thread=False,
                isolation_level=None,
                timeout=30.0,
            )
            if self.path is not None:
                self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=FULL")
            self._db.executescript(_SCHEMA)
            row = self._db.execute("SELECT value FROM api_meta WHERE key='version'").fetchone()
        except (sqlite3.Error, OSError) as exc:
            raise ApiDbError(f"{self.path or ':memory:'}: {exc}") from None
        self._reader: sqlite3.Connection | None = None
        self._read_lock = threading.Lock()
        if self.path is not None:
            self._reader = sqlite3.connect(
                str(self.path), check_same_thread=False, isolation_level=None, timeout=30.0
            )
        if row is None:
            self._db.execute(
                "INSERT OR IGNORE INTO api_meta(key, value) VALUES('version', ?)",
                (str(API_SCHEMA_VERSION),),
            )
        elif int(row[0]) > API_SCHEMA_VERSION:
            raise ApiDbError(
                f"{self.path}: API tables of version {row[0]}; this accelnet reads "
                f"version {API_SCHEMA_VERSION}"
            )

    def query(self, sql: str, args: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """Rows of a SELECT (what has been committed: every write here is, on return)."""
        if self._reader is None:
            with self._lock:
                return list(self._db.execute(sql, tuple(args)).fetchall())
        with self._read_lock:
            return list(self._reader.execute(sql, tuple(args)).fetchall())

    def write(self, sql: str, args: Sequence[Any] = ()) -> int:
        """One write statement, committed; returns the number of rows it changed."""
        with self._lock:
            return self._db.execute(sql, tuple(args)).rowcount

    def insert(self, sql: str, args: Sequence[Any] = ()) -> int:
        """One INSERT, committed; returns the new row's rowid."""
        with self._lock:
            cur = self._db.execute(sql, tuple(args))
            return int(cur.lastrowid or 0)

    @contextlib.contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """``BEGIN IMMEDIATE`` ... ``COMMIT`` (``ROLLBACK`` on error), under the lock."""
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    def close(self) -> None:
        """Close the connection (idempotent)."""
        with self._lock, contextlib.suppress(sqlite3.ProgrammingError):
            self._db.close()
        with self._read_lock, contextlib.suppress(sqlite3.ProgrammingError):
            if self._reader is not None:
                self._reader.close()
