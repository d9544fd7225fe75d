"""Time is passed in: only ``SystemClock`` reads the wall clock."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from typing import Protocol, TypeAlias

Seconds: TypeAlias = timedelta | float | int
"""A duration given as a ``timedelta`` or seconds."""


def as_timedelta(duration: Seconds) -> timedelta:
    """``duration`` as a ``timedelta`` (a number counts seconds)."""
    return duration if isinstance(duration, timedelta) else timedelta(seconds=duration)


def parse_utc(text: str) -> datetime:
    """Parse an ISO-8601 time; a time without zone is taken as UTC."""
    value = datetime.fromisoformat(text)
    if value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    return value.astimezone(UTC)


class Clock(Protocol):
    def now(self) -> datetime:
        """The current UTC time, timezone-aware."""
        ...


_wall_now = datetime.now
"""Bound when Flow is imported, before ``flow_cli.model.deciding`` wraps ``datetime.now``: the
engine's own clock reads go straight to it (they are many, and never workflow code)."""


class SystemClock:
    """The wall clock."""

    def now(self) -> datetime:
        return _wall_now(UTC)


class ManualClock:
    """A clock tests move by hand instead of sleeping."""

    def __init__(self, start: datetime | None = None) -> None:
        self._now = start or datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
        self._lock = threading.Lock()

    def now(self) -> datetime:
        with self._lock:
            return self._now

    def advance(self, seconds: Seconds) -> datetime:
        delta = as_timedelta(seconds)
        with self._lock:
            self._now += delta
            return self._now

    def set(self, when: datetime) -> None:
        with self._lock:
            self._now = when
