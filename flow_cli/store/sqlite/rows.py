"""Rows in and out of SQLite: times as fixed-width text, events as JSON rows, run records, and
the one place a lost race becomes ``EventConflict``."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, NoReturn

from flow_cli.errors import EventConflict, RunNotFound
from flow_cli.model.events import Event, EventEnvelope, event_json
from flow_cli.model.status import RunStatus
from flow_cli.store import damage
from flow_cli.store.protocol import RunRecord, StreamWrite
from flow_cli.store.sql import Dialect
from flow_cli.store.sqlite.schema import BUILD_KEY, EPOCH, MICROSECOND


def ts(value: datetime) -> str:
    """Fixed-width UTC text, so string order is time order (a naive time is taken as UTC)."""
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.astimezone(UTC).isoformat(timespec="microseconds")


def ts_or_none(value: datetime | None) -> str | None:
    return None if value is None else ts(value)


SQLITE = Dialect(
    param="?",
    text_param="?",
    time_param="?",
    time=ts,
    named=lambda name: f":{name}",
    position="instr",
    build_key=BUILD_KEY,
    created_order="rowid",
    false="0",
    json_value=json.loads,
)


def dt(text: str) -> datetime:
    return datetime.fromisoformat(text)


def dt_or_none(text: str | None) -> datetime | None:
    return None if text is None else dt(text)


def micros(stamp: str) -> int:
    """An event's time as stored (schema version 12): microseconds since the epoch, UTC, from
    the ``ts`` text of the write (exact: ``ts`` keeps microseconds)."""
    return (datetime.fromisoformat(stamp) - EPOCH) // MICROSECOND


def from_micros(value: int) -> datetime:
    """The time ``micros`` stored, as the aware UTC ``datetime`` it was made from (ValueError
    for a stored value that is not one: ``flow check`` names it)."""
    if type(value) is not int:
        raise ValueError(f"{value!r} is not a time")
    return EPOCH + MICROSECOND * value


def insert_events(
    conn: sqlite3.Connection, run_id: str, expected: int, rows: list[tuple[str, str]], stamp: str
) -> None:
    """Insert encoded events as sequences ``expected + 1, ...``; ``EventConflict`` when the
    primary key catches a writer the sequence check could not see."""
    at = micros(stamp)
    try:
        conn.executemany(
            "INSERT INTO events (run_id, sequence, event_key, recorded_at, data) "
            "VALUES (?, ?, ?, ?, ?)",
            [(run_id, expected + i, k, at, d) for i, (k, d) in enumerate(rows, 1)],
        )
    except sqlite3.IntegrityError:
        lost_race(conn, run_id, expected, actual=expected)


def lost_race(
    conn: sqlite3.Connection, run_id: str, expected: int, *, actual: int | None = None
) -> NoReturn:
    """The one place a lost race becomes ``EventConflict`` (``RunNotFound`` when a write
    after ``expected`` > 0 finds no run): the sequence a guarded statement did not find, or
    an event the primary key refused. ``actual`` defaults to the run's stored sequence."""
    if actual is None:
        found = conn.execute(
            "SELECT last_sequence FROM runs WHERE run_id = ?", (run_id,)
        ).fetchone()
        if found is None and expected > 0:
            raise RunNotFound(run_id)
        actual = found[0] if found else 0
    raise EventConflict(run_id, expected, actual) from None


def encode(events: Sequence[Event]) -> list[tuple[str, str]]:
    return [(e.event_key(), event_json(e)) for e in events]


def encoded_rows(write: StreamWrite) -> list[tuple[str, str]]:
    """The write's events as (key, JSON) rows; the JSON the writer made already if it did."""
    data = write.data
    if data is None or len(data) != len(write.events):
        return encode(write.events)
    return [(e.event_key(), text) for e, text in zip(write.events, data, strict=True)]


def envelopes(writes: Sequence[StreamWrite], stamp: str) -> list[list[EventEnvelope]]:
    now = dt(stamp)
    return [
        [
            EventEnvelope(
                run_id=w.run_id,
                sequence=seq,
                recorded_at=now if w.recorded_at is None else dt(ts(w.recorded_at)),
                event=e,
            )
            for seq, e in enumerate(w.events, w.expected_sequence + 1)
        ]
        for w in writes
    ]


RUN_COLUMNS = (
    "run_id, workflow, status, build_id, parent_run_id, created_at, updated_at, "
    "last_sequence, decide_at, failing, waiting_on, error_type, error, priority, "
    "(SELECT json_group_object(a.key, json(a.value)) FROM run_attributes a "
    "WHERE a.run_id = runs.run_id)"
)
RUN_SELECT = f"SELECT {RUN_COLUMNS} FROM runs"


def run_record(row: tuple[Any, ...]) -> RunRecord:
    try:
        return RunRecord(
            run_id=row[0],
            workflow=row[1],
            status=RunStatus(row[2]),
            build_id=row[3],
            parent_run_id=row[4],
            created_at=dt(row[5]),
            updated_at=dt(row[6]),
            last_sequence=row[7],
            decide_at=dt_or_none(row[8]),
            failing=row[9],
            waiting_on=row[10],
            error_type=row[11],
            error=row[12],
            priority=row[13],
            attributes=json.loads(row[14]) if row[14] else {},
        )
    except (TypeError, ValueError) as exc:
        raise damage.Unreadable(
            f"the runs row of {row[0]!r} cannot be read ({damage.reason(exc)})"
        ) from exc
