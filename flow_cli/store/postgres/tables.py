"""The statements on Flow's PostgreSQL tables: run rows, events, the run index, leases."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, NoReturn, TypeAlias

import psycopg
from psycopg.types.json import Json

from flow_cli.errors import EventConflict, HookTokenInUse
from flow_cli.model.events import Event, EventEnvelope, RunStarted, event_json
from flow_cli.model.spec import PRIORITIES
from flow_cli.model.status import RunStatus
from flow_cli.store.index import RowChanges, decided_row, row_changes, start_attributes
from flow_cli.store.limits_sql import unlimited_run, unlimited_step
from flow_cli.store.pauses_sql import PRIORITY_IN, unpaused_or_not_held
from flow_cli.store.postgres.batch import Batch, Connection
from flow_cli.store.protocol import (
    KEEP,
    HookEntry,
    NewRun,
    RunRecord,
    StepTask,
    StreamWrite,
)
from flow_cli.store.sql import Dialect, attribute_rows, attribute_upsert, error_values, run_sets

# Each runs inside the caller's transaction; ``PostgresStore`` decides where transactions begin
# and end, these decide what the rows look like.

RUN_COLUMNS = (
    "run_id, workflow, status, build_id, parent_run_id, created_at, updated_at, last_sequence, "
    "decide_at, failing, waiting_on, error_type, error, priority, "
    "(SELECT json_object_agg(a.key, a.value::json) FROM run_attributes a "
    "WHERE a.run_id = runs.run_id)"
)


_TASK_WORKFLOW = "(SELECT w.workflow FROM runs w WHERE w.run_id = t.run_id)"
"""A step task's workflow, for ``not_held`` (step tasks do not store it)."""

# The due-work queries. Each reads the index on due time in order and stops after ``limit``
# rows, so its cost follows the number of runs due, not the number waiting; SKIP LOCKED lets
# concurrent workers pass over rows another one is leasing instead of queueing behind it.
# Parameters: worker, builds, now, until, limit.

LEASE_RUNS = (
    "WITH due AS ("
    " SELECT run_id, decide_at, created_order FROM runs"
    f" WHERE {PRIORITY_IN} AND decide_at <= %(now)s AND build_id = ANY(%(builds)s)"
    f" AND {unlimited_run('runs')} AND {unpaused_or_not_held('runs')}"
    " ORDER BY priority, decide_at, created_order LIMIT %(limit)s FOR UPDATE SKIP LOCKED"
    ") UPDATE runs SET decide_at = %(until)s, lease_owner = %(worker)s FROM due"
    " WHERE runs.run_id = due.run_id"
    " RETURNING runs.run_id, due.decide_at, due.created_order, runs.priority"
)
"""Lease due runs: rows of (run_id, old decide_at, created_order, priority); runs a pause
holds are left out (``pauses_sql``)."""

ANY_DUE_RUN = (
    f"SELECT 1 FROM runs WHERE {PRIORITY_IN} AND decide_at <= %(now)s"
    f" AND build_id = ANY(%(builds)s) AND {unpaused_or_not_held('runs')} LIMIT 1"
)
"""Whether any run of these builds is due (read before leasing, without locking)."""

ANY_READY_STEP = (
    f"SELECT 1 FROM step_tasks t WHERE {PRIORITY_IN} AND available_at <= %(now)s"
    f" AND build_id = ANY(%(builds)s) AND {unpaused_or_not_held('t', workflow=_TASK_WORKFLOW)}"
    " LIMIT 1"
)
"""Whether any step task of these builds is ready (read before leasing, without locking)."""

LOCK_READY = (
    "WITH ready AS MATERIALIZED (SELECT run_id, step_id FROM step_tasks t"
    f" WHERE {PRIORITY_IN} AND available_at <= %(now)s AND build_id = ANY(%(builds)s)"
    f" AND {unlimited_step('t')} AND {unpaused_or_not_held('t', workflow=_TASK_WORKFLOW)}"
    " ORDER BY priority, available_at, run_id, step_id LIMIT %(limit)s)"
    " SELECT run_id, last_sequence, build_id,"
    "  set_config('flow.ready_runs', (SELECT array_agg(run_id)::text FROM ready), true),"
    "  set_config('flow.ready_steps', (SELECT array_agg(step_id)::text FROM ready), true)"
    " FROM runs WHERE run_id IN (SELECT run_id FROM ready) ORDER BY run_id FOR UPDATE"
)
"""Find the oldest ``limit`` ready step tasks, lock their runs' rows in run id order (the order
``commit`` locks them in, so a lease and a commit never deadlock), and leave the steps in the
transaction's ``flow.ready_*`` settings for ``LEASE_READY``, the next statement of the same round
trip: a statement cannot read another's answer before the round trip ends. Rows of
``LOCK_RUNS`` (then the settings' values)."""

LEASE_READY = (
    "UPDATE step_tasks SET available_at = %(until)s, lease_owner = %(worker)s"
    " FROM (SELECT available_at AS was, run_id, step_id FROM step_tasks"
    "       WHERE run_id = ANY(coalesce("
    "         nullif(current_setting('flow.ready_runs', true), ''), '{}')::text[])"
    "       AND step_id = ANY(coalesce("
    "         nullif(current_setting('flow.ready_steps', true), ''), '{}')::text[])"
    "       AND available_at <= %(now)s AND build_id = ANY(%(builds)s)) due"
    " WHERE step_tasks.run_id = due.run_id AND step_tasks.step_id = due.step_id"
    " RETURNING step_tasks.run_id, step_tasks.step_id, step_tasks.attempt, due.was,"
    " step_tasks.priority"
)
"""Lease the step tasks ``LOCK_READY`` found, re-checking that they are still ready (it may
have waited for a run's lock meanwhile): rows of (run_id, step_id, attempt, old available_at,
priority).
The settings are local to the transaction, so after a ``LOCK_READY`` that found nothing this
leases nothing."""


_PRIORITIES = f"unnest(ARRAY[{', '.join(str(p) for p in PRIORITIES)}]) AS q(priority)"

NEXT_DUE = (
    "SELECT (SELECT min((SELECT decide_at FROM runs"
    "        WHERE priority = q.priority AND decide_at <= %(due_until)s"
    f"       AND build_id = ANY(%(builds)s) AND {unlimited_run('runs')}"
    f"       AND {unpaused_or_not_held('runs')}"
    f"       ORDER BY decide_at LIMIT 1)) FROM {_PRIORITIES}),"
    "       (SELECT min((SELECT available_at FROM step_tasks t"
    "        WHERE priority = q.priority AND available_at <= %(due_until)s"
    f"       AND build_id = ANY(%(builds)s) AND {unlimited_step('t')}"
    f"       AND {unpaused_or_not_held('t', workflow=_TASK_WORKFLOW)}"
    f"       ORDER BY available_at LIMIT 1)) FROM {_PRIORITIES})"
)
"""The earliest run and step due times of some builds up to ``due_until``, of runs no pause
holds (an idle worker would spin on a due run it may not lease): one row of two (maybe NULL)
times. Each is the earliest of each priority's first, read from the (priority, due time)
indexes (there is no index on the due time alone: a write keeps one index entry less); the
bound keeps each look to the entries due by then, not every waiting run of other builds."""


@dataclass(slots=True)
class LockedRun:
    """A run row locked for this transaction, as far as ``commit`` needs it."""

    last_sequence: int
    build_id: str | None
    """``None`` when the row was not read (a guarded commit): statements that need the build
    id read it from the row in the same statement."""


GUARD_SEQUENCE = (
    "WITH moved AS (UPDATE runs SET last_sequence = %s"
    " WHERE run_id = %s AND last_sequence = %s RETURNING 1)"
    " SELECT 1 / count(*) FROM moved"
)
"""Lock a run's row and move its ``last_sequence`` from the writer's expectation to the value
after its events, failing with ``division_by_zero`` when the row is missing or elsewhere.

Failing in the statement itself (``count(*)`` is 0; an aggregate, so never folded into a
planning-time error) is what lets a whole commit go out as one ``Batch``: a failed guard rolls
back everything, with no round trip spent asking first. Parameters: new last sequence, run id,
expected sequence."""


class GuardFailed(Exception):
    """A guarded commit's check failed (stale or missing run, taken create id or hook token):
    it wrote nothing, and the caller redoes the commit the checking way to learn which."""


GUARD_FAILURES: tuple[type[Exception], ...] = (
    psycopg.errors.DivisionByZero,
    psycopg.errors.UniqueViolation,
    EventConflict,
    HookTokenInUse,
    psycopg.DataError,
    UnicodeEncodeError,
)
"""The errors of a guarded commit that mean "a guard or a key said no", not "broken"; a data
error too (a value one group holds that PostgreSQL cannot store, such as a NUL in text or a
lone surrogate, which the client cannot even encode): the checking path then finds the group
and commits the others."""


Statements: TypeAlias = Connection | Batch
"""Where the statement helpers send to: a connection (each statement runs at once, answers
can be read) or a ``Batch`` (sent later, all at once; checks fail their statement)."""


LOCK_RUNS = (
    "SELECT run_id, last_sequence, build_id FROM runs "
    "WHERE run_id = ANY(%s) ORDER BY run_id FOR UPDATE"
)
"""Lock some runs' rows (parameter: the run ids) in run id order: rows for ``locked_runs``."""


def lock_runs(conn: Connection, run_ids: Iterable[str]) -> dict[str, LockedRun]:
    """Lock these runs' rows (missing ids are left out) until the transaction ends.

    Rows are locked in run id order, so two commits touching the same runs (a parent and its
    child) queue one behind the other instead of deadlocking.
    """
    return locked_runs(conn.execute(LOCK_RUNS, (sorted(set(run_ids)),)))


def locked_runs(rows: Iterable[tuple[Any, ...]]) -> dict[str, LockedRun]:
    """The rows of ``LOCK_RUNS`` by run id."""
    return {run_id: LockedRun(last, build_id) for run_id, last, build_id in rows}


def last_sequence(conn: Connection, run_id: str) -> int | None:
    """The run's last sequence, or ``None`` when it does not exist."""
    row = conn.execute("SELECT last_sequence FROM runs WHERE run_id = %s", (run_id,)).fetchone()
    return None if row is None else int(row[0])


_INSERT_RUN = (
    "INSERT INTO runs (run_id, workflow, status, build_id, parent_run_id, created_at, "
    "updated_at, last_sequence, decide_at, patches, priority) "
    "VALUES (%s, %s, %s, %s, %s, %s, %s, 1, %s, %s, %s)"
)


def insert_run(conn: Statements, run: NewRun, now: datetime) -> EventEnvelope | None:
    """Insert the run's row and its ``run_started``; ``None`` (writing nothing) if it exists.

    ``ON CONFLICT DO NOTHING`` makes a concurrent creator of the same id wait for the first one
    and then see the row, so exactly one of them creates the run. A ``Batch`` reads no answer,
    so there the run is inserted plainly: an existing id is a unique violation that rolls the
    whole batch back.
    """
    spec = run.spec
    params = (
        run.run_id,
        spec.workflow,
        RunStatus.PENDING.value,
        spec.runtime_build_id,
        spec.parent_run_id,
        now if run.created_at is None else run.created_at,
        now,
        run.decide_at,
        json.dumps(list(spec.patches)),
        spec.priority,
    )
    if isinstance(conn, Batch):
        conn.execute(_INSERT_RUN, params)
    elif (
        conn.execute(
            _INSERT_RUN + " ON CONFLICT (run_id) DO NOTHING RETURNING run_id", params
        ).fetchone()
        is None
    ):
        return None
    (envelope,) = insert_events(conn, run.run_id, 0, [RunStarted(spec=spec, seed=run.seed)], now)
    set_attributes(conn, run.run_id, start_attributes(run))
    return envelope


def set_attributes(conn: Statements, run_id: str, attributes: Mapping[str, str]) -> None:
    """Upsert search attributes of a run (key → JSON text) into ``run_attributes``."""
    for row in attribute_rows(run_id, attributes):  # usually none, or one or two
        conn.execute(attribute_upsert(POSTGRES), row)


_INSERT_EVENTS = "INSERT INTO events (run_id, sequence, event_key, recorded_at, data) VALUES "
_EVENT_ROW = "(%s, %s, %s, %s, %s)"
_EVENT_TEXT_ROW = "(%s, %s, %s, %s, %s::json)"
"""The writer's JSON text, cast to the column's ``json`` (a ``jsonb`` cast on the way would
reorder keys, turn 1e20 into an integer and refuse ``\\u0000``)."""


def insert_events(
    conn: Statements,
    run_id: str,
    after: int,
    events: Sequence[Event],
    now: datetime,
    data: Sequence[str] | None = None,
) -> list[EventEnvelope]:
    """Insert ``events`` as sequences ``after + 1, ...`` and return their envelopes.

    ``data``: the events' JSON text as the writer encoded it (``StreamWrite.data``), sent as is
    instead of encoding each event again.
    """
    envelopes = [
        EventEnvelope(run_id=run_id, sequence=after + i, recorded_at=now, event=event)
        for i, event in enumerate(events, start=1)
    ]
    if envelopes:
        # One statement for all of them (its text depends only on how many there are).
        params: list[Any] = []
        if data is not None and len(data) == len(envelopes):
            for e, text in zip(envelopes, data, strict=True):
                params += (run_id, e.sequence, e.event_key, now, text)
            row = _EVENT_TEXT_ROW
        else:
            for e in envelopes:
                params += (run_id, e.sequence, e.event_key, now, Json(e.event.to_data()))
            row = _EVENT_ROW
        with unique_violations_as_conflict(run_id, after):
            conn.execute(_INSERT_EVENTS + ", ".join([row] * len(envelopes)), params)
    return envelopes


_INSERT_DECIDED_RUN = (
    "INSERT INTO runs (run_id, workflow, status, build_id, parent_run_id, created_at, "
    "updated_at, last_sequence, decide_at, patches, failing, failing_since, waiting_on, "
    "error_type, error, priority) "
    "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"
)


POSTGRES = Dialect(
    param="%s",
    text_param="%s::text",
    time_param="%s::timestamptz",
    time=lambda value: value,
    named=lambda name: f"%({name})s",
    position="strpos",
    build_key="build_id",
    created_order="created_order",
    false="false",
    json_value=lambda value: value,  # psycopg reads a json column as the value it holds
)
"""psycopg sends times as they are; a parameter that may be NULL needs its type spelled."""


def insert_decided_run(
    conn: Statements, run: NewRun, write: StreamWrite, now: datetime
) -> list[EventEnvelope]:
    """Insert a run together with its first decision (``write``, at sequence 1): the row as
    the decision leaves it, ``run_started`` and the decision's events in one ``INSERT``, its
    step tasks and hooks. Written so, the row has one version where ``insert_run`` and the
    decision's update make two (each with an entry in every index of the table). Returns the
    decision's envelopes."""
    spec = run.spec
    changes = row_changes(write.index)
    row = decided_row(run, changes)
    events = [RunStarted(spec=spec, seed=run.seed), *write.events]
    conn.execute(
        _INSERT_DECIDED_RUN,
        (
            run.run_id,
            spec.workflow,
            row.status.value,
            row.build_id,
            spec.parent_run_id,
            now if run.created_at is None else run.created_at,
            now,
            len(events),
            row.decide_at,
            json.dumps(list(spec.patches)),
            row.failing,
            row.failing_since(now),
            row.waiting_on,
            *error_values(row.error),
            spec.priority,
        ),
    )
    data = None if write.data is None else [event_json(events[0]), *write.data]
    envelopes = insert_events(conn, run.run_id, 0, events, now, data)
    set_attributes(conn, run.run_id, start_attributes(run))
    apply_index(conn, LockedRun(len(events), row.build_id), run.run_id, changes, now, row_done=True)
    return envelopes[1:]


def lost_race(run_id: str, expected: int, actual: int | None) -> NoReturn:
    """The one place the PostgreSQL store raises ``EventConflict``: a stale sequence found on
    the locked run row, a run id that exists, or the primary key's unique violation."""
    raise EventConflict(run_id, expected, actual)


@contextmanager
def unique_violations_as_conflict(run_id: str, expected_sequence: int) -> Iterator[None]:
    """PostgreSQL's unique violation as ``EventConflict``.

    ``commit`` normally reports a stale sequence from the locked run row first; this catches a
    writer that got past that check, which ``PRIMARY KEY (run_id, sequence)`` still stops.
    """
    try:
        yield
    except psycopg.errors.UniqueViolation:
        lost_race(run_id, expected_sequence, None)


_RUN_UPDATES: dict[tuple[tuple[str, ...], bool], str] = {}
"""``UPDATE runs`` statements by the columns they set (and whether guarded): built once each,
so the hot path neither composes SQL nor sends psycopg a new query text (which would defeat
its prepared statements)."""


def run_update(sets: tuple[str, ...], *, guarded: bool = False) -> str:
    """The ``UPDATE runs`` of ``index_update``'s columns; parameters: theirs, then the run id.

    ``guarded=True`` also checks and locks like ``GUARD_SEQUENCE`` (one more parameter, the
    expected sequence, and the same failure): one statement and one row version instead of
    two, for a run a batch writes once.
    """
    query = _RUN_UPDATES.get((sets, guarded))
    if query is None:
        update = f"UPDATE runs SET {', '.join(sets)} WHERE run_id = %s"
        if guarded:
            update = (
                f"WITH moved AS ({update} AND last_sequence = %s RETURNING 1) "
                "SELECT 1 / count(*) FROM moved"
            )
        query = _RUN_UPDATES[(sets, guarded)] = update
    return query


def index_update(
    run: LockedRun, changes: RowChanges, now: datetime
) -> tuple[tuple[str, ...], list[Any]]:
    """The runs row's new values after an append (``run`` is current): ``SET`` items and their
    parameters, for ``run_update``."""
    return run_sets(changes, POSTGRES, now, run.last_sequence)


def apply_index(
    conn: Statements,
    run: LockedRun,
    run_id: str,
    changes: RowChanges,
    now: datetime,
    *,
    row_done: bool = False,
) -> None:
    """Bring the run's index rows in line with the events just appended (``run`` is current).

    ``row_done``: the runs row was updated already (by a guarded ``run_update``); only the step
    tasks and hooks are left. In a ``Batch`` a hook token owned by another hook fails the batch
    (no answer is read) instead of raising ``HookTokenInUse``.
    """
    if changes.build_id is not KEEP:
        # Re-pinned (``build_upgraded``): the row and the step tasks move to the new build.
        run.build_id = changes.build_id
        conn.execute(
            "UPDATE step_tasks SET build_id = %s WHERE run_id = %s", (changes.build_id, run_id)
        )
    if not row_done:
        sets, params = index_update(run, changes, now)
        params.append(run_id)
        conn.execute(run_update(sets), params)
    if changes.drop_tasks:
        conn.execute("DELETE FROM step_tasks WHERE run_id = %s", (run_id,))
    elif changes.tasks:
        _apply_steps(conn, run_id, run.build_id, changes.tasks)
    for hook in changes.hooks:
        _upsert_hook(conn, run_id, hook, now)
    set_attributes(conn, run_id, changes.attributes)


_UPSERT_TASK = (
    " ON CONFLICT (run_id, step_id) DO UPDATE SET attempt = EXCLUDED.attempt,"
    " available_at = EXCLUDED.available_at, lease_owner = EXCLUDED.lease_owner,"
    " step_name = EXCLUDED.step_name"
)


def _apply_steps(
    conn: Statements, run_id: str, build_id: str | None, steps: Mapping[str, StepTask | None]
) -> None:
    gone = [step_id for step_id, task in steps.items() if task is None]
    if gone:
        conn.execute(
            "DELETE FROM step_tasks WHERE run_id = %s AND step_id = ANY(%s)", (run_id, gone)
        )
    if build_id is None:
        # The run row was not read: each task takes the build id the row has now (this
        # transaction's own UPDATE of it included).
        query = (
            "INSERT INTO step_tasks (run_id, step_id, build_id, attempt, available_at, "
            "lease_owner, priority, step_name) SELECT run_id, %s, build_id, %s, %s, %s, "
            "priority, %s FROM runs "
            "WHERE run_id = %s" + _UPSERT_TASK
        )
        tasks: list[tuple[Any, ...]] = [
            (step_id, task.attempt, task.available_at, task.owner, task.name, run_id)
            for step_id, task in steps.items()
            if task is not None
        ]
    else:
        # The task's priority is its run's (the row is there: this transaction wrote it).
        query = (
            "INSERT INTO step_tasks (run_id, step_id, build_id, attempt, available_at, "
            "lease_owner, priority, step_name) SELECT %s, %s, %s, %s, %s, %s, priority, %s "
            "FROM runs WHERE run_id = %s" + _UPSERT_TASK
        )
        tasks = [
            (
                run_id,
                step_id,
                build_id,
                task.attempt,
                task.available_at,
                task.owner,
                task.name,
                run_id,
            )
            for step_id, task in steps.items()
            if task is not None
        ]
    for task in tasks:  # usually one
        conn.execute(query, task)


_UPSERT_HOOK = (
    "INSERT INTO hooks (token, run_id, hook_id, resolved, created_at, metadata) "
    "VALUES (%s, %s, %s, %s, %s, %s) "
    "ON CONFLICT (token) DO UPDATE SET resolved = EXCLUDED.resolved "
    "WHERE hooks.run_id = EXCLUDED.run_id AND hooks.hook_id = EXCLUDED.hook_id "
    "RETURNING token"
)


def _upsert_hook(conn: Statements, run_id: str, hook: HookEntry, now: datetime) -> None:
    # ON CONFLICT waits for a concurrent creator of the same token, then updates the row only
    # if it is this very hook: no row back means another hook owns the token.
    params = (hook.token, run_id, hook.hook_id, hook.resolved, now, Json(hook.metadata))
    if isinstance(conn, Batch):
        # No row back fails the statement (see GUARD_SEQUENCE), and with it the batch.
        conn.execute(f"WITH upserted AS ({_UPSERT_HOOK}) SELECT 1 / count(*) FROM upserted", params)
        return
    row = conn.execute(_UPSERT_HOOK, params).fetchone()
    if row is None:
        owner = conn.execute(
            "SELECT run_id, hook_id FROM hooks WHERE token = %s", (hook.token,)
        ).fetchone()
        owner_run, owner_hook = owner if owner is not None else (run_id, hook.hook_id)
        raise HookTokenInUse(hook.token, owner_run, owner_hook)


def run_record(row: Sequence[Any]) -> RunRecord:
    """A ``RunRecord`` from a row of ``RUN_COLUMNS``."""
    run_id, workflow, status, build_id, parent, created, updated, last, decide_at, failing = row[
        :10
    ]
    return RunRecord(
        run_id=run_id,
        workflow=workflow,
        status=RunStatus(status),
        build_id=build_id,
        parent_run_id=parent,
        created_at=utc(created),
        updated_at=utc(updated),
        last_sequence=int(last),
        decide_at=None if decide_at is None else utc(decide_at),
        failing=failing,
        waiting_on=row[10] if len(row) > 10 else None,
        error_type=row[11] if len(row) > 11 else None,
        error=row[12] if len(row) > 12 else None,
        priority=int(row[13]) if len(row) > 13 else 5,
        attributes=(row[14] or {}) if len(row) > 14 else {},
    )


def utc(value: datetime) -> datetime:
    """A ``timestamptz`` read back, as UTC (the store's sessions run in UTC anyway)."""
    return value.astimezone(UTC)
