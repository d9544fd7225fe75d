"""How the sequential helpers (``ctx.step``, ``ctx.receive`` ...) end a decision and report
what they found: ``Suspend``, ``TIMED_OUT`` and ``StepFailedError``."""

from __future__ import annotations

from typing import Final

from flow_cli.model.commands import RuntimeCommand
from flow_cli.model.jsonval import JsonValue


class _TimedOut:
    """The type of ``TIMED_OUT``: one instance, compared with ``is``."""

    _instance: _TimedOut | None = None

    def __new__(cls) -> _TimedOut:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "TIMED_OUT"

    def __bool__(self) -> bool:
        return False


TIMED_OUT: Final = _TimedOut()
"""What ``ctx.receive(..., deadline=)`` and ``ctx.hook(..., deadline=)`` return when the
deadline passed before the signal or the callback arrived."""


class Suspend(BaseException):
    """Raised by the sequential helpers (``ctx.step`` ...) to end this decision with a command.

    A BaseException so that a workflow's ``except Exception`` cannot swallow it.
    """

    def __init__(self, command: RuntimeCommand, *, blocking: bool = False) -> None:
        super().__init__(command)
        self.command = command
        self.blocking = blocking
        """The code cannot go on until this command's identity settles (``ctx.step``)."""


class StepFailedError(Exception):
    """Raised by ``ctx.step`` when the step failed for good under ``on_exhausted="surface"``."""

    def __init__(self, step_id: str, error: JsonValue) -> None:
        message = error.get("message") if isinstance(error, dict) else error
        super().__init__(f"step {step_id!r} failed: {message}")
        self.step_id = step_id
        self.error = error
