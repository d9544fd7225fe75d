"""``WorkflowRunSnapshot``: the run's state, projected from history and never stored as truth.

``project(history)`` builds it from scratch; ``snapshot.apply(envelope)`` folds one more event in,
so a worker that caches a snapshot reads only the events after ``last_sequence``. Both paths run
the same code, which is what keeps them equal (a hypothesis test checks it).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, assert_never

from flow_cli.model.carried import carried, replaced
from flow_cli.model.events import (
    AttributesSet,
    BuildUpgraded,
    CancelRequested,
    ChildAbandoned,
    ChildCancelled,
    ChildCompleted,
    ChildScheduled,
    DecisionFailed,
    DecisionRecovered,
    EventEnvelope,
    HookCreated,
    HookResolved,
    RetryRequested,
    RunCancelled,
    RunCompleted,
    RunContinuedAsNew,
    RunFailed,
    RunStarted,
    SignalReceived,
    SignalWaitStarted,
    StepCancelled,
    StepCompleted,
    StepFailed,
    StepOutcomeUnknown,
    StepScheduled,
    StepStarted,
    UpdateApplied,
    WaitCompleted,
    WaitStarted,
)
from flow_cli.model.jsonval import JsonValue
from flow_cli.model.selection import SelectProjection
from flow_cli.model.spec import WorkflowSpec
from flow_cli.model.states import (
    AppliedUpdate as AppliedUpdate,
)
from flow_cli.model.states import (
    BuildUpgrade as BuildUpgrade,
)
from flow_cli.model.states import (
    ChildState as ChildState,
)
from flow_cli.model.states import (
    HookState as HookState,
)
from flow_cli.model.states import (
    ReceivedSignal as ReceivedSignal,
)
from flow_cli.model.states import (
    SignalWaitState as SignalWaitState,
)
from flow_cli.model.states import (
    StepState as StepState,
)
from flow_cli.model.states import (
    WaitState as WaitState,
)
from flow_cli.model.status import ChildStatus, RunStatus, StepStatus, WorkflowTerminalOutcome


@dataclass(slots=True)
class WorkflowRunSnapshot(SelectProjection):
    """Everything known about one run at ``last_sequence``. A projection of history only."""

    run_id: str
    spec: WorkflowSpec
    """The run's spec as it stands: ``run_started``'s, with ``runtime_build_id`` the build the
    run is pinned to now (the last ``build_upgraded``'s, if any). Everything that asks which
    code decides the run, or which build a child or successor inherits, reads it here."""
    seed: str
    started_at: datetime
    build_upgrades: list[BuildUpgrade] = field(default_factory=list)
    """The ``build_upgraded`` events, oldest first (the recorded build is the first one's
    ``from_build``)."""
    last_sequence: int = 1
    last_event_at: datetime | None = None
    steps: dict[str, StepState] = field(default_factory=dict)
    waits: dict[str, WaitState] = field(default_factory=dict)
    signal_waits: dict[str, SignalWaitState] = field(default_factory=dict)
    signals: list[ReceivedSignal] = field(default_factory=list)
    hooks: dict[str, HookState] = field(default_factory=dict)
    children: dict[str, ChildState] = field(default_factory=dict)
    cancel_requested: bool = False
    cancel_reason: str | None = None
    cancel_sequence: int | None = None
    decided: bool = False
    """Whether any decision event has been recorded."""
    decision_error: DecisionFailed | None = None
    """The last ``decision_failed`` while the run stands failing (``None`` once it decides)."""
    """The last ``decision_failed`` data, cleared by the next decision event."""
    failing_since: datetime | None = None
    """When the current streak of failed decisions began (the retry back-off grows from it)."""
    outcome: WorkflowTerminalOutcome | None = None
    # Counters kept by ``apply`` so that status, progress and the next deadline cost the same
    # for a run of ten steps and one of ten thousand.
    step_counts: dict[StepStatus, int] = field(default_factory=dict)
    open_steps: dict[str, None] = field(default_factory=dict)
    """Ids of the steps not settled, in scheduling order (an ordered set)."""
    open_deadlines: dict[str, datetime] = field(default_factory=dict)
    """Deadlines of the timers that have not fired."""
    signal_waits_open: int = 0
    hooks_open: int = 0
    children_open: int = 0
    buffered_signals: dict[str, list[int]] = field(default_factory=dict)
    """Indexes into ``signals`` of signals no wait has taken yet, per name, oldest first."""
    waiting_signals: dict[str, list[str]] = field(default_factory=dict)
    """Signal waits still without their signal, per name, oldest first."""
    updates: dict[str, AppliedUpdate] = field(default_factory=dict)
    """The applied updates by update id, in the order they were applied."""
    selected_waits: dict[str, list[str]] = field(default_factory=dict)
    """``ctx.first`` member (``"timer:late"``) → the open-or-closed signal waits of the selects
    it belongs to: when it settles, those still open are closed."""
    attribute_sets: list[dict[str, Any]] = field(default_factory=list)
    """The ``attributes_set`` events' attributes, oldest first: the n-th
    ``ctx.set_attributes`` call of the run's code is checked against the n-th."""
    attributes: dict[str, Any] = field(default_factory=dict)
    """The run's search attributes now: the spec's, then each ``attributes_set`` over them."""
    size: int = field(default=0, compare=False)
    """Approximate bytes of the history folded in (what a cached copy costs)."""

    @classmethod
    def start(cls, envelope: EventEnvelope) -> WorkflowRunSnapshot:
        event = envelope.event
        if not isinstance(event, RunStarted) or envelope.sequence != 1:
            raise ValueError(f"run {envelope.run_id!r}: history must begin with run_started")
        return cls(
            run_id=envelope.run_id,
            spec=event.spec,
            seed=event.seed,
            started_at=envelope.recorded_at,
            last_event_at=envelope.recorded_at,
            attributes=dict(event.spec.attributes or {}),
            size=envelope.size,
        )

    # -- derived -------------------------------------------------------------------------------

    @property
    def status(self) -> RunStatus:
        if self.outcome is not None:
            return self.outcome.kind
        if self.cancel_requested:
            return RunStatus.CANCELLING
        if not self.decided:
            return RunStatus.PENDING
        counts = self.step_counts
        if counts.get(StepStatus.SCHEDULED, 0) or counts.get(StepStatus.RUNNING, 0):
            return RunStatus.RUNNING
        if self.has_open_work():
            return RunStatus.SUSPENDED
        return RunStatus.RUNNING

    @property
    def terminal(self) -> bool:
        return self.outcome is not None

    def has_open_work(self) -> bool:
        return bool(
            self.unsettled_steps
            or self.open_deadlines
            or self.signal_waits_open
            or self.hooks_open
            or self.children_open
        )

    @property
    def unsettled_steps(self) -> int:
        counts = self.step_counts
        return (
            counts.get(StepStatus.SCHEDULED, 0)
            + counts.get(StepStatus.RUNNING, 0)
            + counts.get(StepStatus.BACKOFF, 0)
        )

    def timed_out(self, wait_id: str) -> bool:
        """Whether the deadline timer of wait ``wait_id`` (``ctx.receive(..., deadline=)``,
        ``ctx.hook(..., deadline=)``) has fired. A signal wait that timed out takes no signal."""
        timer = self.waits.get(deadline_wait_id(wait_id))
        return timer is not None and timer.done

    def signal_with_key(self, signal_name: str, key: str) -> ReceivedSignal | None:
        """The signal of this name already received with idempotency key ``key``, if any."""
        for signal in self.signals:
            if signal.key == key and signal.signal_name == signal_name:
                return signal
        return None

    def next_deadline(self) -> datetime | None:
        """The earliest open timer deadline."""
        return min(self.open_deadlines.values()) if self.open_deadlines else None

    def copy(self) -> WorkflowRunSnapshot:
        """An independent copy (entries are immutable, so containers are copied shallowly)."""
        return replace(
            self,
            steps=dict(self.steps),
            waits=dict(self.waits),
            signal_waits=dict(self.signal_waits),
            signals=list(self.signals),
            build_upgrades=list(self.build_upgrades),
            hooks=dict(self.hooks),
            children=dict(self.children),
            step_counts=dict(self.step_counts),
            open_steps=dict(self.open_steps),
            open_deadlines=dict(self.open_deadlines),
            buffered_signals={k: list(v) for k, v in self.buffered_signals.items()},
            waiting_signals={k: list(v) for k, v in self.waiting_signals.items()},
            updates=dict(self.updates),
            selected_waits={k: list(v) for k, v in self.selected_waits.items()},
            attribute_sets=list(self.attribute_sets),
            attributes=dict(self.attributes),
        )

    def progress(self) -> dict[str, int]:
        """Counts for display; nothing is open once the run has ended."""
        counts = self.step_counts
        live = not self.terminal
        return {
            "steps_total": len(self.steps),
            "steps_completed": counts.get(StepStatus.COMPLETED, 0),
            "steps_failed": counts.get(StepStatus.FAILED, 0),
            "steps_cancelled": counts.get(StepStatus.CANCELLED, 0),
            "waits_open": live * (len(self.open_deadlines) + self.signal_waits_open),
            "hooks_open": live * self.hooks_open,
            "children_open": live * self.children_open,
            "events": self.last_sequence,
        }

    def _set_step(self, step: StepState) -> None:
        counts = self.step_counts
        old = self.steps.get(step.step_id)
        if old is not None:
            counts[old.status] -= 1
            if not counts[old.status]:
                del counts[old.status]
        self.steps[step.step_id] = step
        counts[step.status] = counts.get(step.status, 0) + 1
        if step.status.settled:
            self.open_steps.pop(step.step_id, None)
        else:
            self.open_steps[step.step_id] = None

    def _change_step(self, step: StepState, **changes: Any) -> None:
        self._set_step(replaced(step, **changes))

    def _end_step(
        self, envelope: EventEnvelope, step_id: str, status: StepStatus, **changes: Any
    ) -> None:
        self._change_step(
            self.steps[step_id],
            status=status,
            finished_at=envelope.recorded_at,
            lease_until=None,
            settled_sequence=envelope.sequence,
            **changes,
        )
        self._settled("step", step_id)

    def _set_child(self, child: ChildState) -> None:
        old = self.children.get(child.child_id)
        self.children_open += int(child.open) - int(old is not None and old.open)
        self.children[child.child_id] = child

    # -- projection ----------------------------------------------------------------------------

    def apply(self, envelope: EventEnvelope) -> None:
        """Fold one committed event into the snapshot (in place)."""
        if envelope.sequence != self.last_sequence + 1:
            raise ValueError(
                f"run {self.run_id!r}: event {envelope.sequence} does not follow "
                f"{self.last_sequence}; histories have no gaps"
            )
        self.last_sequence = envelope.sequence
        self.last_event_at = envelope.recorded_at
        self.size += envelope.size
        at = envelope.recorded_at
        event = envelope.event
        match event:
            case RunStarted():
                raise ValueError(f"run {self.run_id!r}: run_started can only be sequence 1")
            case StepScheduled():
                self._decision()
                self._set_step(
                    carried(
                        StepState,
                        event,
                        status=StepStatus.SCHEDULED,
                        sequence=envelope.sequence,
                        attempt=1,
                        scheduled_at=at,
                    )
                )
            case StepStarted():
                step = self.steps[event.step_id]
                again = step.status is StepStatus.RUNNING and step.attempt == event.attempt
                self._change_step(
                    step,
                    status=StepStatus.RUNNING,
                    attempt=event.attempt,
                    attempts=max(step.attempts, event.attempt),
                    lease_until=event.lease_until,
                    worker=event.worker,
                    started_at=step.started_at or at,
                    next_attempt_at=None,
                    runs=step.runs + 1 if again else 1,
                    attempt_started_at=step.attempt_started_at if again else at,
                )
            case StepOutcomeUnknown():
                self._change_step(
                    self.steps[event.step_id], status=StepStatus.UNKNOWN, lease_until=None
                )
            case StepCompleted():
                self._end_step(envelope, event.step_id, StepStatus.COMPLETED, output=event.output)
            case StepFailed():
                error: dict[str, Any] = {
                    "type": event.error_type,
                    "message": event.message,
                    "attempt": event.attempt,
                }
                if event.traceback is not None:
                    error["traceback"] = event.traceback  # for flow show; ctx does not see it
                if event.exhausted:
                    self._end_step(envelope, event.step_id, StepStatus.FAILED, error=error)
                else:
                    self._change_step(
                        self.steps[event.step_id],
                        status=StepStatus.BACKOFF,
                        attempt=event.attempt + 1,
                        error=error,
                        next_attempt_at=event.next_attempt_at,
                        lease_until=None,
                    )
            case StepCancelled():
                self._end_step(
                    envelope, event.step_id, StepStatus.CANCELLED, cancel_reason=event.reason
                )
            case WaitStarted():
                self._decision()
                self.waits[event.wait_id] = carried(
                    WaitState, event, sequence=envelope.sequence, opened_at=at
                )
                self.open_deadlines[event.wait_id] = event.deadline
            case WaitCompleted():
                wait = self.waits[event.wait_id]
                self.waits[event.wait_id] = replace(
                    wait, done=True, fired_at=at, settled_sequence=envelope.sequence
                )
                self.open_deadlines.pop(event.wait_id, None)
                self._time_out(event.wait_id)
                self._settled("timer", event.wait_id)
            case SignalWaitStarted():
                self._decision()
                self.signal_waits[event.wait_id] = carried(
                    SignalWaitState, event, sequence=envelope.sequence
                )
                self.signal_waits_open += 1
                buffered = self.buffered_signals.get(event.signal_name)
                if event.select is not None and self._select_opened(event.wait_id, event.select):
                    pass  # a member settled before this wait opened: it is closed at once
                elif buffered:
                    self._deliver(buffered.pop(0), event.wait_id)
                    if not buffered:
                        del self.buffered_signals[event.signal_name]
                else:
                    self.waiting_signals.setdefault(event.signal_name, []).append(event.wait_id)
            case SignalReceived():
                self.signals.append(carried(ReceivedSignal, event, sequence=envelope.sequence))
                # The oldest wait for this name takes it; a wait whose deadline passed first
                # (ctx.receive(..., deadline=)) takes no signal any more.
                waiting = self.waiting_signals.get(event.signal_name, [])
                taker = None
                while waiting and taker is None:
                    candidate = waiting.pop(0)
                    if not self.timed_out(candidate):
                        taker = candidate
                if not waiting:
                    self.waiting_signals.pop(event.signal_name, None)
                if taker is not None:
                    self._deliver(len(self.signals) - 1, taker)
                else:
                    self.buffered_signals.setdefault(event.signal_name, []).append(
                        len(self.signals) - 1
                    )
            case HookCreated():
                self._decision()
                self.hooks[event.hook_id] = carried(HookState, event, sequence=envelope.sequence)
                self.hooks_open += 1
            case HookResolved():
                hook = self.hooks[event.hook_id]
                self.hooks[event.hook_id] = replace(
                    hook, resolved=True, payload=event.payload, settled_sequence=envelope.sequence
                )
                self.hooks_open -= int(not hook.resolved)
                self._settled("hook", event.hook_id)
            case ChildScheduled():
                self._decision()
                self._set_child(
                    carried(
                        ChildState, event, run_id=event.child_run_id, sequence=envelope.sequence
                    )
                )
            case ChildCompleted():
                child = self.children[event.child_id]
                kind = event.outcome.get("kind") if isinstance(event.outcome, dict) else None
                status = ChildStatus.of_outcome(kind)
                self._set_child(
                    replace(
                        child,
                        status=status,
                        outcome=event.outcome,
                        settled_sequence=envelope.sequence,
                    )
                )
                self._settled("child", event.child_id)
            case ChildCancelled():
                child = self.children[event.child_id]
                self._set_child(replace(child, status=ChildStatus.CANCEL_REQUESTED))
            case ChildAbandoned():
                child = self.children[event.child_id]
                self._set_child(replace(child, status=ChildStatus.ABANDONED))
            case CancelRequested():
                if not self.cancel_requested:
                    self.cancel_requested = True
                    self.cancel_reason = event.reason
                    self.cancel_sequence = envelope.sequence
            case RetryRequested():
                for step_id in event.steps:
                    backoff = self.steps.get(step_id)
                    if backoff is not None and backoff.status is StepStatus.BACKOFF:
                        self._change_step(backoff, next_attempt_at=at)
            case DecisionFailed():
                if self.decision_error is None:
                    self.failing_since = at
                self.decision_error = event
            case DecisionRecovered():
                self.decision_error = None
                self.failing_since = None
            case BuildUpgraded():
                if event.from_build != self.spec.runtime_build_id:
                    raise ValueError(
                        f"run {self.run_id!r}: event {envelope.sequence} upgrades from build "
                        f"{event.from_build!r}, but the run is pinned to "
                        f"{self.spec.runtime_build_id!r}"
                    )
                # Not a decision: the failing state and everything open stay as they are.
                self.spec = replace(self.spec, runtime_build_id=event.to_build)
                self.build_upgrades.append(
                    carried(BuildUpgrade, event, sequence=envelope.sequence, at=at)
                )
            case UpdateApplied():
                # A fact from outside, like a signal: not a decision, so a failing run stays
                # failing until its code decides again.
                self.updates[event.update_id] = carried(
                    AppliedUpdate, event, sequence=envelope.sequence, at=at
                )
            case AttributesSet():
                self._decision()
                self.attribute_sets.append(dict(event.attributes))
                self.attributes.update(event.attributes)
            case RunCompleted():
                self._decision()
                self.outcome = WorkflowTerminalOutcome(
                    kind=RunStatus.COMPLETED, result=event.result
                )
            case RunFailed():
                self._decision()
                self.outcome = WorkflowTerminalOutcome(kind=RunStatus.FAILED, error=event.error)
            case RunCancelled():
                self._decision()
                self.outcome = WorkflowTerminalOutcome(
                    kind=RunStatus.CANCELLED, reason=event.reason, forced=event.forced
                )
            case RunContinuedAsNew():
                self._decision()
                self.outcome = WorkflowTerminalOutcome(
                    kind=RunStatus.CONTINUED_AS_NEW, successor_run_id=event.successor_run_id
                )
            case _:
                assert_never(event)

    def _decision(self) -> None:
        self.decided = True
        self.decision_error = None
        self.failing_since = None

    def _time_out(self, timer_id: str) -> None:
        """A signal wait whose deadline timer fired is no longer open."""
        if timer_id.endswith(DEADLINE_SUFFIX):
            self._close(timer_id.removesuffix(DEADLINE_SUFFIX), timed_out=True)

    def _deliver(self, signal_index: int, wait_id: str) -> None:
        signal = self.signals[signal_index]
        self.signals[signal_index] = replace(signal, wait_id=wait_id)
        wait = self.signal_waits[wait_id]
        self.signal_waits[wait_id] = replace(
            wait, delivered=True, payload=signal.payload, signal_sequence=signal.sequence
        )
        self.signal_waits_open -= 1
        self._settled("signal", wait_id)

    # -- JSON ----------------------------------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        """The stable shape of ``flow show --json`` (children statuses as recorded here)."""
        return {
            "run_id": self.run_id,
            "workflow": self.spec.workflow,
            "status": self.status.value,
            "build_id": self.spec.runtime_build_id,
            "build_upgrades": [u.to_json() for u in self.build_upgrades],
            "patches": list(self.spec.patches),
            "input": self.spec.input,
            "parent_run_id": self.spec.parent_run_id,
            "predecessor_run_id": self.spec.predecessor_run_id,
            "attributes": dict(self.attributes),
            "started_at": self.started_at.isoformat(),
            "steps": {
                s.step_id: {
                    "name": s.name,
                    "state": s.status.value,
                    "attempts": s.attempts,
                    "output": s.output,
                    "error": s.error,
                    "next_attempt_at": _iso(s.next_attempt_at),
                    "scheduled_at": _iso(s.scheduled_at),
                    "started_at": _iso(s.started_at),
                    "finished_at": _iso(s.finished_at),
                    "cancel_reason": s.cancel_reason,
                }
                for s in self.steps.values()
            },
            "waits": {
                w.wait_id: {
                    "deadline": w.deadline.isoformat(),
                    "done": w.done,
                    "fired_at": _iso(w.fired_at),
                    "state": "fired" if w.done else ("closed" if self.terminal else "pending"),
                }
                for w in self.waits.values()
            },
            "signals": {
                "waits": {
                    w.wait_id: {
                        "signal_name": w.signal_name,
                        "delivered": w.delivered,
                        "timed_out": w.timed_out,
                        "closed": w.closed,
                        "payload": w.payload,
                    }
                    for w in self.signal_waits.values()
                },
                "received": [
                    {
                        "signal_name": s.signal_name,
                        "payload": s.payload,
                        "sequence": s.sequence,
                        "wait_id": s.wait_id,
                    }
                    for s in self.signals
                ],
            },
            "hooks": {
                h.hook_id: {
                    "token": h.token,
                    "metadata": h.metadata,
                    "resolved": h.resolved,
                    "payload": h.payload,
                }
                for h in self.hooks.values()
            },
            "children": {
                c.child_id: {
                    "run_id": c.run_id,
                    "workflow": c.workflow,
                    "status": c.status.value,
                    "cancellation": c.cancellation,
                }
                for c in self.children.values()
            },
            "updates": [u.to_json() for u in self.updates.values()],
            "cancel_requested": self.cancel_requested,
            "cancel_reason": self.cancel_reason,
            "decision_error": (
                None if self.decision_error is None else self.decision_error.to_data()
            ),
            "progress": self.progress(),
            "last_sequence": self.last_sequence,
            "outcome": self.outcome.to_json() if self.outcome else None,
        }

    def json_payload(self, value: JsonValue) -> JsonValue:
        """A private copy of a stored value, so workflow code cannot mutate the snapshot."""
        return _json_copy(value) if isinstance(value, (dict, list)) else value


def _json_copy(value: JsonValue) -> JsonValue:
    """A deep copy of a JSON value (dicts, lists and immutable leaves): what ``copy.deepcopy``
    makes of it, at a fraction of the cost (workflow code reads its input on every replay)."""
    if isinstance(value, dict):
        return {key: _json_copy(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_json_copy(item) for item in value]
    return value


DEADLINE_SUFFIX = ":deadline"


def deadline_wait_id(wait_id: str) -> str:
    """The id of the timer that bounds wait or hook ``wait_id`` when given a deadline."""
    return f"{wait_id}{DEADLINE_SUFFIX}"


def project(history: Iterable[EventEnvelope]) -> WorkflowRunSnapshot:
    """Build the snapshot from a complete history (which must start at sequence 1)."""
    iterator = iter(history)
    try:
        first = next(iterator)
    except StopIteration:
        raise ValueError("an empty history has no snapshot") from None
    snapshot = WorkflowRunSnapshot.start(first)
    for envelope in iterator:
        snapshot.apply(envelope)
    return snapshot


def without_traceback(error: JsonValue) -> JsonValue:
    """A step's ``error`` as workflow code sees it: without the recorded traceback, which
    is for people (``flow show``) and would make outcomes and messages heavy."""
    if isinstance(error, dict) and "traceback" in error:
        return {k: v for k, v in error.items() if k != "traceback"}
    return error


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value else None
