"""Retry policies for steps: how many attempts, how long to back off, when to give up."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Literal

from flow_cli.errors import InputError
from flow_cli.model.jsonval import json_fields

OnExhausted = Literal["terminate", "surface"]


def _seconds(value: float | timedelta) -> float:
    return value.total_seconds() if isinstance(value, timedelta) else float(value)


@dataclass(frozen=True, slots=True, kw_only=True, init=False)
class RetryPolicy:
    """How a step's failed attempts are retried. Part of the determinism comparison."""

    max_attempts: int
    """Attempts in all, the first included; 1 means no retry."""
    initial_interval: float
    """Seconds before the second attempt."""
    backoff_coefficient: float
    """Each further interval is the previous one times this."""
    max_interval: float
    """No interval is longer than this many seconds."""
    non_retryable: tuple[str, ...] = field(default=())
    """Exception class names that fail the step at once."""
    on_exhausted: OnExhausted = "terminate"
    """``terminate``: the run fails; ``surface``: the workflow sees ``ctx.step_error(id)``."""

    def __init__(
        self,
        max_attempts: int = 3,
        initial_interval: float | timedelta = 1.0,
        backoff_coefficient: float = 2.0,
        max_interval: float | timedelta = 60.0,
        non_retryable: Iterable[str | type[BaseException]] = (),
        on_exhausted: OnExhausted = "terminate",
    ) -> None:
        if max_attempts < 1:
            raise InputError("RetryPolicy.max_attempts must be at least 1")
        if on_exhausted not in ("terminate", "surface"):
            raise InputError("RetryPolicy.on_exhausted must be 'terminate' or 'surface'")
        names = tuple(n if isinstance(n, str) else n.__name__ for n in non_retryable)
        object.__setattr__(self, "max_attempts", int(max_attempts))
        object.__setattr__(self, "initial_interval", _seconds(initial_interval))
        object.__setattr__(self, "backoff_coefficient", float(backoff_coefficient))
        object.__setattr__(self, "max_interval", _seconds(max_interval))
        object.__setattr__(self, "non_retryable", names)
        object.__setattr__(self, "on_exhausted", on_exhausted)

    def delay_after(self, attempt: int) -> float:
        """Seconds to wait after failed attempt number ``attempt`` (1-based)."""
        delay = self.initial_interval * self.backoff_coefficient ** (attempt - 1)
        return min(delay, self.max_interval)

    def to_json(self) -> dict[str, Any]:
        return {
            **json_fields(
                self, "max_attempts", "initial_interval", "backoff_coefficient", "max_interval"
            ),
            "non_retryable": list(self.non_retryable),
            "on_exhausted": self.on_exhausted,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RetryPolicy:
        """The policy; equal policies read back as one shared instance, so that comparing a
        recorded policy with the code's (``ctx.step`` does it on every call) is usually ``is``."""
        non_retryable = data.get("non_retryable", ())
        key = (
            data["max_attempts"],
            data["initial_interval"],
            data["backoff_coefficient"],
            data["max_interval"],
            tuple(non_retryable) if isinstance(non_retryable, list | tuple) else non_retryable,
            data.get("on_exhausted", "terminate"),
        )
        try:
            known = _READ.get(key)
        except TypeError:  # an unhashable value: let the constructor say what is wrong
            known = None
        if known is not None:
            return known
        policy = intern(
            cls(
                max_attempts=data["max_attempts"],
                initial_interval=data["initial_interval"],
                backoff_coefficient=data["backoff_coefficient"],
                max_interval=data["max_interval"],
                non_retryable=tuple(non_retryable),
                on_exhausted=data.get("on_exhausted", "terminate"),
            )
        )
        if len(_READ) < _INTERN_LIMIT:
            _READ[key] = policy
        return policy


_INTERNED: dict[RetryPolicy, RetryPolicy] = {}
_READ: dict[tuple[Any, ...], RetryPolicy] = {}
"""Stored policies already read, by their JSON values: a long history repeats a few policies."""
_INTERN_LIMIT = 1024


def intern(policy: RetryPolicy) -> RetryPolicy:
    """The shared instance equal to ``policy`` (programs use a handful of policies)."""
    shared = _INTERNED.get(policy)
    if shared is not None:
        return shared
    if len(_INTERNED) < _INTERN_LIMIT:
        _INTERNED[policy] = policy
    return policy
