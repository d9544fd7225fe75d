"""``flow check`` on SQLite: stored values that Flow could not read back.

SQLite stores whatever bytes it is given in a TEXT column, and ``PRAGMA integrity_check`` looks
at pages, not at values. So a value that is not UTF-8, an event time that is no time, or a run
status Flow does not know passes that check, yet ``flow history`` or ``flow show`` of the run
fails with "the database is corrupt ... run `flow check`". These checks find such rows. The
values are handed over as bytes (``CAST(... AS BLOB)``) and judged in Python exactly as the
store reads them (UTF-8, ``datetime.fromisoformat``), one row at a time.
"""

from __future__ import annotations

import sqlite3
from datetime import datetime

from flow_cli.model.status import RunStatus

MAX_REPORTED = 20
"""Offending rows reported per check; the rest are counted."""


def _utf8(value: bytes | None) -> bool:
    if value is None:
        return True
    try:
        value.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _time(value: bytes | None) -> bool:
    if value is None:
        return True
    try:
        datetime.fromisoformat(value.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return False
    return True


def _blob(column: str) -> str:
    return f"CAST({column} AS BLOB)"


def _all_utf8(*columns: str) -> str:
    return " AND ".join(f"flow_utf8({_blob(c)})" for c in columns)


_STATUSES = ", ".join(f"'{s.value}'" for s in RunStatus)

CHECKS: tuple[tuple[str, str], ...] = (
    (
        f"SELECT {_blob('run_id')}, sequence FROM events "
        f"WHERE NOT ({_all_utf8('run_id', 'event_key', 'data')})",
        "run {0}: event {1} holds text that is not UTF-8",
    ),
    (
        # Microseconds since the epoch (schema version 12): an integer, or not a time.
        f"SELECT {_blob('run_id')}, sequence FROM events WHERE typeof(recorded_at) <> 'integer'",
        "run {0}: event {1} has no valid time (recorded_at)",
    ),
    (
        f"SELECT {_blob('run_id')}, NULL FROM runs WHERE NOT ("
        f"{_all_utf8('run_id', 'workflow', 'status', 'build_id', 'created_at', 'updated_at')})",
        "run {0}: its row in the runs index holds text that is not UTF-8",
    ),
    (
        f"SELECT {_blob('run_id')}, {_blob('status')} FROM runs "
        f"WHERE status NOT IN ({_STATUSES}) OR NOT flow_time({_blob('created_at')}) "
        f"OR NOT flow_time({_blob('updated_at')}) OR NOT flow_time({_blob('decide_at')})",
        "run {0}: its row in the runs index has an unknown status ({1}) or an invalid time",
    ),
)


def _shown(value: object) -> str:
    if isinstance(value, bytes):
        return repr(value.decode("utf-8", "backslashreplace"))
    return str(value)


def decoding_problems(conn: sqlite3.Connection) -> list[str]:
    """One sentence per row whose values Flow could not read back (see the module)."""
    conn.create_function("flow_utf8", 1, _utf8, deterministic=True)
    conn.create_function("flow_time", 1, _time, deterministic=True)
    problems: list[str] = []
    for sql, message in CHECKS:
        rows = conn.execute(sql).fetchall()
        problems.extend(message.format(*(_shown(v) for v in row)) for row in rows[:MAX_REPORTED])
        if len(rows) > MAX_REPORTED:
            problems.append(f"... and {len(rows) - MAX_REPORTED} more like the one above")
    return problems
