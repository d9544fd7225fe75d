"""The PostgreSQL event store: many workers on many machines sharing one database.

Imported lazily by ``flow_cli.store.open_store`` for ``postgresql://`` and ``postgres://`` URLs, so
psycopg is needed only by those who use it. The tables and the statements on them live in
``postgres_schema``; this module owns connections, transactions, wake-ups and errors.

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
import getpass
import json
import math
import os
import re
import select
import threading
import weakref
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import closing, contextmanager, suppress
from datetime import datetime
from time import monotonic
from typing import Any, TypeAlias, TypeVar
from urllib.parse import urlsplit

import psycopg
from psycopg import pq, sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from flow_cli.errors import ConfigError, EventConflict, FlowError, RunNotFound, StoreError
from flow_cli.model.events import EventEnvelope, RunStarted, StepStarted, event_from_data
from flow_cli.model.status import TERMINAL_STATUSES, RunStatus
from flow_cli.store import postgres_handoffs as handoffs
from flow_cli.store import postgres_hints as hints
from flow_cli.store import postgres_schema as tables
from flow_cli.store.due import DueHints
from flow_cli.store.integrity import structural_problems
from flow_cli.store.locations import redact
from flow_cli.store.postgres_batch import Batch, Connection, Prepared
from flow_cli.store.postgres_ends import ENDED_CHANNEL, EndsListener, ended_payload
from flow_cli.store.protocol import (
    GROUP_ERRORS,
    GROUPINGS,
    NO_GROUP,
    WORKER_RETENTION,
    AppendViaCommit,
    BuildUsage,
    CommitGroup,
    HookListing,
    HookRecord,
    NewRun,
    ReadAfter,
    RunCount,
    RunFilter,
    RunRecord,
    RunState,
    StepLease,
    StoreStats,
    StreamWrite,
    WorkerInfo,
    assemble_states,
    build_usages,
    makes_work,
    wanted_after,
    with_histories,
)

DEFAULT_SCHEMA = "flow"
"""Where Flow's tables live unless ``schema=`` says otherwise."""

NOTIFY_CHANNEL = "flow_work"
"""The ``LISTEN``/``NOTIFY`` channel; the payload names the schema whose work changed."""

_MAX_IDLE = 8
"""Idle connections kept for reuse; more may be open while more threads are busy."""

_NOT_DURABLE = "SET LOCAL synchronous_commit TO OFF"

_NOTIFY = "SELECT pg_notify(%s, %s)"

# What a notification announces to a waiting worker (``PostgresStore._heard``), in order.
_NOTHING, _HANDOFF, _WORK = 0, 1, 2

_NOTIFY_ENDED = "SELECT pg_notify(%s, payload) FROM unnest(%s::text[]) AS payload"

_T = TypeVar("_T")

_Leased: TypeAlias = tuple[
    list[tuple[Any, ...]],
    dict[str, int],
    list[tuple[Any, ...]] | None,
    tuple[datetime | None, datetime | None],
]
"""A step lease's rows, the sequences its histories were read after, the histories' rows,
and when runs and steps are next due (see ``DueHints``)."""


class PostgresStore(AppendViaCommit):
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

    def __init__(
        self,
        url: str | None = None,
        *,
        schema: str | None = None,
        connect_timeout: float = 5.0,
        create: bool = True,
    ) -> None:
        self.stats = StoreStats()
        self.schema = schema or DEFAULT_SCHEMA
        self._conninfo = _conninfo(url or "", connect_timeout)
        self._where = _describe_target(self._conninfo)
        self._secrets = _secrets(url or "", self._conninfo)
        self._lock = threading.Lock()
        self._idle: list[Connection] = []
        self._closed = False
        self._listen_lock = threading.Lock()
        self._listener: Connection | None = None
        self._due = DueHints()
        self._ends = EndsListener(lambda: self._connect(autocommit=True), self.schema)
        """Waits for runs' ends (``wait_for_change(ending=...)``), on a connection of its own."""
        # The statements each pooled connection has prepared (see ``postgres_batch``).
        self._prepared: weakref.WeakKeyDictionary[Connection, Prepared] = (
            weakref.WeakKeyDictionary()
        )
        self._pid = os.getpid()
        # Whether ``lease_runs`` may lease without looking first: its last lease found runs, so
        # more are likely (a busy worker). A lease that finds nothing clears it, so an idle
        # worker's passes stay read-only. A NOTIFY does not set it: it announces ready steps
        # as often as due runs, and a lease that finds nothing costs a write where a look
        # costs a read.
        self._runs_expected = False
        # Whether ``lease_steps`` may lock without looking first: its last lease found steps,
        # or a NOTIFY announced work since. A lock that finds nothing costs a read-only
        # transaction (two round trips) where a look costs one.
        self._steps_expected = False
        # Ready steps the notifications that ended the last wait named (``postgres_hints``).
        self._hints: list[hints.Hint] = []
        # This process's worker as offered for hand-offs (``postgres_handoffs``): its id, its
        # builds and lease length; when the listening connection last offered it (monotonic,
        # ``None``: not offered there); the steps handed to it not yet taken.
        self._offer: tuple[str, list[str], float] | None = None
        self._offerer: str | None = None
        """The worker this process offered (kept after it withdraws: what was handed to it
        before that still reaches it)."""
        self._offered_at: float | None = None
        self._handed: list[handoffs.Handoff] = []
        # Work announced that no lease has looked for yet: a pass that took handed steps only
        # does not look, and the wait after it returns at once for it. A lease clears it.
        self._work_heard = False
        self._forget_gone_at = 0.0
        # Open and migrate now, so that a wrong URL or a too-new schema fails at startup rather
        # than at the first decision.
        try:
            with self._transaction(writes=False) as conn:
                tables.ensure_schema(conn, self.schema, create=create)
        except BaseException:
            self.close()
            raise

    def __repr__(self) -> str:
        return f"PostgresStore({self._where!r}, schema={self.schema!r})"

    # -- runs and histories ------------------------------------------------------------------

    def create_run(self, run: NewRun, now: datetime) -> EventEnvelope | None:
        """Create the run with ``run_started`` at sequence 1; ``None`` if the run id exists."""

        # One round trip: the run's row, its run_started and the NOTIFY as one batch, which an
        # existing run id (a unique violation) rolls back.
        def fill(batch: Batch) -> EventEnvelope | None:
            envelope = tables.insert_run(batch, run, now)
            if run.decide_at is not None:
                batch.execute(_NOTIFY, (NOTIFY_CHANNEL, self.schema))
            return envelope

        done = self._batch(fill)
        return None if done is None else done[0]

    def read_history(self, run_id: str, after_sequence: int = 0) -> list[EventEnvelope]:
        """Events with ``sequence > after_sequence``, in order. Raises ``RunNotFound``."""
        found = self.read_histories({run_id: after_sequence})
        if run_id not in found:
            raise RunNotFound(run_id)
        return found[run_id]

    def read_histories(self, after: Mapping[str, int]) -> dict[str, list[EventEnvelope]]:
        """Each run's events after its sequence in ``after``, in one statement; a run that
        does not exist is left out."""
        if not after:
            return {}
        with self._reading() as conn:
            rows = conn.execute(_READ_HISTORIES, _histories_params(after)).fetchall()
        return self._histories(rows, after)

    def _histories(
        self, rows: Sequence[tuple[Any, ...]], after: Mapping[str, int]
    ) -> dict[str, list[EventEnvelope]]:
        """The rows of ``_READ_HISTORIES`` as histories by run id."""
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

    def commit(
        self, writes: Sequence[StreamWrite], creates: Sequence[NewRun], now: datetime
    ) -> list[list[EventEnvelope]]:
        """Create runs, then apply stream writes, all in one transaction.

        Raises ``EventConflict`` (writing nothing) if a created run exists or a write's expected
        sequence is stale, ``HookTokenInUse`` if a new hook token is taken, and ``RunNotFound``
        if a written run does not exist.
        """
        done = self._commit_guarded([CommitGroup(writes=writes, creates=creates, now=now)])
        if done is not None:
            return done[0]
        try:
            with self._transaction() as conn:
                return self._apply(conn, writes, creates, now, {})
        except EventConflict:
            with self._lock:
                self.stats.conflicts += 1
            raise

    def commit_groups(self, groups: Sequence[CommitGroup]) -> list[FlowError | None]:
        """Each group in its own savepoint of one transaction (see ``EventStore``).

        First tried as one guarded batch (``_commit_guarded``); when a guard fails, redone
        here: every run the groups write is locked first, in run id order, so two workers'
        group commits queue instead of deadlocking, and each group gets a savepoint (a single
        group needs none: its failure rolls back the transaction, which is the same thing).
        """
        if not groups:
            return []
        if self._commit_guarded(groups) is not None:
            return [None] * len(groups)
        if len(groups) == 1:
            (group,) = groups
            try:
                with self._transaction() as conn:
                    locked = tables.lock_runs(conn, (w.run_id for w in group.writes))
                    self._apply(conn, group.writes, group.creates, group.now, locked)
            except GROUP_ERRORS as exc:
                self._count_conflict(exc)
                return [exc]
            return [None]
        results: list[FlowError | None] = []
        with self._transaction() as conn:
            locked = tables.lock_runs(conn, (w.run_id for g in groups for w in g.writes))
            for group in groups:
                # A failed group's savepoint undoes its writes; so must our copy of the rows.
                before = {run_id: run.last_sequence for run_id, run in locked.items()}
                try:
                    with conn.transaction():
                        self._apply(conn, group.writes, group.creates, group.now, locked)
                except GROUP_ERRORS as exc:
                    self._rolled_back(conn)  # to its savepoint
                    for run_id in list(locked):
                        if run_id in before:
                            locked[run_id].last_sequence = before[run_id]
                        else:  # locked by this group (it created the run): gone with it
                            del locked[run_id]
                    self._count_conflict(exc)
                    results.append(exc)
                else:
                    results.append(None)
        return results

    def _count_conflict(self, exc: BaseException) -> None:
        if isinstance(exc, EventConflict):
            with self._lock:
                self.stats.conflicts += 1

    def _commit_guarded(
        self, groups: Sequence[CommitGroup]
    ) -> list[list[list[EventEnvelope]]] | None:
        """Commit every group in one round trip, or nothing (``None``) if any check fails.

        The creates, one guarded ``UPDATE`` per written run (``GUARD_SEQUENCE``, in run id
        order: the row locks two writers queue on), the events, the index rows and the NOTIFY
        go out as one ``Batch``: one query string, one implicit transaction. No answer is read
        before it commits, so every check is one that fails its statement: a stale or missing
        run (the guard), a taken run id or sequence (unique keys), a hook token another hook
        owns (a guarded upsert). Any of these rolls the whole batch back, and the caller redoes
        the commit the checking way (row locks, savepoints), which names the culprit and still
        commits the other groups. Conflicts are rare, so the common commit costs one round trip
        instead of about seven.
        """
        # The sequence each write must find, chained through the batch; a batch whose writes
        # do not chain (a stale write behind a fresh one) takes the checking path at once.
        created = {run.run_id for group in groups for run in group.creates}
        first: dict[str, int] = {}
        after: dict[str, int] = {}
        for group in groups:
            for write in group.writes:
                current = after.get(write.run_id)
                if current is None:
                    first[write.run_id] = write.expected_sequence
                elif current != write.expected_sequence:
                    return None
                after[write.run_id] = write.expected_sequence + len(write.events)
        done = self._batch(lambda batch: self._queue_guarded(batch, groups, first, after, created))
        return None if done is None else done[0]

    def _batch(self, fill: Callable[[Batch], _T]) -> tuple[_T] | None:
        """Send the statements ``fill`` adds as one ``Batch`` (one round trip, one durable
        transaction) and return what ``fill`` returned, or ``None`` when a check failed (see
        ``GUARD_FAILURES``) and the batch was rolled back."""
        with self._free_listener() as listener:
            if listener is not None:
                return self._batch_on_listener(listener, fill)
        try:
            with self._transaction() as conn:
                # Autocommit: psycopg sends no BEGIN of its own; the batch is its own transaction.
                conn.autocommit = True
                try:
                    batch = Batch(conn, self._prepared_on(conn))
                    result = fill(batch)
                    batch.send()
                except tables.GUARD_FAILURES as exc:
                    # Past here not a psycopg.Error: no StoreError is made of it.
                    raise tables.GuardFailed from exc
                finally:
                    conn.autocommit = False
        except tables.GuardFailed:
            return None
        return (result,)

    @contextmanager
    def _free_listener(self) -> Iterator[Connection | None]:
        """The listening connection, if no other thread has it and it can take a statement now
        (``_listening``); else ``None``. A psycopg error on it becomes ``StoreError``, and one
        that broke it lets it go (the next wait listens again)."""
        if self._listener is None or not self._listen_lock.acquire(blocking=False):
            yield None
            return
        try:
            listener = self._listener
            conn = listener if listener is not None and self._listening(listener) else None
            try:
                yield conn
            except psycopg.Error as exc:
                lost = conn is None or conn.broken or conn.closed
                if lost and conn is not None:
                    _close_quietly(conn)
                    self._listener = None
                raise self._store_error(exc, lost=lost) from exc
        finally:
            self._listen_lock.release()

    def _listening(self, conn: Connection) -> bool:
        """Whether the listening connection ``conn`` (its lock held) can take a statement now.

        Nothing to read means it can (``_alive``). Something to read is notifications, kept here
        as a wait keeps them, or the server closing it (a restart, a killed session): still
        something to read after that, and the caller takes a pooled connection instead (the
        next wait finds out which, and listens again if it must).
        """
        if conn.broken or conn.info.transaction_status != pq.TransactionStatus.IDLE:
            return False
        if _alive(conn):
            return True
        try:
            self._drain(conn)
        except psycopg.Error:
            _close_quietly(conn)
            self._listener = None
            return False
        return _alive(conn)

    def _batch_on_listener(self, conn: Connection, fill: Callable[[Batch], _T]) -> tuple[_T] | None:
        """``_batch`` on the listening connection (``_free_listener``), which nobody waits on.

        Its server process woke last when a notification came, while a pooled connection may
        have sat idle since this process last wrote: on a machine that lets idle processes sleep
        deeply, the first statement after a pause costs more there. A worker handed a step
        (``postgres_handoffs``) commits its end so, on the connection that heard of it.
        """
        batch = Batch(conn, self._prepared_on(conn))
        try:
            result = fill(batch)
            batch.send()
        except tables.GUARD_FAILURES:
            return None
        with self._lock:
            self.stats.durable_commits += 1
        self._due.wrote()
        return (result,)

    def _queue_guarded(
        self,
        batch: Batch,
        groups: Sequence[CommitGroup],
        first: dict[str, int],
        after: dict[str, int],
        created: set[str],
    ) -> list[list[list[EventEnvelope]]]:
        """Add a guarded commit's statements (see ``_commit_guarded``) to ``batch``."""
        # A run written once is checked by its own index update; others get a guard first.
        writes = {w.run_id: (w, g.now) for g in groups for w in g.writes}
        once = {
            run_id
            for run_id, n in Counter(w.run_id for g in groups for w in g.writes).items()
            if n == 1
        }

        def guard(run_id: str) -> None:
            if run_id in once:
                write, now = writes[run_id]
                sets, params = tables.index_update(
                    tables.LockedRun(after[run_id], None), write.index, now
                )
                batch.execute(
                    tables.run_update(sets, guarded=True), [*params, run_id, first[run_id]]
                )
            else:
                batch.execute(tables.GUARD_SEQUENCE, (after[run_id], run_id, first[run_id]))

        # Rows of runs that exist are locked (by their guards) before any create, the order in
        # which the checking path takes its locks too.
        for run_id in sorted(run_id for run_id in first if run_id not in created):
            guard(run_id)
        # A run started with its first decision in the same group (``Engine.start``, a
        # continuation, a child) is inserted as the decision leaves it: one row version.
        decided: dict[str, list[EventEnvelope]] = {}
        handing: set[str] = set()  # created runs whose hand-off statement notifies for them
        for group in groups:
            firsts = {w.run_id: w for w in group.writes if w.run_id in once}
            for run in group.creates:
                write = firsts.get(run.run_id)
                if write is not None and write.expected_sequence == 1:
                    decided[run.run_id] = tables.insert_decided_run(batch, run, write, group.now)
                    if self._queue_hand_off(batch, run, write, group.now):
                        handing.add(run.run_id)
                else:
                    tables.insert_run(batch, run, group.now)
        for run_id in sorted(r for r in first if r in created and r not in decided):
            guard(run_id)
        results: list[list[list[EventEnvelope]]] = []
        for group in groups:
            envelopes = []
            for write in group.writes:
                if write.run_id in decided:
                    envelopes.append(decided[write.run_id])
                    continue
                envelopes.append(
                    tables.insert_events(
                        batch,
                        write.run_id,
                        write.expected_sequence,
                        write.events,
                        group.now,
                        write.data,
                    )
                )
                target = tables.LockedRun(write.expected_sequence + len(write.events), None)
                tables.apply_index(
                    batch,
                    target,
                    write.run_id,
                    write.index,
                    group.now,
                    row_done=write.run_id in once,
                )
            results.append(envelopes)
        if any(
            makes_work(
                [w for w in g.writes if w.run_id not in handing],
                [r for r in g.creates if r.run_id not in handing],
            )
            for g in groups
        ):
            batch.execute(_NOTIFY, (NOTIFY_CHANNEL, self.schema))
            named = hints.payload(self.schema, hints.ready_hints(groups, once - handing, after))
            if named is not None:  # a second notification: older listeners wait for the plain one
                batch.execute(_NOTIFY, (NOTIFY_CHANNEL, named))
        ended = self._ended([w for g in groups for w in g.writes])
        if ended:
            batch.execute(_NOTIFY_ENDED, (ENDED_CHANNEL, ended))
        return results

    def _queue_hand_off(self, batch: Batch, run: NewRun, write: StreamWrite, now: datetime) -> bool:
        """Add to a commit that creates ``run`` with its first decisions (``write``) the hand-off
        of its ``hand_off`` step to an idle worker (``postgres_handoffs``), which also notifies;
        False when that step cannot be handed off (nothing was added)."""
        step_id = run.hand_off
        index = write.index
        ready = [
            name
            for name, task in index.steps.items()
            if task is not None and task.owner is None and task.available_at <= now
        ]
        # Only a run whose sole work is that step: its commit announces nothing else then
        # (another ready step, a decision due), since the hand-off's notification replaces
        # the commit's own.
        if (
            step_id is None
            or ready != [step_id]
            or index.decide_at is not None
            or not handoffs.fits(self.schema, run.run_id, step_id)
        ):
            return False
        task = index.steps[step_id]
        assert task is not None
        events = [RunStarted(spec=run.spec, seed=run.seed), *write.events]
        build_id = run.spec.runtime_build_id
        hint = hints.payload(
            self.schema, [hints.Hint(run.run_id, step_id, task.attempt, len(events), build_id)]
        )
        batch.execute(
            handoffs.HAND_OFF,
            handoffs.params(
                self.schema,
                NOTIFY_CHANNEL,
                build_id,
                run.run_id,
                step_id,
                task.attempt,
                events,
                now,
                hint,
            ),
        )
        return True

    def _apply(
        self,
        conn: Connection,
        writes: Sequence[StreamWrite],
        creates: Sequence[NewRun],
        now: datetime,
        locked: dict[str, tables.LockedRun],
    ) -> list[list[EventEnvelope]]:
        """Apply one group; ``locked`` holds the rows this transaction has locked already (it
        gains those of the runs this group creates or that were not locked yet)."""
        for run in creates:
            if tables.insert_run(conn, run, now) is None:
                raise EventConflict(run.run_id, 0, tables.last_sequence(conn, run.run_id))
        missing = [write.run_id for write in writes if write.run_id not in locked]
        if missing:
            locked.update(tables.lock_runs(conn, missing))
        expected: dict[str, int] = {}
        for write in writes:
            target = locked.get(write.run_id)
            if target is None:
                raise RunNotFound(write.run_id)
            # A second write to the same run in this commit continues from the first.
            current = expected.get(write.run_id, target.last_sequence)
            if current != write.expected_sequence:
                raise EventConflict(write.run_id, write.expected_sequence, current)
            expected[write.run_id] = current + len(write.events)
        results = []
        # Everything past the sequence check is sent as one pipeline: no waiting for each
        # statement's answer (errors still surface before the commit).
        first = writes[0] if writes else None
        with (
            tables.unique_violations_as_conflict(
                first.run_id if first else "?", first.expected_sequence if first else 0
            ),
            conn.pipeline(),
        ):
            for write in writes:
                target = locked[write.run_id]
                results.append(
                    tables.insert_events(
                        conn, write.run_id, target.last_sequence, write.events, now, write.data
                    )
                )
                target.last_sequence += len(write.events)
                tables.apply_index(conn, target, write.run_id, write.index, now)
            if makes_work(writes, creates):
                self._notify(conn)
            ended = self._ended(writes)
            if ended:
                conn.execute(_NOTIFY_ENDED, (ENDED_CHANNEL, ended))
        return results

    def get_run(self, run_id: str) -> RunRecord | None:
        """The run's index row, or ``None``."""
        with self._reading() as conn:
            row = conn.execute(
                f"SELECT {tables.RUN_COLUMNS} FROM runs WHERE run_id = %s", (run_id,)
            ).fetchone()
        return None if row is None else tables.run_record(row)

    def list_runs(
        self,
        *,
        status: RunStatus | None = None,
        workflow: str | None = None,
        limit: int | None = None,
    ) -> list[RunRecord]:
        """Runs newest first (creation order breaks ties), optionally filtered."""
        with self._reading() as conn:
            rows = conn.execute(
                f"SELECT {tables.RUN_COLUMNS} FROM runs "
                "WHERE (%(status)s::text IS NULL OR status = %(status)s) "
                "AND (%(workflow)s::text IS NULL OR workflow = %(workflow)s) "
                "ORDER BY created_at DESC, created_order DESC LIMIT %(limit)s",
                {
                    "status": None if status is None else status.value,
                    "workflow": workflow,
                    "limit": limit,
                },
            ).fetchall()
        return [tables.run_record(row) for row in rows]

    def _page(
        self, conn: Connection, where: RunFilter, columns: str
    ) -> tuple[sql.Composed, dict[str, Any]]:
        """The runs matching ``where`` after its cursor, newest first, as a ``SELECT``."""
        condition, params = tables.run_filter(where)
        cursor = sql.SQL("")
        if where.after is not None:
            found = conn.execute(
                "SELECT created_at, created_order FROM runs WHERE run_id = %s", (where.after,)
            ).fetchone()
            if found is None:
                raise RunNotFound(where.after)
            cursor = sql.SQL(" AND (created_at, created_order) < (%(c_at)s, %(c_order)s)")
            params.update(c_at=found[0], c_order=found[1])
        params["limit"] = where.limit
        query = sql.SQL("SELECT {} FROM runs WHERE {}{} ").format(
            sql.SQL(columns), condition, cursor
        ) + sql.SQL("ORDER BY created_at DESC, created_order DESC LIMIT %(limit)s")
        return query, params

    def find_runs(self, where: RunFilter) -> list[RunRecord]:
        """Runs matching ``where``, newest first (creation order breaks ties)."""
        with self._transaction() as conn:
            query, params = self._page(conn, where, tables.RUN_COLUMNS)
            rows = conn.execute(query, params).fetchall()
        return [tables.run_record(row) for row in rows]

    def run_states(self, where: RunFilter) -> list[RunState]:
        """Runs matching ``where`` with their lease and step tasks, newest first: one statement
        (one consistent snapshot), the runs served by the filter's index, each run's tasks by
        the step task primary key."""
        with self._transaction(writes=False) as conn:
            page, params = self._page(
                conn,
                where,
                "created_order, run_id, workflow, status, build_id, created_at, updated_at, "
                "decide_at, lease_owner, failing, waiting_on, failing_since",
            )
            rows = conn.execute(
                sql.SQL(
                    "SELECT r.run_id, r.workflow, r.status, r.build_id, r.created_at, "
                    "r.updated_at, r.decide_at, r.lease_owner, r.failing, r.waiting_on, "
                    "r.failing_since, t.step_id, t.attempt, t.available_at, t.lease_owner "
                    "FROM ({}) r "
                    "LEFT JOIN step_tasks t ON t.run_id = r.run_id "
                    "ORDER BY r.created_at DESC, r.created_order DESC, t.step_id"
                ).format(page),
                params,
            ).fetchall()
        return assemble_states(rows, tables.utc)

    def build_usage(self) -> list[BuildUsage]:
        """Every build id of some run, with its open runs. The build ids are read by skipping
        through the build index (one probe per build, not one row per run); the open runs
        through the status index."""
        open_statuses = [s.value for s in RunStatus if not s.terminal]
        with self._transaction(writes=False) as conn:
            builds = [
                row[0]
                for row in conn.execute(
                    "WITH RECURSIVE b(id) AS (SELECT min(build_id) FROM runs UNION ALL "
                    "SELECT (SELECT min(build_id) FROM runs WHERE build_id > b.id) "
                    "FROM b WHERE b.id IS NOT NULL) SELECT id FROM b WHERE id IS NOT NULL"
                )
            ]
            grouped = conn.execute(
                "SELECT build_id, status, patches, count(*) FROM runs "
                "WHERE status = ANY(%s) GROUP BY build_id, status, patches",
                (open_statuses,),
            ).fetchall()
            oldest = {
                build_id: (run_id, tables.utc(created_at))
                for build_id, run_id, created_at in conn.execute(
                    "SELECT DISTINCT ON (build_id) build_id, run_id, created_at FROM runs "
                    "WHERE status = ANY(%s) ORDER BY build_id, created_at, created_order",
                    (open_statuses,),
                )
            }
        return build_usages(builds, grouped, oldest)

    def count_runs(self, where: RunFilter, by: str | None = None) -> RunCount:
        """How many runs match ``where``, grouped by ``by`` when given."""
        condition, params = tables.run_filter(where)
        if by is not None and by not in GROUPINGS:
            raise ValueError(f"cannot group runs by {by!r}")
        with self._transaction() as conn:
            if by is None:
                row = conn.execute(
                    sql.SQL("SELECT count(*) FROM runs WHERE {}").format(condition), params
                ).fetchone()
                return RunCount(total=int(row[0]) if row else 0, groups={})
            rows = conn.execute(
                sql.SQL(
                    "SELECT coalesce({col}, {none}), count(*) FROM runs WHERE {cond} "
                    "GROUP BY 1 ORDER BY 1"
                ).format(col=sql.Identifier(by), none=sql.Literal(NO_GROUP), cond=condition),
                params,
            ).fetchall()
        groups = {str(key): int(n) for key, n in rows}
        return RunCount(total=sum(groups.values()), groups=groups)

    def list_hooks(self, run_id: str | None = None, open_only: bool = False) -> list[HookListing]:
        """Hooks of one run or all runs, oldest first."""
        with self._transaction() as conn:
            rows = conn.execute(
                "SELECT run_id, hook_id, token, resolved, created_at, metadata FROM hooks "
                "WHERE (%(run)s::text IS NULL OR run_id = %(run)s) "
                "AND (NOT %(open)s OR (NOT resolved AND EXISTS (SELECT 1 FROM runs r "
                "WHERE r.run_id = hooks.run_id AND NOT r.status = ANY(%(ended)s)))) "
                "ORDER BY created_at, created_order",
                {
                    "run": run_id,
                    "open": open_only,
                    "ended": sorted(s.value for s in TERMINAL_STATUSES),
                },
            ).fetchall()
        return [
            HookListing(
                run_id=r[0],
                hook_id=r[1],
                token=r[2],
                resolved=bool(r[3]),
                created_at=None if r[4] is None else tables.utc(r[4]),
                metadata=r[5],
            )
            for r in rows
        ]

    def find_hook(self, token: str) -> HookRecord | None:
        """The hook owning ``token``, or ``None``."""
        with self._reading() as conn:
            row = conn.execute(
                "SELECT token, run_id, hook_id, resolved FROM hooks WHERE token = %s", (token,)
            ).fetchone()
        if row is None:
            return None
        return HookRecord(token=row[0], run_id=row[1], hook_id=row[2], resolved=row[3])

    # -- due work ----------------------------------------------------------------------------

    def lease_runs(
        self,
        worker: str,
        build_ids: Sequence[str],
        now: datetime,
        lease_until: datetime,
        limit: int,
    ) -> list[str]:
        """Lease up to ``limit`` due runs of these builds, earliest first.

        Leasing moves ``decide_at`` to ``lease_until``. Rows another transaction holds are
        skipped, not waited for, so concurrent workers never lease the same run.
        """
        if not build_ids or limit <= 0:
            return []
        if self._due.no_run_due(build_ids, now):
            self._runs_expected = False
            return []
        params = _due_params(worker, build_ids, now, lease_until, limit)
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
        rows.sort(key=lambda row: (row[1], row[2]))  # RETURNING does not keep the CTE's order
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

    def lease_steps(
        self,
        worker: str,
        build_ids: Sequence[str],
        now: datetime,
        lease_until: datetime,
        limit: int,
        read_after: ReadAfter | None = None,
    ) -> list[StepLease]:
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
        if not build_ids or limit <= 0:
            return []
        self._work_heard = False
        self._due.forget()
        writes = self._due.writes()
        params = _due_params(worker, build_ids, now, lease_until, limit)
        if not self._steps_expected:
            with self._reading() as conn:
                # Look before locking: an idle worker must not open a transaction that locks
                # every pass. Skipped while work is expected (see ``_steps_expected``).
                if conn.execute(tables.ANY_READY_STEP, params).fetchone() is None:
                    return []
        hinted = hints.usable(self._hints, build_ids, limit)
        self._hints = []
        with self._transaction(writes=False) as conn:
            # Two round trips, each one query string of several statements (no per-statement
            # exchange, as in a pipeline): BEGIN, the locks and the lease; then the
            # step_started events, the run rows, the histories and COMMIT. Waiting for a run
            # another transaction holds (not skipping it) is short, and keeps a ready step
            # from being reported as absent; the lease re-checks readiness after the wait.
            # Steps a notification named are tried first, in one round trip.
            conn.autocommit = True  # the statements open and end the transaction themselves
            try:
                for attempt in (1, 2):
                    try:
                        leased = None
                        if hinted:
                            leased = self._lease_hinted(
                                conn,
                                hinted,
                                worker,
                                build_ids,
                                params,
                                now,
                                lease_until,
                                read_after,
                            )
                        if leased is None:
                            leased = self._lease_ready(
                                conn, worker, params, now, lease_until, read_after
                            )
                        rows, after, history_rows, due = leased
                        break
                    except psycopg.errors.InvalidSqlStatementName:
                        # A statement of the second round trip was dropped behind our back
                        # (see ``Prepared``): nothing was written; roll back, lease again.
                        if attempt == 2:
                            raise
                        self._rolled_back(conn)
                        conn.execute("ROLLBACK")
            except BaseException:
                if conn.info.transaction_status != pq.TransactionStatus.IDLE:
                    self._rolled_back(conn)
                    with suppress(psycopg.Error):
                        conn.execute("ROLLBACK")
                raise
            finally:
                if conn.info.transaction_status == pq.TransactionStatus.IDLE:
                    conn.autocommit = False
                else:  # could not be rolled back: never hand it out again in autocommit mode
                    conn.close()
        self._steps_expected = bool(rows)
        self._due.offer(build_ids, *due, writes=writes)
        if rows:
            with self._lock:
                self.stats.durable_commits += 1
        self._count_rows(len(rows) + sum(1 for t in due if t is not None))
        leases = [
            StepLease(run_id=run_id, step_id=step_id, attempt=attempt, lease_until=lease_until)
            for run_id, step_id, attempt, _ in rows
        ]
        if history_rows is None:
            return leases
        return with_histories(leases, self._histories(history_rows, after))

    def _lease_ready(
        self,
        conn: Connection,
        worker: str,
        params: dict[str, Any],
        now: datetime,
        lease_until: datetime,
        read_after: ReadAfter | None,
    ) -> _Leased:
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
        rows = [row for row in leasing or () if row[0] in locked]
        rows.sort(key=lambda row: (row[3], row[0], row[1]))
        for run_id, step_id, attempt, _ in rows:
            target = locked[run_id]
            started = StepStarted(
                step_id=step_id, attempt=attempt, worker=worker, lease_until=lease_until
            )
            tables.insert_events(batch, run_id, target.last_sequence, [started], now)
            target.last_sequence += 1
        for run_id in {row[0] for row in rows}:
            batch.execute(
                "UPDATE runs SET last_sequence = %s, updated_at = %s, status = CASE "
                "WHEN status = 'Cancelling' THEN status ELSE 'Running' END "
                "WHERE run_id = %s",
                (locked[run_id].last_sequence, now, run_id),
            )
        after = _queue_lease_end(batch, params, rows, read_after)
        return _leased(batch.results(), rows, after)

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
    ) -> _Leased | None:
        """``lease_steps``'s transaction for the hinted steps, in one round trip; ``None``
        (nothing written) when any of them was taken or its run moved meanwhile."""
        batch = Batch(conn, self._prepared_on(conn))
        batch.execute("BEGIN")
        hints.queue_lease(batch, hinted, worker, build_ids, now, lease_until)
        rows = hints.leased_rows(hinted)
        after = _queue_lease_end(batch, params, rows, read_after)
        try:
            done = batch.results()
        except tables.GUARD_FAILURES:
            if conn.info.transaction_status != pq.TransactionStatus.IDLE:
                self._rolled_back(conn)
                conn.execute("ROLLBACK")
            return None
        return _leased(done, rows, after)

    def renew_step(self, run_id: str, step_id: str, worker: str, lease_until: datetime) -> bool:
        """Extend the step's lease if ``worker`` still holds it."""
        with self._transaction(durable=False, pipelined=True) as conn:
            cursor = conn.execute(
                "UPDATE step_tasks SET available_at = %s "
                "WHERE run_id = %s AND step_id = %s AND lease_owner = %s RETURNING run_id",
                (lease_until, run_id, step_id, worker),
            )
        return cursor.fetchone() is not None

    def next_due(self, build_ids: Sequence[str]) -> datetime | None:
        """The earliest ``decide_at`` or step ``available_at`` of these builds."""
        if not build_ids:
            return None
        hint = self._due.fresh(build_ids)
        if hint is not None:
            return hint.earliest
        with self._reading() as conn:
            row = conn.execute(
                tables.NEXT_DUE,
                {"builds": list(build_ids)},
            ).fetchone()
        found = [tables.utc(value) for value in row or () if value is not None]
        self._count_rows(len(found))
        return min(found, default=None)

    # -- waiting and closing -----------------------------------------------------------------

    # -- workers registry --------------------------------------------------------------------

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

    def list_workers(self) -> list[WorkerInfo]:
        """Every registered worker, most recently started first."""
        with self._transaction() as conn:
            rows = conn.execute(
                "SELECT worker_id, host, pid, builds, started_at, heartbeat_at, heartbeat_seconds, "
                "stopped_at FROM workers ORDER BY started_at DESC, worker_id DESC"
            ).fetchall()
        return [
            WorkerInfo(
                worker_id=row[0],
                host=row[1],
                pid=int(row[2]),
                builds=tuple(json.loads(row[3])),
                started_at=tables.utc(row[4]),
                heartbeat_at=tables.utc(row[5]),
                heartbeat_seconds=float(row[6]),
                stopped_at=None if row[7] is None else tables.utc(row[7]),
            )
            for row in rows
        ]

    def wait_for_change(
        self, timeout: float, *, ending: str | None = None, work_only: bool = False
    ) -> None:
        """Block up to ``timeout`` seconds; return as soon as a commit schedules work here or,
        with ``ending``, as soon as that run ends (and not for work). Only commits that make
        work notify, so every wait without ``ending`` is ``work_only``.

        Listening starts with the first call, on a connection of its own: a commit before that
        first call is not seen, so look for work before waiting (as a worker loop does). Ends
        are heard on another connection, shared by every thread waiting for one, and the first
        wait for an end returns at once, once listening, for the same reason.
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
            self._offer_on_listener(self._listener)
            heard: list[hints.Hint] = []
            woke = _NOTHING
            while not woke:
                remaining = max(deadline - monotonic(), 0.0)
                # Each packet read whole (``stop_after``): a generator closed in the middle of
                # one drops the notifications after the first, a commit's hints among them.
                with closing(self._listener.notifies(timeout=remaining, stop_after=1)) as notes:
                    for note in notes:
                        woke = max(woke, self._heard(note.payload, heard))
                if not woke and monotonic() >= deadline:
                    return
            # Commits often come in bursts: swallow what is already queued, so the next wait
            # does not return at once for a change the caller is about to look at anyway.
            with closing(self._listener.notifies(timeout=0)) as queued:
                for note in queued:
                    woke = max(woke, self._heard(note.payload, heard))
            if woke == _WORK:  # a hand-off alone leaves nothing for a lease to find
                self._steps_expected = True
                # With steps handed too, the pass takes those and does not look (see
                # ``_work_heard``).
                self._work_heard = bool(self._handed)
            # A worker waits only once its last pass found less than it had room for: it has
            # no backlog of older ready steps that the hinted ones would overtake.
            self._hints = heard
        except psycopg.Error as exc:
            if self._listener is not None:
                _close_quietly(self._listener)
                self._listener = None
            raise self._store_error(exc, lost=True) from exc
        finally:
            if self._closed and self._listener is not None:  # close() ran while we waited
                _close_quietly(self._listener)
                self._listener = None
            self._listen_lock.release()

    def _heard(self, text: str, into: list[hints.Hint]) -> int:
        """What a notification's payload announces in this schema: ``_WORK`` (its hints, if
        it has any, are added to ``into``), ``_HANDOFF`` (a step handed to this process's
        worker, kept for ``handed_steps``) or ``_NOTHING`` (a step handed to another worker
        among them)."""
        if text == self.schema:
            return _WORK
        handoff = handoffs.parse(self.schema, text)
        if handoff is not None:
            if handoff.worker_id != self._offerer:
                return _NOTHING
            with self._lock:  # a step thread's commit on the listener reads them too
                self._handed.append(handoff)
            self._offered_at = None  # the claim took the offer: make it again before sleeping
            return _HANDOFF
        found = hints.parse(self.schema, text)
        if found is None:
            return _NOTHING
        into.extend(found)
        return _WORK

    # -- hand-offs (postgres_handoffs) ---------------------------------------------------

    def offer_worker(self, worker_id: str, build_ids: Sequence[str], lease_seconds: float) -> None:
        """Offer this process's worker for hand-offs; the offer is made from the listening
        connection, by the next ``wait_for_change`` (a start checks that connection is open
        before it hands a step over)."""
        offer = (worker_id, list(build_ids), float(lease_seconds))
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

    def _queue_offer(self, batch: Batch, offer: tuple[str, list[str], float]) -> None:
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
        if unread:
            after = wanted_after((lease.run_id for lease in unread), read_after)
            leases += with_histories(unread, self.read_histories(after))
        return leases

    def _drain(self, conn: Connection) -> None:
        """Read the notifications queued on the listening connection ``conn`` (its lock held)
        without waiting."""
        heard: list[hints.Hint] = []
        woke = _NOTHING
        with closing(conn.notifies(timeout=0)) as queued:
            for note in queued:
                woke = max(woke, self._heard(note.payload, heard))
        if woke == _WORK:
            self._steps_expected = True
            self._work_heard = True
            self._hints.extend(heard)

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

    def check_integrity(self) -> list[str]:
        """Flow's structural checks (see ``integrity``); PostgreSQL checks its own pages."""
        try:
            with self._reading() as conn:
                return structural_problems(lambda sql: conn.execute(sql).fetchall())
        except psycopg.Error as exc:
            raise self._store_error(exc, lost=False) from exc

    def close(self) -> None:
        """Close every connection; further calls raise ``StoreError``.

        Does not wait for a thread blocked in ``wait_for_change``: that thread closes the
        listening connection itself when its wait ends.
        """
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for conn in idle:
            _close_quietly(conn)
        if self._listen_lock.acquire(blocking=False):
            try:
                if self._listener is not None:
                    _close_quietly(self._listener)
                    self._listener = None
            finally:
                self._listen_lock.release()
        self._ends.close()

    def drop_schema(self) -> None:
        """Drop this store's schema and everything in it (for tests); works after ``close()``."""
        try:
            with psycopg.connect(self._conninfo, autocommit=True) as conn:
                conn.execute(
                    sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(self.schema))
                )
        except psycopg.Error as exc:
            raise self._store_error(exc, lost=True) from exc

    # -- connections, transactions, errors ---------------------------------------------------

    @contextmanager
    def _reading(self) -> Iterator[Connection]:
        """A pooled connection in autocommit mode for one read: no BEGIN/COMMIT round trips."""
        with self._transaction(writes=False) as conn:
            conn.autocommit = True
            try:
                yield conn
            finally:
                conn.autocommit = False

    @contextmanager
    def _transaction(
        self, *, durable: bool = True, writes: bool = True, pipelined: bool = False
    ) -> Iterator[Connection]:
        """A pooled connection inside a transaction: committed on success, else rolled back.

        ``durable=False`` is for index-only writes (leases, parking): their commit does not
        wait for the WAL flush. Losing one in a crash is harmless — a lease that was never
        recorded lets another worker decide the run, which ``append_if_sequence`` makes safe —
        and every later durable commit flushes it anyway. Events are always durable.

        ``pipelined=True`` queues BEGIN, the caller's statements and COMMIT on one pipeline:
        one round trip in all, if the caller reads no answer before the block ends (a cursor
        keeps its rows for reading after it).

        Any psycopg error becomes ``StoreError``; a connection that broke is dropped together
        with the idle ones (they most likely died with it), so the next call reconnects.
        """
        conn = self._checkout()
        try:
            if pipelined:
                with conn.pipeline():
                    if not durable:
                        conn.execute(_NOT_DURABLE)
                    yield conn
                    conn.commit()
            else:
                if not durable:
                    conn.execute(_NOT_DURABLE)
                yield conn
                conn.commit()
            if writes:
                with self._lock:
                    if durable:
                        self.stats.durable_commits += 1
                    else:
                        self.stats.index_commits += 1
                self._due.wrote()
        except psycopg.Error as exc:
            lost = conn.broken or conn.closed
            if lost:
                self._drop_all(conn)
            else:
                self._rollback_and_checkin(conn)
            raise self._store_error(exc, lost=lost) from exc
        except BaseException:
            self._rollback_and_checkin(conn)
            raise
        self._checkin(conn)

    def _rolled_back(self, conn: Connection) -> None:
        """psycopg may deallocate every prepared statement on a rollback (see ``Prepared``)."""
        with self._lock:
            prepared = self._prepared.get(conn)
        if prepared is not None:
            prepared.known = False

    def _prepared_on(self, conn: Connection) -> Prepared:
        with self._lock:
            prepared = self._prepared.get(conn)
            if prepared is None:
                prepared = self._prepared[conn] = Prepared()
            return prepared

    def _checkout(self) -> Connection:
        self._forget_inherited()
        while True:
            with self._lock:
                if self._closed:
                    raise StoreError(f"The PostgreSQL store for {self._where} is closed.")
                conn = self._idle.pop() if self._idle else None
            if conn is None:
                return self._connect()
            if _alive(conn):
                return conn
            self._drop_all(conn)

    def _forget_inherited(self) -> None:
        """In a forked child, let go of the parent's connections without closing them.

        Their sockets are shared with the parent: using or closing them here would break the
        parent's sessions. The child opens its own on first use.
        """
        if os.getpid() == self._pid:
            return
        with self._lock:
            self._idle, self._pid = [], os.getpid()
        self._listener = None
        self._ends.forget()

    def _connect(self, *, autocommit: bool = False) -> Connection:
        try:
            conn = psycopg.connect(self._conninfo, autocommit=autocommit)
        except psycopg.Error as exc:
            raise self._store_error(exc, lost=True) from exc
        try:
            # Times read back in UTC, and Flow's tables found in the store's schema.
            conn.execute("SET TIME ZONE 'UTC'")
            conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(self.schema)))
            conn.commit()
        except psycopg.Error as exc:
            _close_quietly(conn)
            raise self._store_error(exc, lost=True) from exc
        return conn

    def _checkin(self, conn: Connection) -> None:
        if conn.broken or conn.closed or conn.info.transaction_status != pq.TransactionStatus.IDLE:
            _close_quietly(conn)
            return
        with self._lock:
            if not self._closed and len(self._idle) < _MAX_IDLE:
                self._idle.append(conn)
                return
        _close_quietly(conn)

    def _rollback_and_checkin(self, conn: Connection) -> None:
        if conn.info.transaction_status != pq.TransactionStatus.IDLE:  # else nothing is sent
            self._rolled_back(conn)
        try:
            conn.rollback()
        except psycopg.Error:
            self._drop_all(conn)
        else:
            self._checkin(conn)

    def _drop_all(self, conn: Connection) -> None:
        _close_quietly(conn)
        with self._lock:
            idle, self._idle = self._idle, []
        for other in idle:
            _close_quietly(other)

    def _ended(self, writes: Iterable[StreamWrite]) -> list[str]:
        """The ``ENDED_CHANNEL`` payloads of the runs these writes end."""
        return [ended_payload(self.schema, w.run_id) for w in writes if w.index.status.terminal]

    def _notify(self, conn: Connection) -> None:
        # Inside the transaction: PostgreSQL delivers it only if the commit succeeds.
        conn.execute(_NOTIFY, (NOTIFY_CHANNEL, self.schema))

    def _count_rows(self, rows: int) -> None:
        with self._lock:
            self.stats.scheduler_rows_read += rows

    def _store_error(self, exc: psycopg.Error, *, lost: bool) -> StoreError:
        """One sentence naming the server (never the password) and what to do."""
        lines = [" ".join(line.split()) for line in str(exc).splitlines() if line.strip()]
        reason = (lines[0] if lines else type(exc).__name__).removeprefix("connection failed: ")
        for secret in self._secrets:
            reason = reason.replace(secret, "***")
        if lost and _REFUSED.search(reason):
            return StoreError(
                f"PostgreSQL at {self._where} refused the connection ({reason}); check the "
                "user, password and database name."
            )
        if lost:
            return StoreError(
                f"PostgreSQL at {self._where} is unreachable ({reason}); check that the server "
                "is running (the next call reconnects)."
            )
        return StoreError(f"PostgreSQL at {self._where} failed: {reason}.")


_REFUSED = re.compile(
    r"FATAL: .*(does not exist|authentication failed|pg_hba\.conf|permission denied)"
)
"""The server answered but will not let this user in: retrying will not help."""


_READ_HISTORIES = (
    "SELECT e.run_id, e.sequence, e.event_key, e.recorded_at, e.data, "
    "pg_column_size(e.data) FROM unnest(%s::text[], %s::bigint[]) AS a(run_id, seq) "
    "JOIN events e ON e.run_id = a.run_id AND e.sequence >= a.seq "
    "ORDER BY e.run_id, e.sequence"
)
"""Events of some runs from a sequence on (parameters: run ids, sequences). The row at each
run's own sequence (present for any run that far along) tells an up-to-date run from a missing
one without a second query; ``_histories`` drops it."""


def _queue_lease_end(
    batch: Batch,
    params: dict[str, Any],
    rows: Sequence[tuple[Any, ...]],
    read_after: ReadAfter | None,
) -> dict[str, int]:
    """End a step lease's batch: when work is next due (read with the lease, so the worker's
    pass need not ask again), the leased runs' histories, ``COMMIT``. Returns the sequences
    the histories are read after."""
    batch.execute(tables.NEXT_DUE, params)
    after = wanted_after((row[0] for row in rows), read_after) if read_after is not None else {}
    if after:
        # Read before COMMIT: the histories cost no round trip of their own, and include the
        # step_started events just written.
        batch.execute(_READ_HISTORIES, _histories_params(after))
    batch.execute("COMMIT")
    return after


def _leased(
    done: Sequence[list[tuple[Any, ...]] | None],
    rows: list[tuple[Any, ...]],
    after: dict[str, int],
) -> _Leased:
    """A lease's result from the answers of a batch that ``_queue_lease_end`` ended."""
    due_rows = done[-3] if after else done[-2]
    runs, steps = due_rows[0] if due_rows else (None, None)
    due = (
        None if runs is None else tables.utc(runs),
        None if steps is None else tables.utc(steps),
    )
    return rows, after, (done[-2] if after else None), due


def _histories_params(after: Mapping[str, int]) -> tuple[list[str], list[int]]:
    run_ids = list(after)
    return run_ids, [max(after[r], 1) for r in run_ids]


def _due_params(
    worker: str, build_ids: Sequence[str], now: datetime, lease_until: datetime, limit: int
) -> dict[str, Any]:
    return {
        "worker": worker,
        "builds": list(build_ids),
        "now": now,
        "until": lease_until,
        "limit": limit,
    }


def _alive(conn: Connection) -> bool:
    """Whether an idle pooled connection still looks usable, without a round trip.

    An idle connection has nothing to read: if its socket is readable, the server closed it
    or sent a fatal error (restart, ``pg_terminate_backend``), so a fresh one is better. One
    ``select`` call, no statement sent.
    """
    if conn.broken or conn.closed:
        return False
    try:
        readable, _, _ = select.select([conn.fileno()], [], [], 0)
    except (OSError, ValueError, psycopg.Error):
        return False
    return not readable


def _close_quietly(conn: Connection) -> None:
    # Closing a dead connection may complain; there is nothing left to do about it.
    with suppress(Exception):
        conn.close()


# -- connection strings ------------------------------------------------------------------------


def _conninfo(url: str, connect_timeout: float) -> str:
    """The libpq connection string: the URL plus Flow's defaults for what it leaves out.

    Raises ``ConfigError`` naming the offending option (never the password) when libpq would
    refuse the string, so a typo is not reported as an unreachable server.
    """
    try:
        params = conninfo_to_dict(url)
    except psycopg.Error as exc:
        raise ConfigError(_conninfo_problem(url, str(exc))) from None
    _check_params(params)
    extra: dict[str, Any] = {}
    if "connect_timeout" not in params and "PGCONNECT_TIMEOUT" not in os.environ:
        extra["connect_timeout"] = max(math.ceil(connect_timeout), 1)
    if "application_name" not in params and "PGAPPNAME" not in os.environ:
        extra["application_name"] = "flow"
    return make_conninfo(url, **extra)


SSL_MODES = ("disable", "allow", "prefer", "require", "verify-ca", "verify-full")
"""The ``sslmode`` values libpq accepts."""


def _conninfo_problem(url: str, libpq_message: str) -> str:
    """One sentence about a connection string libpq cannot parse (passwords hidden)."""
    shown = redact_url(url)
    reason = " ".join(libpq_message.replace(url, shown).split())
    reason = redact_url(reason)
    option = re.search(r'invalid (?:URI query parameter|connection option):? "([^"]*)"', reason)
    if option is not None:
        return (
            f"PostgreSQL connection option {option.group(1)!r} in {shown!r} is unknown to libpq; "
            "remove or correct it (Flow's own option is schema=NAME)."
        )
    return (
        f"{shown!r} is not a PostgreSQL connection string ({reason}); write it as "
        "postgresql://user@host:5432/database or host=... dbname=..."
    )


def _check_params(params: dict[str, Any]) -> None:
    """Values libpq would only reject when connecting, reported as what they are."""
    sslmode = params.get("sslmode")
    if sslmode is not None and str(sslmode) not in SSL_MODES:
        raise ConfigError(
            f"PostgreSQL option sslmode={sslmode!r} is not one of {', '.join(SSL_MODES)}."
        )
    for name in ("connect_timeout", "port"):
        value = params.get(name)
        if value is None:
            continue
        parts = str(value).split(",") if name == "port" else [str(value)]
        if not all(part.strip().isdigit() for part in parts if part.strip()):
            what = "a whole number of seconds" if name == "connect_timeout" else "a port number"
            raise ConfigError(f"PostgreSQL option {name}={value!r} must be {what}.")


def _describe_target(conninfo: str) -> str:
    """``host:port/database`` as libpq will resolve it, for messages."""
    params = conninfo_to_dict(conninfo)

    def param(name: str, env: str, default: str = "") -> str:
        return str(params.get(name) or os.environ.get(env) or default)

    host = param("host", "PGHOST") or param("hostaddr", "PGHOSTADDR", "localhost")
    user = param("user", "PGUSER") or _os_user()
    return f"{host}:{param('port', 'PGPORT', '5432')}/{param('dbname', 'PGDATABASE', user)}"


def _os_user() -> str:
    try:
        return getpass.getuser()
    except Exception:  # no user name anywhere: libpq will complain about it, not us
        return "postgres"


def _secrets(url: str, conninfo: str) -> list[str]:
    """Passwords that must never appear in a message, longest first."""
    found = {
        str(conninfo_to_dict(conninfo).get("password") or ""),
        os.environ.get("PGPASSWORD", ""),
        (urlsplit(url).password or "") if "://" in url else "",
    }
    return sorted((secret for secret in found if secret), key=len, reverse=True)


def redact_url(url: str) -> str:
    """The connection string with any password replaced: ``postgresql://user:***@host/db``."""
    return redact(url)
