"""Reading a listening connection's notifications without spinning.

psycopg's own wait for notifications with a timeout (``Connection.notifies(timeout=...)``)
rounds the time left down to whole milliseconds at each poll: once under a millisecond is
left, it polls with a zero timeout, over and over, until the deadline. Every wait that runs
out so burns about a millisecond of CPU (measured: 1,300-2,500 polls for one 5 ms wait). A
worker waits briefly after each step handed to it, so this was most of the CPU its main
thread spent on such a run. Here the wait for the socket rounds up instead, and psycopg only
reads what is there.
"""

from __future__ import annotations

import math
import select
from collections.abc import Iterator
from contextlib import closing
from time import monotonic
from typing import Any

import psycopg


def notes_within(conn: psycopg.Connection[Any], timeout: float) -> Iterator[psycopg.Notify]:
    """The notifications on ``conn`` (a connection that ran ``LISTEN``), waiting up to
    ``timeout`` seconds for the first: those queued already (read during a statement, or
    waiting on the socket) at once, else what arrives first, whole (every notification of the
    packet that brings it). None if nothing comes in time."""
    deadline = monotonic() + max(timeout, 0.0)
    while True:
        found = False
        with closing(conn.notifies(timeout=0)) as queued:
            for note in queued:
                found = True
                yield note
        left = deadline - monotonic()
        if found or left <= 0:
            return
        _readable(conn.fileno(), left)


def _readable(fd: int, timeout: float) -> None:
    """Block until ``fd`` can be read or ``timeout`` seconds pass."""
    if not hasattr(select, "poll"):  # Windows: select() takes the time as a float
        select.select([fd], [], [], timeout)
        return
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    # Rounded up: a zero timeout while time is left would spin.
    poller.poll(math.ceil(timeout * 1000))
