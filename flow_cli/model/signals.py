"""The rules a signal meets at the door, before anything is written.

A workflow that declares its signals (``@runtime.workflow(..., signals=[...])``, recorded in
the run's spec) refuses any other name; a signal sent again with the same idempotency key is a
duplicate (nothing written), and the same key with another payload is refused: a key names one
message, and silently dropping a different one would lose it.
"""

from __future__ import annotations

from flow_cli.errors import SignalKeyReused, UndeclaredName
from flow_cli.model.events import SignalReceived
from flow_cli.model.jsonval import JsonValue, canonical
from flow_cli.model.snapshot import ReceivedSignal, WorkflowRunSnapshot


def check_declared(snap: WorkflowRunSnapshot, name: str) -> None:
    """Raise ``UndeclaredName`` when the run's workflow declares signals and not ``name``."""
    declared = snap.spec.signals
    if declared is not None and name not in declared:
        raise UndeclaredName(snap.run_id, "signal", name, declared)


def earlier_delivery(
    snap: WorkflowRunSnapshot, name: str, payload: JsonValue, key: str | None
) -> ReceivedSignal | None:
    """The signal already received with ``key`` (a duplicate), or None. Raises
    ``SignalKeyReused`` when that signal's payload differs from ``payload``."""
    if key is None:
        return None
    sent = snap.signal_with_key(name, key)
    if sent is not None and canonical(sent.payload) != canonical(payload):
        raise SignalKeyReused(snap.run_id, name, key, sent.sequence)
    return sent


def carried_signals(snap: WorkflowRunSnapshot) -> list[SignalReceived]:
    """The signals ``snap``'s run received and no wait took, oldest first, as its
    ``continue_as_new`` successor receives them: nothing sent to a chain is lost."""
    return [
        SignalReceived(
            signal_name=signal.signal_name,
            payload=signal.payload,
            key=signal.key,
            carried_from=snap.run_id,
        )
        for signal in snap.signals
        if signal.wait_id is None
    ]


__all__ = ["carried_signals", "check_declared", "earlier_delivery"]
