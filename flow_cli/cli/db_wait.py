"""Opening the database for ``flow worker`` and ``flow tick``: an outage at start is waited out.

A running worker meets a locked SQLite file or an unreachable PostgreSQL server with a line on
stderr and a retry that backs off; a worker that *starts* during the outage does the same,
instead of exiting 1 (under a supervisor that is a restart loop, and every restart imports the
workflow code again). One line says the database is unavailable, one that it is reachable
again; SIGINT or SIGTERM ends the wait. Only ``StoreUnavailable`` is waited out: a database
that is not Flow's, an empty file, a wrong password or a missing database name is no outage,
and is reported at once.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable
from types import FrameType
from typing import TYPE_CHECKING, Any

from flow_cli.errors import StoreUnavailable

if TYPE_CHECKING:
    from flow_cli.engine.engine import Engine
    from flow_cli.engine.observe import Observer

FIRST_PAUSE = 0.5
LONGEST_PAUSE = 10.0
"""Seconds between tries: doubling from the first to the longest, as a running worker does."""


def open_when_reachable(
    open_engine: Callable[[], Engine], observer: Observer, on_stop: Callable[[str], None]
) -> Engine | None:
    """``open_engine()``, tried again while it raises ``StoreUnavailable``; ``None`` when
    SIGINT or SIGTERM came first (``on_stop`` is told the signal's name)."""
    stopped = threading.Event()
    began: float | None = None
    pause = FIRST_PAUSE

    def handle(signum: int, frame: FrameType | None) -> None:
        on_stop(signal.Signals(signum).name)
        stopped.set()

    previous: dict[int, Any] = {}
    try:
        while True:
            try:
                engine = open_engine()
            except StoreUnavailable as exc:
                if began is None:
                    began = time.monotonic()
                    # Only while waiting (a healthy start is not changed), and before the line
                    # that says so: a supervisor that reads it and stops us gets a clean stop.
                    for signum in (signal.SIGINT, signal.SIGTERM):
                        previous[signum] = signal.signal(signum, handle)
                    observer.store_error(exc)
                if stopped.wait(pause):
                    return None
                pause = min(pause * 2, LONGEST_PAUSE)
                continue
            if stopped.is_set():  # the signal came while the last try was under way
                engine.close()
                return None
            if began is not None:
                observer.store_recovered(time.monotonic() - began)
            return engine
    finally:
        for number, old in previous.items():
            signal.signal(number, old)
