"""The one command a workflow returns per decision."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Literal, TypeAlias

from flow_cli.model.jsonval import JsonValue
from flow_cli.model.retry import RetryPolicy

CancellationPolicy = Literal["cancel", "abandon"]


@dataclass(frozen=True, slots=True, kw_only=True)
class ScheduleStep:
    """Run step handler ``name`` with ``input`` under identity ``step_id``."""

    step_id: str
    name: str
    input: JsonValue
    retry: RetryPolicy
    timeout: float | None = None
    """Seconds an attempt may run before it fails as ``StepTimedOut`` (``None``: the
    handler's ``@runtime.step`` default, or unbounded)."""
    heartbeat_timeout: float | None = None
    """Seconds an attempt may go without ``info.heartbeat()`` before it fails as
    ``HeartbeatTimedOut``."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ScheduleSteps:
    """One atomic batch of steps, validated whole before any is appended."""

    steps: tuple[ScheduleStep, ...]
    batch_id: str


@dataclass(frozen=True, slots=True, kw_only=True)
class WaitUntil:
    wait_id: str
    deadline: datetime


@dataclass(frozen=True, slots=True, kw_only=True)
class WaitForSignal:
    wait_id: str
    signal_name: str
    select: tuple[str, ...] | None = None
    """Opened by ``ctx.first``: the members (``"kind:id"``) of its select; once one of them
    settles, this wait is closed and takes no signal."""


@dataclass(frozen=True, slots=True, kw_only=True)
class CreateHook:
    hook_id: str
    token: str
    metadata: JsonValue


@dataclass(frozen=True, slots=True, kw_only=True)
class StartChild:
    child_id: str
    workflow: str
    input: JsonValue
    cancellation: CancellationPolicy


@dataclass(frozen=True, slots=True, kw_only=True)
class StartChildren:
    children: tuple[StartChild, ...]
    batch_id: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Complete:
    result: JsonValue


@dataclass(frozen=True, slots=True, kw_only=True)
class Fail:
    error: JsonValue


@dataclass(frozen=True, slots=True, kw_only=True)
class ContinueAsNew:
    input: JsonValue
    runtime_build_id: str | None = None
    """Only to assert the inherited value: a different one is a non-determinism error."""
    patches: tuple[str, ...] | None = None
    """Likewise: a continuation cannot switch patch markers."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Cancelled:
    reason: str
    forced: bool = False
    """Set by ``Engine.terminate`` only: the run ends without its code's say."""


RuntimeCommand: TypeAlias = (
    ScheduleStep
    | ScheduleSteps
    | WaitUntil
    | WaitForSignal
    | CreateHook
    | StartChild
    | StartChildren
    | Complete
    | Fail
    | ContinueAsNew
    | Cancelled
)

COMMAND_TYPES = (
    ScheduleStep,
    ScheduleSteps,
    WaitUntil,
    WaitForSignal,
    CreateHook,
    StartChild,
    StartChildren,
    Complete,
    Fail,
    ContinueAsNew,
    Cancelled,
)
TerminalCommand: TypeAlias = Complete | Fail | ContinueAsNew | Cancelled
