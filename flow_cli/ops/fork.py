"""``flow fork``: a new run of a recorded run's spec, optionally keeping its first steps.

Without ``from_step`` the fork is a fresh run of the same spec (or of the changed input or
build). With ``from_step`` the new history copies the original's events from before that step
was first scheduled: completed steps keep their recorded outputs (their ``step_scheduled``,
``step_started``, ``step_failed`` and ``step_completed``) and are never invoked again, and the
facts the decisions depended on (timers, signals, resolved hooks) come along. Steps scheduled
before the cut that had not completed by then keep only their ``step_scheduled``: they run anew,
as do that step and everything after it. Copied events keep their recorded times (they are
committed in groups, each at its original time), and the fork keeps the original's seed, so
``ctx.started_at``, ``ctx.now``, ``ctx.random()`` and ``ctx.new_token()`` read as they did: the
copied decisions replay exactly, and deadlines derived from ``ctx.started_at`` keep the
original's meaning (one that has passed fires at once). The fork's row in the runs index is
created at the time of the fork, so listings (newest first, ``--since``) show it as new.

Before anything is written the new history is replayed against the fork's build
(``replay_history``); if the code would not make the copied decisions again, the fork is refused
with the divergences (``ForkDiverges``). The original run is never touched.

Not copied: ``decision_failed`` / ``decision_recovered`` (not decisions), ``cancel_requested``,
``build_upgraded`` (the fork starts on the build the original is pinned to now, or on
``build_id``).
Refused: a cut after a child run was started, or while a hook is open (its token belongs to the
original run).
"""

from __future__ import annotations

import itertools
import secrets
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime

from flow_cli.engine.engine import Engine
from flow_cli.engine.replay_check import replay_history
from flow_cli.engine.streams import simulate
from flow_cli.errors import ForkDiverges, ForkIdTaken, InputError
from flow_cli.model.events import (
    BuildUpgraded,
    CancelRequested,
    ChildScheduled,
    DecisionFailed,
    DecisionRecovered,
    Event,
    EventEnvelope,
    HookCreated,
    HookResolved,
    RunStarted,
    StepCompleted,
    StepScheduled,
)
from flow_cli.model.jsonval import JsonLimitError, JsonValue, normalise
from flow_cli.model.names import check_run_id
from flow_cli.model.snapshot import WorkflowRunSnapshot, project
from flow_cli.store.index import index_for
from flow_cli.store.protocol import NewRun, StreamWrite

_SKIPPED = (DecisionFailed, DecisionRecovered, CancelRequested, BuildUpgraded)
"""Events never copied: they are not decisions nor facts a decision depended on."""

_KEEP_INPUT = object()


@dataclass(frozen=True, slots=True)
class Forked:
    run_id: str
    forked_from: tuple[str, int]
    copied: int
    """Events copied from the original (besides ``run_started``)."""

    def to_json(self) -> dict[str, object]:
        return {
            "run_id": self.run_id,
            "forked_from": {"run_id": self.forked_from[0], "sequence": self.forked_from[1]},
        }


def fork_run(
    engine: Engine,
    run_id: str,
    *,
    new_id: str | None = None,
    input: JsonValue | object = _KEEP_INPUT,
    build_id: str | None = None,
    from_step: str | None = None,
) -> Forked:
    """Create the fork. Raises ``RunNotFound``, ``InputError``, ``BuildNotHosted``,
    ``ForkIdTaken`` and ``ForkDiverges``."""
    history = engine.history(run_id)
    original = history[0].event
    assert isinstance(original, RunStarted)
    spec = original.spec
    pinned = project(history).spec.runtime_build_id  # after any `flow upgrade`
    runtime = engine.runtime_for(spec.workflow, build_id or pinned)
    value = spec.input
    if input is not _KEEP_INPUT:
        try:
            value = normalise(input)
        except JsonLimitError as exc:
            raise InputError(f"the fork's input is refused: {exc}") from None
        except (TypeError, ValueError) as exc:
            raise InputError(f"the fork's input is not a JSON value: {exc}") from None
    copied, cut = _prefix(history, from_step)
    fork_id = new_id or f"{run_id}-fork-{uuid.uuid4().hex[:6]}"
    check_run_id(fork_id)
    new_spec = replace(
        spec,
        input=value,
        runtime_build_id=runtime.build_id,
        patches=runtime.patches if build_id else spec.patches,
        parent_run_id=None,
        parent_child_id=None,
        predecessor_run_id=None,
        first_run_id=None,
        chain_started_at=None,
        forked_from=(run_id, cut),
    )
    seed = original.seed if from_step is not None else secrets.token_hex(16)
    started_at = history[0].recorded_at if from_step is not None else engine.clock.now()
    envelopes = [
        EventEnvelope(
            run_id=fork_id,
            sequence=1,
            recorded_at=started_at,
            event=RunStarted(spec=new_spec, seed=seed),
        ),
        *(
            EventEnvelope(run_id=fork_id, sequence=n, recorded_at=e.recorded_at, event=e.event)
            for n, e in enumerate(copied, start=2)
        ),
    ]
    checked = replay_history(runtime, envelopes)
    if not checked.ok:
        raise ForkDiverges(run_id, checked.divergences)
    _commit(engine, fork_id, envelopes, seed)
    return Forked(run_id=fork_id, forked_from=(run_id, cut), copied=len(copied))


def _prefix(
    history: Sequence[EventEnvelope], from_step: str | None
) -> tuple[list[EventEnvelope], int]:
    """The events to copy and the last original sequence they come from."""
    if from_step is None:
        return [], history[-1].sequence
    cut = next(
        (
            e.sequence
            for e in history
            if isinstance(e.event, StepScheduled) and e.event.step_id == from_step
        ),
        None,
    )
    if cut is None:
        scheduled = sorted({e.event.step_id for e in history if isinstance(e.event, StepScheduled)})
        raise InputError(
            f"--from-step {from_step!r}: run {history[0].run_id!r} never scheduled that step; "
            f"its steps: {', '.join(scheduled) or 'none'}."
        )
    before = [e for e in history[1:] if e.sequence < cut]
    completed = {e.event.step_id for e in before if isinstance(e.event, StepCompleted)}
    resolved = {e.event.hook_id for e in before if isinstance(e.event, HookResolved)}
    copied: list[EventEnvelope] = []
    for envelope in before:
        event = envelope.event
        if isinstance(event, _SKIPPED):
            continue
        if isinstance(event, ChildScheduled):
            raise InputError(
                f"--from-step {from_step!r}: child {event.child_id!r} was started before it; "
                "fork cannot copy child runs, so fork from a step before the child."
            )
        if isinstance(event, HookCreated) and event.hook_id not in resolved:
            raise InputError(
                f"--from-step {from_step!r}: hook {event.hook_id!r} is open there and its token "
                "belongs to the original run; fork from a later step, once it is resolved."
            )
        step_id = getattr(event, "step_id", None)
        if (
            step_id is not None
            and not isinstance(event, StepScheduled)
            and step_id not in completed
        ):
            continue  # not done before the cut: the step runs anew
        copied.append(envelope)
    return copied, cut - 1


def _commit(engine: Engine, fork_id: str, envelopes: list[EventEnvelope], seed: str) -> None:
    """Create the run with the copied events, each group at its recorded time, in one
    transaction: a fork interrupted at any point leaves no run or the whole copy.

    Hooks the copied events created were resolved in the original run and their tokens belong
    to it, so the fork's index does not claim them.
    """
    first = envelopes[0]
    if not isinstance(first.event, RunStarted):
        raise TypeError("a fork's history starts with run_started")
    # Listed by when it was forked (`flow runs`, --since), whatever times its history keeps.
    run = NewRun(
        run_id=fork_id,
        spec=first.event.spec,
        seed=seed,
        decide_at=None,
        created_at=engine.clock.now(),
    )
    if len(envelopes) == 1:
        run = replace(run, decide_at=engine.clock.now())
    snap = WorkflowRunSnapshot.start(first)
    groups = [list(g) for _, g in itertools.groupby(envelopes[1:], key=lambda e: e.recorded_at)]
    writes: list[StreamWrite] = []
    for number, group in enumerate(groups, start=1):
        at: datetime = group[0].recorded_at
        events: list[Event] = [e.event for e in group]
        after = simulate(snap, events, at)
        last = number == len(groups)
        index = replace(
            index_for(after, events, decide_at=engine.clock.now() if last else None),
            hooks=(),
        )
        writes.append(
            StreamWrite(
                run_id=fork_id,
                expected_sequence=snap.last_sequence,
                events=events,
                index=index,
                recorded_at=at,
            )
        )
        snap = after
    if not engine.create_with_history(run, writes, first.recorded_at):
        raise ForkIdTaken(fork_id)
