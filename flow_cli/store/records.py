"""The records a store writes and returns: index rows planned from events (``RunIndex``,
``StepTask``, ``HookEntry``), new runs and writes (``NewRun``, ``StreamWrite``, ``CommitGroup``),
and what reads give back about one run or worker (``RunRecord``, ``StepLease``, ``WorkerInfo``).
Re-exported by ``flow_cli.store.protocol``."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import Enum
from typing import Any, NamedTuple

from flow_cli.errors import EventConflict, HookTokenInUse, RunNotFound
from flow_cli.model.events import Event, EventEnvelope
from flow_cli.model.jsonval import JsonValue
from flow_cli.model.spec import WorkflowSpec
from flow_cli.model.status import RunStatus


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


class StepRenewal(NamedTuple):
    """A worker extending the lease it holds on a step's attempt until ``lease_until``, with the
    attempt's last ``heartbeat`` to store alongside (only if the lease is still held)."""

    run_id: str
    step_id: str
    worker: str
    lease_until: datetime
    heartbeat: StepHeartbeat | None = None


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
