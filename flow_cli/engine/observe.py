"""What the engine tells an operator: an ``Observer`` it calls in-process as things happen.

The engine calls its observer (``Engine.observe``) at the moments an operator cares about: a
decision failed or recovered, a step attempt failed and when the next one is due, a step exhausted
its retries, a run ended, a timer fired late, a lease was lost, the database went away and came
back. It also reports the counts behind the worker's metrics (decisions made, steps run and how
long they took, conflicts met). Nothing here reads the database: every call carries what the
engine already holds in memory, so observing costs no round trip.

``Observer`` itself does nothing; override what you need. The calls are cheap when nobody
listens: the engine hands over values, never formatted text, and skips looking through a
commit's events when ``observer.listening`` is false. ``LogObserver`` turns the notable events
into log records on the ``flow.events`` logger (one record per event, none while healthy at
``INFO``); ``flow_cli.engine.metrics.MetricsObserver`` counts them for Prometheus.

Where each call comes from:

- ``decided``: the decision loop, once per decision, for an observer ``timing_decisions``
  (the tracing one);
- ``decisions``: the decision loop, once per run decided (before its commit: a decision redone
  after a conflict counts again, as in ``flow tick --json``);
- ``conflict``: a commit that met ``EventConflict`` and is retried;
- ``decision_failed``, ``decision_recovered``, ``step_failed``, ``step_exhausted``, ``run_ended``,
  ``timer_fired``: the events that say so, once they are committed (``notify_committed``). A
  decision that keeps failing for the same cause is recorded once, so it is told once;
- ``step_finished``: the step executor, once the attempt's end is recorded (or discarded);
- ``lease_lost``: the lease keeper (renewal refused twice in a row while the handler still runs)
  or the executor (its result discarded because another worker took the attempt);
- ``store_error``, ``store_recovered``: the worker loop.

Observers are called from the worker's threads (the main loop, the step threads, the lease
keeper) and must be thread-safe.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from flow_cli.errors import StoreError
from flow_cli.model.events import (
    DecisionFailed,
    Event,
    RunCancelled,
    RunCompleted,
    RunContinuedAsNew,
    RunFailed,
    StepFailed,
    WaitCompleted,
)
from flow_cli.model.jsonval import JsonValue
from flow_cli.model.snapshot import WorkflowRunSnapshot
from flow_cli.model.status import RunStatus
from flow_cli.store.protocol import StepLease

EVENTS_LOGGER = "flow.events"


@dataclass(frozen=True, slots=True)
class RunRef:
    """The run an observed event belongs to."""

    run_id: str
    workflow: str
    build_id: str
    traceparent: str | None = None
    """The run's recorded trace context (``WorkflowSpec.traceparent``)."""
    started_at: datetime | None = None

    @classmethod
    def of(cls, snapshot: WorkflowRunSnapshot) -> RunRef:
        return cls(
            snapshot.run_id,
            snapshot.spec.workflow,
            snapshot.spec.runtime_build_id,
            snapshot.spec.traceparent,
            snapshot.started_at,
        )


@dataclass(frozen=True, slots=True)
class StepRef:
    """One attempt of one step of a run."""

    run: RunRef
    step_id: str
    name: str
    """The step's registered name (``step_id`` is its id within the run)."""
    attempt: int


class Observer:
    """Told what the engine does. Every method does nothing; override the ones you need."""

    @property
    def listening(self) -> bool:
        """False for the do-nothing base: the engine then skips preparing what it would tell."""
        return type(self) is not Observer

    @property
    def timing_decisions(self) -> bool:
        """Whether ``decided`` is wanted (tracing): the decision loop skips it otherwise."""
        return False

    def decided(self, run: RunRef, seconds: float) -> None:
        """One decision of the run took ``seconds`` (told only when ``timing_decisions``)."""

    def decisions(self, made: int, failed: int) -> None:
        """Decisions made for one run, and those of them that failed."""

    def conflict(self) -> None:
        """A commit met another writer's (``EventConflict``); the engine decides again."""

    def decision_failed(
        self,
        run: RunRef,
        error_type: str,
        message: str,
        retry_at: datetime | None,
        traceback: str | None = None,
    ) -> None:
        """The workflow code failed to decide (recorded ``decision_failed``); ``traceback`` is
        where it raised, when it was the code's own error."""

    def decision_recovered(self, run: RunRef, error_type: str) -> None:
        """A run whose last decision had failed decided again (``decision_recovered``)."""

    def step_failed(
        self,
        step: StepRef,
        error_type: str,
        message: str,
        next_attempt_at: datetime,
        traceback: str | None = None,
    ) -> None:
        """An attempt failed; the next attempt is due at ``next_attempt_at``."""

    def step_exhausted(
        self, step: StepRef, error_type: str, message: str, traceback: str | None = None
    ) -> None:
        """An attempt failed and the step has no attempt left (or the error is not retryable)."""

    def step_finished(self, step: StepRef, outcome: str, seconds: float) -> None:
        """A handler returned: ``outcome`` is ``completed``, ``retrying``, ``failed`` or
        ``discarded`` (the run ended or another worker settled the attempt meanwhile)."""

    def run_ended(self, run: RunRef, status: RunStatus, error: JsonValue) -> None:
        """The run reached ``status`` (terminal); ``error`` is a failed run's error."""

    def timer_fired(self, run: RunRef, wait_id: str, lateness: float) -> None:
        """A due timer was recorded as fired, ``lateness`` seconds after its deadline."""

    def decision_slow(self, run: RunRef, seconds: float) -> None:
        """One decision of the run took ``seconds`` (more than ``SLOW_DECISION_SECONDS``): its
        workflow code blocked, and every run this worker decides waited meanwhile."""

    def lease_lost(self, lease: StepLease) -> None:
        """This worker no longer holds the lease of an attempt it runs: another worker may run
        the same attempt again (the first end recorded counts; a later one is discarded)."""

    def store_error(self, error: StoreError) -> None:
        """The database failed; the worker retries with a growing pause."""

    def store_recovered(self, seconds: float) -> None:
        """The database answered again after ``seconds`` of errors."""


NOTHING = Observer()
"""The default observer: nobody listens."""


class Observers(Observer):
    """Tells every one of ``observers`` (a log and the metrics, say)."""

    def __init__(self, observers: Sequence[Observer]) -> None:
        self.observers = tuple(observers)
        # Asked once per decision: answered from a field, not a loop over the observers.
        self._timing = any(o.timing_decisions for o in self.observers)

    @property
    def listening(self) -> bool:
        return any(o.listening for o in self.observers)

    @property
    def timing_decisions(self) -> bool:
        return self._timing


def _fan_out(name: str) -> Callable[..., None]:
    def tell(self: Observers, *args: Any) -> None:
        for o in self.observers:
            getattr(o, name)(*args)

    tell.__name__ = tell.__qualname__ = name
    return tell


# Every call of ``Observer`` is passed on as it came: one loop instead of a method each, so a
# call added to ``Observer`` reaches every observer without a second edit here.
for _name, _member in vars(Observer).items():
    if callable(_member) and not _name.startswith("_"):
        setattr(Observers, _name, _fan_out(_name))


def notify_committed(
    observer: Observer,
    snapshot: WorkflowRunSnapshot,
    events: Sequence[Event],
    now: datetime,
    decide_at: object,
    failed_before: str | None = None,
) -> None:
    """Tell ``observer`` what the just-committed ``events`` of a run say. ``snapshot`` is the run
    after them; ``decide_at`` is when it is decided next (a failed decision's retry);
    ``failed_before`` the error type of the failing decision the events were decided on.

    A run recovers when its failing decision is followed by a clean one: a
    ``decision_recovered`` event, or any decision (fixed code may complete the run at once).
    """
    run: RunRef | None = None
    if failed_before is not None and snapshot.decision_error is None:
        run = RunRef.of(snapshot)
        observer.decision_recovered(run, failed_before)
    for event in events:
        match event:
            case DecisionFailed():
                run = run or RunRef.of(snapshot)
                retry_at = decide_at if isinstance(decide_at, datetime) else None
                observer.decision_failed(
                    run, event.error_type, event.message, retry_at, event.traceback
                )
            case StepFailed():
                run = run or RunRef.of(snapshot)
                state = snapshot.steps.get(event.step_id)
                name = state.name if state is not None else event.step_id
                ref = StepRef(run, event.step_id, name, event.attempt)
                if event.exhausted or event.next_attempt_at is None:
                    observer.step_exhausted(ref, event.error_type, event.message, event.traceback)
                else:
                    observer.step_failed(
                        ref, event.error_type, event.message, event.next_attempt_at, event.traceback
                    )
            case WaitCompleted():
                run = run or RunRef.of(snapshot)
                lateness = max(0.0, (now - event.deadline).total_seconds())
                observer.timer_fired(run, event.wait_id, lateness)
            case RunCompleted():
                observer.run_ended(run or RunRef.of(snapshot), RunStatus.COMPLETED, None)
            case RunFailed():
                observer.run_ended(run or RunRef.of(snapshot), RunStatus.FAILED, event.error)
            case RunCancelled():
                observer.run_ended(run or RunRef.of(snapshot), RunStatus.CANCELLED, None)
            case RunContinuedAsNew():
                observer.run_ended(run or RunRef.of(snapshot), RunStatus.CONTINUED_AS_NEW, None)
            case _:
                pass


class LogObserver(Observer):
    """One log record per notable event on the ``flow.events`` logger; quiet while healthy.

    Levels: ``ERROR`` a decision failed, a step exhausted, a run failed (the first two with the
    code's traceback in ``flow_fields["traceback"]``); ``WARNING`` a step
    attempt failed (with its next attempt), a decision that blocked for more than a second, a
    lease lost, the database unavailable; ``INFO`` a
    decision recovered, the database back; ``DEBUG`` every other run ending. Each record's
    ``message`` is one sentence; ``record.flow_event`` names the event and ``record.flow_fields``
    holds its fields (``run_id``, ``workflow``, ``build_id``, ``step_id``, ``step``,
    ``attempt``, ``error`` ...) for structured formatters. Nothing is formatted for a level
    that is off.
    """

    def __init__(self, logger: logging.Logger | None = None) -> None:
        self.log = logger or logging.getLogger(EVENTS_LOGGER)

    def _emit(self, level: int, event: str, message: str, fields: dict[str, Any]) -> None:
        self.log.log(level, "%s", message, extra={"flow_event": event, "flow_fields": fields})

    def decision_failed(
        self,
        run: RunRef,
        error_type: str,
        message: str,
        retry_at: datetime | None,
        traceback: str | None = None,
    ) -> None:
        if not self.log.isEnabledFor(logging.ERROR):
            return
        retry = f"; retrying at {_time(retry_at)}" if retry_at is not None else ""
        # An error: the run cannot go on until its code is fixed (or its cause goes away).
        self._emit(
            logging.ERROR,
            "decision_failed",
            f"decision failed: run {run.run_id} ({_of(run)}): {_said(error_type, message)}{retry}",
            {
                **_run_fields(run),
                "error_type": error_type,
                "error": message,
                "retry_at": _time(retry_at) if retry_at is not None else None,
                "traceback": traceback,
            },
        )

    def decision_recovered(self, run: RunRef, error_type: str) -> None:
        if not self.log.isEnabledFor(logging.INFO):
            return
        self._emit(
            logging.INFO,
            "decision_recovered",
            f"decision recovered: run {run.run_id} ({_of(run)}) decides again after {error_type}",
            {**_run_fields(run), "error_type": error_type},
        )

    def step_failed(
        self,
        step: StepRef,
        error_type: str,
        message: str,
        next_attempt_at: datetime,
        traceback: str | None = None,
    ) -> None:
        if not self.log.isEnabledFor(logging.WARNING):
            return
        run = step.run
        self._emit(
            logging.WARNING,
            "step_failed",
            f"step failed: {step.step_id!r} of run {run.run_id} ({_of(run)}), attempt "
            f"{step.attempt}: {_said(error_type, message)}; "
            f"next attempt at {_time(next_attempt_at)}",
            {
                **_step_fields(step),
                "error_type": error_type,
                "error": message,
                "next_attempt_at": _time(next_attempt_at),
            },
        )

    def step_exhausted(
        self, step: StepRef, error_type: str, message: str, traceback: str | None = None
    ) -> None:
        if not self.log.isEnabledFor(logging.ERROR):
            return
        run = step.run
        self._emit(
            logging.ERROR,
            "step_exhausted",
            f"step exhausted: {step.step_id!r} of run {run.run_id} ({_of(run)}) failed for "
            f"good on attempt {step.attempt}: {_said(error_type, message)}",
            {
                **_step_fields(step),
                "error_type": error_type,
                "error": message,
                "traceback": traceback,
            },
        )

    def run_ended(self, run: RunRef, status: RunStatus, error: JsonValue) -> None:
        level = logging.ERROR if status is RunStatus.FAILED else logging.DEBUG
        if not self.log.isEnabledFor(level):
            return
        fields: dict[str, Any] = {**_run_fields(run), "status": status.value}
        if status is RunStatus.FAILED:
            error_type, text = _error_parts(error)
            fields.update(error_type=error_type, error=text)
            if isinstance(error, dict) and isinstance(error.get("step_id"), str):
                fields["step_id"] = error["step_id"]
            message = f"run failed: {run.run_id} ({_of(run)}): {_said(error_type, text)}"
            self._emit(level, "run_failed", message, fields)
        else:
            message = f"run ended: {run.run_id} ({_of(run)}): {status.value}"
            self._emit(level, "run_ended", message, fields)

    def decision_slow(self, run: RunRef, seconds: float) -> None:
        if not self.log.isEnabledFor(logging.WARNING):
            return
        self._emit(
            logging.WARNING,
            "decision_slow",
            f"slow decision: run {run.run_id} ({_of(run)}) spent {seconds:.1f} s in workflow "
            "code, and the worker's other decisions waited; move blocking calls (time.sleep, "
            "I/O) into a step, and wait with ctx.sleep",
            {**_run_fields(run), "seconds": round(seconds, 3)},
        )

    def lease_lost(self, lease: StepLease) -> None:
        if not self.log.isEnabledFor(logging.WARNING):
            return
        self._emit(
            logging.WARNING,
            "lease_lost",
            f"lease lost: step {lease.step_id!r} of run {lease.run_id}, attempt "
            f"{lease.attempt}: another worker may run the same attempt again",
            {"run_id": lease.run_id, "step_id": lease.step_id, "attempt": lease.attempt},
        )

    def store_error(self, error: StoreError) -> None:
        if not self.log.isEnabledFor(logging.WARNING):
            return
        self._emit(
            logging.WARNING,
            "store_error",
            f"database unavailable, retrying: {error}",
            {"error_type": type(error).__name__, "error": str(error)},
        )

    def store_recovered(self, seconds: float) -> None:
        if not self.log.isEnabledFor(logging.INFO):
            return
        self._emit(
            logging.INFO,
            "store_reconnected",
            f"database reachable again after {seconds:.1f} s",
            {"outage_seconds": round(seconds, 3)},
        )


def _of(run: RunRef) -> str:
    return f"{run.workflow}, build {run.build_id}"


def _run_fields(run: RunRef) -> dict[str, Any]:
    return {"run_id": run.run_id, "workflow": run.workflow, "build_id": run.build_id}


def _step_fields(step: StepRef) -> dict[str, Any]:
    return {
        **_run_fields(step.run),
        "step_id": step.step_id,
        "step": step.name,
        "attempt": step.attempt,
    }


def _time(value: datetime) -> str:
    return value.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _said(error_type: str, message: str) -> str:
    """``Type: message``, or just the type when the error has no message (no colon left
    dangling)."""
    return f"{error_type}: {message}" if message.strip() else error_type


def _error_parts(error: JsonValue) -> tuple[str, str]:
    if isinstance(error, dict):
        return str(error.get("type", "Error")), str(error.get("message", ""))
    return "Error", str(error)
