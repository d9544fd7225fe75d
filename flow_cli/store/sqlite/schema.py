"""The SQLite schema: every version's migration, in order, and the SQL lists the queries share."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from flow_cli.model.status import TERMINAL_STATUSES, RunStatus

if TYPE_CHECKING:
    from sqlite_utils import Database

Migration = Callable[["Database"], None]


def _v1_initial(db: Database) -> None:
    """Event streams, plus the runs, step task and hook indexes derived from them."""
    db.create_table("flow_meta", {"key": str, "value": str}, pk="key", not_null={"value"})
    db.create_table(
        "events",
        {"run_id": str, "sequence": int, "event_key": str, "recorded_at": str, "data": str},
        pk=("run_id", "sequence"),
        not_null={"event_key", "recorded_at", "data"},
    )
    runs = db.create_table(
        "runs",
        {
            "run_id": str,
            "workflow": str,
            "status": str,
            "build_id": str,
            "parent_run_id": str,
            "created_at": str,
            "updated_at": str,
            "last_sequence": int,
            "decide_at": str,
            "lease_owner": str,
            "failing": str,
        },
        pk="run_id",
        not_null={"workflow", "status", "build_id", "created_at", "updated_at", "last_sequence"},
    )
    # decide_at serves the scheduler (cost follows the number due); the rest serve `flow runs`.
    for column in ("decide_at", "status", "workflow", "created_at"):
        runs.create_index([column], index_name=f"runs_{column}")
    tasks = db.create_table(
        "step_tasks",
        {
            "run_id": str,
            "step_id": str,
            "build_id": str,
            "attempt": int,
            "available_at": str,
            "lease_owner": str,
        },
        pk=("run_id", "step_id"),
        not_null={"build_id", "attempt", "available_at"},
    )
    tasks.create_index(["available_at"], index_name="step_tasks_available_at")
    db.create_table(
        "hooks",
        {"token": str, "run_id": str, "hook_id": str, "resolved": int},
        pk="token",
        not_null={"run_id", "hook_id", "resolved"},
    )


def _v3_fleet(db: Database) -> None:
    """The workers registry (``flow workers``, ``flow doctor``) and each run's patch markers
    (``flow builds``), copied from ``run_started`` for the runs that exist already."""
    conn = db.conn
    conn.execute(
        "CREATE TABLE workers (worker_id TEXT PRIMARY KEY, host TEXT NOT NULL, "
        "pid INTEGER NOT NULL, builds TEXT NOT NULL, started_at TEXT NOT NULL, "
        "heartbeat_at TEXT NOT NULL, heartbeat_seconds REAL NOT NULL, stopped_at TEXT)"
    )
    conn.execute("ALTER TABLE runs ADD COLUMN patches TEXT")
    conn.execute(
        "UPDATE runs SET patches = (SELECT json_extract(e.data, '$.spec.patches') FROM events e "
        "WHERE e.run_id = runs.run_id AND e.sequence = 1)"
    )


EVENTS_TABLE = (
    "CREATE TABLE {name} (run_id TEXT NOT NULL, sequence INTEGER NOT NULL, "
    "event_key TEXT NOT NULL, recorded_at INTEGER NOT NULL, data TEXT NOT NULL, "
    "PRIMARY KEY (run_id, sequence))"
)
"""The events table since version 12: ``recorded_at`` in microseconds since ``EPOCH``.

A rowid table with its primary key as a second B-tree, not ``WITHOUT ROWID``, measured both
ways: ``WITHOUT ROWID`` saves ~160 B a run (bench/scale.py's mix) but costs every commit
more pages. New events land at the end of the rowid table, where SQLite splits a full page
by starting a new one (one page, shared by every run of a group commit), while in a
``WITHOUT ROWID`` tree each run's events go to the middle and a full page is rebalanced
with its siblings (three pages). Bytes written per step with 2 KiB pages
(bench/step_bytes.py): W1's shape 7.8 KB against 13.7 KB, W2's 19.1 KB against 20.5 KB."""

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
MICROSECOND = timedelta(microseconds=1)


def time_text(expr: str) -> str:
    """SQL for an event time as ``rows.ts`` text, whether stored as such (before version 12)
    or in microseconds: the earlier migrations also run on tables today's code made (tests
    rewind a database by dropping what a version added)."""
    return (
        f"CASE typeof({expr}) WHEN 'integer' THEN "
        f"strftime('%Y-%m-%dT%H:%M:%S', {expr} / 1000000, 'unixepoch') "
        f"|| printf('.%06d+00:00', {expr} % 1000000) ELSE {expr} END"
    )


TERMINAL_LIST = ", ".join(f"'{s.value}'" for s in sorted(TERMINAL_STATUSES))
"""The terminal statuses as an SQL list: hooks of ended runs are not open."""

OPEN_LIST = ", ".join(f"'{s.value}'" for s in RunStatus if not s.terminal)
"""The open statuses as an SQL list (``status IN`` is served by the status index)."""

BUILD_KEY = "substr(build_id, 1)"
"""The indexed expression that `--build-id` filters on (see ``_v2_triage``)."""


def _v2_triage(db: Database) -> None:
    """Filters for `flow runs`/`count` served by indexes, and what `flow hook list` shows.

    ``runs.waiting_on`` holds what an open run waits on (``KIND:ID`` entries, NULL when nothing);
    runs opened before this version get theirs with their next event. Each listing index ends
    in ``created_at`` so that "newest first" within one filter reads the index in order.
    """
    conn = db.conn
    conn.execute("ALTER TABLE runs ADD COLUMN waiting_on TEXT")
    conn.execute("ALTER TABLE hooks ADD COLUMN created_at TEXT")
    conn.execute("ALTER TABLE hooks ADD COLUMN metadata TEXT")
    for name, columns in (
        ("runs_status_created", "status, created_at"),
        ("runs_workflow_created", "workflow, created_at"),
        ("runs_parent_created", "parent_run_id, created_at"),
        ("runs_updated", "updated_at"),
    ):
        conn.execute(f"CREATE INDEX {name} ON runs ({columns})")
    # On an expression that only `flow runs --build-id` uses: a plain build_id index would lure
    # the scheduler's lease query (build_id IN ... ORDER BY decide_at) away from runs_decide_at.
    conn.execute(f"CREATE INDEX runs_build_created ON runs ({BUILD_KEY}, created_at)")
    # Superseded by the two above, which also give the listing order.
    conn.execute("DROP INDEX runs_status")
    conn.execute("DROP INDEX runs_workflow")
    conn.execute("CREATE INDEX runs_failing ON runs (created_at) WHERE failing IS NOT NULL")
    conn.execute("CREATE INDEX runs_waiting ON runs (created_at) WHERE waiting_on IS NOT NULL")
    conn.execute("CREATE INDEX hooks_run ON hooks (run_id, created_at)")
    conn.execute("CREATE INDEX hooks_open ON hooks (created_at) WHERE resolved = 0")
    # Hooks indexed before this version: their creation time and metadata from history.
    conn.execute(
        "UPDATE hooks SET (created_at, metadata) = ("
        f" SELECT {time_text('e.recorded_at')}, json_quote(json_extract(e.data, '$.metadata'))"
        " FROM events e"
        " WHERE e.run_id = hooks.run_id AND e.event_key = 'hook_created'"
        " AND json_extract(e.data, '$.hook_id') = hooks.hook_id ORDER BY e.sequence LIMIT 1)"
    )


def _v4_failing_since(db: Database) -> None:
    """When each failing run's decisions began to fail (``flow doctor``'s since). Runs failing
    already get the time of their last ``decision_failed``."""
    conn = db.conn
    conn.execute("ALTER TABLE runs ADD COLUMN failing_since TEXT")
    latest = time_text("max(e.recorded_at)")
    conn.execute(
        f"UPDATE runs SET failing_since = coalesce((SELECT {latest} FROM events e "
        "WHERE e.run_id = runs.run_id AND e.event_key = 'decision_failed'), updated_at) "
        "WHERE failing IS NOT NULL"
    )


def _v5_run_errors(db: Database) -> None:
    """Why a run failed or its decisions fail (``flow runs``' reason, ``--error-type``), filled
    for the runs recorded before by the rule new writes follow (``store.run_error``)."""
    from flow_cli.store.run_error import error_of, failing_error

    conn = db.conn
    conn.execute("ALTER TABLE runs ADD COLUMN error_type TEXT")
    conn.execute("ALTER TABLE runs ADD COLUMN error TEXT")
    conn.execute(
        "CREATE INDEX runs_error_type ON runs (error_type, created_at) WHERE error_type IS NOT NULL"
    )
    found = [
        (error_of(json.loads(data).get("error")), run_id)
        for run_id, data in conn.execute(
            "SELECT r.run_id, e.data FROM runs r JOIN events e ON e.run_id = r.run_id "
            "AND e.sequence = r.last_sequence WHERE r.status = 'Failed' "
            "AND e.event_key = 'run_failed'"
        )
    ]
    found += [
        (failing_error(failing), run_id)
        for run_id, failing in conn.execute(
            f"SELECT run_id, failing FROM runs WHERE failing IS NOT NULL "
            f"AND status NOT IN ({TERMINAL_LIST})"
        )
    ]
    conn.executemany(
        "UPDATE runs SET error_type = ?, error = ? WHERE run_id = ?",
        [(error.error_type, error.text, run_id) for error, run_id in found],
    )


def _v6_schedules(db: Database) -> None:
    """Schedules (``flow schedule``): definition and firing state as JSON, the time a worker
    should next look at each, indexed only where set (paused and finished ones stay out), so
    an idle worker's look is one index probe."""
    conn = db.conn
    conn.execute(
        "CREATE TABLE IF NOT EXISTS schedules (schedule_id TEXT PRIMARY KEY, spec TEXT NOT NULL, "
        "state TEXT NOT NULL, due_at TEXT, version INTEGER NOT NULL)"
    )
    conn.execute(
        "CREATE INDEX IF NOT EXISTS schedules_due ON schedules (due_at) WHERE due_at IS NOT NULL"
    )


def _v7_step_heartbeats(db: Database) -> None:
    """Each step's last heartbeat (``info.heartbeat``), written with a lease renewal rather
    than as an event, read by the step's next attempt and by ``flow show``."""
    db.conn.execute(
        "CREATE TABLE IF NOT EXISTS step_heartbeats (run_id TEXT NOT NULL, step_id TEXT NOT NULL, "
        "attempt INTEGER NOT NULL, worker TEXT NOT NULL, details TEXT NOT NULL, at TEXT NOT NULL, "
        "PRIMARY KEY (run_id, step_id))"
    )


def _v8_run_attributes(db: Database) -> None:
    """Search attributes (``flow runs --attr k=v``): one row per run and key, the value as its
    JSON text; ``run_attributes_value`` serves the filter (key and value to the run ids).
    Runs recorded before this version had no way to set attributes: nothing to fill in."""
    conn = db.conn
    conn.execute(
        "CREATE TABLE IF NOT EXISTS run_attributes (run_id TEXT NOT NULL, key TEXT NOT NULL, "
        "value TEXT NOT NULL, PRIMARY KEY (run_id, key)) WITHOUT ROWID"
    )
    conn.execute(
        "CREATE INDEX IF NOT EXISTS run_attributes_value ON run_attributes (key, value, run_id)"
    )


def _v9_leases(db: Database) -> None:
    """Named leases that keep a maintenance job (background retention) to one worker."""
    db.conn.execute(
        "CREATE TABLE IF NOT EXISTS leases (name TEXT PRIMARY KEY, owner TEXT NOT NULL, "
        "held_until TEXT NOT NULL)"
    )


def _v10_priorities_pauses(db: Database) -> None:
    """Run priorities (``flow start --priority``) on runs and their step tasks, with the
    indexes the leases read in (priority, then due time) in place of the due-time ones, and
    the pauses table (``flow
    pause``; see ``flow_cli.store.pauses_sql``). Runs recorded before have the default, 5."""
    from flow_cli.store.pauses_sql import priority_indexes_and_pauses

    conn = db.conn
    for table in ("runs", "step_tasks"):  # idempotent, as the later versions' tables are
        if "priority" not in {row[1] for row in conn.execute(f"PRAGMA table_info({table})")}:
            conn.execute(f"ALTER TABLE {table} ADD COLUMN priority INTEGER NOT NULL DEFAULT 5")
    priority_indexes_and_pauses(conn.execute, runs_tie="", tasks_tie="", time="TEXT")


def _v11_limits(db: Database) -> None:
    """Flow-control limits (``flow limits``): what code declared and an operator overrode per
    ``step:NAME`` / ``workflow:NAME``, the starts a rate counts, and each step task's name
    (the limits are enforced by it)."""
    conn = db.conn
    conn.execute(
        "CREATE TABLE IF NOT EXISTS limits (kind TEXT NOT NULL, name TEXT NOT NULL, "
        "code_concurrency INTEGER, code_rate TEXT, code_rate_count INTEGER, "
        "code_rate_seconds INTEGER, code_key TEXT, overridden INTEGER NOT NULL DEFAULT 0, "
        "concurrency INTEGER, rate_count INTEGER, rate_seconds INTEGER, "
        "limited INTEGER NOT NULL DEFAULT 0, PRIMARY KEY (kind, name))"
    )
    conn.execute(
        "CREATE TABLE IF NOT EXISTS limit_starts (name TEXT NOT NULL, started_at TEXT NOT NULL)"
    )
    conn.execute("CREATE INDEX IF NOT EXISTS limit_starts_name ON limit_starts (name, started_at)")
    conn.execute(
        "CREATE TABLE IF NOT EXISTS run_slots (run_id TEXT PRIMARY KEY, workflow TEXT NOT NULL, "
        "key TEXT NOT NULL, admitted INTEGER NOT NULL DEFAULT 0)"
    )
    conn.execute("CREATE INDEX IF NOT EXISTS run_slots_workflow ON run_slots (workflow, admitted)")
    if "step_name" not in {row[1] for row in conn.execute("PRAGMA table_info(step_tasks)")}:
        conn.execute("ALTER TABLE step_tasks ADD COLUMN step_name TEXT")
    # No index on step_name: every step task has one, so it would cost every step's insert,
    # lease and delete an index entry (W1 on SQLite: 0.88x) to serve only the leases of
    # limited steps, which read step_tasks (the open attempts alone) without it.
    conn.execute("DROP INDEX IF EXISTS step_tasks_step_name")


def _micros(text: str | int | None) -> str | int | None:
    """A stored event time (``rows.ts`` text) as integer microseconds since the epoch, UTC;
    what cannot be read as a time is kept as it was, for ``flow check`` to report."""
    if not isinstance(text, str):
        return text
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        return text
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return (value - EPOCH) // MICROSECOND


def _v12_lean_events(db: Database) -> None:
    """Fewer bytes a run and a step: each event's time as integer microseconds since the
    epoch (8 bytes, not 32 characters of text; see ``EVENTS_TABLE``), step tasks in their
    primary key's order, and no ``runs_updated`` index (no query is served by it: ``--idle``
    and prune read the status or creation index; yet every step moved its entry). The events
    are copied in key order, so the new table's pages and its key's are full."""
    conn = db.conn
    conn.create_function("flow_micros", 1, _micros, deterministic=True)
    conn.execute(EVENTS_TABLE.format(name="events_v12"))
    # The fixed-width UTC text every Flow wrote is converted in SQL; anything else in Python.
    conn.execute(
        "INSERT INTO events_v12 (run_id, sequence, event_key, recorded_at, data) "
        "SELECT run_id, sequence, event_key, CASE WHEN recorded_at GLOB "
        "'[0-9][0-9][0-9][0-9]-[0-9][0-9]-[0-9][0-9]T[0-9][0-9]:[0-9][0-9]:[0-9][0-9]"
        ".[0-9][0-9][0-9][0-9][0-9][0-9]+00:00' "
        "THEN CAST(strftime('%s', substr(recorded_at, 1, 19)) AS INTEGER) * 1000000 "
        "+ CAST(substr(recorded_at, 21, 6) AS INTEGER) "
        "ELSE flow_micros(recorded_at) END, data FROM events ORDER BY run_id, sequence"
    )
    conn.execute("DROP TABLE events")
    conn.execute("ALTER TABLE events_v12 RENAME TO events")
    conn.execute("DROP INDEX IF EXISTS runs_updated")
    # Step tasks likewise: a row is inserted, leased and deleted for every step, and the
    # rowid table's separate (run_id, step_id) index cost each of those a page more.
    conn.execute(
        "CREATE TABLE step_tasks_v12 (run_id TEXT NOT NULL, step_id TEXT NOT NULL, "
        "build_id TEXT NOT NULL, attempt INTEGER NOT NULL, available_at TEXT NOT NULL, "
        "lease_owner TEXT, priority INTEGER NOT NULL DEFAULT 5, step_name TEXT, "
        "PRIMARY KEY (run_id, step_id)) WITHOUT ROWID"
    )
    conn.execute(
        "INSERT INTO step_tasks_v12 (run_id, step_id, build_id, attempt, available_at, "
        "lease_owner, priority, step_name) SELECT run_id, step_id, build_id, attempt, "
        "available_at, lease_owner, priority, step_name FROM step_tasks"
    )
    conn.execute("DROP TABLE step_tasks")
    conn.execute("ALTER TABLE step_tasks_v12 RENAME TO step_tasks")
    conn.execute("CREATE INDEX step_tasks_priority_ready ON step_tasks (priority, available_at)")


MIGRATIONS: list[tuple[int, Migration]] = [
    (1, _v1_initial),
    (2, _v2_triage),
    (3, _v3_fleet),
    (4, _v4_failing_since),
    (5, _v5_run_errors),
    (6, _v6_schedules),
    (7, _v7_step_heartbeats),
    (8, _v8_run_attributes),
    (9, _v9_leases),
    (10, _v10_priorities_pauses),
    (11, _v11_limits),
    (12, _v12_lean_events),
]
"""Every schema version in order; the last one is what this code reads and writes."""
