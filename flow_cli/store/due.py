"""``DueHints``: when work is next due, as a worker's step lease saw it in its own transaction.

A worker's pass leases ready steps, then looks for due runs, and before it sleeps reads when
work is next due. Read in the lease's transaction (one more statement there, no round trip of
its own), the last two cost no query while nothing can have changed them: this process has
written nothing since, it has not waited (a wait is how commits elsewhere that make work are
heard: they ring a doorbell or NOTIFY, and the wait after the pass returns at once for them),
and the hint is young. Time alone needs no query: a run due after the hint's time is not due
before it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

MAX_AGE = 0.25
"""Seconds a hint is trusted at most (a worker's pass is far shorter; a caller that never
waits, as ``flow tick`` between leases, still sees commits elsewhere this soon)."""

HORIZON = timedelta(seconds=60)
"""How far ahead a lease looks for when work is next due. A worker wakes every second or so
anyway; an unbounded look walks the due-time index over every waiting run of other builds
(a million-run database: ~120 ms a look, where a bounded one reads a few rows)."""


@dataclass(frozen=True, slots=True)
class DueHint:
    """The earliest run decision and step task times of some builds, as of one transaction."""

    builds: tuple[str, ...]
    runs: datetime | None
    steps: datetime | None
    writes: int
    """The store's count of writes by this process that the hint's transaction saw."""
    taken: float
    """``time.monotonic()`` when it was taken."""
    until: datetime | None = None
    """The times were looked for up to this time only (``None``: all of them)."""

    @property
    def earliest(self) -> datetime | None:
        found = [t for t in (self.runs, self.steps) if t is not None]
        return min(found, default=None)

    def answers(self, until: datetime | None) -> bool:
        """Whether it answers a look up to ``until`` (``None``: every time): a time it found
        is the earliest whatever the bound (nothing earlier was left out); finding none
        answers only a look no further than its own."""
        if self.until is None or self.earliest is not None:
            return True
        return until is not None and until <= self.until


class DueHints:
    """One store's latest hint, and its count of writes by this process."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._writes = 0
        self._hint: DueHint | None = None

    def writes(self) -> int:
        """The count to give ``offer`` for a transaction that begins now."""
        with self._lock:
            return self._writes

    def wrote(self) -> None:
        """A transaction of this process committed a write: any hint may be out of date."""
        with self._lock:
            self._writes += 1
            self._hint = None

    def forget(self) -> None:
        """Drop the hint (the caller is about to wait, or looks afresh)."""
        with self._lock:
            self._hint = None

    def offer(
        self,
        builds: Sequence[str],
        runs: datetime | None,
        steps: datetime | None,
        *,
        writes: int,
        until: datetime | None = None,
    ) -> None:
        """Keep what a transaction read (looking up to ``until``), if this process wrote
        nothing since ``writes`` was counted (before the transaction began; its own commit
        counted in, if it wrote)."""
        with self._lock:
            if self._writes == writes:
                self._hint = DueHint(
                    tuple(builds), runs, steps, writes, time.monotonic(), until=until
                )

    def fresh(self, builds: Sequence[str]) -> DueHint | None:
        """The hint, if it is about ``builds`` and may still be trusted."""
        with self._lock:
            hint = self._hint
            if hint is None or hint.writes != self._writes or hint.builds != tuple(builds):
                return None
            if time.monotonic() - hint.taken > MAX_AGE:
                self._hint = None
                return None
            return hint

    def next_due(
        self,
        builds: Sequence[str],
        read: Callable[[datetime | None], Iterable[datetime | None]],
        until: datetime | None = None,
    ) -> datetime | None:
        """The earliest time work of ``builds`` is due (with ``until``: ``None`` when none is
        due by then): from a fresh hint that answers it, else the earliest of the times
        ``read(until)`` gets from the database (a run's ``decide_at``, a step's
        ``available_at``, looked for up to ``until``; ``None`` where there is none)."""
        if not builds:
            return None
        hint = self.fresh(builds)
        if hint is not None and hint.answers(until):
            return hint.earliest
        return min((t for t in read(until) if t is not None), default=None)

    def no_run_due(self, builds: Sequence[str], now: datetime) -> bool:
        """Whether a fresh hint shows that no run of ``builds`` is due at ``now``."""
        hint = self.fresh(builds)
        return hint is not None and (hint.runs is None or hint.runs > now)
