"""What only the SQLite store promises: pragmas, schema versions, clear errors, indexed due-work
queries, several processes on one file; and how ``open_store`` reads database URLs."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import threading
import time
import types
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlite_utils import Database

import flow_cli.store.sqlite.connection as connection_module
import flow_cli.store.sqlite.schema as schema_module
from flow_cli.errors import ConfigError, EventConflict, StoreError
from flow_cli.model.events import SignalReceived
from flow_cli.model.spec import WorkflowSpec
from flow_cli.model.status import RunStatus
from flow_cli.store import open_store
from flow_cli.store.memory import MemoryStore
from flow_cli.store.pauses import PauseKind, PauseTarget
from flow_cli.store.pauses_sql import ANY_PAUSE
from flow_cli.store.protocol import (
    CommitGroup,
    LeaseAsk,
    NewRun,
    RunFilter,
    RunIndex,
    StepTask,
    StreamWrite,
)
from flow_cli.store.sqlite import MIGRATIONS, SQLiteStore

REPO = Path(__file__).resolve().parent.parent
NOW = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
BUILD = "shop-1"


def new_run(run_id: str, decide_at: datetime | None = NOW) -> NewRun:
    spec = WorkflowSpec(workflow="orders", input={"n": 1}, runtime_build_id=BUILD)
    return NewRun(run_id=run_id, spec=spec, seed="s", decide_at=decide_at)


def running() -> RunIndex:
    return RunIndex(status=RunStatus.RUNNING)


def meta_version(path: Path) -> str:
    with sqlite3.connect(path) as conn:
        return str(
            conn.execute("SELECT value FROM flow_meta WHERE key = 'schema_version'").fetchone()[0]
        )


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "flow.db"


# -- pragmas and schema --------------------------------------------------------------------------


def test_wal_and_synchronous_full_by_default(db_path: Path) -> None:
    store = SQLiteStore(db_path)
    conn = store._conn()
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert conn.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
    assert conn.execute("PRAGMA busy_timeout").fetchone()[0] == 5000
    store.close()
    fast = SQLiteStore(db_path, synchronous="normal", busy_timeout_ms=250)
    conn = fast._conn()
    assert conn.execute("PRAGMA synchronous").fetchone()[0] == 1  # NORMAL
    assert conn.execute("PRAGMA busy_timeout").fetchone()[0] == 250
    fast.close()
    with pytest.raises(ConfigError):
        SQLiteStore(db_path, synchronous="FAST")


def _traced(store: SQLiteStore) -> list[str]:
    """The statements this thread's connection runs from now on."""
    statements: list[str] = []
    store._conn().set_trace_callback(statements.append)
    return statements


def _ready_step(store: SQLiteStore, run_id: str) -> None:
    store.create_run(new_run(run_id, decide_at=None), NOW)
    index = RunIndex(
        status=RunStatus.RUNNING, steps={"s": StepTask(step_id="s", attempt=1, available_at=NOW)}
    )
    store.append_if_sequence(run_id, 1, [SignalReceived(signal_name="go", payload=1)], index, NOW)


def test_a_lease_commits_without_waiting_for_the_disk_and_events_wait(db_path: Path) -> None:
    """Under ``synchronous=FULL`` a step's lease (with its ``step_started``) commits in NORMAL
    mode, which in WAL mode writes the log without an fsync; the next durable commit flushes it.
    The connection is FULL again at once, for the commits that carry decisions and step ends."""
    store = SQLiteStore(db_path)
    _ready_step(store, "r1")
    durable = store.stats.durable_commits
    statements = _traced(store)
    [lease] = store.lease_steps(LeaseAsk("w", [BUILD], NOW, NOW + timedelta(seconds=30), 10))
    assert lease.step_id == "s"
    relax, restore = (
        statements.index("PRAGMA synchronous = NORMAL"),
        statements.index("PRAGMA synchronous = FULL"),
    )
    assert relax < statements.index("BEGIN IMMEDIATE") < statements.index("COMMIT") < restore
    assert (store.stats.durable_commits, store.stats.index_commits) == (durable, 1)
    assert store._conn().execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL again
    statements.clear()
    store.append_if_sequence("r1", 3, [SignalReceived(signal_name="go", payload=2)], running(), NOW)
    assert "COMMIT" in statements and not any("synchronous" in s for s in statements)
    assert store.stats.durable_commits == durable + 1
    store.close()


def test_a_lease_that_fails_still_restores_the_durable_mode(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = SQLiteStore(db_path)
    _ready_step(store, "r1")

    def broken(
        conn: sqlite3.Connection, build_ids: object, paused: object = None, until: object = None
    ) -> None:
        raise sqlite3.OperationalError("disk I/O error")

    monkeypatch.setattr(store, "_due_times", broken)
    with pytest.raises(StoreError):
        store.lease_steps(LeaseAsk("w", [BUILD], NOW, NOW + timedelta(seconds=30), 10))
    conn = store._conn()
    assert not conn.in_transaction
    assert conn.execute("PRAGMA synchronous").fetchone()[0] == 2
    assert [e.event_key for e in store.read_history("r1")] == ["run_started", "signal_received"]
    store.close()


def test_a_store_not_in_full_mode_leaves_its_mode_alone(db_path: Path) -> None:
    store = SQLiteStore(db_path, synchronous="OFF")
    _ready_step(store, "r1")
    statements = _traced(store)
    assert len(store.lease_steps(LeaseAsk("w", [BUILD], NOW, NOW + timedelta(seconds=30), 10))) == 1
    assert "COMMIT" in statements and not any("synchronous" in s for s in statements)
    assert store._conn().execute("PRAGMA synchronous").fetchone()[0] == 0  # OFF
    store.close()


def test_schema_version_is_recorded(db_path: Path) -> None:
    SQLiteStore(db_path).close()
    assert meta_version(db_path) == str(MIGRATIONS[-1][0])
    tables = set(Database(db_path).table_names())
    assert {"flow_meta", "events", "runs", "step_tasks", "hooks"} <= tables


def test_an_empty_sqlite_file_is_refused_not_made_a_database(db_path: Path) -> None:
    """Issue 25 (item 9): a 0-byte file (a failed copy, a stray `touch`) used to become a
    fresh, empty database silently; the runs the operator expected seemed gone."""
    sqlite3.connect(db_path).close()
    db_path.touch()
    with pytest.raises(StoreError, match=r"is an empty file \(0 bytes\), not a Flow database"):
        SQLiteStore(db_path, busy_timeout_ms=100)
    assert db_path.stat().st_size == 0


LATEST = MIGRATIONS[-1][0]


def _v2_add_note(db: Database) -> None:
    db["runs"].add_column("note", str)  # type: ignore[union-attr]


def test_older_schema_is_upgraded_in_place_keeping_events(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    old = SQLiteStore(db_path)
    old.create_run(new_run("r1"), NOW)
    old.append_if_sequence("r1", 1, [SignalReceived(signal_name="s", payload=[1])], running(), NOW)
    before = old.read_history("r1")
    old.close()
    assert meta_version(db_path) == str(LATEST)

    monkeypatch.setattr(schema_module, "MIGRATIONS", [*MIGRATIONS, (LATEST + 1, _v2_add_note)])
    upgraded = SQLiteStore(db_path)
    assert meta_version(db_path) == str(LATEST + 1)
    assert upgraded.read_history("r1") == before
    assert "note" in Database(db_path)["runs"].columns_dict
    upgraded.append_if_sequence(
        "r1", 2, [SignalReceived(signal_name="s", payload=2)], running(), NOW
    )
    upgraded.close()
    SQLiteStore(db_path).close()  # opening an up-to-date database migrates nothing
    assert meta_version(db_path) == str(LATEST + 1)


def test_a_failing_migration_changes_nothing(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    SQLiteStore(db_path).close()

    def broken(db: Database) -> None:
        db.create_table("half_done", {"x": int})
        db.execute("INSERT INTO no_such_table VALUES (1)")

    monkeypatch.setattr(schema_module, "MIGRATIONS", [*MIGRATIONS, (LATEST + 1, broken)])
    with pytest.raises(StoreError):
        SQLiteStore(db_path)
    assert meta_version(db_path) == str(LATEST)
    assert "half_done" not in Database(db_path).table_names()


def test_newer_schema_is_refused(db_path: Path) -> None:
    SQLiteStore(db_path).close()
    with sqlite3.connect(db_path) as conn:
        conn.execute("UPDATE flow_meta SET value = '99' WHERE key = 'schema_version'")
    with pytest.raises(StoreError, match=r"schema version 99, newer than this Flow"):
        SQLiteStore(db_path)


# -- clear errors --------------------------------------------------------------------------------


def test_a_file_that_is_not_a_database(db_path: Path) -> None:
    db_path.write_text("order_id,total\n1,12.50\n" * 200)
    with pytest.raises(StoreError, match="is not a Flow database") as caught:
        SQLiteStore(db_path)
    assert not isinstance(caught.value, sqlite3.Error)


def test_an_sqlite_database_of_something_else(db_path: Path) -> None:
    with sqlite3.connect(db_path) as conn:
        conn.execute("CREATE TABLE customers (id INTEGER PRIMARY KEY)")
    with pytest.raises(StoreError, match="SQLite database but not a Flow database"):
        SQLiteStore(db_path)


def test_missing_directory_and_directory_paths(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="does not exist"):
        SQLiteStore(tmp_path / "nowhere" / "flow.db")
    with pytest.raises(StoreError, match="is a directory"):
        SQLiteStore(tmp_path)


def test_create_false_refuses_a_missing_database(db_path: Path) -> None:
    with pytest.raises(StoreError, match=r"No Flow database at .*flow start.*--db"):
        SQLiteStore(db_path, create=False)
    assert not db_path.exists()
    SQLiteStore(db_path).close()
    SQLiteStore(db_path, create=False).close()  # an existing database opens fine


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0, reason="root reads any file")
def test_an_unreadable_file(db_path: Path) -> None:
    SQLiteStore(db_path).close()
    db_path.chmod(0)
    try:
        with pytest.raises(StoreError, match="permission denied"):
            SQLiteStore(db_path)
    finally:
        db_path.chmod(0o600)


def _hold_exclusive_lock(path: Path) -> sqlite3.Connection:
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    return holder


def test_a_locked_database_gives_store_error(db_path: Path) -> None:
    store = SQLiteStore(db_path, busy_timeout_ms=100)
    holder = _hold_exclusive_lock(db_path)
    try:
        started = time.monotonic()
        with pytest.raises(StoreError, match="is locked by another connection") as caught:
            store.create_run(new_run("r1"), NOW)
        assert isinstance(caught.value.__cause__, sqlite3.OperationalError)
        assert time.monotonic() - started < 5
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert store.create_run(new_run("r1"), NOW) is not None  # the lock is gone: works again
    store.close()


def test_a_locked_database_is_waited_for_until_the_busy_timeout(db_path: Path) -> None:
    store = SQLiteStore(db_path, busy_timeout_ms=300)
    holder = _hold_exclusive_lock(db_path)
    try:
        started = time.monotonic()
        with pytest.raises(StoreError, match="gave up after 300 ms"):
            store.create_run(new_run("r1"), NOW)
        assert 0.29 <= time.monotonic() - started < 3
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    store.close()


def _write_in_thread(store: SQLiteStore, run_id: str) -> tuple[threading.Thread, list[float]]:
    """Start ``store.create_run`` on a thread; the list gets the time it returned."""
    finished: list[float] = []

    def write() -> None:
        store.create_run(new_run(run_id), NOW)
        finished.append(time.monotonic())

    thread = threading.Thread(target=write)
    thread.start()
    return thread, finished


def test_a_writer_gets_the_lock_within_milliseconds_of_its_release(db_path: Path) -> None:
    """SQLite's busy handler tries every 100 ms once a wait passes a third of a second, so a
    release is seen 50 ms late on average (three releases a third of its period apart: some
    90 to 190 ms in all); the store tries every couple of milliseconds."""
    store = SQLiteStore(db_path)
    late = 0.0
    for i, hold in enumerate((0.6, 0.633, 0.666)):
        holder = sqlite3.connect(db_path, isolation_level=None)  # rings no doorbell
        holder.execute("BEGIN IMMEDIATE")
        thread, finished = _write_in_thread(store, f"r{i}")
        time.sleep(hold)
        holder.execute("ROLLBACK")
        released = time.monotonic()
        thread.join(10)
        holder.close()
        assert finished, "the write did not finish"
        late += finished[0] - released
    assert late < 0.05
    assert len(store.find_runs(RunFilter())) == 3
    store.close()


def test_a_writer_waiting_for_the_lock_wakes_when_the_holder_rings(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every commit rings the doorbells: a waiting writer tries again at once, not only
    after its pause (made five seconds here)."""
    monkeypatch.setattr(connection_module, "_LOCK_PAUSE_FIRST", 5.0)
    monkeypatch.setattr(connection_module, "_LOCK_PAUSE_MAX", 5.0)
    store = SQLiteStore(db_path)
    other = SQLiteStore(db_path)  # as another process would: its own connection and doorbell
    with other._write():
        thread, finished = _write_in_thread(store, "r1")
        time.sleep(0.3)
    other._doorbell.ring()  # what every committing method does after its transaction
    released = time.monotonic()
    thread.join(10)
    assert finished and finished[0] - released < 1.0
    other.close()
    store.close()


def test_only_begin_runs_without_the_busy_handler(db_path: Path) -> None:
    """The handler is off for ``BEGIN IMMEDIATE`` alone: back on for the transaction's
    statements and after it, whether the lock was taken at once, after a wait, or never."""
    store = SQLiteStore(db_path, busy_timeout_ms=300)
    conn = store._conn()
    seen: list[str] = []
    conn.set_trace_callback(seen.append)
    store.create_run(new_run("r0"), NOW)
    begin = seen.index("BEGIN IMMEDIATE")
    assert seen[begin - 1] == "PRAGMA busy_timeout = 0"
    assert seen[begin + 1] == "PRAGMA busy_timeout = 300"
    assert conn.execute("PRAGMA busy_timeout").fetchone()[0] == 300
    holder = _hold_exclusive_lock(db_path)
    try:
        with pytest.raises(StoreError, match="locked"):
            store.create_run(new_run("r1"), NOW)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert conn.execute("PRAGMA busy_timeout").fetchone()[0] == 300
    store.close()


def test_a_locked_new_database_fails_to_open_with_store_error(db_path: Path) -> None:
    holder = _hold_exclusive_lock(db_path)
    try:
        with pytest.raises(StoreError, match="locked"):
            SQLiteStore(db_path, busy_timeout_ms=100)
    finally:
        holder.execute("ROLLBACK")
        holder.close()


def test_a_closed_store_raises_store_error(db_path: Path) -> None:
    store = SQLiteStore(db_path)
    store.close()
    with pytest.raises(StoreError, match="closed"):
        store.get_run("r1")


def test_an_event_row_the_sequence_did_not_show_conflicts_and_changes_nothing(
    db_path: Path,
) -> None:
    """The run's row moves before the events are inserted; when their primary key catches an
    event the row's sequence did not count, the move is undone with the write (alone, or as
    one group of a group commit beside a good one)."""
    store = SQLiteStore(db_path)
    for run_id in ("r1", "r2"):
        store.create_run(new_run(run_id), NOW)
    with sqlite3.connect(db_path) as conn:  # an event past last_sequence, as no writer leaves
        conn.execute(
            "INSERT INTO events (run_id, sequence, event_key, recorded_at, data) "
            "SELECT run_id, 2, event_key, recorded_at, data FROM events WHERE run_id = 'r1'"
        )
    before = store.get_run("r1")
    later = NOW + timedelta(minutes=1)
    with pytest.raises(EventConflict):
        store.append_if_sequence(
            "r1", 1, [SignalReceived(signal_name="s", payload=1)], running(), later
        )
    assert store.get_run("r1") == before
    write = StreamWrite(
        run_id="r1",
        expected_sequence=1,
        events=[SignalReceived(signal_name="s", payload=1)],
        index=running(),
    )
    good = StreamWrite(
        run_id="r2",
        expected_sequence=1,
        events=[SignalReceived(signal_name="s", payload=1)],
        index=running(),
    )
    results = store.commit_groups(
        [
            CommitGroup(writes=[write], creates=[], now=later),
            CommitGroup(writes=[good], creates=[], now=later),
        ]
    )
    assert isinstance(results[0], EventConflict) and results[1] is None
    assert store.get_run("r1") == before
    r2 = store.get_run("r2")
    assert r2 is not None and r2.last_sequence == 2 and r2.status is RunStatus.RUNNING
    store.close()


def test_an_undecodable_event_gives_store_error(db_path: Path) -> None:
    store = SQLiteStore(db_path)
    store.create_run(new_run("r1"), NOW)
    with sqlite3.connect(db_path) as conn:
        conn.execute("UPDATE events SET event_key = 'from_the_future' WHERE run_id = 'r1'")
    with pytest.raises(StoreError, match=r"is corrupt: event 1 of run 'r1' cannot be read"):
        store.read_history("r1")
    store.close()


# -- indexed due work ----------------------------------------------------------------------------


@pytest.mark.parametrize("paused", [False, True])
def test_due_work_queries_use_the_due_time_indexes(db_path: Path, paused: bool) -> None:
    store = SQLiteStore(db_path)
    if paused:  # the leases then leave held runs out: still by the indexes, with no sort
        store.add_pauses([PauseTarget(kind=PauseKind.WORKFLOW, name="other")], None, NOW)
    store.create_run(new_run("r1"), NOW)
    task = StepTask(step_id="s", attempt=1, available_at=NOW)
    index = RunIndex(status=RunStatus.RUNNING, steps={"s": task})
    store.append_if_sequence("r1", 1, [SignalReceived(signal_name="x", payload=1)], index, NOW)
    statements: list[str] = []
    store._conn().set_trace_callback(statements.append)  # the SQL the store really runs
    until = NOW + timedelta(seconds=30)
    store.lease_runs(LeaseAsk("w", [BUILD, "shop-0"], NOW, until, 10))
    store.lease_steps(LeaseAsk("w", [BUILD], NOW, until, 10))
    store.next_due([BUILD])
    store._conn().set_trace_callback(None)
    probes = [s for s in statements if s == ANY_PAUSE]
    # (whether any step limit is in effect is looked up now and then: one primary-key probe)
    selects = [
        s
        for s in statements
        if s.startswith("SELECT") and s != ANY_PAUSE and "SELECT 1 FROM limits" not in s[:25]
    ]
    assert len(selects) == 6  # each lease looks before it locks
    assert len(probes) == 2  # whether anything is paused: once per lease, not per look
    # The leases and the due times read with them leave held runs out (the looks before the
    # leases count held ones too).
    assert len([s for s in selects if "pauses" in s]) == (4 if paused else 0)
    with sqlite3.connect(db_path) as conn:
        for sql in selects:
            plan = " | ".join(row[3] for row in conn.execute(f"EXPLAIN QUERY PLAN {sql}"))
            table = "runs" if sql.split(" WHERE ")[0].endswith(" FROM runs") else "step_tasks"
            # The leases take by priority, then due time, and when work is next due is the
            # earliest of each priority's first: the (priority, due time) indexes, read as one
            # range per priority (the due-time-only indexes are gone: one index less to keep).
            wanted = "runs_priority_due" if table == "runs" else "step_tasks_priority_ready"
            # Walking the due-time index (and no sort of the whole table) is what keeps the cost
            # proportional to the work that is due, not to every run that is waiting.
            assert f"USING INDEX {wanted}" in plan, (sql, plan)
            assert "TEMP B-TREE" not in plan, (sql, plan)
    store.close()


# -- several connections, threads and processes --------------------------------------------------


def test_wait_for_change_sees_commits_of_another_connection(db_path: Path) -> None:
    waiter, writer = SQLiteStore(db_path), SQLiteStore(db_path)

    def commit_soon() -> None:
        time.sleep(0.2)
        writer.create_run(new_run("r1"), NOW)

    thread = threading.Thread(target=commit_soon)
    started = time.monotonic()
    thread.start()
    waiter.wait_for_change(20)
    thread.join()
    assert time.monotonic() - started < 10
    assert waiter.get_run("r1") is not None
    waiter.close()
    writer.close()


def test_many_openers_of_a_new_file_create_the_schema_once(db_path: Path) -> None:
    barrier = threading.Barrier(6)
    errors: list[BaseException] = []
    stores: list[SQLiteStore] = []

    def open_at_once() -> None:
        barrier.wait()
        try:
            stores.append(SQLiteStore(db_path))
        except BaseException as exc:  # surfaced by the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=open_at_once) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert stores[0].create_run(new_run("r1"), NOW) is not None
    assert all(s.get_run("r1") is not None for s in stores)
    assert meta_version(db_path) == str(MIGRATIONS[-1][0])
    for store in stores:
        store.close()


APPENDER = """
import os, sys, time
from datetime import UTC, datetime
from flow_cli.errors import EventConflict
from flow_cli.model.events import SignalReceived
from flow_cli.model.status import RunStatus
from flow_cli.store.protocol import RunIndex
from flow_cli.store.sqlite import SQLiteStore

path, name, count, ready, go = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5]
store = SQLiteStore(path)
open(ready, "w").close()
while not os.path.exists(go):  # start together, so the appends really interleave
    time.sleep(0.005)
now = datetime(2026, 12, 1, tzinfo=UTC)
index = RunIndex(status=RunStatus.RUNNING)
conflicts = 0
for n in range(count):
    while True:
        last = store.read_history("shared")[-1].sequence
        time.sleep(0.0005)  # widen the read-to-write window, as a slow decision would
        try:
            event = SignalReceived(signal_name=name, payload=n)
            store.append_if_sequence("shared", last, [event], index, now)
            break
        except EventConflict:
            conflicts += 1  # the other process won this sequence: re-read and retry
store.close()
print(conflicts)
"""


@pytest.mark.slow
def test_two_processes_appending_leave_a_gapless_history(tmp_path: Path, db_path: Path) -> None:
    store = SQLiteStore(db_path)
    store.create_run(new_run("shared"), NOW)
    count, go = 120, tmp_path / "go"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
    }
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-c",
                APPENDER,
                str(db_path),
                name,
                str(count),
                str(tmp_path / name),
                str(go),
            ],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for name in ("alpha", "beta")
    ]
    try:
        deadline = time.monotonic() + 30
        while not all((tmp_path / name).exists() for name in ("alpha", "beta")):
            assert all(p.poll() is None for p in procs), [p.communicate() for p in procs]
            assert time.monotonic() < deadline, "appender processes did not start"
            time.sleep(0.01)
        go.touch()
        outputs = [p.communicate(timeout=60) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    assert [p.returncode for p in procs] == [0, 0], outputs
    print("conflicts per process:", [out.strip() for out, _ in outputs])
    history = store.read_history("shared")
    assert [e.sequence for e in history] == list(range(1, 2 * count + 2))
    seen = sorted((e.event.signal_name, e.event.payload) for e in history[1:])  # type: ignore[union-attr]
    assert seen == sorted((name, n) for name in ("alpha", "beta") for n in range(count))
    record = store.get_run("shared")
    assert record is not None and record.last_sequence == 2 * count + 1
    store.close()


# -- open_store ----------------------------------------------------------------------------------


def test_open_store_memory() -> None:
    first, second = open_store("memory://"), open_store("memory://")
    assert isinstance(first, MemoryStore) and first is not second


def test_open_store_sqlite_urls_and_paths(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    relative = open_store("sqlite:///rel.db")
    assert isinstance(relative, SQLiteStore) and relative.path == Path("rel.db")
    relative.close()
    assert (tmp_path / "rel.db").exists()
    absolute = open_store(f"sqlite:///{tmp_path / 'abs.db'}")  # sqlite:////abs/path
    assert isinstance(absolute, SQLiteStore) and absolute.path == tmp_path / "abs.db"
    absolute.close()
    bare = open_store(str(tmp_path / "bare.db"))
    assert isinstance(bare, SQLiteStore) and bare.path == tmp_path / "bare.db"
    bare.close()


def test_open_store_sqlite_options_and_create(tmp_path: Path) -> None:
    fast = open_store(f"sqlite:///{tmp_path}/fast.db?synchronous=NORMAL&busy_timeout_ms=900")
    assert isinstance(fast, SQLiteStore)
    assert fast._conn().execute("PRAGMA synchronous").fetchone()[0] == 1
    assert fast.busy_timeout_ms == 900
    fast.close()
    with pytest.raises(StoreError, match="No Flow database"):
        open_store(f"sqlite:///{tmp_path}/missing.db", create=False)
    assert not (tmp_path / "missing.db").exists()


@pytest.mark.parametrize(
    "url",
    [
        "mysql://db/flow",
        "sqlite://flow.db",
        "sqlite:///",
        "sqlite:///x.db?journal=off",
        "sqlite:///x.db?busy_timeout_ms=soon",
    ],
)
def test_open_store_rejects_bad_urls(url: str) -> None:
    with pytest.raises(ConfigError):
        open_store(url)


@pytest.mark.parametrize("url", ["postgresql://u:secret@db/flow", "postgres://db/flow"])
def test_open_store_postgres_is_imported_lazily(url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    opened: list[str] = []

    class FakePostgresStore:
        def __init__(self, target: str, *, schema: str | None = None, create: bool = True) -> None:
            opened.append(target)

    fake = types.ModuleType("flow_cli.store.postgres")
    fake.PostgresStore = FakePostgresStore  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "flow_cli.store.postgres", fake)
    assert isinstance(open_store(url), FakePostgresStore)
    assert opened == [url]


def test_importing_flow_cli_store_loads_no_backend() -> None:
    code = (
        "import sys, flow_cli.store; "
        "print(sorted(m for m in ('sqlite_utils', 'psycopg', 'flow_cli.store.sqlite') "
        "if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "[]"


def test_switching_a_new_file_to_wal_is_tried_again_while_another_opener_holds_it(
    db_path: Path,
) -> None:
    """SQLite may refuse ``journal_mode = WAL`` at once (no busy handler) while another opener
    of the same new file holds a lock: the store tries again until its busy timeout."""
    store = SQLiteStore(db_path)

    class Refusing:
        def __init__(self, times: int) -> None:
            self.times = times
            self.calls = 0

        def execute(self, sql: str) -> None:
            self.calls += 1
            if self.calls <= self.times:
                raise sqlite3.OperationalError("database is locked")

    briefly = Refusing(2)
    store._enter_wal(briefly)  # type: ignore[arg-type]
    assert briefly.calls == 3
    store.busy_timeout_ms = 50
    for_ever = Refusing(10**9)
    with pytest.raises(sqlite3.OperationalError, match="locked"):
        store._enter_wal(for_ever)  # type: ignore[arg-type]
    assert for_ever.calls > 1
    store.close()


def test_a_run_started_with_its_first_decision_is_inserted_as_the_decision_leaves_it(
    db_path: Path,
) -> None:
    """A run created with its first write in one commit (an eager start) is inserted in the
    state that write leaves it in, with run_started and the write's events: its row is never
    updated. A run id that exists is still a conflict, and writes nothing."""
    store = SQLiteStore(db_path)
    with sqlite3.connect(db_path) as conn:
        conn.execute("CREATE TABLE row_updates (run_id TEXT)")
        conn.execute(
            "CREATE TRIGGER count_update AFTER UPDATE ON runs "
            "BEGIN INSERT INTO row_updates VALUES (NEW.run_id); END"
        )
    received = SignalReceived(signal_name="s", payload=1)
    write = StreamWrite(run_id="r1", expected_sequence=1, events=[received], index=running())
    store.commit([write], [new_run("r1")], NOW)
    assert [e.sequence for e in store.read_history("r1")] == [1, 2]
    record = store.get_run("r1")
    assert record is not None and (record.status, record.last_sequence) == (
        RunStatus.RUNNING,
        2,
    )
    again = StreamWrite(run_id="r1", expected_sequence=2, events=[received], index=running())
    for stale in (write, again):
        with pytest.raises(EventConflict):
            store.commit([stale], [new_run("r1")], NOW)
    assert [e.sequence for e in store.read_history("r1")] == [1, 2]
    store.close()
    with sqlite3.connect(db_path) as conn:
        assert conn.execute("SELECT run_id FROM row_updates").fetchall() == []
