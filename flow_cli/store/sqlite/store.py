"""``SQLiteStore``: the writes, leases and waits of the default store (reads in ``reads``,
connections and the schema in ``connection``)."""

from __future__ import annotations

import contextlib
import functools
import json
import sqlite3
import time
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime
from typing import Any

from flow_cli.errors import EventConflict, FlowError, HookTokenInUse
from flow_cli.model.clock import parse_utc
from flow_cli.model.events import EventEnvelope, RunStarted, StepStarted
from flow_cli.model.spec import PRIORITIES
from flow_cli.model.status import RunStatus
from flow_cli.store.due import HORIZON
from flow_cli.store.index import RowChanges, decided_row, row_changes, start_attributes
from flow_cli.store.limits_sql import SQLLimits, unlimited_run, unlimited_step
from flow_cli.store.pauses_sql import PRIORITY_IN
from flow_cli.store.protocol import (
    GROUP_ERRORS,
    KEEP,
    WORKER_RETENTION,
    AppendViaCommit,
    CommitGroup,
    LeaseAsk,
    NewRun,
    ReadAfter,
    RunRecord,
    StepHeartbeat,
    StepLease,
    StepRenewal,
    StreamWrite,
    WorkerInfo,
    carry_histories,
    makes_work,
)
from flow_cli.store.retention_sql import SQLRetention
from flow_cli.store.schedules_sql import SQLSchedules
from flow_cli.store.sql import attribute_rows, attribute_upsert, error_values, run_sets
from flow_cli.store.sqlite.connection import FALLBACK_POLL_SECONDS, POLL_SECONDS, guarded
from flow_cli.store.sqlite.pauses import SQLitePauses, earliest, unheld
from flow_cli.store.sqlite.reads import SQLiteReads
from flow_cli.store.sqlite.rows import (
    RUN_SELECT,
    SQLITE,
    dt,
    encode,
    encoded_rows,
    envelopes,
    insert_events,
    lost_race,
    micros,
    run_record,
    ts,
    ts_or_none,
)

_VACUUM_PAGES = 1000
"""Pages one step of ``reclaim_space`` frees (4 MB of 4 KiB pages: a few milliseconds)."""
_VACUUM_ROUNDS = 50
_INCREMENTAL = 2
"""``PRAGMA auto_vacuum`` of a database made with ``auto_vacuum = INCREMENTAL``."""

DATA_ERRORS = (sqlite3.DataError, sqlite3.InterfaceError, UnicodeEncodeError, OverflowError)
"""What SQLite (or its binding) raises for a value it cannot take: a string that is not valid
UTF-8 (a lone surrogate), a blob or string too big, an integer beyond 64 bits."""


class SQLiteStore(
    SQLiteReads, SQLSchedules, SQLRetention, SQLitePauses, SQLLimits, AppendViaCommit
):
    """The ``EventStore`` on one SQLite file.

    Args:
        path: The database file.
        synchronous: ``FULL`` (default, survives power loss) or ``NORMAL`` (faster), see module.
        busy_timeout_ms: How long a writer waits for another connection's write lock before the
            call fails with ``StoreError``.
        create: Create the file and schema when missing. Read-only commands pass ``False`` so a
            mistyped path is reported instead of silently creating an empty database.
        read_only: Open with SQLite's ``mode=ro``: every write is refused, and the database is
            readable on a read-only file, directory or mount (SQLite reads a WAL database there
            without creating its ``-shm`` file). Nothing is migrated or changed; a database
            that needs a schema upgrade must be opened writable once.

    Raises:
        StoreError: the file is missing (with ``create=False``), unreadable, locked, not a Flow
            database, or written by a newer Flow.
    """

    # -- writes -----------------------------------------------------------------------------------

    def _create(
        self, conn: sqlite3.Connection, run: NewRun, stamp: str, *, must_create: bool
    ) -> bool:
        """Insert the run row and its ``run_started``; False if the id exists and may."""
        spec = run.spec
        inserted = conn.execute(
            "INSERT INTO runs (run_id, workflow, status, build_id, parent_run_id, created_at, "
            "updated_at, last_sequence, decide_at, patches, priority) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, 1, ?, ?, ?) ON CONFLICT (run_id) DO NOTHING",
            (
                run.run_id,
                spec.workflow,
                RunStatus.PENDING.value,
                spec.runtime_build_id,
                spec.parent_run_id,
                stamp if run.created_at is None else ts(run.created_at),
                stamp,
                ts_or_none(run.decide_at),
                json.dumps(list(spec.patches)),
                spec.priority,
            ),
        ).rowcount
        if not inserted:
            if not must_create:
                return False
            # Creating is appending after sequence 0: an existing run id is a conflict.
            lost_race(conn, run.run_id, 0)
        # The row was inserted at sequence 1 with its run_started: no read, no second write.
        insert_events(conn, run.run_id, 0, encode([RunStarted(spec=spec, seed=run.seed)]), stamp)
        self._set_attributes(conn, run.run_id, start_attributes(run))
        return True

    def _create_decided(
        self,
        conn: sqlite3.Connection,
        run: NewRun,
        write: StreamWrite,
        rows: list[tuple[str, str]],
        stamp: str,
    ) -> None:
        """Insert the run as its first decision (``write``, at sequence 1) leaves it: the row
        in its final state, ``run_started`` and the decision's events, its step tasks and
        hooks. An existing run id is a conflict, as for ``_create``."""
        spec = run.spec
        changes = row_changes(write.index)
        row = decided_row(run, changes)
        events = [*encode([RunStarted(spec=spec, seed=run.seed)]), *rows]
        inserted = conn.execute(
            "INSERT INTO runs (run_id, workflow, status, build_id, parent_run_id, created_at, "
            "updated_at, last_sequence, decide_at, patches, failing, failing_since, waiting_on, "
            "error_type, error, priority) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
            "ON CONFLICT (run_id) DO NOTHING",
            (
                run.run_id,
                spec.workflow,
                row.status.value,
                row.build_id,
                spec.parent_run_id,
                stamp if run.created_at is None else ts(run.created_at),
                stamp,
                len(events),
                ts_or_none(row.decide_at),
                json.dumps(list(spec.patches)),
                row.failing,
                None if row.failing is None else stamp,
                row.waiting_on,
                *error_values(row.error),
                spec.priority,
            ),
        ).rowcount
        if not inserted:
            lost_race(conn, run.run_id, 0)
        insert_events(conn, run.run_id, 0, events, stamp)
        self._set_attributes(conn, run.run_id, start_attributes(run))
        self._apply_index(conn, run.run_id, changes, stamp)

    def _apply_write(
        self, conn: sqlite3.Connection, write: StreamWrite, rows: list[tuple[str, str]], stamp: str
    ) -> None:
        """Append the write's events after its expected sequence and write its index changes.

        The run's row moves first, in one update guarded by the expected sequence that also
        writes the index, with no read before it (each statement is a round trip through the
        GIL for a busy worker). A write that lost its race changes nothing; only then is the
        row read, to tell a conflict from a missing run."""
        run_id, expected = write.run_id, write.expected_sequence
        changes = row_changes(write.index)
        # The status apart, and only when it changes (most writes keep it): SQLite rewrites an
        # index entry for every column an UPDATE sets, changed or not, so setting it anyway
        # cost each step a page of runs_status_created written to the WAL. RETURNING gives
        # the status the row had, as the update leaves it alone.
        sets, params = run_sets(changes, SQLITE, stamp, expected + len(rows), status=False)
        moved = conn.execute(
            f"UPDATE runs SET {', '.join(sets)} WHERE run_id = ? AND last_sequence = ? "
            "RETURNING status",
            [*params, run_id, expected],
        ).fetchone()
        if moved is None:
            lost_race(conn, run_id, expected)
        if moved[0] != changes.status.value:
            conn.execute(
                "UPDATE runs SET status = ? WHERE run_id = ?", (changes.status.value, run_id)
            )
        # A conflict the primary key catches here: the caller rolls the update above back
        # with the rest of the group or transaction.
        insert_events(conn, run_id, expected, rows, stamp)
        self._apply_index(conn, run_id, changes, stamp)

    @staticmethod
    def _set_attributes(
        conn: sqlite3.Connection, run_id: str, attributes: Mapping[str, str]
    ) -> None:
        if attributes:
            conn.executemany(attribute_upsert(SQLITE), attribute_rows(run_id, attributes))

    def _apply_index(
        self, conn: sqlite3.Connection, run_id: str, changes: RowChanges, stamp: str
    ) -> None:
        """A write's step tasks, hooks and search attributes (the run's row is written
        already)."""
        self._set_attributes(conn, run_id, changes.attributes)
        if changes.build_id is not KEEP:
            conn.execute(
                "UPDATE step_tasks SET build_id = ? WHERE run_id = ?", (changes.build_id, run_id)
            )
        if changes.drop_tasks:
            conn.execute("DELETE FROM step_tasks WHERE run_id = ?", (run_id,))
        for step_id, task in changes.tasks.items():
            if task is None:
                conn.execute(
                    "DELETE FROM step_tasks WHERE run_id = ? AND step_id = ?",
                    (run_id, step_id),
                )
                continue
            # A task carries its run's build id (as re-pinned by the update above) and priority.
            conn.execute(
                "INSERT INTO step_tasks (run_id, step_id, build_id, attempt, available_at, "
                "lease_owner, priority, step_name) SELECT ?, ?, build_id, ?, ?, ?, priority, ? "
                "FROM runs WHERE run_id = ? ON CONFLICT (run_id, step_id) DO UPDATE SET "
                "attempt = excluded.attempt, available_at = excluded.available_at, "
                "lease_owner = excluded.lease_owner, step_name = excluded.step_name",
                (
                    run_id,
                    step_id,
                    task.attempt,
                    ts(task.available_at),
                    task.owner,
                    task.name,
                    run_id,
                ),
            )
        for hook in changes.hooks:
            owner = conn.execute(
                "SELECT run_id, hook_id FROM hooks WHERE token = ?", (hook.token,)
            ).fetchone()
            if owner is not None and tuple(owner) != (run_id, hook.hook_id):
                raise HookTokenInUse(hook.token, owner[0], owner[1])
            conn.execute(
                "INSERT INTO hooks (token, run_id, hook_id, resolved, created_at, metadata) "
                "VALUES (?, ?, ?, ?, ?, ?) "
                "ON CONFLICT (token) DO UPDATE SET resolved = excluded.resolved",
                (
                    hook.token,
                    run_id,
                    hook.hook_id,
                    int(hook.resolved),
                    stamp,
                    json.dumps(hook.metadata, ensure_ascii=False),
                ),
            )

    @guarded
    def create_run(self, run: NewRun, now: datetime) -> EventEnvelope | None:
        """Create the run with ``run_started`` at sequence 1; None if the run id exists."""
        with self._write() as conn:
            if not self._create(conn, run, ts(now), must_create=False):
                return None
        self._doorbell.ring()
        event = RunStarted(spec=run.spec, seed=run.seed)
        return EventEnvelope(run_id=run.run_id, sequence=1, recorded_at=dt(ts(now)), event=event)

    @guarded
    def commit(
        self, writes: Sequence[StreamWrite], creates: Sequence[NewRun], now: datetime
    ) -> list[list[EventEnvelope]]:
        """Apply the creations, then the writes, in one transaction (see ``EventStore``)."""
        stamp = ts(now)
        encoded = [encoded_rows(w) for w in writes]  # before BEGIN: bad JSON writes nothing
        try:
            with self._write() as conn:
                self._apply(conn, writes, encoded, creates, stamp)
        except EventConflict:
            self.stats.conflicts += 1
            raise
        except DATA_ERRORS as exc:
            raise self._refused(exc) from exc
        self._doorbell.ring(work=makes_work(writes, creates))
        return envelopes(writes, stamp)

    @guarded
    def commit_groups(self, groups: Sequence[CommitGroup]) -> list[FlowError | None]:
        """Each group in its own savepoint of one transaction (see ``EventStore``)."""
        encoded = [[encoded_rows(w) for w in g.writes] for g in groups]
        # All groups in one transaction without savepoints first: a savepoint is not free in
        # SQLite (each page written under one is first copied to a statement journal; one
        # start cost 0.2 ms more CPU with it), and a group seldom fails. When one does, the
        # transaction is rolled back and the groups go again, each in its own savepoint.
        try:
            with self._write() as conn:
                for group, rows in zip(groups, encoded, strict=True):
                    self._apply(conn, group.writes, rows, group.creates, ts(group.now))
                self._probe_if_wanted(conn)
        except GROUP_ERRORS as exc:
            if len(groups) > 1:
                return self._groups_apart(groups, encoded)
            if isinstance(exc, EventConflict):
                self.stats.conflicts += 1
            return [exc]
        except DATA_ERRORS as exc:
            if len(groups) > 1:
                return self._groups_apart(groups, encoded)
            return [self._refused(exc)]
        self._doorbell.ring(work=any(makes_work(g.writes, g.creates) for g in groups))
        return [None] * len(groups)

    def _groups_apart(
        self, groups: Sequence[CommitGroup], encoded: Sequence[Sequence[list[tuple[str, str]]]]
    ) -> list[FlowError | None]:
        """``commit_groups`` once a group failed: each group in its own savepoint, so that the
        others commit without it."""
        results: list[FlowError | None] = []
        with self._write() as conn:
            for group, rows in zip(groups, encoded, strict=True):
                conn.execute("SAVEPOINT flow_group")
                try:
                    self._apply(conn, group.writes, rows, group.creates, ts(group.now))
                except GROUP_ERRORS as exc:
                    conn.execute("ROLLBACK TO flow_group")
                    if isinstance(exc, EventConflict):
                        self.stats.conflicts += 1
                    results.append(exc)
                except DATA_ERRORS as exc:
                    # This group's alone (a value SQLite cannot take): the others commit.
                    conn.execute("ROLLBACK TO flow_group")
                    results.append(self._refused(exc))
                else:
                    results.append(None)
                conn.execute("RELEASE flow_group")
        self._doorbell.ring(
            work=any(
                makes_work(g.writes, g.creates)
                for g, error in zip(groups, results, strict=True)
                if error is None
            )
        )
        return results

    def _apply(
        self,
        conn: sqlite3.Connection,
        writes: Sequence[StreamWrite],
        encoded: Sequence[list[tuple[str, str]]],
        creates: Sequence[NewRun],
        stamp: str,
    ) -> None:
        # A run created with its first decision (``Engine.start``, a continuation, a child) is
        # inserted as the decision leaves it: no update of the row just inserted.
        firsts: dict[str, tuple[StreamWrite, list[tuple[str, str]]]] = {}
        if creates:  # most commits (a step's end and the next decision) create nothing
            created = {run.run_id for run in creates}
            counts = Counter(write.run_id for write in writes)
            firsts = {
                write.run_id: (write, rows)
                for write, rows in zip(writes, encoded, strict=True)
                if write.run_id in created
                and write.expected_sequence == 1
                and counts[write.run_id] == 1
                and write.recorded_at is None
            }
        for run in creates:
            first = firsts.get(run.run_id)
            if first is None:
                self._create(conn, run, stamp, must_create=True)
            else:
                self._create_decided(conn, run, *first, stamp)
        for write, rows in zip(writes, encoded, strict=True):
            if write.run_id not in firsts:
                at = stamp if write.recorded_at is None else ts(write.recorded_at)
                self._apply_write(conn, write, rows, at)

    @guarded
    def park_run(self, run_id: str, expected_sequence: int, decide_at: datetime | None) -> bool:
        """Set ``decide_at`` if the run is still at ``expected_sequence``."""
        with self._write(durable=False) as conn:
            return bool(
                conn.execute(
                    "UPDATE runs SET decide_at = ?, lease_owner = NULL "
                    "WHERE run_id = ? AND last_sequence = ?",
                    (ts_or_none(decide_at), run_id, expected_sequence),
                ).rowcount
            )

    # -- due work ---------------------------------------------------------------------------------

    @guarded
    def lease_runs(self, ask: LeaseAsk) -> list[str]:
        """Lease up to ``limit`` due runs of these builds by moving ``decide_at`` ahead."""
        worker, build_ids, now, lease_until, limit = ask
        if not build_ids or limit <= 0:
            return []
        limited = self._limited_runs_pending()
        if not limited and self._due.no_run_due(build_ids, now):
            return []
        marks = ", ".join("?" * len(build_ids))
        select = (
            f"SELECT run_id FROM runs WHERE {PRIORITY_IN} AND decide_at <= ? "
            f"AND build_id IN ({marks}) AND {unlimited_run('runs')} "
            "{held}ORDER BY priority, decide_at LIMIT ?"
        )
        params = (ts(now), *build_ids, limit)
        # Look before locking: an idle worker must not take the write lock every pass.
        # (Held runs count here: only the lease below asks whether anything is paused.)
        look = self._conn().execute(unheld(select, "runs", False), params).fetchone()
        if not look and not limited:
            return []
        until = ts(lease_until)
        with self._write(durable=False) as conn:
            select = unheld(select, "runs", self._probe_pauses(conn))
            run_ids = [row[0] for row in conn.execute(select, params)]
            # Runs of limited workflows: admitted as their limits leave slots (``limits_sql``).
            run_ids += self._lease_limited_runs(
                conn, worker, build_ids, now, lease_until, limit - len(run_ids)
            )
            conn.executemany(
                "UPDATE runs SET decide_at = ?, lease_owner = ? WHERE run_id = ?",
                [(until, worker, run_id) for run_id in run_ids],
            )
        self.stats.scheduler_rows_read += len(run_ids)
        return run_ids

    @guarded
    def lease_steps(self, ask: LeaseAsk, read_after: ReadAfter | None = None) -> list[StepLease]:
        """Lease up to ``limit`` ready step tasks of these builds, oldest first, recording
        ``step_started`` for each in the same transaction (``read_after``: see ``EventStore``;
        the histories are read just after the commit, on this thread's connection)."""
        worker, build_ids, now, lease_until, limit = ask
        if not build_ids or limit <= 0:
            return []
        self._due.forget()
        writes = self._due.writes()
        marks = ", ".join("?" * len(build_ids))
        select = (
            "SELECT t.run_id, t.step_id, t.attempt, r.last_sequence FROM step_tasks t "
            "JOIN runs r ON r.run_id = t.run_id "
            f"WHERE t.{PRIORITY_IN} AND t.available_at <= ? AND t.build_id IN ({marks}) "
            f"AND {unlimited_step('t')} {{held}}ORDER BY t.priority, t.available_at LIMIT ?"
        )
        params = (ts(now), *build_ids, limit)
        conn = self._conn()
        # Look before locking: an idle worker must not take the write lock every pass.
        # (Held steps count here: only the lease below asks whether anything is paused.)
        look = conn.execute(unheld(select, "r", False), params).fetchone()
        if not look and not self._step_limits_present():
            self._throttled_until = None
            return []
        until = ts(lease_until)
        until_dt = dt(until)
        stamp = ts(now)
        with self._write(durable=False) as conn:
            paused = self._probe_pauses(conn)
            rows = conn.execute(unheld(select, "r", paused), params).fetchall()
            # Steps under a limit: leased as their limits leave slots (``limits_sql``).
            for run_id, step_id, attempt in self._lease_limited(
                conn, worker, build_ids, now, lease_until, limit - len(rows)
            ):
                (sequence,) = conn.execute(
                    "SELECT last_sequence FROM runs WHERE run_id = ?", (run_id,)
                ).fetchone()
                rows.append((run_id, step_id, attempt, sequence))
            conn.executemany(
                "UPDATE step_tasks SET available_at = ?, lease_owner = ? "
                "WHERE run_id = ? AND step_id = ?",
                [(until, worker, run_id, step_id) for run_id, step_id, _, _ in rows],
            )
            last: dict[str, int] = {}
            events = []
            at = micros(stamp)
            for run_id, step_id, attempt, sequence in rows:
                started = StepStarted(
                    step_id=step_id, attempt=attempt, worker=worker, lease_until=until_dt
                )
                ((key, data),) = encode([started])
                last[run_id] = last.get(run_id, sequence) + 1
                events.append((run_id, last[run_id], key, at, data))
            conn.executemany(
                "INSERT INTO events (run_id, sequence, event_key, recorded_at, data) "
                "VALUES (?, ?, ?, ?, ?)",
                events,
            )
            conn.executemany(
                "UPDATE runs SET last_sequence = ?, updated_at = ?, "
                "status = CASE WHEN status = 'Cancelling' THEN status ELSE 'Running' END "
                "WHERE run_id = ?",
                [(sequence, stamp, run_id) for run_id, sequence in last.items()],
            )
            # When work is next due, read with the lease: the worker's pass need not ask again.
            horizon = now + HORIZON
            runs_due, steps_due = self._due_times(conn, build_ids, paused, until=horizon)
        self._due.offer(  # + the lease's own write
            build_ids, runs_due, steps_due, writes=writes + 1, until=horizon
        )
        self.stats.scheduler_rows_read += len(rows)
        leases = [
            StepLease(run_id=r, step_id=s, attempt=a, lease_until=until_dt) for r, s, a, _ in rows
        ]
        return carry_histories(leases, read_after, self.read_histories)

    @guarded
    def renew_step(self, renewal: StepRenewal) -> bool:
        """Extend the lease if ``worker`` still holds it (storing ``heartbeat`` with it)."""
        run_id, step_id, worker, lease_until, heartbeat = renewal
        with self._write(durable=False) as conn:
            held = bool(
                conn.execute(
                    "UPDATE step_tasks SET available_at = ? "
                    "WHERE run_id = ? AND step_id = ? AND lease_owner = ?",
                    (ts(lease_until), run_id, step_id, worker),
                ).rowcount
            )
            if held and heartbeat is not None:
                conn.execute(
                    "INSERT OR REPLACE INTO step_heartbeats (run_id, step_id, attempt, worker, "
                    "details, at) VALUES (?, ?, ?, ?, ?, ?)",
                    (
                        run_id,
                        step_id,
                        heartbeat.attempt,
                        heartbeat.worker,
                        json.dumps(heartbeat.details),
                        ts(heartbeat.at),
                    ),
                )
            return held

    @guarded
    def step_heartbeats(self, run_id: str) -> list[StepHeartbeat]:
        """The last stored heartbeat of each of the run's steps."""
        rows = self._conn().execute(
            "SELECT step_id, attempt, worker, details, at FROM step_heartbeats WHERE run_id = ? "
            "ORDER BY step_id",
            (run_id,),
        )
        return [
            StepHeartbeat(
                step_id=step_id,
                attempt=attempt,
                worker=worker,
                details=json.loads(details),
                at=parse_utc(at),
            )
            for step_id, attempt, worker, details, at in rows
        ]

    @guarded
    def next_due(self, build_ids: Sequence[str], until: datetime | None = None) -> datetime | None:
        """The earliest ``decide_at`` or step ``available_at`` of these builds (with
        ``until``, looked for up to then)."""
        due = self._due.next_due(
            build_ids, lambda bound: self._due_times(self._conn(), build_ids, until=bound), until
        )
        return self._throttled_due(due)

    def _due_times(
        self,
        conn: sqlite3.Connection,
        build_ids: Sequence[str],
        paused: bool | None = None,
        until: datetime | None = None,
    ) -> tuple[datetime | None, datetime | None]:
        """The earliest ``decide_at`` and the earliest step ``available_at`` of these builds,
        of runs no pause holds (``paused``: whether anything is, when the caller looked), up
        to ``until`` (the due-time index read as far as that, not over every waiting run)."""
        if paused is None:
            paused = self._probe_pauses(conn)
        params = ((ts(until),) if until is not None else ()) + tuple(build_ids)
        statements = _due_statements(len(build_ids), paused, until is not None)
        found = [conn.execute(sql, params * len(PRIORITIES)).fetchone()[0] for sql in statements]
        self.stats.scheduler_rows_read += sum(1 for value in found if value is not None)
        runs, steps = (None if value is None else dt(value) for value in found)
        return runs, steps

    # -- workers registry -------------------------------------------------------------------------

    @guarded
    def register_worker(self, worker: WorkerInfo) -> None:
        """Record a starting worker; forget those silent for longer than the retention."""
        with self._write() as conn:
            conn.execute(
                "DELETE FROM workers WHERE heartbeat_at < ?",
                (ts(worker.started_at - WORKER_RETENTION),),
            )
            conn.execute(
                "INSERT OR REPLACE INTO workers (worker_id, host, pid, builds, started_at, "
                "heartbeat_at, heartbeat_seconds, stopped_at) VALUES (?, ?, ?, ?, ?, ?, ?, NULL)",
                (
                    worker.worker_id,
                    worker.host,
                    worker.pid,
                    json.dumps(list(worker.builds)),
                    ts(worker.started_at),
                    ts(worker.heartbeat_at),
                    worker.heartbeat_seconds,
                ),
            )

    @guarded
    def heartbeat(self, worker_id: str, now: datetime) -> bool:
        """Move the worker's heartbeat to ``now``; False if unknown or stopped."""
        with self._write(durable=False) as conn:
            return bool(
                conn.execute(
                    "UPDATE workers SET heartbeat_at = ? "
                    "WHERE worker_id = ? AND stopped_at IS NULL",
                    (ts(now), worker_id),
                ).rowcount
            )

    @guarded
    def worker_stopped(self, worker_id: str, now: datetime) -> None:
        """Mark the worker stopped at ``now``."""
        with self._write() as conn:
            conn.execute(
                "UPDATE workers SET heartbeat_at = ?, stopped_at = ? WHERE worker_id = ?",
                (ts(now), ts(now), worker_id),
            )

    # -- retention (statements in ``store.retention_sql``) ---------------------------------------

    def _run_records(
        self, conn: sqlite3.Connection, where: str, params: Sequence[Any]
    ) -> list[RunRecord]:
        return [run_record(row) for row in conn.execute(f"{RUN_SELECT} WHERE {where}", params)]

    @guarded
    def reclaim_space(self) -> None:
        """Give the free pages back to the file system in small steps (``PRAGMA
        incremental_vacuum``), each its own short write, so no step holds the write lock long.
        A database made before auto_vacuum was INCREMENTAL has none to give: SQLite reuses
        its free pages for new rows instead."""
        if self._conn().execute("PRAGMA auto_vacuum").fetchone()[0] != _INCREMENTAL:
            return
        conn = self._conn()
        for _ in range(_VACUUM_ROUNDS):
            if not conn.execute("PRAGMA freelist_count").fetchone()[0]:
                return
            with self._write_lock:
                # Its own transaction, stepped to the end by executescript: executed as a
                # statement, the pragma frees one page per call.
                conn.executescript(f"PRAGMA incremental_vacuum({_VACUUM_PAGES});")

    def _opened(self) -> None:
        self._limit_kinds()  # whether any limit is in effect: known before the first lease

    @contextlib.contextmanager
    def _limit_write(self) -> Iterator[sqlite3.Connection]:
        try:
            with self._write(durable=False) as conn:
                yield conn
        except sqlite3.Error as exc:
            raise self._store_error(exc) from exc

    # -- waiting and closing ----------------------------------------------------------------------

    @guarded
    def wait_for_change(
        self,
        timeout: float,
        *,
        ending: str | None = None,
        work_only: bool = False,
        quiet: bool = False,
    ) -> None:
        """Sleep up to ``timeout`` seconds; return early once any connection commits (with
        ``work_only``, once a commit makes work).

        Commits of any process ring this process's doorbell (see ``flow_cli.store.doorbell``);
        ``PRAGMA data_version`` is still read now and then, in case a ring was missed. Every
        commit rings, a run's end among them, so ``ending`` needs nothing more. A doorbell wait
        makes no round trip, so ``quiet`` changes nothing.
        """
        self._due.forget()
        work_only = work_only and ending is None
        conn = self._conn()
        version = conn.execute("PRAGMA data_version").fetchone()[0]
        seen = self._changes
        deadline = time.monotonic() + timeout
        rung = self._doorbell.listen()
        poll = FALLBACK_POLL_SECONDS if rung else POLL_SECONDS
        while (remaining := deadline - time.monotonic()) > 0:
            if rung:
                if self._doorbell.wait(min(poll, remaining), work_only=work_only):
                    return
            else:
                with self._changed:
                    if self._changes == seen:
                        self._changed.wait(min(poll, remaining))
                    if self._changes != seen:
                        return  # this process committed
            # data_version moves when another connection (thread or process) commits.
            if conn.execute("PRAGMA data_version").fetchone()[0] != version:
                return

    def __repr__(self) -> str:
        return f"SQLiteStore({str(self.path)!r})"


@functools.cache
def _due_statements(builds: int, paused: bool, bounded: bool) -> tuple[str, str]:
    """``_due_times``'s two statements (the earliest due run, the earliest ready step), made
    once per shape: a worker asks at every lease, and making their nine-part text cost more
    than running it."""
    marks = ", ".join("?" * builds)
    bound = "AND {column} <= ? " if bounded else ""
    # A held run (``flow pause``) is not due: an idle worker would spin on it.
    workflow = "(SELECT r.workflow FROM runs r WHERE r.run_id = step_tasks.run_id)"
    return (
        earliest(
            unheld(
                "SELECT decide_at FROM runs WHERE priority = @P AND decide_at IS NOT "
                f"NULL {bound.format(column='decide_at')}"
                f"AND build_id IN ({marks}) AND {unlimited_run('runs')} "
                "{held}ORDER BY decide_at LIMIT 1",
                "runs",
                paused,
            )
        ),
        earliest(
            unheld(
                "SELECT available_at FROM step_tasks WHERE priority = @P "
                f"{bound.format(column='available_at')}"
                f"AND build_id IN ({marks}) AND {unlimited_step('step_tasks')} "
                "{held}ORDER BY available_at LIMIT 1",
                "step_tasks",
                paused,
                workflow=workflow,
            )
        ),
    )
