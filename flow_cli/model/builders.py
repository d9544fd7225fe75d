"""The command methods of ``ctx``: ``ctx.schedule_step``, ``ctx.complete`` and the others each
build one command, check its values, and record that it was built (``CommandBuilders``); and
the checks they share."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Final, Generic, TypeVar

from flow_cli.errors import InputError
from flow_cli.model import commands
from flow_cli.model.attributes import check_attributes
from flow_cli.model.clock import Seconds
from flow_cli.model.command_text import default_batch_id
from flow_cli.model.jsonval import JsonLimitError, JsonValue, normalise
from flow_cli.model.names import check_name
from flow_cli.model.retry import RetryPolicy, intern
from flow_cli.model.snapshot import ChildState, StepState, WorkflowRunSnapshot

DEFAULT_RETRY = intern(RetryPolicy())
STEP_NAME_ATTRIBUTE: Final = "__flow_step_name__"
"""Set by ``@runtime.step(name)`` on the handler, so ``ctx.step(id, handler, ...)`` works."""


_C = TypeVar("_C", bound=commands.RuntimeCommand)
_M = TypeVar("_M")
_B = TypeVar("_B")


@dataclass(frozen=True, slots=True)
class BatchKind(Generic[_M, _B]):
    """What a batch of steps and a batch of children differ in (``CommandBuilders._batch``)."""

    empty: str
    """The error an empty batch raises."""
    member_id: Callable[[_M], str]
    recorded: Callable[[WorkflowRunSnapshot], Mapping[str, StepState] | Mapping[str, ChildState]]
    """The members history recorded, by id."""
    command: Callable[[tuple[_M, ...], str], _B]
    """The batch command of the members and the batch id."""


STEP_BATCH: BatchKind[commands.ScheduleStep, commands.ScheduleSteps] = BatchKind(
    empty="schedule_steps needs at least one step",
    member_id=lambda step: step.step_id,
    recorded=lambda snap: snap.steps,
    command=lambda steps, batch_id: commands.ScheduleSteps(steps=steps, batch_id=batch_id),
)
CHILD_BATCH: BatchKind[commands.StartChild, commands.StartChildren] = BatchKind(
    empty="start_children needs at least one child",
    member_id=lambda child: child.child_id,
    recorded=lambda snap: snap.children,
    command=lambda children, batch_id: commands.StartChildren(children=children, batch_id=batch_id),
)


class CommandBuilders:
    """The command methods of ``WorkflowContext`` (mixed into it)."""

    _snap: WorkflowRunSnapshot
    _built: list[commands.RuntimeCommand]
    """Every command built in this decision (``CommandNotReturned`` reads it)."""
    _attribute_calls: list[dict[str, Any]]
    """What each ``set_attributes`` call of this workflow call set, in order."""

    def set_attributes(self, attributes: Mapping[str, str | int | float | bool]) -> None:
        """Set search attributes of this run (``flow runs --attr k=v`` finds it by them).

        Values are strings, numbers or booleans (anything else raises ``InputError``); a key
        set again takes the new value. Nothing is returned: the change is recorded as an
        ``attributes_set`` event in the same append as the command this decision returns.
        Calls are replayed like steps: the n-th call of the run's code must set what the n-th
        recorded one set (or the decision fails with ``NonDeterminismError``), so make the
        calls in the same order on every decision.
        """
        checked = check_attributes(attributes, "ctx.set_attributes")
        if checked:
            self._attribute_calls.append(checked)

    def _record(self, command: _C) -> _C:
        # The command a builder returns is also kept, so that a decision that discards it can
        # be told apart from one that returns it (``CommandNotReturned``).
        self._built.append(command)
        return command

    def schedule_step(
        self,
        step_id: str,
        name: str | Callable[..., Any],
        input: JsonValue = None,
        retry: RetryPolicy | None = None,
        *,
        timeout: Seconds | None = None,
        heartbeat_timeout: Seconds | None = None,
    ) -> commands.ScheduleStep:
        """Run step handler ``name`` (or the ``@runtime.step`` function) under identity
        ``step_id`` (at least once). ``timeout``: how long an attempt may run;
        ``heartbeat_timeout``: how long it may go without ``info.heartbeat()`` (a
        ``timedelta`` or seconds; either one past fails the attempt, retried per ``retry``)."""
        return self._record(
            self._schedule_step(
                step_id,
                step_name(name),
                input,
                retry or DEFAULT_RETRY,
                seconds_or_none(timeout, "timeout"),
                seconds_or_none(heartbeat_timeout, "heartbeat_timeout"),
            )
        )

    def _schedule_step(
        self,
        step_id: str,
        name: str,
        input: JsonValue,
        retry: RetryPolicy,
        timeout: float | None,
        heartbeat_timeout: float | None,
    ) -> commands.ScheduleStep:
        # Name, policy and bounds come resolved: ``ctx.step`` resolves them once, to compare
        # them with history before it builds the command.
        return commands.ScheduleStep(
            step_id=step_id,
            name=name,
            input=_json(input, "step input"),
            retry=retry,
            timeout=timeout,
            heartbeat_timeout=heartbeat_timeout,
        )

    def schedule_steps(
        self, steps: Iterable[commands.ScheduleStep], batch_id: str | None = None
    ) -> commands.ScheduleSteps:
        """One atomic batch of ``ctx.schedule_step(...)`` commands.

        The default ``batch_id`` is a short hash of the member ids.
        """
        return self._record(self._batch(STEP_BATCH, steps, batch_id))

    def wait_until(self, wait_id: str, deadline: datetime) -> commands.WaitUntil:
        """Wait until a UTC deadline (derive it from ``ctx.started_at`` or step outputs)."""
        return self._record(self._wait_until(wait_id, deadline))

    def _wait_until(self, wait_id: str, deadline: datetime) -> commands.WaitUntil:
        if deadline.tzinfo is None:
            raise InputError(f"wait {wait_id!r}: the deadline must be timezone-aware UTC")
        return commands.WaitUntil(wait_id=wait_id, deadline=deadline)

    def wait_for_signal(self, wait_id: str, signal_name: str) -> commands.WaitForSignal:
        """Wait for the next signal named ``signal_name`` (one that came early is matched)."""
        return self._record(commands.WaitForSignal(wait_id=wait_id, signal_name=signal_name))

    def create_hook(
        self, hook_id: str, token: str, metadata: JsonValue = None
    ) -> commands.CreateHook:
        """Open a hook that ``flow hook resolve TOKEN`` completes."""
        return self._record(self._create_hook(hook_id, token, metadata))

    def _create_hook(
        self, hook_id: str, token: str, metadata: JsonValue = None
    ) -> commands.CreateHook:
        return commands.CreateHook(
            hook_id=hook_id, token=token, metadata=_json(metadata, "hook metadata")
        )

    def start_child(
        self,
        child_id: str,
        workflow: str,
        input: JsonValue = None,
        cancellation: commands.CancellationPolicy = "cancel",
    ) -> commands.StartChild:
        """Start a child run ``{run_id}/{child_id}``; the parent resumes when it ends."""
        return self._record(self._start_child(child_id, workflow, input, cancellation))

    def _start_child(
        self,
        child_id: str,
        workflow: str,
        input: JsonValue,
        cancellation: commands.CancellationPolicy,
    ) -> commands.StartChild:
        check_name(child_id, "child id")  # it becomes part of a run id
        if cancellation not in ("cancel", "abandon"):
            raise InputError("child cancellation must be 'cancel' or 'abandon'")
        return commands.StartChild(
            child_id=child_id,
            workflow=workflow,
            input=_json(input, "child input"),
            cancellation=cancellation,
        )

    def start_children(
        self, children: Iterable[commands.StartChild], batch_id: str | None = None
    ) -> commands.StartChildren:
        """One atomic batch of ``ctx.start_child(...)`` commands."""
        return self._record(self._batch(CHILD_BATCH, children, batch_id))

    def _batch(self, kind: BatchKind[_M, _B], members: Iterable[_M], given: str | None) -> _B:
        """The batch command of ``members`` (not recorded): its id is ``given``, else
        ``default_batch_id`` of the member ids (a long batch recorded with its ids joined
        keeps that label)."""
        batch = tuple(members)
        ids = [kind.member_id(member) for member in batch]
        if not ids:
            raise InputError(kind.empty)
        first = kind.recorded(self._snap).get(ids[0])
        return kind.command(
            batch, given or default_batch_id(ids, first.batch_id if first else None)
        )

    def complete(self, result: JsonValue = None) -> commands.Complete:
        return commands.Complete(result=_json(result, "result"))

    def fail(self, error: JsonValue) -> commands.Fail:
        return commands.Fail(error=_json(error, "error"))

    def continue_as_new(
        self,
        input: JsonValue = None,
        *,
        runtime_build_id: str | None = None,
        patches: Sequence[str] | None = None,
    ) -> commands.ContinueAsNew:
        """End this run and start its successor with ``input`` (same build, same patches)."""
        return commands.ContinueAsNew(
            input=_json(input, "continuation input"),
            runtime_build_id=runtime_build_id,
            patches=tuple(patches) if patches is not None else None,
        )

    def cancelled(self, reason: str | None = None) -> commands.Cancelled:
        """End a run whose cancellation was requested, after any cleanup."""
        return commands.Cancelled(reason=reason or self._snap.cancel_reason or "cancelled")


def _json(value: JsonValue, what: str) -> JsonValue:
    try:
        return normalise(value)
    except JsonLimitError as exc:
        raise InputError(f"{what} is refused: {exc}") from None
    except (TypeError, ValueError) as exc:
        raise InputError(f"{what} is not a JSON value: {exc}") from None


def iso_or_none(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def step_name(handler: str | Callable[..., Any]) -> str:
    """The registered name of a step handler given by name or as the decorated function."""
    if isinstance(handler, str):
        return handler
    name = getattr(handler, STEP_NAME_ATTRIBUTE, None)
    if not isinstance(name, str):
        label = getattr(handler, "__qualname__", repr(handler))
        raise InputError(
            f"{label} is not a step handler: decorate it with @runtime.step(name), or pass "
            "the step's name"
        )
    return name


def seconds_or_none(value: Seconds | None, label: str) -> float | None:
    """``value`` in seconds (``None`` stays ``None``); a duration that is not positive is an
    ``InputError`` naming ``label``."""
    if value is None:
        return None
    seconds = value.total_seconds() if isinstance(value, timedelta) else float(value)
    if not seconds > 0 or seconds == float("inf"):
        raise InputError(f"{label} must be a positive duration, got {value!r}")
    return seconds
