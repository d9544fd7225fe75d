"""The storage contract every backend implements, and the index records it keeps.

A store holds two things: the append-only event streams (the truth) and a few durable indexes
derived from them (the runs table, ready step attempts, hook tokens) that let workers and the
scheduler find work without reading histories. Index rows are written in the same transaction as
the events they follow from, so they can never disagree with history for long; they are
planned and resolved in ``flow_cli.store.index``, never by a store on its own.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from typing import Protocol, runtime_checkable

from flow_cli.errors import FlowError, RunNotFound
from flow_cli.model.events import Event, EventEnvelope
from flow_cli.model.limits import DeclaredLimit, LimitState, Rate
from flow_cli.model.schedule import Schedule
from flow_cli.store.pauses import Pauses
from flow_cli.store.queries import (
    ATTRIBUTE_GROUPING,
    GROUPINGS,
    NO_GROUP,
    WAITING_KINDS,
    BuildUsage,
    CauseQuery,
    CauseTally,
    HookListing,
    RunCount,
    RunFilter,
    RunState,
    StoreStats,
    assemble_states,
    attribute_count,
    attribute_grouping,
    attribute_groups,
    build_usages,
    grouped_by,
    grouping_ok,
    waiting_entry,
    waiting_needle,
)
from flow_cli.store.records import (
    GROUP_ERRORS,
    KEEP,
    LIVE_HEARTBEATS,
    WORKER_RETENTION,
    CommitGroup,
    HookEntry,
    HookRecord,
    Keep,
    LeaseAsk,
    NewRun,
    ReadAfter,
    RunError,
    RunIndex,
    RunRecord,
    StepHeartbeat,
    StepLease,
    StepRenewal,
    StepTask,
    StreamWrite,
    WorkerInfo,
    makes_work,
    schedules_work,
)

# The roles defined here, and the records of store.records and store.queries re-exported.
__all__ = [
    "ATTRIBUTE_GROUPING",
    "GROUPINGS",
    "GROUP_ERRORS",
    "KEEP",
    "LIVE_HEARTBEATS",
    "NO_GROUP",
    "WAITING_KINDS",
    "WORKER_RETENTION",
    "AppendViaCommit",
    "BuildUsage",
    "CauseQuery",
    "CauseTally",
    "CommitGroup",
    "EventLog",
    "EventStore",
    "HandOffs",
    "HookEntry",
    "HookListing",
    "HookRecord",
    "Keep",
    "LeaseAsk",
    "Limits",
    "NewRun",
    "Pauses",
    "ReadAfter",
    "Retention",
    "RunCount",
    "RunError",
    "RunFilter",
    "RunIndex",
    "RunQueries",
    "RunRecord",
    "RunState",
    "Scheduler",
    "Schedules",
    "StepHeartbeat",
    "StepLease",
    "StepRenewal",
    "StepTask",
    "StoreStats",
    "StreamWrite",
    "WorkerInfo",
    "WorkerRegistry",
    "assemble_states",
    "attribute_count",
    "attribute_grouping",
    "attribute_groups",
    "build_usages",
    "carry_histories",
    "grouped_by",
    "grouping_ok",
    "makes_work",
    "schedules_work",
    "waiting_entry",
    "waiting_needle",
    "wanted_after",
    "with_histories",
]


class EventLog(Protocol):
    """The append-only event streams: the truth every other role derives from.

    Every method is one transaction. Times are passed in (the engine's clock), never read here.
    """

    def create_run(self, run: NewRun, now: datetime) -> EventEnvelope | None:
        """Create the run with ``run_started`` at sequence 1.

        Returns the envelope, or ``None`` (writing nothing) when the run id exists.
        """
        ...

    def read_history(self, run_id: str, after_sequence: int = 0) -> list[EventEnvelope]:
        """Events with ``sequence > after_sequence``, in order. Raises ``RunNotFound``."""
        ...

    def read_histories(self, after: Mapping[str, int]) -> dict[str, list[EventEnvelope]]:
        """``read_history(run_id, after[run_id])`` of each run, read together (a worker reads
        the runs of a pass so: one round trip, not one per run). A run that does not exist is
        left out of the result instead of raising ``RunNotFound``."""
        ...

    def append_if_sequence(
        self,
        run_id: str,
        expected_sequence: int,
        events: Sequence[Event],
        index: RunIndex,
        now: datetime,
    ) -> list[EventEnvelope]:
        """Append ``events`` after ``expected_sequence``, or raise ``EventConflict``."""
        ...

    def commit(
        self, writes: Sequence[StreamWrite], creates: Sequence[NewRun], now: datetime
    ) -> list[list[EventEnvelope]]:
        """Apply several stream writes and run creations atomically.

        Raises ``EventConflict`` (writing nothing) if any write's expected sequence is stale or
        a created run id exists, and ``HookTokenInUse`` if a new hook token is taken.
        Returns the appended envelopes per write, in order.
        """
        ...

    def commit_groups(self, groups: Sequence[CommitGroup]) -> list[FlowError | None]:
        """Apply several independent commits in one transaction (group commit).

        Each group is applied whole or not at all, as ``commit`` would (a savepoint each): a
        group that raises ``EventConflict``, ``HookTokenInUse`` or ``RunNotFound`` is left out
        and its error returned in its place; the others are committed. Any other failure fails
        the whole call.
        """
        ...


class Scheduler(Protocol):
    """What workers use to find work: leases on runs and step attempts, the next due time, and
    a wait that ends when work may have arrived."""

    def lease_runs(self, ask: LeaseAsk) -> list[str]:
        """Lease up to ``limit`` runs of the given builds whose ``decide_at <= now``.

        Leasing moves ``decide_at`` to ``lease_until`` so others skip the run until it expires.
        """
        ...

    def park_run(self, run_id: str, expected_sequence: int, decide_at: datetime | None) -> bool:
        """Set ``decide_at`` after a decision that appended nothing, if no event came since.

        Returns False when the run moved past ``expected_sequence``: decide again.
        """
        ...

    def lease_steps(self, ask: LeaseAsk, read_after: ReadAfter | None = None) -> list[StepLease]:
        """Lease up to ``limit`` step tasks whose ``available_at <= now``.

        With ``read_after``, the first lease of each run carries the run's events after
        ``read_after(run_id)`` (``StepLease.history``), read with the lease where the store
        can (PostgreSQL: in its round trips), so the attempt needs no read of its own.
        """
        ...

    def renew_step(self, renewal: StepRenewal) -> bool:
        """Extend a step lease this worker still holds; with ``heartbeat``, store it as the
        step's last one in the same transaction (only if the lease is still held)."""
        ...

    def step_heartbeats(self, run_id: str) -> list[StepHeartbeat]:
        """The last stored heartbeat of each of the run's steps that sent one."""
        ...

    def next_due(self, build_ids: Sequence[str], until: datetime | None = None) -> datetime | None:
        """The earliest ``decide_at`` or step ``available_at`` for these builds. With
        ``until``, a store may answer ``None`` when nothing is due by then (it need not look
        further: a worker that wakes every second asks no more)."""
        ...

    def wait_for_change(
        self,
        timeout: float,
        *,
        ending: str | None = None,
        work_only: bool = False,
        quiet: bool = False,
    ) -> None:
        """Block up to ``timeout`` seconds, returning early if the store knows work arrived.

        With ``ending``, the wait is for that run's end instead (``flow result --wait``), which
        schedules no work; whether work still wakes it is up to the store. ``work_only`` (a
        worker's wait): commits that make no work (``makes_work``), such as a step started by
        the worker committing it or a run's end, need not wake it, where a store would
        otherwise wake for them. ``quiet``: only listen, with no round trip of the store's own
        (a worker that lets its caller read a run's end first; PostgreSQL then leaves its
        hand-off offer as it is). A store may return early for other reasons too, so the
        caller looks again at what it waits for.
        """
        ...


class RunQueries(Protocol):
    """Reads of the run index for operators: runs, counts, hooks, builds, the integrity check."""

    def get_run(self, run_id: str) -> RunRecord | None: ...

    def find_runs(self, where: RunFilter) -> list[RunRecord]:
        """Runs matching ``where``, newest first, served by the runs indexes."""
        ...

    def count_runs(self, where: RunFilter, by: str | None = None) -> RunCount:
        """How many runs match ``where`` (``limit``/``after`` ignored), per ``by`` column."""
        ...

    def run_states(self, where: RunFilter) -> list[RunState]:
        """Runs matching ``where`` with their lease and step tasks, newest first, read in one
        statement from the runs and step task indexes (never from histories)."""
        ...

    def build_usage(self) -> list[BuildUsage]:
        """Every build id some run is pinned to, by build id, with its open runs."""
        ...

    def cause_tally(self, where: RunFilter, query: CauseQuery) -> CauseTally:
        """The open runs ``where`` selects (``limit``/``after`` ignored) counted per
        ``flow doctor`` cause by the database (one aggregate statement, no row per run
        returned), and a few of each (``CauseQuery.keep``) with their states."""
        ...

    def list_hooks(self, run_id: str | None = None, open_only: bool = False) -> list[HookListing]:
        """Hooks of one run or of all runs, oldest first; ``open_only``: not yet resolved, of a
        run that has not ended."""
        ...

    def find_hook(self, token: str) -> HookRecord | None: ...

    def check_integrity(self) -> list[str]:
        """Check the stored data; one sentence per problem found, ``[]`` when all is well.

        The backend's own check (SQLite ``PRAGMA integrity_check``) plus Flow's structural
        ones: gapless histories starting with ``run_started``, ``runs.last_sequence`` equal to
        the last event's number, no event, step task or hook without its run. Read-only.
        """
        ...


class WorkerRegistry(Protocol):
    """The workers registered in the database, live or gone."""

    def register_worker(self, worker: WorkerInfo) -> None:
        """Record a starting worker (replacing a row with the same id) and forget workers
        whose last heartbeat is older than ``WORKER_RETENTION``."""
        ...

    def heartbeat(self, worker_id: str, now: datetime) -> bool:
        """Move the worker's ``heartbeat_at`` to ``now``; False if it is unknown or stopped."""
        ...

    def worker_stopped(self, worker_id: str, now: datetime) -> None:
        """Mark the worker as stopped cleanly at ``now``."""
        ...

    def list_workers(self) -> list[WorkerInfo]:
        """Every registered worker, live or gone, most recently started first."""
        ...


class Schedules(Protocol):
    """Stored schedules (``flow schedule``) and the claims workers take to fire them.

    Every write bumps a schedule's version and names the version it read: a write from a stale
    read is refused (``False``), never merged. Runs a fire time starts are guarded by their
    run id, not here.
    """

    def create_schedule(self, schedule: Schedule) -> bool:
        """Store a new schedule (version 1); False, writing nothing, if the id is taken."""
        ...

    def get_schedule(self, schedule_id: str) -> Schedule | None: ...

    def list_schedules(self) -> list[Schedule]:
        """Every schedule, by id."""
        ...

    def save_schedule(self, schedule: Schedule) -> bool:
        """Write it if the stored version is still ``schedule.version``; False otherwise."""
        ...

    def delete_schedule(self, schedule_id: str) -> bool:
        """Forget it (its runs stay); False if there was none."""
        ...

    def claim_schedules(self, now: datetime, claim_until: datetime, limit: int) -> list[Schedule]:
        """Up to ``limit`` schedules with ``due_at <= now``, earliest first, their ``due_at``
        moved to ``claim_until`` and version bumped in the same transaction, so another
        claimer passes them by until the claim is saved or runs out."""
        ...

    def next_schedule_due(self) -> datetime | None:
        """The earliest ``due_at``: one indexed lookup, whatever the number of schedules."""
        ...


class Retention(Protocol):
    """Deleting ended runs (``flow prune``, background retention) and the named leases that
    keep a maintenance job to one worker at a time."""

    def children_of(self, run_ids: Sequence[str]) -> list[RunRecord]:
        """The runs whose parent is one of ``run_ids``, served by the parent index."""
        ...

    def delete_runs(self, run_ids: Sequence[str]) -> list[str]:
        """Delete the ended runs among ``run_ids`` with every row that belongs to them (events,
        the runs row, step tasks, hooks, heartbeats...) in one transaction. An open or unknown
        run is left alone: the check is made inside the transaction. Returns the ids deleted."""
        ...

    def take_lease(self, name: str, owner: str, now: datetime, until: datetime) -> bool:
        """Take (or renew) the lease ``name`` for ``owner`` until ``until``: True if it was
        free, expired at ``now`` or ``owner``'s already; False while another owner holds it."""
        ...

    def release_lease(self, name: str, owner: str) -> None:
        """Give the lease back, if ``owner`` holds it."""
        ...

    def reclaim_space(self) -> None:
        """Let the space that deletes freed be reused (SQLite: ``PRAGMA incremental_vacuum``);
        a no-op where the database does it on its own."""
        ...


class Limits(Protocol):
    """Flow-control limits (``DESIGN.md`` §6.4), kept and enforced in the database: what code
    declared per ``step:NAME`` / ``workflow:NAME``, operators' overrides, and the limit in
    effect. ``lease_steps`` leases an attempt of a limited step only while its concurrency (in
    flight: leased, lease not lapsed) and its rate (started in the window) leave a slot;
    ``lease_runs`` leases a limited workflow's ``Pending`` run for its first decision only while
    fewer than its concurrency of its runs (with the same key) are admitted and open, in start
    order per key."""

    def declare_limits(self, limits: Sequence[DeclaredLimit]) -> None:
        """Record what code declares (source ``code``); an override in place stays."""
        ...

    def override_limit(self, target: str, concurrency: int | None, rate: Rate | None) -> bool:
        """Put the given values in effect fleet-wide (source ``override``; a value not given
        stays as it is); False, writing nothing, when no worker declared the target."""
        ...

    def clear_override(self, target: str) -> bool:
        """Put the code's values back in effect; False when the target is unknown."""
        ...

    def known_limit(self, target: str) -> bool:
        """Whether some worker declared the target."""
        ...

    def limit_states(self, now: datetime) -> list[LimitState]:
        """Every limit in effect, by target, with its use at ``now``."""
        ...

    def limited_targets(self) -> frozenset[str]:
        """The targets (``step:NAME``, ``workflow:NAME``) a limit is in effect for."""
        ...


@runtime_checkable
class LimitedStarts(Protocol):
    """Optional: a store whose commits count a step attempt started in them under its step's
    limit, failing with ``LimitFull`` (nothing written) when the limit has no room
    (PostgreSQL). The engine then starts an attempt of a limited step in the commit that
    schedules it, as it does an unlimited one; without it, such an attempt always waits for a
    lease."""

    def starts_in_commit(self, name: str) -> bool:
        """Whether an attempt of limited step ``name`` may start in the commit that schedules
        it: the store counts it there, and found the limit with room lately."""
        ...


@runtime_checkable
class HandOffs(Protocol):
    """Optional: a store that can hand a new run's first step to an idle worker in the start's
    own commit (PostgreSQL). The engine checks for it with ``isinstance``; a store without it
    leaves every first step ready for a lease."""

    def offer_worker(
        self, worker_id: str, build_ids: Sequence[str], lease_seconds: float, slots: int = 1
    ) -> None:
        """Offer an idle worker (about to ``wait_for_change``) for hand-offs: until ``slots``
        are made to it, a start of a run of these builds may hand the run's first step to it
        (``NewRun.hand_off``)."""
        ...

    def handed_steps(self, worker_id: str, read_after: ReadAfter) -> list[StepLease]:
        """The steps handed to ``worker_id`` since the last call, each with its run's history
        after ``read_after``'s sequence (their ``step_started`` is recorded already)."""
        ...

    def withdraw_worker(self, worker_id: str) -> None:
        """Take back an offer (the worker stops)."""
        ...


class EventStore(
    EventLog,
    Scheduler,
    RunQueries,
    WorkerRegistry,
    Schedules,
    Retention,
    Pauses,
    Limits,
    Protocol,
):
    """The storage contract: every role a backend plays. ``MemoryStore`` is the reference
    implementation; each role has its own part of the conformance suite."""

    stats: StoreStats

    def close(self) -> None: ...


class _Commits(Protocol):
    def commit(
        self, writes: Sequence[StreamWrite], creates: Sequence[NewRun], now: datetime
    ) -> list[list[EventEnvelope]]: ...

    def read_history(self, run_id: str, after_sequence: int = 0) -> list[EventEnvelope]: ...


class AppendViaCommit:
    """``append_if_sequence`` as the one-write case of ``commit``, shared by every store."""

    def append_if_sequence(
        self: _Commits,
        run_id: str,
        expected_sequence: int,
        events: Sequence[Event],
        index: RunIndex,
        now: datetime,
    ) -> list[EventEnvelope]:
        """Append ``events`` after ``expected_sequence``, or raise ``EventConflict``."""
        write = StreamWrite(
            run_id=run_id, expected_sequence=expected_sequence, events=events, index=index
        )
        return self.commit([write], [], now)[0]

    def read_histories(self: _Commits, after: Mapping[str, int]) -> dict[str, list[EventEnvelope]]:
        """One ``read_history`` per run: a store that can read them together overrides this."""
        found: dict[str, list[EventEnvelope]] = {}
        for run_id, sequence in after.items():
            try:
                found[run_id] = self.read_history(run_id, sequence)
            except RunNotFound:
                continue
        return found


def wanted_after(run_ids: Iterable[str], read_after: ReadAfter) -> dict[str, int]:
    """``read_after`` of each leased run, asked once per run."""
    after: dict[str, int] = {}
    for run_id in run_ids:
        if run_id not in after:
            after[run_id] = max(read_after(run_id), 0)
    return after


def carry_histories(
    leases: list[StepLease],
    read_after: ReadAfter | None,
    read_histories: Callable[[Mapping[str, int]], Mapping[str, list[EventEnvelope]]],
) -> list[StepLease]:
    """``leases`` with each run's first lease carrying its events after ``read_after(run_id)``,
    read with ``read_histories`` (``StepLease.history``); as they are without ``read_after``."""
    if read_after is None or not leases:
        return leases
    after = wanted_after((lease.run_id for lease in leases), read_after)
    return with_histories(leases, read_histories(after))


def with_histories(
    leases: list[StepLease], found: Mapping[str, list[EventEnvelope]]
) -> list[StepLease]:
    """``leases`` with each run's first lease carrying its history from ``found``."""
    carried: list[StepLease] = []
    seen: set[str] = set()
    for lease in leases:
        history = found.get(lease.run_id)
        if history is not None and lease.run_id not in seen:
            seen.add(lease.run_id)
            lease = dataclasses.replace(lease, history=tuple(history))
        carried.append(lease)
    return carried
