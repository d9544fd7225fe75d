"""The reads the SQLite and PostgreSQL stores make alike: written once on ``SQLRole``."""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Iterable, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any

from flow_cli.errors import RunNotFound
from flow_cli.model.events import EventEnvelope
from flow_cli.store import causes
from flow_cli.store.protocol import (
    CauseQuery,
    CauseTally,
    HookRecord,
    RunFilter,
    RunState,
    WorkerInfo,
    assemble_states,
)
from flow_cli.store.sql import LIST_WORKERS, SQLRole, hook_record, worker_info


class SQLReads(SQLRole):
    """The reads of a SQL store that are the same on either backend but for the placeholder
    and the few hooks below."""

    @abstractmethod
    def read_histories(self, after: Mapping[str, int]) -> dict[str, list[EventEnvelope]]:
        """Each run's events after its sequence in ``after``; a run that does not exist is
        left out (see ``EventStore``)."""

    @abstractmethod
    def _sql_snapshot(self) -> AbstractContextManager[Any]:
        """A connection for a read of several statements that must agree (PostgreSQL: one
        read-only transaction)."""

    @abstractmethod
    def _cause_rows(
        self, conn: Any, where: RunFilter, query: CauseQuery
    ) -> Iterable[Sequence[Any]]:
        """``causes.tally_sql``'s rows, ranked (``causes.tally`` reads them in that order)."""

    def read_history(self, run_id: str, after_sequence: int = 0) -> list[EventEnvelope]:
        """Events with ``sequence > after_sequence``, in order. Raises ``RunNotFound``."""
        found = self.read_histories({run_id: after_sequence})
        if run_id not in found:
            raise RunNotFound(run_id)
        return found[run_id]

    def find_hook(self, token: str) -> HookRecord | None:
        """The hook owning ``token``, or ``None``."""
        with self._sql_read() as conn:
            row = conn.execute(
                "SELECT token, run_id, hook_id, resolved FROM hooks WHERE token = "
                + self._sql_dialect.param,
                (token,),
            ).fetchone()
        return hook_record(row)

    def list_workers(self) -> list[WorkerInfo]:
        """Every registered worker, most recently started first."""
        with self._sql_read() as conn:
            rows = conn.execute(LIST_WORKERS).fetchall()
        return [worker_info(row, self._sql_time) for row in rows]

    def cause_tally(self, where: RunFilter, query: CauseQuery) -> CauseTally:
        """``flow doctor``'s causes: the open runs classified and counted by one statement
        (``causes.tally_sql``), then the states of the few runs sampled."""
        with self._sql_snapshot() as conn:

            def states(run_ids: list[str]) -> list[RunState]:
                found, named = causes.states_sql(run_ids, self._sql_dialect)
                return assemble_states(conn.execute(found, named).fetchall(), self._sql_time)

            counts, samples = causes.tally(self._cause_rows(conn, where, query), states)
        return CauseTally(counts=counts, samples=tuple(samples))
