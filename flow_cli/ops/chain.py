"""Following a ``continue_as_new`` chain to its live run.

A run that continued as new has ended; its work goes on in its successor (recorded in its
``run_continued_as_new`` event), which may itself have continued. Operators and tests name the
run they know — usually the first — and mean the live one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from flow_cli.engine.engine import Engine

MAX_CHAIN = 100_000
"""A guard against a corrupt chain that loops."""


def chain_from(engine: Engine, run_id: str) -> list[str]:
    """``run_id`` and the successors after it, in order; the last is the live (or final) run.

    Raises ``RunNotFound`` for an unknown ``run_id``.
    """
    from flow_cli.model.status import RunStatus

    chain = [run_id]
    # The runs index says whether a run continued as new; only then is its history read (for
    # its successor's id), so following a run that did not costs one indexed read.
    while engine.get_run(chain[-1]).status is RunStatus.CONTINUED_AS_NEW:
        outcome = engine.snapshot(chain[-1]).outcome
        successor = outcome.successor_run_id if outcome is not None else None
        if successor is None or successor in chain or len(chain) >= MAX_CHAIN:
            break
        chain.append(successor)
    return chain


def live_run(engine: Engine, run_id: str) -> str:
    """The run that carries on ``run_id``'s work: itself unless it continued as new."""
    return chain_from(engine, run_id)[-1]


def follow(engine: Engine, run_id: str) -> tuple[str, str | None]:
    """The live run for ``run_id`` and the note to show when it is another run."""
    chain = chain_from(engine, run_id)
    return chain[-1], followed_note(chain)


def followed_note(chain: list[str]) -> str | None:
    """What to tell an operator when a chain was followed (``None`` when it was not)."""
    if len(chain) < 2:
        return None
    hops = "continued as new" if len(chain) == 2 else f"continued as new {len(chain) - 1} times"
    return f"note: run {chain[0]!r} {hops}; acting on its live successor {chain[-1]!r}"


def follow_each(engine: Engine, run_ids: list[str]) -> list[tuple[str, str | None]]:
    """Each named run's live run and the note to show when it is another run.

    An unknown id is kept as named, so that the verb reports it for that run alone (a bulk
    verb goes on with the others).
    """
    from flow_cli.errors import RunNotFound

    followed: list[tuple[str, str | None]] = []
    for run_id in run_ids:
        try:
            followed.append(follow(engine, run_id))
        except RunNotFound:
            followed.append((run_id, None))
    return followed
