"""The decision function: what happens next to a run, given its snapshot, its code and the time.

``decide(snapshot, code, now)`` is pure: it reads the snapshot, calls the workflow code at most
once, validates the one command against history and returns a ``Decision`` value. It does no
I/O. The engine's loop is load → ``decide`` → commit; ``flow replay-check`` runs the same function
on every recorded history prefix and compares what it returns with what was recorded. Every rule
of the execution model that decides what a run records lives here (or in the functions it calls),
once:

- due timers are recorded as fired before the code is asked anything (rule 7);
- a step that exhausted its retries under ``on_exhausted="terminate"`` ends the run, after every
  unsettled sibling is cancelled (rule 4);
- a command is validated against history field by field (rules 2, 3), and a step name or child
  workflow the build does not host is refused at decision time;
- under a cancellation request, a decision that starts no cleanup ends the run (rule 12);
- a failed decision is recorded once per cause and retried with a growing back-off (rule 11).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Protocol

from flow_cli.errors import Mismatch, NonDeterminismError, WorkflowError
from flow_cli.model.closing import closing_events
from flow_cli.model.commands import (
    Cancelled,
    Complete,
    ContinueAsNew,
    Fail,
    RuntimeCommand,
    TerminalCommand,
)
from flow_cli.model.determinism import Plan, engine_cancels, plan
from flow_cli.model.events import (
    AttributesSet,
    ChildScheduled,
    DecisionFailed,
    DecisionRecovered,
    Event,
    RunCancelled,
    RunCompleted,
    RunContinuedAsNew,
    RunFailed,
    StepScheduled,
    WaitCompleted,
)
from flow_cli.model.jsonval import canonical, storable_text
from flow_cli.model.snapshot import WorkflowRunSnapshot, without_traceback
from flow_cli.model.status import StepStatus
from flow_cli.model.tracebacks import code_traceback

DECISION_RETRY_MIN = timedelta(seconds=5)
"""First retry of a failing decision; each later retry waits as long as the run has been failing."""
DECISION_RETRY_MAX = timedelta(minutes=5)
"""The back-off between retries of a failing decision stops growing here."""


@dataclass(frozen=True, slots=True)
class Proposal:
    """What the workflow code returned for one call."""

    command: RuntimeCommand
    blocking: bool = False
    """The code stopped at a sequential helper that waits for this command's result
    (``ctx.step``, ``ctx.receive`` ...): asked again before anything settles, it would only
    re-issue it, so the engine need not ask."""
    attributes: tuple[dict[str, Any], ...] = ()
    """What each ``ctx.set_attributes`` call of the call set, in order (``attribute_events``
    checks them against history)."""


class WorkflowCode(Protocol):
    """The code of one build, as the decision function sees it (``Runtime`` is one)."""

    @property
    def steps(self) -> Mapping[str, Any]: ...

    @property
    def workflows(self) -> Mapping[str, Any]: ...

    def propose(self, snapshot: WorkflowRunSnapshot) -> Proposal: ...


@dataclass(frozen=True, slots=True)
class Append:
    """Record ``events``; the run goes on."""

    events: tuple[Event, ...]
    settles: bool
    """After these events the run waits for something: park it rather than decide again."""


@dataclass(frozen=True, slots=True)
class Terminate:
    """End the run: ``events`` are the closing events (rule 4) followed by the terminal one."""

    events: tuple[Event, ...]
    command: TerminalCommand
    reason: str


@dataclass(frozen=True, slots=True)
class Park:
    """Nothing to record: the run waits; decide it again at ``until`` or on a new fact."""

    until: datetime | None


@dataclass(frozen=True, slots=True)
class Failed:
    """The decision failed (rule 11): record ``event`` (None when this cause is already
    recorded) and try again at ``retry_at``, when fixed code may have been deployed."""

    event: DecisionFailed | None
    error: BaseException
    retry_at: datetime


@dataclass(frozen=True, slots=True)
class Idle:
    """Nothing to decide: the run has ended."""


Decision = Append | Terminate | Park | Failed | Idle


def decide(
    snapshot: WorkflowRunSnapshot,
    code: WorkflowCode,
    now: datetime,
    *,
    replaying: bool = False,
) -> Decision:
    """What happens next to the run in ``snapshot``.

    ``replaying`` is for checking a recorded decision point: the recorded facts are already in
    the snapshot, so timers are not fired by the clock.
    """
    if snapshot.terminal:
        return Idle()
    if not replaying:
        due = sorted(
            (deadline, snapshot.waits[wait_id].sequence, wait_id)
            for wait_id, deadline in snapshot.open_deadlines.items()
            if deadline <= now
        )
        if due:
            facts = tuple(WaitCompleted(wait_id=w, deadline=d) for d, _, w in due)
            return Append(facts, settles=False)
    exhausted = _exhausted_step(snapshot)
    if exhausted is not None:
        error = {
            "type": "StepExhausted",
            "message": f"step {exhausted.step_id!r} failed after {exhausted.attempts} attempt(s)",
            "step_id": exhausted.step_id,
            "step_error": without_traceback(exhausted.error),
        }
        return terminate(snapshot, Fail(error=error), f"step {exhausted.step_id!r} exhausted")
    try:
        proposal = code.propose(snapshot)
        result = plan(snapshot, proposal.command)
        _check_hosted(snapshot, code, result)
        attributes = attribute_events(snapshot, proposal.attributes)
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # the workflow's own bug (even sys.exit): never a crash
        return failed(snapshot, exc, now)
    if engine_cancels(snapshot, result):
        reason = snapshot.cancel_reason or "cancelled"
        return _with(attributes, terminate(snapshot, Cancelled(reason=reason), reason))
    if result.events:
        return Append((*attributes, *result.events), settles=proposal.blocking)
    if result.terminal is not None:
        ended = terminate(snapshot, result.terminal, terminal_reason(result.terminal))
        return _with(attributes, ended)
    if attributes:
        # Nothing new but attributes: record them; the run still waits on what is open.
        return Append(tuple(attributes), settles=result.waits_on_open)
    if result.waits_on_open:
        if snapshot.decision_error is not None:
            # Fixed code decided cleanly but has nothing new to record: say so in history, so
            # that the run stops showing as failing.
            error_type = snapshot.decision_error.error_type
            return Append((DecisionRecovered(error_type=error_type),), settles=True)
        return Park(snapshot.next_deadline())
    stuck = WorkflowStuck(
        "the workflow re-issued only identities that are already settled; read their "
        "results (ctx.step_output, ctx.step_error, ctx.signal ...) and return the next command"
    )
    return failed(snapshot, stuck, now)


def attribute_events(
    snapshot: WorkflowRunSnapshot, calls: Iterable[Mapping[str, Any]]
) -> list[AttributesSet]:
    """The ``attributes_set`` events of a decision's ``ctx.set_attributes`` calls.

    Calls are matched to history by position: the n-th call of the run's code must set what
    the n-th ``attributes_set`` recorded (else ``NonDeterminismError``); calls past the
    recorded ones are new, recorded with the decision's command. A call that sets nothing new
    is still recorded (it keeps the positions of later calls stable).
    """
    recorded = snapshot.attribute_sets
    new: list[AttributesSet] = []
    mismatches: list[Mismatch] = []
    for n, call in enumerate(calls):
        if n < len(recorded):
            if canonical(recorded[n]) != canonical(call):
                mismatches.append(
                    Mismatch(
                        identity=f"set_attributes call #{n + 1}",
                        field="attributes",
                        recorded=recorded[n],
                        produced=dict(call),
                    )
                )
        else:
            new.append(AttributesSet(attributes=dict(call)))
    if mismatches:
        raise NonDeterminismError(snapshot.run_id, snapshot.last_sequence, mismatches)
    return new


def _with(attributes: list[AttributesSet], ended: Terminate) -> Terminate:
    """``ended`` with the decision's new attributes recorded before its closing events."""
    if not attributes:
        return ended
    return Terminate((*attributes, *ended.events), ended.command, ended.reason)


def terminate(snapshot: WorkflowRunSnapshot, command: TerminalCommand, reason: str) -> Terminate:
    """The events that end the run with ``command``: closing events, then the terminal one."""
    events: list[Event] = closing_events(snapshot, reason)
    match command:
        case Complete():
            events.append(RunCompleted(result=command.result))
        case Fail():
            events.append(RunFailed(error=command.error))
        case Cancelled():
            events.append(RunCancelled(reason=command.reason, forced=command.forced))
        case ContinueAsNew():
            events.append(
                RunContinuedAsNew(
                    successor_run_id=successor_run_id(snapshot.run_id),
                    input=command.input,
                    runtime_build_id=snapshot.spec.runtime_build_id,
                    patches=snapshot.spec.patches,
                )
            )
    return Terminate(tuple(events), command, reason)


def failed(
    snapshot: WorkflowRunSnapshot,
    error: BaseException,
    now: datetime,
    error_type: str | None = None,
) -> Failed:
    """A failed decision, recorded once per cause, retried with a back-off that grows."""
    mismatches = None
    if isinstance(error, NonDeterminismError):
        mismatches = [_mismatch_json(m) for m in error.mismatches]
    kind, message = type(error).__name__, str(error)
    if isinstance(error, WorkflowError):
        # Flow's own report on the workflow's result (it returned no command, ...): its cause
        # and detail, not "WorkflowError: Run 'x': workflow code failed with ..." once more.
        kind, message = error.error_type, error.detail
    event = DecisionFailed(
        error_type=error_type or kind,
        message=storable_text(message),
        mismatches=mismatches,
        traceback=code_traceback(error),
    )
    since = snapshot.failing_since or now
    delay = min(max(now - since, DECISION_RETRY_MIN), DECISION_RETRY_MAX)
    previous = snapshot.decision_error
    same = previous is not None and failure_cause(previous.to_data()) == failure_cause(
        event.to_data()
    )
    return Failed(None if same else event, error, now + delay)


def failure_cause(data: Mapping[str, Any]) -> str:
    """What makes two failed decisions the same failure: the error type and, for a
    non-determinism, each identity, field and *recorded* value — never the produced value, which
    may change on every call (a deadline read from the clock)."""
    mismatches = data.get("mismatches")
    if isinstance(mismatches, list):
        key: Any = [
            [m.get("identity"), m.get("field"), m.get("recorded")]
            for m in mismatches
            if isinstance(m, dict)
        ]
    else:
        key = data.get("message")
    return canonical([data.get("error_type"), key])


def successor_run_id(run_id: str) -> str:
    """``order-7`` → ``order-7~1`` → ``order-7~2``: the chain stays readable."""
    base, sep, generation = run_id.rpartition("~")
    if sep and generation.isdigit():
        return f"{base}~{int(generation) + 1}"
    return f"{run_id}~1"


def terminal_reason(command: TerminalCommand) -> str:
    """The reason written on ``step_cancelled`` events when a run ends with ``command``."""
    match command:
        case Complete():
            return "run completed"
        case Fail():
            return "run failed"
        case Cancelled():
            return command.reason
        case ContinueAsNew():
            return "run continued as new"


class WorkflowStuck(Exception):
    """The workflow re-issued only settled identities: it would wait for ever."""


class UnknownStep(Exception):
    """The command names a step handler the run's build does not have."""


class UnknownWorkflow(Exception):
    """The command starts a child workflow the run's build does not have."""


def _exhausted_step(snapshot: WorkflowRunSnapshot) -> Any:
    if not snapshot.step_counts.get(StepStatus.FAILED):
        return None
    exhausted = [
        s
        for s in snapshot.steps.values()
        if s.status is StepStatus.FAILED and s.retry.on_exhausted == "terminate"
    ]
    return min(exhausted, key=lambda s: s.sequence) if exhausted else None


def _check_hosted(snapshot: WorkflowRunSnapshot, code: WorkflowCode, result: Plan) -> None:
    """A new step or child must name code the build has: found at decision time, nothing is
    recorded and no attempt is burnt; deploying fixed code lets the run go on."""
    build = snapshot.spec.runtime_build_id

    def unknown(what: str, name: str, kind: str, known: Iterable[str]) -> str:
        names = ", ".join(sorted(known)) or "none"
        return (
            f"{what} {name!r}, which build {build!r} does not have (known {kind}: {names}); "
            "fix the name and deploy, and the run goes on"
        )

    for event in result.events:
        if isinstance(event, StepScheduled) and event.name not in code.steps:
            what = f"step {event.step_id!r} names handler"
            raise UnknownStep(unknown(what, event.name, "steps", code.steps))
        if isinstance(event, ChildScheduled) and event.workflow not in code.workflows:
            what = f"child {event.child_id!r} starts workflow"
            raise UnknownWorkflow(unknown(what, event.workflow, "workflows", code.workflows))


def _mismatch_json(m: Mismatch) -> dict[str, Any]:
    data = {
        "identity": m.identity,
        "field": m.field,
        "recorded": m.recorded,
        "produced": m.produced,
    }
    if m.cause is not None:
        data["cause"] = m.cause
    return data


__all__ = [
    "DECISION_RETRY_MAX",
    "DECISION_RETRY_MIN",
    "Append",
    "Decision",
    "Failed",
    "Idle",
    "Park",
    "Proposal",
    "Terminate",
    "WorkflowCode",
    "attribute_events",
    "decide",
    "failed",
    "failure_cause",
    "successor_run_id",
    "terminal_reason",
    "terminate",
]
