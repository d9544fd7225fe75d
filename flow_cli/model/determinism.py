"""Validating a command against history, field by field, before anything is appended.

``plan(snapshot, command)`` returns what the command means for this history: the decision events
it adds (new identities), whether it ends the run, and whether it waits on anything still open.
A recorded identity re-issued with different parameters is a ``NonDeterminismError`` naming each
differing field; a batch is checked whole, so nothing of it is appended if any member differs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC
from typing import Any, TypeVar, assert_never

from flow_cli.errors import Mismatch, NonDeterminismError
from flow_cli.model import commands
from flow_cli.model.carried import carried
from flow_cli.model.events import (
    ChildScheduled,
    Event,
    HookCreated,
    SignalWaitStarted,
    StepScheduled,
    WaitStarted,
)
from flow_cli.model.jsonval import canonical
from flow_cli.model.snapshot import ChildState, StepState, WorkflowRunSnapshot

_M = TypeVar("_M", commands.ScheduleStep, commands.StartChild)


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
    check = _Check(snapshot)
    match command:
        case commands.ScheduleStep():
            check.step(command, None)
        case commands.ScheduleSteps():
            steps = [(s.step_id, s) for s in command.steps]
            check.batch("step", "steps", command.batch_id, steps, snapshot.steps, check.step)
        case commands.WaitUntil():
            check.wait(command)
        case commands.WaitForSignal():
            check.signal_wait(command)
        case commands.CreateHook():
            check.hook(command)
        case commands.StartChild():
            check.child(command, None)
        case commands.StartChildren():
            children = [(c.child_id, c) for c in command.children]
            check.batch(
                "child", "children", command.batch_id, children, snapshot.children, check.child
            )
        case commands.ContinueAsNew():
            spec = snapshot.spec
            patches = None if command.patches is None else list(command.patches)
            # Given only to assert what the successor inherits: a value left out is not compared.
            asserted = {
                "runtime_build_id": (spec.runtime_build_id, command.runtime_build_id),
                "patches": (list(spec.patches), patches),
            }
            check.compare("continuation", {k: v for k, v in asserted.items() if v[1] is not None})
            check.plan.terminal = command
        case commands.Complete() | commands.Fail() | commands.Cancelled():
            check.plan.terminal = command
        case _:
            assert_never(command)
    if check.mismatches:
        raise NonDeterminismError(snapshot.run_id, snapshot.last_sequence, check.mismatches)
    return check.plan


@dataclass(slots=True)
class _Check:
    """One command checked against history: the plan it makes and the mismatches it has."""

    snap: WorkflowRunSnapshot
    plan: Plan = field(default_factory=Plan)
    mismatches: list[Mismatch] = field(default_factory=list)

    def mismatch(self, identity: str, field: str, recorded: Any, produced: Any) -> None:
        self.mismatches.append(
            Mismatch(identity=identity, field=field, recorded=recorded, produced=produced)
        )

    def compare(self, identity: str, pairs: dict[str, tuple[Any, Any]]) -> None:
        """Each ``field: (recorded, produced)`` must hold the same JSON value."""
        for name, (recorded, produced) in pairs.items():
            if canonical(recorded) != canonical(produced):
                self.mismatch(identity, name, recorded, produced)

    def reissued(
        self, identity: str, pairs: dict[str, tuple[Any, Any]], sequence: int, settled: bool
    ) -> None:
        """A recorded identity issued again: it must be as recorded, and while it is open the
        command waits on it."""
        self.compare(identity, pairs)
        if not settled:
            self.plan.open_since.append(sequence)

    def batch(
        self,
        kind: str,
        field: str,
        batch_id: str,
        members: list[tuple[str, _M]],
        recorded: Mapping[str, StepState] | Mapping[str, ChildState],
        check: Callable[[_M, str | None], None],
    ) -> None:
        """A batch of steps or children, checked whole (the same rule for both): the ids of
        its ``(id, member)`` pairs must be unique, each member is checked as if issued alone
        (``check``), and a recorded batch is one identity: re-issued, it must have exactly its
        recorded members (a mismatch of ``field``). Mismatches come in that order."""
        ids = [ident for ident, _ in members]
        seen: set[str] = set()
        for ident in ids:
            if ident in seen:
                self.mismatch(f"{kind} {ident!r}", "batch", None, "the same id twice in one batch")
            seen.add(ident)
        for _, member in members:
            check(member, batch_id)
        in_order = sorted((s.sequence, ident, s.batch_id) for ident, s in recorded.items())
        before = [ident for _, ident, batch in in_order if batch == batch_id]
        if before and before != ids:
            self.mismatch(f"batch {batch_id!r}", field, before, ids)

    def step(self, cmd: commands.ScheduleStep, batch_id: str | None) -> None:
        recorded = self.snap.steps.get(cmd.step_id)
        if recorded is None:
            self.plan.events.append(carried(StepScheduled, cmd, batch_id=batch_id))
            return
        self.reissued(
            f"step {cmd.step_id!r}",
            {
                "name": (recorded.name, cmd.name),
                "input": (recorded.input, cmd.input),
                "retry": (recorded.retry.to_json(), cmd.retry.to_json()),
                "batch_id": (recorded.batch_id, batch_id),
                "timeout": (recorded.timeout, cmd.timeout),
                "heartbeat_timeout": (recorded.heartbeat_timeout, cmd.heartbeat_timeout),
            },
            recorded.sequence,
            recorded.status.settled,
        )

    def kind_taken(self, identity: str, taken: bool, recorded: str, produced: str) -> bool:
        """A wait id names a timer or a signal wait, never both: when history has it as the
        other kind (``taken``), that is the mismatch, and nothing else of it is compared."""
        if taken:
            self.mismatch(identity, "kind", recorded, produced)
        return taken

    def wait(self, cmd: commands.WaitUntil) -> None:
        identity = f"wait {cmd.wait_id!r}"
        if self.kind_taken(identity, cmd.wait_id in self.snap.signal_waits, "signal wait", "timer"):
            return
        recorded = self.snap.waits.get(cmd.wait_id)
        # The deadline is an instant: compared and recorded in UTC, whatever offset the code used.
        deadline = cmd.deadline.astimezone(UTC)
        if recorded is None:
            self.plan.events.append(WaitStarted(wait_id=cmd.wait_id, deadline=deadline))
            return
        was = recorded.deadline.astimezone(UTC).isoformat()
        pairs = {"deadline": (was, deadline.isoformat())}
        self.reissued(identity, pairs, recorded.sequence, recorded.done)

    def signal_wait(self, cmd: commands.WaitForSignal) -> None:
        identity = f"signal wait {cmd.wait_id!r}"
        if self.kind_taken(identity, cmd.wait_id in self.snap.waits, "timer", "signal wait"):
            return
        recorded = self.snap.signal_waits.get(cmd.wait_id)
        if recorded is None:
            self.plan.events.append(carried(SignalWaitStarted, cmd))
            return
        pairs = {"signal_name": (recorded.signal_name, cmd.signal_name)}
        self.reissued(identity, pairs, recorded.sequence, recorded.delivered)

    def hook(self, cmd: commands.CreateHook) -> None:
        recorded = self.snap.hooks.get(cmd.hook_id)
        if recorded is None:
            self.plan.events.append(carried(HookCreated, cmd))
            return
        pairs = {
            "token": (recorded.token, cmd.token),
            "metadata": (recorded.metadata, cmd.metadata),
        }
        self.reissued(f"hook {cmd.hook_id!r}", pairs, recorded.sequence, recorded.resolved)

    def child(self, cmd: commands.StartChild, batch_id: str | None) -> None:
        recorded = self.snap.children.get(cmd.child_id)
        if recorded is None:
            run_id = child_run_id(self.snap.run_id, cmd.child_id)
            self.plan.events.append(
                carried(ChildScheduled, cmd, child_run_id=run_id, batch_id=batch_id)
            )
            return
        self.reissued(
            f"child {cmd.child_id!r}",
            {
                "workflow": (recorded.workflow, cmd.workflow),
                "input": (recorded.input, cmd.input),
                "cancellation": (recorded.cancellation, cmd.cancellation),
                "batch_id": (recorded.batch_id, batch_id),
            },
            recorded.sequence,
            not recorded.open,
        )
