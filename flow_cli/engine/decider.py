"""The replay loop: history → snapshot → one command → validated append → again.

``Decider.decide(run_id)`` drives one run as far as it can go right now: it records facts that
are due (timers), calls the workflow, validates the command against history and appends its
events, and repeats until the run waits on something or ends. Every append names the sequence
it was decided on; an ``EventConflict`` means another writer got there first, and the loop
re-reads and decides again.
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

from flow_cli.engine.streams import Streams, Write
from flow_cli.errors import (
    EventConflict,
    FlowError,
    HookTokenInUse,
    NonDeterminismError,
    RunNotFound,
)
from flow_cli.model.clock import Clock
from flow_cli.model.closing import closing_events
from flow_cli.model.commands import Cancelled, Complete, ContinueAsNew, Fail, TerminalCommand
from flow_cli.model.determinism import Plan, engine_cancels, plan
from flow_cli.model.events import (
    CancelRequested,
    ChildCompleted,
    ChildScheduled,
    DecisionFailed,
    DecisionRecovered,
    Event,
    EventEnvelope,
    RunCancelled,
    RunCompleted,
    RunContinuedAsNew,
    RunFailed,
    RunStarted,
    WaitCompleted,
)
from flow_cli.model.jsonval import canonical
from flow_cli.model.snapshot import WorkflowRunSnapshot
from flow_cli.model.spec import WorkflowSpec
from flow_cli.model.status import RunStatus, StepStatus
from flow_cli.runtime import Runtime
from flow_cli.store.protocol import NewRun

MAX_ROUNDS = 200
"""Decisions one lease may make before handing the run back (a guard against runaway loops)."""


@dataclass(slots=True)
class DecideReport:
    decisions: int = 0
    conflicts: int = 0
    decision_failures: int = 0


class Decider:
    """Decides runs of the builds in ``runtimes``."""

    def __init__(
        self,
        streams: Streams,
        runtimes: Mapping[str, Runtime],
        clock: Clock,
        decision_retry: timedelta = timedelta(seconds=5),
    ) -> None:
        self.streams = streams
        self.runtimes = runtimes
        self.clock = clock
        self.decision_retry = decision_retry
        self.conflicts = 0

    def decide(self, run_id: str) -> DecideReport:
        """Advance ``run_id`` until it waits or ends. Safe to call from several workers."""
        report = DecideReport()
        for _ in range(MAX_ROUNDS):
            try:
                if not self._round(run_id, report):
                    return report
            except EventConflict:
                report.conflicts += 1
                self.conflicts += 1
        return report

    # One round: returns True if it appended something and the loop should go on.
    def _round(self, run_id: str, report: DecideReport) -> bool:
        snap = self.streams.load(run_id)
        if snap.terminal:
            return False
        runtime = self.runtimes.get(snap.spec.runtime_build_id)
        if runtime is None:
            return False  # another build's worker decides it; the run waits, it is not failed
        now = self.clock.now()

        due = [w for w in snap.waits.values() if not w.done and w.deadline <= now]
        if due:
            facts: list[Event] = [
                WaitCompleted(wait_id=w.wait_id, deadline=w.deadline)
                for w in sorted(due, key=lambda w: (w.deadline, w.sequence))
            ]
            self.streams.commit([Write(snap, facts)], now)
            return True

        exhausted = [
            s
            for s in snap.steps.values()
            if s.status is StepStatus.FAILED and s.retry.on_exhausted == "terminate"
        ]
        if exhausted:
            step = min(exhausted, key=lambda s: s.sequence)
            error = {
                "type": "StepExhausted",
                "message": f"step {step.step_id!r} failed after {step.attempts} attempt(s)",
                "step_id": step.step_id,
                "step_error": step.error,
            }
            self.terminate(snap, Fail(error=error), now, f"step {step.step_id!r} exhausted")
            report.decisions += 1
            return False

        try:
            command = runtime.decide(snap)
            result = plan(snap, command)
        except NonDeterminismError as exc:
            self._decision_failed(snap, exc, now, report)
            return False
        except KeyboardInterrupt:
            raise
        except BaseException as exc:  # the workflow's own bug (even sys.exit): never a crash
            self._decision_failed(snap, exc, now, report)
            return False

        report.decisions += 1
        if engine_cancels(snap, result):
            reason = snap.cancel_reason or "cancelled"
            self.terminate(snap, Cancelled(reason=reason), now, reason)
            return False
        if result.events:
            try:
                self._append_decision(snap, result, now)
            except HookTokenInUse as exc:  # the code chose a token another hook owns
                self._decision_failed(snap, exc, now, report)
                return False
            except RunIdTaken as exc:
                self._decision_failed(snap, exc, now, report, error_type="RunIdTaken")
                return False
            return True
        if result.terminal is not None:
            try:
                self.terminate(snap, result.terminal, now, _reason(result.terminal))
            except RunIdTaken as exc:
                self._decision_failed(snap, exc, now, report, error_type="RunIdTaken")
            return False
        if result.waits_on_open and isinstance(snap.decision_error, dict):
            # Fixed code decided cleanly but had nothing new to record: say so in history,
            # so that the run stops showing as failing.
            error_type = str(snap.decision_error.get("error_type"))
            recovered = DecisionRecovered(error_type=error_type)
            self.streams.commit([Write(snap, [recovered], failing=None)], now)
            return True
        if result.waits_on_open:
            # park_run fails when a fact arrived meanwhile: then decide again.
            return not self.streams.store.park_run(run_id, snap.last_sequence, snap.next_deadline())
        stuck = RuntimeError(
            "the workflow re-issued only identities that are already settled; read their "
            "results (ctx.step_output, ctx.step_error, ctx.signal ...) and return the next "
            "command"
        )
        self._decision_failed(snap, stuck, now, report, error_type="WorkflowStuck")
        return False

    def _append_decision(self, snap: WorkflowRunSnapshot, result: Plan, now: datetime) -> None:
        creates = [
            NewRun(
                run_id=event.child_run_id,
                spec=WorkflowSpec(
                    workflow=event.workflow,
                    input=event.input,
                    runtime_build_id=snap.spec.runtime_build_id,
                    patches=snap.spec.patches,
                    parent_run_id=snap.run_id,
                    parent_child_id=event.child_id,
                ),
                seed=secrets.token_hex(16),
                decide_at=now,
            )
            for event in result.events
            if isinstance(event, ChildScheduled)
        ]
        self._check_free(creates)
        self.streams.commit([Write(snap, result.events, failing=None)], now, creates)

    def _check_free(self, creates: list[NewRun]) -> None:
        """Run ids the engine derives (children, successors) must be free, or the append would
        conflict forever. A stale snapshot makes the decision_failed append conflict instead."""
        for new in creates:
            if self.streams.store.get_run(new.run_id) is not None:
                raise RunIdTaken(new.run_id)

    def _decision_failed(
        self,
        snap: WorkflowRunSnapshot,
        exc: BaseException,
        now: datetime,
        report: DecideReport,
        error_type: str | None = None,
    ) -> None:
        report.decision_failures += 1
        mismatches = None
        if isinstance(exc, NonDeterminismError):
            mismatches = [
                {
                    "identity": m.identity,
                    "field": m.field,
                    "recorded": m.recorded,
                    "produced": m.produced,
                }
                for m in exc.mismatches
            ]
        event = DecisionFailed(
            error_type=error_type or type(exc).__name__, message=str(exc), mismatches=mismatches
        )
        retry_at = now + self.decision_retry
        previous = snap.decision_error
        # A non-determinism message names the sequence it was found at, which moves with every
        # decision_failed appended; the mismatches are what identify the error.
        same = ("error_type", "mismatches") if mismatches else ("error_type", "message")
        if isinstance(previous, dict) and canonical(
            {k: previous.get(k) for k in same}
        ) == canonical({k: event.to_data()[k] for k in same}):
            # The same error again: record it once, try again later (fixed code may be deployed).
            self.streams.store.park_run(snap.run_id, snap.last_sequence, retry_at)
            return
        self.streams.commit(
            [Write(snap, [event], decide_at=retry_at, failing=f"{event.error_type}: {exc}")], now
        )

    def terminate(
        self, snap: WorkflowRunSnapshot, command: TerminalCommand, now: datetime, reason: str
    ) -> None:
        """End the run with ``command``: closing events (rule 4), children per policy, the
        parent told, a successor created, all in one commit. Raises ``EventConflict``."""
        events: list[Event] = closing_events(snap, reason)
        creates: list[NewRun] = []
        extra: list[Write] = []
        outcome: dict[str, object]
        match command:
            case Complete():
                events.append(RunCompleted(result=command.result))
                outcome = {"kind": "Completed", "result": command.result}
            case Fail():
                events.append(RunFailed(error=command.error))
                outcome = {"kind": "Failed", "error": command.error}
            case Cancelled():
                events.append(RunCancelled(reason=command.reason, forced=command.forced))
                outcome = {"kind": "Cancelled", "reason": command.reason}
                if command.forced:
                    outcome["forced"] = True
            case ContinueAsNew():
                successor = successor_run_id(snap.run_id)
                events.append(
                    RunContinuedAsNew(
                        successor_run_id=successor,
                        input=command.input,
                        runtime_build_id=snap.spec.runtime_build_id,
                        patches=snap.spec.patches,
                    )
                )
                spec = snap.spec
                creates.append(
                    NewRun(
                        run_id=successor,
                        spec=spec.successor(command.input, snap.run_id, snap.started_at),
                        seed=secrets.token_hex(16),
                        decide_at=now,
                    )
                )
                outcome = {}
                if snap.cancel_requested:
                    # A cancellation request must not be shed by continuing as new: the
                    # successor starts with it, in the same transaction.
                    extra.append(self._carry_cancel(creates[-1], snap.cancel_reason, now))
        # Cancellation policy "cancel": ask each open child to stop, in the same transaction.
        for child in snap.children.values():
            if child.open and child.cancellation == "cancel":
                child_write = self._cancel_child(child.run_id, f"parent {snap.run_id}: {reason}")
                if child_write is not None:
                    extra.append(child_write)
        # A child that ends (for good) tells its parent in the same transaction.
        if outcome and snap.spec.parent_run_id and snap.spec.parent_child_id:
            parent_write = self._notify_parent(snap, outcome, now)
            if parent_write is not None:
                extra.append(parent_write)
        self._check_free(creates)
        self.streams.commit(
            [Write(snap, events, decide_at=None, failing=None), *extra], now, creates
        )

    def _carry_cancel(self, successor: NewRun, reason: str | None, now: datetime) -> Write:
        started = EventEnvelope(
            run_id=successor.run_id,
            sequence=1,
            recorded_at=now,
            event=RunStarted(spec=successor.spec, seed=successor.seed),
        )
        return Write(
            WorkflowRunSnapshot.start(started),
            [CancelRequested(reason=reason or "cancelled")],
            decide_at=now,
        )

    def _cancel_child(self, child_run_id: str, reason: str) -> Write | None:
        try:
            child = self.streams.load(child_run_id)
            # A child that continued as new lives on in its successor: cancel the live run.
            while child.outcome is not None and child.outcome.successor_run_id is not None:
                child = self.streams.load(child.outcome.successor_run_id)
        except RunNotFound:
            return None
        if child.terminal or child.cancel_requested:
            return None
        return Write(child, [CancelRequested(reason=reason)], decide_at=self.clock.now())

    def _notify_parent(
        self, snap: WorkflowRunSnapshot, outcome: dict[str, object], now: datetime
    ) -> Write | None:
        parent_id = snap.spec.parent_run_id
        child_id = snap.spec.parent_child_id
        if parent_id is None or child_id is None:
            return None
        try:
            parent = self.streams.load(parent_id)
        except RunNotFound:
            return None
        child = parent.children.get(child_id)
        if parent.terminal or child is None or not child.open:
            return None
        event = ChildCompleted(child_id=child_id, child_run_id=snap.run_id, outcome=outcome)
        return Write(parent, [event], decide_at=now)


class RunIdTaken(FlowError):
    """A run id the engine derives for a child or a successor belongs to another run."""

    def __init__(self, run_id: str) -> None:
        super().__init__(
            f"Run id {run_id!r}, which the engine derives for a child or a continuation, "
            "already belongs to another run; choose another child id, or start this run "
            "under another id."
        )
        self.run_id = run_id


def successor_run_id(run_id: str) -> str:
    """``order-7`` → ``order-7~1`` → ``order-7~2``: the chain stays readable."""
    base, sep, generation = run_id.rpartition("~")
    if sep and generation.isdigit():
        return f"{base}~{int(generation) + 1}"
    return f"{run_id}~1"


def _reason(command: TerminalCommand) -> str:
    match command:
        case Complete():
            return "run completed"
        case Fail():
            return "run failed"
        case Cancelled():
            return command.reason
        case ContinueAsNew():
            return "run continued as new"


__all__ = ["DecideReport", "Decider", "RunStatus", "successor_run_id"]
