"""What ``Engine.start`` and ``Engine.deliver_signal`` report back (re-exported by
``flow_cli.engine.engine``)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class SignalDelivery:
    run_id: str
    sequence: int
    """The ``signal_received`` event's sequence (the earlier one for a duplicate)."""
    duplicate: bool
    """A signal of this name with this key was already delivered; nothing was written."""


@dataclass(frozen=True, slots=True)
class StartResult:
    run_id: str
    created: bool
    """False when a run with the same id and spec already existed (idempotent start)."""
    signal: SignalDelivery | None = None
    """With signal-with-start: the signal's delivery (sequence, duplicate)."""
