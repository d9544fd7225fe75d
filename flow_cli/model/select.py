"""Waiting on several things at once: ``ctx.first``, ``ctx.all_settled`` and ``ctx.spawn``.

``ctx.first(ctx.on_signal(...), ctx.on_timer(...), ...)`` opens each branch not yet recorded, one
per decision (as ``ctx.receive`` opens a wait and then its timer), then parks until one settles.
The winner is the branch that settled first in history order; its signal waits that lost are
closed by the projection as soon as another member settles (each records the select's members),
so a later signal of a losing name stays buffered for whoever asks next.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, NoReturn, cast

from flow_cli.errors import InputError
from flow_cli.model.builders import DEFAULT_RETRY, STEP_BATCH, step_name
from flow_cli.model.clock import Seconds
from flow_cli.model.commands import (
    CancellationPolicy,
    CreateHook,
    RuntimeCommand,
    ScheduleStep,
    ScheduleSteps,
    StartChild,
    StartChildren,
    WaitForSignal,
)
from flow_cli.model.jsonval import JsonValue
from flow_cli.model.retry import RetryPolicy
from flow_cli.model.sequential import SequentialHelpers
from flow_cli.model.status import RunStatus, StepStatus, WorkflowTerminalOutcome


@dataclass(frozen=True, slots=True, kw_only=True)
class Branch:
    """One thing ``ctx.first`` waits on; made by ``ctx.on_signal``, ``ctx.on_timer``,
    ``ctx.on_hook``, ``ctx.on_step`` and ``ctx.on_child``."""

    kind: str
    """``signal``, ``timer``, ``hook``, ``step`` or ``child``."""
    ident: str
    """The wait, hook, step or child id: what ``ctx.first`` returns when this branch wins."""
    signal_name: str | None = None
    deadline: datetime | None = None
    timeout: Seconds | None = None
    token: str | None = None
    metadata: JsonValue = None
    opens: RuntimeCommand | None = None
    """For a step or child: the command that starts it when it is not recorded yet."""

    @property
    def member(self) -> str:
        """How a signal wait records this branch in its select: ``"kind:id"``."""
        return f"{self.kind}:{self.ident}"


@dataclass(frozen=True, slots=True, kw_only=True)
class Settled:
    """One member of ``ctx.all_settled``: never raises for a member's failure."""

    ok: bool
    """The step completed / the child completed."""
    value: Any
    """The step's output or the child's result when ``ok``; else ``None``."""
    error: JsonValue
    """When not ``ok``: the step's ``{"type", "message", "attempt"}``, or the child's
    terminal outcome as JSON."""


class SelectHelpers(SequentialHelpers):
    """``ctx`` methods for waiting on several things; mixed into ``WorkflowContext``."""

    def on_signal(self, wait_id: str, signal_name: str) -> Branch:
        """A ``ctx.first`` branch: signal ``signal_name`` (its payload is the value)."""
        return Branch(kind="signal", ident=wait_id, signal_name=signal_name)

    def on_timer(
        self,
        wait_id: str,
        deadline: datetime | None = None,
        *,
        timeout: Seconds | None = None,
    ) -> Branch:
        """A ``ctx.first`` branch: a timer at ``deadline``, or ``timeout`` after ``ctx.now`` at
        the decision that opens it (the value is ``None``)."""
        if (deadline is None) == (timeout is None):
            raise InputError(f"ctx.on_timer({wait_id!r}): give deadline= or timeout=")
        return Branch(kind="timer", ident=wait_id, deadline=deadline, timeout=timeout)

    def on_hook(
        self, hook_id: str, *, token: str | None = None, metadata: JsonValue = None
    ) -> Branch:
        """A ``ctx.first`` branch: hook ``hook_id`` (token ``ctx.new_token(hook_id)`` unless
        given); its callback payload is the value."""
        return Branch(kind="hook", ident=hook_id, token=token, metadata=metadata)

    def on_step(
        self,
        step_id: str,
        name: str | Callable[..., Any] | None = None,
        input: JsonValue = None,
        retry: RetryPolicy | None = None,
    ) -> Branch:
        """A ``ctx.first`` branch: step ``step_id`` (scheduled here when ``name`` is given and
        it is not recorded); its output is the value (a surfaced failure raises
        ``StepFailedError``)."""
        opens = None
        if name is not None:
            opens = self._schedule_step(
                step_id, step_name(name), input, retry or DEFAULT_RETRY, None, None
            )
        return Branch(kind="step", ident=step_id, opens=opens)

    def on_child(
        self,
        child_id: str,
        workflow: str | None = None,
        input: JsonValue = None,
        cancellation: CancellationPolicy = "cancel",
    ) -> Branch:
        """A ``ctx.first`` branch: child ``child_id`` (started here when ``workflow`` is given
        and it is not recorded); its ``WorkflowTerminalOutcome`` is the value."""
        opens = (
            None if workflow is None else self._start_child(child_id, workflow, input, cancellation)
        )
        return Branch(kind="child", ident=child_id, opens=opens)

    def first(self, *branches: Branch) -> tuple[str, Any]:
        """``(id, value)`` of the branch that settled first in history order.

        Until one has, it opens the branches not recorded yet (one a decision) and then waits.
        The others are closed: a losing signal wait takes no signal, so a later signal of its
        name stays buffered.
        """
        return _first(self, branches)

    def all_settled(self, members: Iterable[ScheduleStep | StartChild]) -> list[Settled]:
        """Run ``ctx.schedule_step(...)`` (or ``ctx.start_child(...)``) commands as one batch;
        once every member has settled, one ``Settled`` each, in order. Never raises for a
        member's failure (give steps ``on_exhausted="surface"`` to see theirs)."""
        return _all_settled(self, list(members))

    def spawn(self, child_id: str, workflow: str, input: JsonValue = None) -> str:
        """Start child ``child_id`` detached (cancellation ``"abandon"``) and return its run id
        as soon as ``child_scheduled`` is recorded, without waiting for its outcome."""
        command = self._start_child(child_id, workflow, input, "abandon")
        given = {"workflow": workflow, "input": input, "cancellation": "abandon"}
        self._use("child", child_id, f"child {child_id!r}", given)
        child = self._snap.children.get(child_id)
        if child is None:
            self.suspend(command)  # not blocking: the code goes on once it is recorded
        if not child.matches(command.workflow, command.input, "abandon", None):
            self._check(command)
        return child.run_id


def _first(ctx: SelectHelpers, branches: tuple[Branch, ...]) -> tuple[str, Any]:
    if not branches:
        raise InputError("ctx.first needs at least one branch")
    members = tuple(b.member for b in branches)
    if len(set(members)) != len(members):
        raise InputError(f"ctx.first: a branch is given twice ({', '.join(members)})")
    opening = [_compare(ctx, branch, members) for branch in branches]
    snap = ctx._snap
    settled = [(seq, i) for i, b in enumerate(branches) if (seq := snap.settled_at(b.member))]
    if settled:
        _, index = min(settled)
        winner = branches[index]
        return winner.ident, _value(ctx, winner)
    unopened = [command for command in opening if command is not None]
    if unopened:
        ctx.suspend(unopened[0], blocking=len(unopened) == 1)
    _park(ctx, branches, members)


def _compare(ctx: SelectHelpers, branch: Branch, members: tuple[str, ...]) -> RuntimeCommand | None:
    """Check ``branch`` against history as its helper would; the command that opens it when
    it is not recorded yet (else None)."""
    snap = ctx._snap
    ident = branch.ident
    match branch.kind:
        case "signal":
            name = str(branch.signal_name)
            ctx._use("wait", ident, f"signal wait {ident!r}", {"signal_name": name})
            command: RuntimeCommand = WaitForSignal(wait_id=ident, signal_name=name, select=members)
            wait = snap.signal_waits.get(ident)
            if wait is None and ident not in snap.waits:
                return command
            if wait is None or wait.signal_name != name:
                ctx._check(command)
            return None
        case "timer":
            deadline = ctx._timeout(f"timer {ident!r}", ident, branch.deadline, branch.timeout)
            if deadline is None:
                raise InputError(f"ctx.on_timer({ident!r}): give deadline= or timeout=")
            ctx._use("wait", ident, f"timer {ident!r}", {"deadline": deadline.isoformat()})
            timer = snap.waits.get(ident)
            if timer is None:
                return ctx._wait_until(ident, deadline)
            if timer.deadline != deadline:
                ctx._check_deadline(ident, timer, deadline)
            return None
        case "hook":
            token = branch.token or ctx.new_token(ident)
            hook_command = ctx._create_hook(ident, token, branch.metadata)
            ctx._use("hook", ident, f"hook {ident!r}", {"token": token})
            hook = snap.hooks.get(ident)
            if hook is None:
                return hook_command
            if hook.token != token or hook.metadata != hook_command.metadata:
                ctx._check(hook_command)
            return None
        case "step" | "child":
            recorded = (snap.steps if branch.kind == "step" else snap.children).get(ident)
            if branch.opens is not None:
                if recorded is None:
                    return branch.opens
                ctx._check(branch.opens)
            elif recorded is None:
                helper = "on_step(id, name, input)" if branch.kind == "step" else "on_child"
                raise InputError(
                    f"ctx.first: {branch.kind} {ident!r} was never started; give what starts "
                    f"it (ctx.{helper}) or start it before"
                )
            return None
    raise InputError(f"ctx.first: unknown branch kind {branch.kind!r}")


def _value(ctx: SelectHelpers, branch: Branch) -> Any:
    snap = ctx._snap
    match branch.kind:
        case "signal":
            return snap.json_payload(snap.signal_waits[branch.ident].payload)
        case "hook":
            return snap.json_payload(snap.hooks[branch.ident].payload)
        case "step":
            return ctx._settled_output(branch.ident)
        case "child":
            return ctx.child_outcome(branch.ident)
    return None


def _park(ctx: SelectHelpers, branches: tuple[Branch, ...], members: tuple[str, ...]) -> NoReturn:
    """Every branch is open and none settled: re-issue one (``still waiting``)."""
    snap = ctx._snap
    for branch in branches:
        if branch.kind == "signal":
            name = str(branch.signal_name)
            ctx.suspend(
                WaitForSignal(wait_id=branch.ident, signal_name=name, select=members),
                blocking=True,
            )
        if branch.kind == "timer":
            ctx.suspend(
                ctx._wait_until(branch.ident, snap.waits[branch.ident].deadline), blocking=True
            )
        if branch.kind == "hook":
            hook = snap.hooks[branch.ident]
            ctx.suspend(
                CreateHook(hook_id=hook.hook_id, token=hook.token, metadata=hook.metadata),
                blocking=True,
            )
    first = branches[0]
    ctx.suspend(_recorded_command(ctx, first.kind, first.ident), blocking=True)


def _recorded_command(ctx: SelectHelpers, kind: str, ident: str) -> RuntimeCommand:
    """The command that history recorded for step or child ``ident`` (its whole batch)."""
    snap = ctx._snap
    if kind == "step":
        step = snap.steps[ident]
        if step.batch_id is None:
            return ScheduleStep(step_id=ident, name=step.name, input=step.input, retry=step.retry)
        batch = sorted(
            (s for s in snap.steps.values() if s.batch_id == step.batch_id),
            key=lambda s: s.sequence,
        )
        return ScheduleSteps(
            steps=tuple(
                ScheduleStep(step_id=s.step_id, name=s.name, input=s.input, retry=s.retry)
                for s in batch
            ),
            batch_id=step.batch_id,
        )
    child = snap.children[ident]
    if child.batch_id is None:
        return StartChild(
            child_id=ident,
            workflow=child.workflow,
            input=child.input,
            cancellation=child.cancellation,
        )
    kids = sorted(
        (c for c in snap.children.values() if c.batch_id == child.batch_id),
        key=lambda c: c.sequence,
    )
    return StartChildren(
        children=tuple(
            StartChild(
                child_id=c.child_id,
                workflow=c.workflow,
                input=c.input,
                cancellation=c.cancellation,
            )
            for c in kids
        ),
        batch_id=child.batch_id,
    )


def _all_settled(ctx: SelectHelpers, members: list[ScheduleStep | StartChild]) -> list[Settled]:
    if not members:
        return []
    if all(isinstance(m, ScheduleStep) for m in members):
        return _steps_settled(ctx, cast(list[ScheduleStep], members))
    if all(isinstance(m, StartChild) for m in members):
        return _children_settled(ctx, cast(list[StartChild], members))
    raise InputError("ctx.all_settled takes steps or children, not both in one batch")


def _steps_settled(ctx: SelectHelpers, members: list[ScheduleStep]) -> list[Settled]:
    snap = ctx._snap
    batch = ctx._batch(STEP_BATCH, members, None)
    results: list[Settled] = []
    pending = False
    for member in batch.steps:
        step = ctx._batch_member(member, batch)
        if step is None or not step.status.settled:
            pending = True
        elif step.status is StepStatus.COMPLETED:
            results.append(Settled(ok=True, value=snap.json_payload(step.output), error=None))
        else:
            error = ctx.step_error(step.step_id)
            if error is None:  # cancelled
                error = {"type": "StepCancelled", "message": step.cancel_reason or "cancelled"}
            results.append(Settled(ok=False, value=None, error=error))
    if pending:
        ctx.suspend(batch, blocking=True)
    return results


def _children_settled(ctx: SelectHelpers, members: list[StartChild]) -> list[Settled]:
    results: list[Settled] = []
    for outcome in ctx.all_children(members):
        results.append(_child_settled(outcome))
    return results


def _child_settled(outcome: WorkflowTerminalOutcome) -> Settled:
    if outcome.kind is RunStatus.COMPLETED:
        return Settled(ok=True, value=outcome.result, error=None)
    return Settled(ok=False, value=None, error=outcome.to_json())


__all__ = ["Branch", "SelectHelpers", "Settled"]
