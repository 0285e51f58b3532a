"""Both stores: transitions checked and logged; the SQLite file survives the process."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
from pathlib import Path

import pytest

from accelnet.devices import DeviceState
from accelnet.devices.history import HistoryBucket, downsample
from accelnet.devices.telemetry import DeviceSample
from accelnet.fabric import DomainLevel
from accelnet.runtime.control.sqlite_store import SCHEMA_VERSION, SqliteStore
from accelnet.runtime.control.store import (
    Event,
    IdempotencyRecord,
    JobRecord,
    MemoryStore,
    Store,
    StoreError,
)
from accelnet.sched import JobSpec, JobState, Placement
from accelnet.sched.reasons import OutcomeCode
from accelnet.statemachine import IllegalTransitionError

SPEC = JobSpec.model_validate({"name": "j", "run": "true", "resources": {"accelerators": "any:2"}})


@pytest.fixture(params=["memory", "sqlite"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    if request.param == "memory":
        return MemoryStore()
    return SqliteStore(tmp_path / "a.db")


def test_lifecycle_is_checked_and_logged(store: Store) -> None:
    store.add(JobRecord("j-1", SPEC, JobState.PENDING, 1.0))
    with pytest.raises(StoreError, match="exists"):
        store.add(JobRecord("j-1", SPEC, JobState.PENDING, 1.0))
    store.transition("j-1", JobState.ADMITTED, 2.0, "fits")
    p = Placement(("h/gpu0", "h/gpu1"), 1.0, "L4", DomainLevel.HOST)
    store.transition("j-1", JobState.STARTING, 3.0, "placed", placement=p, attempts=1)
    with pytest.raises(IllegalTransitionError):
        store.transition("j-1", JobState.SUCCEEDED, 4.0, "skipped running")
    store.transition("j-1", JobState.RUNNING, 4.0, "all ranks up", started_at=4.0)
    done = store.transition("j-1", JobState.SUCCEEDED, 5.0, "exit 0", result=[{"x": 1}, 2])
    assert done.placement == p and done.result == [{"x": 1}, 2]
    assert store.get("j-1") == done
    kinds = [e.kind for e in store.events("j-1")]
    assert kinds == ["job:pending", "job:admitted", "job:starting", "job:running", "job:succeeded"]
    assert [j.id for j in store.jobs([JobState.SUCCEEDED])] == ["j-1"]
    assert store.jobs([JobState.RUNNING]) == []
    view = done.view()
    assert view.placement is None  # a finished job holds no devices
    store.set_device("h/gpu0", DeviceState.READY, 6.0, "probed")
    assert store.devices() == {"h/gpu0": DeviceState.READY}
    with pytest.raises(StoreError, match="no job 'nope'"):
        store.get("nope")


def test_sqlite_survives_a_killed_process(tmp_path: Path) -> None:
    db = tmp_path / "crash.db"
    code = f"""
import os
from accelnet.runtime.control.sqlite_store import SqliteStore
from accelnet.runtime.control.store import JobRecord
from accelnet.sched import JobSpec, JobState
s = SqliteStore({str(db)!r})
spec = JobSpec.model_validate({{"name": "j", "run": "true"}})
for i in range(50):
    s.add(JobRecord(f"j-{{i}}", spec, JobState.PENDING, float(i)))
print("acked", flush=True)
os.kill(os.getpid(), 9)
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, check=False)  # fmt: skip
    assert proc.returncode == -9 and "acked" in proc.stdout
    store = SqliteStore(db)
    assert len(store.jobs()) == 50
    assert store.get("j-49").spec == JobSpec.model_validate({"name": "j", "run": "true"})


def test_sqlite_schema_version_is_checked(tmp_path: Path) -> None:
    db = tmp_path / "v.db"
    SqliteStore(db).close()
    import sqlite3

    con = sqlite3.connect(db)
    con.execute("UPDATE meta SET value='99' WHERE key='version'")
    con.commit()
    con.close()
    with pytest.raises(
        StoreError, match=f"schema version 99, this accelnet reads version {SCHEMA_VERSION}"
    ):
        SqliteStore(db)
    assert os.path.exists(db)


def test_a_version_1_store_is_migrated_and_keeps_its_jobs(tmp_path: Path) -> None:
    import sqlite3

    db = tmp_path / "v1.db"
    con = sqlite3.connect(db)  # the version 1 schema, as the first release wrote it
    con.executescript(
        """
        CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
        INSERT INTO meta VALUES ('version', '1');
        CREATE TABLE jobs (seq INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT UNIQUE NOT NULL,
            spec TEXT NOT NULL, state TEXT NOT NULL, submitted_at REAL NOT NULL,
            attempts INTEGER NOT NULL, started_at REAL, finished_at REAL, placement TEXT,
            nominated TEXT NOT NULL, result BLOB, error TEXT, payload BLOB,
            failures INTEGER NOT NULL DEFAULT 0);
        """
    )
    spec = JobSpec.model_validate({"name": "old", "run": "true"})
    con.execute(
        "INSERT INTO jobs(id, spec, state, submitted_at, attempts, nominated) "
        "VALUES('old-1', ?, 'admitted', 5.0, 0, '')",
        (spec.model_dump_json(),),
    )
    con.commit()
    con.close()
    store = SqliteStore(db)
    rec = store.get("old-1")
    assert rec.spec == spec and rec.attained == () and rec.done == 0.0
    store.update("old-1", attained=(("H100-SXM", 12.5),), done=40.0)
    store.close()
    again = SqliteStore(db)
    assert again.get("old-1").attained == (("H100-SXM", 12.5),)
    assert again.get("old-1").done == 40.0
    version = sqlite3.connect(db).execute("SELECT value FROM meta WHERE key='version'")
    assert version.fetchone() == (str(SCHEMA_VERSION),)


def test_inputs_are_kept_and_jobs_found_by_name(store: Store) -> None:
    a = JobSpec.model_validate({"name": "split", "run": "true"})
    b = JobSpec.model_validate({"name": "merge", "run": "true", "inputs": {"parts": "split"}})
    store.add(JobRecord("split-1", a, JobState.PENDING, 1.0))
    store.add(JobRecord("split-2", a, JobState.PENDING, 2.0))
    store.add(JobRecord("merge-1", b, JobState.PENDING, 3.0, inputs=(("parts", "split-2"),)))
    store.transition("merge-1", JobState.ADMITTED, 4.0, "inputs ready")
    assert store.get("merge-1").inputs == (("parts", "split-2"),)
    found = store.latest_named("split")
    assert found is not None and found.id == "split-2"
    assert store.latest_named("nothing") is None


def test_a_version_2_store_is_migrated_with_names_and_no_inputs(tmp_path: Path) -> None:
    import sqlite3

    db = tmp_path / "v2.db"
    con = sqlite3.connect(db)  # the version 2 schema, as it was before inputs
    con.executescript(
        """
        CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
        INSERT INTO meta VALUES ('version', '2');
        CREATE TABLE jobs (seq INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT UNIQUE NOT NULL,
            spec TEXT NOT NULL, state TEXT NOT NULL, submitted_at REAL NOT NULL,
            attempts INTEGER NOT NULL, started_at REAL, finished_at REAL, placement TEXT,
            nominated TEXT NOT NULL, result BLOB, error TEXT, payload BLOB,
            failures INTEGER NOT NULL DEFAULT 0, attained TEXT NOT NULL DEFAULT '',
            done REAL NOT NULL DEFAULT 0);
        """
    )
    spec = JobSpec.model_validate({"name": "old", "run": "true"})
    for i in (1, 2):
        con.execute(
            "INSERT INTO jobs(id, spec, state, submitted_at, attempts, nominated) "
            "VALUES(?, ?, 'succeeded', 5.0, 1, '')",
            (f"old-{i}", spec.model_dump_json()),
        )
    con.commit()
    con.close()
    store = SqliteStore(db)
    assert store.get("old-1").inputs == ()
    latest = store.latest_named("old")
    assert latest is not None and latest.id == "old-2"
    new = JobSpec.model_validate({"name": "new", "run": "true", "inputs": {"src": "old"}})
    store.add(JobRecord("new-1", new, JobState.PENDING, 6.0, inputs=(("src", "old-2"),)))
    store.close()
    again = SqliteStore(db)
    assert again.get("new-1").inputs == (("src", "old-2"),)
    assert again.get("new-1").spec.inputs == {"src": "old"}
    version = sqlite3.connect(db).execute("SELECT value FROM meta WHERE key='version'")
    assert version.fetchone() == (str(SCHEMA_VERSION),)


def bucket(dev: str, start: float, util: float, n: int = 1) -> HistoryBucket:
    samples = [DeviceSample(dev, start + 0.1 * i, "test", utilization_pct=util) for i in range(n)]
    [b] = downsample(samples, 60.0)
    return b


def test_energy_is_kept_on_the_record(store: Store) -> None:
    store.add(JobRecord("j-1", SPEC, JobState.PENDING, 1.0))
    assert store.get("j-1").energy is None
    energy = {"job": "j-1", "joules": 12.5, "measured_j": 0.0, "modelled_j": 12.5,
              "source": "modelled", "by_device": {"a/gpu0": 12.5}}  # fmt: skip
    store.transition("j-1", JobState.ADMITTED, 2.0, "ok", energy=energy)
    assert store.get("j-1").energy == energy
    assert store.jobs()[0].energy == energy


def test_history_is_kept_merged_bounded_and_read_since(store: Store) -> None:
    store.add_history([bucket("a/cpu0", 0.0, 10.0), bucket("a/cpu1", 0.0, 50.0)])
    # the rest of a bucket written at a close merges into it
    store.add_history([bucket("a/cpu0", 0.0, 30.0, n=3), bucket("a/cpu0", 60.0, 40.0)])
    [first, second] = store.history("a/cpu0")
    assert (first.start, first.samples, second.start) == (0.0, 4, 60.0)
    assert first.stats["utilization_pct"].mean == pytest.approx(25.0)
    assert [b.device for b in store.history()] == ["a/cpu0", "a/cpu0", "a/cpu1"]
    assert [b.start for b in store.history("a/cpu0", since=60.0)] == [60.0]
    assert store.history("a/none") == []
    store.history_rows = 3
    store.add_history([bucket("a/cpu0", 60.0 * k, 1.0) for k in range(2, 6)])
    assert [b.start for b in store.history("a/cpu0")] == [180.0, 240.0, 300.0]
    store.history_keep_s = 50.0  # buckets that ended 50 s before the newest began go
    store.add_history([bucket("a/cpu0", 360.0, 1.0)])
    assert [b.start for b in store.history("a/cpu0")] == [300.0, 360.0]
    assert len(store.history("a/cpu1")) == 1  # bounds are per device


def test_a_version_3_store_is_migrated_with_no_energy_and_an_empty_history(
    tmp_path: Path,
) -> None:
    import sqlite3

    db = tmp_path / "v3.db"
    SqliteStore(db).close()
    con = sqlite3.connect(db)  # back to version 3: no energy column, no history table
    con.executescript(
        """
        ALTER TABLE jobs DROP COLUMN energy;
        ALTER TABLE jobs DROP COLUMN retry_at;
        ALTER TABLE jobs DROP COLUMN outcome;
        DROP TABLE device_history;
        UPDATE meta SET value='3' WHERE key='version';
        """
    )
    con.execute(
        "INSERT INTO jobs(id, spec, state, submitted_at, attempts, nominated, name) "
        "VALUES('old-1', ?, 'succeeded', 5.0, 1, '', 'j')",
        (SPEC.model_dump_json(),),
    )
    con.commit()
    con.close()
    store = SqliteStore(db)
    assert store.get("old-1").energy is None and store.history() == []
    store.update("old-1", energy={"joules": 1.0})
    store.add_history([bucket("a/cpu0", 0.0, 5.0)])
    store.close()
    again = SqliteStore(db)
    assert again.get("old-1").energy == {"joules": 1.0}
    assert len(again.history("a/cpu0")) == 1
    again.close()
    version = sqlite3.connect(db).execute("SELECT value FROM meta WHERE key='version'")
    assert version.fetchone() == (str(SCHEMA_VERSION),)


def test_atomic_writes_are_kept_together_or_not_at_all(store: Store) -> None:
    store.add(JobRecord("before", SPEC, JobState.PENDING, 1.0))
    key = IdempotencyRecord("t", "k1", "f", ("a-1", "a-2"), 2.0)
    with store.atomic():
        store.add(JobRecord("a-1", SPEC, JobState.PENDING, 2.0))
        with store.atomic():  # nested: joins the outer one
            store.add(JobRecord("a-2", SPEC, JobState.PENDING, 2.0))
            store.transition("a-2", JobState.ADMITTED, 2.0, "fits")
        store.keep_idempotency(key, 0.0)
    assert [j.id for j in store.jobs()] == ["before", "a-1", "a-2"]
    assert store.idempotency("t", "k1", 0.0) == key
    events = len(store.events())
    with pytest.raises(RuntimeError, match="crash"), store.atomic():
        store.add(JobRecord("b-1", SPEC, JobState.PENDING, 3.0))
        store.transition("before", JobState.ADMITTED, 3.0, "fits")
        store.set_device("h/gpu0", DeviceState.READY, 3.0, "probed")
        store.keep_idempotency(IdempotencyRecord("t", "k2", "f", ("b-1",), 3.0), 0.0)
        raise RuntimeError("crash")
    assert [j.id for j in store.jobs()] == ["before", "a-1", "a-2"]
    assert store.get("before").state is JobState.PENDING
    assert len(store.events()) == events and store.events("b-1") == []
    assert store.devices() == {} and store.idempotency("t", "k2", 0.0) is None
    store.add(JobRecord("b-1", SPEC, JobState.PENDING, 4.0))  # the id is free again
    assert [e.kind for e in store.events("b-1")] == ["job:pending"]


def test_a_failed_write_inside_a_transaction_undoes_itself_alone(tmp_path: Path) -> None:
    # a write that fails inside an outer transaction (here: a job id already stored) takes
    # back its own rows only; the outer transaction commits the rest (a savepoint)
    store = SqliteStore(tmp_path / "s.db")
    store.add(JobRecord("a", SPEC, JobState.PENDING, 1.0))
    with store.atomic():
        store.add(JobRecord("b", SPEC, JobState.PENDING, 2.0))
        with pytest.raises(StoreError):
            store.add(JobRecord("a", SPEC, JobState.PENDING, 2.0))
        store.transition("b", JobState.ADMITTED, 2.0, "fits")
    again = SqliteStore(tmp_path / "s.db")
    assert [(j.id, j.state) for j in again.jobs()] == [
        ("a", JobState.PENDING), ("b", JobState.ADMITTED)]  # fmt: skip
    assert [e.kind for e in again.events("a")] == ["job:pending"]  # no second add logged
    again.close()
    store.close()


def test_a_batch_commits_once_at_its_end_and_keeps_what_completed(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "s.db")
    other = SqliteStore(tmp_path / "s.db")  # another process's view of the file
    with store.batch():
        store.add(JobRecord("a", SPEC, JobState.PENDING, 1.0))
        store.transition("a", JobState.ADMITTED, 1.0, "fits")
        assert other.jobs() == []  # not committed yet: one commit for the whole batch
    assert [(j.id, j.state) for j in other.jobs()] == [("a", JobState.ADMITTED)]
    with pytest.raises(RuntimeError, match="controller bug"), store.batch():
        store.add(JobRecord("b", SPEC, JobState.PENDING, 2.0))
        with pytest.raises(IllegalTransitionError):
            store.transition("b", JobState.SUCCEEDED, 2.0, "no")  # undone alone
        raise RuntimeError("controller bug")
    assert [(j.id, j.state) for j in other.jobs()] == [
        ("a", JobState.ADMITTED), ("b", JobState.PENDING)]  # fmt: skip
    memory = MemoryStore()
    with memory.batch():  # nothing to flush: the writes are there at once
        memory.add(JobRecord("m", SPEC, JobState.PENDING, 1.0))
        assert [j.id for j in memory.jobs()] == ["m"]
    other.close()
    store.close()


def test_idempotency_keys_are_per_tenant_and_forgotten_after_their_time(store: Store) -> None:
    a = IdempotencyRecord("vision", "k", "f1", ("j-1",), 10.0)
    store.keep_idempotency(a, 0.0)
    store.keep_idempotency(IdempotencyRecord("speech", "k", "f2", ("j-2",), 11.0), 0.0)
    with pytest.raises(StoreError, match="'k' of vision is kept"):
        store.keep_idempotency(IdempotencyRecord("vision", "k", "f3", ("j-3",), 12.0), 0.0)
    assert store.idempotency("vision", "k", 5.0) == a
    assert store.idempotency("vision", "k", 10.5) is None  # older than asked for
    assert store.idempotency("vision", "other", 0.0) is None
    newer = IdempotencyRecord("vision", "k", "f4", ("j-4",), 30.0)
    store.keep_idempotency(newer, 10.5)  # drops the records before 10.5: vision's k is free
    assert [(r.tenant, r.jobs) for r in store.idempotency_records()] == [
        ("speech", ("j-2",)),
        ("vision", ("j-4",)),
    ]


def test_a_version_4_store_is_migrated_with_no_keys(tmp_path: Path) -> None:
    import sqlite3

    db = tmp_path / "v4.db"
    SqliteStore(db).close()
    con = sqlite3.connect(db)  # back to version 4: no idempotency table
    con.executescript(
        "DROP TABLE idempotency; ALTER TABLE jobs DROP COLUMN retry_at; "
        "ALTER TABLE jobs DROP COLUMN outcome; "
        "UPDATE meta SET value='4' WHERE key='version';"
    )
    con.close()
    store = SqliteStore(db)
    assert store.idempotency_records() == []
    store.keep_idempotency(IdempotencyRecord("t", "k", "f", ("j",), 1.0), 0.0)
    store.close()
    again = SqliteStore(db)
    assert [r.key for r in again.idempotency_records()] == ["k"]
    again.close()
    version = sqlite3.connect(db).execute("SELECT value FROM meta WHERE key='version'")
    assert version.fetchone() == (str(SCHEMA_VERSION),)


def test_a_version_5_store_is_migrated_and_keeps_a_jobs_retry_time(tmp_path: Path) -> None:
    import sqlite3

    db = tmp_path / "v5.db"
    SqliteStore(db).close()
    con = sqlite3.connect(db)  # back to version 5: no retry_at column
    con.executescript(
        "ALTER TABLE jobs DROP COLUMN retry_at; ALTER TABLE jobs DROP COLUMN outcome; "
        "UPDATE meta SET value='5' WHERE key='version';"
    )
    con.execute(
        "INSERT INTO jobs(id, spec, state, submitted_at, attempts, nominated, name) "
        "VALUES('old-1', ?, 'admitted', 5.0, 1, '', 'j')",
        (SPEC.model_dump_json(),),
    )
    con.commit()
    con.close()
    store = SqliteStore(db)
    assert store.get("old-1").retry_at is None  # an old file's jobs wait for nothing
    store.update("old-1", retry_at=42.5)
    store.close()
    again = SqliteStore(db)
    assert again.get("old-1").retry_at == 42.5
    again.close()
    version = sqlite3.connect(db).execute("SELECT value FROM meta WHERE key='version'")
    assert version.fetchone() == (str(SCHEMA_VERSION),)


def test_a_version_6_store_is_migrated_and_keeps_outcome_codes(tmp_path: Path) -> None:
    import sqlite3

    db = tmp_path / "v6.db"
    SqliteStore(db).close()
    con = sqlite3.connect(db)  # back to version 6: no outcome column
    con.executescript(
        "ALTER TABLE jobs DROP COLUMN outcome; UPDATE meta SET value='6' WHERE key='version';"
    )
    con.execute(
        "INSERT INTO jobs(id, spec, state, submitted_at, attempts, nominated, name) "
        "VALUES('old-1', ?, 'failed', 5.0, 1, '', 'j')",
        (SPEC.model_dump_json(),),
    )
    con.commit()
    con.close()
    store = SqliteStore(db)
    assert store.get("old-1").outcome is None  # ended before outcomes were recorded
    store.update("old-1", outcome=OutcomeCode.TIMED_OUT)
    store.close()
    again = SqliteStore(db)
    assert again.get("old-1").outcome is OutcomeCode.TIMED_OUT
    again.close()
    version = sqlite3.connect(db).execute("SELECT value FROM meta WHERE key='version'")
    assert version.fetchone() == (str(SCHEMA_VERSION),)


def test_two_processes_opening_an_old_file_at_once_migrate_it_once(tmp_path: Path) -> None:
    import sqlite3

    db = tmp_path / "v6-twice.db"
    SqliteStore(db).close()
    con = sqlite3.connect(db)
    con.executescript(
        "ALTER TABLE jobs DROP COLUMN outcome; UPDATE meta SET value='6' WHERE key='version';"
    )
    con.close()
    first = SqliteStore(db)  # migrates 6 -> 7
    # the second read version 6 before the first migrated: its migration finds the file
    # migrated when it gets the write lock, and does nothing ("duplicate column" before)
    first._migrate(6)
    first.close()
    version = sqlite3.connect(db).execute("SELECT value FROM meta WHERE key='version'")
    assert version.fetchone() == (str(SCHEMA_VERSION),)


def test_host_room_and_cpu_only_placements_are_kept(tmp_path: Path) -> None:
    cpu = JobSpec.model_validate({"name": "c", "run": "true", "resources": {"cpus": 2.5}})
    held = Placement(("h/gpu0", "h/gpu1"), 1.0, "L4", DomainLevel.HOST, (("h", 8.0, 16.5),))
    alone = Placement((), 1.0, "", DomainLevel.HOST, (("h", 2.5, 0.0),))
    db = tmp_path / "hosts.db"
    store = SqliteStore(db)
    for jid, spec, p in (("g-1", SPEC, held), ("c-1", cpu, alone)):
        store.add(JobRecord(jid, spec, JobState.PENDING, 1.0))
        store.transition(jid, JobState.ADMITTED, 2.0, "fits")
        store.transition(jid, JobState.STARTING, 3.0, "placed", placement=p, attempts=1)
    store.close()
    again = SqliteStore(db)
    assert again.get("g-1").placement == held
    assert again.get("c-1").placement == alone
    again.close()


def test_a_memory_stores_event_log_is_not_walked_by_the_garbage_collector() -> None:
    # a controller keeps every event of every job it ran (about ten a job): kept as objects
    # the collector tracks, each full pass walks them all again; read back, they are Events
    store = MemoryStore()
    store.add(JobRecord("j-1", SPEC, JobState.PENDING, 1.0))
    gc.collect()
    before = len(gc.get_objects())
    for k in range(2_000):
        store.log("j-1", 2.0 + k, "job:note", f"note {k}")
        store.set_device("h/gpu0", DeviceState.READY, 2.0 + k, "probed")
    gc.collect()
    assert len(gc.get_objects()) - before < 100  # not one or more per event
    events = store.events("j-1")
    assert len(events) == 2_001 and all(isinstance(e, Event) for e in events)
    assert (events[1].seq, events[1].at, events[1].job, events[1].kind, events[1].detail) == (
        2,
        2.0,
        "j-1",
        "job:note",
        "note 0",
    )
    assert [e.kind for e in store.events_since(4_000, kinds=["device:ready"])] == ["device:ready"]
    page, last = store.events_page(0, 3, tenant=SPEC.tenant)
    assert [e.seq for e in page] == [1, 2, 3] and last == 3
