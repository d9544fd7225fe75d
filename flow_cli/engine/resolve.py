"""An operator's resolution of a step whose outcome is unknown (``flow step resolve``), and
``flow retry``'s request to try a failing decision and steps in back-off now.

An ``on_lost="unknown"`` step whose attempt vanished or timed out records
``step_outcome_unknown`` and its run waits. The operator checks the outside system and records
what happened: the step's output, its failure (exhausted), or a new attempt. The resolution is
fenced by the attempt: it is appended only if the run's history still ends where the snapshot
that showed the attempt unknown ended, so a late worker result racing it (which its own fence
discards once the step is unknown) and a second resolution record exactly one outcome.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import Enum

from flow_cli.errors import StepNotUnknown
from flow_cli.model.events import Event, RetryRequested, StepCompleted, StepFailed
from flow_cli.model.jsonval import JsonValue, storable_text
from flow_cli.model.snapshot import WorkflowRunSnapshot
from flow_cli.model.status import StepStatus

RESOLVED_ERROR_TYPE = "StepOutcomeUnknown"
"""The ``error_type`` of a failure an operator recorded for an unknown outcome (no ``--error``
type given)."""


class Resolution(Enum):
    OUTPUT = "output"
    FAIL = "fail"
    RETRY = "retry"


@dataclass(frozen=True, slots=True, kw_only=True)
class Resolved:
    """What ``resolve_step`` recorded."""

    run_id: str
    step_id: str
    attempt: int
    resolution: Resolution


def resolution_events(
    snap: WorkflowRunSnapshot,
    step_id: str,
    resolution: Resolution,
    value: JsonValue,
    reason: str,
    now: datetime,
) -> tuple[list[Event], int]:
    """The event that settles ``step_id``'s unknown attempt per ``resolution`` (``value``: the
    output, or the error of a failure), with the attempt it fences on. Raises
    ``StepNotUnknown`` when the step is not unknown in ``snap``."""
    step = snap.steps.get(step_id)
    if step is None or step.status is not StepStatus.UNKNOWN:
        state = "not in the run" if step is None else step.status.value
        raise StepNotUnknown(snap.run_id, step_id, state)
    resolved = {"by": "operator", "reason": reason}
    attempt = step.attempt
    if resolution is Resolution.OUTPUT:
        return [
            StepCompleted(step_id=step_id, attempt=attempt, output=value, resolved=resolved)
        ], attempt
    error_type = RESOLVED_ERROR_TYPE
    message = reason
    if isinstance(value, dict):
        error_type = str(value.get("type") or error_type)
        message = str(value.get("message") or message)
    elif value is not None:
        message = str(value)
    retry = resolution is Resolution.RETRY
    return [
        StepFailed(
            step_id=step_id,
            attempt=attempt,
            error_type=error_type,
            message=storable_text(message),
            next_attempt_at=now if retry else None,
            exhausted=not retry,
            resolved=resolved,
        )
    ], attempt


NOTHING_TO_RETRY = "no failing decision or step in back-off"


def retry_request(snap: WorkflowRunSnapshot, reason: str) -> RetryRequested | None:
    """What ``flow retry`` asks of the run now: its failing decision decided, its steps
    waiting out a back-off started; ``None`` when nothing waits for a back-off."""
    steps = tuple(
        step_id for step_id in snap.open_steps if snap.steps[step_id].status is StepStatus.BACKOFF
    )
    failing = snap.decision_error is not None
    if not steps and not failing:
        return None
    return RetryRequested(steps=steps, decision=failing, reason=reason)


def retried_text(request: RetryRequested) -> str:
    """``retried: decision, step 'a'``."""
    what = (["decision"] if request.decision else []) + [f"step {s!r}" for s in request.steps]
    return "retried: " + ", ".join(what)
