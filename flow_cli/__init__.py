"""Flow: durable workflows for Python, on one SQLite file or PostgreSQL.

The public API: ``Runtime`` and ``RetryPolicy`` to write workflows, ``Engine`` to run them.
``Engine`` is imported lazily so that ``flow --help`` does not pay for the storage layer.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from flow_cli.errors import (
    EventConflict,
    FlowError,
    NonDeterminismError,
    RunNotFound,
    WorkflowNotFound,
)
from flow_cli.model.context import StepFailedError, WorkflowContext
from flow_cli.model.retry import RetryPolicy
from flow_cli.model.status import RunStatus, WorkflowTerminalOutcome
from flow_cli.runtime import Runtime, StepInfo

if TYPE_CHECKING:
    from flow_cli.engine.engine import Engine

__all__ = [
    "Engine",
    "EventConflict",
    "FlowError",
    "NonDeterminismError",
    "RetryPolicy",
    "RunNotFound",
    "RunStatus",
    "Runtime",
    "StepFailedError",
    "StepInfo",
    "WorkflowContext",
    "WorkflowNotFound",
    "WorkflowTerminalOutcome",
]
__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    if name == "Engine":
        from flow_cli.engine.engine import Engine

        return Engine
    raise AttributeError(f"module 'flow_cli' has no attribute {name!r}")
