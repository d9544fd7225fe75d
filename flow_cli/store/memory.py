"""The reference ``EventStore``: everything in dictionaries, guarded by one lock.

Used by tests and by ``memory://``. It keeps event data as JSON text, like the database stores do,
so a payload reads back exactly as it would from SQLite or PostgreSQL (tuples become lists) and a
caller mutating what it read cannot change history. Every method holds the lock for its whole
duration, which is what makes each one a transaction; ``commit`` validates everything before it
changes anything, so a failed commit writes nothing.
"""

from __future__ import annotations

import itertools
import json
import threading
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, fields, replace
from datetime import UTC, datetime
from typing import Any

from flow_cli.errors import EventConflict, FlowError, HookTokenInUse, RunNotFound
from flow_cli.model.carried import replaced
from flow_cli.model.events import Event, EventEnvelope, RunStarted, StepStarted, event_from_data
from flow_cli.model.status import RunStatus
from flow_cli.store.causes import cause_of
from flow_cli.store.index import row_changes, start_attributes
from flow_cli.store.limits_memory import LimitedRun, MemoryLimits
from flow_cli.store.pauses import MemoryPauses
from flow_cli.store.protocol import (
    GROUP_ERRORS,
    KEEP,
    NO_GROUP,
    WORKER_RETENTION,
    AppendViaCommit,
    BuildUsage,
    CauseQuery,
    CauseTally,
    CommitGroup,
    HookListing,
    HookRecord,
    LeaseAsk,
    NewRun,
    ReadAfter,
    RunCount,
    RunFilter,
    RunIndex,
    RunRecord,
    RunState,
    StepHeartbeat,
    StepLease,
    StepRenewal,
    StepTask,
    StoreStats,
    StreamWrite,
    WorkerInfo,
    attribute_count,
    attribute_grouping,
    carry_histories,
    waiting_needle,
)
from flow_cli.store.retention_memory import MemoryRetention
from flow_cli.store.schedules_memory import MemorySchedules


def _utc(value: datetime) -> datetime:
    """Aware UTC (a naive time is taken as UTC), as the database stores hand back."""
    if value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    return value.astimezone(UTC)


@dataclass(slots=True)
class _Event:
    event_key: str
    recorded_at: datetime
    data: str
    """The event's ``to_data()`` as JSON text."""


@dataclass(slots=True)
class _Run:
    """A run as the store keeps it: its index row, and what only the store sees of it."""

    row: RunRecord
    """Its index row but for ``last_sequence`` and ``attributes``, which ``record`` reads from
    ``events`` and ``attribute_texts`` (so there is one copy of each); written by ``replace``."""
    order: int
    """Creation order: breaks ties between runs created at the same instant."""
    events: list[_Event]
    attribute_texts: dict[str, str]
    """Search attributes as the index keeps them: key → JSON text."""
    patches: tuple[str, ...] = ()
    lease_owner: str | None = None
    failing_since: datetime | None = None

    @property
    def attributes(self) -> dict[str, Any]:
        return {key: json.loads(text) for key, text in self.attribute_texts.items()}

    def record(self) -> RunRecord:
        """Its index row (its sequence is its event count)."""
        return replace(self.row, last_sequence=len(self.events), attributes=self.attributes)

    def state(self, tasks: Iterable[StepTask]) -> RunState:
        """Its index row with its lease and step ``tasks``, as ``run_states`` reads it."""
        return RunState(
            tasks=tuple(tasks),
            lease_owner=self.lease_owner,
            failing_since=self.failing_since,
            **_kept(self.row, _STATE_FIELDS),
        )

    def set_decide_at(self, decide_at: datetime | None) -> None:
        """A new decision time, which releases the run's lease."""
        self.row = replace(self.row, decide_at=None if decide_at is None else _utc(decide_at))
        self.lease_owner = None


def _names(kind: Any, besides: str) -> tuple[str, ...]:
    return tuple(f.name for f in fields(kind) if f.name != besides)


_STATE_FIELDS = tuple(sorted(set(_names(RunState, "tasks")) & set(_names(RunRecord, "attributes"))))
"""What a run's state reads from its index row (not its lease nor ``failing_since``)."""


def _kept(source: object, names: tuple[str, ...]) -> dict[str, Any]:
    """``names`` as ``source`` holds them: a run's row read out into a record of the same
    field names (``_STATE_FIELDS``) without restating each field."""
    return {name: getattr(source, name) for name in names}


def _encode(events: Sequence[Event], now: datetime) -> list[_Event]:
    return [_Event(e.event_key(), now, json.dumps(e.to_data(), ensure_ascii=False)) for e in events]


class MemoryStore(MemorySchedules, MemoryRetention, MemoryPauses, MemoryLimits, AppendViaCommit):
    """An ``EventStore`` that lives and dies with the process; safe to share between threads."""

    def __init__(self) -> None:
        MemorySchedules.__init__(self)
        MemoryRetention.__init__(self)
        MemoryPauses.__init__(self)
        MemoryLimits.__init__(self)
        self.stats = StoreStats()
        self._runs: dict[str, _Run] = {}
        self._tasks: dict[tuple[str, str], StepTask] = {}
        """The step tasks by (run id, step id), as the run index planned them; a task's build
        is its run's."""
        self._heartbeats: dict[tuple[str, str], StepHeartbeat] = {}
        self._hooks: dict[str, HookRecord] = {}
        self._workers: dict[str, WorkerInfo] = {}
        self._hook_rows: dict[str, HookListing] = {}
        """What ``list_hooks`` shows, in creation order."""
        self._order = itertools.count()
        self._lock = threading.RLock()
        self._changed = threading.Condition(self._lock)
        self._version = 0
        """Bumped by every write, so ``wait_for_change`` can tell that one happened."""

    # -- writes -----------------------------------------------------------------------------------

    def create_run(self, run: NewRun, now: datetime) -> EventEnvelope | None:
        """Create the run with ``run_started`` at sequence 1; None if the run id exists."""
        with self._lock:
            if run.run_id in self._runs:
                return None
            self._insert(run, _utc(now))
            self._touched()
        return EventEnvelope(
            run_id=run.run_id,
            sequence=1,
            recorded_at=_utc(now),
            event=RunStarted(spec=run.spec, seed=run.seed),
        )

    def commit(
        self, writes: Sequence[StreamWrite], creates: Sequence[NewRun], now: datetime
    ) -> list[list[EventEnvelope]]:
        """Apply the creations, then the writes, atomically (see ``EventStore``)."""
        at = _utc(now)
        times = [at if w.recorded_at is None else _utc(w.recorded_at) for w in writes]
        # Bad JSON fails before any change.
        encoded = [_encode(w.events, t) for w, t in zip(writes, times, strict=True)]
        with self._lock:
            try:
                self._validate(writes, creates)
            except EventConflict:
                self.stats.conflicts += 1
                raise
            for run in creates:
                self._insert(run, at)
            for write, rows in zip(writes, encoded, strict=True):
                self._runs[write.run_id].events.extend(rows)
                self._apply_index(write.run_id, write.index, at)
            self._touched()
        return [
            [
                EventEnvelope(run_id=w.run_id, sequence=seq, recorded_at=t, event=e)
                for seq, e in enumerate(w.events, w.expected_sequence + 1)
            ]
            for w, t in zip(writes, times, strict=True)
        ]

    def commit_groups(self, groups: Sequence[CommitGroup]) -> list[FlowError | None]:
        """Each group as one ``commit``, under one lock (see ``EventStore``)."""
        results: list[FlowError | None] = []
        with self._lock:
            for group in groups:
                try:
                    self.commit(group.writes, group.creates, group.now)
                except GROUP_ERRORS as exc:
                    results.append(exc)
                else:
                    results.append(None)
        return results

    def _validate(self, writes: Sequence[StreamWrite], creates: Sequence[NewRun]) -> None:
        """Raise what ``commit`` would raise, before anything changes."""
        last: dict[str, int] = {}
        for run in creates:
            # Creating is appending after sequence 0: an existing id is a stale expectation.
            self._check_sequence(run.run_id, 0, last.get(run.run_id, self._last(run.run_id, 0)))
            last[run.run_id] = 1
        for write in writes:
            actual = last.get(write.run_id, self._last(write.run_id, None))
            if actual is None:
                raise RunNotFound(write.run_id)
            self._check_sequence(write.run_id, write.expected_sequence, actual)
            last[write.run_id] = actual + len(write.events)
        claimed: dict[str, tuple[str, str]] = {}
        for write in writes:
            for hook in write.index.hooks:
                known = self._hooks.get(hook.token)
                owner = claimed.get(hook.token) or (known and (known.run_id, known.hook_id))
                if owner and owner != (write.run_id, hook.hook_id):
                    raise HookTokenInUse(hook.token, owner[0], owner[1])
                claimed[hook.token] = (write.run_id, hook.hook_id)

    def _last(self, run_id: str, missing: int | None) -> int | None:
        run = self._runs.get(run_id)
        return missing if run is None else len(run.events)

    @staticmethod
    def _check_sequence(run_id: str, expected: int, actual: int | None) -> None:
        """The one place a lost race becomes ``EventConflict``."""
        if actual != expected:
            raise EventConflict(run_id, expected, actual)

    def _insert(self, run: NewRun, at: datetime) -> None:
        spec = run.spec
        row = RunRecord(
            run_id=run.run_id,
            workflow=spec.workflow,
            status=RunStatus.PENDING,
            build_id=spec.runtime_build_id,
            parent_run_id=spec.parent_run_id,
            created_at=at if run.created_at is None else _utc(run.created_at),
            updated_at=at,
            last_sequence=0,  # read from the events
            decide_at=None if run.decide_at is None else _utc(run.decide_at),
            failing=None,
            priority=spec.priority,
        )
        self._runs[run.run_id] = _Run(
            row=row,
            order=next(self._order),
            events=_encode([RunStarted(spec=spec, seed=run.seed)], at),
            attribute_texts=start_attributes(run),
            patches=tuple(spec.patches),
        )

    def _apply_index(self, run_id: str, index: RunIndex, at: datetime) -> None:
        changes = row_changes(index)
        run = self._runs[run_id]
        run.row = replace(run.row, status=changes.status, updated_at=at)
        if changes.build_id is not KEEP:
            run.row = replace(run.row, build_id=changes.build_id)
        if changes.decide_at is not KEEP:
            run.set_decide_at(changes.decide_at)
        if changes.failing is not KEEP:
            run.failing_since = changes.failing_since(run.row.failing, run.failing_since, at)
            run.row = replace(run.row, failing=changes.failing)
        if changes.error is not KEEP:
            error = changes.error
            run.row = replace(
                run.row,
                error_type=None if error is None else error.error_type,
                error=None if error is None else error.text,
            )
        if changes.waiting_on is not KEEP:
            run.row = replace(run.row, waiting_on=changes.waiting_on)
        run.attribute_texts.update(changes.attributes)
        if changes.drop_tasks:
            for key in [k for k in self._tasks if k[0] == run_id]:
                del self._tasks[key]
        for step_id, task in changes.tasks.items():
            if task is None:
                self._tasks.pop((run_id, step_id), None)
            else:
                at = _utc(task.available_at)
                self._tasks[(run_id, step_id)] = replaced(task, available_at=at)
        for hook in changes.hooks:
            self._hooks[hook.token] = HookRecord(
                token=hook.token, run_id=run_id, hook_id=hook.hook_id, resolved=hook.resolved
            )
            known = self._hook_rows.get(hook.token)
            self._hook_rows[hook.token] = HookListing(
                run_id=run_id,
                hook_id=hook.hook_id,
                token=hook.token,
                resolved=hook.resolved,
                created_at=at if known is None else known.created_at,
                metadata=json.loads(json.dumps(hook.metadata)) if known is None else known.metadata,
            )

    def _held(self, run_id: str) -> bool:
        """Whether a pause holds the run (``flow pause``): its work is not leased."""
        if not self._pauses:
            return False
        row = self._runs[run_id].row
        return self._pause_set().holding(run_id, row.workflow, row.build_id) is not None

    def _pauses_changed(self) -> None:
        with self._lock:
            self._touched(durable=False)

    def _touched(self, *, durable: bool = True) -> None:
        self._version += 1
        if durable:
            self.stats.durable_commits += 1
        else:
            self.stats.index_commits += 1
        self._changed.notify_all()

    def park_run(self, run_id: str, expected_sequence: int, decide_at: datetime | None) -> bool:
        """Set ``decide_at`` if the run is still at ``expected_sequence``."""
        with self._lock:
            run = self._runs.get(run_id)
            if run is None or len(run.events) != expected_sequence:
                return False
            run.set_decide_at(decide_at)
            self._touched(durable=False)
            return True

    # -- reads ------------------------------------------------------------------------------------

    def read_history(self, run_id: str, after_sequence: int = 0) -> list[EventEnvelope]:
        """Events with ``sequence > after_sequence``, in order. Raises ``RunNotFound``."""
        with self._lock:
            run = self._runs.get(run_id)
            if run is None:
                raise RunNotFound(run_id)
            after = max(after_sequence, 0)
            rows = list(enumerate(run.events[after:], after + 1))
        return [
            EventEnvelope(
                run_id=run_id,
                sequence=seq,
                recorded_at=row.recorded_at,
                event=event_from_data(row.event_key, json.loads(row.data)),
                size=len(row.data),
            )
            for seq, row in rows
        ]

    def get_run(self, run_id: str) -> RunRecord | None:
        """The run's index row, or None."""
        with self._lock:
            run = self._runs.get(run_id)
            return None if run is None else run.record()

    def find_hook(self, token: str) -> HookRecord | None:
        """The hook owning ``token``, or None."""
        with self._lock:
            return self._hooks.get(token)

    def _matching(self, where: RunFilter) -> list[_Run]:
        """Runs matching ``where`` (cursor and limit aside), newest first."""
        statuses = set(where.statuses)
        since = None if where.since is None else _utc(where.since)
        until = None if where.until is None else _utc(where.until)
        idle = None if where.idle_since is None else _utc(where.idle_since)
        needle = None if where.waiting_on is None else waiting_needle(where.waiting_on)
        runs = [
            r
            for r in self._runs.values()
            if (not statuses or r.row.status in statuses)
            and (where.workflow is None or r.row.workflow == where.workflow)
            and (where.build_id is None or r.row.build_id == where.build_id)
            and (since is None or r.row.created_at >= since)
            and (until is None or r.row.created_at < until)
            and (not where.failing or r.row.failing is not None)
            and (
                needle is None
                or (r.row.waiting_on is not None and needle in f" {r.row.waiting_on} ")
            )
            and (idle is None or r.row.updated_at <= idle)
            and (not where.top_level or r.row.parent_run_id is None)
            and (where.error_type is None or r.row.error_type == where.error_type)
            and all(r.attribute_texts.get(key) == text for key, text in where.attributes)
        ]
        runs.sort(key=lambda r: (r.row.created_at, r.order), reverse=True)
        return runs

    def find_runs(self, where: RunFilter) -> list[RunRecord]:
        """Runs matching ``where``, newest first (creation order breaks ties)."""
        with self._lock:
            runs = self._matching(where)
            if where.after is not None:
                cursor = self._runs.get(where.after)
                if cursor is None:
                    raise RunNotFound(where.after)
                key = (cursor.row.created_at, cursor.order)
                runs = [r for r in runs if (r.row.created_at, r.order) < key]
            return [r.record() for r in runs[: where.limit]]

    def count_runs(self, where: RunFilter, by: str | None = None) -> RunCount:
        """How many runs match ``where``, grouped by ``by`` when given."""
        with self._lock:
            runs = self._matching(where)
            groups: dict[str, int] = {}
            key = None if by is None else attribute_grouping(by)
            if key is not None:
                return attribute_count(Counter(r.attribute_texts.get(key) for r in runs).items())
            if by is not None:
                for run in runs:
                    value = getattr(run.row, by)
                    key = NO_GROUP if value is None else str(value)
                    groups[key] = groups.get(key, 0) + 1
            return RunCount(total=len(runs), groups=dict(sorted(groups.items())))

    def run_states(self, where: RunFilter) -> list[RunState]:
        """Runs matching ``where`` with their lease and step tasks, newest first."""
        with self._lock:
            runs = [self._runs[r.run_id] for r in self.find_runs(where)]
            tasks: dict[str, list[StepTask]] = {}
            for (run_id, _), task in sorted(self._tasks.items()):
                tasks.setdefault(run_id, []).append(task)
            return [run.state(tasks.get(run.row.run_id, ())) for run in runs]

    def cause_tally(self, where: RunFilter, query: CauseQuery) -> CauseTally:
        """``flow doctor``'s causes by ``causes.RULES`` over every run selected."""
        every = self.run_states(replace(where, limit=None, after=None))
        ranked = sorted((*cause_of(state, query), state.run_id, state) for state in every)
        counts = Counter(cause for cause, _, _, _ in ranked)
        samples: list[tuple[str, RunState]] = []
        for cause, _, _, state in ranked:
            if sum(1 for c, _ in samples if c == cause) < max(1, query.keep):
                samples.append((cause, state))
        return CauseTally(counts=dict(counts), samples=tuple(samples))

    def build_usage(self) -> list[BuildUsage]:
        """Every build id of some run, by build id, with its open runs."""
        with self._lock:
            runs = sorted(self._runs.values(), key=lambda r: (r.row.created_at, r.order))
            builds: dict[str, list[_Run]] = {}
            for run in runs:
                builds.setdefault(run.row.build_id, []).append(run)
        usage = []
        for build_id, members in sorted(builds.items()):
            open_runs = [r for r in members if not r.row.status.terminal]
            counts: dict[str, int] = {}
            for run in open_runs:
                counts[run.row.status.value] = counts.get(run.row.status.value, 0) + 1
            usage.append(
                BuildUsage(
                    build_id=build_id,
                    open=dict(sorted(counts.items())),
                    oldest_open_run=open_runs[0].row.run_id if open_runs else None,
                    oldest_open_at=open_runs[0].row.created_at if open_runs else None,
                    patches=tuple(sorted({p for r in open_runs for p in r.patches})),
                )
            )
        return usage

    def list_hooks(self, run_id: str | None = None, open_only: bool = False) -> list[HookListing]:
        """Hooks of one run or all runs, oldest first."""
        with self._lock:
            return [
                h
                for h in self._hook_rows.values()
                if (run_id is None or h.run_id == run_id)
                and not (open_only and (h.resolved or self._runs[h.run_id].row.status.terminal))
            ]

    # -- due work ---------------------------------------------------------------------------------

    def lease_runs(self, ask: LeaseAsk) -> list[str]:
        """Lease up to ``limit`` due runs of these builds by moving ``decide_at`` ahead."""
        worker, build_ids, now, lease_until, limit = ask
        builds, now, until = set(build_ids), _utc(now), _utc(lease_until)
        paused = self._pause_set()
        with self._lock:
            limited = self.limited_workflows()
            due = [
                (r.row.priority, r.row.decide_at, r.order, r)
                for r in self._runs.values()
                if r.row.build_id in builds
                and r.row.decide_at is not None
                and r.row.decide_at <= now
                and not (paused and paused.holding(r.row.run_id, r.row.workflow, r.row.build_id))
                and not (r.row.status is RunStatus.PENDING and r.row.workflow in limited)
            ]
            due.sort(key=lambda item: item[:3])
            leased = [r for _, _, _, r in due[: max(limit, 0)]]
            if limited:  # runs of limited workflows: admitted as their limits leave slots
                room = limit - len(leased)
                runs = [
                    r
                    for r in self._runs.values()
                    if not (paused and paused.holding(r.row.run_id, r.row.workflow, r.row.build_id))
                ]
                admitted = self._lease_limited_runs(runs, builds, now, room)
                leased += [self._runs[r.row.run_id] for r in admitted]
            for run in leased:
                run.row = replace(run.row, decide_at=until)
                run.lease_owner = worker
            if leased:
                self._touched(durable=False)
            self.stats.scheduler_rows_read += len(leased)
            return [r.row.run_id for r in leased]

    def lease_steps(self, ask: LeaseAsk, read_after: ReadAfter | None = None) -> list[StepLease]:
        """Lease up to ``limit`` ready step tasks of these builds, oldest first, recording
        ``step_started`` for each in the same step (``read_after``: see ``EventStore``)."""
        worker, build_ids, now, lease_until, limit = ask
        builds, now, until = set(build_ids), _utc(now), _utc(lease_until)
        with self._lock:
            limited = self.limited_steps()
            ready = sorted(
                (
                    (self._runs[key[0]].row.priority, task.available_at, key)
                    for key, task in self._tasks.items()
                    if self._limit_build(key[0]) in builds
                    and task.available_at <= now
                    and not self._held(key[0])
                    and task.name not in limited
                ),
            )[: max(limit, 0)]
            # Steps under a limit: leased as their limits leave slots (``limits_memory``).
            ready += [
                (self._runs[key[0]].row.priority, now, key)
                for key, _ in self._lease_limited(builds, now, limit - len(ready))
            ]
            leases = []
            for _, _, (run_id, step_id) in ready:
                task = self._tasks[(run_id, step_id)] = replaced(
                    self._tasks[(run_id, step_id)], available_at=until, owner=worker
                )
                run = self._runs[run_id]
                started = StepStarted(
                    step_id=step_id, attempt=task.attempt, worker=worker, lease_until=until
                )
                run.events.extend(_encode([started], now))
                status = run.row.status
                if status is not RunStatus.CANCELLING:
                    status = RunStatus.RUNNING
                run.row = replace(run.row, updated_at=now, status=status)
                leases.append(
                    StepLease(
                        run_id=run_id, step_id=step_id, attempt=task.attempt, lease_until=until
                    )
                )
            if leases:
                self._touched(durable=False)  # as a step's lease on SQLite
            self.stats.scheduler_rows_read += len(leases)
        return carry_histories(leases, read_after, self.read_histories)

    def renew_step(self, renewal: StepRenewal) -> bool:
        """Extend the lease if ``worker`` still holds it (storing ``heartbeat`` with it)."""
        run_id, step_id, worker, lease_until, heartbeat = renewal
        with self._lock:
            task = self._tasks.get((run_id, step_id))
            if task is None or task.owner != worker:
                return False
            self._tasks[(run_id, step_id)] = replaced(task, available_at=_utc(lease_until))
            if heartbeat is not None:
                self._heartbeats[(run_id, step_id)] = heartbeat
            self._touched(durable=False)
            return True

    def step_heartbeats(self, run_id: str) -> list[StepHeartbeat]:
        """The last stored heartbeat of each of the run's steps."""
        with self._lock:
            found = [beat for (run, _), beat in self._heartbeats.items() if run == run_id]
        return sorted(found, key=lambda beat: beat.step_id)

    def next_due(self, build_ids: Sequence[str], until: datetime | None = None) -> datetime | None:
        """The earliest ``decide_at`` or step ``available_at`` of these builds (every time:
        ``until`` saves a database a walk, a dict nothing)."""
        builds = set(build_ids)
        with self._lock:
            limited = self.limited_steps()
            waiting = self.limited_workflows()
            # One candidate per table, as the database stores read one row from each index.
            found = [
                min(times)
                for times in (
                    [
                        r.row.decide_at
                        for r in self._runs.values()
                        if r.row.build_id in builds
                        and r.row.decide_at
                        and not self._held(r.row.run_id)
                        and not (r.row.status is RunStatus.PENDING and r.row.workflow in waiting)
                    ],
                    [
                        t.available_at
                        for (run_id, _), t in self._tasks.items()
                        if self._limit_build(run_id) in builds
                        and not self._held(run_id)
                        and t.name not in limited
                    ],
                )
                if times
            ]
            self.stats.scheduler_rows_read += len(found)
            return self._throttled_due(min(found) if found else None)

    def _limit_held(self, run_id: str) -> bool:
        return self._held(run_id)

    def _limit_priority(self, run_id: str) -> int:
        return self._runs[run_id].row.priority

    def _limit_build(self, run_id: str) -> str:
        return self._runs[run_id].row.build_id

    def _limit_tasks(self) -> Iterable[tuple[tuple[str, str], StepTask]]:
        return list(self._tasks.items())

    def _limit_runs(self) -> Iterable[LimitedRun]:
        return list(self._runs.values())

    # -- waiting and closing ----------------------------------------------------------------------

    # -- workers registry -------------------------------------------------------------------------

    def register_worker(self, worker: WorkerInfo) -> None:
        """Record a starting worker; forget those silent for longer than the retention."""
        stamp = _utc(worker.started_at)
        with self._lock:
            cutoff = stamp - WORKER_RETENTION
            for gone in [w for w, info in self._workers.items() if info.heartbeat_at < cutoff]:
                del self._workers[gone]
            self._workers[worker.worker_id] = replace(
                worker,
                builds=tuple(worker.builds),
                started_at=stamp,
                heartbeat_at=_utc(worker.heartbeat_at),
                stopped_at=None,
            )

    def heartbeat(self, worker_id: str, now: datetime) -> bool:
        """Move the worker's heartbeat to ``now``; False if unknown or stopped."""
        with self._lock:
            info = self._workers.get(worker_id)
            if info is None or info.stopped_at is not None:
                return False
            self._workers[worker_id] = replace(info, heartbeat_at=_utc(now))
            return True

    def worker_stopped(self, worker_id: str, now: datetime) -> None:
        """Mark the worker stopped at ``now``."""
        with self._lock:
            info = self._workers.get(worker_id)
            if info is not None:
                self._workers[worker_id] = replace(
                    info, heartbeat_at=_utc(now), stopped_at=_utc(now)
                )

    def list_workers(self) -> list[WorkerInfo]:
        """Every registered worker, most recently started first."""
        with self._lock:
            workers = list(self._workers.values())
        return sorted(workers, key=lambda w: (w.started_at, w.worker_id), reverse=True)

    def wait_for_change(
        self,
        timeout: float,
        *,
        ending: str | None = None,
        work_only: bool = False,
        quiet: bool = False,
    ) -> None:
        """Block up to ``timeout`` seconds, returning as soon as any write commits (a run's
        end among them, so ``ending`` needs nothing more; ``work_only`` and ``quiet`` change
        nothing)."""
        with self._changed:
            seen = self._version
            self._changed.wait_for(lambda: self._version != seen, timeout=max(timeout, 0.0))

    def check_integrity(self) -> list[str]:
        """The structural checks of ``integrity``, on the in-memory tables."""
        problems: list[str] = []
        with self._lock:
            for run_id, run in self._runs.items():
                if not run.events or run.events[0].event_key != "run_started":
                    problems.append(f"run {run_id!r}: event 1 is not 'run_started'")
                for sequence, event in enumerate(run.events, start=1):
                    try:
                        json.loads(event.data)
                    except ValueError:
                        problems.append(
                            f"run {run_id!r}: event {sequence} does not hold valid JSON"
                        )
            problems.extend(
                f"step task {step_id!r}: it belongs to run {run_id!r}, which does not exist"
                for run_id, step_id in self._tasks
                if run_id not in self._runs
            )
            problems.extend(
                f"hook token {token!r}: it belongs to run {hook.run_id!r}, which does not exist"
                for token, hook in self._hooks.items()
                if hook.run_id not in self._runs
            )
        return problems

    def close(self) -> None:
        """Nothing to release; the data goes away with the object."""
