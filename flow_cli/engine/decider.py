"""The decision loop: load → decide → commit.

``Decider.decide(run_id)`` takes the run's snapshot, asks the pure decision function
(``flow_cli.model.decision.decide``) what happens next, folds the events into the snapshot and
asks again while the run has more to do, then commits everything in one transaction — with the
run parked (its next wake-up time) in that same commit. Every append names the sequence it was
decided on; an ``EventConflict`` means another writer got there first, and the loop re-reads and
decides again. The step executor uses ``advance`` to commit a step's completion together with the
run's next decision.

What the decision function cannot do, because it involves other runs, happens here: child runs
and successors are created, a parent learns that its child ended, children are asked to cancel,
all in the same transaction as the decision that causes it.
"""

from __future__ import annotations

import logging
import secrets
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any, Protocol

from flow_cli.engine.observe import RunRef
from flow_cli.engine.sticky import StickyCalls, StickyCode
from flow_cli.engine.streams import Pending, Streams, stored_size
from flow_cli.errors import (
    EventConflict,
    FlowError,
    HookTokenInUse,
    RunIdTaken,
    RunNotFound,
    StoreRefused,
)
from flow_cli.model.clock import Clock
from flow_cli.model.commands import Cancelled, Complete, ContinueAsNew, Fail, TerminalCommand
from flow_cli.model.decision import (
    Append,
    Failed,
    Idle,
    Park,
    Terminate,
    WorkflowCode,
    decide,
    failed,
    successor_run_id,
    terminate,
)
from flow_cli.model.events import (
    AttributesSet,
    CancelRequested,
    ChildCompleted,
    ChildScheduled,
    Event,
    EventEnvelope,
    HookCreated,
    RunStarted,
    SignalWaitStarted,
    StepScheduled,
    StepStarted,
    WaitCompleted,
    WaitStarted,
)
from flow_cli.model.snapshot import WorkflowRunSnapshot
from flow_cli.model.spec import WorkflowSpec
from flow_cli.model.status import RunStatus, StepStatus
from flow_cli.model.trace import child_traceparent
from flow_cli.runtime import Runtime
from flow_cli.store.protocol import CommitGroup, NewRun, StepLease

_log = logging.getLogger("flow.worker")

MAX_ROUNDS = 200
"""Commits one call of ``decide`` may make (conflicts included) before handing the run back."""
MAX_DECISIONS_PER_COMMIT = 100
"""Decisions folded into one commit; a run with more to do is committed and decided again."""
SLOW_DECISION_SECONDS = 1.0
"""A decision that takes longer is reported (``Observer.decision_slow``, a warning in the
worker's log): workflow code that blocks stalls every run the worker decides."""


@dataclass(slots=True)
class DecideReport:
    decisions: int = 0
    conflicts: int = 0
    decision_failures: int = 0
    started: list[StepLease] = field(default_factory=list)
    """Steps started (leased to this worker) in the decisions' own commit."""
    handed: dict[str, WorkflowRunSnapshot] = field(default_factory=dict)
    """The snapshots of the runs of ``started`` as committed, owned by whoever runs the step
    (``StepExecutor.execute``'s ``snapshot``), which then need not read the run again."""


@dataclass(frozen=True, slots=True)
class StartSteps:
    """Start steps that decisions schedule in the same commit, leased to ``worker``."""

    worker: str
    lease_seconds: float
    limit: int


@dataclass(slots=True)
class Effects:
    """What a decision does beyond its own run, committed in the same transaction."""

    creates: list[NewRun] = field(default_factory=list)
    others: list[Pending] = field(default_factory=list)
    more: bool = False
    """The run has more to decide now (it made ``MAX_DECISIONS_PER_COMMIT`` decisions)."""


class Decider:
    """Decides runs of the builds in ``runtimes``."""

    def __init__(self, streams: Streams, runtimes: Mapping[str, Runtime], clock: Clock) -> None:
        self.streams = streams
        self.runtimes = runtimes
        self.clock = clock
        self.conflicts = 0
        self.sticky = StickyCalls()
        """Workflow calls kept waiting in ``ctx.step`` (see ``flow_cli.engine.sticky``)."""
        self.gate: Gate | None = None
        """Steps under a limit, which no decision starts in its own commit (``StepGate``)."""

    def decide(self, run_id: str) -> DecideReport:
        """Advance ``run_id`` until it waits or ends. Safe to call from several workers."""
        report = DecideReport()
        for _ in range(MAX_ROUNDS):
            try:
                if not self._round(run_id, report):
                    return report
            except (EventConflict, HookTokenInUse):
                # Another writer moved the run (or took a hook token) first: decide again on
                # fresh history.
                report.conflicts += 1
                self.conflicts += 1
                self.streams.observer.conflict()
        return report

    def decide_many(
        self,
        run_ids: Sequence[str],
        *,
        start: StartSteps | None = None,
    ) -> DecideReport:
        """Decide several runs, committing all their decisions in one transaction (a savepoint
        each); a run that conflicts is decided again on its own.

        With ``start``, a step a decision schedules is also started in the same commit, leased
        to ``start.worker``, up to ``start.limit`` of them: they are in ``report.started``.
        """
        report = DecideReport()
        prepared: list[tuple[Pending, Effects]] = []
        again: list[str] = []
        snapshots = self.streams.take_many(run_ids)
        for run_id, snap in snapshots.items():
            runtime = self.runtimes.get(snap.spec.runtime_build_id)
            if snap.terminal or runtime is None:
                self.streams.put(snap)
                continue
            pending = Pending.on(snap, self.clock.now())
            effects = self.advance(pending, runtime, report)
            if not pending.events:
                self.streams.put(snap)
                if not self.streams.store.park_run(
                    run_id, pending.expected_sequence, _decide_at(pending)
                ):
                    again.append(run_id)
                continue
            if start is not None and len(report.started) < start.limit and not effects.more:
                lease = start_scheduled(pending, start.worker, start.lease_seconds, self.gate)
                if lease is not None:
                    report.started.append(lease)
            prepared.append((pending, effects))
        if prepared:
            groups = [
                CommitGroup(
                    writes=[p.stream_write() for p in (pending, *effects.others)],
                    creates=effects.creates,
                    now=pending.now,
                )
                for pending, effects in prepared
            ]
            group = self.streams.group
            # Through a worker's group committer, these decisions share a transaction with the
            # ends of steps its threads are handing over (one commit for both, not two).
            results: Sequence[BaseException | None] = (
                group.commit_many(groups)
                if group is not None
                else self.streams.store.commit_groups(groups)
            )
            starting = {lease.run_id for lease in report.started}
            for (pending, effects), error in zip(prepared, results, strict=True):
                if error is None:
                    run_id = pending.snapshot.run_id
                    hand = run_id in starting
                    self.streams.committed([pending, *effects.others], keep_first=hand)
                    if hand:
                        report.handed[run_id] = pending.snapshot
                    if effects.more:
                        again.append(pending.snapshot.run_id)
                else:
                    if not isinstance(error, StoreRefused):  # decided again alone, recorded
                        report.conflicts += 1
                        self.conflicts += 1
                        self.streams.observer.conflict()
                    again.append(pending.snapshot.run_id)
                    run_id = pending.snapshot.run_id
                    report.started = [s for s in report.started if s.run_id != run_id]
        for run_id in again:
            more = self.decide(run_id)
            report.decisions += more.decisions
            report.conflicts += more.conflicts
            report.decision_failures += more.decision_failures
        return report

    def first_decisions(
        self, run: NewRun, runtime: Runtime, now: datetime
    ) -> tuple[Pending, Effects] | None:
        """A new run's first decisions, made before it exists, to commit with its creation.

        This is an eager start: the process that starts a run of a build it hosts decides it at
        once, so no worker has to lease, read and decide the run before its first step can
        start. ``None`` when there is nothing worth committing early (the code failed to
        decide, or the decision reaches other runs): the run is then created plainly and a
        worker decides it, meeting and reporting any failure as it would for any run.
        """
        started = RunStarted(spec=run.spec, seed=run.seed)
        envelope = EventEnvelope(
            run_id=run.run_id, sequence=1, recorded_at=now, event=started, size=stored_size(started)
        )
        pending = Pending.on(WorkflowRunSnapshot.start(envelope), now)
        report = DecideReport()
        effects = self.advance(pending, runtime, report)
        if report.decision_failures or not pending.events or effects.others:
            return None
        return pending, effects

    def _round(self, run_id: str, report: DecideReport) -> bool:
        snap = self.streams.take(run_id)
        runtime = self.runtimes.get(snap.spec.runtime_build_id)
        if snap.terminal or runtime is None:
            # A run of a build nobody here hosts waits for a worker that does; it is not failed.
            self.streams.put(snap)
            return False
        pending = Pending.on(snap, self.clock.now())
        effects = self.advance(pending, runtime, report)
        if not pending.events:
            self.streams.put(snap)  # unchanged: still a true snapshot of its sequence
            moved = not self.streams.store.park_run(
                run_id, pending.expected_sequence, _decide_at(pending)
            )
            return moved  # a fact arrived meanwhile: decide again
        try:
            self.commit(pending, effects)
        except StoreRefused as refused:
            self._refused(run_id, refused, report)
            return False
        return effects.more

    def _refused(self, run_id: str, refused: StoreRefused, report: DecideReport) -> None:
        """The database refused the run's decision (a value it cannot store): record that as
        the run's failed decision, retried with the usual back-off, so that the run shows as
        failing its decision (``flow doctor``) and other runs' commits go on. Raises
        ``EventConflict`` when the run moved meanwhile (the caller decides again)."""
        snap = self.streams.take(run_id)
        pending = Pending.on(snap, self.clock.now())
        failure = failed(snap, refused, pending.now, error_type=StoreRefused.__name__)
        report.decision_failures += 1
        self.streams.observer.decisions(0, 1)
        if failure.event is None:  # recorded already: wait for the retry
            self.streams.put(snap)
            self.streams.store.park_run(run_id, pending.expected_sequence, failure.retry_at)
            return
        pending.add([failure.event])
        pending.decide_at = failure.retry_at
        self.commit(pending, Effects())

    def advance(
        self, pending: Pending, runtime: Runtime, report: DecideReport, *, sticky: bool = False
    ) -> Effects:
        """Fold the run's next decisions into ``pending`` until it waits or ends.

        Sets ``pending.decide_at`` to when the run should be decided next. With ``sticky`` (the
        step executor's chain), a workflow call waiting in ``ctx.step`` is kept alive and
        resumed instead of replayed (``flow_cli.engine.sticky``).
        """
        made, failed_before = report.decisions, report.decision_failures
        try:
            return self._advance(pending, runtime, report, sticky)
        finally:
            self.streams.observer.decisions(
                report.decisions - made, report.decision_failures - failed_before
            )

    def _advance(
        self, pending: Pending, runtime: Runtime, report: DecideReport, sticky: bool
    ) -> Effects:
        effects = Effects()
        code: WorkflowCode = StickyCode(runtime, self.sticky) if sticky else runtime
        for _ in range(MAX_DECISIONS_PER_COMMIT):
            snap = pending.snapshot
            began = time.monotonic()
            decision = decide(snap, code, pending.now)
            took = time.monotonic() - began
            if self.streams.observer.timing_decisions:
                self.streams.observer.decided(RunRef.of(snap), took)
            if took > SLOW_DECISION_SECONDS:
                self.streams.observer.decision_slow(RunRef.of(snap), took)
            if isinstance(decision, Append):
                problem = self._check_new(snap, decision.events, effects)
                if problem is not None:
                    decision = failed(snap, problem, pending.now)
            match decision:
                case Idle():
                    pending.decide_at = None
                    return effects
                case Append(events=events, settles=settles):
                    if not all(isinstance(e, WaitCompleted) for e in events):
                        report.decisions += 1
                    effects.creates.extend(self._children(snap, events, pending.now))
                    pending.add(events)
                    if settles and not _settled_at_once(pending, events):
                        pending.decide_at = pending.snapshot.next_deadline()
                        return effects
                case Park(until=until):
                    report.decisions += 1
                    pending.decide_at = until
                    return effects
                case Failed(event=event, retry_at=retry_at):
                    report.decision_failures += 1
                    if event is not None:
                        pending.add([event])
                    pending.decide_at = retry_at
                    return effects
                case Terminate():
                    report.decisions += 1
                    problem = self._end(pending, decision, effects)
                    if problem is not None:
                        failure = failed(snap, problem, pending.now)
                        report.decision_failures += 1
                        if failure.event is not None:
                            pending.add([failure.event])
                        pending.decide_at = failure.retry_at
                    return effects
        effects.more = True
        pending.decide_at = pending.now
        return effects

    def commit(self, pending: Pending, effects: Effects, *, keep: bool = False) -> None:
        """Commit the run's events with everything they cause elsewhere, in one transaction.

        With ``keep`` the caller goes on owning ``pending``'s snapshot.
        """
        self.streams.commit_pending([pending, *effects.others], effects.creates, keep_first=keep)

    def terminate(
        self, snap: WorkflowRunSnapshot, command: TerminalCommand, now: datetime, reason: str
    ) -> None:
        """End the run with ``command``: closing events (rule 4), children per policy, the
        parent told, a successor created, all in one commit. Raises ``EventConflict``."""
        pending = Pending.on(snap.copy(), now)
        effects = Effects()
        problem = self._end(pending, terminate(pending.snapshot, command, reason), effects)
        if problem is not None:
            raise problem
        self.commit(pending, effects)

    # -- effects on other runs ---------------------------------------------------------------------

    def _check_new(
        self, snap: WorkflowRunSnapshot, events: tuple[Event, ...], effects: Effects
    ) -> FlowError | None:
        """Run ids and hook tokens the decision claims must be free, or the append would fail
        for ever; found here, it is a failed decision that fixed code can recover from."""
        taken = {new.run_id for new in effects.creates}
        for event in events:
            if isinstance(event, ChildScheduled):
                if event.child_run_id in taken or self.streams.store.get_run(event.child_run_id):
                    return RunIdTaken(event.child_run_id)
            elif isinstance(event, HookCreated):
                owner = self.streams.store.find_hook(event.token)
                if owner is not None and (owner.run_id, owner.hook_id) != (
                    snap.run_id,
                    event.hook_id,
                ):
                    return HookTokenInUse(event.token, owner.run_id, owner.hook_id)
        return None

    def _declared_signals(self, build_id: str, workflow: str) -> tuple[str, ...] | None:
        runtime = self.runtimes.get(build_id)
        return runtime.signals.get(workflow) if runtime is not None else None

    def _children(
        self, snap: WorkflowRunSnapshot, events: tuple[Event, ...], now: datetime
    ) -> list[NewRun]:
        return [
            NewRun(
                run_id=event.child_run_id,
                spec=WorkflowSpec(
                    workflow=event.workflow,
                    input=event.input,
                    runtime_build_id=snap.spec.runtime_build_id,
                    patches=snap.spec.patches,
                    parent_run_id=snap.run_id,
                    parent_child_id=event.child_id,
                    signals=self._declared_signals(snap.spec.runtime_build_id, event.workflow),
                    traceparent=child_traceparent(snap.spec.traceparent, snap.run_id),
                    attributes=self._child_attributes(snap, event),
                    priority=snap.spec.priority,
                ),
                seed=secrets.token_hex(16),
                decide_at=now,
            )
            for event in events
            if isinstance(event, ChildScheduled)
        ]

    def _child_attributes(self, snap: WorkflowRunSnapshot, event: ChildScheduled) -> Any:
        """The search attributes of the child workflow's ``attributes=`` function; a function
        that fails leaves the child without them, logged at warning level (the parent's
        decision is recorded already)."""
        runtime = self.runtimes.get(snap.spec.runtime_build_id)
        if runtime is None or event.workflow not in runtime.attributes:
            return None
        try:
            return runtime.start_attributes(event.workflow, event.input)
        except FlowError as exc:
            _log.warning(
                "run %s child %s: no search attributes: %s", snap.run_id, event.child_id, exc
            )
            return None

    def _end(self, pending: Pending, ending: Terminate, effects: Effects) -> FlowError | None:
        """Fold the terminal events into ``pending`` and collect what they cause elsewhere."""
        snap = pending.snapshot
        now = pending.now
        command = ending.command
        outcome: dict[str, object] = {}
        match command:
            case Complete():
                outcome = {"kind": "Completed", "result": command.result}
            case Fail():
                outcome = {"kind": "Failed", "error": command.error}
            case Cancelled():
                outcome = {"kind": "Cancelled", "reason": command.reason}
                if command.forced:
                    outcome["forced"] = True
            case ContinueAsNew():
                successor = self._successor(snap, command, now, ending.events)
                if self.streams.store.get_run(successor.run_id) is not None:
                    return RunIdTaken(successor.run_id)
                effects.creates.append(successor)
                carried = self._carry(successor, snap, now)
                if carried is not None:
                    effects.others.append(carried)
        # Cancellation policy "cancel": ask each open child to stop, in the same transaction.
        for child in snap.children.values():
            if child.open and child.cancellation == "cancel":
                write = self._cancel_child(child.run_id, f"parent {snap.run_id}: {ending.reason}")
                if write is not None:
                    effects.others.append(write)
        # A child that ends (for good) tells its parent in the same transaction.
        if outcome and snap.spec.parent_run_id and snap.spec.parent_child_id:
            write = self._notify_parent(snap, outcome, now)
            if write is not None:
                effects.others.append(write)
        pending.add(ending.events)
        pending.decide_at = None
        return None

    def _successor(
        self,
        snap: WorkflowRunSnapshot,
        command: ContinueAsNew,
        now: datetime,
        ending: Sequence[Event] = (),
    ) -> NewRun:
        # The successor starts with the run's attributes, those its last decision set included.
        attributes = dict(snap.attributes)
        for event in ending:
            if isinstance(event, AttributesSet):
                attributes.update(event.attributes)
        return NewRun(
            run_id=successor_run_id(snap.run_id),
            spec=replace(
                snap.spec.successor(command.input, snap.run_id, snap.started_at),
                attributes=attributes or None,
            ),
            seed=secrets.token_hex(16),
            decide_at=now,
        )

    def _carry(self, successor: NewRun, snap: WorkflowRunSnapshot, now: datetime) -> Pending | None:
        """What the successor starts with besides ``run_started``, in the same transaction:
        the signals no wait took (in order), then a cancellation request. Neither may be shed
        by continuing as new."""
        from flow_cli.model.signals import carried_signals

        events: list[Event] = list(carried_signals(snap))
        if snap.cancel_requested:
            events.append(CancelRequested(reason=snap.cancel_reason or "cancelled"))
        if not events:
            return None
        started = EventEnvelope(
            run_id=successor.run_id,
            sequence=1,
            recorded_at=now,
            event=RunStarted(spec=successor.spec, seed=successor.seed),
        )
        write = Pending.on(WorkflowRunSnapshot.start(started), now)
        write.add(events)
        write.decide_at = now
        return write

    def _cancel_child(self, child_run_id: str, reason: str) -> Pending | None:
        now = self.clock.now()
        try:
            child = self.streams.load(child_run_id)
            # A child that continued as new lives on in its successor: cancel the live run.
            while child.outcome is not None and child.outcome.successor_run_id is not None:
                child = self.streams.load(child.outcome.successor_run_id)
        except RunNotFound:
            return None
        if child.terminal or child.cancel_requested:
            return None
        write = Pending.on(child, now)
        write.add([CancelRequested(reason=reason)])
        write.decide_at = now
        return write

    def _notify_parent(
        self, snap: WorkflowRunSnapshot, outcome: dict[str, object], now: datetime
    ) -> Pending | None:
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
        write = Pending.on(parent, now)
        write.add([ChildCompleted(child_id=child_id, child_run_id=snap.run_id, outcome=outcome)])
        write.decide_at = now
        return write


class Gate(Protocol):
    def holds(self, name: str) -> bool: ...

    def starts_in_commit(self, name: str) -> bool: ...

    def holds_run(self, workflow: str) -> bool: ...


def startable_step(
    pending: Pending, gate: Gate | None = None, *, in_commit: bool = False
) -> str | None:
    """The first step the decisions in ``pending`` just scheduled that can start now (one
    ``gate`` holds, a step under a limit, is left for a lease that counts it; ``in_commit``:
    started in the decision's own commit, which may count it, see ``LimitedStarts``)."""
    snap = pending.snapshot
    if snap.terminal:
        return None
    scheduled = [e.step_id for e in pending.events if isinstance(e, StepScheduled)]
    for step_id in scheduled:
        step = snap.steps[step_id]
        if step.status is not StepStatus.SCHEDULED:
            continue
        if gate is None or not gate.holds(step.name):
            return step_id
        if in_commit and gate.starts_in_commit(step.name):
            return step_id
    return None


def start_scheduled(
    pending: Pending, worker: str, lease_seconds: float, gate: Gate | None = None
) -> StepLease | None:
    """Lease to ``worker`` the first step the decisions in ``pending`` just scheduled, recording
    its ``step_started`` in the same commit: the worker runs it without another transaction."""
    step_id = startable_step(pending, gate, in_commit=True)
    if step_id is None:
        return None
    step = pending.snapshot.steps[step_id]
    until = pending.now + timedelta(seconds=lease_seconds)
    started = StepStarted(step_id=step_id, attempt=step.attempt, worker=worker, lease_until=until)
    pending.add([started])
    return StepLease(
        run_id=pending.snapshot.run_id, step_id=step_id, attempt=step.attempt, lease_until=until
    )


def _settled_at_once(pending: Pending, events: tuple[Event, ...]) -> bool:
    """Whether a wait just opened is already over: a signal that came first was matched to it,
    or its deadline has passed. The code must then be asked again at once."""
    snap = pending.snapshot
    for event in events:
        if isinstance(event, SignalWaitStarted) and snap.signal_waits[event.wait_id].delivered:
            return True
        if isinstance(event, WaitStarted) and event.deadline <= pending.now:
            return True
    return False


def _decide_at(pending: Pending) -> datetime | None:
    value = pending.decide_at
    return value if isinstance(value, datetime) or value is None else pending.now


__all__ = ["DecideReport", "Decider", "Effects", "RunIdTaken", "RunStatus", "successor_run_id"]
