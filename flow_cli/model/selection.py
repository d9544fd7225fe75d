"""How the snapshot projects ``ctx.first``: when a select's member settles, its signal waits
that are still open are closed (they take no signal), and which member settled first.

A mixin of ``WorkflowRunSnapshot``, kept apart so the projection of selects reads as one piece.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from flow_cli.model.states import (
        ChildState,
        HookState,
        Settling,
        SignalWaitState,
        StepState,
        WaitState,
    )


class SelectProjection:
    """The select part of ``WorkflowRunSnapshot`` (whose fields it reads and updates)."""

    __slots__ = ()

    if TYPE_CHECKING:
        signal_waits: dict[str, SignalWaitState]
        waits: dict[str, WaitState]
        hooks: dict[str, HookState]
        steps: dict[str, StepState]
        children: dict[str, ChildState]
        selected_waits: dict[str, list[str]]
        waiting_signals: dict[str, list[str]]
        signal_waits_open: int

    def settled_at(self, member: str) -> int | None:
        """The sequence at which ``ctx.first`` member ``"kind:id"`` settled, or None."""
        kind, _, ident = member.partition(":")
        if kind == "signal":
            wait = self.signal_waits.get(ident)
            if wait is None or not wait.delivered or wait.signal_sequence is None:
                return None
            # A signal buffered before its wait opened is taken when the wait opens.
            return max(wait.sequence, wait.signal_sequence)
        kinds: dict[str, Mapping[str, Settling]] = {
            "timer": self.waits,
            "hook": self.hooks,
            "step": self.steps,
            "child": self.children,
        }
        found = kinds.get(kind, {}).get(ident)
        return None if found is None else found.settled_sequence

    def _select_opened(self, wait_id: str, members: tuple[str, ...]) -> bool:
        """Register signal wait ``wait_id`` of a select; True (and the wait closed) when one of
        its other members has settled already."""
        own = f"signal:{wait_id}"
        for member in members:
            if member != own:
                self.selected_waits.setdefault(member, []).append(wait_id)
        if any(self.settled_at(m) is not None for m in members if m != own):
            self._close(wait_id)
            return True
        return False

    def _settled(self, kind: str, ident: str) -> None:
        """Member ``kind:ident`` settled: the signal waits of its selects take no signal now."""
        if not self.selected_waits:
            return
        for wait_id in self.selected_waits.pop(f"{kind}:{ident}", ()):
            self._close(wait_id)

    def _close(self, wait_id: str, *, timed_out: bool = False) -> None:
        """Signal wait ``wait_id``, if still open, takes no signal now: another member of its
        select settled first, or (``timed_out``) its deadline timer fired."""
        wait = self.signal_waits.get(wait_id)
        if wait is None or wait.delivered or wait.timed_out or wait.closed:
            return
        self.signal_waits[wait_id] = replace(wait, closed=not timed_out, timed_out=timed_out)
        # The slot is the snapshot's (a dataclass field); mypy sees only this mixin's empty slots.
        self.signal_waits_open -= 1  # type: ignore[misc]
        waiting = self.waiting_signals.get(wait.signal_name)
        if waiting is not None and wait_id in waiting:
            waiting.remove(wait_id)
            if not waiting:
                del self.waiting_signals[wait.signal_name]
