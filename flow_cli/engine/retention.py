"""Pruning ended runs (``flow prune``) and retention in the background (``[flow] retention``).

What goes. A run is pruned only when it has ended, and only with its whole family: the runs
linked to it as parent and children, or as predecessor and successor in a ``continue_as_new``
chain, transitively. A family goes once every member has ended before the cutoff; until then
each of its members stays, however old.

How. Runs matching the filters are read a page at a time (newest first, through the runs
index), their families found, and the families due packed into batches of at most
``BATCH_RUNS`` runs and ``BATCH_EVENTS`` events. For each batch: every history is archived
first when asked (``engine.archive``: written and flushed to disk), then the runs are deleted
in one short transaction (``Retention.delete_runs``), then the space is given back
(``reclaim_space``). A big family spans several batches, deleted farthest-from-the-selected-
runs first, so that what a crash leaves of it stays linked to a run the filters select: a
re-run finds it and finishes the job. A run is never deleted before its archive is on disk,
so after a crash at any point every run is either still in the database or archived (or
both, until the next prune).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

from flow_cli.errors import RunNotFound
from flow_cli.model.events import EventEnvelope, RunContinuedAsNew, RunStarted
from flow_cli.model.status import TERMINAL_STATUSES
from flow_cli.store.protocol import RunFilter, RunRecord

if TYPE_CHECKING:
    from flow_cli.engine.archive import Archive
    from flow_cli.engine.host import EngineHost

log = logging.getLogger("flow.retention")

PAGE = 500
"""Runs matching the filters read per query."""
BATCH_RUNS = max(1, int(os.environ.get("FLOW_PRUNE_BATCH", "100") or 100))
"""Runs deleted per transaction at most (``FLOW_PRUNE_BATCH``, default 100)."""
BATCH_EVENTS = 4000
"""Events deleted per transaction at most (a batch holds at least one run)."""

LEASE_NAME = "retention"
LEASE_SECONDS = 60.0
CHECK_SECONDS = 60.0
"""How often a worker with ``retention`` set looks whether any run is due (one indexed read)."""
PAUSE_SECONDS = 0.02
"""Background retention rests this long between batches, leaving the database to the work."""

ENDED = tuple(sorted(TERMINAL_STATUSES, key=lambda s: s.value))


@dataclass(frozen=True, slots=True, kw_only=True)
class PruneRequest:
    """What to prune: runs matching ``where`` that ended before ``ended_before``, with their
    families."""

    where: RunFilter
    ended_before: datetime
    archive: Path | None = None
    batch_runs: int = BATCH_RUNS
    batch_events: int = BATCH_EVENTS


@dataclass(slots=True)
class PruneReport:
    """What a prune did (or, dry, would do)."""

    pruned: list[str] = field(default_factory=list)
    """Runs deleted (or that would be), in order."""
    archived: int = 0
    """Of them, archived (written now or found written by an earlier prune)."""
    kept: int = 0
    """Selected runs kept because a member of their family is open or ended too recently."""
    batches: int = 0
    longest_batch_ms: float = 0.0
    """The longest delete transaction."""
    bytes_archived: int = 0
    records: list[RunRecord] = field(default_factory=list)
    """Dry: the rows of the runs that would go."""


@dataclass(slots=True)
class _Member:
    record: RunRecord
    history: list[EventEnvelope]
    depth: int
    """Links from the nearest run the filters selected (0 for those)."""


def selection(where: RunFilter, ended_before: datetime) -> RunFilter:
    """``where`` narrowed to ended runs with no event after ``ended_before``."""
    statuses = tuple(s for s in (where.statuses or ENDED) if s.terminal)
    idle = ended_before if where.idle_since is None else min(where.idle_since, ended_before)
    return dataclasses.replace(where, statuses=statuses, idle_since=idle)


class Pruner:
    """One prune over ``engine``'s store (see the module docstring)."""

    def __init__(
        self,
        engine: EngineHost,
        request: PruneRequest,
        *,
        between_batches: Callable[[], bool] | None = None,
    ) -> None:
        self.engine = engine
        self.store = engine.store
        self.request = request
        self.where = selection(request.where, request.ended_before)
        self.between_batches = between_batches
        """Called after each batch; returning False stops the prune (a worker stopping, a
        lease lost)."""
        self.kept = 0
        """Selected runs kept so far: a member of their family is open or ended too recently."""
        self._archive: Archive | None = None
        """Opened by a prune that deletes (a dry run writes nothing, not even a repair)."""

    def families(self, *, dry_run: bool = False) -> Iterator[list[_Member]]:
        """The due families, each ordered farthest member first, and an empty list after each
        page's: the caller deletes what it was given before it asks for more (or, ``dry_run``,
        deletes nothing), so the next page is read after the last run still listed."""
        seen: set[str] = set()
        cursor = self.where.after
        left = self.where.limit
        while left is None or left > 0:
            size = PAGE if left is None else min(PAGE, left)
            ask = dataclasses.replace(self.where, limit=size, after=cursor)
            try:
                page = self.store.find_runs(ask)
            except RunNotFound:  # the cursor's run went meanwhile (another prune): start over
                if cursor is None or cursor == self.where.after:
                    return
                cursor = self.where.after
                continue
            if not page:
                return
            fresh = [r for r in page if r.run_id not in seen]
            if left is not None:
                left -= len(fresh)
            gone: set[str] = set()
            for family in self._families_of(fresh, seen):
                yield family
                gone.update(m.record.run_id for m in family)
            yield []
            remaining = [r.run_id for r in page if dry_run or r.run_id not in gone]
            if remaining:
                cursor = remaining[-1]
            if len(page) < size and not (gone and not dry_run):
                return

    def _families_of(self, seeds: list[RunRecord], seen: set[str]) -> list[list[_Member]]:
        """The families of ``seeds`` that are due; every member is added to ``seen``."""
        members: dict[str, _Member] = {}
        histories = self.store.read_histories({r.run_id: 0 for r in seeds})
        frontier: list[str] = []
        for record in seeds:
            history = histories.get(record.run_id)
            if history:
                members[record.run_id] = _Member(record, history, 0)
                frontier.append(record.run_id)
        links: dict[str, set[str]] = {run_id: set() for run_id in members}
        depth = 0
        while frontier:
            depth += 1
            found: dict[str, RunRecord] = {}
            for child in self.store.children_of(frontier):
                links[child.parent_run_id or ""].add(child.run_id)
                links.setdefault(child.run_id, set()).add(child.parent_run_id or "")
                found[child.run_id] = child
            for run_id in frontier:
                for other in _linked(members[run_id]):
                    links[run_id].add(other)
                    links.setdefault(other, set()).add(run_id)
                    if other not in members and other not in found:
                        linked = self.store.get_run(other)
                        if linked is not None:
                            found[other] = linked
            new = {k: v for k, v in found.items() if k not in members}
            read = self.store.read_histories(dict.fromkeys(new, 0)) if new else {}
            frontier = []
            for run_id, record in new.items():
                history = read.get(run_id)
                if history:
                    members[run_id] = _Member(record, history, depth)
                    frontier.append(run_id)
        families: list[list[_Member]] = []
        placed: set[str] = set()
        for run_id in members:
            if run_id in placed:
                continue
            group = _component(run_id, links, members)
            placed.update(group)
            seen.update(group)
            family = sorted((members[i] for i in group), key=lambda m: (-m.depth, m.record.run_id))
            if all(self._due(m.record) for m in family):
                families.append(family)
            else:
                self.kept += sum(1 for m in family if m.depth == 0)
        return families

    def _due(self, record: RunRecord) -> bool:
        return record.status.terminal and record.updated_at <= self.request.ended_before

    def batches(self, *, dry_run: bool = False) -> Iterator[list[_Member]]:
        """The due families packed into batches (a big family split, farthest first); the
        last batch of a page is given before the next page is read."""
        batch: list[_Member] = []
        events = 0
        for family in self.families(dry_run=dry_run):
            if not family and batch:
                yield batch
                batch, events = [], 0
            for member in family:
                size = len(member.history)
                full = len(batch) >= self.request.batch_runs
                if batch and (full or events + size > self.request.batch_events):
                    yield batch
                    batch, events = [], 0
                batch.append(member)
                events += size
        if batch:
            yield batch

    def run(self, *, dry_run: bool = False) -> PruneReport:
        """Prune (or, ``dry_run``, list what would go); returns what was done."""
        report = PruneReport()
        if self.request.where.statuses and not self.where.statuses:
            return report  # only open statuses asked for: nothing of them is ever pruned
        if self.request.archive is not None and not dry_run:
            from flow_cli.engine.archive import Archive

            self._archive = Archive(self.request.archive)
        for batch in self.batches(dry_run=dry_run):
            if dry_run:
                report.pruned += [m.record.run_id for m in batch]
                report.records += [m.record for m in batch]
                continue
            if self._archive is not None:
                report.bytes_archived += self._archive.write(
                    [(m.record.run_id, m.history) for m in batch]
                )
            started = time.perf_counter()
            ids = [m.record.run_id for m in batch]
            gone = set(self.store.delete_runs(ids))
            deleted = [i for i in ids if i in gone]
            took = (time.perf_counter() - started) * 1000
            report.longest_batch_ms = max(report.longest_batch_ms, took)
            report.batches += 1
            report.pruned += deleted
            if self._archive is not None:
                report.archived += len(deleted)
            self.store.reclaim_space()
            if self.between_batches is not None and not self.between_batches():
                break
        report.kept = self.kept
        return report


def _linked(member: _Member) -> list[str]:
    """The runs a member's own history names: its parent, predecessor and successor."""
    found: list[str] = []
    first = member.history[0].event
    if isinstance(first, RunStarted):
        spec = first.spec
        found += [i for i in (spec.parent_run_id, spec.predecessor_run_id) if i]
    last = member.history[-1].event
    if isinstance(last, RunContinuedAsNew):
        found.append(last.successor_run_id)
    return found


def _component(start: str, links: dict[str, set[str]], members: dict[str, _Member]) -> list[str]:
    group = [start]
    seen = {start}
    for run_id in group:
        for other in links.get(run_id, ()):
            if other in members and other not in seen:
                seen.add(other)
                group.append(other)
    return group


# -- in the background -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class RetentionPolicy:
    """``[flow] retention`` (and ``retention_archive``): prune runs ended longer ago than
    ``keep`` in every worker's background, archiving them to ``archive`` first when set."""

    keep: timedelta
    archive: Path | None = None
    check_seconds: float = CHECK_SECONDS
    lease_seconds: float = LEASE_SECONDS
    batch_runs: int = 50


class RetentionKeeper:
    """A worker's background thread for ``RetentionPolicy``: every ``check_seconds`` one
    indexed read says whether any run is due; only then does it take the ``retention`` lease
    (one worker of the fleet holds it at a time) and prune, a small batch at a time, renewing
    the lease between batches and resting ``PAUSE_SECONDS``."""

    def __init__(
        self, engine: EngineHost, policy: RetentionPolicy, stopping: threading.Event
    ) -> None:
        self.engine = engine
        self.policy = policy
        self._stopping = stopping
        self._thread: threading.Thread | None = None
        self.pruned = 0
        self.passes = 0

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="flow-retention", daemon=True)
        self._thread.start()

    def join(self, timeout: float | None = None) -> None:
        if self._thread is not None:
            self._thread.join(timeout)

    def _loop(self) -> None:
        while not self._stopping.is_set():
            try:
                self.prune_due()
            except Exception as exc:  # a full disk, an outage: try again at the next look
                log.warning("retention: %s", exc)
            self._stopping.wait(self.policy.check_seconds)

    def prune_due(self) -> int:
        """Prune what is due if this worker gets the lease; the number of runs pruned."""
        now = self.engine.clock.now()
        cutoff = now - self.policy.keep
        store = self.engine.store
        due = store.find_runs(selection(RunFilter(limit=1), cutoff))
        if not due:
            return 0
        owner = self.engine.worker_id
        lease = timedelta(seconds=self.policy.lease_seconds)
        if not store.take_lease(LEASE_NAME, owner, now, now + lease):
            return 0

        def renew() -> bool:
            if self._stopping.is_set():
                return False
            self._stopping.wait(PAUSE_SECONDS)
            at = self.engine.clock.now()
            return store.take_lease(LEASE_NAME, owner, at, at + lease)

        request = PruneRequest(
            where=RunFilter(),
            ended_before=cutoff,
            archive=self.policy.archive,
            batch_runs=self.policy.batch_runs,
        )
        self.passes += 1
        try:
            report = Pruner(self.engine, request, between_batches=renew).run()
        finally:
            store.release_lease(LEASE_NAME, owner)
        self.pruned += len(report.pruned)
        if report.pruned:
            log.info(
                "retention: pruned %d runs ended before %s", len(report.pruned), cutoff.isoformat()
            )
        return len(report.pruned)
