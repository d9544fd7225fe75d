"""Pauses (``flow pause``): the targets whose runs workers hold, stored so every worker on every
machine sees them at once.

A pause names a run, a workflow or a build. A run it holds is not leased for a decision and
its step tasks are not leased (attempts in flight finish); facts still reach it (starts,
signals, hook callbacks, updates are recorded), and a pause of a workflow or a build also
holds the runs started after it, until ``flow resume``. The lease queries (and ``next_due``,
so an idle worker does not spin on a due run it may not take) leave held runs out; see
``pauses_sql`` for the SQL stores.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import Enum
from typing import Protocol, runtime_checkable


class PauseKind(Enum):
    """What a pause names."""

    RUN = "run"
    WORKFLOW = "workflow"
    BUILD = "build"


@dataclass(frozen=True, slots=True, kw_only=True)
class PauseTarget:
    """One target of ``flow pause`` / ``flow resume``: a run id, workflow name or build id."""

    kind: PauseKind
    name: str

    def __str__(self) -> str:
        return f"{self.kind.value}:{self.name}"


@dataclass(frozen=True, slots=True, kw_only=True)
class Pause:
    """A stored pause: its target, why (``--reason``) and since when."""

    target: PauseTarget
    reason: str | None
    paused_at: datetime

    def to_json(self) -> dict[str, str | None]:
        return {
            "kind": self.target.kind.value,
            "target": self.target.name,
            "reason": self.reason,
            "paused_at": self.paused_at.isoformat(),
        }


class PauseSet:
    """The pauses in force, to ask whether one holds a given run."""

    def __init__(self, pauses: Iterable[Pause] = ()) -> None:
        self._by_target = {(p.target.kind, p.target.name): p for p in pauses}

    def __bool__(self) -> bool:
        return bool(self._by_target)

    def holding(self, run_id: str, workflow: str, build_id: str) -> Pause | None:
        """The pause that holds this run (its own first, then its workflow's, then its
        build's), or ``None``."""
        for key in (
            (PauseKind.RUN, run_id),
            (PauseKind.WORKFLOW, workflow),
            (PauseKind.BUILD, build_id),
        ):
            found = self._by_target.get(key)
            if found is not None:
                return found
        return None


class Pauses(Protocol):
    """The stored pauses. Each method is one transaction; adding or removing one tells
    waiting workers (a resumed run is due at once)."""

    def add_pauses(self, targets: Sequence[PauseTarget], reason: str | None, now: datetime) -> int:
        """Pause these targets (a target paused already keeps its first time, and takes the
        new reason); returns how many were not paused before."""
        ...

    def remove_pauses(self, targets: Sequence[PauseTarget]) -> int:
        """Lift the pauses of these targets; returns how many there were."""
        ...

    def list_pauses(self) -> list[Pause]:
        """Every pause in force, by kind then target."""
        ...


@runtime_checkable
class PauseProbes(Protocol):
    """Optional: a store whose leases look whether anything is paused (SQLite), and tell the
    last answer, so that a worker's step threads need not read the pauses table themselves
    (a thread's first read opens a connection of its own)."""

    def last_pause_probe(self) -> tuple[float, bool] | None:
        """``(time.monotonic() of the look, whether anything was paused)``, or ``None``."""
        ...


@runtime_checkable
class PauseProbeRequests(PauseProbes, Protocol):
    """Optional: a store whose next group commit looks whether anything is paused when asked,
    in the commit's own transaction (SQLite, PostgreSQL: no round trip of its own), so that a
    process that commits now and then keeps ``last_pause_probe`` fresh without reading the
    pauses table on a thread of its own."""

    def want_pause_probe(self) -> None:
        """Have the next commit look (``last_pause_probe`` then tells what it found)."""
        ...


def sorted_pauses(pauses: Iterable[Pause]) -> list[Pause]:
    """``list_pauses``' order: by kind (run, workflow, build), then target."""
    order = {kind: n for n, kind in enumerate(PauseKind)}
    return sorted(pauses, key=lambda p: (order[p.target.kind], p.target.name))


class MemoryPauses:
    """``Pauses`` held in the process (``MemoryStore``)."""

    def __init__(self) -> None:
        self._pauses: dict[PauseTarget, Pause] = {}
        self._pauses_lock = threading.Lock()

    def _pause_set(self) -> PauseSet:
        with self._pauses_lock:
            return PauseSet(self._pauses.values())

    def _pauses_changed(self) -> None:
        """Called after a change: the store wakes its waiting workers."""

    def add_pauses(self, targets: Sequence[PauseTarget], reason: str | None, now: datetime) -> int:
        """Pause these targets; returns how many were not paused before."""
        added = 0
        with self._pauses_lock:
            for target in targets:
                was = self._pauses.get(target)
                added += was is None
                at = now if was is None else was.paused_at
                self._pauses[target] = Pause(target=target, reason=reason, paused_at=at)
        self._pauses_changed()
        return added

    def remove_pauses(self, targets: Sequence[PauseTarget]) -> int:
        """Lift these targets' pauses; returns how many there were."""
        with self._pauses_lock:
            removed = sum(self._pauses.pop(target, None) is not None for target in targets)
        self._pauses_changed()
        return removed

    def list_pauses(self) -> list[Pause]:
        """Every pause in force, by kind then target."""
        with self._pauses_lock:
            return sorted_pauses(self._pauses.values())
