"""What a terminal transition writes before the terminal event (engine rule 4).

Every unsettled step gets ``step_cancelled`` (``outcome_unknown`` when an attempt had started,
because its side effect may have happened), and every open child gets its cancellation policy
applied, before the run's terminal event is written in the same append.
"""

from __future__ import annotations

from flow_cli.model.events import ChildAbandoned, ChildCancelled, Event, StepCancelled
from flow_cli.model.snapshot import WorkflowRunSnapshot
from flow_cli.model.status import StepStatus


def closing_events(snapshot: WorkflowRunSnapshot, reason: str) -> list[Event]:
    """Events that settle all unsettled work of the run, in a stable order."""
    events: list[Event] = []
    for step in snapshot.steps.values():
        if not step.status.settled:
            events.append(
                StepCancelled(
                    step_id=step.step_id,
                    reason=reason,
                    outcome_unknown=step.status is StepStatus.RUNNING,
                )
            )
    for child in snapshot.children.values():
        if not child.open:
            continue
        if child.cancellation == "abandon":
            events.append(
                ChildAbandoned(child_id=child.child_id, child_run_id=child.run_id, reason=reason)
            )
        else:
            events.append(
                ChildCancelled(child_id=child.child_id, child_run_id=child.run_id, reason=reason)
            )
    return events
