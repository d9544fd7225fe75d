"""The runs index's error: why a run failed, or why its decisions fail, in one line.

One rule for the three stores (they write what ``store.index.index_for`` hands them, and
their migrations fill it for runs recorded before): a ``run_failed`` sets it from the run's
error, a decision that fails sets it from its ``decision_failed``, a clean decision or another
end clears it; anything else keeps it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from flow_cli.model.snapshot import WorkflowRunSnapshot
from flow_cli.model.status import RunStatus
from flow_cli.store.protocol import RunError


def error_of(value: Any) -> RunError:
    """The ``RunError`` of a run's error (``ctx.fail(error)``) or of a ``decision_failed``.

    A run that failed because a step exhausted its retries (``StepExhausted``) is given its
    step's error type: the cause an operator groups failures by.
    """
    if isinstance(value, Mapping) and isinstance(value.get("step_error"), Mapping):
        cause = error_of(value["step_error"])
        outer = value.get("message")
        if cause.error_type is not None:
            text = f"{cause.text} ({outer})" if isinstance(outer, str) and outer else cause.text
            return RunError(error_type=cause.error_type, text=text)
    if isinstance(value, Mapping):
        kind = value.get("type") or value.get("error_type")
        message = value.get("message")
        error_type = kind if isinstance(kind, str) and kind else None
        if not isinstance(message, str) or not message:
            rest = {k: v for k, v in value.items() if k not in ("type", "error_type", "message")}
            message = json.dumps(rest, separators=(",", ":"), default=str) if rest else ""
    else:
        error_type = None
        message = value if isinstance(value, str) else json.dumps(value, default=str)
    text = ": ".join(part for part in (error_type, " ".join(message.split())) if part)
    return RunError(error_type=error_type, text=text or "(no message)")


def failed_error(snapshot: WorkflowRunSnapshot) -> RunError | None:
    """The error of a run that ended Failed, else ``None``."""
    outcome = snapshot.outcome
    if outcome is None or outcome.kind is not RunStatus.FAILED:
        return None
    return error_of(outcome.error)


def decision_error(snapshot: WorkflowRunSnapshot) -> RunError | None:
    """The error of the run's failing decision while it stands, else ``None``."""
    error = snapshot.decision_error
    return None if error is None else error_of(error.to_data())


def failing_error(failing: str) -> RunError:
    """The ``RunError`` of the runs index's ``failing`` text (``ErrorType: message``): what a
    migration fills in for runs failing before the index had the error."""
    error_type, sep, message = failing.partition(": ")
    if not sep:
        return RunError(error_type=None, text=failing)
    return error_of({"error_type": error_type, "message": message})
