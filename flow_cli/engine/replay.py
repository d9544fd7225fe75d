"""Replay checking: would this build's code make the decisions this history recorded?

``replay_history`` walks a history event by event. At every point where the recorded workflow
made a decision (a chunk of decision events), it asks the new code for its command on the
snapshot of exactly the events before that chunk, and compares field by field. The code sees
the recorded spec (input, patch markers); only the build id may differ. It is what
``flow replay-check`` runs in CI before a deploy.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from flow_cli.errors import NonDeterminismError
from flow_cli.model.commands import Cancelled, Complete, ContinueAsNew, Fail, RuntimeCommand
from flow_cli.model.determinism import engine_cancels, plan
from flow_cli.model.events import (
    ChildAbandoned,
    ChildCancelled,
    ChildScheduled,
    Event,
    EventEnvelope,
    HookCreated,
    RunCancelled,
    RunCompleted,
    RunContinuedAsNew,
    RunFailed,
    RunStarted,
    SignalWaitStarted,
    StepCancelled,
    StepScheduled,
    WaitStarted,
)
from flow_cli.model.jsonval import canonical
from flow_cli.model.snapshot import WorkflowRunSnapshot
from flow_cli.model.status import StepStatus
from flow_cli.runtime import Runtime

_NEW_IDENTITY = (StepScheduled, WaitStarted, SignalWaitStarted, HookCreated, ChildScheduled)
_CLOSING = (StepCancelled, ChildCancelled, ChildAbandoned)
_TERMINAL = (RunCompleted, RunFailed, RunCancelled, RunContinuedAsNew)


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
        return {
            "sequence": self.sequence,
            "identity": self.identity,
            "field": self.field,
            "recorded": self.recorded,
            "produced": self.produced,
        }


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

    snap = WorkflowRunSnapshot.start(history[0])
    points = 0
    index = 1
    try:
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
    if isinstance(first, (*_CLOSING, *_TERMINAL)):
        end = start
        while end < len(history) and isinstance(history[end].event, _CLOSING):
            end += 1
        if end < len(history) and isinstance(history[end].event, _TERMINAL):
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


def _describe(command: RuntimeCommand | None) -> Any:
    if command is None:
        return None
    name = type(command).__name__
    data = {k: getattr(command, k) for k in command.__slots__}
    return {name: json.loads(json.dumps(data, default=_json_default))}


def _json_default(value: Any) -> Any:
    if hasattr(value, "to_json"):
        return value.to_json()
    if hasattr(value, "isoformat"):
        return value.isoformat()
    if isinstance(value, tuple):
        return list(value)
    return repr(value)


def _check_point(
    runtime: Runtime, snap: WorkflowRunSnapshot, chunk: list[EventEnvelope], diverge: Any
) -> None:
    sequence = chunk[0].sequence
    terminal = chunk[-1].event
    if isinstance(terminal, RunFailed) and _engine_failed(snap, terminal):
        return  # the engine ended the run on an exhausted step; the code was not asked
    if isinstance(terminal, RunCancelled) and terminal.forced:
        return  # `flow terminate` ended the run; the code was not asked
    try:
        command = runtime.decide(snap)
        result = plan(snap, command)
    except NonDeterminismError as exc:
        for m in exc.mismatches:
            diverge(sequence, m.identity, m.field, m.recorded, m.produced)
        return
    except Exception as exc:
        diverge(sequence, "workflow", "error", None, f"{type(exc).__name__}: {exc}")
        return

    if isinstance(terminal, _TERMINAL):
        engine_cancel = engine_cancels(snap, result)
        _compare_terminal(snap, terminal, command, engine_cancel, sequence, diverge)
        return
    recorded = [e.event for e in chunk]
    produced = result.events
    for index, event in enumerate(recorded):
        other = produced[index] if index < len(produced) else None
        if other is None or type(other) is not type(event) or _identity(other) != _identity(event):
            diverge(
                chunk[index].sequence,
                _identity(event),
                "command",
                {event.event_key(): event.to_data()},
                _describe(command),
            )
            return
        mine, theirs = event.to_data(), other.to_data()
        for key in mine:
            if canonical(mine[key]) != canonical(theirs.get(key)):
                diverge(chunk[index].sequence, _identity(event), key, mine[key], theirs.get(key))
    for extra in produced[len(recorded) :]:
        diverge(sequence, _identity(extra), "command", None, {extra.event_key(): extra.to_data()})


def _engine_failed(snap: WorkflowRunSnapshot, event: RunFailed) -> bool:
    error = event.error if isinstance(event.error, dict) else {}
    step = snap.steps.get(str(error.get("step_id")))
    return (
        error.get("type") == "StepExhausted"
        and step is not None
        and step.status is StepStatus.FAILED
        and step.retry.on_exhausted == "terminate"
    )


def _compare_terminal(
    snap: WorkflowRunSnapshot,
    terminal: Event,
    command: RuntimeCommand,
    engine_cancel: bool,
    sequence: int,
    diverge: Any,
) -> None:
    identity = _identity(terminal)
    match terminal, command:
        case RunCompleted(), Complete():
            if canonical(terminal.result) != canonical(command.result):
                diverge(sequence, identity, "result", terminal.result, command.result)
        case RunFailed(), Fail():
            if canonical(terminal.error) != canonical(command.error):
                diverge(sequence, identity, "error", terminal.error, command.error)
        case RunCancelled(), Cancelled():
            if terminal.reason != command.reason:
                diverge(sequence, identity, "reason", terminal.reason, command.reason)
        case RunCancelled(), _ if engine_cancel:
            pass  # no cleanup: the engine cancelled on the workflow's behalf
        case RunContinuedAsNew(), ContinueAsNew():
            if canonical(terminal.input) != canonical(command.input):
                diverge(sequence, identity, "input", terminal.input, command.input)
        case _:
            diverge(
                sequence,
                identity,
                "command",
                {terminal.event_key(): terminal.to_data()},
                _describe(command),
            )


def _check_open_end(runtime: Runtime, snap: WorkflowRunSnapshot, diverge: Any) -> None:
    """At the end of a run still in progress, re-issued identities must still match."""
    try:
        plan(snap, runtime.decide(snap))
    except NonDeterminismError as exc:
        for m in exc.mismatches:
            diverge(snap.last_sequence, m.identity, m.field, m.recorded, m.produced)
    except Exception as exc:
        recorded = snap.decision_error if isinstance(snap.decision_error, dict) else {}
        if recorded.get("error_type") == type(exc).__name__:
            return  # the run is already stuck on this error; this build does not make it worse
        diverge(snap.last_sequence, "workflow", "error", None, f"{type(exc).__name__}: {exc}")
