"""Run statuses and terminal outcomes."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from flow_cli.model.jsonval import JsonValue


class RunStatus(StrEnum):
    """Where a run stands; the values are the strings stored and printed."""

    PENDING = "Pending"
    """Created; no decision recorded yet."""
    RUNNING = "Running"
    """A decision is due or a step attempt is ready or executing."""
    SUSPENDED = "Suspended"
    """Waiting on a timer, retry backoff, signal, hook or child; holds no process."""
    CANCELLING = "Cancelling"
    """Cancellation was requested; the workflow may still run cleanup."""
    COMPLETED = "Completed"
    FAILED = "Failed"
    CANCELLED = "Cancelled"
    CONTINUED_AS_NEW = "ContinuedAsNew"

    @property
    def terminal(self) -> bool:
        return self in _TERMINAL


_TERMINAL = frozenset(
    {RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELLED, RunStatus.CONTINUED_AS_NEW}
)
TERMINAL_STATUSES = _TERMINAL


class ChildStatus(StrEnum):
    """A child run as its parent's history has it (``flow show``'s children); the values are the
    strings ``flow show --json`` prints."""

    RUNNING = "Running"
    """Started; its end is not recorded in the parent (it may be waiting, or done by now)."""
    CANCEL_REQUESTED = "CancelRequested"
    """The parent asked it to cancel (``cancellation="cancel"``) as the parent ended."""
    ABANDONED = "Abandoned"
    """The parent ended and left it running (``cancellation="abandon"``)."""
    COMPLETED = "Completed"
    FAILED = "Failed"
    CANCELLED = "Cancelled"
    CONTINUED_AS_NEW = "ContinuedAsNew"

    @classmethod
    def of_outcome(cls, kind: object) -> ChildStatus:
        """The status of a child whose ``child_completed`` carries an outcome of ``kind``."""
        try:
            return cls(str(kind))
        except ValueError:
            return cls.FAILED  # an outcome this Flow cannot read: it did not complete


class StepStatus(StrEnum):
    """Where a step stands (``ctx.step_state(id)``, ``flow show``'s step state).

    Its values are lower case, unlike ``RunStatus``'s: they are the ``"state"`` of each step in
    ``flow show --json``, a public contract, so they stay as they are. Compare with the members
    (``ctx.step_state("charge") is StepStatus.COMPLETED``), not with strings.
    """

    SCHEDULED = "scheduled"
    """Ready for its first attempt."""
    RUNNING = "running"
    """An attempt has started and has not settled."""
    BACKOFF = "backoff"
    """An attempt failed; the next one is due at ``next_attempt_at``."""
    COMPLETED = "completed"
    FAILED = "failed"
    """Retries exhausted."""
    CANCELLED = "cancelled"
    UNKNOWN = "unknown"
    """An ``on_lost="unknown"`` attempt vanished or timed out: an operator resolves it."""

    @property
    def settled(self) -> bool:
        return self in (StepStatus.COMPLETED, StepStatus.FAILED, StepStatus.CANCELLED)


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkflowTerminalOutcome:
    """How a run ended: ``kind`` is one of the four terminal statuses."""

    kind: RunStatus
    result: JsonValue = None
    """For ``Completed``."""
    error: JsonValue = None
    """For ``Failed``: ``{"type", "message", ...}``."""
    reason: str | None = None
    """For ``Cancelled``."""
    forced: bool = False
    """For ``Cancelled`` by ``flow terminate``."""
    successor_run_id: str | None = None
    """For ``ContinuedAsNew``."""

    def to_json(self) -> dict[str, Any]:
        """The ``outcome`` shape of ``flow show --json``."""
        if self.kind is RunStatus.COMPLETED:
            return {"kind": "Completed", "result": self.result}
        if self.kind is RunStatus.FAILED:
            return {"kind": "Failed", "error": self.error}
        if self.kind is RunStatus.CANCELLED:
            if self.forced:
                return {"kind": "Cancelled", "reason": self.reason, "forced": True}
            return {"kind": "Cancelled", "reason": self.reason}
        return {"kind": "ContinuedAsNew", "successor_run_id": self.successor_run_id}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> WorkflowTerminalOutcome:
        kind = RunStatus(data["kind"])
        return cls(
            kind=kind,
            result=data.get("result"),
            error=data.get("error"),
            reason=data.get("reason"),
            forced=bool(data.get("forced", False)),
            successor_run_id=data.get("successor_run_id"),
        )
