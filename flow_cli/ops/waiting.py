"""Waiting for a run's outcome (``flow result --wait``, ``flow execute``).

The wait holds nothing in the database: it reads the run's snapshot whenever the store says
something committed or the run ended (``wait_for_change``), following a ``continue_as_new``
chain to its live run.
``drive=True`` also decides the run and executes its steps in this process (``engine.tick``)
whenever something is due, so ``flow execute`` finishes a run with no worker running; ticking
alongside live workers is safe (leases and ``append_if_sequence`` keep them apart).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from flow_cli.ops.chain import chain_from

if TYPE_CHECKING:
    from collections.abc import Callable

    from flow_cli.engine.engine import Engine
    from flow_cli.model.jsonval import JsonValue
    from flow_cli.model.status import WorkflowTerminalOutcome

POLL_SECONDS = 1.0
"""Longest single wait; the store returns sooner when something commits."""


@dataclass(frozen=True, slots=True)
class Waited:
    run_id: str
    """The run whose outcome this is: the last of the chain."""
    outcome: WorkflowTerminalOutcome | None
    """``None`` when the time ran out first."""
    status: str
    decision_error: JsonValue = None
    """The last ``decision_failed`` data while the run's decisions fail (``None`` otherwise):
    a run that is failing, not merely slow."""


def outcome_of(engine: Engine, run_id: str) -> Waited:
    """The outcome now (``None`` while open), following a continue-as-new chain."""
    live = chain_from(engine, run_id)[-1]
    snap = engine.snapshot(live)
    error = snap.decision_error
    data = None if error is None else error.to_data()
    return Waited(live, snap.outcome, snap.status.value, data)


def wait_for_outcome(
    engine: Engine,
    run_id: str,
    timeout: float | None,
    *,
    drive: bool = False,
    on_failing: Callable[[Waited], None] | None = None,
) -> Waited:
    """Block until the run (or its live successor) ends, or ``timeout`` seconds pass.

    ``on_failing`` is called each time the run's decision starts failing with a new error, so a
    caller can say at once that the run is failing rather than let the wait look like slowness.
    """
    deadline = None if timeout is None else time.monotonic() + timeout
    reported: JsonValue = None
    while True:
        if drive:
            engine.tick(until_idle=True)
        waited = outcome_of(engine, run_id)
        if waited.outcome is not None:
            return waited
        if on_failing is not None and waited.decision_error not in (None, reported):
            reported = waited.decision_error
            on_failing(waited)
        remaining = None if deadline is None else deadline - time.monotonic()
        if remaining is not None and remaining <= 0:
            return waited
        pause = POLL_SECONDS if remaining is None else min(POLL_SECONDS, remaining)
        if drive:
            due = engine.next_due()
            if due is not None:
                pause = min(pause, max((due - engine.clock.now()).total_seconds(), 0.0))
            # Work to drive wakes it; the run mostly ends in this process's own tick.
            engine.wait_for_change(pause)
        else:
            engine.wait_for_change(pause, ending=waited.run_id)
