"""Priorities and pauses on SQL (SQLite and PostgreSQL): the ``pauses`` table, the ``Pauses``
role, and the pieces of SQL the lease queries add.

Priority: ``runs.priority`` and ``step_tasks.priority`` (copied from the run) lead the indexes
the leases read (``(priority, due time)``). A lease asks for ``priority IN (1, ..., 9)`` and a
due time at most now, ordered by priority then due time: both backends read that index as nine
ranges, one per priority, in order, and stop after ``limit`` rows: no sort, and the cost
follows the number of due rows, not the number of waiting ones.

Pause: a row per target (``kind``, ``name``). A run is held while a row names it, its workflow
or its build (``HELD``, three primary key probes per candidate row). SQLite adds the test only
when the table has a row (one probe of an empty table before); PostgreSQL always adds it (an
empty table costs little, and asking first would be a round trip).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

from flow_cli.model.spec import PRIORITIES
from flow_cli.store.pauses import Pause, PauseKind, PauseTarget, sorted_pauses
from flow_cli.store.sql import SQLRole

PAUSES_TABLE = (
    "CREATE TABLE IF NOT EXISTS pauses (kind TEXT NOT NULL, name TEXT NOT NULL, "
    "reason TEXT, paused_at {time} NOT NULL, PRIMARY KEY (kind, name))"
)
"""The pauses table; ``{time}`` is the backend's time column type."""


def priority_indexes_and_pauses(
    execute: Callable[[str], object], *, runs_tie: str, tasks_tie: str, time: str
) -> None:
    """The priorities-and-pauses migration once each backend has added its priority columns:
    the indexes the leases read (priority, then due time, then ``runs_tie``/``tasks_tie``, the
    columns the backend orders ties by) in place of the due-time ones, and the pauses table
    (``time``: the backend's time column type)."""
    execute(
        "CREATE INDEX IF NOT EXISTS runs_priority_due ON runs "
        f"(priority, decide_at{runs_tie}) WHERE decide_at IS NOT NULL"
    )
    execute(
        "CREATE INDEX IF NOT EXISTS step_tasks_priority_ready ON step_tasks "
        f"(priority, available_at{tasks_tie})"
    )
    # They serve when work is next due too (``store.sqlite.pauses.earliest``): an index on the
    # due time alone would cost every write that moves one a second index entry to keep.
    execute("DROP INDEX IF EXISTS runs_decide_at")
    execute("DROP INDEX IF EXISTS step_tasks_available_at")
    execute(PAUSES_TABLE.format(time=time))


PRIORITY_IN = f"priority IN ({', '.join(str(p) for p in PRIORITIES)})"
"""The lease's condition on the leading column of its index: read as one range per priority."""

ANY_PAUSE = "SELECT 1 FROM pauses LIMIT 1"
"""Whether anything is paused (SQLite asks before adding ``held`` to a lease)."""

ANY_PAUSED = "SELECT EXISTS (SELECT 1 FROM pauses)"
"""Whether anything is paused, as one row (``true``/``false``): a PostgreSQL commit asked to
look (``want_pause_probe``) opens its round trip with it."""


def held(alias: str, *, workflow: str | None = None) -> str:
    """A condition true when a pause holds the run of row ``alias`` (a ``runs`` row, or a row
    with ``run_id`` and ``build_id`` whose workflow is the SQL ``workflow``)."""
    flow = workflow or f"{alias}.workflow"
    return (
        "EXISTS (SELECT 1 FROM pauses p WHERE "
        f"(p.kind = 'run' AND p.name = {alias}.run_id) "
        f"OR (p.kind = 'workflow' AND p.name = {flow}) "
        f"OR (p.kind = 'build' AND p.name = {alias}.build_id))"
    )


def not_held(alias: str, *, workflow: str | None = None) -> str:
    """``held`` negated: the run of row ``alias`` may be leased."""
    return f"NOT {held(alias, workflow=workflow)}"


def unpaused_or_not_held(alias: str, *, workflow: str | None = None) -> str:
    """``not_held`` for a statement that always carries it (PostgreSQL): true at once when
    nothing is paused (an InitPlan read once per statement). Under ``OR`` the correlated test
    stays a per-row filter and is never turned into an anti-join, whose row estimates would
    lure the planner off the due-time indexes."""
    return f"(NOT EXISTS (SELECT 1 FROM pauses) OR {not_held(alias, workflow=workflow)})"


class SQLPauses(SQLRole):
    """``Pauses`` for a store that provides ``_sql_write`` (one transaction), ``_sql_read``
    (one read) and ``_sql_time`` (decodes a stored time) and names its ``_sql_dialect``;
    ``_pauses_changed`` (after a commit) wakes waiting workers."""

    _pause_probe: tuple[float, bool] | None = None
    """When (``time.monotonic()``, before its statement was sent) this store last looked whether
    anything is paused, and what it found: SQLite in each lease, both in the group commit
    after ``want_pause_probe``."""
    _pause_probe_wanted = False

    def want_pause_probe(self) -> None:
        """Have the next group commit look whether anything is paused, in its own transaction
        (``PauseProbeRequests``): a process that commits now and then keeps its pause gate
        fresh without reading the pauses table on a thread of its own."""
        self._pause_probe_wanted = True

    def last_pause_probe(self) -> tuple[float, bool] | None:
        """What the store's last look at the pauses found (``PauseProbes``), or ``None`` (none
        since this process last changed the pauses)."""
        return self._pause_probe

    def _pauses_changed(self) -> None:
        """Called after a pause was added or lifted."""

    def add_pauses(self, targets: Sequence[PauseTarget], reason: str | None, now: datetime) -> int:
        """Pause these targets; returns how many were not paused before."""
        p = self._sql_dialect.param
        added = 0
        with self._sql_write() as conn:
            for target in targets:
                row = conn.execute(
                    f"UPDATE pauses SET reason = {p} WHERE kind = {p} AND name = {p}",
                    (reason, target.kind.value, target.name),
                )
                if row.rowcount:
                    continue
                conn.execute(
                    "INSERT INTO pauses (kind, name, reason, paused_at) "
                    f"VALUES ({p}, {p}, {p}, {p})",
                    (target.kind.value, target.name, reason, self._sql_dialect.time(now)),
                )
                added += 1
        self._pauses_changed()
        return added

    def remove_pauses(self, targets: Sequence[PauseTarget]) -> int:
        """Lift these targets' pauses; returns how many there were."""
        p = self._sql_dialect.param
        removed = 0
        with self._sql_write() as conn:
            for target in targets:
                removed += conn.execute(
                    f"DELETE FROM pauses WHERE kind = {p} AND name = {p}",
                    (target.kind.value, target.name),
                ).rowcount
        self._pauses_changed()
        return removed

    def list_pauses(self) -> list[Pause]:
        """Every pause in force, by kind then target."""
        with self._sql_read() as conn:
            rows = conn.execute("SELECT kind, name, reason, paused_at FROM pauses").fetchall()
        return sorted_pauses(_pause(row, self._sql_time) for row in rows)


def _pause(row: Sequence[Any], when: Callable[[Any], datetime]) -> Pause:
    return Pause(
        target=PauseTarget(kind=PauseKind(row[0]), name=row[1]),
        reason=row[2],
        paused_at=when(row[3]).astimezone(UTC),
    )
