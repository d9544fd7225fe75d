"""The ``Schedules`` role on SQL: one ``schedules`` table, the same statements on SQLite and
PostgreSQL with the placeholder and time encoding of the backend's ``Dialect``.

A row holds the definition and the firing state as JSON (nothing queries inside them), the
``due_at`` a worker looks at (indexed, NULL for paused or finished schedules, so the index
holds only live ones) and a ``version`` every write bumps: a write names the version it read
and is refused if the row moved meanwhile (optimistic concurrency, as events use sequences).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

from flow_cli.model.schedule import Schedule, ScheduleSpec, ScheduleState
from flow_cli.store.sql import SQLRole

COLUMNS = "schedule_id, spec, state, due_at, version"


def schedule_from_row(row: Sequence[Any], when: Callable[[Any], datetime]) -> Schedule:
    """A ``Schedule`` from a row of ``COLUMNS``; ``when`` decodes a stored time."""
    return Schedule(
        spec=ScheduleSpec.from_json(_json(row[1])),
        state=ScheduleState.from_json(_json(row[2])),
        due_at=None if row[3] is None else when(row[3]).astimezone(UTC),
        version=int(row[4]),
    )


def _json(value: Any) -> dict[str, Any]:
    found: dict[str, Any] = value if isinstance(value, dict) else json.loads(value)
    return found


class SQLSchedules(SQLRole):
    """``Schedules`` for a store that provides ``_sql_write`` (one transaction) and
    ``_sql_read`` (one read) and names its ``_sql_dialect``."""

    _schedule_lock_rows: str = ""
    """What the claim's SELECT appends to lock the rows it picks (PostgreSQL: ``FOR UPDATE
    SKIP LOCKED``, so two claimers never pick the same row)."""

    def _params(self, schedule: Schedule) -> tuple[Any, ...]:
        d = self._sql_dialect
        return (
            json.dumps(schedule.spec.to_json()),
            json.dumps(schedule.state.to_json()),
            d.time_or_none(schedule.due_at),
        )

    def create_schedule(self, schedule: Schedule) -> bool:
        """Store a new schedule at version 1; False (writing nothing) if the id is taken."""
        p = self._sql_dialect.param
        with self._sql_write() as conn:
            cur = conn.execute(
                f"INSERT INTO schedules ({COLUMNS}) VALUES ({p}, {p}, {p}, {p}, 1) "
                "ON CONFLICT (schedule_id) DO NOTHING",
                (schedule.schedule_id, *self._params(schedule)),
            )
            return bool(cur.rowcount)

    def get_schedule(self, schedule_id: str) -> Schedule | None:
        """The schedule with that id, or ``None``."""
        p = self._sql_dialect.param
        with self._sql_read() as conn:
            row = conn.execute(
                f"SELECT {COLUMNS} FROM schedules WHERE schedule_id = {p}", (schedule_id,)
            ).fetchone()
        return None if row is None else schedule_from_row(row, self._sql_time)

    def list_schedules(self) -> list[Schedule]:
        """Every schedule, by id."""
        with self._sql_read() as conn:
            rows = conn.execute(f"SELECT {COLUMNS} FROM schedules ORDER BY schedule_id").fetchall()
        return [schedule_from_row(row, self._sql_time) for row in rows]

    def save_schedule(self, schedule: Schedule) -> bool:
        """Write ``schedule`` if the stored one is still at ``schedule.version`` (the stored
        version becomes one more); False, writing nothing, if it moved or is gone."""
        p = self._sql_dialect.param
        with self._sql_write() as conn:
            cur = conn.execute(
                f"UPDATE schedules SET spec = {p}, state = {p}, due_at = {p}, "
                f"version = version + 1 WHERE schedule_id = {p} AND version = {p}",
                (*self._params(schedule), schedule.schedule_id, schedule.version),
            )
            return bool(cur.rowcount)

    def delete_schedule(self, schedule_id: str) -> bool:
        """Forget the schedule (its runs stay); False if there was none."""
        p = self._sql_dialect.param
        with self._sql_write() as conn:
            cur = conn.execute(f"DELETE FROM schedules WHERE schedule_id = {p}", (schedule_id,))
            return bool(cur.rowcount)

    def claim_schedules(self, now: datetime, claim_until: datetime, limit: int) -> list[Schedule]:
        """Take up to ``limit`` schedules due by ``now``, earliest first: each one's ``due_at``
        moves to ``claim_until`` (others pass it by until then, or until the claimer saves it)
        and its version is bumped. Returns them as stored after the claim."""
        d = self._sql_dialect
        p = d.param
        with self._sql_write() as conn:
            rows = conn.execute(
                f"SELECT {COLUMNS} FROM schedules WHERE due_at IS NOT NULL AND due_at <= {p} "
                f"ORDER BY due_at LIMIT {p} {self._schedule_lock_rows}",
                (d.time(now), limit),
            ).fetchall()
            if not rows:
                return []
            ids = [row[0] for row in rows]
            marks = ", ".join([p] * len(ids))
            conn.execute(
                f"UPDATE schedules SET due_at = {p}, version = version + 1 "
                f"WHERE schedule_id IN ({marks})",
                (d.time(claim_until), *ids),
            )
        claimed = [schedule_from_row(row, self._sql_time) for row in rows]
        return [_claimed(s, claim_until) for s in claimed]

    def next_schedule_due(self) -> datetime | None:
        """The earliest ``due_at`` of any schedule: one lookup in the ``due_at`` index."""
        with self._sql_read() as conn:
            row = conn.execute(
                "SELECT due_at FROM schedules WHERE due_at IS NOT NULL ORDER BY due_at LIMIT 1"
            ).fetchone()
        return None if row is None else self._sql_time(row[0]).astimezone(UTC)


def _claimed(schedule: Schedule, claim_until: datetime) -> Schedule:
    from dataclasses import replace

    return replace(schedule, due_at=claim_until, version=schedule.version + 1)
