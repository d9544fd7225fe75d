"""Connections to one SQLite file: one per thread, ``BEGIN IMMEDIATE`` writes, the schema
opened or migrated, and ``sqlite3`` errors as one-sentence ``StoreError``s.

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
import os
import sqlite3
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Concatenate, ParamSpec, TypeVar

from flow_cli.errors import (
    ConfigError,
    DatabaseCorrupt,
    DatabaseMissing,
    StoreError,
    StoreRefused,
    StoreUnavailable,
    StoreUnreachable,
)
from flow_cli.store import damage
from flow_cli.store.doorbell import Doorbell
from flow_cli.store.due import DueHints
from flow_cli.store.protocol import StoreStats
from flow_cli.store.sqlite import file, schema

P = ParamSpec("P")
R = TypeVar("R")
C = TypeVar("C", bound="SQLiteConnections")

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
POLL_SECONDS = 0.05
"""How often ``wait_for_change`` looks at ``PRAGMA data_version`` where doorbells cannot be used."""
FALLBACK_POLL_SECONDS = 1.0
"""How often it looks anyway while it sleeps on its doorbell (a missed ring costs this much)."""
_LOCK_PAUSE_FIRST = 0.0002
_LOCK_PAUSE_MAX = 0.002
"""A writer waiting for another process's write lock tries again after this long at first,
then after pauses growing by half up to the second (or at once when the doorbell rings)."""
PAGE_SIZE = 1024
"""Bytes a page of a new database holds (SQLite's default is 4096). Every commit writes each
page it changed whole to the WAL (a step changes seven or eight: its events and their key, the
run's row and index entries, the step task's), so the page size sets the bytes written a step:
W2 on SQLite wrote 41 KB a step with 4 KiB pages, 21 KB with 2 KiB, 15 KB with these
(bench/step_bytes.py), for 2.0-2.2 KB a run on disk either way (bench/scale.py's mix). A row
larger than a page spills to overflow pages, read with it. A database keeps the page size it
was made with (changing it needs a ``VACUUM`` outside WAL mode; docs/operations.md)."""
_CHECKPOINT_BYTES = 4 * 1024 * 1024
"""``wal_autocheckpoint`` in bytes: the WAL is copied back into the database file once it
holds this much, as with SQLite's default of 1000 pages of 4 KiB (in pages, the default would
checkpoint four times as often with 1 KiB pages, copying a page each time the WAL is reset)."""
HISTORIES_PER_QUERY = 400
"""Runs one ``read_histories`` statement reads (two parameters each: under SQLite's limit)."""


def is_busy(exc: sqlite3.OperationalError) -> bool:
    """SQLITE_BUSY: another connection holds the lock ("database is locked")."""
    code: int | None = getattr(exc, "sqlite_errorcode", None)
    if code is not None:
        return code & 0xFF == sqlite3.SQLITE_BUSY  # extended codes (BUSY_RECOVERY...) too
    return "locked" in str(exc)


def guarded(
    method: Callable[Concatenate[C, P], R],
) -> Callable[Concatenate[C, P], R]:
    """Turn any sqlite3 error escaping ``method`` into a ``StoreError``."""

    @functools.wraps(method)
    def wrapper(self: C, /, *args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return method(self, *args, **kwargs)
        except sqlite3.Error as exc:
            raise self._store_error(exc) from exc
        except damage.Unreadable as exc:
            raise DatabaseCorrupt(str(self.path), str(exc)) from exc

    return wrapper


class SQLiteConnections:
    """Connections, transactions and the schema of one SQLite file (see ``SQLiteStore``)."""

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
            self._opened()
        except sqlite3.Error as exc:
            self.close()
            raise self._store_error(exc) from exc
        except BaseException:
            self.close()
            raise

    def _opened(self) -> None:
        """Called once the schema is in place (a store looks up what it keeps in memory)."""

    # -- connections, transactions, errors ------------------------------------------------------

    def _check_path(self, create: bool) -> None:
        if str(self.path) == ":memory:":
            raise StoreError(
                "An in-memory SQLite database cannot be shared; use memory:// instead."
            )
        if self.path.is_dir():
            raise StoreUnreachable(f"{self.path} is a directory, not a Flow database file.")
        if not self.path.exists():
            if not create:
                raise DatabaseMissing(
                    f"No Flow database at {self.path}; run `flow start` to create one, "
                    "or pass --db to point at an existing database.",
                    str(self.path),
                )
            if not self.path.parent.is_dir():
                raise StoreError(
                    f"Cannot create Flow database {self.path}: "
                    f"directory {self.path.parent} does not exist."
                )
            try:
                if file.create_private(self.path):
                    return  # ours, empty until the schema is written
            except OSError as exc:
                raise StoreError(
                    f"Cannot create Flow database {self.path}: {exc.strerror or exc}."
                ) from None
        elif not os.access(self.path, os.R_OK):
            raise StoreUnreachable(f"Cannot read Flow database {self.path}: permission denied.")
        file.refuse_empty(self.path, self.busy_timeout_ms / 1000)

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
            self._set_checkpoint(conn)
        except BaseException:
            conn.close()
            raise
        with self._conns_lock:
            # Pool threads come and go: close what threads that ended left behind.
            for dead in [t for t in self._conns if not t.is_alive()]:
                self._conns.pop(dead).close()
            self._conns[thread] = conn
        return conn

    @staticmethod
    def _set_checkpoint(conn: sqlite3.Connection) -> None:
        """``wal_autocheckpoint`` for ``_CHECKPOINT_BYTES`` at the file's page size; left at
        SQLite's default on a file that is not a database (reading it says so, with advice)."""
        try:
            (page,) = conn.execute("PRAGMA page_size").fetchone()
        except sqlite3.DatabaseError:
            return
        conn.execute(f"PRAGMA wal_autocheckpoint = {_CHECKPOINT_BYTES // page}")

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
                if not is_busy(exc):
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

    def _refused(self, exc: Exception) -> StoreRefused:
        return StoreRefused(
            f"Flow database {self.path} refused a value of this commit ({exc}); nothing of it "
            "was written."
        )

    def _store_error(self, exc: sqlite3.Error) -> StoreError:
        text = str(exc)
        if "locked" in text or "busy" in text:
            return StoreUnavailable(
                f"Flow database {self.path} is locked by another connection; gave up after "
                f"{self.busy_timeout_ms} ms (retry, or raise the busy timeout)."
            )
        if "not a database" in text:
            return StoreError(f"{self.path} is not a Flow database (not an SQLite file).")
        if "malformed" in text:
            return DatabaseCorrupt(str(self.path), f"SQLite says {text!r}")
        corrupt = damage.not_utf8(str(self.path), text)
        if corrupt is not None:
            return corrupt
        if self.read_only and "readonly" in text:
            return StoreError(
                f"Flow database {self.path} was opened read-only; this command cannot write."
            )
        if "disk is full" in text:
            return StoreUnavailable(
                f"Flow database {self.path}: the disk is full; nothing was written (free space "
                "on its filesystem; a worker retries on its own)."
            )
        if "readonly" in text or "unable to open" in text:
            return StoreError(f"Cannot open Flow database {self.path} for writing ({text}).")
        return StoreError(f"Flow database {self.path} failed: {text}.")

    def close(self) -> None:
        """Close every thread's connection; further calls raise ``StoreError``."""
        self._doorbell.close()
        with self._conns_lock:
            self._closed = True
            conns, self._conns = list(self._conns.values()), {}
        for conn in conns:
            with contextlib.suppress(sqlite3.Error):  # best effort: the data is committed
                conn.close()

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
        latest = schema.MIGRATIONS[-1][0]
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
        if found is None:
            # A new file: pages that deletes free (``flow prune``) can be given back in small
            # steps (``reclaim_space``). Only possible before the first table is created.
            conn.execute(f"PRAGMA page_size = {PAGE_SIZE}")
            conn.execute("PRAGMA auto_vacuum = INCREMENTAL")
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
            for target, migrate in schema.MIGRATIONS:
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
