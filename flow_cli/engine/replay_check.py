"""Replay checking: would this build's code make the decisions this history recorded?

``replay_history`` walks a history event by event. At every point where the recorded workflow
made a decision (a chunk of decision events), it asks the new code for its command on the
snapshot of exactly the events before that chunk, and compares field by field. The code sees
the recorded spec (input, patch markers); only the build id may differ. It is what
``flow replay-check`` runs in CI before a deploy.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from flow_cli.errors import NonDeterminismError
from flow_cli.model.decision import Append, Decision, Failed, Idle, Park, Terminate, decide
from flow_cli.model.events import (
    TERMINAL_EVENTS,
    AttributesSet,
    ChildAbandoned,
    ChildCancelled,
    ChildScheduled,
    Event,
    EventEnvelope,
    HookCreated,
    RunCancelled,
    RunContinuedAsNew,
    RunStarted,
    SignalWaitStarted,
    StepCancelled,
    StepScheduled,
    WaitStarted,
)
from flow_cli.model.jsonval import canonical, json_fields
from flow_cli.model.snapshot import WorkflowRunSnapshot
from flow_cli.runtime import Runtime

_NEW_IDENTITY = (StepScheduled, WaitStarted, SignalWaitStarted, HookCreated, ChildScheduled)
_CLOSING = (StepCancelled, ChildCancelled, ChildAbandoned)


@dataclass(frozen=True, slots=True, kw_only=True)
class Divergence:
    """One field where the new code disagrees with the recorded history."""

    run_id: str
    sequence: int
    identity: str
    field: str
    recorded: Any
    produced: Any

    def to_json(self) -> dict[str, Any]:
        return json_fields(self, "sequence", "identity", "field", "recorded", "produced")


@dataclass(frozen=True, slots=True, kw_only=True)
class ReplayResult:
    run_id: str
    ok: bool
    divergences: tuple[Divergence, ...]
    error: str | None = None
    """Set when the history could not be replayed at all."""
    decision_points: int = 0

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "run_id": self.run_id,
            "ok": self.ok,
            "divergences": [d.to_json() for d in self.divergences],
        }
        if self.error is not None:
            out["error"] = self.error
        return out


def replay_history(runtime: Runtime, history: Sequence[EventEnvelope]) -> ReplayResult:
    """Replay ``history`` against ``runtime``'s code at every recorded decision point."""
    if not history or not isinstance(history[0].event, RunStarted):
        run_id = history[0].run_id if history else "?"
        return ReplayResult(
            run_id=run_id, ok=False, divergences=(), error="history does not start with run_started"
        )
    run_id = history[0].run_id
    found: list[Divergence] = []

    seen: set[str] = set()

    def diverge(sequence: int, identity: str, field: str, recorded: Any, produced: Any) -> None:
        # A recorded identity is re-checked at every later decision point; report it once.
        key = canonical([identity, field, recorded, produced])
        if key in seen:
            return
        seen.add(key)
        found.append(
            Divergence(
                run_id=run_id,
                sequence=sequence,
                identity=identity,
                field=field,
                recorded=recorded,
                produced=produced,
            )
        )

    spec = history[0].event.spec
    unknown = [p for p in spec.patches if p not in runtime.patches]
    if unknown:
        diverge(1, "run", "patches", list(spec.patches), list(runtime.patches))
    if spec.workflow not in runtime.workflows:
        diverge(1, "run", "workflow", spec.workflow, None)
        return ReplayResult(run_id=run_id, ok=False, divergences=tuple(found))

    points = 0
    index = 1
    try:
        snap = WorkflowRunSnapshot.start(history[0])
        while index < len(history):
            chunk = _chunk(history, index)
            if chunk:
                points += 1
                _check_point(runtime, snap, chunk, diverge)
                for envelope in chunk:
                    snap.apply(envelope)
                index += len(chunk)
            else:
                snap.apply(history[index])
                index += 1
        if not snap.terminal:
            points += 1
            _check_open_end(runtime, snap, diverge)
    except ValueError as exc:  # a malformed history (gap, unknown identity)
        return ReplayResult(
            run_id=run_id,
            ok=False,
            divergences=tuple(found),
            error=str(exc),
            decision_points=points,
        )
    return ReplayResult(
        run_id=run_id, ok=not found, divergences=tuple(found), decision_points=points
    )


def _chunk(history: Sequence[EventEnvelope], start: int) -> list[EventEnvelope]:
    """The events of one recorded decision beginning at ``start`` (empty for a fact)."""
    first = history[start].event
    if isinstance(first, AttributesSet):
        # Recorded with (before) the decision's command events, or alone.
        end = start
        while end < len(history) and isinstance(history[end].event, AttributesSet):
            end += 1
        rest = _chunk(history, end) if end < len(history) else []
        return list(history[start:end]) + rest
    if isinstance(first, (*_CLOSING, *TERMINAL_EVENTS)):
        end = start
        while end < len(history) and isinstance(history[end].event, _CLOSING):
            end += 1
        if end < len(history) and isinstance(history[end].event, TERMINAL_EVENTS):
            return list(history[start : end + 1])
        return []  # closing events without a terminal one: not a decision
    if isinstance(first, StepScheduled | ChildScheduled) and first.batch_id is not None:
        end = start
        while (
            end < len(history)
            and type(history[end].event) is type(first)
            and getattr(history[end].event, "batch_id", None) == first.batch_id
        ):
            end += 1
        return list(history[start:end])
    if isinstance(first, _NEW_IDENTITY):
        return [history[start]]
    return []


def _identity(event: Event) -> str:
    match event:
        case StepScheduled() | StepCancelled():
            return f"step {event.step_id!r}"
        case WaitStarted():
            return f"wait {event.wait_id!r}"
        case SignalWaitStarted():
            return f"signal wait {event.wait_id!r}"
        case HookCreated():
            return f"hook {event.hook_id!r}"
        case ChildScheduled() | ChildCancelled() | ChildAbandoned():
            return f"child {event.child_id!r}"
        case RunContinuedAsNew():
            return "continuation"
        case _:
            return "run outcome"


def _check_point(
    runtime: Runtime, snap: WorkflowRunSnapshot, chunk: list[EventEnvelope], diverge: Any
) -> None:
    """Ask the decision function what it would record here, and compare with what was."""
    sequence = chunk[0].sequence
    ending = chunk[-1].event
    if isinstance(ending, RunCancelled) and ending.forced:
        return  # `flow terminate` ended the run; the code was not asked
    decision = decide(snap, runtime, chunk[0].recorded_at, replaying=True)
    produced: tuple[Event, ...] = ()
    match decision:
        case Append(events=events) | Terminate(events=events):
            produced = events
        case Failed(error=NonDeterminismError() as error):
            for m in error.mismatches:
                diverge(sequence, m.identity, m.field, m.recorded, m.produced)
            return
        case Failed(error=error):
            diverge(sequence, "workflow", "error", None, f"{type(error).__name__}: {error}")
            return
        case Park() | Idle():
            produced = ()
    recorded = [e.event for e in chunk]
    calls = len(snap.attribute_sets)

    def identity(event: Event, index: int) -> str:
        if isinstance(event, AttributesSet):
            # Named as the decision names it (``attribute_events``): by its call's position.
            return f"set_attributes call #{calls + index + 1}"
        return _identity(event)

    for index, event in enumerate(recorded):
        other = produced[index] if index < len(produced) else None
        if (
            other is None
            or type(other) is not type(event)
            or identity(other, index) != identity(event, index)
        ):
            diverge(
                chunk[index].sequence,
                identity(event, index),
                "command",
                _describe(event),
                _describe(other) if other is not None else _describe_nothing(decision),
            )
            return
        mine, theirs = event.to_data(), other.to_data()
        for key in mine:
            if canonical(mine[key]) != canonical(theirs.get(key)):
                diverge(
                    chunk[index].sequence, identity(event, index), key, mine[key], theirs.get(key)
                )
    for index, extra in enumerate(produced[len(recorded) :], len(recorded)):
        diverge(sequence, identity(extra, index), "command", None, _describe(extra))


def _describe(event: Event) -> dict[str, Any]:
    """An event in the vocabulary of history: ``{event_key: data}``."""
    return {event.event_key(): event.to_data()}


def _describe_nothing(decision: Decision) -> str:
    if isinstance(decision, Park):
        return "nothing new (the code only re-issued what is still open)"
    return "nothing"


def _check_open_end(runtime: Runtime, snap: WorkflowRunSnapshot, diverge: Any) -> None:
    """At the end of a run still in progress, re-issued identities must still match."""
    decision = decide(snap, runtime, snap.last_event_at or snap.started_at, replaying=True)
    if not isinstance(decision, Failed):
        return
    error = decision.error
    if isinstance(error, NonDeterminismError):
        for m in error.mismatches:
            diverge(snap.last_sequence, m.identity, m.field, m.recorded, m.produced)
        return
    recorded = snap.decision_error
    if recorded is not None and recorded.error_type == type(error).__name__:
        return  # the run is already stuck on this error; this build does not make it worse
    diverge(snap.last_sequence, "workflow", "error", None, f"{type(error).__name__}: {error}")
