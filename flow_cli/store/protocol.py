"""The storage contract every backend implements, and the index records it keeps.

A store holds two things: the append-only event streams (the truth) and a few durable indexes
derived from them (the runs table, ready step attempts, hook tokens) that let workers and the
scheduler find work without reading histories. Index rows are written in the same transaction as
the events they follow from, so they can never disagree with history for long; they are
planned and resolved in ``flow_cli.store.index``, never by a store on its own.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import Enum
from typing import Any, NamedTuple, Protocol, runtime_checkable

from flow_cli.errors import EventConflict, FlowError, HookTokenInUse, RunNotFound
from flow_cli.model.events import Event, EventEnvelope
from flow_cli.model.jsonval import JsonValue
from flow_cli.model.limits import DeclaredLimit, LimitState, Rate
from flow_cli.model.schedule import Schedule
from flow_cli.model.spec import WorkflowSpec
from flow_cli.model.status import RunStatus
from flow_cli.store.pauses import Pauses


class Keep(Enum):
    """Leave the stored value as it is."""

    KEEP = "keep"


KEEP = Keep.KEEP


@dataclass(frozen=True, slots=True, kw_only=True)
class StepTask:
    """A step attempt that a worker may lease once ``available_at`` has passed."""

    step_id: str
    attempt: int
    available_at: datetime
    """Ready time; for a started attempt, the end of its lease (expired lease = re-run)."""
    owner: str | None = None
    """The worker holding a started attempt (so it can renew the lease); stored as lease_owner."""
    name: str | None = None
    """The step's name (``step:NAME`` limits are enforced by it); stored as step_name."""


@dataclass(frozen=True, slots=True, kw_only=True)
class HookEntry:
    """A hook token and whether its callback has arrived."""

    token: str
    hook_id: str
    resolved: bool
    metadata: JsonValue = None
    """The hook's metadata as created (kept for ``flow hook list``)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RunError:
    """The error a run failed with, or its failing decision's: what ``flow runs`` shows as the
    reason, filters on (``--error-type``) and counts by (``count --by error_type``)."""

    error_type: str | None
    """``None`` when the workflow failed with an error that names no type (a bare string)."""
    text: str
    """One line: ``ErrorType: message`` (or just one of them)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RunIndex:
    """Index changes that go with one append to one run."""

    status: RunStatus
    decide_at: datetime | Keep | None = KEEP
    """When a worker should next decide the run; ``None``: only when a new fact arrives."""
    failing: str | Keep | None = KEEP
    """The last decision error while the run is stuck on it; ``None`` clears it."""
    steps: Mapping[str, StepTask | None] = field(default_factory=dict)
    """Step tasks of steps these events touched: upsert, or ``None`` to delete."""
    hooks: Sequence[HookEntry] = ()
    """Hooks these events created or resolved."""
    waiting_on: str | Keep | None = KEEP
    """What the open run waits on: space-separated ``KIND:ID`` (see ``RunFilter.waiting_on``);
    ``None`` when nothing (and always once terminal)."""
    build_id: str | Keep = KEEP
    """The build the run is pinned to from now on (``build_upgraded``): the run's row and its
    step tasks move to it, so only workers hosting that build lease them."""
    error: RunError | Keep | None = KEEP
    """Why the run failed (``run_failed``) or its decisions fail; ``None`` clears it."""
    attributes: Mapping[str, str] = field(default_factory=dict)
    """Search attributes these events set (``attributes_set``): key → the value's JSON text
    (``flow_cli.model.attributes.attribute_text``); each replaces the key's stored value."""


@dataclass(frozen=True, slots=True, kw_only=True)
class NewRun:
    """A run to create: its ``run_started`` event becomes sequence 1."""

    run_id: str
    spec: WorkflowSpec
    seed: str
    decide_at: datetime | None
    """Normally now: a new run wants its first decision."""
    created_at: datetime | None = None
    """When the runs index lists the run as created (``flow runs`` order, ``--since``), when it
    is not the time ``run_started`` is recorded at: a fork made with ``--from-step`` keeps the
    original's times in its history but is listed by when it was forked."""
    hand_off: str | None = None
    """A step its first decisions (committed with it) scheduled, ready now, that the store may
    hand to an idle worker (``offer_worker``) in the same commit: recording its
    ``step_started`` for that worker, and telling it. A store that cannot ignores this."""


@dataclass(frozen=True, slots=True, kw_only=True)
class StreamWrite:
    """Events to append to one run, guarded by the sequence the writer last saw."""

    run_id: str
    expected_sequence: int
    events: Sequence[Event]
    index: RunIndex
    data: Sequence[str] | None = None
    """The events' stored JSON (``event_json``), when the writer has it already (it measured
    them for its cache): a store may write it instead of encoding each event again."""
    recorded_at: datetime | None = None
    """The events' recorded time when it is not the commit's: a fork copies a history at the
    times it was recorded, several writes of one run in one commit."""


@dataclass(frozen=True, slots=True, kw_only=True)
class CommitGroup:
    """One atomic unit of a group commit: what one ``commit`` call would apply."""

    writes: Sequence[StreamWrite]
    creates: Sequence[NewRun]
    now: datetime
    """The time its events are recorded at (each group keeps the time it was decided at)."""


def schedules_work(index: RunIndex) -> bool:
    """Whether a write with ``index`` gives workers something to look at: a decision time was
    set, or a step task upserted that a worker may lease.

    A started attempt (a task with an owner: the committing worker runs it) is nobody else's
    work until its lease runs out, and idle workers look at least every ``max_idle_sleep``
    anyway, so it is not: a worker chaining steps would otherwise wake every waiting worker,
    itself among them, at each step for nothing.
    """
    if index.status.terminal:
        return False
    if index.decide_at is not KEEP and index.decide_at is not None:
        return True
    return any(task is not None and task.owner is None for task in index.steps.values())


def makes_work(writes: Sequence[StreamWrite], creates: Sequence[NewRun]) -> bool:
    """Whether a commit of ``writes`` and ``creates`` gives workers something to do."""
    return any(schedules_work(w.index) for w in writes) or any(
        r.decide_at is not None for r in creates
    )


GROUP_ERRORS = (EventConflict, HookTokenInUse, RunNotFound)
"""What leaves one group out of a group commit without failing the others."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RunRecord:
    """One row of the runs index."""

    run_id: str
    workflow: str
    status: RunStatus
    build_id: str
    parent_run_id: str | None
    created_at: datetime
    updated_at: datetime
    last_sequence: int
    decide_at: datetime | None
    failing: str | None
    waiting_on: str | None = None
    error_type: str | None = None
    """The error type of a Failed run, or of its failing decision (see ``RunError``)."""
    error: str | None = None
    """``ErrorType: message`` of a Failed run, or of its failing decision."""
    attributes: Mapping[str, Any] = field(default_factory=dict)
    """The run's search attributes (``--attr``), key → value."""
    priority: int = 5
    """1 (taken first) to 9 (``WorkflowSpec.priority``)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class StepLease:
    run_id: str
    step_id: str
    attempt: int
    lease_until: datetime
    history: tuple[EventEnvelope, ...] | None = field(default=None, compare=False, repr=False)
    """Asked for with ``lease_steps(read_after=...)``: the run's events after the sequence
    ``read_after`` gave, read no earlier than the lease's commit (so its ``step_started`` is
    there). Only the first lease of a run carries it; ``None`` otherwise."""


@dataclass(frozen=True, slots=True, kw_only=True)
class StepHeartbeat:
    """The last heartbeat of a step's attempt (``info.heartbeat(details)``), stored with a
    lease renewal (no history event): kept after the attempt ends, so the next attempt reads
    its details as ``info.last_heartbeat``."""

    step_id: str
    attempt: int
    worker: str
    details: JsonValue
    at: datetime


class LeaseAsk(NamedTuple):
    """A worker asking for work: leases for ``worker`` on runs or steps of ``build_ids`` due at
    ``now``, held until ``lease_until``, at most ``limit`` of them. A tuple, so that a store
    unpacks it in one line."""

    worker: str
    build_ids: Sequence[str]
    now: datetime
    lease_until: datetime
    limit: int


ReadAfter = Callable[[str], int]
"""For a leased run, the sequence after which its events are wanted (0: all of them)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class HookRecord:
    token: str
    run_id: str
    hook_id: str
    resolved: bool


LIVE_HEARTBEATS = 3
"""A worker is live while its last heartbeat is at most this many of its intervals old."""

WORKER_RETENTION = timedelta(days=1)
"""Workers gone for longer than this are forgotten when another worker registers."""


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkerInfo:
    """One row of the workers registry: a ``flow worker`` or ``flow tick`` process."""

    worker_id: str
    host: str
    pid: int
    builds: tuple[str, ...]
    """The build ids this process hosts (decides and runs steps for)."""
    started_at: datetime
    heartbeat_at: datetime
    heartbeat_seconds: float
    """How often this process promised to heartbeat; liveness is judged against it."""
    stopped_at: datetime | None = None
    """Set when the process stopped cleanly; a killed process just stops heartbeating."""

    def live(self, now: datetime) -> bool:
        """Not stopped, and heard from within ``LIVE_HEARTBEATS`` heartbeat intervals."""
        if self.stopped_at is not None:
            return False
        lapse = timedelta(seconds=LIVE_HEARTBEATS * self.heartbeat_seconds)
        return now - self.heartbeat_at <= lapse


WAITING_KINDS = ("signal", "hook", "timer", "step", "child")
"""What an open run can wait on; ``RunIndex.waiting_on`` entries are ``KIND:ID``."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RunFilter:
    """Which runs ``find_runs`` and ``count_runs`` select; every given condition must hold.

    Results come newest first (creation order breaks ties), as ``list_runs``.
    """

    statuses: tuple[RunStatus, ...] = ()
    """Any of these statuses; empty: any status."""
    workflow: str | None = None
    build_id: str | None = None
    since: datetime | None = None
    """Created at or after this time."""
    until: datetime | None = None
    """Created before this time."""
    failing: bool = False
    """Only runs whose last decision failed."""
    waiting_on: str | None = None
    """``KIND`` or ``KIND:ID`` (``signal:NAME``, ``hook:HOOK_ID``, ``timer:WAIT_ID``,
    ``step:STEP_ID``, ``child:CHILD_ID``)."""
    idle_since: datetime | None = None
    """Only runs with no event after this time (``--idle-for``: now minus the duration)."""
    top_level: bool = False
    """Only runs that are nobody's child."""
    error_type: str | None = None
    """Only runs that failed, or whose decisions fail, with this error type."""
    attributes: tuple[tuple[str, str], ...] = ()
    """Only runs with every one of these search attributes: (key, the value's JSON text as
    ``attribute_text`` gives it); the match is typed (the number 5 is not the text "5")."""
    limit: int | None = None
    after: str | None = None
    """Cursor: only runs listed after this run id. Raises ``RunNotFound`` if it is unknown."""


GROUPINGS = ("status", "workflow", "build_id", "error_type")
"""The columns ``count_runs`` can group by; also ``attr:KEY`` (``attribute_grouping``)."""

ATTRIBUTE_GROUPING = "attr:"
"""``count_runs(by="attr:KEY")`` groups by the value of search attribute ``KEY``."""


def attribute_grouping(by: str) -> str | None:
    """The attribute key of ``by`` when it is ``attr:KEY``, else ``None``."""
    if by.startswith(ATTRIBUTE_GROUPING) and len(by) > len(ATTRIBUTE_GROUPING):
        return by[len(ATTRIBUTE_GROUPING) :]
    return None


def grouping_ok(by: str) -> bool:
    """Whether ``count_runs`` can group by ``by``."""
    return by in GROUPINGS or attribute_grouping(by) is not None


def attribute_groups(rows: Iterable[tuple[str | None, int]]) -> dict[str, int]:
    """``count --by attr:KEY`` groups from (stored JSON text or None, count) pairs: text values
    by themselves, numbers and booleans by their JSON, runs without the key as ``(none)``."""
    from flow_cli.model.attributes import attribute_label

    groups: dict[str, int] = {}
    for text, n in rows:
        label = NO_GROUP if text is None else attribute_label(text)
        groups[label] = groups.get(label, 0) + int(n)
    return dict(sorted(groups.items()))


NO_GROUP = "(none)"
"""The group of runs with no value in the grouping column (no error type)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RunCount:
    total: int
    groups: Mapping[str, int]
    """Count per value of the grouping column; empty when not grouped."""


@dataclass(frozen=True, slots=True, kw_only=True)
class TaskState:
    """A step task as ``run_states`` reads it (see ``StepTask``)."""

    step_id: str
    attempt: int
    available_at: datetime
    """Ready time; for a started attempt (``lease_owner`` set), the end of its lease."""
    lease_owner: str | None
    name: str | None = None
    """The step's name (``None`` for a task indexed before limits were)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RunState:
    """A run's index row with its lease and its step tasks: what ``flow doctor`` classifies."""

    run_id: str
    workflow: str
    status: RunStatus
    build_id: str
    created_at: datetime
    updated_at: datetime
    decide_at: datetime | None
    """When the run should next be decided; while leased (``lease_owner``), the lease's end."""
    lease_owner: str | None
    """The worker deciding the run under a lease, if any."""
    failing: str | None
    waiting_on: str | None
    failing_since: datetime | None = None
    """While ``failing``: when its decisions began to fail (a change of error keeps it)."""
    tasks: tuple[TaskState, ...] = ()
    """Its step tasks (unsettled steps), by step id."""


def assemble_states(
    rows: Iterable[Sequence[Any]], when: Callable[[Any], datetime]
) -> list[RunState]:
    """``RunState``s from the rows of a runs ⟕ step_tasks join, ordered by run: (run_id,
    workflow, status, build_id, created_at, updated_at, decide_at, lease_owner, failing,
    waiting_on, failing_since, step_id, attempt, available_at, task lease_owner, step name);
    ``when`` decodes a time."""
    runs: list[Sequence[Any]] = []
    tasks: dict[str, list[TaskState]] = {}
    for row in rows:
        if not runs or runs[-1][0] != row[0]:
            runs.append(row)
        if row[11] is not None:
            tasks.setdefault(row[0], []).append(
                TaskState(
                    step_id=row[11],
                    attempt=int(row[12]),
                    available_at=when(row[13]),
                    lease_owner=row[14],
                    name=row[15] if len(row) > 15 else None,
                )
            )
    statuses = {status.value: status for status in RunStatus}
    return [
        RunState(
            run_id=row[0],
            workflow=row[1],
            status=statuses[row[2]],
            build_id=row[3],
            created_at=when(row[4]),
            updated_at=when(row[5]),
            decide_at=None if row[6] is None else when(row[6]),
            lease_owner=row[7],
            failing=row[8],
            waiting_on=row[9],
            failing_since=None if row[10] is None else when(row[10]),
            tasks=tuple(tasks.get(row[0], ())),
        )
        for row in runs
    ]


@dataclass(frozen=True, slots=True, kw_only=True)
class BuildUsage:
    """One build id as the runs index knows it (``flow builds``)."""

    build_id: str
    open: Mapping[str, int]
    """Open runs per status; empty when every run of the build has ended."""
    oldest_open_run: str | None
    """The open run created first (creation order breaks ties)."""
    oldest_open_at: datetime | None
    patches: tuple[str, ...]
    """Patch markers the open runs carry, sorted."""


def build_usages(
    builds: Iterable[str],
    grouped: Iterable[tuple[str, str, str | None, int]],
    oldest: Mapping[str, tuple[str, datetime]],
) -> list[BuildUsage]:
    """``build_usage`` of a SQL store from its three queries: every build id, the open runs
    counted by (build, status, patch markers as stored JSON), and each build's oldest open run."""
    counts: dict[str, dict[str, int]] = {}
    patches: dict[str, set[str]] = {}
    for build_id, status, marks, n in grouped:
        per = counts.setdefault(build_id, {})
        per[status] = per.get(status, 0) + int(n)
        patches.setdefault(build_id, set()).update(json.loads(marks) if marks else ())
    return [
        BuildUsage(
            build_id=build_id,
            open=dict(sorted(counts.get(build_id, {}).items())),
            oldest_open_run=oldest[build_id][0] if build_id in oldest else None,
            oldest_open_at=oldest[build_id][1] if build_id in oldest else None,
            patches=tuple(sorted(patches.get(build_id, ()))),
        )
        for build_id in sorted(set(builds) | set(counts))
    ]


@dataclass(frozen=True, slots=True, kw_only=True)
class HookListing:
    """One row of ``list_hooks``."""

    run_id: str
    hook_id: str
    token: str
    resolved: bool
    created_at: datetime | None
    """When ``hook_created`` was committed (None for hooks indexed before schema version 2)."""
    metadata: JsonValue


def waiting_entry(kind: str, ident: str) -> str:
    """One ``KIND:ID`` entry; ``%`` and whitespace in the id are percent-encoded."""
    return f"{kind}:" + re.sub(r"[%\s]", lambda m: f"%{ord(m.group()):02X}", ident)


def waiting_needle(waiting_on: str) -> str:
    """What `` {waiting_on column} `` contains when it matches ``--waiting-on KIND[:ID]``."""
    kind, sep, ident = waiting_on.partition(":")
    return f" {waiting_entry(kind, ident)} " if sep else f" {kind}:"


@dataclass(slots=True)
class StoreStats:
    """Counters for tests and benchmarks."""

    scheduler_rows_read: int = 0
    """Rows returned by the due-work queries (``lease_runs``, ``lease_steps``, ``next_due``)."""
    conflicts: int = 0
    """``EventConflict`` raised by ``commit``."""
    durable_commits: int = 0
    """Transactions that wait for the disk (in the store's durable mode): the ones that create
    runs or commit decisions and step ends, and on PostgreSQL a step's lease. What one step
    costs in fsyncs."""
    index_commits: int = 0
    """Lease transactions that do not wait for the disk: a run's lease, a lease renewed,
    parking, heartbeats; on SQLite also a step's lease with its ``step_started``. A crash of the
    machine may take the last of them, as if they had not happened yet (docs/operations.md)."""


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

    def renew_step(
        self,
        run_id: str,
        step_id: str,
        worker: str,
        lease_until: datetime,
        heartbeat: StepHeartbeat | None = None,
    ) -> bool:
        """Extend a step lease this worker still holds; with ``heartbeat``, store it as the
        step's last one in the same transaction (only if the lease is still held)."""
        ...

    def step_heartbeats(self, run_id: str) -> list[StepHeartbeat]:
        """The last stored heartbeat of each of the run's steps that sent one."""
        ...

    def next_due(self, build_ids: Sequence[str]) -> datetime | None:
        """The earliest ``decide_at`` or step ``available_at`` for these builds."""
        ...

    def wait_for_change(
        self, timeout: float, *, ending: str | None = None, work_only: bool = False
    ) -> None:
        """Block up to ``timeout`` seconds, returning early if the store knows work arrived.

        With ``ending``, the wait is for that run's end instead (``flow result --wait``), which
        schedules no work; whether work still wakes it is up to the store. ``work_only`` (a
        worker's wait): commits that make no work (``makes_work``), such as a step started by
        the worker committing it or a run's end, need not wake it, where a store would
        otherwise wake for them. A store may return early for other reasons too, so the caller
        looks again at what it waits for.
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
class HandOffs(Protocol):
    """Optional: a store that can hand a new run's first step to an idle worker in the start's
    own commit (PostgreSQL). The engine checks for it with ``isinstance``; a store without it
    leaves every first step ready for a lease."""

    def offer_worker(self, worker_id: str, build_ids: Sequence[str], lease_seconds: float) -> None:
        """Offer an idle worker (about to ``wait_for_change``) for hand-offs: until one is made
        to it, a start of a run of these builds may hand the run's first step to it
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
