"""Group commit: the commits of many threads in one transaction.

A worker's step threads each finish an attempt and want to commit its end with the run's next
decision. Instead of one transaction (and one fsync) each, the first thread to arrive becomes
the leader: it commits every group that is waiting, each in its own savepoint, and hands each
thread its own result. Threads that arrive while the leader commits wait for the next round. A
conflict in one group (``EventConflict``) leaves that group out and costs the others nothing.

A thread that has nothing to do with the result but tidy up (an attempt's end after which the
run waits: no next step to run at once) need not wait for it at all: ``submit`` hands the group
to the leader and returns, and the leader runs the thread's ``done`` once the group is committed.
The thread goes on to its next attempt, so when many timers fire at once the ends of their steps
pile up behind one leader and a hundred of them cost one transaction, not one per step thread.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from flow_cli.errors import StoreRefused
from flow_cli.store.protocol import CommitGroup, EventStore

log = logging.getLogger("flow.commit")

MAX_GROUPS = 256
"""Groups one transaction takes at most (a bound on how long a transaction holds the lock).
Also the queue's bound: a ``submit`` that finds this many groups waiting waits for its own."""

Done = Callable[[BaseException | None], None]
"""Told the result of a submitted group: ``None`` (committed), the group's own error
(``EventConflict`` and the like: the group is left out), or the whole transaction's error."""


@dataclass(slots=True)
class _Ticket:
    group: CommitGroup
    after: Done | None = None
    done: threading.Lock | None = None
    """Held until the group is committed, then released by the committing thread; only a
    ticket that a thread waits for while another thread commits it has one. A bare lock used
    as a one-shot signal: an ``Event`` is a lock and a condition, dearer to make, to set and
    to wait on, and a worker chaining steps waits on one at nearly every step."""
    error: BaseException | None = None
    whole: bool = False
    """Whether ``error`` failed the whole transaction (not only this group)."""


class GroupCommitter:
    """Commits groups from many threads, several per transaction."""

    def __init__(self, store: EventStore) -> None:
        self.store = store
        self._lock = threading.Lock()
        self._queue: list[_Ticket] = []
        self._leader: int | None = None
        """The thread (ident) committing now, if any."""
        self.transactions = 0
        self.groups = 0

    def commit(self, group: CommitGroup) -> None:
        """Commit ``group`` atomically; raises its ``EventConflict`` (or the store's error)."""
        (error,) = self.commit_many([group])
        if error is not None:
            raise error

    def commit_many(self, groups: Sequence[CommitGroup]) -> list[BaseException | None]:
        """Commit each group atomically (a savepoint each), with whatever else is waiting, and
        return each one's error (``None``: committed). A failed transaction raises."""
        tickets = [_Ticket(group) for group in groups]
        if not tickets:
            return []
        if self._enqueue(tickets, waiting=True):
            self._lead()  # ours go first, and are committed when this returns
        for ticket in tickets:
            if ticket.done is not None:
                ticket.done.acquire()
        for ticket in tickets:
            if ticket.whole and ticket.error is not None:
                raise ticket.error  # the transaction failed (groups in another one may not)
        return [t.error for t in tickets]

    def submit(self, group: CommitGroup, done: Done) -> None:
        """Commit ``group``; ``done`` is told the result.

        When another thread is committing, the group joins its next transaction and this returns
        at once (``done`` then runs on that thread, and must not wait for a commit itself: it
        may ``submit`` again); otherwise this thread commits it, and whatever queues meanwhile,
        before returning. When the queue is full this waits, so producers cannot outrun the
        disk.
        """
        ticket = _Ticket(group, done)
        if self._enqueue([ticket], wait_if_full=True):
            self._lead()
        elif ticket.done is not None:
            ticket.done.acquire()

    def _enqueue(
        self, tickets: list[_Ticket], *, wait_if_full: bool = False, waiting: bool = False
    ) -> bool:
        """Queue ``tickets``; True when the caller must lead (nobody commits now). Tickets that
        another thread will commit get their ``done`` here, before the leader can see them:
        with ``waiting`` always, with ``wait_if_full`` when they join a full queue."""
        with self._lock:
            leader = self._leader
            if leader is not None and (
                waiting
                or (
                    wait_if_full
                    and leader != threading.get_ident()
                    and len(self._queue) >= MAX_GROUPS
                )
            ):
                for ticket in tickets:
                    ticket.done = threading.Lock()
                    ticket.done.acquire()  # released by the thread that commits it
            self._queue.extend(tickets)
            if leader is not None:
                return False
            self._leader = threading.get_ident()
            return True

    def _lead(self) -> None:
        try:
            while True:
                with self._lock:
                    batch, self._queue = self._queue[:MAX_GROUPS], self._queue[MAX_GROUPS:]
                    if not batch:
                        self._leader = None
                        return
                self._commit(batch)
        except BaseException:
            with self._lock:  # interrupted: the next thread to arrive leads (the queue too)
                self._leader = None
            raise

    def _commit(self, batch: Sequence[_Ticket]) -> None:
        whole = False
        try:
            results: Sequence[BaseException | None] = self.store.commit_groups(
                [t.group for t in batch]
            )
        except StoreRefused as refused:
            # The database refused a value of one member (the stores leave such a member out
            # themselves; this is the fallback): each on its own, so that one bad run never
            # takes the others' commits down.
            results = [refused] if len(batch) == 1 else [self._alone(t.group) for t in batch]
        except BaseException as exc:  # the whole transaction failed: every member learns it
            results = [exc] * len(batch)
            whole = True
        else:
            self.transactions += 1
            self.groups += len(batch)
        self._tell(batch, results, whole)

    def _alone(self, group: CommitGroup) -> BaseException | None:
        try:
            (error,) = self.store.commit_groups([group])
        except Exception as exc:
            return exc
        self.transactions += 1
        self.groups += 1
        return error

    def _tell(
        self, batch: Sequence[_Ticket], results: Sequence[BaseException | None], whole: bool
    ) -> None:
        for ticket, error in zip(batch, results, strict=True):
            ticket.error = error
            ticket.whole = whole
            if ticket.after is not None:
                try:
                    ticket.after(error)
                except Exception:  # one member's tidying must not strand the others
                    log.exception("after committing a group")
            if ticket.done is not None:
                ticket.done.release()
