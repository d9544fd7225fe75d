"""Queries and updates: workflow-owned code run on a run's history from outside.

A query handler reads the run's state and answers; an update handler validates a request,
answers, and its answer is recorded (``update_applied``) for the workflow to read with
``ctx.updates(name)``. Both get a ``ReadOnlyContext``: every reader of ``ctx`` works, every
command method raises ``CommandInHandler``, so a handler can never decide for the run.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NoReturn

from flow_cli.errors import CommandInHandler
from flow_cli.model.context import WorkflowContext
from flow_cli.model.snapshot import AppliedUpdate, WorkflowRunSnapshot

_COMMANDS = (
    "schedule_step",
    "schedule_steps",
    "wait_until",
    "wait_for_signal",
    "create_hook",
    "start_child",
    "start_children",
    "complete",
    "fail",
    "continue_as_new",
    "cancelled",
    "suspend",
    "set_attributes",
)
"""The methods that build commands. Sequential helpers (``ctx.step``, ``ctx.receive``...) end
in ``suspend`` when their thing is not settled, so they return settled values and raise
otherwise."""


class ReadOnlyContext(WorkflowContext):
    """The ``ctx`` of a query or update handler: readers only."""

    def __init__(self, snapshot: WorkflowRunSnapshot, kind: str, name: str, handler: str) -> None:
        super().__init__(snapshot, None)
        self._kind = kind
        self._name = name
        self._handler = handler

    def _refuse(self, method: str) -> NoReturn:
        raise CommandInHandler(
            self._snap.run_id,
            self._kind,
            self._name,
            self._handler,
            f"by calling ctx.{method}(...): handlers only read the run; commands belong to "
            "the workflow function",
        )


def _refusing(method: str) -> Callable[..., NoReturn]:
    def refuse(self: ReadOnlyContext, *args: object, **kwargs: object) -> NoReturn:
        self._refuse(method)

    refuse.__name__ = method
    refuse.__doc__ = f"Refused: ``ctx.{method}`` is a command; handlers only read."
    return refuse


for _method in _COMMANDS:
    setattr(ReadOnlyContext, _method, _refusing(_method))


def handler_name(fn: Callable[..., Any]) -> str:
    """How an error names a handler: ``module.function``."""
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', repr(fn))}"


__all__ = ["AppliedUpdate", "ReadOnlyContext", "handler_name"]
