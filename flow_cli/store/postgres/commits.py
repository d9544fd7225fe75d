"""The PostgreSQL store's commits: one guarded round trip, or the checking way when a guard
fails; hand-offs of a new run's first step ride in the start's commit."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime
from time import monotonic
from typing import TypeVar

import psycopg

from flow_cli.errors import EventConflict, FlowError, LimitFull, RunNotFound, StoreRefused
from flow_cli.model.events import EventEnvelope, RunStarted
from flow_cli.store.index import row_changes
from flow_cli.store.limits_sql import LIMITS_LOOK_SECONDS
from flow_cli.store.pauses_sql import ANY_PAUSED
from flow_cli.store.postgres import handoffs, hints, limited, tables
from flow_cli.store.postgres.batch import Batch, Connection
from flow_cli.store.postgres.connection import NOTIFY, NOTIFY_CHANNEL, NOTIFY_ENDED
from flow_cli.store.postgres.ends import ENDED_CHANNEL, ended_payload
from flow_cli.store.postgres.reads import PostgresReads
from flow_cli.store.protocol import (
    GROUP_ERRORS,
    CommitGroup,
    NewRun,
    StreamWrite,
    makes_work,
)

_T = TypeVar("_T")


class PostgresCommits(PostgresReads):
    """How the PostgreSQL store commits (see ``PostgresStore``)."""

    # The pause look a commit makes when asked (``SQLPauses.want_pause_probe``).
    _pause_probe: tuple[float, bool] | None
    _pause_probe_wanted: bool

    def create_run(self, run: NewRun, now: datetime) -> EventEnvelope | None:
        """Create the run with ``run_started`` at sequence 1; ``None`` if the run id exists."""

        # One round trip: the run's row, its run_started and the NOTIFY as one batch, which an
        # existing run id (a unique violation) rolls back.
        def fill(batch: Batch) -> EventEnvelope | None:
            envelope = tables.insert_run(batch, run, now)
            if run.decide_at is not None:
                batch.execute(NOTIFY, (NOTIFY_CHANNEL, self.schema))
            return envelope

        done = self._batch(fill)
        return None if done is None else done[0]

    def commit(
        self, writes: Sequence[StreamWrite], creates: Sequence[NewRun], now: datetime
    ) -> list[list[EventEnvelope]]:
        """Create runs, then apply stream writes, all in one transaction.

        Raises ``EventConflict`` (writing nothing) if a created run exists or a write's expected
        sequence is stale, ``HookTokenInUse`` if a new hook token is taken, and ``RunNotFound``
        if a written run does not exist.
        """
        if all(w.recorded_at is None for w in writes):  # the batch stamps one time
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
        except UnicodeEncodeError as exc:
            raise self._refused(exc) from exc

    def commit_groups(self, groups: Sequence[CommitGroup]) -> list[FlowError | None]:
        """Each group in its own savepoint of one transaction (see ``EventStore``).

        First tried as one guarded batch (``_commit_guarded``); when a guard fails, redone
        here: every run the groups write is locked first, in run id order, so two workers'
        group commits queue instead of deadlocking, and each group gets a savepoint (a single
        group needs none: its failure rolls back the transaction, which is the same thing).
        """
        if not groups:
            return []
        stamped = any(w.recorded_at is not None for g in groups for w in g.writes)
        if not stamped and self._commit_guarded(groups) is not None:  # it stamps group.now
            return [None] * len(groups)
        if len(groups) == 1:
            (group,) = groups
            try:
                with self._transaction() as conn:
                    locked = tables.lock_runs(conn, (w.run_id for w in group.writes))
                    self._apply(conn, group.writes, group.creates, group.now, locked)
            except (*GROUP_ERRORS, StoreRefused) as exc:
                self._count_conflict(exc)
                return [exc]
            except UnicodeEncodeError as exc:
                return [self._refused(exc)]
            return [None]
        results: list[FlowError | None] = []
        with self._transaction() as conn:
            locked = tables.lock_runs(conn, (w.run_id for g in groups for w in g.writes))
            for group in groups:
                # A failed group's savepoint undoes its writes; so must our copy of the rows.
                before = {run_id: run.last_sequence for run_id, run in locked.items()}
                error: FlowError
                try:
                    with conn.transaction():
                        self._apply(conn, group.writes, group.creates, group.now, locked)
                except (*GROUP_ERRORS, psycopg.DataError, UnicodeEncodeError) as exc:
                    # A data error is this group's alone (a value PostgreSQL cannot store): the
                    # others commit, and the caller records why this one could not.
                    error = (
                        self._refused(exc)
                        if isinstance(exc, psycopg.DataError | UnicodeEncodeError)
                        else exc
                    )
                    self._rolled_back(conn)  # to its savepoint
                    for run_id in list(locked):
                        if run_id in before:
                            locked[run_id].last_sequence = before[run_id]
                        else:  # locked by this group (it created the run): gone with it
                            del locked[run_id]
                    self._count_conflict(error)
                    results.append(error)
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
                    probing = self._probe_first(batch)
                    result = fill(batch)
                    self._probed(probing, batch.send())
                except tables.GUARD_FAILURES as exc:
                    # Past here not a psycopg.Error: no StoreError is made of it.
                    raise tables.GuardFailed from exc
                finally:
                    conn.autocommit = False
        except tables.GuardFailed:
            return None
        return (result,)

    def _batch_on_listener(self, conn: Connection, fill: Callable[[Batch], _T]) -> tuple[_T] | None:
        """``_batch`` on the listening connection (``_free_listener``), which nobody waits on.

        Its server process woke last when a notification came, while a pooled connection may
        have sat idle since this process last wrote: on a machine that lets idle processes sleep
        deeply, the first statement after a pause costs more there. A worker handed a step
        (``postgres.handoffs``) commits its end so, on the connection that heard of it.
        """
        batch = Batch(conn, self._prepared_on(conn))
        try:
            probing = self._probe_first(batch)
            result = fill(batch)
            self._probed(probing, batch.send())
        except tables.GUARD_FAILURES:
            return None
        with self._lock:
            self.stats.durable_commits += 1
        self._due.wrote()
        return (result,)

    def _probe_first(self, batch: Batch) -> float | None:
        """Open ``batch`` with a look at the pauses when one is wanted; when it was sent."""
        if not self._pause_probe_wanted:
            return None
        batch.execute(ANY_PAUSED)
        return monotonic()

    def _probed(self, probing: float | None, first: tuple[object, ...] | None) -> None:
        """Keep what the look ``_probe_first`` added found, once its batch committed."""
        if probing is not None and first is not None:
            self._pause_probe = (probing, bool(first[0]))
            self._pause_probe_wanted = False

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
                    tables.LockedRun(after[run_id], None), row_changes(write.index), now
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
                    row_changes(write.index),
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
            batch.execute(NOTIFY, (NOTIFY_CHANNEL, self.schema))
            named = hints.payload(self.schema, hints.ready_hints(groups, once - handing, after))
            if named is not None:  # a second notification: older listeners wait for the plain one
                batch.execute(NOTIFY, (NOTIFY_CHANNEL, named))
        starts = limited.started_under_limits(
            (w for g in groups for w in g.writes), self._commit_limited_names()
        )
        if starts:  # after the step tasks, so that they count (see ``postgres.limited``)
            limited.queue_limit_guards(
                batch, starts, max(g.now for g in groups), self._generous_limits()
            )
        ended = self._ended([w for g in groups for w in g.writes])
        if ended:
            batch.execute(NOTIFY_ENDED, (ENDED_CHANNEL, ended))
        return results

    def _commit_limited_names(self) -> frozenset[str]:
        """The steps under a limit that a commit starting an attempt of counts it under
        (``PostgresStore``: those some limit is in effect for)."""
        return frozenset()

    def _generous_limits(self) -> frozenset[str]:
        """Of those, the limits far from full whatever other commits start meanwhile
        (``limited.GENEROUS``), as last looked up."""
        return frozenset()

    def _queue_hand_off(self, batch: Batch, run: NewRun, write: StreamWrite, now: datetime) -> bool:
        """Add to a commit that creates ``run`` with its first decisions (``write``) the hand-off
        of its ``hand_off`` step to an idle worker (``postgres.handoffs``), which also notifies;
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
                tables.lost_race(run.run_id, 0, tables.last_sequence(conn, run.run_id))
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
                tables.lost_race(write.run_id, write.expected_sequence, current)
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
                at = now if write.recorded_at is None else write.recorded_at
                results.append(
                    tables.insert_events(
                        conn, write.run_id, target.last_sequence, write.events, at, write.data
                    )
                )
                target.last_sequence += len(write.events)
                tables.apply_index(conn, target, write.run_id, row_changes(write.index), at)
            if makes_work(writes, creates):
                self._notify(conn)
            ended = self._ended(writes)
            if ended:
                conn.execute(NOTIFY_ENDED, (ENDED_CHANNEL, ended))
        starts = limited.started_under_limits(writes, self._commit_limited_names())
        full = limited.full_limit(conn, starts, now) if starts else None
        if full is not None:
            # Not started in commits for a while: the decision is made again, and leaves the
            # attempt ready for a lease that counts it.
            with self._lock:
                self._limits_tight[full] = monotonic() + LIMITS_LOOK_SECONDS
            write = next(w for w in writes if limited.started_under_limits([w], frozenset([full])))
            raise LimitFull(write.run_id, write.expected_sequence, full)
        return results

    def _ended(self, writes: Iterable[StreamWrite]) -> list[str]:
        """The ``ENDED_CHANNEL`` payloads of the runs these writes end."""
        return [ended_payload(self.schema, w.run_id) for w in writes if w.index.status.terminal]

    def _notify(self, conn: Connection) -> None:
        # Inside the transaction: PostgreSQL delivers it only if the commit succeeds.
        conn.execute(NOTIFY, (NOTIFY_CHANNEL, self.schema))
