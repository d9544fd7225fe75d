"""Sticky decisions: a workflow call that waits for its step instead of being replayed.

Replaying a workflow from the top at every decision costs time in proportion to the steps it
has already taken: a run of 2,000 sequential steps would replay 2 million ``ctx.step`` calls.
When a worker runs a run's steps back to back (the step executor's chain), it keeps the
workflow call that is waiting in ``ctx.step`` alive on a thread of its own, and hands it the
step's output when the step completes; the call goes on from there and proposes its next
command, which the decision function validates as always.

This is only done when it cannot change what is decided: the call is resumed only on the very
snapshot object it suspended on, with exactly the events that its own step added since
(``step_scheduled``, ``step_started``, ``step_completed`` of that step — nothing else happened to
the run), so a replay from the top would read the same values and reach the same point. In any
other case (a signal arrived, a retry, another worker decided the run, the process restarted)
the call is dropped and the run is replayed from the top, as without this cache. The cache is
small and bounded: sleeping runs hold no thread.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

from flow_cli.errors import WorkflowError, WorkflowNotFound
from flow_cli.model import deciding
from flow_cli.model.commands import COMMAND_TYPES, ScheduleStep
from flow_cli.model.context import WorkflowContext
from flow_cli.model.decision import Proposal
from flow_cli.model.snapshot import WorkflowRunSnapshot
from flow_cli.model.status import StepStatus
from flow_cli.runtime import Runtime

MAX_CALLS = 64
"""Workflow calls kept waiting at once (each holds one parked thread)."""
STICKY_FROM = 16
"""Completed steps a run needs before its call is kept: replaying a shorter run from the top
costs less than a thread and its hand-overs (a worker draining runs of 10 to 80 steps on
SQLite: from 16 steps rather than 8, runs of 10 to 40 steps went 6-15 % faster and runs of 80
as fast; docs/benchmarks.md)."""
EVENTS_OF_ONE_STEP = 3
"""``step_scheduled``, ``step_started`` and ``step_completed`` of the awaited step."""


class _Abandoned(BaseException):
    """Unwinds a kept call that will not be resumed (a BaseException: no ``except`` eats it)."""


class _Call:
    """One workflow call running on its own thread, handing proposals back one at a time.

    The two sides take turns through two locks used as binary semaphores (the cheapest
    hand-over CPython has): exactly one of the engine and the workflow thread runs at a time.
    """

    def __init__(self, runtime: Runtime, snapshot: WorkflowRunSnapshot) -> None:
        self.run_id = snapshot.run_id
        self.snapshot = snapshot
        self.sequence = snapshot.last_sequence
        self.awaiting: str | None = None
        self.attribute_events = 0
        """``attributes_set`` events the awaited step's decision records before its
        ``step_scheduled`` (the call's new ``ctx.set_attributes`` calls)."""
        self._runtime = runtime
        self._ctx = WorkflowContext(snapshot, runtime.patches)
        self._ctx._waiter = self._wait_for_step
        self._to_workflow = threading.Lock()
        self._to_engine = threading.Lock()
        self._to_workflow.acquire()
        self._to_engine.acquire()
        self._result: Proposal | BaseException | None = None
        self._abandon = False
        self.finished = False
        self._thread = threading.Thread(target=self._main, name="flow-sticky", daemon=True)

    # -- engine side ------------------------------------------------------------------------------

    def start(self) -> Proposal:
        self._thread.start()
        return self._take_result()

    def resume(self, snapshot: WorkflowRunSnapshot) -> Proposal:
        self._ctx._snap = snapshot
        self._to_workflow.release()
        return self._take_result()

    def abandon(self) -> None:
        if self.finished:
            return
        self._abandon = True
        self._to_workflow.release()  # it unwinds on its own thread; nobody waits for it

    def _take_result(self) -> Proposal:
        self._to_engine.acquire()
        result, self._result = self._result, None
        if isinstance(result, BaseException):
            raise result
        if result is None:  # cannot happen: the call always hands something back
            raise WorkflowError(self.run_id, "StickyCall", "the workflow call ended silently")
        return result

    # -- workflow side ----------------------------------------------------------------------------

    def _main(self) -> None:
        result: Proposal | BaseException
        # This thread runs only workflow code: it is deciding for as long as it lives.
        deciding.enter(self.run_id)
        try:
            fn = self._runtime.workflows.get(self.snapshot.spec.workflow)
            if fn is None:
                raise WorkflowNotFound(self.snapshot.spec.workflow, list(self._runtime.workflows))
            result = self._runtime.call(fn, self._ctx, self.snapshot)
        except _Abandoned:
            self.finished = True
            deciding.leave(None)
            return
        except BaseException as exc:  # the engine records it as a failed decision
            result = exc
        refused = deciding.leave(None)
        if refused is not None and refused is not result:
            result = refused  # the code caught it and went on
        self.finished = True
        self._result = result
        self._to_engine.release()

    def _wait_for_step(self, command: ScheduleStep) -> None:
        """Called by ``ctx.step`` for a new step: hand the command to the engine and wait until
        the engine resumes this call with the step settled (or raise to unwind, abandoned)."""
        self.awaiting = command.step_id
        self.attribute_events = len(self._ctx._attribute_calls) - len(
            self._ctx._snap.attribute_sets
        )
        self._result = Proposal(
            command, blocking=True, attributes=tuple(self._ctx._attribute_calls)
        )
        self._to_engine.release()
        self._to_workflow.acquire()
        if self._abandon:
            raise _Abandoned()
        self.snapshot = self._ctx._snap
        self.sequence = self.snapshot.last_sequence


class StickyCode:
    """The ``WorkflowCode`` of one build, keeping calls that wait in ``ctx.step`` alive."""

    def __init__(self, runtime: Runtime, calls: StickyCalls) -> None:
        self.runtime = runtime
        self._calls = calls

    @property
    def steps(self) -> Mapping[str, Any]:
        return self.runtime.steps

    @property
    def workflows(self) -> Mapping[str, Any]:
        return self.runtime.workflows

    def propose(self, snapshot: WorkflowRunSnapshot) -> Proposal:
        call = self._calls.claim(snapshot)
        if call is not None:
            proposal = call.resume(snapshot)
        elif snapshot.step_counts.get(StepStatus.COMPLETED, 0) < STICKY_FROM:
            return self.runtime.propose(snapshot)
        else:
            call = _Call(self.runtime, snapshot)
            proposal = call.start()
        if call.finished:
            return proposal
        self._calls.keep(call)
        return proposal


class StickyCalls:
    """The kept calls of one engine, least recently used first out."""

    def __init__(self, limit: int = MAX_CALLS) -> None:
        self.limit = limit
        self._calls: OrderedDict[str, _Call] = OrderedDict()
        self._lock = threading.Lock()
        self.resumed = 0

    def claim(self, snapshot: WorkflowRunSnapshot) -> _Call | None:
        """The kept call of this run if it may go on with ``snapshot``, taken out of the cache."""
        with self._lock:
            call = self._calls.pop(snapshot.run_id, None)
        if call is None:
            return None
        awaited = snapshot.steps.get(call.awaiting or "")
        if (
            call.snapshot is snapshot
            and snapshot.last_sequence == call.sequence + call.attribute_events + EVENTS_OF_ONE_STEP
            and awaited is not None
            and awaited.status is StepStatus.COMPLETED
            and awaited.attempts == 1
        ):
            self.resumed += 1
            return call
        call.abandon()
        return None

    def keep(self, call: _Call) -> None:
        with self._lock:
            old = self._calls.pop(call.run_id, None)
            self._calls[call.run_id] = call
            evicted = []
            while len(self._calls) > self.limit:
                evicted.append(self._calls.popitem(last=False)[1])
        for gone in (old, *evicted):
            if gone is not None and gone is not call:
                gone.abandon()

    def close(self) -> None:
        with self._lock:
            calls, self._calls = list(self._calls.values()), OrderedDict()
        for call in calls:
            call.abandon()


__all__ = ["COMMAND_TYPES", "StickyCalls", "StickyCode"]
