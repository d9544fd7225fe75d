"""Talking to a running run: queries (answered, nothing written), updates (answered and
recorded as ``update_applied``) and signal-with-start.

Both run the workflow's own handler, from the run's build, on the run's current history with a
read-only ``ctx``. An update is appended with ``append_if_sequence`` at the sequence its handler
saw: if the run moved meanwhile, it is re-read and the handler runs again on what is there now,
so a recorded answer is always the answer to the history right before it. An update id names
one request across the whole ``continue_as_new`` chain: sent again, it gets the recorded answer
and nothing is written.
"""

from __future__ import annotations

import uuid
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from flow_cli.engine.inputs import json_input
from flow_cli.engine.streams import Write
from flow_cli.errors import (
    CommandInHandler,
    EventConflict,
    FlowError,
    HandlerFailed,
    RunBuildNotLoaded,
    RunFinished,
    UndeclaredName,
    UpdateIdReused,
    UpdateRejected,
)
from flow_cli.model.events import EventEnvelope, RunStarted, SignalReceived, UpdateApplied
from flow_cli.model.jsonval import JsonLimitError, JsonValue, canonical, normalise
from flow_cli.model.names import check_name
from flow_cli.model.signals import check_declared
from flow_cli.model.snapshot import AppliedUpdate, WorkflowRunSnapshot
from flow_cli.model.updates import ReadOnlyContext, handler_name

if TYPE_CHECKING:
    from datetime import datetime

    from flow_cli.engine.host import EngineHost
    from flow_cli.engine.results import SignalDelivery
    from flow_cli.runtime import Handler, Runtime
    from flow_cli.store.protocol import NewRun

MAX_CONFLICT_RETRIES = 100


@dataclass(frozen=True, slots=True, kw_only=True)
class QueryResult:
    """What ``engine.query`` answers."""

    run_id: str
    """The run that answered (the live run of the chain named)."""
    query: str
    result: JsonValue

    def to_json(self) -> dict[str, Any]:
        """Its fields by name (``flow query --json``)."""
        return asdict(self)


@dataclass(frozen=True, slots=True, kw_only=True)
class UpdateResult:
    """What ``engine.update`` answers."""

    run_id: str
    """The run the update is recorded in."""
    update_id: str
    result: JsonValue
    """The handler's answer (the recorded one for a duplicate)."""
    sequence: int
    """Sequence of the ``update_applied`` event."""
    duplicate: bool
    """The id was applied before: this is its recorded answer, nothing was written."""

    def to_json(self) -> dict[str, Any]:
        """Its fields by name (``flow update --json``)."""
        return asdict(self)


def query(engine: EngineHost, run_id: str, name: str, args: JsonValue = None) -> QueryResult:
    """Run query ``name`` of the live run of ``run_id``'s chain (an ended run answers too).

    Raises ``RunNotFound``, ``UndeclaredName`` (listing the declared queries), ``InputError``
    (args not JSON), ``RunBuildNotLoaded``, ``CommandInHandler`` and ``HandlerFailed``.
    """
    check_name(name, "query name")
    value = _args(args)
    live = chain_from(engine, run_id)[-1]
    snap = engine.snapshot(live)
    runtime = _runtime(engine, snap)
    handler = _handler(runtime.queries, snap, "query", name)
    result = _call(handler, snap, "query", name, value)
    return QueryResult(run_id=live, query=name, result=result)


def update(
    engine: EngineHost,
    run_id: str,
    name: str,
    args: JsonValue = None,
    *,
    update_id: str | None = None,
) -> UpdateResult:
    """Apply update ``name`` to the live run of ``run_id``'s chain and return its answer.

    Raises ``RunNotFound``, ``UndeclaredName``, ``InputError``, ``RunBuildNotLoaded``,
    ``UpdateRejected`` (nothing written), ``UpdateIdReused`` (the id was applied with another
    name or args), ``RunFinished`` (the chain has ended), ``CommandInHandler`` and
    ``HandlerFailed`` (nothing written).
    """
    check_name(name, "update name")
    if update_id is not None:
        check_name(update_id, "update id")
    value = _args(args)
    ident = update_id or uuid.uuid4().hex
    for _ in range(MAX_CONFLICT_RETRIES):
        chain = _whole_chain(engine, run_id)
        live = chain[-1]
        snap = engine.snapshot(live)
        recorded = _applied(engine, chain, snap, ident)
        if recorded is not None:
            return _duplicate(recorded, name, value)
        if snap.terminal:
            raise RunFinished(live, snap.status.value, f"apply update {name!r}")
        runtime = _runtime(engine, snap)
        handler = _handler(runtime.updates, snap, "update", name)
        result = _call(handler, snap, "update", name, value)
        event = UpdateApplied(update_id=ident, name=name, args=value, result=result)
        now = engine.clock.now()
        try:
            (after,) = engine.commit_facts([Write(snap, [event], decide_at=now)], now=now)
        except EventConflict:
            continue  # the run moved: the handler answers the history as it is now
        return UpdateResult(
            run_id=live,
            update_id=ident,
            result=result,
            sequence=after.last_sequence,
            duplicate=False,
        )
    raise FlowError(f"run {run_id!r} is too busy to apply update {name!r}; try again")


def chain_from(engine: EngineHost, run_id: str) -> list[str]:
    """``run_id`` and its successors, the live (or final) run last (``ops.chain.chain_from``,
    which the engine layer may not import). Raises ``RunNotFound``."""
    from flow_cli.model.status import RunStatus

    chain = [run_id]
    while engine.get_run(chain[-1]).status is RunStatus.CONTINUED_AS_NEW:
        outcome = engine.snapshot(chain[-1]).outcome
        successor = outcome.successor_run_id if outcome is not None else None
        if successor is None or successor in chain:
            break
        chain.append(successor)
    return chain


def create_signalled(
    engine: EngineHost,
    run: NewRun,
    signal: tuple[str, JsonValue],
    key: str | None,
    now: datetime,
) -> SignalDelivery | None:
    """Create ``run`` with signal ``signal`` as its second event, in one transaction
    (signal-with-start). None, writing nothing, when the run id is taken: the caller then
    delivers the signal to the run that is there."""
    from flow_cli.engine.results import SignalDelivery

    name, payload = signal
    check_name(name, "signal name")
    if key is not None:
        check_name(key, "signal key")
    event = SignalReceived(signal_name=name, payload=json_input(payload, "payload"), key=key)
    first = EventEnvelope(
        run_id=run.run_id,
        sequence=1,
        recorded_at=now,
        event=RunStarted(spec=run.spec, seed=run.seed),
    )
    snap = WorkflowRunSnapshot.start(first)
    check_declared(snap, name)
    try:
        engine.commit_facts([Write(snap, [event], decide_at=now)], [run], now=now)
    except EventConflict as exc:
        if exc.run_id == run.run_id and exc.expected_sequence in (0, 1):
            return None
        raise
    return SignalDelivery(run_id=run.run_id, sequence=2, duplicate=False)


def _whole_chain(engine: EngineHost, run_id: str) -> list[str]:
    """The chain from its first run to its live one: an update id is looked up in all of it."""
    live = chain_from(engine, run_id)
    first = engine.snapshot(live[0]).spec
    before: list[str] = []
    predecessor = first.predecessor_run_id
    while predecessor is not None and predecessor not in before and predecessor not in live:
        before.append(predecessor)
        predecessor = engine.snapshot(predecessor).spec.predecessor_run_id
    return [*reversed(before), *live]


def _applied(
    engine: EngineHost, chain: list[str], live: WorkflowRunSnapshot, update_id: str
) -> tuple[str, AppliedUpdate] | None:
    """Where ``update_id`` was applied in the chain, if it was. The earlier runs have ended,
    so what they hold cannot change under us."""
    found = live.updates.get(update_id)
    if found is not None:
        return live.run_id, found
    for run_id in chain[:-1]:
        found = engine.snapshot(run_id).updates.get(update_id)
        if found is not None:
            return run_id, found
    return None


def _duplicate(recorded: tuple[str, AppliedUpdate], name: str, args: JsonValue) -> UpdateResult:
    run_id, applied = recorded
    if applied.name != name:
        raise UpdateIdReused(run_id, applied.update_id, f"update name {applied.name!r}")
    if canonical(applied.args) != canonical(args):
        raise UpdateIdReused(run_id, applied.update_id, f"other args ({canonical(applied.args)})")
    return UpdateResult(
        run_id=run_id,
        update_id=applied.update_id,
        result=applied.result,
        sequence=applied.sequence,
        duplicate=True,
    )


def _runtime(engine: EngineHost, snap: WorkflowRunSnapshot) -> Runtime:
    build = snap.spec.runtime_build_id
    runtime = engine.runtimes.get(build)
    if runtime is None:
        raise RunBuildNotLoaded(snap.run_id, build, list(engine.runtimes))
    return runtime


def _handler(
    table: dict[str, dict[str, Handler]], snap: WorkflowRunSnapshot, kind: str, name: str
) -> Handler:
    handlers = table.get(snap.spec.workflow, {})
    handler = handlers.get(name)
    if handler is None:
        raise UndeclaredName(snap.run_id, kind, name, list(handlers))
    return handler


def _call(
    handler: Handler, snap: WorkflowRunSnapshot, kind: str, name: str, args: JsonValue
) -> JsonValue:
    """The handler's answer on ``snap`` (its readers hand out copies, so a cached snapshot
    is safe to share)."""
    label = handler_name(handler)
    ctx = ReadOnlyContext(snap, kind, name, label)
    try:
        answer = handler(ctx, snap.json_payload(args))
    except (UpdateRejected, CommandInHandler):
        raise
    except Exception as exc:
        raise HandlerFailed(snap.run_id, kind, name, label, _error(exc)) from exc
    try:
        return normalise(answer)
    except (JsonLimitError, TypeError, ValueError, RecursionError) as exc:
        raise HandlerFailed(
            snap.run_id, kind, name, label, f"nothing: its answer is not storable JSON ({exc})"
        ) from None


def _error(exc: BaseException) -> str:
    text = str(exc)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _args(args: JsonValue) -> JsonValue:
    return json_input(args, "args value")


__all__ = ["QueryResult", "UpdateResult", "create_signalled", "query", "update"]
