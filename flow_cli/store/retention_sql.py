"""The ``Retention`` role on SQL: deleting ended runs from every per-run table, the children
of runs (families are pruned whole), and named maintenance leases, with the same statements on
SQLite and PostgreSQL (the placeholder and time encoding of the backend's ``Dialect``).
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from flow_cli.model.status import TERMINAL_STATUSES
from flow_cli.store.protocol import RunRecord
from flow_cli.store.sql import SQLRole

RUN_TABLES = (
    "events",
    "step_tasks",
    "hooks",
    "step_heartbeats",
    "run_attributes",
    "run_slots",
    "runs",
)
"""Every table that holds rows of one run, each keyed by a ``run_id`` column served by an
index: ``delete_runs`` empties them all in one transaction, the runs row last. A new per-run
table is one more name here (and in ``MemoryRetention.delete_runs``)."""

_TERMINAL = tuple(sorted(s.value for s in TERMINAL_STATUSES))

IDS_PER_STATEMENT = 500
"""Run ids one statement names (under SQLite's limit of bound parameters)."""


class SQLRetention(SQLRole):
    """``Retention`` for a store that provides ``_sql_write`` (one transaction) and
    ``_sql_read`` (one read), names its ``_sql_dialect`` and reads run rows with
    ``_run_records``."""

    @abstractmethod
    def _run_records(self, conn: Any, where: str, params: Sequence[Any]) -> list[RunRecord]:
        """The runs rows ``WHERE where`` selects, as ``RunRecord``s."""

    def children_of(self, run_ids: Sequence[str]) -> list[RunRecord]:
        """The runs whose parent is one of ``run_ids`` (the parent index serves it)."""
        p = self._sql_dialect.param
        found: list[RunRecord] = []
        with self._sql_read() as conn:
            for start in range(0, len(run_ids), IDS_PER_STATEMENT):
                chunk = list(run_ids[start : start + IDS_PER_STATEMENT])
                marks = ", ".join([p] * len(chunk))
                found += self._run_records(conn, f"parent_run_id IN ({marks})", chunk)
        return found

    def delete_runs(self, run_ids: Sequence[str]) -> list[str]:
        """Delete the ended ones of ``run_ids`` from every per-run table (``RUN_TABLES``) in one
        transaction; a run that is open (or unknown) is left alone. Returns the ids deleted."""
        if not run_ids:
            return []
        p = self._sql_dialect.param
        ended = ", ".join([p] * len(_TERMINAL))
        deleted: list[str] = []
        with self._sql_write() as conn:
            for start in range(0, len(run_ids), IDS_PER_STATEMENT):
                chunk = list(run_ids[start : start + IDS_PER_STATEMENT])
                marks = ", ".join([p] * len(chunk))
                rows = conn.execute(
                    f"SELECT run_id FROM runs WHERE run_id IN ({marks}) AND status IN ({ended})",
                    (*chunk, *_TERMINAL),
                ).fetchall()
                gone = [row[0] for row in rows]
                if not gone:
                    continue
                marks = ", ".join([p] * len(gone))
                for table in RUN_TABLES:
                    conn.execute(f"DELETE FROM {table} WHERE run_id IN ({marks})", gone)
                deleted += gone
        return deleted

    def take_lease(self, name: str, owner: str, now: datetime, until: datetime) -> bool:
        """Take the named lease for ``owner`` until ``until`` if it is free, expired (at
        ``now``) or ``owner``'s already (a renewal); False while another owner holds it."""
        d = self._sql_dialect
        p = d.param
        with self._sql_write() as conn:
            cur = conn.execute(
                f"INSERT INTO leases (name, owner, held_until) VALUES ({p}, {p}, {p}) "
                "ON CONFLICT (name) DO UPDATE SET owner = excluded.owner, "
                "held_until = excluded.held_until "
                f"WHERE leases.owner = excluded.owner OR leases.held_until <= {p}",
                (name, owner, d.time(until), d.time(now)),
            )
            return bool(cur.rowcount)

    def release_lease(self, name: str, owner: str) -> None:
        """Give the named lease back if ``owner`` holds it."""
        p = self._sql_dialect.param
        with self._sql_write() as conn:
            conn.execute(f"DELETE FROM leases WHERE name = {p} AND owner = {p}", (name, owner))

    def reclaim_space(self) -> None:
        """Give the pages freed by deletes back for reuse: nothing to do here (PostgreSQL's
        autovacuum reuses them); SQLite overrides it."""
