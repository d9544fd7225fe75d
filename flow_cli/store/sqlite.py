"""The default store: one SQLite file shared by many threads and processes.

Durability: the journal is WAL and ``synchronous=FULL`` by default, so an acknowledged event
survives a power cut; leases, and a step's ``step_started`` with its lease, do not wait for the
disk (see ``_LEASE_SYNC``). ``synchronous="NORMAL"`` (``sqlite:///flow.db?synchronous=NORMAL``)
is the documented speed trade-off: a power cut may lose the last commits, never consistency.

Concurrency: each thread gets its own connection. Every write is one ``BEGIN IMMEDIATE``
transaction, which takes the write lock up front: a writer that finds the lock taken waits in the
busy handler (up to ``busy_timeout_ms``) instead of failing when another connection commits
between its read and its write, as a deferred transaction would.

Schema: ``flow_meta.schema_version`` records the version. Opening a database runs the missing
``MIGRATIONS`` in order, in one transaction, and refuses a database written by a newer Flow.
Every ``sqlite3`` error leaving a public method becomes a one-sentence ``StoreError``.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import sqlite3
import threading
import time
import urllib.parse
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, TypeVar

from flow_cli.errors import (
    ConfigError,
    EventConflict,
    FlowError,
    HookTokenInUse,
    RunNotFound,
    StoreError,
)
from flow_cli.model.events import (
    Event,
    EventEnvelope,
    RunStarted,
    StepStarted,
    event_from_data,
    event_json,
)
from flow_cli.model.status import TERMINAL_STATUSES, RunStatus
from flow_cli.store.doorbell import Doorbell
from flow_cli.store.due import DueHints
from flow_cli.store.integrity import structural_problems
from flow_cli.store.protocol import (
    GROUP_ERRORS,
    GROUPINGS,
    KEEP,
    NO_GROUP,
    WORKER_RETENTION,
    AppendViaCommit,
    BuildUsage,
    CommitGroup,
    HookListing,
    HookRecord,
    NewRun,
    NoHandoffs,
    ReadAfter,
    RunCount,
    RunFilter,
    RunIndex,
    RunRecord,
    RunState,
    StepLease,
    StoreStats,
    StreamWrite,
    WorkerInfo,
    assemble_states,
    build_usages,
    makes_work,
    waiting_needle,
    wanted_after,
    with_histories,
)

P = ParamSpec("P")
R = TypeVar("R")
if TYPE_CHECKING:
    from sqlite_utils import Database

Migration = Callable[["Database"], None]

SYNCHRONOUS_MODES = ("OFF", "NORMAL", "FULL", "EXTRA")
_LEASE_SYNC = "NORMAL"
"""The mode of lease commits (a step's lease with its ``step_started``, a run's lease, a lease
renewed, parking, a heartbeat): committed to the WAL without waiting for the disk. A process that
crashes loses nothing: the commit is in the operating system's hands. In WAL mode a power cut (or
an operating system crash) can only drop a suffix of the commits, since every later durable
commit, by any process, flushes the ones before it; and it stops every process that uses the
file, as WAL mode keeps them all on one machine. So no process outlives the loss holding a
snapshot of a ``step_started`` that is gone (on PostgreSQL workers do: see its ``lease_steps``),
and what the power cut takes is as if the machine had stopped just before those leases: the step
runs again, which at-least-once steps allow."""
_RELAXABLE = ("FULL", "EXTRA")
_POLL_SECONDS = 0.05
"""How often ``wait_for_change`` looks at ``PRAGMA data_version`` where doorbells cannot be used."""
_FALLBACK_POLL_SECONDS = 1.0
"""How often it looks anyway while it sleeps on its doorbell (a missed ring costs this much)."""
_LOCK_PAUSE_FIRST = 0.0002
_LOCK_PAUSE_MAX = 0.002
"""A writer waiting for another process's write lock tries again after this long at first,
then after pauses growing by half up to the second (or at once when the doorbell rings)."""
_HISTORIES_PER_QUERY = 400
"""Runs one ``read_histories`` statement reads (two parameters each: under SQLite's limit)."""


def _v1_initial(db: Database) -> None:
    """Event streams, plus the runs, step task and hook indexes derived from them."""
    db.create_table("flow_meta", {"key": str, "value": str}, pk="key", not_null={"value"})
    db.create_table(
        "events",
        {"run_id": str, "sequence": int, "event_key": str, "recorded_at": str, "data": str},
        pk=("run_id", "sequence"),
        not_null={"event_key", "recorded_at", "data"},
    )
    runs = db.create_table(
        "runs",
        {
            "run_id": str,
            "workflow": str,
            "status": str,
            "build_id": str,
            "parent_run_id": str,
            "created_at": str,
            "updated_at": str,
            "last_sequence": int,
            "decide_at": str,
            "lease_owner": str,
            "failing": str,
        },
        pk="run_id",
        not_null={"workflow", "status", "build_id", "created_at", "updated_at", "last_sequence"},
    )
    # decide_at serves the scheduler (cost follows the number due); the rest serve `flow runs`.
    for column in ("decide_at", "status", "workflow", "created_at"):
        runs.create_index([column], index_name=f"runs_{column}")
    tasks = db.create_table(
        "step_tasks",
        {
            "run_id": str,
            "step_id": str,
            "build_id": str,
            "attempt": int,
            "available_at": str,
            "lease_owner": str,
        },
        pk=("run_id", "step_id"),
        not_null={"build_id", "attempt", "available_at"},
    )
    tasks.create_index(["available_at"], index_name="step_tasks_available_at")
    db.create_table(
        "hooks",
        {"token": str, "run_id": str, "hook_id": str, "resolved": int},
        pk="token",
        not_null={"run_id", "hook_id", "resolved"},
    )


def _v3_fleet(db: Database) -> None:
    """The workers registry (``flow workers``, ``flow doctor``) and each run's patch markers
    (``flow builds``), copied from ``run_started`` for the runs that exist already."""
    conn = db.conn
    conn.execute(
        "CREATE TABLE workers (worker_id TEXT PRIMARY KEY, host TEXT NOT NULL, "
        "pid INTEGER NOT NULL, builds TEXT NOT NULL, started_at TEXT NOT NULL, "
        "heartbeat_at TEXT NOT NULL, heartbeat_seconds REAL NOT NULL, stopped_at TEXT)"
    )
    conn.execute("ALTER TABLE runs ADD COLUMN patches TEXT")
    conn.execute(
        "UPDATE runs SET patches = (SELECT json_extract(e.data, '$.spec.patches') FROM events e "
        "WHERE e.run_id = runs.run_id AND e.sequence = 1)"
    )


_TERMINAL_LIST = ", ".join(f"'{s.value}'" for s in sorted(TERMINAL_STATUSES))
"""The terminal statuses as an SQL list: hooks of ended runs are not open."""

_OPEN_LIST = ", ".join(f"'{s.value}'" for s in RunStatus if not s.terminal)
"""The open statuses as an SQL list (``status IN`` is served by the status index)."""

_BUILD_KEY = "substr(build_id, 1)"
"""The indexed expression that `--build-id` filters on (see ``_v2_triage``)."""


def _v2_triage(db: Database) -> None:
    """Filters for `flow runs`/`count` served by indexes, and what `flow hook list` shows.

    ``runs.waiting_on`` holds what an open run waits on (``KIND:ID`` entries, NULL when nothing);
    runs opened before this version get theirs with their next event. Each listing index ends
    in ``created_at`` so that "newest first" within one filter reads the index in order.
    """
    conn = db.conn
    conn.execute("ALTER TABLE runs ADD COLUMN waiting_on TEXT")
    conn.execute("ALTER TABLE hooks ADD COLUMN created_at TEXT")
    conn.execute("ALTER TABLE hooks ADD COLUMN metadata TEXT")
    for name, columns in (
        ("runs_status_created", "status, created_at"),
        ("runs_workflow_created", "workflow, created_at"),
        ("runs_parent_created", "parent_run_id, created_at"),
        ("runs_updated", "updated_at"),
    ):
        conn.execute(f"CREATE INDEX {name} ON runs ({columns})")
    # On an expression that only `flow runs --build-id` uses: a plain build_id index would lure
    # the scheduler's lease query (build_id IN ... ORDER BY decide_at) away from runs_decide_at.
    conn.execute(f"CREATE INDEX runs_build_created ON runs ({_BUILD_KEY}, created_at)")
    # Superseded by the two above, which also give the listing order.
    conn.execute("DROP INDEX runs_status")
    conn.execute("DROP INDEX runs_workflow")
    conn.execute("CREATE INDEX runs_failing ON runs (created_at) WHERE failing IS NOT NULL")
    conn.execute("CREATE INDEX runs_waiting ON runs (created_at) WHERE waiting_on IS NOT NULL")
    conn.execute("CREATE INDEX hooks_run ON hooks (run_id, created_at)")
    conn.execute("CREATE INDEX hooks_open ON hooks (created_at) WHERE resolved = 0")
    # Hooks indexed before this version: their creation time and metadata from history.
    conn.execute(
        "UPDATE hooks SET (created_at, metadata) = ("
        " SELECT e.recorded_at, json_quote(json_extract(e.data, '$.metadata')) FROM events e"
        " WHERE e.run_id = hooks.run_id AND e.event_key = 'hook_created'"
        " AND json_extract(e.data, '$.hook_id') = hooks.hook_id ORDER BY e.sequence LIMIT 1)"
    )


def _v4_failing_since(db: Database) -> None:
    """When each failing run's decisions began to fail (``flow doctor``'s since). Runs failing
    already get the time of their last ``decision_failed``."""
    conn = db.conn
    conn.execute("ALTER TABLE runs ADD COLUMN failing_since TEXT")
    conn.execute(
        "UPDATE runs SET failing_since = coalesce((SELECT max(e.recorded_at) FROM events e "
        "WHERE e.run_id = runs.run_id AND e.event_key = 'decision_failed'), updated_at) "
        "WHERE failing IS NOT NULL"
    )


def _v5_run_errors(db: Database) -> None:
    """Why a run failed or its decisions fail (``flow runs``' reason, ``--error-type``), filled
    for the runs recorded before by the rule new writes follow (``store.run_error``)."""
    from flow_cli.store.run_error import error_of, failing_error

    conn = db.conn
    conn.execute("ALTER TABLE runs ADD COLUMN error_type TEXT")
    conn.execute("ALTER TABLE runs ADD COLUMN error TEXT")
    conn.execute(
        "CREATE INDEX runs_error_type ON runs (error_type, created_at) WHERE error_type IS NOT NULL"
    )
    found = [
        (error_of(json.loads(data).get("error")), run_id)
        for run_id, data in conn.execute(
            "SELECT r.run_id, e.data FROM runs r JOIN events e ON e.run_id = r.run_id "
            "AND e.sequence = r.last_sequence WHERE r.status = 'Failed' "
            "AND e.event_key = 'run_failed'"
        )
    ]
    found += [
        (failing_error(failing), run_id)
        for run_id, failing in conn.execute(
            f"SELECT run_id, failing FROM runs WHERE failing IS NOT NULL "
            f"AND status NOT IN ({_TERMINAL_LIST})"
        )
    ]
    conn.executemany(
        "UPDATE runs SET error_type = ?, error = ? WHERE run_id = ?",
        [(error.error_type, error.text, run_id) for error, run_id in found],
    )


MIGRATIONS: list[tuple[int, Migration]] = [
    (1, _v1_initial),
    (2, _v2_triage),
    (3, _v3_fleet),
    (4, _v4_failing_since),
    (5, _v5_run_errors),
]
"""Every schema version in order; the last one is what this code reads and writes."""


def _ts(value: datetime) -> str:
    """Fixed-width UTC text, so string order is time order (a naive time is taken as UTC)."""
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.astimezone(UTC).isoformat(timespec="microseconds")


def _ts_or_none(value: datetime | None) -> str | None:
    return None if value is None else _ts(value)


def _dt(text: str) -> datetime:
    return datetime.fromisoformat(text)


def _dt_or_none(text: str | None) -> datetime | None:
    return None if text is None else _dt(text)


def _is_busy(exc: sqlite3.OperationalError) -> bool:
    """SQLITE_BUSY: another connection holds the lock ("database is locked")."""
    code: int | None = getattr(exc, "sqlite_errorcode", None)
    if code is not None:
        return code & 0xFF == sqlite3.SQLITE_BUSY  # extended codes (BUSY_RECOVERY...) too
    return "locked" in str(exc)


def _insert_events(
    conn: sqlite3.Connection, run_id: str, expected: int, rows: list[tuple[str, str]], stamp: str
) -> None:
    """Insert encoded events as sequences ``expected + 1, ...``; ``EventConflict`` when the
    primary key catches a writer the sequence check could not see."""
    try:
        conn.executemany(
            "INSERT INTO events (run_id, sequence, event_key, recorded_at, data) "
            "VALUES (?, ?, ?, ?, ?)",
            [(run_id, expected + i, k, stamp, d) for i, (k, d) in enumerate(rows, 1)],
        )
    except sqlite3.IntegrityError:
        raise EventConflict(run_id, expected, expected) from None


def _encode(events: Sequence[Event]) -> list[tuple[str, str]]:
    return [(e.event_key(), event_json(e)) for e in events]


def _rows(write: StreamWrite) -> list[tuple[str, str]]:
    """The write's events as (key, JSON) rows; the JSON the writer made already if it did."""
    data = write.data
    if data is None or len(data) != len(write.events):
        return _encode(write.events)
    return [(e.event_key(), text) for e, text in zip(write.events, data, strict=True)]


def _guarded(
    method: Callable[Concatenate[SQLiteStore, P], R],
) -> Callable[Concatenate[SQLiteStore, P], R]:
    """Turn any sqlite3 error escaping ``method`` into a ``StoreError``."""

    @functools.wraps(method)
    def wrapper(self: SQLiteStore, /, *args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return method(self, *args, **kwargs)
        except sqlite3.Error as exc:
            raise self._store_error(exc) from exc

    return wrapper


class SQLiteStore(AppendViaCommit, NoHandoffs):
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

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        synchronous: str = "FULL",
        busy_timeout_ms: int = 5000,
        create: bool = True,
        read_only: bool = False,
    ) -> None:
        self.path = Path(path).expanduser()
        self.read_only = read_only
        self.synchronous = synchronous.upper()
        if self.synchronous not in SYNCHRONOUS_MODES:
            raise ConfigError(
                f"SQLite synchronous={synchronous!r} is not one of {', '.join(SYNCHRONOUS_MODES)}."
            )
        self.busy_timeout_ms = int(busy_timeout_ms)
        self.stats = StoreStats()
        self._conns: dict[threading.Thread, sqlite3.Connection] = {}
        self._conns_lock = threading.Lock()
        self._closed = False
        # Local waiters without a doorbell are woken through this condition.
        self._changed = threading.Condition()
        self._changes = 0
        self._write_lock = threading.Lock()
        self._doorbell = Doorbell(self.path)
        self._due = DueHints()
        self._check_path(create and not read_only)
        try:
            self._ensure_schema(self._conn(), create and not read_only)
        except sqlite3.Error as exc:
            self.close()
            raise self._store_error(exc) from exc
        except BaseException:
            self.close()
            raise

    # -- connections, transactions, errors ------------------------------------------------------

    def _check_path(self, create: bool) -> None:
        if str(self.path) == ":memory:":
            raise StoreError(
                "An in-memory SQLite database cannot be shared; use memory:// instead."
            )
        if self.path.is_dir():
            raise StoreError(f"{self.path} is a directory, not a Flow database file.")
        if not self.path.exists():
            if not create:
                raise StoreError(
                    f"No Flow database at {self.path}; run `flow start` to create one, "
                    "or pass --db to point at an existing database."
                )
            if not self.path.parent.is_dir():
                raise StoreError(
                    f"Cannot create Flow database {self.path}: "
                    f"directory {self.path.parent} does not exist."
                )
        elif not os.access(self.path, os.R_OK):
            raise StoreError(f"Cannot read Flow database {self.path}: permission denied.")

    def _conn(self) -> sqlite3.Connection:
        """This thread's connection, opened on first use."""
        thread = threading.current_thread()
        conn = self._conns.get(thread)
        if conn is not None:
            return conn
        if self._closed:
            raise StoreError(f"The store for {self.path} is closed.")
        conn = self._read_only_conn() if self.read_only else self._open(self.path)
        try:
            conn.execute(f"PRAGMA busy_timeout = {self.busy_timeout_ms}")
            conn.execute(f"PRAGMA synchronous = {self.synchronous}")
        except BaseException:
            conn.close()
            raise
        with self._conns_lock:
            # Pool threads come and go: close what threads that ended left behind.
            for dead in [t for t in self._conns if not t.is_alive()]:
                self._conns.pop(dead).close()
            self._conns[thread] = conn
        return conn

    def _open(self, target: str | Path, *, uri: bool = False) -> sqlite3.Connection:
        return sqlite3.connect(
            target,
            uri=uri,
            isolation_level=None,  # transactions are explicit: BEGIN IMMEDIATE ... COMMIT
            check_same_thread=False,  # close() may run on another thread
            timeout=self.busy_timeout_ms / 1000,
        )

    def _read_only_conn(self) -> sqlite3.Connection:
        """A ``mode=ro`` connection; ``immutable=1`` where even that cannot open the file.

        A WAL database needs its ``-shm`` file: in a read-only directory or on a read-only
        mount SQLite cannot create it, and ``mode=ro`` fails with "unable to open". Then, if no
        ``-wal`` file holds commits that are not yet in the main file, nothing can change the
        file under us and ``immutable=1`` reads it without any lock or ``-shm``.
        """
        base = f"file:{urllib.parse.quote(str(self.path.absolute()))}"
        conn = self._open(f"{base}?mode=ro", uri=True)
        try:
            conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
            return conn
        except sqlite3.OperationalError as exc:
            conn.close()
            if "unable to open" not in str(exc):
                raise
        wal = Path(f"{self.path}-wal")
        if wal.exists() and wal.stat().st_size > 0:
            raise StoreError(
                f"Flow database {self.path} cannot be read here: its directory is read-only and "
                f"{wal.name} holds commits not yet in the main file. Copy the database with its "
                "-wal file to a writable directory, or open it once where it is writable."
            )
        return self._open(f"{base}?immutable=1", uri=True)

    @contextlib.contextmanager
    def _write(self, *, durable: bool = True) -> Iterator[sqlite3.Connection]:
        """One ``BEGIN IMMEDIATE`` transaction, committed on success, rolled back otherwise.

        ``durable=False`` is for leases (see ``_LEASE_SYNC``, which says which writes those are):
        the commit does not wait for the disk when the store's mode would make it wait.
        """
        conn = self._conn()
        relaxed = not durable and self.synchronous in _RELAXABLE
        # Threads of one process queue here, not in SQLite's busy handler, which sleeps in
        # steps of up to 100 ms; other processes still meet the busy timeout.
        with self._write_lock:
            if relaxed:
                conn.execute(f"PRAGMA synchronous = {_LEASE_SYNC}")
            try:
                self._begin_immediate(conn)
                try:
                    yield conn
                    conn.execute("COMMIT")
                    if durable:
                        self.stats.durable_commits += 1
                    else:
                        self.stats.index_commits += 1
                    self._due.wrote()
                except BaseException:
                    if conn.in_transaction:
                        conn.execute("ROLLBACK")
                    raise
            finally:
                if relaxed:
                    conn.execute(f"PRAGMA synchronous = {self.synchronous}")
        with self._changed:
            self._changes += 1
            self._changed.notify_all()

    def _begin_immediate(self, conn: sqlite3.Connection) -> None:
        """Take the write lock, waiting for it here rather than in SQLite's busy handler.

        The busy handler sleeps 1, 2, 5, 10, ... then 100 ms between tries: a writer that meets a
        process committing every millisecond or two (a busy worker) may sleep for tens of
        milliseconds, and for up to a second when its tries keep landing inside the other's
        transactions. Here a writer tries again as soon as the doorbell rings (every commit
        rings it, after releasing the lock), and at least every ``_LOCK_PAUSE_MAX`` seconds,
        until the busy timeout. Only ``BEGIN IMMEDIATE`` runs without the busy handler: every
        other statement still waits in it.
        """
        conn.execute("PRAGMA busy_timeout = 0")
        try:
            self._begin_waiting(conn)
        finally:
            conn.execute(f"PRAGMA busy_timeout = {self.busy_timeout_ms}")

    def _begin_waiting(self, conn: sqlite3.Connection) -> None:
        deadline: float | None = None
        rung = False
        pause = _LOCK_PAUSE_FIRST
        while True:
            try:
                conn.execute("BEGIN IMMEDIATE")
                return
            except sqlite3.OperationalError as exc:
                if not _is_busy(exc):
                    raise
                if deadline is None:  # the first refusal: wait from now on
                    deadline = time.monotonic() + self.busy_timeout_ms / 1000
                    # The pauses bound the wait where no ring comes: the holder may not ring
                    # (a process without doorbells, a plain sqlite3 connection), or this
                    # process's ``wait_for_change`` may have taken the ring from its shared
                    # doorbell.
                    rung = self._doorbell.listen()
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise
            if rung:
                self._doorbell.wait(min(pause, remaining))
            else:
                time.sleep(min(pause, remaining))
            pause = min(pause * 1.5, _LOCK_PAUSE_MAX)

    def _store_error(self, exc: sqlite3.Error) -> StoreError:
        text = str(exc)
        if "locked" in text or "busy" in text:
            return StoreError(
                f"Flow database {self.path} is locked by another connection; gave up after "
                f"{self.busy_timeout_ms} ms (retry, or raise the busy timeout)."
            )
        if "not a database" in text:
            return StoreError(f"{self.path} is not a Flow database (not an SQLite file).")
        if "malformed" in text:
            return StoreError(f"Flow database {self.path} is corrupt ({text}).")
        if self.read_only and "readonly" in text:
            return StoreError(
                f"Flow database {self.path} was opened read-only; this command cannot write."
            )
        if "disk is full" in text:
            return StoreError(
                f"Flow database {self.path}: the disk is full; nothing was written (free space "
                "on its filesystem; a worker retries on its own)."
            )
        if "readonly" in text or "unable to open" in text:
            return StoreError(f"Cannot open Flow database {self.path} for writing ({text}).")
        return StoreError(f"Flow database {self.path} failed: {text}.")

    # -- schema -----------------------------------------------------------------------------------

    def _enter_wal(self, conn: sqlite3.Connection) -> None:
        """Switch a new file to WAL (persistent: once per file). SQLite may refuse at once,
        without waiting in its busy handler, while another opener of the same new file holds a
        lock; so try again, briefly, until the busy timeout."""
        deadline = time.monotonic() + self.busy_timeout_ms / 1000
        pause = 0.001
        while True:
            try:
                conn.execute("PRAGMA journal_mode = WAL")
                return
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) or time.monotonic() >= deadline:
                    raise
            time.sleep(pause)
            pause = min(pause * 2, 0.05)

    def _ensure_schema(self, conn: sqlite3.Connection, create: bool) -> None:
        latest = MIGRATIONS[-1][0]
        # Both reads in one read transaction: another opener may create the schema between them.
        conn.execute("BEGIN")
        try:
            found = self._schema_version(conn)
            tables = conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]
        finally:
            conn.execute("COMMIT")
        if found is None:
            if tables:
                raise StoreError(
                    f"{self.path} is an SQLite database but not a Flow database "
                    "(it has no flow_meta table)."
                )
            if not create:
                raise StoreError(
                    f"No Flow database at {self.path}; run `flow start` to create one, "
                    "or pass --db to point at an existing database."
                )
        self._refuse_newer(found, latest)
        if self.read_only:
            if found != latest:
                raise StoreError(
                    f"Flow database {self.path} has schema version {found}, older than this "
                    f"Flow's ({latest}); run a command that writes (e.g. `flow tick`) on it once "
                    "to upgrade it, then read it read-only."
                )
            return
        if conn.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
            self._enter_wal(conn)
        if found == latest:
            return
        with self._write():
            found = self._schema_version(conn)  # another process may have upgraded meanwhile
            self._refuse_newer(found, latest)
            from sqlite_utils import Database  # only migrations need it; keeps start-up light

            db = Database(conn, execute_plugins=False, recursive_triggers=False)
            version = found or 0
            for target, migrate in MIGRATIONS:
                if target > version:
                    migrate(db)
                    version = target
            conn.execute(
                "INSERT INTO flow_meta (key, value) VALUES ('schema_version', ?) "
                "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                (str(version),),
            )

    def _schema_version(self, conn: sqlite3.Connection) -> int | None:
        """The recorded version, or None when this is not (yet) a Flow database."""
        exists = conn.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'flow_meta'"
        ).fetchone()
        if exists is None:
            return None
        row = conn.execute("SELECT value FROM flow_meta WHERE key = 'schema_version'").fetchone()
        try:
            return int(row[0]) if row is not None else 0
        except ValueError:
            raise StoreError(
                f"Flow database {self.path} has an unreadable schema version {row[0]!r}."
            ) from None

    def _refuse_newer(self, found: int | None, latest: int) -> None:
        if found is not None and found > latest:
            raise StoreError(
                f"Flow database {self.path} has schema version {found}, newer than this Flow "
                f"understands ({latest}); upgrade Flow to use it."
            )

    # -- writes -----------------------------------------------------------------------------------

    def _create(
        self, conn: sqlite3.Connection, run: NewRun, stamp: str, *, must_create: bool
    ) -> bool:
        """Insert the run row and its ``run_started``; False if the id exists and may."""
        spec = run.spec
        inserted = conn.execute(
            "INSERT INTO runs (run_id, workflow, status, build_id, parent_run_id, created_at, "
            "updated_at, last_sequence, decide_at, patches) VALUES (?, ?, ?, ?, ?, ?, ?, 1, ?, ?) "
            "ON CONFLICT (run_id) DO NOTHING",
            (
                run.run_id,
                spec.workflow,
                RunStatus.PENDING.value,
                spec.runtime_build_id,
                spec.parent_run_id,
                stamp if run.created_at is None else _ts(run.created_at),
                stamp,
                _ts_or_none(run.decide_at),
                json.dumps(list(spec.patches)),
            ),
        ).rowcount
        if not inserted:
            if not must_create:
                return False
            # Creating is appending after sequence 0: an existing run id is a conflict.
            found = conn.execute(
                "SELECT last_sequence FROM runs WHERE run_id = ?", (run.run_id,)
            ).fetchone()
            raise EventConflict(run.run_id, 0, found[0] if found else 0)
        # The row was inserted at sequence 1 with its run_started: no read, no second write.
        _insert_events(conn, run.run_id, 0, _encode([RunStarted(spec=spec, seed=run.seed)]), stamp)
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
        spec, index = run.spec, write.index
        terminal = index.status.terminal
        events = [*_encode([RunStarted(spec=spec, seed=run.seed)]), *rows]
        decide_at = run.decide_at if index.decide_at is KEEP else index.decide_at
        failing = None if index.failing is KEEP else index.failing
        inserted = conn.execute(
            "INSERT INTO runs (run_id, workflow, status, build_id, parent_run_id, created_at, "
            "updated_at, last_sequence, decide_at, patches, failing, failing_since, waiting_on, "
            "error_type, error) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (run_id) DO NOTHING",
            (
                run.run_id,
                spec.workflow,
                index.status.value,
                spec.runtime_build_id if index.build_id is KEEP else index.build_id,
                spec.parent_run_id,
                stamp if run.created_at is None else _ts(run.created_at),
                stamp,
                len(events),
                None if terminal else _ts_or_none(decide_at),
                json.dumps(list(spec.patches)),
                failing,
                None if failing is None else stamp,
                None if terminal or index.waiting_on is KEEP else index.waiting_on,
                *_error_values(index),
            ),
        ).rowcount
        if not inserted:
            found = conn.execute(
                "SELECT last_sequence FROM runs WHERE run_id = ?", (run.run_id,)
            ).fetchone()
            raise EventConflict(run.run_id, 0, found[0] if found else 0)
        _insert_events(conn, run.run_id, 0, events, stamp)
        self._apply_index(conn, run.run_id, index, stamp)

    def _apply_write(
        self, conn: sqlite3.Connection, write: StreamWrite, rows: list[tuple[str, str]], stamp: str
    ) -> None:
        """Append the write's events after its expected sequence and write its index changes:
        the one place a lost race becomes ``EventConflict``.

        The run's row moves first, in one update guarded by the expected sequence that also
        writes the index, with no read before it (each statement is a round trip through the
        GIL for a busy worker). A write that lost its race changes nothing; only then is the
        row read, to tell a conflict from a missing run."""
        run_id, expected, index = write.run_id, write.expected_sequence, write.index
        sets = ["status = ?", "updated_at = ?", "last_sequence = ?"]
        params: list[Any] = [index.status.value, stamp, expected + len(rows)]
        if index.status.terminal:
            sets.append("decide_at = NULL, lease_owner = NULL")
        elif index.decide_at is not KEEP:
            sets.append("decide_at = ?, lease_owner = NULL")
            params.append(_ts_or_none(index.decide_at))
        if index.failing is not KEEP:
            # SET reads the row as it was: the time is kept while the run goes on failing.
            sets.append(
                "failing = ?, failing_since = CASE WHEN ? IS NULL THEN NULL "
                "WHEN failing IS NULL THEN ? ELSE failing_since END"
            )
            params.extend([index.failing, index.failing, stamp])
        if index.status.terminal:
            sets.append("waiting_on = NULL")
        elif index.waiting_on is not KEEP:
            sets.append("waiting_on = ?")
            params.append(index.waiting_on)
        if index.build_id is not KEEP:
            sets.append("build_id = ?")
            params.append(index.build_id)
        if index.error is not KEEP:
            sets.append("error_type = ?, error = ?")
            params.extend(_error_values(index))
        moved = conn.execute(
            f"UPDATE runs SET {', '.join(sets)} WHERE run_id = ? AND last_sequence = ?",
            [*params, run_id, expected],
        ).rowcount
        if not moved:
            found = conn.execute(
                "SELECT last_sequence FROM runs WHERE run_id = ?", (run_id,)
            ).fetchone()
            if found is None:
                raise RunNotFound(run_id)
            raise EventConflict(run_id, expected, found[0])
        # A conflict the primary key catches here: the caller rolls the update above back
        # with the rest of the group or transaction.
        _insert_events(conn, run_id, expected, rows, stamp)
        self._apply_index(conn, run_id, index, stamp)

    def _apply_index(
        self, conn: sqlite3.Connection, run_id: str, index: RunIndex, stamp: str
    ) -> None:
        """A write's step tasks and hooks (the run's row is written already)."""
        if index.build_id is not KEEP:
            conn.execute(
                "UPDATE step_tasks SET build_id = ? WHERE run_id = ?", (index.build_id, run_id)
            )
        if index.steps and not index.status.terminal:  # a finished run's tasks all go below
            for step_id, task in index.steps.items():
                if task is None:
                    conn.execute(
                        "DELETE FROM step_tasks WHERE run_id = ? AND step_id = ?",
                        (run_id, step_id),
                    )
                    continue
                # A task carries its run's build id (as re-pinned by the update above).
                conn.execute(
                    "INSERT INTO step_tasks (run_id, step_id, build_id, attempt, available_at, "
                    "lease_owner) SELECT ?, ?, build_id, ?, ?, ? FROM runs WHERE run_id = ? "
                    "ON CONFLICT (run_id, step_id) DO UPDATE SET attempt = excluded.attempt, "
                    "available_at = excluded.available_at, lease_owner = excluded.lease_owner",
                    (run_id, step_id, task.attempt, _ts(task.available_at), task.owner, run_id),
                )
        if index.status.terminal:
            # Defensive: the engine sends the deletes too, but a finished run must hold no work.
            conn.execute("DELETE FROM step_tasks WHERE run_id = ?", (run_id,))
        for hook in index.hooks:
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

    @_guarded
    def create_run(self, run: NewRun, now: datetime) -> EventEnvelope | None:
        """Create the run with ``run_started`` at sequence 1; None if the run id exists."""
        with self._write() as conn:
            if not self._create(conn, run, _ts(now), must_create=False):
                return None
        self._doorbell.ring()
        event = RunStarted(spec=run.spec, seed=run.seed)
        return EventEnvelope(run_id=run.run_id, sequence=1, recorded_at=_dt(_ts(now)), event=event)

    @_guarded
    def commit(
        self, writes: Sequence[StreamWrite], creates: Sequence[NewRun], now: datetime
    ) -> list[list[EventEnvelope]]:
        """Apply the creations, then the writes, in one transaction (see ``EventStore``)."""
        stamp = _ts(now)
        encoded = [_rows(w) for w in writes]  # before BEGIN: bad JSON writes nothing
        try:
            with self._write() as conn:
                self._apply(conn, writes, encoded, creates, stamp)
        except EventConflict:
            self.stats.conflicts += 1
            raise
        self._doorbell.ring(work=makes_work(writes, creates))
        return _envelopes(writes, stamp)

    @_guarded
    def commit_groups(self, groups: Sequence[CommitGroup]) -> list[FlowError | None]:
        """Each group in its own savepoint of one transaction (see ``EventStore``)."""
        encoded = [[_rows(w) for w in g.writes] for g in groups]
        if len(groups) == 1:
            # Alone, a group needs no savepoint: its failure may roll the whole transaction
            # back. A savepoint is not free in SQLite: each page written under one is first
            # copied to a statement journal (one start cost 0.2 ms more CPU with it).
            (group,) = groups
            try:
                with self._write() as conn:
                    self._apply(conn, group.writes, encoded[0], group.creates, _ts(group.now))
            except GROUP_ERRORS as exc:
                if isinstance(exc, EventConflict):
                    self.stats.conflicts += 1
                return [exc]
            self._doorbell.ring(work=makes_work(group.writes, group.creates))
            return [None]
        results: list[FlowError | None] = []
        with self._write() as conn:
            for group, rows in zip(groups, encoded, strict=True):
                conn.execute("SAVEPOINT flow_group")
                try:
                    self._apply(conn, group.writes, rows, group.creates, _ts(group.now))
                except GROUP_ERRORS as exc:
                    conn.execute("ROLLBACK TO flow_group")
                    if isinstance(exc, EventConflict):
                        self.stats.conflicts += 1
                    results.append(exc)
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
            }
        for run in creates:
            first = firsts.get(run.run_id)
            if first is None:
                self._create(conn, run, stamp, must_create=True)
            else:
                self._create_decided(conn, run, *first, stamp)
        for write, rows in zip(writes, encoded, strict=True):
            if write.run_id not in firsts:
                self._apply_write(conn, write, rows, stamp)

    @_guarded
    def park_run(self, run_id: str, expected_sequence: int, decide_at: datetime | None) -> bool:
        """Set ``decide_at`` if the run is still at ``expected_sequence``."""
        with self._write(durable=False) as conn:
            return bool(
                conn.execute(
                    "UPDATE runs SET decide_at = ?, lease_owner = NULL "
                    "WHERE run_id = ? AND last_sequence = ?",
                    (_ts_or_none(decide_at), run_id, expected_sequence),
                ).rowcount
            )

    # -- reads ------------------------------------------------------------------------------------

    @_guarded
    def read_history(self, run_id: str, after_sequence: int = 0) -> list[EventEnvelope]:
        """Events with ``sequence > after_sequence``, in order. Raises ``RunNotFound``."""
        found = self._histories({run_id: after_sequence})
        if run_id not in found:
            raise RunNotFound(run_id)
        return found[run_id]

    @_guarded
    def read_histories(self, after: Mapping[str, int]) -> dict[str, list[EventEnvelope]]:
        """Each run's events with ``sequence > after[run_id]``, in order; runs that do not
        exist are left out (see ``EventStore``)."""
        found: dict[str, list[EventEnvelope]] = {}
        wanted = list(after.items())
        for start in range(0, len(wanted), _HISTORIES_PER_QUERY):
            found.update(self._histories(dict(wanted[start : start + _HISTORIES_PER_QUERY])))
        return found

    def _histories(self, after: Mapping[str, int]) -> dict[str, list[EventEnvelope]]:
        # One statement for any number of runs: the run's row says it exists (a run with
        # nothing new still has its row, with NULL event columns), so a history read costs one
        # round trip, not a second one to tell "no new events" from "no such run".
        values = ", ".join(["(?, ?)"] * len(after))
        params: list[Any] = []
        for run_id, sequence in after.items():
            params.extend((run_id, sequence))
        rows = (
            self._conn()
            .execute(
                f"WITH wanted (run_id, after) AS (VALUES {values}) "
                "SELECT w.run_id, e.sequence, e.event_key, e.recorded_at, e.data FROM wanted w "
                "JOIN runs r ON r.run_id = w.run_id "
                "LEFT JOIN events e ON e.run_id = w.run_id AND e.sequence > w.after "
                "ORDER BY w.run_id, e.sequence",
                params,
            )
            .fetchall()
        )
        found: dict[str, list[EventEnvelope]] = {}
        run_id = ""
        try:
            for run_id, seq, key, at, data in rows:
                history = found.setdefault(run_id, [])
                if seq is None:
                    continue  # the run exists, with nothing after the sequence asked for
                history.append(
                    EventEnvelope(
                        run_id=run_id,
                        sequence=seq,
                        recorded_at=_dt(at),
                        event=event_from_data(key, json.loads(data)),
                        size=len(data),
                    )
                )
        except (KeyError, TypeError, ValueError) as exc:
            raise StoreError(
                f"Run {run_id!r} in {self.path} has an event this Flow cannot decode ({exc!r})."
            ) from exc
        return found

    @_guarded
    def get_run(self, run_id: str) -> RunRecord | None:
        """The run's index row, or None."""
        row = self._conn().execute(f"{_RUN_SELECT} WHERE run_id = ?", (run_id,)).fetchone()
        return None if row is None else _record(row)

    @_guarded
    def list_runs(
        self,
        *,
        status: RunStatus | None = None,
        workflow: str | None = None,
        limit: int | None = None,
    ) -> list[RunRecord]:
        """Runs newest first (creation order breaks ties)."""
        where, params = [], []
        if status is not None:
            where.append("status = ?")
            params.append(status.value)
        if workflow is not None:
            where.append("workflow = ?")
            params.append(workflow)
        sql = _RUN_SELECT + (f" WHERE {' AND '.join(where)}" if where else "")
        sql += " ORDER BY created_at DESC, rowid DESC LIMIT ?"
        rows = self._conn().execute(sql, [*params, -1 if limit is None else limit]).fetchall()
        return [_record(row) for row in rows]

    def _where(self, where: RunFilter) -> tuple[list[str], list[Any]]:
        """SQL conditions and parameters of a filter (cursor and limit aside)."""
        sql: list[str] = []
        params: list[Any] = []
        if where.statuses:
            sql.append(f"status IN ({', '.join('?' * len(where.statuses))})")
            params.extend(status.value for status in where.statuses)
        for column, value in (("workflow", where.workflow), (_BUILD_KEY, where.build_id)):
            if value is not None:
                sql.append(f"{column} = ?")
                params.append(value)
        if where.since is not None:
            sql.append("created_at >= ?")
            params.append(_ts(where.since))
        if where.until is not None:
            sql.append("created_at < ?")
            params.append(_ts(where.until))
        if where.failing:
            sql.append("failing IS NOT NULL")
        if where.waiting_on is not None:
            sql.append("waiting_on IS NOT NULL AND instr(' ' || waiting_on || ' ', ?) > 0")
            params.append(waiting_needle(where.waiting_on))
        if where.idle_since is not None:
            sql.append("updated_at <= ?")
            params.append(_ts(where.idle_since))
        if where.top_level:
            sql.append("parent_run_id IS NULL")
        if where.error_type is not None:
            sql.append("error_type = ?")
            params.append(where.error_type)
        return sql, params

    def _page(self, conn: sqlite3.Connection, where: RunFilter) -> tuple[str, list[Any]]:
        """``WHERE ... ORDER BY ... LIMIT ?`` of a filter with its cursor, newest first."""
        sql, params = self._where(where)
        if where.after is not None:
            cursor = conn.execute(
                "SELECT created_at, rowid FROM runs WHERE run_id = ?", (where.after,)
            ).fetchone()
            if cursor is None:
                raise RunNotFound(where.after)
            sql.append("(created_at < ? OR (created_at = ? AND rowid < ?))")
            params.extend([cursor[0], cursor[0], cursor[1]])
        query = (f" WHERE {' AND '.join(sql)}" if sql else "") + (
            " ORDER BY created_at DESC, rowid DESC LIMIT ?"
        )
        return query, [*params, -1 if where.limit is None else where.limit]

    @_guarded
    def find_runs(self, where: RunFilter) -> list[RunRecord]:
        """Runs matching ``where``, newest first (creation order breaks ties)."""
        conn = self._conn()
        page, params = self._page(conn, where)
        rows = conn.execute(_RUN_SELECT + page, params)
        return [_record(row) for row in rows.fetchall()]

    @_guarded
    def run_states(self, where: RunFilter) -> list[RunState]:
        """Runs matching ``where`` with their lease and step tasks, newest first: one statement
        (one consistent read), the runs served by the filter's index, each run's tasks by the
        step task primary key."""
        conn = self._conn()
        page, params = self._page(conn, where)
        rows = conn.execute(
            "SELECT r.run_id, r.workflow, r.status, r.build_id, r.created_at, r.updated_at, "
            "r.decide_at, r.lease_owner, r.failing, r.waiting_on, r.failing_since, "
            "t.step_id, t.attempt, t.available_at, t.lease_owner FROM ("
            "SELECT rowid AS ord, run_id, workflow, status, build_id, created_at, updated_at, "
            f"decide_at, lease_owner, failing, waiting_on, failing_since FROM runs{page}) r "
            "LEFT JOIN step_tasks t ON t.run_id = r.run_id "
            "ORDER BY r.created_at DESC, r.ord DESC, t.step_id",
            params,
        )
        return assemble_states(rows, _dt)

    @_guarded
    def build_usage(self) -> list[BuildUsage]:
        """Every build id of some run, with its open runs. The build ids are read by skipping
        through the build index (one probe per build, not one row per run); the open runs
        through the status index."""
        conn = self._conn()
        builds = [
            row[0]
            for row in conn.execute(
                f"WITH RECURSIVE b(id) AS (SELECT min({_BUILD_KEY}) FROM runs UNION ALL "
                f"SELECT (SELECT min({_BUILD_KEY}) FROM runs WHERE {_BUILD_KEY} > b.id) "
                "FROM b WHERE b.id IS NOT NULL) SELECT id FROM b WHERE id IS NOT NULL"
            )
        ]
        grouped = conn.execute(
            "SELECT build_id, status, patches, count(*) FROM runs "
            f"WHERE status IN ({_OPEN_LIST}) GROUP BY build_id, status, patches"
        ).fetchall()
        # With one min() the bare columns come from the row holding it (SQLite's rule); the
        # rowid breaks ties between runs created at the same instant.
        oldest = {
            build_id: (run_id, _dt(created_at))
            for build_id, run_id, created_at, _ in conn.execute(
                "SELECT build_id, run_id, created_at, "
                "min(created_at || printf(' %020d', rowid)) FROM runs "
                f"WHERE status IN ({_OPEN_LIST}) GROUP BY build_id"
            )
        }
        return build_usages(builds, grouped, oldest)

    @_guarded
    def count_runs(self, where: RunFilter, by: str | None = None) -> RunCount:
        """How many runs match ``where``, grouped by ``by`` when given."""
        sql, params = self._where(where)
        condition = f" WHERE {' AND '.join(sql)}" if sql else ""
        conn = self._conn()
        if by is None:
            total = conn.execute(f"SELECT count(*) FROM runs{condition}", params).fetchone()[0]
            return RunCount(total=total, groups={})
        if by not in GROUPINGS:
            raise ValueError(f"cannot group runs by {by!r}")
        # Grouped by an expression: grouping by the bare column would walk that column's
        # index over every run instead of the index that serves the filter.
        rows = conn.execute(
            f"SELECT coalesce({by} || '', '{NO_GROUP}'), count(*) FROM runs{condition} GROUP BY 1",
            params,
        ).fetchall()
        return RunCount(total=sum(n for _, n in rows), groups=dict(sorted(rows)))

    @_guarded
    def list_hooks(self, run_id: str | None = None, open_only: bool = False) -> list[HookListing]:
        """Hooks of one run or all runs, oldest first."""
        sql, params = [], []
        if run_id is not None:
            sql.append("run_id = ?")
            params.append(run_id)
        if open_only:
            sql.append(
                "resolved = 0 AND run_id IN (SELECT run_id FROM runs WHERE run_id = hooks.run_id "
                f"AND status NOT IN ({_TERMINAL_LIST}))"
            )
        rows = (
            self._conn()
            .execute(
                "SELECT run_id, hook_id, token, resolved, created_at, metadata FROM hooks"
                + (f" WHERE {' AND '.join(sql)}" if sql else "")
                + " ORDER BY created_at, rowid",
                params,
            )
            .fetchall()
        )
        return [
            HookListing(
                run_id=r[0],
                hook_id=r[1],
                token=r[2],
                resolved=bool(r[3]),
                created_at=_dt_or_none(r[4]),
                metadata=None if r[5] is None else json.loads(r[5]),
            )
            for r in rows
        ]

    @_guarded
    def find_hook(self, token: str) -> HookRecord | None:
        """The hook owning ``token``, or None."""
        row = (
            self._conn()
            .execute("SELECT token, run_id, hook_id, resolved FROM hooks WHERE token = ?", (token,))
            .fetchone()
        )
        if row is None:
            return None
        return HookRecord(token=row[0], run_id=row[1], hook_id=row[2], resolved=bool(row[3]))

    # -- due work ---------------------------------------------------------------------------------

    @_guarded
    def lease_runs(
        self,
        worker: str,
        build_ids: Sequence[str],
        now: datetime,
        lease_until: datetime,
        limit: int,
    ) -> list[str]:
        """Lease up to ``limit`` due runs of these builds by moving ``decide_at`` ahead."""
        if not build_ids or limit <= 0 or self._due.no_run_due(build_ids, now):
            return []
        marks = ", ".join("?" * len(build_ids))
        select = (
            f"SELECT run_id FROM runs WHERE decide_at <= ? AND build_id IN ({marks}) "
            "ORDER BY decide_at LIMIT ?"
        )
        params = (_ts(now), *build_ids, limit)
        # Look before locking: an idle worker must not take the write lock every pass.
        if not self._conn().execute(select, params).fetchone():
            return []
        until = _ts(lease_until)
        with self._write(durable=False) as conn:
            run_ids = [row[0] for row in conn.execute(select, params)]
            conn.executemany(
                "UPDATE runs SET decide_at = ?, lease_owner = ? WHERE run_id = ?",
                [(until, worker, run_id) for run_id in run_ids],
            )
        self.stats.scheduler_rows_read += len(run_ids)
        return run_ids

    @_guarded
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
        ``step_started`` for each in the same transaction (``read_after``: see ``EventStore``;
        the histories are read just after the commit, on this thread's connection)."""
        if not build_ids or limit <= 0:
            return []
        self._due.forget()
        writes = self._due.writes()
        marks = ", ".join("?" * len(build_ids))
        select = (
            "SELECT t.run_id, t.step_id, t.attempt, r.last_sequence FROM step_tasks t "
            "JOIN runs r ON r.run_id = t.run_id "
            f"WHERE t.available_at <= ? AND t.build_id IN ({marks}) "
            "ORDER BY t.available_at LIMIT ?"
        )
        params = (_ts(now), *build_ids, limit)
        conn = self._conn()
        # Look before locking: an idle worker must not take the write lock every pass.
        if not conn.execute(select, params).fetchone():
            return []
        until = _ts(lease_until)
        until_dt = _dt(until)
        stamp = _ts(now)
        with self._write(durable=False) as conn:
            rows = conn.execute(select, params).fetchall()
            conn.executemany(
                "UPDATE step_tasks SET available_at = ?, lease_owner = ? "
                "WHERE run_id = ? AND step_id = ?",
                [(until, worker, run_id, step_id) for run_id, step_id, _, _ in rows],
            )
            last: dict[str, int] = {}
            events = []
            for run_id, step_id, attempt, sequence in rows:
                started = StepStarted(
                    step_id=step_id, attempt=attempt, worker=worker, lease_until=until_dt
                )
                ((key, data),) = _encode([started])
                last[run_id] = last.get(run_id, sequence) + 1
                events.append((run_id, last[run_id], key, stamp, data))
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
            runs_due, steps_due = self._due_times(conn, build_ids)
        self._due.offer(build_ids, runs_due, steps_due, writes=writes + 1)  # + the lease's own
        self.stats.scheduler_rows_read += len(rows)
        leases = [
            StepLease(run_id=r, step_id=s, attempt=a, lease_until=until_dt) for r, s, a, _ in rows
        ]
        if read_after is None or not leases:
            return leases
        after = wanted_after((lease.run_id for lease in leases), read_after)
        return with_histories(leases, self.read_histories(after))

    @_guarded
    def renew_step(self, run_id: str, step_id: str, worker: str, lease_until: datetime) -> bool:
        """Extend the lease if ``worker`` still holds it."""
        with self._write(durable=False) as conn:
            return bool(
                conn.execute(
                    "UPDATE step_tasks SET available_at = ? "
                    "WHERE run_id = ? AND step_id = ? AND lease_owner = ?",
                    (_ts(lease_until), run_id, step_id, worker),
                ).rowcount
            )

    @_guarded
    def next_due(self, build_ids: Sequence[str]) -> datetime | None:
        """The earliest ``decide_at`` or step ``available_at`` of these builds."""
        if not build_ids:
            return None
        hint = self._due.fresh(build_ids)
        if hint is not None:
            return hint.earliest
        found = [t for t in self._due_times(self._conn(), build_ids) if t is not None]
        return min(found, default=None)

    def _due_times(
        self, conn: sqlite3.Connection, build_ids: Sequence[str]
    ) -> tuple[datetime | None, datetime | None]:
        """The earliest ``decide_at`` and the earliest step ``available_at`` of these builds."""
        marks = ", ".join("?" * len(build_ids))
        found = [
            conn.execute(sql, tuple(build_ids)).fetchone()
            for sql in (
                "SELECT decide_at FROM runs WHERE decide_at IS NOT NULL "
                f"AND build_id IN ({marks}) ORDER BY decide_at LIMIT 1",
                "SELECT available_at FROM step_tasks WHERE available_at IS NOT NULL "
                f"AND build_id IN ({marks}) ORDER BY available_at LIMIT 1",
            )
        ]
        self.stats.scheduler_rows_read += sum(1 for row in found if row is not None)
        runs, steps = (None if row is None else _dt(row[0]) for row in found)
        return runs, steps

    # -- workers registry -------------------------------------------------------------------------

    @_guarded
    def register_worker(self, worker: WorkerInfo) -> None:
        """Record a starting worker; forget those silent for longer than the retention."""
        with self._write() as conn:
            conn.execute(
                "DELETE FROM workers WHERE heartbeat_at < ?",
                (_ts(worker.started_at - WORKER_RETENTION),),
            )
            conn.execute(
                "INSERT OR REPLACE INTO workers (worker_id, host, pid, builds, started_at, "
                "heartbeat_at, heartbeat_seconds, stopped_at) VALUES (?, ?, ?, ?, ?, ?, ?, NULL)",
                (
                    worker.worker_id,
                    worker.host,
                    worker.pid,
                    json.dumps(list(worker.builds)),
                    _ts(worker.started_at),
                    _ts(worker.heartbeat_at),
                    worker.heartbeat_seconds,
                ),
            )

    @_guarded
    def heartbeat(self, worker_id: str, now: datetime) -> bool:
        """Move the worker's heartbeat to ``now``; False if unknown or stopped."""
        with self._write(durable=False) as conn:
            return bool(
                conn.execute(
                    "UPDATE workers SET heartbeat_at = ? "
                    "WHERE worker_id = ? AND stopped_at IS NULL",
                    (_ts(now), worker_id),
                ).rowcount
            )

    @_guarded
    def worker_stopped(self, worker_id: str, now: datetime) -> None:
        """Mark the worker stopped at ``now``."""
        with self._write() as conn:
            conn.execute(
                "UPDATE workers SET heartbeat_at = ?, stopped_at = ? WHERE worker_id = ?",
                (_ts(now), _ts(now), worker_id),
            )

    @_guarded
    def list_workers(self) -> list[WorkerInfo]:
        """Every registered worker, most recently started first."""
        rows = (
            self._conn()
            .execute(
                "SELECT worker_id, host, pid, builds, started_at, heartbeat_at, "
                "heartbeat_seconds, stopped_at FROM workers "
                "ORDER BY started_at DESC, worker_id DESC"
            )
            .fetchall()
        )
        return [
            WorkerInfo(
                worker_id=row[0],
                host=row[1],
                pid=row[2],
                builds=tuple(json.loads(row[3])),
                started_at=_dt(row[4]),
                heartbeat_at=_dt(row[5]),
                heartbeat_seconds=float(row[6]),
                stopped_at=_dt_or_none(row[7]),
            )
            for row in rows
        ]

    # -- waiting and closing ----------------------------------------------------------------------

    @_guarded
    def wait_for_change(
        self, timeout: float, *, ending: str | None = None, work_only: bool = False
    ) -> None:
        """Sleep up to ``timeout`` seconds; return early once any connection commits (with
        ``work_only``, once a commit makes work).

        Commits of any process ring this process's doorbell (see ``flow_cli.store.doorbell``);
        ``PRAGMA data_version`` is still read now and then, in case a ring was missed. Every
        commit rings, a run's end among them, so ``ending`` needs nothing more.
        """
        self._due.forget()
        work_only = work_only and ending is None
        conn = self._conn()
        version = conn.execute("PRAGMA data_version").fetchone()[0]
        seen = self._changes
        deadline = time.monotonic() + timeout
        rung = self._doorbell.listen()
        poll = _FALLBACK_POLL_SECONDS if rung else _POLL_SECONDS
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

    def check_integrity(self) -> list[str]:
        """``PRAGMA integrity_check``, then Flow's structural checks (see ``integrity``)."""
        conn = self._conn()
        try:
            rows = conn.execute("PRAGMA integrity_check(100)").fetchall()
        except sqlite3.DatabaseError as exc:
            return [f"SQLite cannot check the file: {exc}"]
        problems = [str(row[0]) for row in rows if row[0] != "ok"]
        if problems:
            return [f"SQLite: {problem}" for problem in problems]

        def query(sql: str) -> list[tuple[Any, ...]]:
            return conn.execute(sql).fetchall()

        json_check = (
            "SELECT run_id, sequence FROM events WHERE json_valid(data) = 0 "
            "ORDER BY run_id, sequence",
            "run {0!r}: event {1} does not hold valid JSON",
        )
        try:
            return structural_problems(query, [json_check])
        except sqlite3.DatabaseError as exc:
            return [f"SQLite failed while reading Flow's tables: {exc}"]

    def close(self) -> None:
        """Close every thread's connection; further calls raise ``StoreError``."""
        self._doorbell.close()
        with self._conns_lock:
            self._closed = True
            conns, self._conns = list(self._conns.values()), {}
        for conn in conns:
            with contextlib.suppress(sqlite3.Error):  # best effort: the data is committed
                conn.close()

    def __repr__(self) -> str:
        return f"SQLiteStore({str(self.path)!r})"


def _envelopes(writes: Sequence[StreamWrite], stamp: str) -> list[list[EventEnvelope]]:
    recorded_at = _dt(stamp)
    return [
        [
            EventEnvelope(run_id=w.run_id, sequence=seq, recorded_at=recorded_at, event=e)
            for seq, e in enumerate(w.events, w.expected_sequence + 1)
        ]
        for w in writes
    ]


_RUN_SELECT = (
    "SELECT run_id, workflow, status, build_id, parent_run_id, created_at, updated_at, "
    "last_sequence, decide_at, failing, waiting_on, error_type, error FROM runs"
)


def _error_values(index: RunIndex) -> tuple[str | None, str | None]:
    """The ``error_type`` and ``error`` columns of an index change (``None`` when it has none)."""
    error = index.error
    if error is KEEP or error is None:
        return None, None
    return error.error_type, error.text


def _record(row: tuple[Any, ...]) -> RunRecord:
    return RunRecord(
        run_id=row[0],
        workflow=row[1],
        status=RunStatus(row[2]),
        build_id=row[3],
        parent_run_id=row[4],
        created_at=_dt(row[5]),
        updated_at=_dt(row[6]),
        last_sequence=row[7],
        decide_at=_dt_or_none(row[8]),
        failing=row[9],
        waiting_on=row[10],
        error_type=row[11],
        error=row[12],
    )
