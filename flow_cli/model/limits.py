"""Flow-control limits (``DESIGN.md`` §6.4): how many attempts of a step may be in flight at
once, how many may start per period, and how a limit is named (``step:NAME``,
``workflow:NAME``). Pure values and parsing; the stores enforce them, the engine declares them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from flow_cli.errors import LimitInvalid
from flow_cli.model.jsonval import json_fields

RATE_EXAMPLE = "--rate 100/1m (forms: 20/1s, 100/1m, 1000/1h)"
TARGET_EXAMPLE = "step:chargeCard or workflow:sync"
CONCURRENCY_EXAMPLE = "--concurrency 2 (at least 1)"
KINDS = ("step", "workflow")

_UNITS = {"s": 1, "m": 60, "h": 3600}
_RATE = re.compile(r"^\s*(\d+)\s*/\s*(\d*)\s*([smh])\s*$")


@dataclass(frozen=True, slots=True)
class Rate:
    """At most ``count`` attempts started in any ``seconds``-long window."""

    count: int
    seconds: int

    def __str__(self) -> str:
        for unit, size in (("h", 3600), ("m", 60)):
            if self.seconds % size == 0:
                return f"{self.count}/{self.seconds // size}{unit}"
        return f"{self.count}/{self.seconds}s"


def parse_rate(text: str) -> Rate:
    """``"100/1m"`` → ``Rate(100, 60)``. Raises ``LimitInvalid`` when it does not parse."""
    found = _RATE.match(text)
    if found is None:
        raise LimitInvalid(f"rate {text!r} does not parse", RATE_EXAMPLE)
    count, every, unit = int(found[1]), int(found[2] or 1), found[3]
    if count < 1 or every < 1:
        raise LimitInvalid(
            f"rate {text!r} must allow at least 1 per period of 1 or more", RATE_EXAMPLE
        )
    return Rate(count, every * _UNITS[unit])


MAX_CONCURRENCY = 1_000_000
"""The largest concurrency a limit takes (more is no limit: leave it out)."""


def check_concurrency(value: int | None, name: str = "concurrency") -> int | None:
    """``value`` when it is ``None`` or from 1 to ``MAX_CONCURRENCY``; raises ``LimitInvalid``
    otherwise, naming the value as ``name`` (the option that gave it)."""
    if value is not None and (
        isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_CONCURRENCY
    ):
        raise LimitInvalid(
            f"{name} {value!r} must be a whole number from 1 to {MAX_CONCURRENCY:,}",
            CONCURRENCY_EXAMPLE,
        )
    return value


def parse_target(text: str) -> tuple[str, str]:
    """``"step:chargeCard"`` → ``("step", "chargeCard")``; raises ``LimitInvalid``."""
    kind, sep, name = text.partition(":")
    if not sep or kind not in KINDS or not name.strip():
        raise LimitInvalid(
            f"limit target {text!r} is not step:NAME or workflow:NAME", TARGET_EXAMPLE
        )
    return kind, name


@dataclass(frozen=True, slots=True, kw_only=True)
class DeclaredLimit:
    """What code declares for one target (``@runtime.step(concurrency=, rate=)``,
    ``@runtime.workflow(concurrency=, concurrency_key=)``); all ``None``: no limit, but the
    target is known (an override may give it one)."""

    target: str
    concurrency: int | None = None
    rate: Rate | None = None
    key: str | None = None
    """A workflow limit's input field: the limit holds per distinct value of it."""

    @property
    def limited(self) -> bool:
        return self.concurrency is not None or self.rate is not None


@dataclass(frozen=True, slots=True, kw_only=True)
class LimitState:
    """One row of ``flow limits``: the limit in effect, where it comes from, and its use now."""

    target: str
    concurrency: int | None
    rate: Rate | None
    in_use: int
    """Attempts in flight (their lease not lapsed), or runs in progress."""
    waiting: int
    """Attempts ready now that the limit holds back, or runs not yet admitted."""
    source: str
    """``code`` (declared by a worker's code) or ``override`` (``flow limits set``)."""

    def to_json(self) -> dict[str, object]:
        rate = None if self.rate is None else str(self.rate)
        return {
            **json_fields(self, "target", "concurrency"),
            "rate": rate,
            **json_fields(self, "in_use", "waiting", "source"),
        }


def free_slots(
    concurrency: int | None, rate: Rate | None, in_flight: int, started_in_window: int
) -> int | None:
    """How many more attempts may start now under these limits (``None``: no bound)."""
    room: int | None = None
    if concurrency is not None:
        room = max(concurrency - in_flight, 0)
    if rate is not None:
        left = max(rate.count - started_in_window, 0)
        room = left if room is None else min(room, left)
    return room
