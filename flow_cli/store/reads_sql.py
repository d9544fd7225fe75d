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
    BuildUsage,
    CauseQuery,
    CauseTally,
    HookListing,
    HookRecord,
    RunCount,
    RunFilter,
    RunState,
    WorkerInfo,
    assemble_states,
    attribute_count,
    build_usages,
    grouped_by,
)
from flow_cli.store.sql import (
    LIST_HOOKS,
    LIST_WORKERS,
    OPEN_LIST,
    RUN_STATES,
    STATE_COLUMNS,
    TERMINAL_LIST,
    SQLRole,
    attribute_group,
    hook_listing,
    hook_record,
    run_filter,
    worker_info,
)


class SQLReads(SQLRole):
    """The reads of a SQL store that are the same on either backend but for the placeholder
    and the few hooks below."""

    _sql_before_cursor: str
    """``_page``'s condition on the runs before its cursor's ``created_at`` and creation order
    (the parameters ``c_at`` and ``c_order``), spelled as the backend's indexes serve it."""

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

    @abstractmethod
    def _count_by(
        self, conn: Any, by: str, conditions: list[str], params: dict[str, Any]
    ) -> list[tuple[str, int]]:
        """``count_runs`` by the column ``by`` of the runs matching ``conditions`` (none: every
        run): each value as text (``NO_GROUP`` for none) and its count, in the order shown."""

    @abstractmethod
    def _oldest_open(self, conn: Any) -> Iterable[tuple[str, str, Any]]:
        """Each build's oldest open run (creation order breaks ties): build id, run id and
        stored creation time."""

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

    def _page(self, conn: Any, where: RunFilter, columns: str) -> tuple[str, dict[str, Any]]:
        """``SELECT columns FROM runs`` of the runs matching ``where`` after its cursor, newest
        first (creation order breaks ties), and its parameters."""
        dialect = self._sql_dialect
        conditions, params = run_filter(where, dialect)
        if where.after is not None:
            cursor = conn.execute(
                f"SELECT created_at, {dialect.created_order} FROM runs "
                f"WHERE run_id = {dialect.param}",
                (where.after,),
            ).fetchone()
            if cursor is None:
                raise RunNotFound(where.after)
            conditions.append(self._sql_before_cursor)
            params.update(c_at=cursor[0], c_order=cursor[1])
        query = f"SELECT {columns} FROM runs"
        if conditions:
            query += f" WHERE {' AND '.join(conditions)}"
        query += f" ORDER BY created_at DESC, {dialect.created_order} DESC"
        if where.limit is not None:
            query += f" LIMIT {dialect.named('limit')}"
            params["limit"] = where.limit
        return query, params

    def count_runs(self, where: RunFilter, by: str | None = None) -> RunCount:
        """How many runs match ``where``, grouped by ``by`` when given."""
        conditions, params = run_filter(where, self._sql_dialect)
        condition = f" WHERE {' AND '.join(conditions)}" if conditions else ""
        key = None if by is None else grouped_by(by)
        with self._sql_read() as conn:
            if by is None:
                row = conn.execute(f"SELECT count(*) FROM runs{condition}", params).fetchone()
                return RunCount(total=int(row[0]), groups={})
            if key is not None:
                params["by_key"] = key
                group = attribute_group(self._sql_dialect)
                return attribute_count(
                    conn.execute(
                        f"SELECT {group}, count(*) FROM runs{condition} GROUP BY 1", params
                    ).fetchall()
                )
            rows = self._count_by(conn, by, conditions, params)
        return RunCount(total=sum(n for _, n in rows), groups=dict(rows))

    def run_states(self, where: RunFilter) -> list[RunState]:
        """Runs matching ``where`` with their lease and step tasks, newest first: one statement
        (one consistent read), the runs served by the filter's index, each run's tasks by the
        step task primary key."""
        columns = f"{self._sql_dialect.created_order} AS created_order, {STATE_COLUMNS}"
        with self._sql_snapshot() as conn:
            page, params = self._page(conn, where, columns)
            rows = conn.execute(RUN_STATES.format(page=page), params).fetchall()
        return assemble_states(rows, self._sql_time)

    def build_usage(self) -> list[BuildUsage]:
        """Every build id of some run, with its open runs. The build ids are read by skipping
        through the build index (one probe per build, not one row per run); the open runs
        through the status index."""
        key = self._sql_dialect.build_key
        with self._sql_snapshot() as conn:
            builds = [
                row[0]
                for row in conn.execute(
                    f"WITH RECURSIVE b(id) AS (SELECT min({key}) FROM runs UNION ALL "
                    f"SELECT (SELECT min({key}) FROM runs WHERE {key} > b.id) "
                    "FROM b WHERE b.id IS NOT NULL) SELECT id FROM b WHERE id IS NOT NULL"
                )
            ]
            grouped = conn.execute(
                "SELECT build_id, status, patches, count(*) FROM runs "
                f"WHERE status IN ({OPEN_LIST}) GROUP BY build_id, status, patches"
            ).fetchall()
            oldest = {
                build_id: (run_id, self._sql_time(created_at))
                for build_id, run_id, created_at in self._oldest_open(conn)
            }
        return build_usages(builds, grouped, oldest)

    def list_hooks(self, run_id: str | None = None, open_only: bool = False) -> list[HookListing]:
        """Hooks of one run or all runs, oldest first."""
        dialect = self._sql_dialect
        conditions, params = [], {}
        if run_id is not None:
            conditions.append(f"run_id = {dialect.named('run')}")
            params["run"] = run_id
        if open_only:
            # ``resolved`` spelled as the partial index of open hooks spells it, so it serves.
            conditions.append(
                f"resolved = {dialect.false} AND EXISTS (SELECT 1 FROM runs r "
                f"WHERE r.run_id = hooks.run_id AND r.status NOT IN ({TERMINAL_LIST}))"
            )
        where = f" WHERE {' AND '.join(conditions)}" if conditions else ""
        with self._sql_read() as conn:
            rows = conn.execute(
                f"{LIST_HOOKS}{where} ORDER BY created_at, {dialect.created_order}", params
            ).fetchall()
        return [hook_listing(r, self._sql_time, dialect.json_value) for r in rows]

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
