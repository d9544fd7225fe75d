"""The PostgreSQL store's reads: histories, the run index, hooks, workers, the integrity check."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any

import psycopg
from psycopg import sql

from flow_cli.errors import StoreError
from flow_cli.model.events import EventEnvelope, event_from_data
from flow_cli.store import causes
from flow_cli.store.integrity import structural_problems
from flow_cli.store.postgres import tables
from flow_cli.store.postgres.batch import Connection
from flow_cli.store.postgres.connection import PostgresConnections
from flow_cli.store.protocol import (
    NO_GROUP,
    CauseQuery,
    RunFilter,
    RunRecord,
)
from flow_cli.store.reads_sql import SQLReads
from flow_cli.store.sql import OPEN_LIST

READ_HISTORIES = (
    "SELECT e.run_id, e.sequence, e.event_key, e.recorded_at, e.data, "
    "pg_column_size(e.data) FROM unnest(%s::text[], %s::bigint[]) AS a(run_id, seq) "
    "JOIN events e ON e.run_id = a.run_id AND e.sequence >= a.seq "
    "ORDER BY e.run_id, e.sequence"
)


def histories_params(after: Mapping[str, int]) -> tuple[list[str], list[int]]:
    run_ids = list(after)
    return run_ids, [max(after[r], 1) for r in run_ids]


class PostgresReads(PostgresConnections, SQLReads):
    """What the PostgreSQL store reads (see ``PostgresStore``)."""

    _sql_before_cursor = "(created_at, created_order) < (%(c_at)s, %(c_order)s)"

    def read_histories(self, after: Mapping[str, int]) -> dict[str, list[EventEnvelope]]:
        """Each run's events after its sequence in ``after``, in one statement; a run that
        does not exist is left out."""
        if not after:
            return {}
        with self._reading() as conn:
            rows = conn.execute(READ_HISTORIES, histories_params(after)).fetchall()
        return self._histories(rows, after)

    def _histories(
        self, rows: Sequence[tuple[Any, ...]], after: Mapping[str, int]
    ) -> dict[str, list[EventEnvelope]]:
        """The rows of ``READ_HISTORIES`` as histories by run id."""
        found: dict[str, list[EventEnvelope]] = {}
        for run_id, sequence, event_key, recorded_at, data, size in rows:
            events = found.setdefault(run_id, [])
            if sequence <= after[run_id]:
                continue
            try:
                event = event_from_data(event_key, data)
            except (KeyError, TypeError, ValueError) as exc:
                raise StoreError(
                    f"Run {run_id!r} in PostgreSQL at {self._where} has an event this Flow "
                    f"cannot decode ({exc!r}); upgrade Flow."
                ) from exc
            events.append(
                EventEnvelope(
                    run_id=run_id,
                    sequence=sequence,
                    recorded_at=tables.utc(recorded_at),
                    event=event,
                    size=size,
                )
            )
        return found

    def get_run(self, run_id: str) -> RunRecord | None:
        """The run's index row, or ``None``."""
        with self._reading() as conn:
            row = conn.execute(
                f"SELECT {tables.RUN_COLUMNS} FROM runs WHERE run_id = %s", (run_id,)
            ).fetchone()
        return None if row is None else tables.run_record(row)

    def find_runs(self, where: RunFilter) -> list[RunRecord]:
        """Runs matching ``where``, newest first (creation order breaks ties). Read without a
        transaction around it (``_reading``): one round trip per statement, and a cursor's row
        keeps its place in the order whatever commits between the two."""
        with self._reading() as conn:
            query, params = self._page(conn, where, tables.RUN_COLUMNS)
            rows = conn.execute(query, params).fetchall()
        return [tables.run_record(row) for row in rows]

    def _sql_snapshot(self) -> AbstractContextManager[Connection]:
        # ``cause_tally``'s count and its samples' states read in one snapshot.
        return self._transaction(writes=False)

    def _cause_rows(
        self, conn: Connection, where: RunFilter, query: CauseQuery
    ) -> list[tuple[Any, ...]]:
        """Ranked by the statement itself (run ids in ``COLLATE "C"`` order)."""
        statement, params = causes.tally_sql(where, query, tables.POSTGRES, ' COLLATE "C"')
        return conn.execute(statement, params).fetchall()

    def _oldest_open(self, conn: Connection) -> list[tuple[str, str, Any]]:
        return conn.execute(
            "SELECT DISTINCT ON (build_id) build_id, run_id, created_at FROM runs "
            f"WHERE status IN ({OPEN_LIST}) ORDER BY build_id, created_at, created_order"
        ).fetchall()

    def _count_by(
        self, conn: Connection, by: str, conditions: list[str], params: dict[str, Any]
    ) -> list[tuple[str, int]]:
        rows = conn.execute(
            sql.SQL(
                "SELECT coalesce({col}, {none}), count(*) FROM runs WHERE {cond} "
                "GROUP BY 1 ORDER BY 1"
            ).format(
                col=sql.Identifier(by),
                none=sql.Literal(NO_GROUP),
                cond=sql.SQL(" AND ".join(["TRUE", *conditions])),
            ),
            params,
        ).fetchall()
        return [(str(key), int(n)) for key, n in rows]

    def check_integrity(self) -> list[str]:
        """Flow's structural checks (see ``integrity``); PostgreSQL checks its own pages."""
        try:
            with self._reading() as conn:
                return structural_problems(lambda sql: conn.execute(sql).fetchall())
        except psycopg.Error as exc:
            raise self._store_error(exc, lost=False) from exc
