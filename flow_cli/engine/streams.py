"""Reading and writing run streams: a snapshot cache in front of the store.

A worker keeps recent snapshots and reads only the events after ``last_sequence``, so a long
history is not re-read for every decision. Every write is validated by the store's
``append_if_sequence`` semantics; the cache is only refreshed from committed results.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from flow_cli.engine.indexing import index_for
from flow_cli.errors import RunNotFound
from flow_cli.model.events import Event, EventEnvelope
from flow_cli.model.snapshot import WorkflowRunSnapshot, project
from flow_cli.store.protocol import KEEP, EventStore, Keep, NewRun, StreamWrite


@dataclass(frozen=True, slots=True)
class Write:
    """Events to append to one run, given the snapshot they were decided on."""

    before: WorkflowRunSnapshot
    events: Sequence[Event]
    decide_at: datetime | Keep | None = KEEP
    failing: str | Keep | None = KEEP


class Streams:
    """Snapshot cache plus atomic multi-run writes."""

    def __init__(self, store: EventStore, cache_size: int = 4096) -> None:
        self.store = store
        self._cache: OrderedDict[str, WorkflowRunSnapshot] = OrderedDict()
        self._cache_size = cache_size
        self._lock = threading.Lock()

    def load(self, run_id: str) -> WorkflowRunSnapshot:
        """The run's current snapshot, as a private copy. Raises ``RunNotFound``."""
        with self._lock:
            cached = self._cache.get(run_id)
            base = cached.copy() if cached is not None else None
        if base is None:
            history = self.store.read_history(run_id)
            if not history:
                raise RunNotFound(run_id)
            snapshot = project(history)
        else:
            snapshot = base
            for envelope in self.store.read_history(run_id, after_sequence=base.last_sequence):
                snapshot.apply(envelope)
        self._remember(snapshot)  # the cache keeps its own copy; this one is the caller's
        return snapshot

    def forget(self, run_id: str) -> None:
        with self._lock:
            self._cache.pop(run_id, None)

    def _remember(self, snapshot: WorkflowRunSnapshot) -> None:
        with self._lock:
            cached = self._cache.get(snapshot.run_id)
            if cached is not None and cached.last_sequence >= snapshot.last_sequence:
                self._cache.move_to_end(snapshot.run_id)
                return
            self._cache[snapshot.run_id] = snapshot.copy()
            self._cache.move_to_end(snapshot.run_id)
            while len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)

    def commit(
        self, writes: Sequence[Write], now: datetime, creates: Sequence[NewRun] = ()
    ) -> list[WorkflowRunSnapshot]:
        """Append every write and create every run in one transaction.

        Returns the snapshots after the writes. Raises ``EventConflict`` if any run moved.
        """
        afters: list[WorkflowRunSnapshot] = []
        stream_writes: list[StreamWrite] = []
        for write in writes:
            after = simulate(write.before, write.events, now)
            afters.append(after)
            stream_writes.append(
                StreamWrite(
                    run_id=write.before.run_id,
                    expected_sequence=write.before.last_sequence,
                    events=list(write.events),
                    index=index_for(
                        after, write.events, decide_at=write.decide_at, failing=write.failing
                    ),
                )
            )
        self.store.commit(stream_writes, creates, now)
        for after in afters:
            self._remember(after)
        return afters


def simulate(
    before: WorkflowRunSnapshot, events: Sequence[Event], now: datetime
) -> WorkflowRunSnapshot:
    """The snapshot after appending ``events`` at ``now`` (as the store will record them)."""
    after = before.copy()
    for offset, event in enumerate(events, start=1):
        after.apply(
            EventEnvelope(
                run_id=before.run_id,
                sequence=before.last_sequence + offset,
                recorded_at=now,
                event=event,
            )
        )
    return after
