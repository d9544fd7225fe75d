"""``EndsListener``: the threads of one process waiting for runs to end, served by one
``LISTEN`` connection.

A commit that ends runs names each on ``ENDED_CHANNEL`` (a digest of the run id: see
``ended_payload``). Any number of threads may wait for ends at once (a web server's requests
waiting for outcomes): one of them reads the connection and records every end it hears; the
others wait until it hears theirs, or until it leaves and one of them takes its place.
Notifications that arrive while nobody reads stay queued on the connection, so none is lost
between readers. Workers listen on the work channel, on a connection of their own: an end wakes
no worker, and no worker's wait swallows an end.
"""

from __future__ import annotations

import hashlib
import threading
from collections import deque
from collections.abc import Callable
from contextlib import suppress
from time import monotonic

from psycopg import sql

from flow_cli.store.postgres.batch import Connection
from flow_cli.store.postgres.listen import notes_within

ENDED_CHANNEL = "flow_ended"
"""The channel a run's end is announced on (payload: ``ended_payload``)."""

HEARD = 4_096
"""Ends remembered for the threads that wait without reading (far more than can arrive while a
waiting thread is woken)."""


def ended_payload(schema: str, run_id: str) -> str:
    """What ``ENDED_CHANNEL`` carries when this run of this schema ends: the schema and a digest
    of the run id, not the id itself, since a payload over 8,000 bytes would fail the commit
    (two ids with one digest only cost their waiters a look)."""
    digest = hashlib.blake2b(run_id.encode(), digest_size=12).hexdigest()
    return f"{schema} {digest}"


class EndsListener:
    """Waits for runs' ends on one connection, for every thread of a store (see the module)."""

    def __init__(self, connect: Callable[[], Connection], schema: str) -> None:
        self._connect = connect
        self._schema = schema
        self._reading = threading.Lock()
        """Held by the thread reading the connection."""
        self._conn: Connection | None = None
        self._heard = threading.Condition()
        self._recent: deque[tuple[int, str]] = deque(maxlen=HEARD)
        self._count = 0
        """Ends heard so far (numbers the entries of ``_recent``)."""
        self._generation = 0
        """Bumped when a connection starts listening: ends before it were not heard."""

    def wait(self, run_id: str, timeout: float) -> None:
        """Block until ``run_id`` ends or ``timeout`` seconds pass; also return at once when
        listening starts (the run may have ended before): the caller looks again either way."""
        payload = ended_payload(self._schema, run_id)
        deadline = monotonic() + max(timeout, 0.0)
        with self._heard:
            mark, generation = self._count, self._generation
        while (remaining := deadline - monotonic()) > 0:
            if self._reading.acquire(blocking=False):
                try:
                    if not self._heard_since(mark, generation, payload):
                        self._read(payload, remaining)
                    return
                finally:
                    self._reading.release()
                    with self._heard:
                        self._heard.notify_all()  # a waiting thread may read now
            with self._heard:
                if self._heard_since(mark, generation, payload):
                    return
                if not self._reading.locked():
                    continue  # the reader left before we waited: read in its place
                # The reader tells us (it needs ``_heard`` to) when it hears an end or leaves.
                self._heard.wait(remaining)
                if self._heard_since(mark, generation, payload):
                    return
            # Woken by an end not ours, or by the reader leaving: read in its place if free.

    def close(self) -> None:
        """Close the connection, unless a thread reads it: that thread's wait then fails and
        closes it (the store is closed by then)."""
        if self._reading.acquire(blocking=False):
            try:
                self._drop(close=True)
            finally:
                self._reading.release()

    def forget(self) -> None:
        """In a forked child: let go of the parent's connection without closing it (its socket
        is the parent's too)."""
        self._conn = None

    def _drop(self, *, close: bool) -> None:
        conn, self._conn = self._conn, None
        if close and conn is not None and not conn.closed:
            with suppress(Exception):  # going anyway: a broken socket may refuse a goodbye
                conn.close()

    def _heard_since(self, mark: int, generation: int, payload: str) -> bool:
        """Whether ``payload`` was heard after ``mark``, or listening started anew (the caller
        holds ``_heard``, or reads: only the reader changes ``_recent``)."""
        if self._generation != generation:
            return True
        for count, heard in reversed(self._recent):
            if count <= mark:
                return False
            if heard == payload:
                return True
        return False

    def _read(self, payload: str, timeout: float) -> None:
        """Read the connection until ``payload`` is heard or ``timeout`` passes, recording every
        end heard for the other waiting threads."""
        if self._conn is None or self._conn.closed:
            self._conn = self._connect()
            try:
                self._conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(ENDED_CHANNEL)))
            except BaseException:
                self._drop(close=True)
                raise
            with self._heard:
                self._generation += 1
            return
        try:
            deadline = monotonic() + timeout
            while (left := deadline - monotonic()) > 0:
                found = False
                for note in notes_within(self._conn, left):
                    with self._heard:
                        self._count += 1
                        self._recent.append((self._count, note.payload))
                        self._heard.notify_all()
                    found = found or note.payload == payload
                if found:
                    return
        except BaseException:
            self._drop(close=True)
            raise
