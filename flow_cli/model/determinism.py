"""Validating a command against history, field by field, before anything is appended.

``plan(snapshot, command)`` returns what the command means for this history: the decision events
it adds (new identities), whether it ends the run, and whether it waits on anything still open.
A recorded identity re-issued with different parameters is a ``NonDeterminismError`` naming each
differing field; a batch is checked whole, so nothing of it is appended if any member differs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC
from typing import Any, assert_never

from flow_cli.errors import Mismatch, NonDeterminismError
from flow_cli.model import commands
from flow_cli.model.events import (
    ChildScheduled,
    Event,
    HookCreated,
    SignalWaitStarted,
    StepScheduled,
    WaitStarted,
)
from flow_cli.model.jsonval import canonical
from flow_cli.model.snapshot import WorkflowRunSnapshot


def child_run_id(parent_run_id: str, child_id: str) -> str:
    return f"{parent_run_id}/{child_id}"


@dataclass(slots=True)
class Plan:
    """What one command means against the current history."""

    events: list[Event] = field(default_factory=list)
    """Decision events for identities the history does not have yet."""
    terminal: commands.TerminalCommand | None = None
    open_since: list[int] = field(default_factory=list)
    """Sequences at which the still-open identities it re-issues were recorded."""

    @property
    def waits_on_open(self) -> bool:
        """The command re-issues at least one identity that is still open."""
        return bool(self.open_since)


def engine_cancels(snapshot: WorkflowRunSnapshot, result: Plan) -> bool:
    """Whether the engine ends the run as cancelled on the workflow's behalf (rule 12).

    Under a cancellation request, only new steps and children count as cleanup, and only work
    opened after the request is cleanup in progress. A command that ends nothing, starts no
    cleanup and waits on nothing begun since the request means "no cleanup": cancel now. A new
    timer, signal wait or hook is not cleanup — it would leave the run Cancelling indefinitely.
    """
    if not snapshot.cancel_requested or result.terminal is not None:
        return False
    if any(isinstance(e, StepScheduled | ChildScheduled) for e in result.events):
        return False
    since = snapshot.cancel_sequence or 0
    return not any(seq > since for seq in result.open_since)


def plan(snapshot: WorkflowRunSnapshot, command: commands.RuntimeCommand) -> Plan:
    """Validate ``command`` against ``snapshot`` and say what it adds.

    Raises ``NonDeterminismError`` listing every mismatch of the whole command.
    """
    result = Plan()
    mismatches: list[Mismatch] = []
    match command:
        case commands.ScheduleStep():
            _step(snapshot, command, None, result, mismatches)
        case commands.ScheduleSteps():
            _unique([s.step_id for s in command.steps], "step", mismatches)
            for member in command.steps:
                _step(snapshot, member, command.batch_id, result, mismatches)
            recorded_steps = [(s.sequence, s.step_id, s.batch_id) for s in snapshot.steps.values()]
            produced_steps = [s.step_id for s in command.steps]
            _members(command.batch_id, "steps", recorded_steps, produced_steps, mismatches)
        case commands.WaitUntil():
            _wait(snapshot, command, result, mismatches)
        case commands.WaitForSignal():
            _signal_wait(snapshot, command, result, mismatches)
        case commands.CreateHook():
            _hook(snapshot, command, result, mismatches)
        case commands.StartChild():
            _child(snapshot, command, None, result, mismatches)
        case commands.StartChildren():
            _unique([c.child_id for c in command.children], "child", mismatches)
            for child in command.children:
                _child(snapshot, child, command.batch_id, result, mismatches)
            recorded_children = [
                (c.sequence, c.child_id, c.batch_id) for c in snapshot.children.values()
            ]
            produced_children = [c.child_id for c in command.children]
            _members(command.batch_id, "children", recorded_children, produced_children, mismatches)
        case commands.ContinueAsNew():
            spec = snapshot.spec
            if command.runtime_build_id is not None and (
                command.runtime_build_id != spec.runtime_build_id
            ):
                mismatches.append(
                    Mismatch(
                        identity="continuation",
                        field="runtime_build_id",
                        recorded=spec.runtime_build_id,
                        produced=command.runtime_build_id,
                    )
                )
            if command.patches is not None and tuple(command.patches) != spec.patches:
                mismatches.append(
                    Mismatch(
                        identity="continuation",
                        field="patches",
                        recorded=list(spec.patches),
                        produced=list(command.patches),
                    )
                )
            result.terminal = command
        case commands.Complete() | commands.Fail() | commands.Cancelled():
            result.terminal = command
        case _:
            assert_never(command)
    if mismatches:
        raise NonDeterminismError(snapshot.run_id, snapshot.last_sequence, mismatches)
    return result


def _compare(identity: str, pairs: dict[str, tuple[Any, Any]], out: list[Mismatch]) -> None:
    for name, (recorded, produced) in pairs.items():
        if canonical(recorded) != canonical(produced):
            out.append(
                Mismatch(identity=identity, field=name, recorded=recorded, produced=produced)
            )


def _unique(ids: list[str], kind: str, out: list[Mismatch]) -> None:
    seen: set[str] = set()
    for ident in ids:
        if ident in seen:
            out.append(
                Mismatch(
                    identity=f"{kind} {ident!r}",
                    field="batch",
                    recorded=None,
                    produced="the same id twice in one batch",
                )
            )
        seen.add(ident)


def _members(
    batch_id: str,
    field: str,
    recorded: list[tuple[int, str, str | None]],
    produced: list[str],
    out: list[Mismatch],
) -> None:
    """A recorded batch is one identity: re-issued, it must have exactly its recorded members."""
    members = [ident for _, ident, batch in sorted(recorded) if batch == batch_id]
    if members and members != produced:
        out.append(
            Mismatch(
                identity=f"batch {batch_id!r}", field=field, recorded=members, produced=produced
            )
        )


def _step(
    snap: WorkflowRunSnapshot,
    cmd: commands.ScheduleStep,
    batch_id: str | None,
    result: Plan,
    out: list[Mismatch],
) -> None:
    recorded = snap.steps.get(cmd.step_id)
    if recorded is None:
        result.events.append(
            StepScheduled(
                step_id=cmd.step_id,
                name=cmd.name,
                input=cmd.input,
                retry=cmd.retry,
                batch_id=batch_id,
                timeout=cmd.timeout,
                heartbeat_timeout=cmd.heartbeat_timeout,
            )
        )
        return
    _compare(
        f"step {cmd.step_id!r}",
        {
            "name": (recorded.name, cmd.name),
            "input": (recorded.input, cmd.input),
            "retry": (recorded.retry.to_json(), cmd.retry.to_json()),
            "batch_id": (recorded.batch_id, batch_id),
            "timeout": (recorded.timeout, cmd.timeout),
            "heartbeat_timeout": (recorded.heartbeat_timeout, cmd.heartbeat_timeout),
        },
        out,
    )
    if not recorded.status.settled:
        result.open_since.append(recorded.sequence)


def _wait(
    snap: WorkflowRunSnapshot, cmd: commands.WaitUntil, result: Plan, out: list[Mismatch]
) -> None:
    identity = f"wait {cmd.wait_id!r}"
    if cmd.wait_id in snap.signal_waits:
        out.append(
            Mismatch(identity=identity, field="kind", recorded="signal wait", produced="timer")
        )
        return
    recorded = snap.waits.get(cmd.wait_id)
    # The deadline is an instant: compared and recorded in UTC, whatever offset the code used.
    deadline = cmd.deadline.astimezone(UTC)
    if recorded is None:
        result.events.append(WaitStarted(wait_id=cmd.wait_id, deadline=deadline))
        return
    _compare(
        identity,
        {"deadline": (recorded.deadline.astimezone(UTC).isoformat(), deadline.isoformat())},
        out,
    )
    if not recorded.done:
        result.open_since.append(recorded.sequence)


def _signal_wait(
    snap: WorkflowRunSnapshot, cmd: commands.WaitForSignal, result: Plan, out: list[Mismatch]
) -> None:
    identity = f"signal wait {cmd.wait_id!r}"
    if cmd.wait_id in snap.waits:
        out.append(
            Mismatch(identity=identity, field="kind", recorded="timer", produced="signal wait")
        )
        return
    recorded = snap.signal_waits.get(cmd.wait_id)
    if recorded is None:
        result.events.append(
            SignalWaitStarted(wait_id=cmd.wait_id, signal_name=cmd.signal_name, select=cmd.select)
        )
        return
    _compare(identity, {"signal_name": (recorded.signal_name, cmd.signal_name)}, out)
    if not recorded.delivered:
        result.open_since.append(recorded.sequence)


def _hook(
    snap: WorkflowRunSnapshot, cmd: commands.CreateHook, result: Plan, out: list[Mismatch]
) -> None:
    recorded = snap.hooks.get(cmd.hook_id)
    if recorded is None:
        result.events.append(
            HookCreated(hook_id=cmd.hook_id, token=cmd.token, metadata=cmd.metadata)
        )
        return
    _compare(
        f"hook {cmd.hook_id!r}",
        {"token": (recorded.token, cmd.token), "metadata": (recorded.metadata, cmd.metadata)},
        out,
    )
    if not recorded.resolved:
        result.open_since.append(recorded.sequence)


def _child(
    snap: WorkflowRunSnapshot,
    cmd: commands.StartChild,
    batch_id: str | None,
    result: Plan,
    out: list[Mismatch],
) -> None:
    recorded = snap.children.get(cmd.child_id)
    if recorded is None:
        result.events.append(
            ChildScheduled(
                child_id=cmd.child_id,
                child_run_id=child_run_id(snap.run_id, cmd.child_id),
                workflow=cmd.workflow,
                input=cmd.input,
                cancellation=cmd.cancellation,
                batch_id=batch_id,
            )
        )
        return
    _compare(
        f"child {cmd.child_id!r}",
        {
            "workflow": (recorded.workflow, cmd.workflow),
            "input": (recorded.input, cmd.input),
            "cancellation": (recorded.cancellation, cmd.cancellation),
            "batch_id": (recorded.batch_id, batch_id),
        },
        out,
    )
    if recorded.open:
        result.open_since.append(recorded.sequence)
