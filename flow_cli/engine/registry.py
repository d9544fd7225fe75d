"""Workers register themselves in the database and heartbeat while they run.

``Registration`` wraps a ``flow worker`` or ``flow tick`` process: it records the process (id,
host, pid, hosted builds), then a timer thread moves ``heartbeat_at`` every few seconds (one
small write per interval, never one per decision), and a clean stop marks the row stopped. A
process killed without warning simply stops heartbeating: readers call it gone once its last
heartbeat is older than ``LIVE_HEARTBEATS`` of its intervals (see ``WorkerInfo.live``).

The interval is ``DEFAULT_HEARTBEAT_SECONDS``, or ``FLOW_HEARTBEAT_SECONDS`` from the
environment (tests use a short one).
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from types import TracebackType

from flow_cli.engine.engine import Engine
from flow_cli.errors import ConfigError, StoreError
from flow_cli.store.protocol import WorkerInfo

DEFAULT_HEARTBEAT_SECONDS = 5.0
HEARTBEAT_ENV = "FLOW_HEARTBEAT_SECONDS"

log = logging.getLogger("flow.worker")


def heartbeat_seconds() -> float:
    """The heartbeat interval: ``FLOW_HEARTBEAT_SECONDS`` or the default. Raises ConfigError."""
    text = os.environ.get(HEARTBEAT_ENV, "").strip()
    if not text:
        return DEFAULT_HEARTBEAT_SECONDS
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0.05 <= value <= 3600:
        raise ConfigError(
            f"{HEARTBEAT_ENV}={text!r} must be a number of seconds between 0.05 and 3600."
        )
    return value


class Registration:
    """Context manager: register on enter, heartbeat in the background, mark stopped on exit."""

    def __init__(self, engine: Engine, *, interval: float | None = None) -> None:
        self.engine = engine
        self.interval = heartbeat_seconds() if interval is None else interval
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def info(self) -> WorkerInfo:
        now = self.engine.clock.now()
        return WorkerInfo(
            worker_id=self.engine.worker_id,
            host=socket.gethostname(),
            pid=os.getpid(),
            builds=tuple(self.engine.build_ids),
            started_at=now,
            heartbeat_at=now,
            heartbeat_seconds=self.interval,
        )

    def __enter__(self) -> Registration:
        self.engine.store.register_worker(self.info())
        self._thread = threading.Thread(target=self._beat, name="flow-heartbeat", daemon=True)
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        try:
            self.engine.store.worker_stopped(self.engine.worker_id, self.engine.clock.now())
        except StoreError as error:  # the database is gone: the row lapses on its own
            log.warning("could not mark worker %s stopped: %s", self.engine.worker_id, error)

    def _beat(self) -> None:
        store = self.engine.store
        while not self._stop.wait(self.interval):
            try:
                if not store.heartbeat(self.engine.worker_id, self.engine.clock.now()):
                    # Forgotten (e.g. after a long outage): register again.
                    store.register_worker(self.info())
            except StoreError as error:
                log.debug("heartbeat failed: %s", error)  # the worker loop reports outages
