"""Index rows that follow from a write: computed here, written by the store in the same commit."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from flow_cli.model.events import (
    BuildUpgraded,
    CancelRequested,
    ChildCompleted,
    Event,
    HookCreated,
    HookResolved,
    RunFailed,
    SignalReceived,
    StepCompleted,
    StepFailed,
    WaitCompleted,
)
from flow_cli.model.snapshot import StepState, WorkflowRunSnapshot
from flow_cli.model.status import RunStatus, StepStatus
from flow_cli.store.protocol import (
    KEEP,
    HookEntry,
    Keep,
    RunError,
    RunIndex,
    StepTask,
    waiting_entry,
)
from flow_cli.store.run_error import decision_error, failed_error


def is_wake(event: Event) -> bool:
    """Whether this fact can change what the workflow decides next."""
    if isinstance(event, StepFailed):
        return event.exhausted
    return isinstance(
        event,
        StepCompleted
        | WaitCompleted
        | SignalReceived
        | HookResolved
        | ChildCompleted
        | CancelRequested,
    )


def step_task(step: StepState) -> StepTask | None:
    """The lease-able task of a step, or None once it is settled."""
    if step.status is StepStatus.SCHEDULED and step.scheduled_at is not None:
        return StepTask(step_id=step.step_id, attempt=step.attempt, available_at=step.scheduled_at)
    if step.status is StepStatus.RUNNING and step.lease_until is not None:
        return StepTask(
            step_id=step.step_id,
            attempt=step.attempt,
            available_at=step.lease_until,
            owner=step.worker,
        )
    if step.status is StepStatus.BACKOFF and step.next_attempt_at is not None:
        return StepTask(
            step_id=step.step_id, attempt=step.attempt, available_at=step.next_attempt_at
        )
    return None


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
    for event in events:
        step_id = getattr(event, "step_id", None)
        if isinstance(step_id, str) and step_id in after.steps:
            steps[step_id] = step_task(after.steps[step_id])
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
    upgraded = any(isinstance(event, BuildUpgraded) for event in events)
    error: RunError | Keep | None = KEEP
    if any(isinstance(event, RunFailed) for event in events):
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
    )


def waiting_on(snapshot: WorkflowRunSnapshot) -> str | None:
    """What an open run waits on, as space-separated ``KIND:ID`` entries; None when nothing.

    Signals are named by signal name (what ``flow signal`` takes), the rest by their id.
    """
    if snapshot.terminal:
        return None
    # Each kind is looked at only when the snapshot's counters say something of it is open, and
    # steps and timers through their open sets: the cost follows what is open, not history.
    entries = [
        *(
            waiting_entry("signal", w.signal_name)
            for w in (snapshot.signal_waits.values() if snapshot.signal_waits_open else ())
            if not (w.delivered or w.timed_out)
        ),
        *(
            waiting_entry("hook", h.hook_id)
            for h in (snapshot.hooks.values() if snapshot.hooks_open else ())
            if not h.resolved
        ),
        *(waiting_entry("timer", wait_id) for wait_id in snapshot.open_deadlines),
        *(waiting_entry("step", step_id) for step_id in snapshot.open_steps),
        *(
            waiting_entry("child", c.child_id)
            for c in (snapshot.children.values() if snapshot.children_open else ())
            if c.open
        ),
    ]
    return " ".join(dict.fromkeys(entries)) or None
