"""The events of a run's history, and the envelope that orders them.

Each event is a frozen dataclass with a stable snake_case key; ``to_data`` / ``event_from_data``
turn it into the JSON object stored in the database and shown by ``flow history``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from datetime import datetime
from typing import Any, ClassVar, TypeAlias, get_args

from flow_cli.model.clock import parse_utc
from flow_cli.model.commands import CancellationPolicy
from flow_cli.model.jsonval import JsonValue
from flow_cli.model.retry import RetryPolicy
from flow_cli.model.spec import WorkflowSpec


class _EventBase:
    KEY: ClassVar[str]
    JSON_NAMES: ClassVar[tuple[tuple[str, str], ...]] = ()
    """(field, key in the stored JSON) where the two differ (``from`` is a Python keyword)."""
    WRITTEN_WHEN_SET: ClassVar[frozenset[str]] = frozenset()
    """Fields stored only when they differ from their default: the histories written before
    such a field existed keep their exact bytes."""

    @classmethod
    def event_key(cls) -> str:
        """The stable snake_case name of this kind of event."""
        return cls.KEY

    def to_data(self) -> dict[str, Any]:
        """The event as a JSON object (the ``data`` of a history entry)."""
        return _writer(type(self))(self)


_PLAIN = frozenset(
    {"str", "int", "bool", "float", "str | None", "int | None", "float | None", "bool | None"}
)
"""Field types whose values are JSON as they are (``_encode`` would return them unchanged)."""

_WRITERS: dict[type, Callable[[Any], dict[str, Any]]] = {}


def _writer(kind: type[_EventBase]) -> Callable[[Any], dict[str, Any]]:
    """The ``to_data`` of one kind of event, as straight-line code made once per kind: every
    event is encoded when it is written, and a worker writes three for each step it runs.
    A field is passed through ``_encode`` unless its declared type is plain JSON."""
    found = _WRITERS.get(kind)
    if found is not None:
        return found
    renamed = dict(kind.JSON_NAMES)
    items = []
    scope: dict[str, Any] = {"encode": _encode}
    checks = []
    for f in fields(kind):  # type: ignore[arg-type]
        key = renamed.get(f.name, f.name)
        if f.type in _PLAIN:
            value = f"event.{f.name}"
        elif f.type == "datetime":
            value = f"event.{f.name}.isoformat()"
        else:
            value = f"encode(event.{f.name})"
        items.append(f"{key!r}: {value}")
        if f.name in kind.WRITTEN_WHEN_SET:
            scope[f"default_{f.name}"] = f.default
            checks.append(f"    if event.{f.name} == default_{f.name}:\n        del data[{key!r}]")
    source = "\n".join(
        [
            "def to_data(event):",
            f"    data = {{{', '.join(items)}}}",
            *checks,
            "    return data",
        ]
    )
    exec(source, scope)  # the source is built above from the event's own field names
    written: Callable[[Any], dict[str, Any]] = scope["to_data"]
    _WRITERS[kind] = written
    return written


def event_json(event: Event) -> str:
    """The JSON text a store keeps for ``event`` (raises ``TypeError``/``ValueError`` for a
    value that is not JSON)."""
    return _ENCODER.encode(event.to_data())


_ENCODER = json.JSONEncoder(ensure_ascii=False)
"""Made once (``json.dumps`` with an option builds an encoder per call); every event written
is encoded with it."""


def _encode(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, (RetryPolicy, WorkflowSpec)):
        return value.to_json()
    if isinstance(value, tuple):
        return [_encode(v) for v in value]
    return value


@dataclass(frozen=True, slots=True, kw_only=True)
class RunStarted(_EventBase):
    KEY = "run_started"
    spec: WorkflowSpec
    seed: str
    """Random per-run seed behind ``ctx.random()`` and ``ctx.new_token()``."""


@dataclass(frozen=True, slots=True, kw_only=True)
class StepScheduled(_EventBase):
    KEY = "step_scheduled"
    WRITTEN_WHEN_SET = frozenset({"timeout", "heartbeat_timeout"})
    step_id: str
    name: str
    input: JsonValue
    retry: RetryPolicy
    batch_id: str | None = None
    timeout: float | None = None
    heartbeat_timeout: float | None = None
    """Both stored only when set: histories written before bounded steps have neither."""


@dataclass(frozen=True, slots=True, kw_only=True)
class StepStarted(_EventBase):
    KEY = "step_started"
    step_id: str
    attempt: int
    worker: str
    lease_until: datetime


@dataclass(frozen=True, slots=True, kw_only=True)
class StepCompleted(_EventBase):
    KEY = "step_completed"
    WRITTEN_WHEN_SET = frozenset({"resolved"})
    step_id: str
    attempt: int
    output: JsonValue
    resolved: JsonValue = None
    """``{"by": "operator", "reason"}`` when ``flow step resolve`` recorded it (an unknown
    outcome); stored only then."""


@dataclass(frozen=True, slots=True, kw_only=True)
class StepFailed(_EventBase):
    KEY = "step_failed"
    WRITTEN_WHEN_SET = frozenset({"traceback", "resolved"})
    step_id: str
    attempt: int
    error_type: str
    message: str
    next_attempt_at: datetime | None
    """When the next attempt is due; ``None`` when the step is exhausted."""
    exhausted: bool
    traceback: str | None = None
    """Where the handler raised (its own frames, at most 8 KiB, no locals); not stored when
    ``None`` (histories written before it existed have none)."""
    resolved: JsonValue = None
    """``{"by": "operator", "reason"}`` when ``flow step resolve`` recorded it; stored only
    then."""


@dataclass(frozen=True, slots=True, kw_only=True)
class StepOutcomeUnknown(_EventBase):
    """An attempt of an ``on_lost="unknown"`` step vanished with its worker or timed out:
    whether its side effect happened is unknown, so it is not run again. The run waits for
    ``flow step resolve``."""

    KEY = "step_outcome_unknown"
    step_id: str
    attempt: int
    reason: str


@dataclass(frozen=True, slots=True, kw_only=True)
class StepCancelled(_EventBase):
    KEY = "step_cancelled"
    step_id: str
    reason: str
    outcome_unknown: bool
    """An attempt had started: reconcile its side effect with the idempotency key."""


@dataclass(frozen=True, slots=True, kw_only=True)
class WaitStarted(_EventBase):
    KEY = "wait_started"
    wait_id: str
    deadline: datetime


@dataclass(frozen=True, slots=True, kw_only=True)
class WaitCompleted(_EventBase):
    KEY = "wait_completed"
    wait_id: str
    deadline: datetime


@dataclass(frozen=True, slots=True, kw_only=True)
class SignalWaitStarted(_EventBase):
    KEY = "signal_wait_started"
    WRITTEN_WHEN_SET = frozenset({"select"})
    wait_id: str
    signal_name: str
    select: tuple[str, ...] | None = None
    """Opened by ``ctx.first``: the select's members (``"signal:ok"``, ``"timer:late"``...);
    once one settles, this wait is closed. Written only when set."""


@dataclass(frozen=True, slots=True, kw_only=True)
class SignalReceived(_EventBase):
    KEY = "signal_received"
    WRITTEN_WHEN_SET = frozenset({"key", "carried_from"})
    signal_name: str
    payload: JsonValue
    key: str | None = None
    """The sender's idempotency key (``flow signal --key``): a second signal of this name with
    the same key is not delivered again. Written only when given."""
    carried_from: str | None = None
    """The run that received it first and continued as new before any wait took it: unconsumed
    signals are carried to the successor, in order. Written only when set."""


@dataclass(frozen=True, slots=True, kw_only=True)
class HookCreated(_EventBase):
    KEY = "hook_created"
    hook_id: str
    token: str
    metadata: JsonValue


@dataclass(frozen=True, slots=True, kw_only=True)
class HookResolved(_EventBase):
    KEY = "hook_resolved"
    hook_id: str
    token: str
    payload: JsonValue


@dataclass(frozen=True, slots=True, kw_only=True)
class ChildScheduled(_EventBase):
    KEY = "child_scheduled"
    child_id: str
    child_run_id: str
    workflow: str
    input: JsonValue
    cancellation: CancellationPolicy
    batch_id: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ChildCompleted(_EventBase):
    KEY = "child_completed"
    child_id: str
    child_run_id: str
    outcome: JsonValue
    """The child's ``WorkflowTerminalOutcome`` as JSON."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ChildCancelled(_EventBase):
    """The parent ended while the child ran under policy ``cancel``: the child was asked to stop."""

    KEY = "child_cancelled"
    child_id: str
    child_run_id: str
    reason: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ChildAbandoned(_EventBase):
    """The parent ended while the child ran under policy ``abandon``: the child runs on."""

    KEY = "child_abandoned"
    child_id: str
    child_run_id: str
    reason: str


@dataclass(frozen=True, slots=True, kw_only=True)
class CancelRequested(_EventBase):
    KEY = "cancel_requested"
    reason: str


@dataclass(frozen=True, slots=True, kw_only=True)
class RetryRequested(_EventBase):
    """``flow retry``: an operator asked for the run's failing decision and the listed steps
    waiting out a back-off to be tried now (after a hotfix, say)."""

    KEY = "retry_requested"
    steps: tuple[str, ...]
    """Steps in back-off whose next attempt is due now."""
    decision: bool
    """The run's last decision failed: it is decided now."""
    reason: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class DecisionFailed(_EventBase):
    KEY = "decision_failed"
    WRITTEN_WHEN_SET = frozenset({"traceback"})
    error_type: str
    message: str
    mismatches: JsonValue = None
    """For a non-determinism error: ``[{identity, field, recorded, produced}]``."""
    traceback: str | None = None
    """Where the workflow code raised (its own frames, at most 8 KiB, no locals); not stored
    when ``None`` (histories written before it existed have none)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class DecisionRecovered(_EventBase):
    """After a ``decision_failed``, the workflow code decided without error again."""

    KEY = "decision_recovered"
    error_type: str
    """The error type of the failure it recovered from."""


@dataclass(frozen=True, slots=True, kw_only=True)
class BuildUpgraded(_EventBase):
    """An operator re-pinned the open run to another build (``flow upgrade``) after its history
    replayed cleanly there; from here on that build's code decides it and runs its steps. The
    recorded spec (input, patch markers) stays as it was. Stored as ``{"from", "to"}``."""

    KEY = "build_upgraded"
    JSON_NAMES = (("from_build", "from"), ("to_build", "to"))
    from_build: str
    """The build the run was pinned to."""
    to_build: str
    """The build the run is pinned to from now on."""


@dataclass(frozen=True, slots=True, kw_only=True)
class UpdateApplied(_EventBase):
    """An update was accepted by its handler (``flow update``): a fact from outside, like a
    signal, that workflow code reads with ``ctx.updates(name)``. The handler's ``result`` is
    history: replay reads it, it never runs the handler again."""

    KEY = "update_applied"
    update_id: str
    name: str
    args: JsonValue
    result: JsonValue


@dataclass(frozen=True, slots=True, kw_only=True)
class AttributesSet(_EventBase):
    """The workflow set search attributes (``ctx.set_attributes``), written in the same append
    as its decision's command. A later value of a key replaces an earlier one."""

    KEY = "attributes_set"
    attributes: JsonValue
    """``{key: value}``: strings, numbers or booleans (``flow_cli.model.attributes``)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RunCompleted(_EventBase):
    KEY = "run_completed"
    result: JsonValue


@dataclass(frozen=True, slots=True, kw_only=True)
class RunFailed(_EventBase):
    KEY = "run_failed"
    error: JsonValue
    """``{"type", "message", ...}``; ``step_id`` when a step exhausted its retries."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RunCancelled(_EventBase):
    KEY = "run_cancelled"
    WRITTEN_WHEN_SET = frozenset({"forced"})
    reason: str
    forced: bool = False
    """Ended by ``flow terminate``, without asking the workflow code; written only when true,
    so histories of other cancellations keep their exact bytes."""


@dataclass(frozen=True, slots=True, kw_only=True)
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
    | StepOutcomeUnknown
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
    | RetryRequested
    | DecisionFailed
    | DecisionRecovered
    | BuildUpgraded
    | UpdateApplied
    | AttributesSet
    | RunCompleted
    | RunFailed
    | RunCancelled
    | RunContinuedAsNew
)

EVENT_TYPES: dict[str, type[Event]] = {cls.KEY: cls for cls in get_args(Event)}
"""Every kind of event by its key: the members of ``Event``, so that a new event is named once."""

TERMINAL_EVENTS = (RunCompleted, RunFailed, RunCancelled, RunContinuedAsNew)
"""The events that end a run: the one definition every layer reads."""

TERMINAL_KEYS = frozenset(event.KEY for event in TERMINAL_EVENTS)


def _converter(type_text: str) -> Callable[[Any], Any] | None:
    """How a stored JSON value of a field of this type becomes the field's value."""
    if type_text.startswith("datetime"):
        return parse_utc
    if type_text == "RetryPolicy":
        return RetryPolicy.from_json
    if type_text == "WorkflowSpec":
        return WorkflowSpec.from_json
    if type_text.startswith("tuple"):
        return tuple
    return None


# Worked out once per event type: reading a long history decodes thousands of events.
_DECODERS: dict[str, tuple[tuple[str, Callable[[Any], Any] | None], ...]] = {
    key: tuple((f.name, _converter(str(f.type))) for f in fields(cls))
    for key, cls in EVENT_TYPES.items()
}


def event_from_data(event_key: str, data: dict[str, Any]) -> Event:
    """Rebuild an event from its key and stored JSON object.

    Raises KeyError for an unknown key or a missing field.
    """
    cls = EVENT_TYPES[event_key]
    data = _field_names(cls, data)
    kwargs: dict[str, Any] = {}
    for name, convert in _DECODERS[event_key]:
        if name not in data:
            continue  # a field added later falls back to its default
        value = data[name]
        if value is None or convert is None:
            kwargs[name] = value
        else:
            kwargs[name] = convert(value)
    return cls(**kwargs)


def _field_names(cls: type[Event], data: dict[str, Any]) -> dict[str, Any]:
    """``data`` with the stored keys that differ from field names (``JSON_NAMES``) renamed."""
    if not cls.JSON_NAMES:
        return data
    renamed = {stored: name for name, stored in cls.JSON_NAMES}
    return {renamed.get(key, key): value for key, value in data.items()}


@dataclass(frozen=True, slots=True, kw_only=True)
class EventEnvelope:
    """One committed entry of a run's history."""

    run_id: str
    sequence: int
    """1 for ``run_started``, then +1 per event, no gaps."""
    recorded_at: datetime
    """UTC time the event was committed (engine clock)."""
    event: Event
    size: int = field(default=0, compare=False)
    """Bytes of the stored data when the store knows it (bounds the snapshot cache)."""

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
