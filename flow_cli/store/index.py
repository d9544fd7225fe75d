"""The run index: what a write changes in it, planned and resolved here, and nowhere else.

Two halves, both pure:

- the **planner** (``index_for``): from the snapshot after a write's events, the ``RunIndex``
  the engine sends along with them (status, decision time, failing error, step tasks, hooks,
  what the run waits on, a re-pinned build);
- the **rules** (``row_changes``, ``decided_row``): a ``RunIndex`` resolved into the exact
  changes every store writes: a finished run is never decided again, holds no lease, no step
  task and waits on nothing; ``KEEP`` leaves a column alone; a new decision time releases the
  run's lease; ``failing_since`` is set when a run starts failing and kept while it goes on
  failing (``failing_since``).

The stores only carry these values out: ``store/sql.py`` renders them for SQLite and
PostgreSQL, ``store/memory.py`` applies them to its dicts. A new column of the run index is
planned in ``index_for``, resolved in ``row_changes`` and rendered in ``sql.run_sets``.
Search attributes (``attributes_set``, and a new run's spec) go to the per-run table
``run_attributes``: ``RowChanges.attributes`` and ``start_attributes``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from flow_cli.model.attributes import attribute_text
from flow_cli.model.events import (
    AttributesSet,
    BuildUpgraded,
    Event,
    HookCreated,
    HookResolved,
    RetryRequested,
    RunFailed,
)
from flow_cli.model.snapshot import StepState, WorkflowRunSnapshot
from flow_cli.model.status import RunStatus, StepStatus
from flow_cli.store.protocol import (
    KEEP,
    HookEntry,
    Keep,
    NewRun,
    RunError,
    RunIndex,
    StepTask,
    waiting_entry,
)
from flow_cli.store.run_error import decision_error, failed_error


def step_task(step: StepState) -> StepTask | None:
    """The lease-able task of a step, or None once it is settled: due when scheduled, when its
    lease runs out while running (held by its worker), or when its backoff ends."""
    owner = None
    if step.status is StepStatus.SCHEDULED:
        due = step.scheduled_at
    elif step.status is StepStatus.RUNNING:
        due, owner = step.lease_until, step.worker
    elif step.status is StepStatus.BACKOFF:
        due = step.next_attempt_at
    else:
        return None
    if due is None:
        return None
    return StepTask(
        step_id=step.step_id, attempt=step.attempt, available_at=due, owner=owner, name=step.name
    )


def index_for(
    after: WorkflowRunSnapshot,
    events: Sequence[Event],
    *,
    decide_at: datetime | Keep | None = KEEP,
    failing: str | Keep | None = KEEP,
) -> RunIndex:
    """The index changes of appending ``events``, given the snapshot after them."""
    steps: dict[str, StepTask | None] = {}
    hooks: list[HookEntry] = []
    attributes: dict[str, str] = {}
    upgraded = ended_failed = False
    for event in events:
        if isinstance(event, AttributesSet):
            attributes.update(texts(event.attributes))
            continue
        if isinstance(event, BuildUpgraded):
            upgraded = True
        elif isinstance(event, RunFailed):
            ended_failed = True
        step_id = getattr(event, "step_id", None)
        if isinstance(step_id, str) and step_id in after.steps:
            if step_id not in steps:  # a write often holds a step's end and the next start
                steps[step_id] = step_task(after.steps[step_id])
        elif isinstance(event, RetryRequested):  # its steps' next attempts are due now
            for retried in event.steps:
                steps[retried] = step_task(after.steps[retried])
        if isinstance(event, HookCreated | HookResolved):
            hook = after.hooks[event.hook_id]
            hooks.append(
                HookEntry(
                    token=hook.token,
                    hook_id=hook.hook_id,
                    resolved=hook.resolved,
                    metadata=hook.metadata,
                )
            )
    if after.terminal:
        decide_at = None
    error: RunError | Keep | None = KEEP
    if ended_failed:
        error = failed_error(after)
    elif after.terminal and after.status is not RunStatus.FAILED:
        error = None  # ended otherwise (terminated while failing, say): no reason to show
    elif failing is not KEEP:
        error = decision_error(after) if failing is not None else None
    return RunIndex(
        status=after.status,
        decide_at=decide_at,
        failing=failing,
        steps=steps,
        hooks=hooks,
        waiting_on=waiting_on(after),
        build_id=after.spec.runtime_build_id if upgraded else KEEP,
        error=error,
        attributes=attributes,
    )


def texts(attributes: Mapping[str, Any] | None) -> dict[str, str]:
    """Search attributes as the index keeps them: key → the value's JSON text."""
    return {key: attribute_text(value) for key, value in (attributes or {}).items()}


def start_attributes(run: NewRun) -> dict[str, str]:
    """The search attributes a new run's row starts with (its spec's), as the index keeps
    them; every store inserts these with the run."""
    return texts(run.spec.attributes)


def waiting_on(snapshot: WorkflowRunSnapshot) -> str | None:
    """What an open run waits on, as space-separated ``KIND:ID`` entries; None when nothing.

    Signals are named by signal name (what ``flow signal`` takes), the rest by their id.
    """
    if snapshot.terminal:
        return None
    # Each kind is looked at only when the snapshot's counters say something of it is open, and
    # steps and timers through their open sets: the cost follows what is open, not history.
    entries: list[str] = []
    if snapshot.signal_waits_open:
        entries.extend(
            waiting_entry("signal", w.signal_name)
            for w in snapshot.signal_waits.values()
            if not (w.delivered or w.timed_out or w.closed)
        )
    if snapshot.hooks_open:
        entries.extend(
            waiting_entry("hook", h.hook_id) for h in snapshot.hooks.values() if not h.resolved
        )
    for wait_id in snapshot.open_deadlines:
        entries.append(waiting_entry("timer", wait_id))
    steps = snapshot.steps
    for step_id in snapshot.open_steps:
        unknown = steps[step_id].status is StepStatus.UNKNOWN
        entries.append(waiting_entry("unknown" if unknown else "step", step_id))
    if snapshot.children_open:
        entries.extend(
            waiting_entry("child", c.child_id) for c in snapshot.children.values() if c.open
        )
    if len(entries) < 2:  # most writes: the one step the run waits on
        return entries[0] if entries else None
    return " ".join(dict.fromkeys(entries))


@dataclass(frozen=True, slots=True, kw_only=True)
class RowChanges:
    """One write's changes to the run index, every rule applied (see ``row_changes``)."""

    status: RunStatus
    decide_at: datetime | Keep | None
    """``KEEP``, or the new decision time (``None``: never, as for every finished run); any
    value other than ``KEEP`` also releases the run's lease (``lease_owner``)."""
    failing: str | Keep | None
    """``KEEP``, or the failing decision's error (``None`` clears it and ``failing_since``)."""
    waiting_on: str | Keep | None
    build_id: str | Keep
    """``KEEP``, or the build the run and its step tasks move to."""
    error: RunError | Keep | None
    """``KEEP``, or why the run failed or its decisions fail (``None`` clears it)."""
    tasks: Mapping[str, StepTask | None]
    """Step tasks to upsert, or to delete (``None``); empty when ``drop_tasks``."""
    drop_tasks: bool
    """Delete every step task of the run (it has finished)."""
    hooks: Sequence[HookEntry]
    attributes: Mapping[str, str]
    """Search attributes to upsert: key → JSON text (a finished run keeps its own)."""

    def failing_since(
        self, failing_before: str | None, since_before: datetime | None, now: datetime
    ) -> datetime | None:
        """``failing_since`` after this write (``failing`` is not ``KEEP``), given the row's
        values before it: kept while the run goes on failing. ``sql.run_sets`` renders the
        same rule as a ``CASE``."""
        if self.failing is None:
            return None
        return now if failing_before is None else since_before


def row_changes(index: RunIndex) -> RowChanges:
    """The changes a write with ``index`` makes: the terminal rules applied to it."""
    changes = RowChanges(
        status=index.status,
        decide_at=index.decide_at,
        failing=index.failing,
        waiting_on=index.waiting_on,
        build_id=index.build_id,
        error=index.error,
        tasks=index.steps,
        drop_tasks=False,
        hooks=index.hooks,
        attributes=index.attributes,
    )
    if index.status.terminal:
        # A finished run is never decided again, holds no lease and no work, waits on nothing.
        return replace(changes, decide_at=None, waiting_on=None, tasks={}, drop_tasks=True)
    return changes


@dataclass(frozen=True, slots=True, kw_only=True)
class DecidedRow:
    """The columns of a run's row inserted together with its first decision."""

    status: RunStatus
    build_id: str
    decide_at: datetime | None
    failing: str | None
    waiting_on: str | None
    error: RunError | None

    def failing_since(self, now: datetime) -> datetime | None:
        return None if self.failing is None else now


def decided_row(run: NewRun, changes: RowChanges) -> DecidedRow:
    """The row of ``run`` as its first decision (``changes``) leaves it: one row version."""
    return DecidedRow(
        status=changes.status,
        build_id=run.spec.runtime_build_id if changes.build_id is KEEP else changes.build_id,
        decide_at=run.decide_at if changes.decide_at is KEEP else changes.decide_at,
        failing=None if changes.failing is KEEP else changes.failing,
        waiting_on=None if changes.waiting_on is KEEP else changes.waiting_on,
        error=None if changes.error is KEEP else changes.error,
    )
