"""The run's identity: what runs, with what input, under which code."""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from flow_cli.model.jsonval import JsonValue
from flow_cli.model.schedule_ref import ScheduleRef

DEFAULT_PRIORITY = 5
"""A run's priority when none is given (``flow start --priority``): 1 is taken first, 9 last."""

PRIORITIES = range(1, 10)
"""The priorities a run may have: 1 (first) to 9 (last)."""


def check_priority(priority: int | None, what: str = "priority") -> int:
    """``priority``, or the default for ``None``; raises ``InputError`` outside 1..9 (``what``
    names it in the message: ``--priority`` on the command line)."""
    if priority is None:
        return DEFAULT_PRIORITY
    if isinstance(priority, bool) or not isinstance(priority, int) or priority not in PRIORITIES:
        from flow_cli.errors import InputError

        raise InputError(
            f"{what} must be a whole number from 1 (taken first) to 9 (last), default "
            f"{DEFAULT_PRIORITY}; got {priority!r}."
        )
    return priority


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkflowSpec:
    """Everything fixed when a run starts, recorded in ``run_started``.

    The build id and patch markers are fixed here, before the first decision, so old and new
    workers never read the same history differently. Continuations inherit the whole spec.
    """

    workflow: str
    """The workflow name registered with ``@runtime.workflow``."""
    input: JsonValue
    """The run's input, a JSON value."""
    runtime_build_id: str
    """The build whose code decides this run."""
    patches: tuple[str, ...] = ()
    """Patch markers active for this run (``ctx.patched(name)``)."""
    parent_run_id: str | None = None
    """For a child run: the parent's run id."""
    parent_child_id: str | None = None
    """For a child run: its child id in the parent."""
    predecessor_run_id: str | None = None
    """For a continuation: the run that continued as new into this one."""
    first_run_id: str | None = None
    """For a continuation: the first run of the chain (``ctx.first_run_id``)."""
    chain_started_at: datetime | None = None
    """For a continuation: when the first run of the chain started (``ctx.chain_started_at``)."""
    forked_from: tuple[str, int] | None = None
    """For a run made by ``flow fork``: the original run and the last sequence taken from it."""
    signals: tuple[str, ...] | None = None
    """The signal names the workflow declares (``@runtime.workflow(..., signals=[...])``):
    a signal with another name is refused at the door. ``None``: any name is accepted."""
    schedule: ScheduleRef | None = None
    """For a run a schedule started: the schedule and the fire time (``ctx.scheduled_at``)."""
    traceparent: str | None = None
    """The W3C trace context the run's spans belong to (``flow start --traceparent``, or the
    parent run's); continuations keep it (``flow_cli.model.trace``)."""
    attributes: JsonValue = None
    """Search attributes set at start (``@runtime.workflow(..., attributes=)``, ``flow start
    --attr``): ``{key: value}``, or ``None`` when there are none. Continuations keep them."""
    priority: int = DEFAULT_PRIORITY
    """1 (taken first) to 9 (last): workers take due runs and ready steps by priority, then by
    age. Children inherit their parent's unless given one; continuations keep it."""

    def successor(
        self, input: JsonValue, predecessor_run_id: str, predecessor_started_at: datetime
    ) -> WorkflowSpec:
        """The spec of the run that ``continue_as_new(input)`` starts: the same code, the
        chain's first run and start carried over."""
        return replace(
            self,
            input=input,
            forked_from=None,
            predecessor_run_id=predecessor_run_id,
            first_run_id=self.first_run_id or predecessor_run_id,
            chain_started_at=self.chain_started_at or predecessor_started_at,
        )

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "workflow": self.workflow,
            "input": self.input,
            "runtime_build_id": self.runtime_build_id,
            "patches": list(self.patches),
            "parent_run_id": self.parent_run_id,
            "parent_child_id": self.parent_child_id,
            "predecessor_run_id": self.predecessor_run_id,
        }
        # Written only when set, so the histories of runs that are not continuations (and of
        # continuations recorded before these fields existed) stay byte-identical.
        if self.first_run_id is not None:
            data["first_run_id"] = self.first_run_id
        if self.chain_started_at is not None:
            data["chain_started_at"] = self.chain_started_at.isoformat()
        if self.signals is not None:
            data["signals"] = list(self.signals)
        if self.forked_from is not None:
            data["forked_from"] = {"run_id": self.forked_from[0], "sequence": self.forked_from[1]}
        if self.schedule is not None:
            data["schedule"] = self.schedule.to_json()
        if self.traceparent is not None:
            data["traceparent"] = self.traceparent
        if self.attributes:
            data["attributes"] = dict(self.attributes)
        if self.priority != DEFAULT_PRIORITY:
            data["priority"] = self.priority
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> WorkflowSpec:
        return cls(
            workflow=data["workflow"],
            input=data.get("input"),
            runtime_build_id=data["runtime_build_id"],
            patches=tuple(data.get("patches", ())),
            parent_run_id=data.get("parent_run_id"),
            parent_child_id=data.get("parent_child_id"),
            predecessor_run_id=data.get("predecessor_run_id"),
            first_run_id=data.get("first_run_id"),
            chain_started_at=_utc(data.get("chain_started_at")),
            forked_from=_fork(data.get("forked_from")),
            signals=_names(data.get("signals")),
            schedule=ScheduleRef.from_json(data.get("schedule")),
            traceparent=data.get("traceparent"),
            attributes=data.get("attributes") or None,
            priority=int(data.get("priority", DEFAULT_PRIORITY)),
        )


def _names(data: Any) -> tuple[str, ...] | None:
    return None if data is None else tuple(str(name) for name in data)


def _fork(data: Any) -> tuple[str, int] | None:
    if not isinstance(data, dict):
        return None
    return (str(data["run_id"]), int(data["sequence"]))


def _utc(text: str | None) -> datetime | None:
    if text is None:
        return None
    from flow_cli.model.clock import parse_utc

    return parse_utc(text)
