"""Executing step attempts: at least once, with durable retries, one commit per step.

Leasing an attempt records its ``step_started`` in the same transaction (the store does both).
The handler runs, and its output becomes visible only when ``step_completed`` commits. That
commit also carries the run's next decision (the executor asks the decision loop, which it can
because it hosts the run's build): the next step is scheduled, the run is parked, and when the
next step can start at once its ``step_started`` is recorded too, leased to this worker, which
then runs it — a sequential workflow costs one commit per step.

A worker that dies between ``step_started`` and ``step_completed`` leaves the attempt's lease
to expire; the next worker runs the *same* attempt again. A failure schedules the next attempt
as a due time in the step index — no thread sleeps on it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta

from flow_cli.engine.decider import Decider, DecideReport, Effects, start_scheduled
from flow_cli.engine.leases import LeaseKeeper
from flow_cli.engine.observe import RunRef, StepRef
from flow_cli.engine.streams import Pending, Streams
from flow_cli.errors import EventConflict, HookTokenInUse
from flow_cli.model.clock import Clock
from flow_cli.model.events import Event, StepCompleted, StepFailed
from flow_cli.model.jsonval import normalise
from flow_cli.model.retry import RetryPolicy
from flow_cli.model.snapshot import WorkflowRunSnapshot
from flow_cli.model.status import StepStatus
from flow_cli.runtime import Runtime, StepInfo
from flow_cli.store.protocol import StepLease

log = logging.getLogger("flow.steps")

MAX_CONFLICT_RETRIES = 100
MAX_CHAIN = 10_000
"""Steps one call may run back to back for one run before handing it back to the scheduler."""


@dataclass(frozen=True, slots=True)
class StepOutcome:
    ran: bool
    """Whether a handler was invoked."""
    state: str
    """Of the last attempt: ``completed``, ``retrying``, ``failed``, ``skipped`` or
    ``discarded``."""
    steps_run: int = 0
    """Handlers invoked, the first attempt and the ones that followed it in this worker."""
    decisions: int = 0
    """Decisions made with the attempts' ends."""
    decision_failures: int = 0


class StepExecutor:
    def __init__(
        self,
        streams: Streams,
        runtimes: Mapping[str, Runtime],
        clock: Clock,
        decider: Decider,
    ) -> None:
        self.streams = streams
        self.runtimes = runtimes
        self.clock = clock
        self.decider = decider
        self.conflicts = 0

    def execute(
        self,
        lease: StepLease,
        worker: str,
        lease_seconds: float,
        before_call: Callable[[], None] | None = None,
        keeper: LeaseKeeper | None = None,
    ) -> StepOutcome:
        """Run a leased attempt (its ``step_started`` is recorded) to its recorded end, then the
        steps of the same run that can start at once, each leased to this worker."""
        report = DecideReport()
        current: StepLease | None = lease
        owned: WorkflowRunSnapshot | None = None
        ran = 0
        state = "skipped"
        try:
            for index in range(MAX_CHAIN):
                if current is None:
                    break
                state, invoked, following, owned = self._one(
                    current,
                    owned,
                    worker,
                    lease_seconds,
                    before_call,
                    index < MAX_CHAIN - 1,
                    report,
                    keeper,
                )
                ran += invoked
                if keeper is not None:
                    keeper.drop(current)
                    if following is not None:
                        keeper.hold(following)
                current = following
        finally:
            # A chained attempt that ends in an error (the database went away mid-chain) must
            # stop being renewed, or its lease would never expire and no worker would retry it.
            if keeper is not None and current is not None:
                keeper.drop(current)
        return StepOutcome(
            ran=ran > 0,
            state=state,
            steps_run=ran,
            decisions=report.decisions,
            decision_failures=report.decision_failures,
        )

    def _one(
        self,
        lease: StepLease,
        owned: WorkflowRunSnapshot | None,
        worker: str,
        lease_seconds: float,
        before_call: Callable[[], None] | None,
        may_chain: bool,
        report: DecideReport,
        keeper: LeaseKeeper | None = None,
    ) -> tuple[str, int, StepLease | None, WorkflowRunSnapshot | None]:
        snap = owned if owned is not None else self.streams.take(lease.run_id)
        step = snap.steps.get(lease.step_id)
        runtime = self.runtimes.get(snap.spec.runtime_build_id)
        if (
            snap.terminal
            or runtime is None
            or step is None
            or step.status is not StepStatus.RUNNING
            or step.attempt != lease.attempt
            or step.worker != worker
            or (step.lease_until is not None and step.lease_until <= self.clock.now())
        ):
            # Settled, cancelled, or our lease ran out and another worker owns the attempt now.
            self.streams.put(snap)
            return "skipped", 0, None, None
        info = StepInfo(
            run_id=snap.run_id,
            step_id=step.step_id,
            name=step.name,
            attempt=step.attempt,
            worker=worker,
        )
        payload = snap.json_payload(step.input)
        observer = self.streams.observer
        # Taken now, and only for a listener: once recorded, the snapshot is the cache's.
        ref = (
            StepRef(RunRef.of(snap), step.step_id, step.name, step.attempt)
            if observer.listening
            else None
        )
        if before_call is not None:
            before_call()
        event: Event
        began = time.monotonic()
        try:
            output = normalise(runtime.run_step(step.name, payload, info))
            event = StepCompleted(step_id=step.step_id, attempt=step.attempt, output=output)
            state = "completed"
        except KeyboardInterrupt:
            self.streams.put(snap)
            raise
        except BaseException as exc:  # any failure of user code (even sys.exit) fails the attempt
            event = self._failure(step.step_id, step.attempt, step.retry, exc)
            state = (
                "retrying" if isinstance(event, StepFailed) and not event.exhausted else "failed"
            )
        seconds = time.monotonic() - began
        recorded, following, after = self._record(
            snap, lease, event, worker, lease_seconds if may_chain else None, report
        )
        if recorded is None:
            # Another worker took the attempt: our lease ran out while the handler ran.
            if keeper is not None:
                keeper.lost(lease)
            else:
                observer.lease_lost(lease)
        state = state if recorded else "discarded"
        if ref is not None:
            observer.step_finished(ref, state, seconds)
        return state, 1, following, after

    def _failure(
        self, step_id: str, attempt: int, policy: RetryPolicy, exc: BaseException
    ) -> StepFailed:
        error_type = type(exc).__name__
        exhausted = error_type in policy.non_retryable or attempt >= policy.max_attempts
        next_at = None
        if not exhausted:
            next_at = self.clock.now() + timedelta(seconds=policy.delay_after(attempt))
        return StepFailed(
            step_id=step_id,
            attempt=attempt,
            error_type=error_type,
            message=str(exc) or repr(exc),
            next_attempt_at=next_at,
            exhausted=exhausted,
        )

    def _record(
        self,
        snap: WorkflowRunSnapshot,
        lease: StepLease,
        event: Event,
        worker: str,
        lease_seconds: float | None,
        report: DecideReport,
    ) -> tuple[bool | None, StepLease | None, WorkflowRunSnapshot | None]:
        """Commit the attempt's end with the run's next decision. Returns whether it was
        recorded (``None``: not, because another worker took the attempt), and the next
        attempt this worker leased with its owned snapshot."""
        current: WorkflowRunSnapshot | None = snap
        for _ in range(MAX_CONFLICT_RETRIES):
            if current is None:
                current = self.streams.take(lease.run_id)
            step = current.steps.get(lease.step_id)
            if (
                current.terminal
                or step is None
                or step.status is not StepStatus.RUNNING
                or step.attempt != lease.attempt
            ):
                # Cancelled, or another worker settled this attempt first: drop our result.
                self.streams.put(current)
                ended = current.terminal or step is None or step.status is StepStatus.CANCELLED
                return (False if ended else None), None, None
            now = self.clock.now()
            pending = Pending.on(current, now)
            pending.add([event])
            effects = Effects()
            following: StepLease | None = None
            # The run may have been re-pinned to another build (`flow upgrade`) while the
            # handler ran: its next decision belongs to that build's code, never to ours.
            deciding = self.runtimes.get(current.spec.runtime_build_id)
            if isinstance(event, StepFailed) and not event.exhausted:
                pass  # the retry is due in the step index; nothing to decide
            elif deciding is None:
                pending.decide_at = now  # a worker of the run's build decides it
            else:
                effects = self.decider.advance(pending, deciding, report, sticky=True)
                if not effects.more and lease_seconds is not None:
                    following = start_scheduled(pending, worker, lease_seconds)
            try:
                self.decider.commit(pending, effects, keep=following is not None)
            except (EventConflict, HookTokenInUse):
                self.conflicts += 1
                self.streams.observer.conflict()
                current = None  # dropped; read again
                continue
            return True, following, (pending.snapshot if following is not None else None)
        log.warning("gave up recording the end of %s after repeated conflicts", lease)
        return False, None, None
