"""The ``Pauses`` role on SQLite (statements in ``store.pauses_sql``), and how its leases leave
held runs out: a probe of the pauses table (empty but for an incident) decides whether a lease
query grows its ``NOT EXISTS``."""

from __future__ import annotations

import contextlib
import sqlite3
import time
from collections.abc import Iterator
from datetime import datetime
from typing import Any

from flow_cli.model.spec import PRIORITIES
from flow_cli.store.pauses_sql import ANY_PAUSE, SQLPauses, not_held
from flow_cli.store.sqlite.connection import SQLiteConnections
from flow_cli.store.sqlite.rows import SQLITE, dt


class SQLitePauses(SQLiteConnections, SQLPauses):
    """``Pauses`` for ``SQLiteStore``, and the last look of its leases at the pauses table."""

    _sql_dialect = SQLITE

    def _probe_if_wanted(self, conn: sqlite3.Connection) -> None:
        """In a commit's transaction: the look ``want_pause_probe`` asked for."""
        if self._pause_probe_wanted:
            self._probe_pauses(conn)
            self._pause_probe_wanted = False

    @contextlib.contextmanager
    def _sql_write(self) -> Iterator[sqlite3.Connection]:
        try:
            with self._write() as conn:
                yield conn
        except sqlite3.Error as exc:
            raise self._store_error(exc) from exc

    @contextlib.contextmanager
    def _sql_read(self) -> Iterator[sqlite3.Connection]:
        try:
            yield self._conn()
        except sqlite3.Error as exc:
            raise self._store_error(exc) from exc

    def _sql_time(self, value: Any) -> datetime:
        return dt(str(value))

    def _probe_pauses(self, conn: sqlite3.Connection) -> bool:
        """Whether anything is paused: one probe of the (usually empty) pauses table, kept
        for ``last_pause_probe``."""
        found = conn.execute(ANY_PAUSE).fetchone() is not None
        self._pause_probe = (time.monotonic(), found)
        return found

    def _pauses_changed(self) -> None:
        self._pause_probe = None
        self._due.forget()
        self._doorbell.ring()  # a resumed run may be due: waiting workers look again


def unheld(select: str, alias: str, paused: bool, *, workflow: str | None = None) -> str:
    """``select`` with its ``{held}`` slot filled: when anything is ``paused``, a condition
    leaving out the runs a pause holds (``pauses_sql``); nothing otherwise."""
    return select.format(held=f"AND {not_held(alias, workflow=workflow)} " if paused else "")


def earliest(select: str) -> str:
    """The earliest of ``select``'s one-row answers for each priority (its ``@P``), in one
    statement: the (priority, due time) indexes serve it as nine seeks, where a plain
    ``ORDER BY`` over every priority would sort every waiting row (the due-time-only indexes
    are gone, to keep a write's index upkeep as it was). Its parameters, once per priority."""
    parts = " UNION ALL ".join(f"SELECT ({select.replace('@P', str(p))}) AS t" for p in PRIORITIES)
    return f"SELECT min(t) FROM ({parts})"
