"""Flow: durable workflows for Python, on one SQLite file or PostgreSQL.

The public API: ``Runtime`` and ``RetryPolicy`` to write workflows, ``Engine`` to run them,
and the errors a caller can act on. Names are imported on first use, so that ``flow --help``
and ``import flow_cli.errors`` do not pay for the model, the engine or the stores.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from flow_cli.engine.engine import Engine
    from flow_cli.errors import (
        EventConflict,
        FlowError,
        NonDeterminismError,
        RunNotFound,
        StepCancelled,
        UpdateRejected,
        WorkflowNotFound,
    )
    from flow_cli.model.clock import ManualClock
    from flow_cli.model.commands import RuntimeCommand
    from flow_cli.model.context import WorkflowContext
    from flow_cli.model.retry import RetryPolicy
    from flow_cli.model.status import RunStatus, StepStatus, WorkflowTerminalOutcome
    from flow_cli.model.suspension import TIMED_OUT, StepFailedError
    from flow_cli.runtime import Runtime, StepInfo

_EXPORTS = {
    "Engine": "flow_cli.engine.engine",
    "EventConflict": "flow_cli.errors",
    "FlowError": "flow_cli.errors",
    "NonDeterminismError": "flow_cli.errors",
    "RunNotFound": "flow_cli.errors",
    "StepCancelled": "flow_cli.errors",
    "UpdateRejected": "flow_cli.errors",
    "WorkflowNotFound": "flow_cli.errors",
    "ManualClock": "flow_cli.model.clock",
    "RuntimeCommand": "flow_cli.model.commands",
    "StepFailedError": "flow_cli.model.suspension",
    "TIMED_OUT": "flow_cli.model.suspension",
    "WorkflowContext": "flow_cli.model.context",
    "RetryPolicy": "flow_cli.model.retry",
    "RunStatus": "flow_cli.model.status",
    "StepStatus": "flow_cli.model.status",
    "WorkflowTerminalOutcome": "flow_cli.model.status",
    "Runtime": "flow_cli.runtime",
    "StepInfo": "flow_cli.runtime",
}
__all__ = [
    "TIMED_OUT",
    "Engine",
    "EventConflict",
    "FlowError",
    "ManualClock",
    "NonDeterminismError",
    "RetryPolicy",
    "RunNotFound",
    "RunStatus",
    "Runtime",
    "RuntimeCommand",
    "StepCancelled",
    "StepFailedError",
    "StepInfo",
    "StepStatus",
    "UpdateRejected",
    "WorkflowContext",
    "WorkflowNotFound",
    "WorkflowTerminalOutcome",
]
__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'flow_cli' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])
