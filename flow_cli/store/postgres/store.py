"""The PostgreSQL event store: many workers on many machines sharing one database.

Imported lazily by ``flow_cli.store.open_store`` for ``postgresql://`` and ``postgres://`` URLs, so
psycopg is needed only by those who use it. The package splits it by job:
``schema`` (tables, migrations), ``tables`` (statements), ``connection`` (pool, transactions,
errors), ``reads``, ``commits``, ``batch``, ``hints``, ``handoffs``, ``ends``; this module holds
leases, waits and the workers registry.

- Every public method is one transaction on a connection from a small pool (a connection serves
  one thread at a time). Times come from the caller's clock; SQL ``now()`` is never used.
- Optimistic concurrency: ``commit`` sends everything as one query string whose guards fail it
  when a written run's ``last_sequence`` is not the writer's expectation (``UPDATE ... WHERE
  last_sequence = expected``, which also locks the row), so the common commit is one round trip.
  Only when a guard fails is the commit redone the checking way, locking each written run row
  (``SELECT ... FOR UPDATE``) to name the culprit. ``PRIMARY KEY (run_id, sequence)`` is the
  backstop, its unique violation turned into ``EventConflict`` in one place.
- Leases take due rows with ``FOR UPDATE SKIP LOCKED``: concurrent workers never wait for, or
  receive, the same run or step.
- A commit that schedules work sends ``NOTIFY flow_work`` (payload: the schema) inside its
  transaction; ``wait_for_change`` listens on a connection of its own.
- A lost connection becomes ``StoreError`` and is dropped, so the next call reconnects: a worker
  that catches ``StoreError``, sleeps and retries survives a server restart.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, closing
from datetime import UTC, datetime
from time import monotonic
from typing import Any, TypeVar

import psycopg
from psycopg import pq, sql

from flow_cli.errors import StoreError
from flow_cli.store.limits_sql import (
    LIMITS_LOOK_SECONDS,
    THROTTLE_POLL,
    SQLLimits,
    looking_alone,
)
from flow_cli.store.pauses_sql import SQLPauses
from flow_cli.store.postgres import handoffs, hints, limited, tables
from flow_cli.store.postgres import leasing as parts
from flow_cli.store.postgres.batch import Batch, Connection
from flow_cli.store.postgres.commits import PostgresCommits
from flow_cli.store.postgres.connection import (
    NOTHING,
    NOTIFY,
    NOTIFY_CHANNEL,
    WORK,
    close_quietly,
)
from flow_cli.store.postgres.listen import notes_within
from flow_cli.store.postgres.reads import READ_HISTORIES, histories_params
from flow_cli.store.postgres.tables import utc
from flow_cli.store.protocol import (
    WORKER_RETENTION,
    AppendViaCommit,
    LeaseAsk,
    ReadAfter,
    RunRecord,
    StepHeartbeat,
    StepLease,
    StepRenewal,
    StoreStats,
    WorkerInfo,
    carry_histories,
    wanted_after,
    with_histories,
)
from flow_cli.store.retention_sql import SQLRetention
from flow_cli.store.schedules_sql import SQLSchedules

T = TypeVar("T")

_END_OF_TIME = datetime(9999, 12, 31, tzinfo=UTC)
"""``NEXT_DUE``'s bound when the whole future is wanted (``next_due`` without ``until``)."""


_NO_SIZES: tuple[frozenset[str], frozenset[str]] = (frozenset(), frozenset())


class PostgresStore(
    PostgresCommits, SQLSchedules, SQLRetention, SQLPauses, SQLLimits, AppendViaCommit
):
    """``EventStore`` on PostgreSQL, through psycopg 3.

    Args:
        url: A libpq URL or ``key=value`` string, e.g. ``postgresql://flow@db.internal/flow``.
            Whatever it leaves out (everything, when ``None``) comes from the ``PG*``
            environment variables and ``~/.pgpass``, as for ``psql``.
        schema: The PostgreSQL schema holding Flow's tables (default ``flow``), created if
            missing. Tests give each store a schema of its own and ``drop_schema()`` it after.
        connect_timeout: Seconds to wait for the server before calling it unreachable, unless
            the URL or ``PGCONNECT_TIMEOUT`` sets it (libpq counts whole seconds, at least 2).
        create: Create Flow's tables when the schema has none. Read-only commands pass
            ``False``, so a mistyped schema is reported instead of created.

    Raises:
        ConfigError: ``url`` is not a PostgreSQL connection string.
        StoreError: the server is unreachable or refuses the connection, or the schema is not
            Flow's or was written by a newer Flow.
    """

    stats: StoreStats
    _limited_expected = True
    """Whether the next step lease runs the limited lease first: the last lease saw an attempt
    of a limited step ready (``limited.ANY_LIMITED_READY``), or work was announced since."""
    _limit_sizes: tuple[float, tuple[frozenset[str], frozenset[str]], float] = (
        float("-inf"),
        (frozenset(), frozenset()),
        0.0,
    )

    def lease_runs(self, ask: LeaseAsk) -> list[str]:
        """Lease up to ``limit`` due runs of these builds, earliest first.

        Leasing moves ``decide_at`` to ``lease_until``. Rows another transaction holds are
        skipped, not waited for, so concurrent workers never lease the same run.
        """
        worker, build_ids, now, lease_until, limit = ask
        if not build_ids or limit <= 0:
            return []
        if self._limited_runs_pending():  # (limits looked up at most every LIMITS_LOOK_SECONDS)
            # Runs of limited workflows: admitted as their limits leave slots (``limits_sql``).
            with self._transaction(durable=False) as conn:
                admitted = self._lease_limited_runs(
                    conn, worker, build_ids, now, lease_until, limit
                )
            if admitted:
                limit -= len(admitted)
                if limit <= 0:
                    return admitted
                params = parts.due_params(worker, build_ids, now, lease_until, limit)
                with self._transaction(durable=False, pipelined=True) as conn:
                    cursor = conn.execute(tables.LEASE_RUNS, params)
                rows = cursor.fetchall()
                self._count_rows(len(rows))
                rows.sort(key=lambda row: (row[1], row[2]))
                return admitted + [row[0] for row in rows]
        if self._due.no_run_due(build_ids, now):
            self._runs_expected = False
            return []
        params = parts.due_params(worker, build_ids, now, lease_until, limit)
        if not self._runs_expected:
            with self._reading() as conn:
                # Look before locking: an idle worker must not open a write transaction every
                # pass. Skipped while leasing finds work.
                if conn.execute(tables.ANY_DUE_RUN, params).fetchone() is None:
                    return []
        with self._transaction(durable=False, pipelined=True) as conn:
            cursor = conn.execute(tables.LEASE_RUNS, params)
        rows = cursor.fetchall()
        self._runs_expected = bool(rows)
        self._count_rows(len(rows))
        # RETURNING does not keep the CTE's order: by priority, then due time.
        rows.sort(key=lambda row: (row[3], row[1], row[2]))
        return [row[0] for row in rows]

    def park_run(self, run_id: str, expected_sequence: int, decide_at: datetime | None) -> bool:
        """Set ``decide_at`` if the run is still at ``expected_sequence``; else False."""
        # One round trip: the NOTIFY (when a time was set) rides on the update's row, so it is
        # sent only if the run was parked.
        with self._transaction(durable=False, pipelined=True) as conn:
            cursor = conn.execute(
                "WITH parked AS (UPDATE runs SET decide_at = %s, lease_owner = NULL "
                "WHERE run_id = %s AND last_sequence = %s RETURNING run_id) "
                "SELECT run_id, CASE WHEN %s THEN pg_notify(%s, %s)::text END FROM parked",
                (
                    decide_at,
                    run_id,
                    expected_sequence,
                    decide_at is not None,
                    NOTIFY_CHANNEL,
                    self.schema,
                ),
            )
        return cursor.fetchone() is not None

    def lease_steps(self, ask: LeaseAsk, read_after: ReadAfter | None = None) -> list[StepLease]:
        """Lease up to ``limit`` ready step tasks of these builds, oldest first, recording
        ``step_started`` for each in the same transaction.

        The runs' rows are locked first, in the order ``commit`` locks them, so a lease and a
        commit never deadlock. ``read_after`` (see ``EventStore``): the histories are read in
        the transaction, in the round trip that commits it.

        Unlike the other leases, this commit waits for the WAL flush, as on SQLite it need not:
        it appends events, and workers outlive a crash of the server. Were the last
        ``step_started`` lost while its worker still held the run at that sequence, the next
        event recorded would reuse the sequence with other content (a cancellation, say), and
        that worker's commit, guarded by the sequence alone, would be built on a history that
        no longer exists.
        """
        if not ask.build_ids or ask.limit <= 0:
            return []
        self._work_heard = False
        self._due.forget()
        writes = self._due.writes()
        if not self._steps_expected:
            with self._reading() as conn:
                # Look before locking: an idle worker must not open a transaction that locks
                # every pass. Skipped while work is expected (see ``_steps_expected``).
                params = parts.due_params(*ask)
                if conn.execute(tables.ANY_READY_STEP, params).fetchone() is None:
                    self._throttled_until = None
                    self._limited_expected = False
                    return []
        # Steps under a limit first, while the lease's time is fresh (``postgres.limited``),
        # when the last lease saw one ready (or work was announced since).
        limited: list[StepLease] = []
        tried = self._limited_expected
        if tried:
            limited = self._lease_limited_steps(ask, ask.limit, read_after)
        else:
            self._throttled_until = None
        leases = self._lease_ready_steps(
            ask._replace(limit=ask.limit - len(limited)), read_after, writes
        )
        if not tried and self._limited_expected and len(leases) < ask.limit:
            # One became ready unannounced (a retry's time came, a lease lapsed): now, not a
            # pass later.
            limited = self._lease_limited_steps(ask, ask.limit - len(leases), read_after)
        carried = {lease.run_id for lease in limited}
        return limited + [
            dataclasses.replace(lease, history=None) if lease.run_id in carried else lease
            for lease in leases
        ]

    def _lease_ready_steps(
        self, ask: LeaseAsk, read_after: ReadAfter | None, writes: int
    ) -> list[StepLease]:
        """``lease_steps`` of the steps under no limit: the ordinary lease (``writes``: the
        store's count of writes before it, for ``DueHints``)."""
        worker, build_ids, now, lease_until, limit = ask
        if limit <= 0:
            return []
        params = parts.due_params(worker, build_ids, now, lease_until, limit)
        hinted = hints.usable(self._hints, build_ids, limit)
        self._hints = []
        with self._self_transacting() as conn:
            # Two round trips, each one query string of several statements (no per-statement
            # exchange, as in a pipeline): BEGIN, the locks and the lease; then the
            # step_started events, the run rows, the histories and COMMIT. Waiting for a run
            # another transaction holds (not skipping it) is short, and keeps a ready step
            # from being reported as absent; the lease re-checks readiness after the wait.
            # (Skipping, FOR UPDATE SKIP LOCKED on the tasks and the runs, measured 0.96x
            # with four workers in bench/fleet.py.)
            # Steps a notification named are tried first, in one round trip; when another
            # worker took them (every idle worker heard the same notification), a look without
            # locks says whether anything else is ready before the lease that locks.

            def lease(conn: Connection) -> parts.Leased | None:
                if hinted:
                    leased = self._lease_hinted(
                        conn, hinted, worker, build_ids, params, now, lease_until, read_after
                    )
                    if leased is not None:
                        return leased
                    if conn.execute(tables.ANY_READY_STEP, params).fetchone() is None:
                        return None  # nothing ready (limited steps included)
                return self._lease_ready(conn, worker, params, now, lease_until, read_after)

            leased = self._again_if_dropped(conn, lease)
        if leased is None:
            self._limited_expected = False
            self._steps_expected = False
            return []
        rows, after, history_rows, due = leased
        self._steps_expected = bool(rows)
        self._due.offer(build_ids, *due, writes=writes, until=params["due_until"])
        leases = self._leased(rows, lease_until, len(rows) + sum(1 for t in due if t is not None))
        if history_rows is not None:
            leases = with_histories(leases, self._histories(history_rows, after))
        return leases

    def _lease_limited_steps(
        self, ask: LeaseAsk, room: int, read_after: ReadAfter | None
    ) -> list[StepLease]:
        """Steps under a limit, leased as their limits leave slots (``postgres.limited``), their
        ``step_started`` recorded: a transaction of two round trips, as ``_lease_ready``'s."""
        worker, build_ids, now, lease_until, _ = ask
        self._throttled_until = None
        if room <= 0 or not self._step_limits_present():
            return []
        params = parts.due_params(worker, build_ids, now, lease_until, room)
        with self._self_transacting() as conn:
            rows, after, done = self._again_if_dropped(
                conn,
                lambda conn: self._lease_limited_batch(
                    conn, params, worker, now, lease_until, read_after
                ),
            )
        leases = self._leased(rows, lease_until, len(rows))
        if after:
            leases = with_histories(leases, self._histories(done[-2] or [], after))
        return leases

    def _again_if_dropped(self, conn: Connection, lease: Callable[[Connection], T]) -> T:
        """``lease(conn)``, once more when a statement of its second round trip was dropped
        behind our back (see ``Prepared``): nothing was written then; roll back, lease again."""
        try:
            return lease(conn)
        except psycopg.errors.InvalidSqlStatementName:
            self._rolled_back(conn)
            conn.execute("ROLLBACK")
        return lease(conn)

    def _leased(
        self, rows: Sequence[tuple[Any, ...]], lease_until: datetime, written: int
    ) -> list[StepLease]:
        """The leases of a step lease's ``rows`` (run id, step id, attempt, ...), counted: a
        durable commit when there are any, ``written`` rows."""
        if rows:
            with self._lock:
                self.stats.durable_commits += 1
        self._count_rows(written)
        return [
            StepLease(run_id=run_id, step_id=step_id, attempt=attempt, lease_until=lease_until)
            for run_id, step_id, attempt, _ in rows
        ]

    def _lease_limited_batch(
        self,
        conn: Connection,
        params: dict[str, Any],
        worker: str,
        now: datetime,
        lease_until: datetime,
        read_after: ReadAfter | None,
    ) -> tuple[list[tuple[Any, ...]], dict[str, int], list[list[tuple[Any, ...]] | None]]:
        """``_lease_limited_steps``'s transaction on ``conn`` (autocommit mode): the leased
        rows, the sequences their histories were read after, the second batch's answers."""
        prepared = self._prepared_on(conn)
        opening = Batch(conn, prepared)
        opening.execute("BEGIN")
        opening.execute(limited.LOCK_LIMITED, params)
        opening.execute(limited.LOCK_LIMITS, params)
        opening.execute(limited.LEASE_LIMITED, params)
        _, locking, _, leasing = opening.results()
        batch = Batch(conn, prepared, whole=False)
        locked = tables.locked_runs(row[:3] for row in locking or ())
        found = [row for row in leasing or () if row[0] is not None and row[0] in locked]
        ready = sum(int(row[4]) for row in leasing or () if row[0] is None)
        self._limited_expected = ready > len(found)
        if ready > len(found):  # some held back: look again shortly
            self._throttled_until = now + THROTTLE_POLL
        found.sort(key=lambda row: (row[3], row[0], row[1]))
        rows = [row[:4] for row in found]
        parts.queue_started(batch, rows, locked, worker, now, lease_until)
        if rows and self._prune_starts():
            batch.execute(limited.PRUNE_STARTS, params)
        after = wanted_after((r[0] for r in rows), read_after) if read_after is not None else {}
        if after:
            batch.execute(READ_HISTORIES, histories_params(after))
        batch.execute("COMMIT")
        return rows, after, batch.results()

    def _lease_ready(
        self,
        conn: Connection,
        worker: str,
        params: dict[str, Any],
        now: datetime,
        lease_until: datetime,
        read_after: ReadAfter | None,
    ) -> parts.Leased:
        """``lease_steps``'s transaction, in two round trips on ``conn`` (autocommit mode: the
        statements open and end it): the leased rows, the sequences their histories were read
        after, the histories' rows, and when runs and steps are next due (see ``DueHints``)."""
        prepared = self._prepared_on(conn)
        opening = Batch(conn, prepared)
        opening.execute("BEGIN")
        opening.execute(tables.LOCK_READY, params)
        opening.execute(tables.LEASE_READY, params)
        _, locking, leasing = opening.results()
        # The rest of the transaction BEGIN opened: not one to send again on its own.
        batch = Batch(conn, prepared, whole=False)
        locked = tables.locked_runs(row[:3] for row in locking or ())
        # A candidate's run always exists (its step tasks go with it); should one have
        # gone meanwhile, its tasks are not started without a row (they are leasable
        # again once this lease runs out).
        found = [row for row in leasing or () if row[0] in locked]
        found.sort(key=lambda row: (row[4], row[3], row[0], row[1]))  # by priority, then age
        rows = [row[:4] for row in found]
        parts.queue_started(batch, rows, locked, worker, now, lease_until)
        limits = self._step_limits_present()
        after = parts.queue_lease_end(batch, params, rows, read_after, limits)
        done = batch.results()
        if limits:
            self._limited_expected = parts.limited_ready(done, after)
        return parts.leased(done, rows, after)

    def _lease_hinted(
        self,
        conn: Connection,
        hinted: list[hints.Hint],
        worker: str,
        build_ids: Sequence[str],
        params: dict[str, Any],
        now: datetime,
        lease_until: datetime,
        read_after: ReadAfter | None,
    ) -> parts.Leased | None:
        """``lease_steps``'s transaction for the hinted steps, in one round trip; ``None``
        (nothing written) when any of them was taken or its run moved meanwhile."""
        batch = Batch(conn, self._prepared_on(conn))
        batch.execute("BEGIN")
        hints.queue_lease(batch, hinted, worker, build_ids, now, lease_until)
        rows = hints.leased_rows(hinted)
        limits = self._step_limits_present()
        after = parts.queue_lease_end(batch, params, rows, read_after, limits)
        try:
            done = batch.results()
        except tables.GUARD_FAILURES:
            if conn.info.transaction_status != pq.TransactionStatus.IDLE:
                self._rolled_back(conn)
                conn.execute("ROLLBACK")
            return None
        if limits:
            self._limited_expected = parts.limited_ready(done, after)
        return parts.leased(done, rows, after)

    def renew_step(self, renewal: StepRenewal) -> bool:
        """Extend the step's lease if ``worker`` still holds it (storing ``heartbeat`` with
        it, in the same statement: only a held lease records one)."""
        run_id, step_id, worker, lease_until, heartbeat = renewal
        if heartbeat is None:
            with self._transaction(durable=False, pipelined=True) as conn:
                cursor = conn.execute(
                    "UPDATE step_tasks SET available_at = %s "
                    "WHERE run_id = %s AND step_id = %s AND lease_owner = %s RETURNING run_id",
                    (lease_until, run_id, step_id, worker),
                )
            return cursor.fetchone() is not None
        with self._transaction(durable=False, pipelined=True) as conn:
            cursor = conn.execute(
                "WITH held AS (UPDATE step_tasks SET available_at = %s "
                "WHERE run_id = %s AND step_id = %s AND lease_owner = %s RETURNING run_id), "
                "beat AS (INSERT INTO step_heartbeats (run_id, step_id, attempt, worker, "
                "details, at) SELECT %s, %s, %s, %s, %s::jsonb, %s FROM held "
                "ON CONFLICT (run_id, step_id) DO UPDATE SET attempt = EXCLUDED.attempt, "
                "worker = EXCLUDED.worker, details = EXCLUDED.details, at = EXCLUDED.at) "
                "SELECT run_id FROM held",
                (
                    lease_until,
                    run_id,
                    step_id,
                    worker,
                    run_id,
                    step_id,
                    heartbeat.attempt,
                    heartbeat.worker,
                    json.dumps(heartbeat.details),
                    heartbeat.at,
                ),
            )
        return cursor.fetchone() is not None

    def step_heartbeats(self, run_id: str) -> list[StepHeartbeat]:
        """The last stored heartbeat of each of the run's steps."""
        with self._reading() as conn:
            rows = conn.execute(
                "SELECT step_id, attempt, worker, details, at FROM step_heartbeats "
                "WHERE run_id = %s ORDER BY step_id",
                (run_id,),
            ).fetchall()
        return [
            StepHeartbeat(
                step_id=row[0], attempt=row[1], worker=row[2], details=row[3], at=utc(row[4])
            )
            for row in rows
        ]

    def next_due(self, build_ids: Sequence[str], until: datetime | None = None) -> datetime | None:
        """The earliest ``decide_at`` or step ``available_at`` of these builds (with
        ``until``, looked for up to then)."""
        return self._throttled_due(
            self._due.next_due(build_ids, lambda bound: self._due_times(build_ids, bound), until)
        )

    def _due_times(self, build_ids: Sequence[str], until: datetime | None) -> list[datetime]:
        params = {"builds": list(build_ids), "due_until": until or _END_OF_TIME}
        with self._reading() as conn:
            row = conn.execute(tables.NEXT_DUE, params).fetchone()
        found = [tables.utc(value) for value in row or () if value is not None]
        self._count_rows(len(found))
        return found

    def register_worker(self, worker: WorkerInfo) -> None:
        """Record a starting worker; forget those silent for longer than the retention."""
        with self._transaction() as conn:
            conn.execute(
                "DELETE FROM workers WHERE heartbeat_at < %s",
                (worker.started_at - WORKER_RETENTION,),
            )
            conn.execute(
                "INSERT INTO workers (worker_id, host, pid, builds, started_at, heartbeat_at, "
                "heartbeat_seconds, stopped_at) VALUES (%s, %s, %s, %s, %s, %s, %s, NULL) "
                "ON CONFLICT (worker_id) DO UPDATE SET host = EXCLUDED.host, pid = EXCLUDED.pid, "
                "builds = EXCLUDED.builds, started_at = EXCLUDED.started_at, "
                "heartbeat_at = EXCLUDED.heartbeat_at, "
                "heartbeat_seconds = EXCLUDED.heartbeat_seconds, stopped_at = NULL",
                (
                    worker.worker_id,
                    worker.host,
                    worker.pid,
                    json.dumps(list(worker.builds)),
                    worker.started_at,
                    worker.heartbeat_at,
                    worker.heartbeat_seconds,
                ),
            )

    def heartbeat(self, worker_id: str, now: datetime) -> bool:
        """Move the worker's heartbeat to ``now``; False if unknown or stopped."""
        with self._transaction(durable=False, pipelined=True) as conn:
            cur = conn.execute(
                "UPDATE workers SET heartbeat_at = %s WHERE worker_id = %s AND stopped_at IS NULL",
                (now, worker_id),
            )
        return cur.rowcount > 0

    def worker_stopped(self, worker_id: str, now: datetime) -> None:
        """Mark the worker stopped at ``now``."""
        with self._transaction() as conn:
            conn.execute(
                "UPDATE workers SET heartbeat_at = %s, stopped_at = %s WHERE worker_id = %s",
                (now, now, worker_id),
            )

    # -- the SQL roles' transaction, read and times; pauses (``store.pauses_sql``) -------------

    _sql_dialect = tables.POSTGRES

    def _sql_write(self) -> AbstractContextManager[Connection]:
        return self._transaction()

    def _sql_read(self) -> AbstractContextManager[Connection]:
        return self._reading()

    def _sql_time(self, value: Any) -> datetime:
        return tables.utc(value)

    def _pauses_changed(self) -> None:
        self._pause_probe = None
        self._due.forget()
        with self._transaction() as conn:  # a resumed run may be due: wake the workers
            conn.execute(NOTIFY, (NOTIFY_CHANNEL, self.schema))

    # -- schedules, limits, retention (``store.schedules_sql`` ...: ``_sql_write`` above) ---

    _schedule_lock_rows = "FOR UPDATE SKIP LOCKED"
    _limit_lock = "FOR UPDATE"
    _limit_lease_lock = "FOR UPDATE SKIP LOCKED"

    def _run_records(self, conn: Connection, where: str, params: Sequence[Any]) -> list[RunRecord]:
        rows = conn.execute(f"SELECT {tables.RUN_COLUMNS} FROM runs WHERE {where}", params)
        return [tables.run_record(row) for row in rows.fetchall()]

    def _opened(self) -> None:
        self._limit_kinds()  # whether any limit is in effect: known before the first lease

    def _limit_write(self) -> AbstractContextManager[Connection]:
        return self._transaction(durable=False)

    def _commit_limited_names(self) -> frozenset[str]:
        return self._step_limit_sizes()[0]

    def _generous_limits(self) -> frozenset[str]:
        return self._step_limit_sizes()[1]

    def _step_limit_sizes(self) -> tuple[frozenset[str], frozenset[str]]:
        """The step limits in effect, and those of them that are generous
        (``limited.GENEROUS``), as looked up at most ``LIMITS_LOOK_SECONDS`` ago (and again
        whenever limits change here)."""
        if not self._step_limits_present():
            return _NO_SIZES
        looked, sizes, seen = self._limit_sizes
        if monotonic() - looked < LIMITS_LOOK_SECONDS and seen == self._limits_seen[0]:
            return sizes
        with looking_alone(first=looked == float("-inf")) as alone:
            if alone:  # else another thread is looking: what was last seen serves meanwhile
                with self._reading() as conn:
                    rows = conn.execute(limited.GENEROUS).fetchall()
                sizes = (
                    frozenset(name for name, _ in rows),
                    frozenset(name for name, generous in rows if generous),
                )
                self._limit_sizes = (monotonic(), sizes, self._limits_seen[0])
        return sizes

    def starts_in_commit(self, name: str) -> bool:
        """Whether an attempt of limited step ``name`` may be started in the commit that
        schedules it (``LimitedStarts``): its commits count it under the limit, and none found
        the limit without room lately."""
        if name not in self._commit_limited_names():
            return False
        with self._lock:
            until = self._limits_tight.get(name)
            if until is not None and monotonic() >= until:
                del self._limits_tight[name]
                until = None
        return until is None

    def wait_for_change(
        self,
        timeout: float,
        *,
        ending: str | None = None,
        work_only: bool = False,
        quiet: bool = False,
    ) -> None:
        """Block up to ``timeout`` seconds; return as soon as a commit schedules work here or,
        with ``ending``, as soon as that run ends (and not for work). Only commits that make
        work notify, so every wait without ``ending`` is ``work_only``.

        Listening starts with the first call, on a connection of its own: a commit before that
        first call is not seen, so look for work before waiting (as a worker loop does). Ends
        are heard on another connection, shared by every thread waiting for one, and the first
        wait for an end returns at once, once listening, for the same reason. ``quiet``: the
        offer for hand-offs is not made or refreshed first (it costs a round trip).
        """
        self._due.forget()
        if ending is not None:
            self._wait_for_end(ending, timeout)
            return
        deadline = monotonic() + max(timeout, 0.0)
        if not self._listen_lock.acquire(timeout=max(timeout, 0.0)):
            return  # another thread of this process is listening and will pick the work up
        try:
            self._forget_inherited()
            if self._closed:
                raise StoreError(f"The PostgreSQL store for {self._where} is closed.")
            if self._listener is None:
                self._listener = self._connect(autocommit=True)
                self._listener.execute(sql.SQL("LISTEN {}").format(sql.Identifier(NOTIFY_CHANNEL)))
                self._offered_at = None
            if self._work_heard:
                self._work_heard = False
                return
            if not quiet:
                self._offer_on_listener(self._listener)
            heard: list[hints.Hint] = []
            woke = NOTHING
            while not woke:
                # Each packet read whole: a generator closed in the middle of one drops the
                # notifications after the first, a commit's hints among them.
                for note in notes_within(self._listener, deadline - monotonic()):
                    woke = max(woke, self._heard(note.payload, heard))
                if not woke and monotonic() >= deadline:
                    return
            # Commits often come in bursts: swallow what is already queued, so the next wait
            # does not return at once for a change the caller is about to look at anyway.
            with closing(self._listener.notifies(timeout=0)) as queued:
                for note in queued:
                    woke = max(woke, self._heard(note.payload, heard))
            if woke == WORK:  # a hand-off alone leaves nothing for a lease to find
                self._steps_expected = True
                self._limited_expected = True
                # With steps handed too, the pass takes those and does not look (see
                # ``_work_heard``).
                self._work_heard = bool(self._handed)
            # A worker waits only once its last pass found less than it had room for: it has
            # no backlog of older ready steps that the hinted ones would overtake.
            self._hints = heard
        except psycopg.Error as exc:
            if self._listener is not None:
                close_quietly(self._listener)
                self._listener = None
            raise self._store_error(exc, lost=True) from exc
        finally:
            if self._closed and self._listener is not None:  # close() ran while we waited
                close_quietly(self._listener)
                self._listener = None
            self._listen_lock.release()

    def offer_worker(
        self, worker_id: str, build_ids: Sequence[str], lease_seconds: float, slots: int = 1
    ) -> None:
        """Offer this process's worker for hand-offs (``slots`` starts); the offer is made from
        the listening connection, by the next ``wait_for_change`` (a start checks that
        connection is open before it hands a step over)."""
        offer = (worker_id, list(build_ids), float(lease_seconds), max(1, slots))
        if offer != self._offer:
            self._offer, self._offered_at = offer, None
        self._offerer = worker_id

    def _offer_on_listener(self, conn: Connection) -> None:
        """Make the offer on ``conn`` unless made there lately and not claimed since; offers
        of workers that died go in the same round trip."""
        offer = self._offer
        if offer is None or not offer[1]:
            return
        at = self._offered_at
        if at is not None and monotonic() - at < handoffs.OFFER_REFRESH:
            return
        batch = Batch(conn, self._prepared_on(conn))
        self._queue_offer(batch, offer)
        batch.send()
        self._offered_at = monotonic()
        self._offer_left = offer[3]

    def _queue_offer(self, batch: Batch, offer: tuple[str, list[str], float, int]) -> None:
        """Add the offer to ``batch``, and now and then the removal of dead workers' offers
        (a look at every server process: not on every offer)."""
        if monotonic() >= self._forget_gone_at:
            batch.execute(handoffs.FORGET_GONE)
            self._forget_gone_at = monotonic() + handoffs.OFFER_REFRESH
        batch.execute(handoffs.OFFER, offer)

    def handed_steps(self, worker_id: str, read_after: ReadAfter) -> list[StepLease]:
        """The steps handed to ``worker_id`` that notifications told of, each with its run's
        history: the one the notification carried (a new run's, whole) or, when it did not fit,
        one read here. A busy worker does not wait: notifications already queued are read here
        first."""
        if self._offerer != worker_id:
            return []
        with self._free_listener() as listener:
            # Taking it reads what its socket holds; what came during a statement of ours on
            # it (the withdrawal, a step's end) psycopg kept aside, and is read here.
            if listener is not None:
                self._drain(listener)
                if self._offered_at is None and self._handed:
                    # Its slots used up by the hand-offs just heard: offered again now, not
                    # only when it next sleeps (a busy fleet's workers seldom do), with the
                    # slots its last offer had.
                    self._offer_on_listener(listener)
        with self._lock:
            handed, self._handed = self._handed, []
        leases: list[StepLease] = []
        unread: list[StepLease] = []
        for h in handed:
            lease = StepLease(
                run_id=h.run_id, step_id=h.step_id, attempt=h.attempt, lease_until=h.lease_until
            )
            if h.history is not None and read_after(h.run_id) == 0:
                leases.append(dataclasses.replace(lease, history=h.history))
            else:
                unread.append(lease)
        return leases + carry_histories(unread, read_after, self.read_histories)

    def withdraw_worker(self, worker_id: str) -> None:
        """Take back the offer of ``worker_id`` (it stops). Done on the listening connection when
        this thread can have it: a start that claimed the offer first has committed by the time
        the offer is gone, and the server sends its notification on that connection before the
        answer, so the next ``handed_steps`` sees that step (else it would wait for its lease to
        run out)."""
        if self._offer is not None and self._offer[0] == worker_id:
            self._offer, self._offered_at = None, None
        with self._free_listener() as listener:
            if listener is not None:
                listener.execute(handoffs.WITHDRAW, (worker_id,))
                return
        with self._reading() as conn:
            conn.execute(handoffs.WITHDRAW, (worker_id,))

    def _wait_for_end(self, run_id: str, timeout: float) -> None:
        self._forget_inherited()
        if self._closed:
            raise StoreError(f"The PostgreSQL store for {self._where} is closed.")
        try:
            self._ends.wait(run_id, timeout)
        except psycopg.Error as exc:
            raise self._store_error(exc, lost=True) from exc
        finally:
            if self._closed:  # close() ran while we waited
                self._ends.close()
