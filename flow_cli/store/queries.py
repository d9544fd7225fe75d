"""What the run index answers about many runs: filters (``RunFilter``), counts (``RunCount``),
the states ``flow doctor`` classifies (``RunState``), builds in use and hook listings.
Re-exported by ``flow_cli.store.protocol``."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from flow_cli.model.jsonval import JsonValue
from flow_cli.model.status import RunStatus
from flow_cli.store.records import StepTask

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


def grouped_by(by: str) -> str | None:
    """The attribute key of ``count_runs(by="attr:KEY")``, ``None`` for a ``GROUPINGS``
    column; ``ValueError`` for anything else."""
    if not grouping_ok(by):
        raise ValueError(f"cannot group runs by {by!r}")
    return attribute_grouping(by)


def attribute_count(rows: Iterable[tuple[str | None, int]]) -> RunCount:
    """``count_runs`` by ``attr:KEY`` from (stored JSON text or None, count) rows."""
    found = [(text, int(n)) for text, n in rows]
    return RunCount(total=sum(n for _, n in found), groups=attribute_groups(found))


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
    tasks: tuple[StepTask, ...] = ()
    """Its step tasks (unsettled steps), by step id (``name`` is ``None`` for a task indexed
    before limits were)."""


def assemble_states(
    rows: Iterable[Sequence[Any]], when: Callable[[Any], datetime]
) -> list[RunState]:
    """``RunState``s from the rows of a runs ⟕ step_tasks join, ordered by run: (run_id,
    workflow, status, build_id, created_at, updated_at, decide_at, lease_owner, failing,
    waiting_on, failing_since, step_id, attempt, available_at, task lease_owner, step name);
    ``when`` decodes a time."""
    runs: list[Sequence[Any]] = []
    tasks: dict[str, list[StepTask]] = {}
    for row in rows:
        if not runs or runs[-1][0] != row[0]:
            runs.append(row)
        if row[11] is not None:
            tasks.setdefault(row[0], []).append(
                StepTask(
                    step_id=row[11],
                    attempt=int(row[12]),
                    available_at=when(row[13]),
                    owner=row[14],
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
class CauseQuery:
    """What ``cause_tally`` needs to tell why each open run is where it is, as ``flow doctor``
    does (``flow_cli.ops.doctor.classify``) when no pause and no limit is in force."""

    now: datetime
    late: datetime
    """``now`` less the doctor's ``overdue_after``: a due time before it is overdue."""
    hosted: frozenset[str]
    """The builds whose runs are not ``build-unhosted`` (``Hosting``)."""
    last_seen: Mapping[str, datetime]
    """The last heartbeat of a worker that hosted each build, live or gone."""
    keep: int = 3
    """Runs sampled per cause, longest first."""


@dataclass(frozen=True, slots=True, kw_only=True)
class CauseTally:
    """``cause_tally``'s answer: open runs per cause, counted by the database, and the first
    ``keep`` of each cause (by since, then run id) with their states."""

    counts: Mapping[str, int]
    samples: tuple[tuple[str, RunState], ...]
    """(cause, state) of the sampled runs."""


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
    if _ESCAPED.search(ident) is None:  # nearly every id: made for each write of an open run
        return f"{kind}:{ident}"
    return f"{kind}:" + _ESCAPED.sub(lambda m: f"%{ord(m.group()):02X}", ident)


_ESCAPED = re.compile(r"[%\s]")


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
