"""The events of a run's history, and the envelope that orders them.

Each event is a frozen dataclass with a stable snake_case key; ``to_data`` / ``event_from_data``
turn it into the JSON object stored in the database and shown by ``flow history``.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from datetime import datetime
from functools import cache
from typing import Any, ClassVar, TypeAlias

from flow_cli.model.clock import parse_utc
from flow_cli.model.jsonval import JsonValue
from flow_cli.model.retry import RetryPolicy
from flow_cli.model.spec import WorkflowSpec

_frozen = dataclass(frozen=True, slots=True, kw_only=True)


class _EventBase:
    KEY: ClassVar[str]

    @classmethod
    def event_key(cls) -> str:
        """The stable snake_case name of this kind of event."""
        return cls.KEY

    def to_data(self) -> dict[str, Any]:
        """The event as a JSON object (the ``data`` of a history entry)."""
        out: dict[str, Any] = {}
        for f in fields(self):  # type: ignore[arg-type]
            out[f.name] = _encode(getattr(self, f.name))
        return out


def _encode(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, (RetryPolicy, WorkflowSpec)):
        return value.to_json()
    if isinstance(value, tuple):
        return [_encode(v) for v in value]
    return value


@_frozen
class RunStarted(_EventBase):
    KEY = "run_started"
    spec: WorkflowSpec
    seed: str
    """Random per-run seed behind ``ctx.random()`` and ``ctx.new_token()``."""


@_frozen
class StepScheduled(_EventBase):
    KEY = "step_scheduled"
    step_id: str
    name: str
    input: JsonValue
    retry: RetryPolicy
    batch_id: str | None = None


@_frozen
class StepStarted(_EventBase):
    KEY = "step_started"
    step_id: str
    attempt: int
    worker: str
    lease_until: datetime


@_frozen
class StepCompleted(_EventBase):
    KEY = "step_completed"
    step_id: str
    attempt: int
    output: JsonValue


@_frozen
class StepFailed(_EventBase):
    KEY = "step_failed"
    step_id: str
    attempt: int
    error_type: str
    message: str
    next_attempt_at: datetime | None
    """When the next attempt is due; ``None`` when the step is exhausted."""
    exhausted: bool


@_frozen
class StepCancelled(_EventBase):
    KEY = "step_cancelled"
    step_id: str
    reason: str
    outcome_unknown: bool
    """An attempt had started: reconcile its side effect with the idempotency key."""


@_frozen
class WaitStarted(_EventBase):
    KEY = "wait_started"
    wait_id: str
    deadline: datetime


@_frozen
class WaitCompleted(_EventBase):
    KEY = "wait_completed"
    wait_id: str
    deadline: datetime


@_frozen
class SignalWaitStarted(_EventBase):
    KEY = "signal_wait_started"
    wait_id: str
    signal_name: str


@_frozen
class SignalReceived(_EventBase):
    KEY = "signal_received"
    signal_name: str
    payload: JsonValue


@_frozen
class HookCreated(_EventBase):
    KEY = "hook_created"
    hook_id: str
    token: str
    metadata: JsonValue


@_frozen
class HookResolved(_EventBase):
    KEY = "hook_resolved"
    hook_id: str
    token: str
    payload: JsonValue


@_frozen
class ChildScheduled(_EventBase):
    KEY = "child_scheduled"
    child_id: str
    child_run_id: str
    workflow: str
    input: JsonValue
    cancellation: str
    batch_id: str | None = None


@_frozen
class ChildCompleted(_EventBase):
    KEY = "child_completed"
    child_id: str
    child_run_id: str
    outcome: JsonValue
    """The child's ``WorkflowTerminalOutcome`` as JSON."""


@_frozen
class ChildCancelled(_EventBase):
    """The parent ended while the child ran under policy ``cancel``: the child was asked to stop."""

    KEY = "child_cancelled"
    child_id: str
    child_run_id: str
    reason: str


@_frozen
class ChildAbandoned(_EventBase):
    """The parent ended while the child ran under policy ``abandon``: the child runs on."""

    KEY = "child_abandoned"
    child_id: str
    child_run_id: str
    reason: str


@_frozen
class CancelRequested(_EventBase):
    KEY = "cancel_requested"
    reason: str


@_frozen
class DecisionFailed(_EventBase):
    KEY = "decision_failed"
    error_type: str
    message: str
    mismatches: JsonValue = None
    """For a non-determinism error: ``[{identity, field, recorded, produced}]``."""


@_frozen
class RunCompleted(_EventBase):
    KEY = "run_completed"
    result: JsonValue


@_frozen
class RunFailed(_EventBase):
    KEY = "run_failed"
    error: JsonValue
    """``{"type", "message", ...}``; ``step_id`` when a step exhausted its retries."""


@_frozen
class RunCancelled(_EventBase):
    KEY = "run_cancelled"
    reason: str


@_frozen
class RunContinuedAsNew(_EventBase):
    KEY = "run_continued_as_new"
    successor_run_id: str
    input: JsonValue
    runtime_build_id: str
    patches: tuple[str, ...]


Event: TypeAlias = (
    RunStarted
    | StepScheduled
    | StepStarted
    | StepCompleted
    | StepFailed
    | StepCancelled
    | WaitStarted
    | WaitCompleted
    | SignalWaitStarted
    | SignalReceived
    | HookCreated
    | HookResolved
    | ChildScheduled
    | ChildCompleted
    | ChildCancelled
    | ChildAbandoned
    | CancelRequested
    | DecisionFailed
    | RunCompleted
    | RunFailed
    | RunCancelled
    | RunContinuedAsNew
)

EVENT_TYPES: dict[str, type[Event]] = {
    cls.KEY: cls
    for cls in (
        RunStarted,
        StepScheduled,
        StepStarted,
        StepCompleted,
        StepFailed,
        StepCancelled,
        WaitStarted,
        WaitCompleted,
        SignalWaitStarted,
        SignalReceived,
        HookCreated,
        HookResolved,
        ChildScheduled,
        ChildCompleted,
        ChildCancelled,
        ChildAbandoned,
        CancelRequested,
        DecisionFailed,
        RunCompleted,
        RunFailed,
        RunCancelled,
        RunContinuedAsNew,
    )
}

TERMINAL_KEYS = frozenset(
    {RunCompleted.KEY, RunFailed.KEY, RunCancelled.KEY, RunContinuedAsNew.KEY}
)


@cache
def _decoders(cls: type[Event]) -> tuple[tuple[str, str, bool], ...]:
    return tuple((f.name, str(f.type), f.default is not f.default_factory) for f in fields(cls))


def event_from_data(event_key: str, data: dict[str, Any]) -> Event:
    """Rebuild an event from its key and stored JSON object.

    Raises KeyError for an unknown key or a missing field.
    """
    cls = EVENT_TYPES[event_key]
    kwargs: dict[str, Any] = {}
    for name, type_text, _ in _decoders(cls):
        if name not in data:
            continue  # a field added later falls back to its default
        value = data[name]
        if value is None:
            kwargs[name] = None
        elif type_text.startswith("datetime"):
            kwargs[name] = parse_utc(value)
        elif type_text == "RetryPolicy":
            kwargs[name] = RetryPolicy.from_json(value)
        elif type_text == "WorkflowSpec":
            kwargs[name] = WorkflowSpec.from_json(value)
        elif type_text.startswith("tuple"):
            kwargs[name] = tuple(value)
        else:
            kwargs[name] = value
    return cls(**kwargs)


@dataclass(frozen=True, slots=True, kw_only=True)
class EventEnvelope:
    """One committed entry of a run's history."""

    run_id: str
    sequence: int
    """1 for ``run_started``, then +1 per event, no gaps."""
    recorded_at: datetime
    """UTC time the event was committed (engine clock)."""
    event: Event

    @property
    def event_key(self) -> str:
        return self.event.event_key()

    def to_json(self) -> dict[str, Any]:
        """The stable shape of ``flow history --json``."""
        return {
            "sequence": self.sequence,
            "event_key": self.event.event_key(),
            "recorded_at": self.recorded_at.isoformat(),
            "data": self.event.to_data(),
        }

    @classmethod
    def from_json(cls, run_id: str, data: dict[str, Any]) -> EventEnvelope:
        return cls(
            run_id=run_id,
            sequence=int(data["sequence"]),
            recorded_at=parse_utc(data["recorded_at"]),
            event=event_from_data(data["event_key"], data["data"]),
        )
