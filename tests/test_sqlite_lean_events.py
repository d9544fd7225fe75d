"""Schema version 12 on SQLite: the lean event row (times as integer microseconds), step
tasks ``WITHOUT ROWID`` and the runs index without ``runs_updated``, upgraded from a database that
version 11's Flow wrote (``tests/data/sqlite_v11.sql``, made by ``tests/data/make_sqlite_v11.py``
at commit 21bceb8)."""

from __future__ import annotations

import json
import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path

import lean_events_workflows as workflows
import pytest

from flow_cli.engine.engine import Engine
from flow_cli.model.clock import ManualClock
from flow_cli.model.events import EventEnvelope, event_from_data
from flow_cli.model.status import RunStatus
from flow_cli.store.sqlite import MIGRATIONS, SQLiteStore
from flow_cli.store.sqlite.connection import PAGE_SIZE

DUMP = Path(__file__).parent / "data" / "sqlite_v11.sql"


def v11_database(path: Path) -> dict[str, list[EventEnvelope]]:
    """The version 11 database at ``path``, and its histories read by version 11's rules
    (times as ``isoformat`` text)."""
    with sqlite3.connect(path) as conn:
        conn.executescript(DUMP.read_text(encoding="utf-8"))
        rows = conn.execute(
            "SELECT run_id, sequence, event_key, recorded_at, data FROM events "
            "ORDER BY run_id, sequence"
        ).fetchall()
        assert conn.execute("SELECT value FROM flow_meta").fetchone() == ("11",)
    conn.close()
    found: dict[str, list[EventEnvelope]] = {}
    for run_id, sequence, key, at, data in rows:
        found.setdefault(run_id, []).append(
            EventEnvelope(
                run_id=run_id,
                sequence=sequence,
                recorded_at=datetime.fromisoformat(at),
                event=event_from_data(key, json.loads(data)),
                size=len(data),
            )
        )
    return found


def test_a_version_11_database_upgrades_with_every_event_read_back_identically(
    tmp_path: Path,
) -> None:
    path = tmp_path / "flow.db"
    before = v11_database(path)
    assert len(before) == 24 and sum(map(len, before.values())) == 120
    with sqlite3.connect(path) as conn:
        tasks = conn.execute("SELECT * FROM step_tasks ORDER BY run_id, step_id").fetchall()
    conn.close()
    assert tasks  # the retrying runs' next attempts
    store = SQLiteStore(path)
    try:
        after = store.read_histories(dict.fromkeys(before, 0))
        assert after == before
        for run_id, history in before.items():
            assert store.read_history(run_id) == history
            assert store.read_history(run_id, 2) == history[2:]
            # What the envelopes do not compare: the time's type and zone, the JSON's size.
            for old, new in zip(history, after[run_id], strict=True):
                assert (new.recorded_at.tzinfo, new.size) == (UTC, old.size)
        assert store.check_integrity() == []
    finally:
        store.close()
    with sqlite3.connect(path) as conn:
        (sql,) = conn.execute("SELECT sql FROM sqlite_master WHERE name = 'step_tasks'").fetchone()
        indexes = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='index'")}
        types = conn.execute("SELECT DISTINCT typeof(recorded_at) FROM events").fetchall()
        version = conn.execute("SELECT value FROM flow_meta").fetchone()
        columns = "run_id, step_id, build_id, attempt, available_at, lease_owner, priority"
        moved = conn.execute(f"SELECT {columns}, step_name FROM step_tasks ORDER BY 1, 2")
        assert moved.fetchall() == tasks
        # A database keeps its page size: only a new one is made with small pages.
        assert conn.execute("PRAGMA page_size").fetchone() == (4096,)
    conn.close()
    assert sql.endswith("WITHOUT ROWID") and types == [("integer",)]
    assert "runs_updated" not in indexes and "sqlite_autoindex_step_tasks_1" not in indexes
    assert "step_tasks_priority_ready" in indexes
    assert version == (str(MIGRATIONS[-1][0]),) == ("12",)


def test_a_worker_continues_the_runs_of_an_upgraded_database(tmp_path: Path) -> None:
    path = tmp_path / "flow.db"
    before = v11_database(path)
    clock = ManualClock(datetime(2026, 12, 1, 9, 1, tzinfo=UTC))
    engine = Engine(SQLiteStore(path), [workflows.runtime], clock=clock)
    try:
        kinds = {r: h[0].event.spec.input.get("kind") for r, h in before.items()}  # type: ignore[attr-defined]
        waiting = [r for r, kind in kinds.items() if kind == "waits"]
        sleeping = [r for r, kind in kinds.items() if kind == "sleeps"]
        assert waiting and sleeping
        for run_id in waiting:
            engine.signal(run_id, "approve", {"ok": True})
        engine.tick(until_idle=True)
        clock.advance(timedelta(days=31))
        engine.tick(until_idle=True)
        for run_id in [*waiting, *sleeping]:
            assert engine.get_run(run_id).status == RunStatus.COMPLETED
        for run_id, history in before.items():
            assert engine.history(run_id)[: len(history)] == history
        new = engine.history(sleeping[0])[len(before[sleeping[0]]) :]
        assert new and all(e.recorded_at >= clock.now() for e in new)
        # Runs started now sit beside the upgraded ones.
        engine.start("order", {"customer": "new", "kind": "completes"}, run_id="v12-new")
        engine.tick(until_idle=True)
        assert engine.get_run("v12-new").status == RunStatus.COMPLETED
        assert engine.store.check_integrity() == []
    finally:
        engine.close()


@pytest.mark.parametrize(
    "at",
    [
        datetime(2026, 12, 1, 9, 0, 0, 999999, tzinfo=UTC),
        datetime(1999, 12, 31, 23, 59, 59, 1, tzinfo=UTC),
        datetime(2026, 12, 1, 10, 0, 0, 5, tzinfo=UTC) - timedelta(hours=1),
    ],
)
def test_event_times_keep_every_microsecond(tmp_path: Path, at: datetime) -> None:
    from store_helpers import new_run

    store = SQLiteStore(tmp_path / "flow.db")
    try:
        made = store.create_run(new_run("a"), at)
        assert made is not None and made.recorded_at == at
        [read] = store.read_history("a")
        assert read == made and read.recorded_at.tzinfo is UTC
    finally:
        store.close()


def test_a_new_database_has_small_pages(tmp_path: Path) -> None:
    SQLiteStore(tmp_path / "flow.db").close()
    with sqlite3.connect(tmp_path / "flow.db") as conn:
        assert conn.execute("PRAGMA page_size").fetchone() == (PAGE_SIZE,) == (1024,)
        assert conn.execute("PRAGMA auto_vacuum").fetchone() == (2,)  # incremental
    conn.close()


def test_the_upgrade_converts_any_recorded_time_and_keeps_what_is_not_one(
    tmp_path: Path,
) -> None:
    path = tmp_path / "flow.db"
    before = v11_database(path)
    first, second = sorted(before)[:2]
    with sqlite3.connect(path) as conn:  # another offset, no fraction; and a damaged one
        conn.execute(
            "UPDATE events SET recorded_at = '2026-12-01T11:00:00+02:00' "
            "WHERE run_id = ? AND sequence = 1",
            (first,),
        )
        conn.execute(
            "UPDATE events SET recorded_at = 'garbage' WHERE run_id = ? AND sequence = 1",
            (second,),
        )
    conn.close()
    store = SQLiteStore(path)
    try:
        [started] = store.read_history(first)[:1]
        assert started.recorded_at == datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
        assert store.read_history(first)[1:] == before[first][1:]
        assert store.check_integrity() == [
            f"run {second!r}: event 1 has no valid time (recorded_at)"
        ]
    finally:
        store.close()
