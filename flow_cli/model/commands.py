"""The one command a workflow returns per decision."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Literal, TypeAlias, get_args

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
class _Wait:
    """A command that opens a wait: a timer or a signal wait, never both under one id."""

    wait_id: str


@dataclass(frozen=True, slots=True, kw_only=True)
class WaitUntil(_Wait):
    """Wake the run at ``deadline`` (``ctx.wait_until``, ``ctx.sleep``)."""

    deadline: datetime


@dataclass(frozen=True, slots=True, kw_only=True)
class WaitForSignal(_Wait):
    """Wait for the next signal named ``signal_name`` (``ctx.wait_for_signal``)."""

    signal_name: str
    select: tuple[str, ...] | None = None
    """Opened by ``ctx.first``: the members (``"kind:id"``) of its select; once one of them
    settles, this wait is closed and takes no signal."""


@dataclass(frozen=True, slots=True, kw_only=True)
class CreateHook:
    """Open a hook that ``flow hook resolve TOKEN`` completes (``ctx.create_hook``)."""

    hook_id: str
    token: str
    metadata: JsonValue


@dataclass(frozen=True, slots=True, kw_only=True)
class StartChild:
    """Start child run ``{run_id}/{child_id}`` (``ctx.start_child``)."""

    child_id: str
    workflow: str
    input: JsonValue
    cancellation: CancellationPolicy


@dataclass(frozen=True, slots=True, kw_only=True)
class StartChildren:
    """One atomic batch of children, validated whole before any is appended."""

    children: tuple[StartChild, ...]
    batch_id: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Complete:
    """End the run with ``result``."""

    result: JsonValue


@dataclass(frozen=True, slots=True, kw_only=True)
class Fail:
    """End the run as failed with ``error``."""

    error: JsonValue


@dataclass(frozen=True, slots=True, kw_only=True)
class ContinueAsNew:
    """End the run and start its successor with ``input``."""

    input: JsonValue
    runtime_build_id: str | None = None
    """Only to assert the inherited value: a different one is a non-determinism error."""
    patches: tuple[str, ...] | None = None
    """Likewise: a continuation cannot switch patch markers."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Cancelled:
    """End a run whose cancellation was requested."""

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

COMMAND_TYPES: tuple[type[RuntimeCommand], ...] = get_args(RuntimeCommand)
"""The members of ``RuntimeCommand``, for ``isinstance``."""
TerminalCommand: TypeAlias = Complete | Fail | ContinueAsNew | Cancelled
