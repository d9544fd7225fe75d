"""The SQLite store's reads: histories, the run index, hooks, workers, the integrity check."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any

from flow_cli.model.events import EventEnvelope, event_from_data
from flow_cli.store import causes, damage
from flow_cli.store.integrity import structural_problems
from flow_cli.store.protocol import (
    NO_GROUP,
    CauseQuery,
    RunFilter,
    RunRecord,
)
from flow_cli.store.reads_sql import SQLReads
from flow_cli.store.sql import OPEN_LIST
from flow_cli.store.sqlite.connection import HISTORIES_PER_QUERY, SQLiteConnections, guarded
from flow_cli.store.sqlite.decoding import decoding_problems
from flow_cli.store.sqlite.rows import RUN_COLUMNS, RUN_SELECT, SQLITE, from_micros, run_record


class SQLiteReads(SQLiteConnections, SQLReads):
    """What the SQLite store reads (see ``SQLiteStore``)."""

    _sql_before_cursor = "(created_at < :c_at OR (created_at = :c_at AND rowid < :c_order))"

    @guarded
    def read_histories(self, after: Mapping[str, int]) -> dict[str, list[EventEnvelope]]:
        """Each run's events with ``sequence > after[run_id]``, in order; runs that do not
        exist are left out (see ``EventStore``)."""
        found: dict[str, list[EventEnvelope]] = {}
        wanted = list(after.items())
        for start in range(0, len(wanted), HISTORIES_PER_QUERY):
            found.update(self._histories(dict(wanted[start : start + HISTORIES_PER_QUERY])))
        return found

    def _histories(self, after: Mapping[str, int]) -> dict[str, list[EventEnvelope]]:
        # One statement for any number of runs: the run's row says it exists (a run with
        # nothing new still has its row, with NULL event columns), so a history read costs one
        # round trip, not a second one to tell "no new events" from "no such run".
        values = ", ".join(["(?, ?)"] * len(after))
        params: list[Any] = []
        for run_id, sequence in after.items():
            params.extend((run_id, sequence))
        rows = (
            self._conn()
            .execute(
                f"WITH wanted (run_id, after) AS (VALUES {values}) "
                "SELECT w.run_id, e.sequence, e.event_key, e.recorded_at, e.data FROM wanted w "
                "JOIN runs r ON r.run_id = w.run_id "
                "LEFT JOIN events e ON e.run_id = w.run_id AND e.sequence > w.after "
                "ORDER BY w.run_id, e.sequence",
                params,
            )
            .fetchall()
        )
        found: dict[str, list[EventEnvelope]] = {}
        run_id, seq = "", None
        try:
            for run_id, seq, key, at, data in rows:
                history = found.setdefault(run_id, [])
                if seq is None:
                    continue  # the run exists, with nothing after the sequence asked for
                history.append(
                    EventEnvelope(
                        run_id=run_id,
                        sequence=seq,
                        recorded_at=from_micros(at),
                        event=event_from_data(key, json.loads(data)),
                        size=len(data),
                    )
                )
        except (KeyError, TypeError, ValueError, OverflowError) as exc:
            raise damage.unreadable_event(str(self.path), run_id, seq, exc) from exc
        return found

    @guarded
    def get_run(self, run_id: str) -> RunRecord | None:
        """The run's index row, or None."""
        row = self._conn().execute(f"{RUN_SELECT} WHERE run_id = ?", (run_id,)).fetchone()
        return None if row is None else run_record(row)

    @guarded
    def find_runs(self, where: RunFilter) -> list[RunRecord]:
        """Runs matching ``where``, newest first (creation order breaks ties)."""
        conn = self._conn()
        rows = conn.execute(*self._page(conn, where, RUN_COLUMNS))
        return [run_record(row) for row in rows.fetchall()]

    def _sql_snapshot(self) -> AbstractContextManager[sqlite3.Connection]:
        return self._sql_read()  # the store's connection, as every read here uses

    def _cause_rows(
        self, conn: sqlite3.Connection, where: RunFilter, query: CauseQuery
    ) -> Iterable[Sequence[Any]]:
        """Ranked as the rows stream by (``causes.ranked_in_passing``), not by the statement."""
        statement, params = causes.tally_sql(where, query, SQLITE, ranked=False)
        return causes.ranked_in_passing(conn.execute(statement, params), query.keep)

    def _oldest_open(self, conn: sqlite3.Connection) -> list[tuple[str, str, Any]]:
        # With one min() the bare columns come from the row holding it (SQLite's rule); the
        # rowid breaks ties between runs created at the same instant.
        rows = conn.execute(
            "SELECT build_id, run_id, created_at, "
            "min(created_at || printf(' %020d', rowid)) FROM runs "
            f"WHERE status IN ({OPEN_LIST}) GROUP BY build_id"
        )
        return [(build_id, run_id, created_at) for build_id, run_id, created_at, _ in rows]

    def _count_by(
        self, conn: sqlite3.Connection, by: str, conditions: list[str], params: dict[str, Any]
    ) -> list[tuple[str, int]]:
        # With a filter, grouped by an expression: grouping by the bare column would walk that
        # column's index over every run instead of the index that serves the filter. Without
        # one, by the bare column: its index alone answers (no row of runs is read).
        condition = f" WHERE {' AND '.join(conditions)}" if conditions else ""
        group = f"coalesce({by} || '', '{NO_GROUP}')" if conditions else by
        if not conditions and by == "error_type":  # its index holds only the runs that have one
            condition = " WHERE error_type IS NOT NULL"
        rows = conn.execute(
            f"SELECT {group}, count(*) FROM runs{condition} GROUP BY {group}", params
        ).fetchall()
        rows = [(NO_GROUP if key is None else str(key), n) for key, n in rows]
        if not conditions and by == "error_type":
            total = conn.execute("SELECT count(*) FROM runs").fetchone()[0]
            if total > sum(n for _, n in rows):
                rows.append((NO_GROUP, total - sum(n for _, n in rows)))
        return sorted(rows)

    def check_integrity(self) -> list[str]:
        """``PRAGMA integrity_check``, then Flow's structural checks (see ``integrity``)."""
        conn = self._conn()
        try:
            rows = conn.execute("PRAGMA integrity_check(100)").fetchall()
        except sqlite3.DatabaseError as exc:
            return [f"SQLite cannot check the file: {exc}"]
        problems = [str(row[0]) for row in rows if row[0] != "ok"]
        if problems:
            return [f"SQLite: {problem}" for problem in problems]

        def query(sql: str) -> list[tuple[Any, ...]]:
            return conn.execute(sql).fetchall()

        json_check = (
            "SELECT run_id, sequence FROM events WHERE json_valid(data) = 0 "
            "ORDER BY run_id, sequence",
            "run {0!r}: event {1} does not hold valid JSON",
        )
        try:
            found = decoding_problems(conn)  # first: the checks below read run ids as text
            if found:
                return found
            return structural_problems(query, [json_check])
        except sqlite3.DatabaseError as exc:
            return [f"SQLite failed while reading Flow's tables: {exc}"]
