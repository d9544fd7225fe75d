"""Acting on many runs in one process: cancel, terminate, signal, start, with batched commits.

Facts for many runs (``cancel_requested``, ``signal_received``, new runs) are committed
``batch_size`` runs per transaction through ``Engine.commit_facts`` with one ``Write`` per run.
If a batch loses a race (``EventConflict``: some run moved meanwhile), its runs are redone one by
one through the engine's own retrying entry points, so a busy run never fails the others.
Termination goes run by run through ``Engine.terminate``: its commit may also touch children and
parents, which the decider assembles.

Every operation yields one ``BulkResult`` per run, in input order, and is idempotent: cancelling
a run whose cancellation was requested, cancelling or terminating a run that ended (whichever
path, batch or one by one, found it ended), or starting a run that exists with the same spec are
reported as ``skipped`` and change nothing.
"""

from __future__ import annotations

import itertools
import secrets
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import TypeVar

from flow_cli.engine.engine import Engine
from flow_cli.engine.resolve import NOTHING_TO_RETRY, retried_text, retry_request
from flow_cli.engine.streams import Write
from flow_cli.errors import EventConflict, FlowError, InputError, RunFinished
from flow_cli.model.events import CancelRequested, Event, SignalReceived
from flow_cli.model.jsonval import JsonLimitError, JsonValue, normalise
from flow_cli.model.names import check_run_id
from flow_cli.model.signals import check_declared, earlier_delivery
from flow_cli.model.snapshot import WorkflowRunSnapshot
from flow_cli.model.spec import WorkflowSpec
from flow_cli.store.protocol import NewRun

BATCH_SIZE = 200
"""Runs per transaction: large enough to amortise the commit, small enough to keep a lost
race cheap and the write lock short."""


class Outcome(StrEnum):
    DONE = "done"
    SKIPPED = "skipped"
    FAILED = "failed"


@dataclass(frozen=True, slots=True)
class BulkResult:
    run_id: str
    outcome: Outcome
    detail: str
    """What happened, e.g. ``cancellation requested``, ``already Completed``, an error."""

    @property
    def failed(self) -> bool:
        return self.outcome is Outcome.FAILED

    def to_json(self) -> dict[str, str]:
        return {"run_id": self.run_id, "result": self.outcome.value, "detail": self.detail}


@dataclass(frozen=True, slots=True)
class StartLine:
    """One line of ``flow start --from-jsonl``."""

    run_id: str
    workflow: str
    input: JsonValue
    build_id: str | None = None
    attributes: JsonValue = None
    """Search attributes (``{key: value}``) over those of the workflow's ``attributes=``."""


def _ended(run_id: str, status: str) -> BulkResult:
    """A run that had ended (``status``): skipped, whichever path found it so."""
    return BulkResult(run_id, Outcome.SKIPPED, f"already {status}")


T = TypeVar("T")


def _batches(items: Iterable[T], size: int) -> Iterator[Sequence[T]]:
    """``size`` items at a time, taken as they come: a stream of run ids (read a page at a
    time) is never held whole."""
    rest = iter(items)
    while batch := list(itertools.islice(rest, size)):
        yield batch


def _facts(
    engine: Engine,
    run_ids: Iterable[str],
    make: Callable[[WorkflowRunSnapshot], tuple[list[Event], BulkResult]],
    one_by_one: Callable[[str], BulkResult],
    batch_size: int,
    *,
    skip_ended: bool = False,
) -> Iterator[BulkResult]:
    """Commit ``make``'s events for each run, a batch per transaction; with ``skip_ended``, a
    run that ended is skipped before ``make`` is asked."""
    for batch in _batches(run_ids, batch_size):
        results: dict[str, BulkResult] = {}
        writes: list[Write] = []
        planned: list[str] = []
        for run_id in batch:
            if run_id in results or run_id in planned:
                continue  # the same id twice in one batch: act once
            try:
                snap = engine.snapshot(run_id)
            except FlowError as exc:
                results[run_id] = BulkResult(run_id, Outcome.FAILED, str(exc))
                continue
            if skip_ended and snap.terminal:
                results[run_id] = _ended(run_id, snap.status.value)
                continue
            events, result = make(snap)
            if events:
                writes.append(Write(snap, events, decide_at=engine.clock.now()))
                planned.append(run_id)
            results[run_id] = result
        if writes:
            try:
                engine.commit_facts(writes)
            except EventConflict:
                for run_id in planned:
                    results[run_id] = one_by_one(run_id)
        for run_id in batch:
            yield results[run_id]


def cancel_runs(
    engine: Engine, run_ids: Iterable[str], reason: str, batch_size: int = BATCH_SIZE
) -> Iterator[BulkResult]:
    """Request cancellation of each run (``flow cancel`` in bulk)."""

    def make(snap: WorkflowRunSnapshot) -> tuple[list[Event], BulkResult]:
        if snap.cancel_requested:
            return [], BulkResult(snap.run_id, Outcome.SKIPPED, "cancellation already requested")
        done = BulkResult(snap.run_id, Outcome.DONE, "cancellation requested")
        return [CancelRequested(reason=reason)], done

    def one_by_one(run_id: str) -> BulkResult:
        try:
            snap = engine.snapshot(run_id)
            if snap.terminal:
                return _ended(run_id, snap.status.value)
            if engine.cancel(run_id, reason):
                return BulkResult(run_id, Outcome.DONE, "cancellation requested")
            return BulkResult(run_id, Outcome.SKIPPED, "cancellation already requested")
        except RunFinished as exc:
            # It ended after the look above: skipped, as the batch path says of an ended run,
            # so the outcome never depends on which path a race sent the run down.
            return _ended(run_id, exc.status)
        except FlowError as exc:
            return BulkResult(run_id, Outcome.FAILED, str(exc))

    return _facts(engine, run_ids, make, one_by_one, batch_size, skip_ended=True)


def retry_runs(
    engine: Engine, run_ids: Iterable[str], reason: str, batch_size: int = BATCH_SIZE
) -> Iterator[BulkResult]:
    """Try now each run's failing decision and its steps in back-off (``flow retry``)."""

    def make(snap: WorkflowRunSnapshot) -> tuple[list[Event], BulkResult]:
        request = retry_request(snap, reason)
        if request is None:
            return [], BulkResult(snap.run_id, Outcome.SKIPPED, NOTHING_TO_RETRY)
        return [request], BulkResult(snap.run_id, Outcome.DONE, retried_text(request))

    def one_by_one(run_id: str) -> BulkResult:
        try:
            request = engine.retry(run_id, reason)
        except RunFinished as exc:
            return _ended(run_id, exc.status)
        except FlowError as exc:
            return BulkResult(run_id, Outcome.FAILED, str(exc))
        if request is None:
            return BulkResult(run_id, Outcome.SKIPPED, NOTHING_TO_RETRY)
        return BulkResult(run_id, Outcome.DONE, retried_text(request))

    return _facts(engine, run_ids, make, one_by_one, batch_size, skip_ended=True)


def signal_runs(
    engine: Engine,
    run_ids: Iterable[str],
    name: str,
    payload: JsonValue,
    batch_size: int = BATCH_SIZE,
    *,
    key: str | None = None,
) -> Iterator[BulkResult]:
    """Deliver signal ``name`` to each run; a run that ended is a failure, as for one run.

    With ``key``, a run that already received this signal with that key is skipped: running
    the same bulk signal again delivers nothing twice.
    """

    def make(snap: WorkflowRunSnapshot) -> tuple[list[Event], BulkResult]:
        try:
            check_declared(snap, name)
            sent = earlier_delivery(snap, name, payload, key)
        except FlowError as exc:
            return [], BulkResult(snap.run_id, Outcome.FAILED, str(exc))
        if sent is not None:
            detail = f"signal {name!r} with key {key!r} already delivered"
            return [], BulkResult(snap.run_id, Outcome.SKIPPED, detail)
        if snap.terminal:
            detail = f"has already ended ({snap.status.value}); cannot signal {name!r}"
            return [], BulkResult(snap.run_id, Outcome.FAILED, detail)
        event = SignalReceived(signal_name=name, payload=payload, key=key)
        return [event], BulkResult(snap.run_id, Outcome.DONE, f"signal {name!r} delivered")

    def one_by_one(run_id: str) -> BulkResult:
        try:
            engine.signal(run_id, name, payload, key=key)
        except FlowError as exc:
            return BulkResult(run_id, Outcome.FAILED, str(exc))
        return BulkResult(run_id, Outcome.DONE, f"signal {name!r} delivered")

    return _facts(engine, run_ids, make, one_by_one, batch_size)


def terminate_runs(engine: Engine, run_ids: Iterable[str], reason: str) -> Iterator[BulkResult]:
    """End each run without running its code (``flow terminate``). The ids come once each
    (names are deduplicated, a filter's walk lists a run once): nothing is kept per run, so a
    stream of a million ids costs one at a time; a repeated id is reported skipped."""
    for run_id in run_ids:
        try:
            if engine.terminate(run_id, reason):
                yield BulkResult(run_id, Outcome.DONE, "terminated")
            else:
                yield _ended(run_id, engine.get_run(run_id).status.value)
        except FlowError as exc:
            yield BulkResult(run_id, Outcome.FAILED, str(exc))


def start_runs(
    engine: Engine, lines: Sequence[StartLine], batch_size: int = BATCH_SIZE
) -> Iterator[BulkResult]:
    """Create each run, a batch per transaction; an existing run with the same spec is skipped."""
    for batch in _batches(lines, batch_size):
        results: dict[int, BulkResult] = {}
        creates: dict[int, NewRun] = {}
        now = engine.clock.now()
        for index, line in enumerate(batch):
            try:
                creates[index] = _new_run(engine, line)
            except FlowError as exc:
                results[index] = BulkResult(line.run_id, Outcome.FAILED, str(exc))
        ids = [run.run_id for run in creates.values()]
        fresh = len(set(ids)) == len(ids) and not any(
            engine.find_run(run_id) is not None for run_id in ids
        )
        if creates and fresh:
            try:
                engine.commit_facts([], list(creates.values()), now=now)
            except EventConflict:
                fresh = False
            else:
                for index in creates:
                    results[index] = BulkResult(batch[index].run_id, Outcome.DONE, "created")
        if not fresh:
            for index in creates:
                results[index] = _start_one(engine, batch[index])
        for index in range(len(batch)):
            yield results[index]


def _new_run(engine: Engine, line: StartLine) -> NewRun:
    runtime = engine.runtime_for(line.workflow, line.build_id)
    try:
        value = normalise(line.input)
    except JsonLimitError as exc:
        raise InputError(f"the run input is refused: {exc}") from None
    except (TypeError, ValueError) as exc:
        raise InputError(f"the run input is not a JSON value: {exc}") from None
    check_run_id(line.run_id)
    spec = WorkflowSpec(
        workflow=line.workflow,
        input=value,
        runtime_build_id=runtime.build_id,
        patches=runtime.patches,
        signals=runtime.signals.get(line.workflow),
        attributes=runtime.start_attributes(line.workflow, value, line.attributes),
    )
    return NewRun(
        run_id=line.run_id,
        spec=spec,
        seed=secrets.token_hex(16),
        decide_at=engine.clock.now(),
    )


def _start_one(engine: Engine, line: StartLine) -> BulkResult:
    try:
        started = engine.start(
            line.workflow,
            line.input,
            run_id=line.run_id,
            build_id=line.build_id,
            attributes=line.attributes,
        )
    except FlowError as exc:
        return BulkResult(line.run_id, Outcome.FAILED, str(exc))
    if started.created:
        return BulkResult(line.run_id, Outcome.DONE, "created")
    return BulkResult(line.run_id, Outcome.SKIPPED, "exists with the same spec")


__all__ = [
    "BATCH_SIZE",
    "BulkResult",
    "Outcome",
    "StartLine",
    "cancel_runs",
    "signal_runs",
    "start_runs",
    "terminate_runs",
]
