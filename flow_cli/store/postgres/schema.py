"""Flow's PostgreSQL schema: its versions and their migrations.

The version lives in ``flow_meta`` (key ``schema_version``). Opening a store brings the schema up to
``SCHEMA_VERSION`` by running the missing migrations in order, in one transaction, under an advisory
lock so that many workers starting at once neither race on ``CREATE`` nor apply a step twice. A
database written by a newer Flow is refused rather than guessed at.

Only ``flow_cli.store.postgres`` imports this package, so psycopg is never imported by
``import flow_cli.store``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from psycopg import sql

from flow_cli.errors import DatabaseMissing, StoreError
from flow_cli.model.status import RunStatus
from flow_cli.store.postgres.batch import Connection
from flow_cli.store.postgres.limited import BUCKET_END

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
    # Idle workers offered for hand-offs (``postgres.handoffs``). Unlogged: an offer is not
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


def _v6_run_errors(conn: Connection) -> None:
    # Why a run failed or its decisions fail (`flow runs`' reason, --error-type), filled for the
    # runs recorded before by the rule new writes follow (``store.run_error``).
    from flow_cli.store.run_error import error_of, failing_error

    conn.execute("ALTER TABLE runs ADD COLUMN error_type text, ADD COLUMN error text")
    conn.execute(
        "CREATE INDEX runs_error_type ON runs (error_type, created_at, created_order) "
        "WHERE error_type IS NOT NULL"
    )
    failed = conn.execute(
        "SELECT r.run_id, e.data FROM runs r JOIN events e ON e.run_id = r.run_id "
        "AND e.sequence = r.last_sequence WHERE r.status = 'Failed' "
        "AND e.event_key = 'run_failed'"
    ).fetchall()
    found = [(error_of((data or {}).get("error")), run_id) for run_id, data in failed]
    failing = conn.execute(
        "SELECT run_id, failing FROM runs WHERE failing IS NOT NULL AND NOT status = ANY(%s)",
        ([s.value for s in RunStatus if s.terminal],),
    ).fetchall()
    found += [(failing_error(text), run_id) for run_id, text in failing]
    if found:
        with conn.cursor() as cursor:
            cursor.executemany(
                "UPDATE runs SET error_type = %s, error = %s WHERE run_id = %s",
                [(error.error_type, error.text, run_id) for error, run_id in found],
            )


def _v7_schedules(conn: Connection) -> None:
    # Schedules (`flow schedule`): definition and firing state as JSON text, and when a worker
    # should next look at each; the partial index holds only live ones, so an idle worker's
    # look is one index probe.
    conn.execute(
        """
        CREATE TABLE IF NOT EXISTS schedules (
            schedule_id text        PRIMARY KEY,
            spec        text        NOT NULL,
            state       text        NOT NULL,
            due_at      timestamptz,
            version     bigint      NOT NULL
        )
        """
    )
    conn.execute(
        "CREATE INDEX IF NOT EXISTS schedules_due ON schedules (due_at) WHERE due_at IS NOT NULL"
    )


def _v8_step_heartbeats(conn: Connection) -> None:
    # Each step's last heartbeat (info.heartbeat), written with a lease renewal rather than as
    # an event, read by the step's next attempt and by `flow show`.
    conn.execute(
        """
        CREATE TABLE IF NOT EXISTS step_heartbeats (
            run_id  text        NOT NULL,
            step_id text        NOT NULL,
            attempt integer     NOT NULL,
            worker  text        NOT NULL,
            details jsonb       NOT NULL,
            at      timestamptz NOT NULL,
            PRIMARY KEY (run_id, step_id)
        )
        """
    )


def _v9_run_attributes(conn: Connection) -> None:
    # Search attributes (`flow runs --attr k=v`): one row per run and key, the value as its
    # JSON text (what filters compare); run_attributes_value serves the filter. Runs recorded
    # before had no way to set attributes: nothing to fill in.
    conn.execute(
        """
        CREATE TABLE IF NOT EXISTS run_attributes (
            run_id text NOT NULL,
            key    text NOT NULL,
            value  text NOT NULL,
            PRIMARY KEY (run_id, key)
        )
        """
    )
    conn.execute(
        "CREATE INDEX IF NOT EXISTS run_attributes_value ON run_attributes (key, value, run_id)"
    )


def _v10_leases(conn: Connection) -> None:
    # Named leases that keep a maintenance job (background retention) to one worker.
    conn.execute(
        "CREATE TABLE IF NOT EXISTS leases (name text PRIMARY KEY, owner text NOT NULL, "
        "held_until timestamptz NOT NULL)"
    )


def _v11_priorities_pauses(conn: Connection) -> None:
    # Run priorities (flow start --priority) on runs and their step tasks, leading the indexes
    # the leases read (priority, then due time), and the pauses table (flow pause); see
    # flow_cli.store.pauses_sql. Runs recorded before have the default, 5.
    from flow_cli.store.pauses_sql import priority_indexes_and_pauses

    conn.execute("ALTER TABLE runs ADD COLUMN IF NOT EXISTS priority smallint NOT NULL DEFAULT 5")
    conn.execute(
        "ALTER TABLE step_tasks ADD COLUMN IF NOT EXISTS priority smallint NOT NULL DEFAULT 5"
    )
    priority_indexes_and_pauses(
        conn.execute, runs_tie=", created_order", tasks_tie=", run_id, step_id", time="timestamptz"
    )


def _v12_limits(conn: Connection) -> None:
    """Flow-control limits (``flow limits``): what code declared and an operator overrode per
    ``step:NAME`` / ``workflow:NAME``, the starts a rate counts, and each step task's name
    (the limits are enforced by it)."""
    conn.execute(
        """
        CREATE TABLE IF NOT EXISTS limits (
            kind              text    NOT NULL,
            name              text    NOT NULL,
            code_concurrency  integer,
            code_rate         text,
            code_rate_count   integer,
            code_rate_seconds integer,
            code_key          text,
            overridden        integer NOT NULL DEFAULT 0,
            concurrency       integer,
            rate_count        integer,
            rate_seconds      integer,
            limited           integer NOT NULL DEFAULT 0,
            PRIMARY KEY (kind, name)
        )
        """
    )
    conn.execute(
        "CREATE TABLE IF NOT EXISTS limit_starts (name text NOT NULL, "
        "started_at timestamptz NOT NULL)"
    )
    conn.execute("CREATE INDEX IF NOT EXISTS limit_starts_name ON limit_starts (name, started_at)")
    conn.execute(
        "CREATE TABLE IF NOT EXISTS run_slots (run_id text PRIMARY KEY, workflow text NOT NULL, "
        "key text NOT NULL, admitted integer NOT NULL DEFAULT 0)"
    )
    conn.execute("CREATE INDEX IF NOT EXISTS run_slots_workflow ON run_slots (workflow, admitted)")
    conn.execute("ALTER TABLE step_tasks ADD COLUMN IF NOT EXISTS step_name text")
    # No index on step_name: every step task has one, so it would cost every step's insert,
    # lease and delete an index entry (W1 on SQLite: 0.88x) to serve only the leases of
    # limited steps, which read step_tasks (the open attempts alone) without it.
    conn.execute("DROP INDEX IF EXISTS step_tasks_step_name")


def _v13_limit_start_counts(conn: Connection) -> None:
    """The starts under each rate, counted by time bucket and connection (``limited``): what
    a commit under a generous limit reads instead of every start in the window."""
    conn.execute(
        "CREATE TABLE IF NOT EXISTS limit_start_counts (name text NOT NULL, "
        "bucket_end timestamptz NOT NULL, pid integer NOT NULL, n integer NOT NULL, "
        "PRIMARY KEY (name, bucket_end, pid))"
    )
    # The starts already in a window, each counted in the bucket its time falls in.
    conn.execute(
        "INSERT INTO limit_start_counts (name, bucket_end, pid, n) "
        f"SELECT s.name, {BUCKET_END.format(at='s.started_at')}, 0, count(*) "
        "FROM limit_starts s JOIN limits l ON l.kind = 'step' AND l.name = s.name "
        "WHERE l.rate_seconds IS NOT NULL GROUP BY 1, 2 ON CONFLICT DO NOTHING"
    )


def _v14_offer_slots(conn: Connection) -> None:
    """How many starts an idle worker's offer may still serve (``handoffs``): one claim no
    longer takes the whole offer. Offers made before it serve one start, as they did."""
    conn.execute(
        "ALTER TABLE idle_workers ADD COLUMN IF NOT EXISTS slots integer NOT NULL DEFAULT 1"
    )


MIGRATIONS: tuple[Migration, ...] = (
    Migration(1, "events, runs, step_tasks, hooks", _v1_base_tables),
    Migration(2, "runs.waiting_on, hook creation time and metadata, filter indexes", _v2_triage),
    Migration(3, "workers registry, runs.patches", _v3_fleet),
    Migration(4, "runs.failing_since", _v4_failing_since),
    Migration(5, "idle_workers (hand-offs)", _v5_idle_workers),
    Migration(6, "runs.error_type and runs.error", _v6_run_errors),
    Migration(7, "schedules", _v7_schedules),
    Migration(8, "step_heartbeats", _v8_step_heartbeats),
    Migration(9, "run_attributes (search attributes)", _v9_run_attributes),
    Migration(10, "leases", _v10_leases),
    Migration(11, "runs.priority, step_tasks.priority, pauses", _v11_priorities_pauses),
    Migration(12, "limits, limit_starts, run_slots, step_tasks.step_name", _v12_limits),
    Migration(13, "limit_start_counts", _v13_limit_start_counts),
    Migration(14, "idle_workers.slots", _v14_offer_slots),
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
            raise DatabaseMissing(
                f"No Flow database in schema {schema!r}; start a run or a worker against it "
                "first, or check the database URL and its ?schema= option.",
                f"a Flow database in schema {schema!r}",
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


def _ask(conn: Connection, query: str, schema: str) -> Any:
    """The one value ``query`` answers about ``schema`` (a catalog question)."""
    row = conn.execute(query, (schema,)).fetchone()
    return None if row is None else row[0]


def _create_schema(conn: Connection, schema: str) -> None:
    namespace = "SELECT EXISTS (SELECT FROM pg_catalog.pg_namespace WHERE nspname = %s)"
    if not _ask(conn, namespace, schema):
        # Only when missing: CREATE SCHEMA needs a privilege that a Flow user of an existing,
        # DBA-made schema may not have, even with IF NOT EXISTS.
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
    else:
        others = _ask(
            conn,
            "SELECT string_agg(tablename, ', ' ORDER BY tablename) FROM pg_tables "
            "WHERE schemaname = %s AND tablename <> 'flow_meta'",
            schema,
        )
        if others:
            raise StoreError(
                f"PostgreSQL schema {schema!r} already holds tables that are not Flow's "
                f"({others}); give Flow a schema of its own."
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
    meta = (
        "SELECT EXISTS (SELECT FROM pg_catalog.pg_tables "
        "WHERE schemaname = %s AND tablename = 'flow_meta')"
    )
    if not _ask(conn, meta, schema):
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
