"""Flow's PostgreSQL tables: the versioned schema, its migrations, and the statements on them.

The version lives in ``flow_meta`` (key ``schema_version``). Opening a store brings the schema up to
``SCHEMA_VERSION`` by running the missing migrations in order, in one transaction, under an advisory
lock so that many workers starting at once neither race on ``CREATE`` nor apply a step twice. A
database written by a newer Flow is refused rather than guessed at.

Only ``flow_cli.store.postgres`` imports this module, so psycopg is never imported by
``import flow_cli.store``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeAlias

import psycopg
from psycopg import sql
from psycopg.types.json import Json

from flow_cli.errors import EventConflict, HookTokenInUse, StoreError
from flow_cli.model.events import Event, EventEnvelope, RunStarted, event_json
from flow_cli.model.status import RunStatus
from flow_cli.store.postgres_batch import Batch, Connection
from flow_cli.store.protocol import (
    KEEP,
    HookEntry,
    NewRun,
    RunFilter,
    RunIndex,
    RunRecord,
    StepTask,
    StreamWrite,
    waiting_needle,
)

_LOCK_CLASS = 0x466C6F77
"""First key of the advisory lock that serialises migrations ("Flow" in ASCII)."""


@dataclass(frozen=True, slots=True)
class Migration:
    """One schema step: applying it moves the database from ``version - 1`` to ``version``."""

    version: int
    description: str
    apply: Callable[[Connection], None]
    """Runs inside the migration transaction with ``search_path`` set to the store's schema."""


def _v1_base_tables(conn: Connection) -> None:
    # ``data`` is ``json``, not ``jsonb``: json keeps the text exactly as written, so key order,
    # floats such as 1e20 (jsonb would hand back the int 100000000000000000000) and "\u0000" in
    # strings round-trip the way they do in the other stores. Nothing queries inside it.
    conn.execute(
        """
        CREATE TABLE events (
            run_id      text        NOT NULL,
            sequence    bigint      NOT NULL,
            event_key   text        NOT NULL,
            recorded_at timestamptz NOT NULL,
            data        json        NOT NULL,
            PRIMARY KEY (run_id, sequence)
        )
        """
    )
    # ``created_order`` breaks ties between runs created in the same instant (tests use a clock
    # that does not move), so "newest first" is stable and matches creation order.
    conn.execute(
        """
        CREATE TABLE runs (
            run_id        text        PRIMARY KEY,
            created_order bigint      GENERATED ALWAYS AS IDENTITY,
            workflow      text        NOT NULL,
            status        text        NOT NULL,
            build_id      text        NOT NULL,
            parent_run_id text,
            created_at    timestamptz NOT NULL,
            updated_at    timestamptz NOT NULL,
            last_sequence bigint      NOT NULL,
            decide_at     timestamptz,
            lease_owner   text,
            failing       text
        )
        """
    )
    # Due-work lookups read only runs that want a decision: the partial index keeps waiting and
    # finished runs out of it, so its cost follows the number due, not the number stored. Its
    # second column is the lease order's tie-break, so LIMIT stops early instead of sorting.
    conn.execute(
        "CREATE INDEX runs_decide_at ON runs (decide_at, created_order) WHERE decide_at IS NOT NULL"
    )
    conn.execute("CREATE INDEX runs_status_created ON runs (status, created_at, created_order)")
    conn.execute("CREATE INDEX runs_workflow_created ON runs (workflow, created_at, created_order)")
    conn.execute("CREATE INDEX runs_created ON runs (created_at, created_order)")
    conn.execute(
        """
        CREATE TABLE step_tasks (
            run_id       text        NOT NULL,
            step_id      text        NOT NULL,
            build_id     text        NOT NULL,
            attempt      integer     NOT NULL,
            available_at timestamptz NOT NULL,
            lease_owner  text,
            PRIMARY KEY (run_id, step_id)
        )
        """
    )
    conn.execute("CREATE INDEX step_tasks_available_at ON step_tasks (available_at)")
    conn.execute(
        """
        CREATE TABLE hooks (
            token    text    PRIMARY KEY,
            run_id   text    NOT NULL,
            hook_id  text    NOT NULL,
            resolved boolean NOT NULL
        )
        """
    )


def _v3_fleet(conn: Connection) -> None:
    # The workers registry behind `flow workers` and `flow doctor`; each run's patch markers
    # (JSON text) for `flow builds`, copied from run_started for the runs that exist already.
    conn.execute(
        """
        CREATE TABLE workers (
            worker_id         text             PRIMARY KEY,
            host              text             NOT NULL,
            pid               integer          NOT NULL,
            builds            text             NOT NULL,
            started_at        timestamptz      NOT NULL,
            heartbeat_at      timestamptz      NOT NULL,
            heartbeat_seconds double precision NOT NULL,
            stopped_at        timestamptz
        )
        """
    )
    conn.execute("ALTER TABLE runs ADD COLUMN patches text")
    conn.execute(
        "UPDATE runs SET patches = (SELECT (e.data -> 'spec' -> 'patches')::text FROM events e "
        "WHERE e.run_id = runs.run_id AND e.sequence = 1)"
    )


def _v2_triage(conn: Connection) -> None:
    # What an open run waits on (``KIND:ID`` entries, NULL when nothing; runs opened before this
    # version get theirs with their next event), and what `flow hook list` shows. Each listing
    # index ends in (created_at, created_order), the order `flow runs` reads in.
    conn.execute("ALTER TABLE runs ADD COLUMN waiting_on text")
    conn.execute("ALTER TABLE hooks ADD COLUMN created_at timestamptz")
    conn.execute("ALTER TABLE hooks ADD COLUMN metadata json")
    conn.execute("ALTER TABLE hooks ADD COLUMN created_order bigint GENERATED ALWAYS AS IDENTITY")
    conn.execute("CREATE INDEX runs_build_created ON runs (build_id, created_at, created_order)")
    conn.execute(
        "CREATE INDEX runs_parent_created ON runs (parent_run_id, created_at, created_order)"
    )
    conn.execute("CREATE INDEX runs_updated ON runs (updated_at)")
    conn.execute(
        "CREATE INDEX runs_failing ON runs (created_at, created_order) WHERE failing IS NOT NULL"
    )
    conn.execute(
        "CREATE INDEX runs_waiting ON runs (created_at, created_order) WHERE waiting_on IS NOT NULL"
    )
    conn.execute("CREATE INDEX hooks_run ON hooks (run_id, created_at, created_order)")
    conn.execute("CREATE INDEX hooks_open ON hooks (created_at, created_order) WHERE NOT resolved")
    conn.execute(
        "UPDATE hooks SET created_at = e.recorded_at, metadata = e.data -> 'metadata' "
        "FROM events e WHERE e.run_id = hooks.run_id AND e.event_key = 'hook_created' "
        "AND e.data ->> 'hook_id' = hooks.hook_id"
    )


def _v4_failing_since(conn: Connection) -> None:
    # When each failing run's decisions began to fail (`flow doctor`'s since). Runs failing
    # already get the time of their last decision_failed.
    conn.execute("ALTER TABLE runs ADD COLUMN failing_since timestamptz")
    conn.execute(
        "UPDATE runs SET failing_since = coalesce((SELECT max(e.recorded_at) FROM events e "
        "WHERE e.run_id = runs.run_id AND e.event_key = 'decision_failed'), updated_at) "
        "WHERE failing IS NOT NULL"
    )


def _v5_idle_workers(conn: Connection) -> None:
    # Idle workers offered for hand-offs (``postgres_handoffs``). Unlogged: an offer is not
    # history, and one a crash of the server drops only means a start leaves its step ready.
    conn.execute(
        """
        CREATE UNLOGGED TABLE idle_workers (
            worker_id     text             PRIMARY KEY,
            builds        text[]           NOT NULL,
            lease_seconds double precision NOT NULL,
            backend_pid   integer          NOT NULL,
            backend_start timestamptz      NOT NULL,
            offered_at    timestamptz      NOT NULL
        )
        """
    )


MIGRATIONS: tuple[Migration, ...] = (
    Migration(1, "events, runs, step_tasks, hooks", _v1_base_tables),
    Migration(2, "runs.waiting_on, hook creation time and metadata, filter indexes", _v2_triage),
    Migration(3, "workers registry, runs.patches", _v3_fleet),
    Migration(4, "runs.failing_since", _v4_failing_since),
    Migration(5, "idle_workers (hand-offs)", _v5_idle_workers),
)
"""Every migration, in order; the last one's version is the schema this code writes."""

SCHEMA_VERSION = MIGRATIONS[-1].version


def ensure_schema(
    conn: Connection,
    schema: str,
    migrations: Sequence[Migration] | None = None,
    *,
    create: bool = True,
) -> int:
    """Create or upgrade the schema so that it is at the last migration's version.

    With ``create=False`` a schema without Flow's tables is refused instead of created (the
    read-only commands must not write to a database they were merely pointed at).

    ``conn`` must be idle, not in autocommit, with ``search_path`` set to ``schema``. Commits on
    success and rolls back on failure. Returns the version found before any upgrade (0 for a new
    database).

    Raises:
        StoreError: the database was written by a newer Flow.
    """
    steps = tuple(MIGRATIONS if migrations is None else migrations)
    target = steps[-1].version if steps else 0
    try:
        found = _read_version(conn, schema)
        _refuse_newer(schema, found, target)
        if found == 0 and not create:
            raise StoreError(
                f"No Flow database in schema {schema!r}; start a run or a worker against it "
                "first, or check the database URL and its ?schema= option."
            )
        if found == target:
            conn.commit()  # the common case takes no lock at all
            return found
        # Several workers may open a fresh database at once; the transaction-scoped lock makes
        # the others wait here and then see the finished schema.
        conn.execute("SELECT pg_advisory_xact_lock(%s, hashtext(%s))", (_LOCK_CLASS, schema))
        found = _read_version(conn, schema)
        _refuse_newer(schema, found, target)
        if found == 0:
            _create_schema(conn, schema)
        for step in steps:
            if step.version > found:
                step.apply(conn)
                _write_version(conn, step.version)
        conn.commit()
    except BaseException:
        conn.rollback()
        raise
    return found


def _create_schema(conn: Connection, schema: str) -> None:
    row = conn.execute(
        "SELECT EXISTS (SELECT FROM pg_catalog.pg_namespace WHERE nspname = %s)", (schema,)
    ).fetchone()
    if row is None or not row[0]:
        # Only when missing: CREATE SCHEMA needs a privilege that a Flow user of an existing,
        # DBA-made schema may not have, even with IF NOT EXISTS.
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
    else:
        tables = conn.execute(
            "SELECT string_agg(tablename, ', ' ORDER BY tablename) FROM pg_tables "
            "WHERE schemaname = %s AND tablename <> 'flow_meta'",
            (schema,),
        ).fetchone()
        if tables is not None and tables[0]:
            raise StoreError(
                f"PostgreSQL schema {schema!r} already holds tables that are not Flow's "
                f"({tables[0]}); give Flow a schema of its own."
            )
    conn.execute("CREATE TABLE IF NOT EXISTS flow_meta (key text PRIMARY KEY, value text NOT NULL)")


def read_version(conn: Connection, schema: str) -> int:
    """The schema version stored in ``schema``; 0 when Flow has never written there."""
    try:
        return _read_version(conn, schema)
    finally:
        conn.rollback()


def _read_version(conn: Connection, schema: str) -> int:
    # Asked of the catalog tables, not to_regclass(): their lookups go through caches that a
    # transaction which has just waited for the migration lock may not have refreshed yet, so
    # they could miss the schema another opener committed meanwhile.
    table = conn.execute(
        "SELECT EXISTS (SELECT FROM pg_catalog.pg_tables "
        "WHERE schemaname = %s AND tablename = 'flow_meta')",
        (schema,),
    ).fetchone()
    if table is None or not table[0]:
        return 0
    row = conn.execute(
        sql.SQL("SELECT value FROM {}.flow_meta WHERE key = 'schema_version'").format(
            sql.Identifier(schema)
        )
    ).fetchone()
    if row is None:
        return 0
    try:
        return int(str(row[0]))
    except ValueError:
        raise StoreError(
            f"PostgreSQL schema {schema!r} has an unreadable schema_version {row[0]!r} in "
            "flow_meta; it is not a Flow database, so point Flow at another schema."
        ) from None


def _refuse_newer(schema: str, found: int, target: int) -> None:
    if found > target:
        raise StoreError(
            f"PostgreSQL schema {schema!r} is at Flow schema version {found}, newer than the "
            f"{target} this Flow understands; upgrade Flow on this machine."
        )


def _write_version(conn: Connection, version: int) -> None:
    conn.execute(
        "INSERT INTO flow_meta (key, value) VALUES ('schema_version', %s) "
        "ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value",
        (str(version),),
    )


# -- statements on these tables -----------------------------------------------------------------
# Each runs inside the caller's transaction; ``PostgresStore`` decides where transactions begin
# and end, these decide what the rows look like.

RUN_COLUMNS = (
    "run_id, workflow, status, build_id, parent_run_id, created_at, updated_at, last_sequence, "
    "decide_at, failing, waiting_on"
)


# The due-work queries. Each reads the index on due time in order and stops after ``limit``
# rows, so its cost follows the number of runs due, not the number waiting; SKIP LOCKED lets
# concurrent workers pass over rows another one is leasing instead of queueing behind it.
# Parameters: worker, builds, now, until, limit.

LEASE_RUNS = (
    "WITH due AS ("
    " SELECT run_id, decide_at, created_order FROM runs"
    " WHERE decide_at <= %(now)s AND build_id = ANY(%(builds)s)"
    " ORDER BY decide_at, created_order LIMIT %(limit)s FOR UPDATE SKIP LOCKED"
    ") UPDATE runs SET decide_at = %(until)s, lease_owner = %(worker)s FROM due"
    " WHERE runs.run_id = due.run_id"
    " RETURNING runs.run_id, due.decide_at, due.created_order"
)
"""Lease due runs: rows of (run_id, old decide_at, created_order)."""

ANY_DUE_RUN = "SELECT 1 FROM runs WHERE decide_at <= %(now)s AND build_id = ANY(%(builds)s) LIMIT 1"
"""Whether any run of these builds is due (read before leasing, without locking)."""

ANY_READY_STEP = (
    "SELECT 1 FROM step_tasks WHERE available_at <= %(now)s AND build_id = ANY(%(builds)s) LIMIT 1"
)
"""Whether any step task of these builds is ready (read before leasing, without locking)."""

LOCK_READY = (
    "WITH ready AS MATERIALIZED (SELECT run_id, step_id FROM step_tasks"
    " WHERE available_at <= %(now)s AND build_id = ANY(%(builds)s)"
    " ORDER BY available_at, run_id, step_id LIMIT %(limit)s)"
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
    " RETURNING step_tasks.run_id, step_tasks.step_id, step_tasks.attempt, due.was"
)
"""Lease the step tasks ``LOCK_READY`` found, re-checking that they are still ready (it may
have waited for a run's lock meanwhile): rows of (run_id, step_id, attempt, old available_at).
The settings are local to the transaction, so after a ``LOCK_READY`` that found nothing this
leases nothing."""


NEXT_DUE = (
    "SELECT (SELECT min(decide_at) FROM runs"
    "        WHERE decide_at IS NOT NULL AND build_id = ANY(%(builds)s)),"
    "       (SELECT min(available_at) FROM step_tasks WHERE build_id = ANY(%(builds)s))"
)
"""The earliest run and step due times of some builds: one row of two (maybe NULL) times."""


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
)
"""The errors of a guarded commit that mean "a guard or a key said no", not "broken"."""


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
    "updated_at, last_sequence, decide_at, patches) "
    "VALUES (%s, %s, %s, %s, %s, %s, %s, 1, %s, %s)"
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
        now,
        now,
        run.decide_at,
        json.dumps(list(spec.patches)),
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
    return envelope


_INSERT_EVENTS = "INSERT INTO events (run_id, sequence, event_key, recorded_at, data) VALUES "
_EVENT_ROW = "(%s, %s, %s, %s, %s)"
# ``::json``, as the column: a cast through ``jsonb`` would rewrite the text (1e308 becomes a
# 309-digit integer, -0.0 becomes 0) and refuse "\u0000".
_EVENT_TEXT_ROW = "(%s, %s, %s, %s, %s::json)"


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
    "updated_at, last_sequence, decide_at, patches, failing, failing_since, waiting_on) "
    "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"
)


def insert_decided_run(
    conn: Statements, run: NewRun, write: StreamWrite, now: datetime
) -> list[EventEnvelope]:
    """Insert a run together with its first decision (``write``, at sequence 1): the row as
    the decision leaves it, ``run_started`` and the decision's events in one ``INSERT``, its
    step tasks and hooks. Written so, the row has one version where ``insert_run`` and the
    decision's update make two (each with an entry in every index of the table). Returns the
    decision's envelopes."""
    spec, index = run.spec, write.index
    terminal = index.status.terminal
    build_id = spec.runtime_build_id if index.build_id is KEEP else index.build_id
    decide_at = run.decide_at if index.decide_at is KEEP else index.decide_at
    failing = None if index.failing is KEEP else index.failing
    waiting_on = None if terminal or index.waiting_on is KEEP else index.waiting_on
    events = [RunStarted(spec=spec, seed=run.seed), *write.events]
    conn.execute(
        _INSERT_DECIDED_RUN,
        (
            run.run_id,
            spec.workflow,
            index.status.value,
            build_id,
            spec.parent_run_id,
            now,
            now,
            len(events),
            None if terminal else decide_at,
            json.dumps(list(spec.patches)),
            failing,
            None if failing is None else now,
            waiting_on,
        ),
    )
    data = None if write.data is None else [event_json(events[0]), *write.data]
    envelopes = insert_events(conn, run.run_id, 0, events, now, data)
    apply_index(conn, LockedRun(len(events), build_id), run.run_id, index, now, row_done=True)
    return envelopes[1:]


@contextmanager
def unique_violations_as_conflict(run_id: str, expected_sequence: int) -> Iterator[None]:
    """The one place where PostgreSQL's unique violation becomes ``EventConflict``.

    ``commit`` normally reports a stale sequence from the locked run row first; this catches a
    writer that got past that check, which ``PRIMARY KEY (run_id, sequence)`` still stops.
    """
    try:
        yield
    except psycopg.errors.UniqueViolation as exc:
        raise EventConflict(run_id, expected_sequence, None) from exc


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
    run: LockedRun, index: RunIndex, now: datetime
) -> tuple[tuple[str, ...], list[Any]]:
    """The runs row's new values after an append (``run`` is current): ``SET`` items and their
    parameters, for ``run_update``."""
    sets: list[str] = ["status = %s", "updated_at = %s", "last_sequence = %s"]
    params: list[Any] = [index.status.value, now, run.last_sequence]
    if index.status.terminal:
        # A finished run is never decided again and holds no step work.
        sets.append("decide_at = NULL, lease_owner = NULL")
    elif index.decide_at is not KEEP:
        sets.append("decide_at = %s, lease_owner = NULL")
        params.append(index.decide_at)
    if index.failing is not KEEP:
        # SET reads the row as it was: the time is kept while the run goes on failing.
        sets.append(
            "failing = %s, failing_since = CASE WHEN %s::text IS NULL THEN NULL "
            "WHEN failing IS NULL THEN %s::timestamptz ELSE failing_since END"
        )
        params.extend([index.failing, index.failing, now])
    if index.status.terminal:
        sets.append("waiting_on = NULL")
    elif index.waiting_on is not KEEP:
        sets.append("waiting_on = %s")
        params.append(index.waiting_on)
    if index.build_id is not KEEP:
        sets.append("build_id = %s")
        params.append(index.build_id)
    return tuple(sets), params


def apply_index(
    conn: Statements,
    run: LockedRun,
    run_id: str,
    index: RunIndex,
    now: datetime,
    *,
    row_done: bool = False,
) -> None:
    """Bring the run's index rows in line with the events just appended (``run`` is current).

    ``row_done``: the runs row was updated already (by a guarded ``run_update``); only the step
    tasks and hooks are left. In a ``Batch`` a hook token owned by another hook fails the batch
    (no answer is read) instead of raising ``HookTokenInUse``.
    """
    if index.build_id is not KEEP:
        # Re-pinned (``build_upgraded``): the row and the step tasks move to the new build.
        run.build_id = index.build_id
        conn.execute(
            "UPDATE step_tasks SET build_id = %s WHERE run_id = %s", (index.build_id, run_id)
        )
    if not row_done:
        sets, params = index_update(run, index, now)
        params.append(run_id)
        conn.execute(run_update(sets), params)
    if index.status.terminal:
        conn.execute("DELETE FROM step_tasks WHERE run_id = %s", (run_id,))
    else:
        _apply_steps(conn, run_id, run.build_id, index.steps)
    for hook in index.hooks:
        _upsert_hook(conn, run_id, hook, now)


_UPSERT_TASK = (
    " ON CONFLICT (run_id, step_id) DO UPDATE SET attempt = EXCLUDED.attempt,"
    " available_at = EXCLUDED.available_at, lease_owner = EXCLUDED.lease_owner"
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
            "lease_owner) SELECT run_id, %s, build_id, %s, %s, %s FROM runs WHERE run_id = %s"
            + _UPSERT_TASK
        )
        tasks: list[tuple[Any, ...]] = [
            (step_id, task.attempt, task.available_at, task.owner, run_id)
            for step_id, task in steps.items()
            if task is not None
        ]
    else:
        query = (
            "INSERT INTO step_tasks (run_id, step_id, build_id, attempt, available_at, "
            "lease_owner) VALUES (%s, %s, %s, %s, %s, %s)" + _UPSERT_TASK
        )
        tasks = [
            (run_id, step_id, build_id, task.attempt, task.available_at, task.owner)
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
    )


def run_filter(where: RunFilter) -> tuple[sql.Composable, dict[str, Any]]:
    """The ``WHERE`` condition of a filter (cursor and limit aside) and its parameters."""
    conditions: list[str] = ["TRUE"]
    params: dict[str, Any] = {}
    if where.statuses:
        conditions.append("status = ANY(%(statuses)s)")
        params["statuses"] = [status.value for status in where.statuses]
    if where.workflow is not None:
        conditions.append("workflow = %(workflow)s")
        params["workflow"] = where.workflow
    if where.build_id is not None:
        conditions.append("build_id = %(build_id)s")
        params["build_id"] = where.build_id
    if where.since is not None:
        conditions.append("created_at >= %(since)s")
        params["since"] = where.since
    if where.until is not None:
        conditions.append("created_at < %(until)s")
        params["until"] = where.until
    if where.failing:
        conditions.append("failing IS NOT NULL")
    if where.waiting_on is not None:
        conditions.append(
            "waiting_on IS NOT NULL AND strpos(' ' || waiting_on || ' ', %(needle)s) > 0"
        )
        params["needle"] = waiting_needle(where.waiting_on)
    if where.idle_since is not None:
        conditions.append("updated_at <= %(idle_since)s")
        params["idle_since"] = where.idle_since
    if where.top_level:
        conditions.append("parent_run_id IS NULL")
    return sql.SQL(" AND ".join(conditions)), params


def utc(value: datetime) -> datetime:
    """A ``timestamptz`` read back, as UTC (the store's sessions run in UTC anyway)."""
    return value.astimezone(UTC)
