"""Reading and writing run streams, with a snapshot cache in front of the store.

A worker keeps recent snapshots and reads only the events after ``last_sequence``, so a long
history is not re-read for every decision. The decision loop *takes* a snapshot out of the cache
(it then owns it and may fold events into it before they are committed) and *puts* it back once
its events are committed; a snapshot whose commit failed is simply dropped, and the next load
reads it again from the store. The cache is bounded in bytes of history, not in entries, so a
worker's memory does not grow with the size of the inputs it has seen.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

from flow_cli.engine.group_commit import GroupCommitter
from flow_cli.engine.observe import NOTHING, Observer, notify_committed
from flow_cli.errors import RunNotFound
from flow_cli.model.events import Event, EventEnvelope, event_json
from flow_cli.model.snapshot import WorkflowRunSnapshot, project
from flow_cli.store.index import index_for
from flow_cli.store.protocol import KEEP, CommitGroup, EventStore, Keep, NewRun, StreamWrite

DEFAULT_CACHE_BYTES = 4 * 1024 * 1024
"""History bytes the snapshot cache may hold. A snapshot in memory costs about ten times its
history's bytes, so this is some 40 MB of a worker's memory: plenty for the runs in hand."""


@dataclass(frozen=True, slots=True)
class Write:
    """Events to append to one run, given the snapshot they were decided on."""

    before: WorkflowRunSnapshot
    events: Sequence[Event]
    decide_at: datetime | Keep | None = KEEP
    failing: str | Keep | None = KEEP


@dataclass(slots=True)
class Pending:
    """Events folded into an owned snapshot ahead of their commit (see ``Streams.take``)."""

    snapshot: WorkflowRunSnapshot
    """The snapshot after ``events``: owned by the writer, not in the cache."""
    expected_sequence: int
    now: datetime
    events: list[Event]
    decide_at: datetime | Keep | None = KEEP
    failed_before: str | None = None
    """The error type of the run's failing decision when these events were decided on."""
    data: list[str | None] = field(default_factory=list)
    """Each event's stored JSON, made once to measure it and handed to the store to write."""
    ended_before: bool = False
    """Whether the run had ended when these events were decided on (its row may hold the
    error it failed with)."""

    @classmethod
    def on(cls, snapshot: WorkflowRunSnapshot, now: datetime) -> Pending:
        return cls(
            snapshot,
            snapshot.last_sequence,
            now,
            [],
            KEEP,
            failing_type(snapshot),
            ended_before=snapshot.terminal,
        )

    def add(self, events: Sequence[Event]) -> None:
        """Fold ``events`` into the snapshot as the store will record them."""
        snap = self.snapshot
        for event in events:
            try:
                text: str | None = event_json(event)
            except (TypeError, ValueError):
                text = None  # the store refuses it when it commits, as it always did
            snap.apply(
                EventEnvelope(
                    run_id=snap.run_id,
                    sequence=snap.last_sequence + 1,
                    recorded_at=self.now,
                    event=event,
                    size=stored_size(event) if text is None else len(text),
                )
            )
            self.data.append(text)
        self.events.extend(events)

    def stream_write(self) -> StreamWrite:
        made = [text for text in self.data if text is not None]
        return StreamWrite(
            run_id=self.snapshot.run_id,
            expected_sequence=self.expected_sequence,
            events=list(self.events),
            index=index_for(
                self.snapshot, self.events, decide_at=self.decide_at, failing=self._failing()
            ),
            data=made if len(made) == len(self.events) else None,
        )

    def _failing(self) -> str | Keep | None:
        """The index's ``failing`` after these events; ``KEEP`` when the run's row holds no
        failing decision or error and still holds none (nearly every write): the columns and
        their indexes are then left alone, a fifth of the cost of updating the row."""
        after = failing(self.snapshot)
        if after is None and self.failed_before is None and not self.ended_before:
            return KEEP
        return after


def stored_size(event: Event) -> int:
    """About the bytes the store will keep for ``event`` (what the cache budget counts)."""
    return len(json.dumps(event.to_data(), ensure_ascii=False, default=str))


def failing_type(snapshot: WorkflowRunSnapshot) -> str | None:
    """The error type of the run's last decision while it stands failed."""
    error = snapshot.decision_error
    return None if error is None else error.error_type


def failing(snapshot: WorkflowRunSnapshot) -> str | None:
    """The runs index's ``failing`` text: the last decision error while it stands."""
    error = snapshot.decision_error
    return None if error is None else f"{error.error_type}: {error.message}"


class Streams:
    """Snapshot cache plus atomic multi-run writes."""

    def __init__(self, store: EventStore, cache_bytes: int = DEFAULT_CACHE_BYTES) -> None:
        self.store = store
        self._cache: OrderedDict[str, WorkflowRunSnapshot] = OrderedDict()
        self._bytes = 0
        self.cache_bytes = cache_bytes
        self._lock = threading.Lock()
        self.group: GroupCommitter | None = None
        """Set by a worker whose threads commit concurrently: their commits are grouped."""
        self.observer: Observer = NOTHING
        """Told what the committed events say (``Engine.observe``)."""

    @property
    def cached_bytes(self) -> int:
        return self._bytes

    def take(self, run_id: str) -> WorkflowRunSnapshot:
        """The run's current snapshot, owned by the caller until ``put`` back.

        Raises ``RunNotFound``.
        """
        snapshot = self._pop(run_id)
        if snapshot is None:
            history = self.store.read_history(run_id)
            if not history:
                raise RunNotFound(run_id)
            return project(history)
        try:
            for envelope in self.store.read_history(run_id, after_sequence=snapshot.last_sequence):
                snapshot.apply(envelope)
        except BaseException:
            raise  # the half-folded snapshot is dropped; the next take reads it whole
        return snapshot

    def take_many(self, run_ids: Sequence[str]) -> dict[str, WorkflowRunSnapshot]:
        """``take`` of several runs, their histories read in one store call (a worker's pass
        reads a hundred runs in one round trip). Runs that do not exist are left out."""
        cached: dict[str, WorkflowRunSnapshot] = {}
        with self._lock:
            for run_id in run_ids:
                snapshot = self._pop_locked(run_id)
                if snapshot is not None:
                    cached[run_id] = snapshot
        after = {run_id: 0 for run_id in run_ids}
        for run_id, snapshot in cached.items():
            after[run_id] = snapshot.last_sequence
        # On an error the snapshots taken are dropped; the next take reads them whole.
        histories = self.store.read_histories(after)
        taken: dict[str, WorkflowRunSnapshot] = {}
        for run_id in run_ids:
            history = histories.get(run_id)
            if history is None or run_id in taken:
                continue
            snapshot = cached.get(run_id)
            if snapshot is None:
                if not history:
                    continue
                snapshot = project(history)
            else:
                for envelope in history:
                    snapshot.apply(envelope)
            taken[run_id] = snapshot
        return taken

    def cached_sequence(self, run_id: str) -> int:
        """The last sequence of the run's cached snapshot; 0 when none is cached."""
        with self._lock:
            snapshot = self._cache.get(run_id)
            return 0 if snapshot is None else snapshot.last_sequence

    def handed(self, run_id: str, history: Sequence[EventEnvelope]) -> WorkflowRunSnapshot | None:
        """The run's snapshot after ``history``, owned by the caller (as ``take``): the events
        a step lease read (``lease_steps(read_after=cached_sequence)``) folded into the cached
        snapshot they continue, or projected when they start at the run's first event.

        ``None`` when they continue a snapshot no longer cached (another thread took it
        meanwhile): the attempt then reads the run itself.
        """
        if not history:
            return None
        first = history[0].sequence
        snapshot = self._pop(run_id)
        if snapshot is not None and snapshot.last_sequence == first - 1:
            for envelope in history:
                snapshot.apply(envelope)
            return snapshot
        if snapshot is not None:
            self.put(snapshot)
        return project(list(history)) if first == 1 else None

    def put(self, snapshot: WorkflowRunSnapshot) -> None:
        """Give a snapshot of committed events back to the cache."""
        if snapshot.size > self.cache_bytes // 8:
            return  # one huge run must not evict everything else
        with self._lock:
            cached = self._cache.get(snapshot.run_id)
            if cached is not None:
                if cached.last_sequence >= snapshot.last_sequence:
                    self._cache.move_to_end(snapshot.run_id)
                    return
                self._bytes -= cached.size
            self._cache[snapshot.run_id] = snapshot
            self._cache.move_to_end(snapshot.run_id)
            self._bytes += snapshot.size
            while self._bytes > self.cache_bytes and self._cache:
                _, evicted = self._cache.popitem(last=False)
                self._bytes -= evicted.size

    def load(self, run_id: str) -> WorkflowRunSnapshot:
        """The run's current snapshot, as a private copy. Raises ``RunNotFound``."""
        snapshot = self.take(run_id)
        self.put(snapshot.copy())
        return snapshot

    def forget(self, run_id: str) -> None:
        self._pop(run_id)

    def _pop(self, run_id: str) -> WorkflowRunSnapshot | None:
        """Take the run's snapshot out of the cache, if it is there."""
        with self._lock:
            return self._pop_locked(run_id)

    def _pop_locked(self, run_id: str) -> WorkflowRunSnapshot | None:
        snapshot = self._cache.pop(run_id, None)
        if snapshot is not None:
            self._bytes -= snapshot.size
        return snapshot

    def commit(
        self, writes: Sequence[Write], now: datetime, creates: Sequence[NewRun] = ()
    ) -> list[WorkflowRunSnapshot]:
        """Append every write and create every run in one transaction.

        Returns the snapshots after the writes. Raises ``EventConflict`` if any run moved.
        """
        pendings = []
        for write in writes:
            pending = Pending.on(write.before.copy(), now)
            pending.add(write.events)
            pending.decide_at = write.decide_at
            pendings.append((pending, write.failing))
        stream_writes = [
            StreamWrite(
                run_id=p.snapshot.run_id,
                expected_sequence=p.expected_sequence,
                events=list(p.events),
                index=index_for(p.snapshot, p.events, decide_at=p.decide_at, failing=f),
            )
            for p, f in pendings
        ]
        self.store.commit(stream_writes, creates, now)
        afters = [p.snapshot for p, _ in pendings]
        for after in afters:
            self.put(after.copy())
        return afters

    def commit_pending(
        self,
        pendings: Sequence[Pending],
        creates: Sequence[NewRun] = (),
        *,
        keep_first: bool = False,
        group: GroupCommitter | None = None,
    ) -> None:
        """Commit writes prepared on owned snapshots, in one transaction.

        The snapshots go back to the cache (the caller must not touch them again), except the
        first one with ``keep_first``: its caller goes on owning it. Raises ``EventConflict``
        (nothing written) if any run moved: the caller drops its snapshots then. ``group``:
        the committer to share a transaction through when this process's worker has none.
        """
        if not pendings:
            return
        writes = [p.stream_write() for p in pendings]
        committer = self.group if self.group is not None else group
        if committer is not None:
            committer.commit(CommitGroup(writes=writes, creates=creates, now=pendings[0].now))
        else:
            self.store.commit(writes, creates, pendings[0].now)
        self.committed(pendings, keep_first=keep_first)

    def committed(self, pendings: Sequence[Pending], *, keep_first: bool = False) -> None:
        """After their commit: the snapshots are true again; back to the cache they go (but the
        first with ``keep_first``: its caller goes on owning it)."""
        observer = self.observer
        for index, pending in enumerate(pendings):
            if observer.listening and pending.events:
                notify_committed(
                    observer,
                    pending.snapshot,
                    pending.events,
                    pending.now,
                    pending.decide_at,
                    pending.failed_before,
                )
            pending.expected_sequence = pending.snapshot.last_sequence
            pending.events = []
            pending.data = []
            pending.decide_at = KEEP
            pending.failed_before = failing_type(pending.snapshot)
            pending.ended_before = pending.snapshot.terminal
            if index or not keep_first:
                self.put(pending.snapshot)


def simulate(
    before: WorkflowRunSnapshot, events: Sequence[Event], now: datetime
) -> WorkflowRunSnapshot:
    """The snapshot after appending ``events`` at ``now`` (as the store will record them)."""
    pending = Pending.on(before.copy(), now)
    pending.add(events)
    return pending.snapshot
