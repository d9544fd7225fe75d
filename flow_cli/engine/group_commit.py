"""Group commit: the commits of many threads in one transaction.

A worker's step threads each finish an attempt and want to commit its end with the run's next
decision. Instead of one transaction (and one fsync) each, the first thread to arrive becomes
the leader: it commits every group that is waiting, each in its own savepoint, and hands each
thread its own result. Threads that arrive while the leader commits wait for the next round. A
conflict in one group (``EventConflict``) leaves that group out and costs the others nothing.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass, field

from flow_cli.errors import FlowError
from flow_cli.store.protocol import CommitGroup, EventStore

MAX_GROUPS = 256
"""Groups one transaction takes at most (a bound on how long a transaction holds the lock)."""


@dataclass(slots=True)
class _Ticket:
    group: CommitGroup
    done: threading.Event = field(default_factory=threading.Event)
    error: BaseException | None = None


class GroupCommitter:
    """Commits groups from many threads, several per transaction."""

    def __init__(self, store: EventStore) -> None:
        self.store = store
        self._lock = threading.Lock()
        self._queue: list[_Ticket] = []
        self._leading = False
        self.transactions = 0
        self.groups = 0

    def commit(self, group: CommitGroup) -> None:
        """Commit ``group`` atomically; raises its ``EventConflict`` (or the store's error)."""
        ticket = _Ticket(group)
        with self._lock:
            self._queue.append(ticket)
            lead = not self._leading
            if lead:
                self._leading = True
        if lead:
            self._lead()
        ticket.done.wait()
        if ticket.error is not None:
            raise ticket.error

    def _lead(self) -> None:
        while True:
            with self._lock:
                batch, self._queue = self._queue[:MAX_GROUPS], self._queue[MAX_GROUPS:]
                if not batch:
                    self._leading = False
                    return
            self._commit(batch)

    def _commit(self, batch: Sequence[_Ticket]) -> None:
        try:
            results: Sequence[FlowError | None] = self.store.commit_groups([t.group for t in batch])
        except BaseException as exc:  # the whole transaction failed: every member learns it
            for ticket in batch:
                ticket.error = exc
                ticket.done.set()
            return
        self.transactions += 1
        self.groups += len(batch)
        for ticket, error in zip(batch, results, strict=True):
            ticket.error = error
            ticket.done.set()
