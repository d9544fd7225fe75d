"""Connections to PostgreSQL: a small pool, transactions, the listening connection, and
psycopg errors as one-sentence ``StoreError``s (see ``PostgresStore``)."""

from __future__ import annotations

import os
import re
import select
import threading
import weakref
from collections.abc import Iterator
from contextlib import closing, contextmanager, suppress

import psycopg
from psycopg import pq, sql

from flow_cli.errors import StoreError, StoreRefused, StoreUnavailable, StoreUnreachable
from flow_cli.store.due import DueHints
from flow_cli.store.postgres import handoffs, hints
from flow_cli.store.postgres.batch import Connection, Prepared
from flow_cli.store.postgres.conninfo import conninfo, describe_target, secrets
from flow_cli.store.postgres.ends import EndsListener
from flow_cli.store.postgres.schema import ensure_schema
from flow_cli.store.protocol import (
    StoreStats,
)

DEFAULT_SCHEMA = "flow"
"""Where Flow's tables live unless ``schema=`` says otherwise."""

NOTIFY_CHANNEL = "flow_work"
"""The ``LISTEN``/``NOTIFY`` channel; the payload names the schema whose work changed."""

MAX_IDLE = 8
"""Idle connections kept for reuse; more may be open while more threads are busy."""

NOT_DURABLE = "SET LOCAL synchronous_commit TO OFF"

NOTIFY = "SELECT pg_notify(%s, %s)"

# What a notification announces to a waiting worker (``PostgresStore._heard``), in order.
NOTHING, HANDOFF, WORK = 0, 1, 2

NOTIFY_ENDED = "SELECT pg_notify(%s, payload) FROM unnest(%s::text[]) AS payload"


REFUSED = re.compile(
    r"FATAL: .*(does not exist|authentication failed|pg_hba\.conf|permission denied)"
)


def alive(conn: Connection) -> bool:
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


def close_quietly(conn: Connection) -> None:
    # Closing a dead connection may complain; there is nothing left to do about it.
    with suppress(Exception):
        conn.close()


class PostgresConnections:
    """The pool, transactions and listening connection of one PostgreSQL store."""

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
        self._conninfo = conninfo(url or "", connect_timeout)
        self._where = describe_target(self._conninfo)
        self._secrets = secrets(url or "", self._conninfo)
        self._lock = threading.Lock()
        self._idle: list[Connection] = []
        self._closed = False
        self._listen_lock = threading.Lock()
        self._listener: Connection | None = None
        self._due = DueHints()
        self._ends = EndsListener(lambda: self._connect(autocommit=True), self.schema)
        """Waits for runs' ends (``wait_for_change(ending=...)``), on a connection of its own."""
        # The statements each pooled connection has prepared (see ``postgres.batch``).
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
        # Step limits a commit found no room under lately (name -> monotonic time until which
        # attempts under it are not started in commits: ``postgres.limited``).
        self._limits_tight: dict[str, float] = {}
        # Ready steps the notifications that ended the last wait named (``postgres.hints``).
        self._hints: list[hints.Hint] = []
        # This process's worker as offered for hand-offs (``postgres.handoffs``): its id, its
        # builds, lease length and slots; when the listening connection last offered it
        # (monotonic, ``None``: not offered there) and the slots not yet claimed as far as
        # this process heard; the steps handed to it not yet taken.
        self._offer: tuple[str, list[str], float, int] | None = None
        self._offerer: str | None = None
        """The worker this process offered (kept after it withdraws: what was handed to it
        before that still reaches it)."""
        self._offered_at: float | None = None
        self._offer_left = 0
        self._handed: list[handoffs.Handoff] = []
        # Work announced that no lease has looked for yet: a pass that took handed steps only
        # does not look, and the wait after it returns at once for it. A lease clears it.
        self._work_heard = False
        self._forget_gone_at = 0.0
        # Open and migrate now, so that a wrong URL or a too-new schema fails at startup rather
        # than at the first decision.
        try:
            with self._transaction(writes=False) as conn:
                ensure_schema(conn, self.schema, create=create)
            self._opened()
        except BaseException:
            self.close()
            raise

    def _opened(self) -> None:
        """Called once the schema is in place (a store looks up what it keeps in memory)."""

    def __repr__(self) -> str:
        return f"PostgresStore({self._where!r}, schema={self.schema!r})"

    def close(self) -> None:
        """Close every connection; further calls raise ``StoreError``.

        Does not wait for a thread blocked in ``wait_for_change``: that thread closes the
        listening connection itself when its wait ends.
        """
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for conn in idle:
            close_quietly(conn)
        if self._listen_lock.acquire(blocking=False):
            try:
                if self._listener is not None:
                    close_quietly(self._listener)
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
                    close_quietly(conn)
                    self._listener = None
                raise self._store_error(exc, lost=lost) from exc
        finally:
            self._listen_lock.release()

    def _listening(self, conn: Connection) -> bool:
        """Whether the listening connection ``conn`` (its lock held) can take a statement now.

        Nothing to read means it can (``alive``). Something to read is notifications, kept here
        as a wait keeps them, or the server closing it (a restart, a killed session): still
        something to read after that, and the caller takes a pooled connection instead (the
        next wait finds out which, and listens again if it must).
        """
        if conn.broken or conn.info.transaction_status != pq.TransactionStatus.IDLE:
            return False
        if alive(conn):
            return True
        try:
            self._drain(conn)
        except psycopg.Error:
            close_quietly(conn)
            self._listener = None
            return False
        return alive(conn)

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
    def _self_transacting(self) -> Iterator[Connection]:
        """A pooled connection in autocommit mode for batches that open and end their own
        transaction (``BEGIN`` ... ``COMMIT`` in their statements, as the leases send them).
        One left inside a transaction by an error is rolled back; one that cannot be is closed,
        never handed out again in autocommit mode."""
        with self._transaction(writes=False) as conn:
            conn.autocommit = True
            try:
                yield conn
            except BaseException:
                if conn.info.transaction_status != pq.TransactionStatus.IDLE:
                    self._rolled_back(conn)
                    with suppress(psycopg.Error):
                        conn.execute("ROLLBACK")
                raise
            finally:
                if conn.info.transaction_status == pq.TransactionStatus.IDLE:
                    conn.autocommit = False
                else:
                    conn.close()

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
                        conn.execute(NOT_DURABLE)
                    yield conn
                    conn.commit()
            else:
                if not durable:
                    conn.execute(NOT_DURABLE)
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
            if alive(conn):
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
            close_quietly(conn)
            raise self._store_error(exc, lost=True) from exc
        return conn

    def _checkin(self, conn: Connection) -> None:
        if conn.broken or conn.closed or conn.info.transaction_status != pq.TransactionStatus.IDLE:
            close_quietly(conn)
            return
        with self._lock:
            if not self._closed and len(self._idle) < MAX_IDLE:
                self._idle.append(conn)
                return
        close_quietly(conn)

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
        close_quietly(conn)
        with self._lock:
            idle, self._idle = self._idle, []
        for other in idle:
            close_quietly(other)

    def _count_rows(self, rows: int) -> None:
        with self._lock:
            self.stats.scheduler_rows_read += rows

    def _refused(self, exc: psycopg.DataError | UnicodeEncodeError) -> StoreRefused:
        """A value of one commit PostgreSQL (or the client's encoding) cannot take."""
        reason = " ".join(str(exc).split())
        return StoreRefused(
            f"PostgreSQL at {self._where} refused a value of this commit ({reason}); nothing "
            "of it was written."
        )

    def _store_error(self, exc: psycopg.Error, *, lost: bool) -> StoreError:
        """One sentence naming the server (never the password) and what to do."""
        lines = [" ".join(line.split()) for line in str(exc).splitlines() if line.strip()]
        reason = (lines[0] if lines else type(exc).__name__).removeprefix("connection failed: ")
        for secret in self._secrets:
            reason = reason.replace(secret, "***")
        if isinstance(exc, psycopg.DataError):
            return self._refused(exc)
        if lost and REFUSED.search(reason):
            return StoreUnreachable(
                f"PostgreSQL at {self._where} refused the connection ({reason}); check the "
                "user, password and database name."
            )
        if lost:
            return StoreUnavailable(
                f"PostgreSQL at {self._where} is unreachable ({reason}); check that the server "
                "is running (the next call reconnects)."
            )
        return StoreError(f"PostgreSQL at {self._where} failed: {reason}.")

    def _drain(self, conn: Connection) -> None:
        """Read the notifications queued on the listening connection ``conn`` (its lock held)
        without waiting."""
        heard: list[hints.Hint] = []
        woke = NOTHING
        with closing(conn.notifies(timeout=0)) as queued:
            for note in queued:
                woke = max(woke, self._heard(note.payload, heard))
        if woke == WORK:
            self._steps_expected = True
            self._work_heard = True
            self._hints.extend(heard)

    def _heard(self, text: str, into: list[hints.Hint]) -> int:
        """What a notification's payload announces in this schema: ``WORK`` (its hints, if
        it has any, are added to ``into``), ``HANDOFF`` (a step handed to this process's
        worker, kept for ``handed_steps``) or ``NOTHING`` (a step handed to another worker
        among them)."""
        if text == self.schema:
            return WORK
        handoff = handoffs.parse(self.schema, text, self._offerer)
        if handoff == handoffs.ELSEWHERE:
            return NOTHING
        if isinstance(handoff, handoffs.Handoff):
            with self._lock:  # a step thread's commit on the listener reads them too
                self._handed.append(handoff)
            self._offer_left -= 1
            if self._offer_left <= 0:  # the claims took the offer: make it again before sleeping
                self._offered_at = None
            return HANDOFF
        found = hints.parse(self.schema, text)
        if found is None:
            return NOTHING
        into.extend(found)
        return WORK
