"""The run's identity: what runs, with what input, under which code."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from flow_cli.model.jsonval import JsonValue


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

    def to_json(self) -> dict[str, Any]:
        return {
            "workflow": self.workflow,
            "input": self.input,
            "runtime_build_id": self.runtime_build_id,
            "patches": list(self.patches),
            "parent_run_id": self.parent_run_id,
            "parent_child_id": self.parent_child_id,
            "predecessor_run_id": self.predecessor_run_id,
        }

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
        )
