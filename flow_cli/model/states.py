"""The parts of a run's state the snapshot holds: its steps, timers, signal waits, signals,
hooks, children, build upgrades and applied updates, each as history left it."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from flow_cli.model.commands import CancellationPolicy
from flow_cli.model.jsonval import JsonValue, json_fields
from flow_cli.model.retry import RetryPolicy
from flow_cli.model.status import ChildStatus, StepStatus


@dataclass(frozen=True, slots=True, kw_only=True)
class Recorded:
    """A part of the run's state that one event of its history recorded."""

    sequence: int
    """Sequence of that event (``step_scheduled``, ``wait_started``, ``signal_received``...)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Settling(Recorded):
    """What history opens and later settles: a step, a timer, a hook or a child (``ctx.first``
    asks any of them when it settled)."""

    settled_sequence: int | None = None
    """Sequence of the event that settled it (completed, failed for good or cancelled; fired;
    resolved); ``None`` while it is open."""


@dataclass(frozen=True, slots=True, kw_only=True)
class StepState(Settling):
    step_id: str
    name: str
    input: JsonValue
    retry: RetryPolicy
    batch_id: str | None
    status: StepStatus
    attempt: int
    """The attempt that runs next or is running (after a retryable failure: the next one)."""
    attempts: int = 0
    """Highest attempt number started."""
    output: JsonValue = None
    error: JsonValue = None
    """``{"type", "message", "attempt"}`` of the last failure."""
    next_attempt_at: datetime | None = None
    lease_until: datetime | None = None
    worker: str | None = None
    timeout: float | None = None
    """Seconds an attempt may run (``step_scheduled``; ``None``: the handler's default)."""
    heartbeat_timeout: float | None = None
    runs: int = 0
    """``step_started`` events of the current attempt: more than one means a worker ran it
    and vanished (its lease ran out) before recording its end."""
    attempt_started_at: datetime | None = None
    """When the current attempt first started (its ``timeout`` counts from there)."""
    scheduled_at: datetime | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    cancel_reason: str | None = None

    def matches(
        self,
        name: str,
        input: JsonValue,
        retry: RetryPolicy,
        batch_id: str | None,
        timeout: float | None,
        heartbeat_timeout: float | None,
    ) -> bool:
        """Whether a step scheduled with these values re-issues this one as recorded: the cheap
        ``==`` test a ``ctx`` helper makes before it builds the command and compares it whole."""
        return (
            self.name == name
            and self.input == input
            and (self.retry is retry or self.retry == retry)
            and self.batch_id == batch_id
            and self.timeout == timeout
            and self.heartbeat_timeout == heartbeat_timeout
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class WaitState(Settling):
    wait_id: str
    deadline: datetime
    done: bool = False
    fired_at: datetime | None = None
    opened_at: datetime | None = None
    """When its ``wait_started`` was recorded (``ctx.now`` of the decision that opened it)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class SignalWaitState(Recorded):
    wait_id: str
    signal_name: str
    delivered: bool = False
    payload: JsonValue = None
    signal_sequence: int | None = None
    timed_out: bool = False
    """Its deadline (``ctx.receive(..., deadline=)``) passed first: it takes no signal now."""
    select: tuple[str, ...] | None = None
    """The members of the ``ctx.first`` that opened it."""
    closed: bool = False
    """Another member of its select settled first: it takes no signal now."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ReceivedSignal(Recorded):
    signal_name: str
    payload: JsonValue
    key: str | None = None
    """The sender's idempotency key, if any."""
    wait_id: str | None = None
    """The signal wait that consumed it; ``None`` while it is buffered."""


@dataclass(frozen=True, slots=True, kw_only=True)
class HookState(Settling):
    hook_id: str
    token: str
    metadata: JsonValue
    resolved: bool = False
    payload: JsonValue = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ChildState(Settling):
    child_id: str
    run_id: str
    workflow: str
    input: JsonValue
    cancellation: CancellationPolicy
    batch_id: str | None
    status: ChildStatus = ChildStatus.RUNNING
    """``Running`` or the child's terminal status; ``CancelRequested`` / ``Abandoned`` when the
    parent ended first."""
    outcome: JsonValue = None

    @property
    def open(self) -> bool:
        return self.status is ChildStatus.RUNNING

    def matches(
        self,
        workflow: str,
        input: JsonValue,
        cancellation: CancellationPolicy,
        batch_id: str | None,
    ) -> bool:
        """Whether a child started with these values re-issues this one as recorded (see
        ``StepState.matches``)."""
        return (
            self.workflow == workflow
            and self.input == input
            and self.cancellation == cancellation
            and self.batch_id == batch_id
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class BuildUpgrade(Recorded):
    """One ``build_upgraded`` event: the run was re-pinned from one build to another."""

    from_build: str
    to_build: str
    at: datetime

    def to_json(self) -> dict[str, Any]:
        return {
            "from": self.from_build,
            "to": self.to_build,
            "sequence": self.sequence,
            "at": self.at.isoformat(),
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class AppliedUpdate(Recorded):
    """One ``update_applied`` event, as ``ctx.updates(name)`` gives it."""

    update_id: str
    """The caller's id (``flow update --id``), or one the engine chose."""
    name: str
    """The update's declared name."""
    args: JsonValue
    """What the caller sent."""
    result: JsonValue
    """What the handler answered, as recorded: replay never runs the handler again."""
    at: datetime
    """When it was recorded."""

    def to_json(self) -> dict[str, Any]:
        fields = json_fields(self, "update_id", "name", "args", "result", "sequence")
        return {**fields, "at": self.at.isoformat()}
