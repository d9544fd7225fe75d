"""Executing step attempts: at least once, with durable retries.

A leased attempt is announced with ``step_started`` (carrying the lease's end), the handler runs,
and its output becomes visible only when ``step_completed`` commits. A worker that dies between
the two leaves the attempt's lease to expire; the next worker runs the *same* attempt again. A
failure schedules the next attempt as a due time in the step index — no thread sleeps on it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

from flow_cli.engine.streams import Streams, Write
from flow_cli.errors import EventConflict
from flow_cli.model.clock import Clock
from flow_cli.model.events import Event, StepCompleted, StepFailed, StepStarted
from flow_cli.model.jsonval import normalise
from flow_cli.model.snapshot import StepState, WorkflowRunSnapshot
from flow_cli.model.status import StepStatus
from flow_cli.runtime import Runtime, StepInfo
from flow_cli.store.protocol import KEEP, StepLease

log = logging.getLogger("flow.steps")

MAX_CONFLICT_RETRIES = 100


@dataclass(frozen=True, slots=True)
class StepOutcome:
    ran: bool
    """Whether the handler was invoked."""
    state: str
    """``completed``, ``retrying``, ``failed``, ``skipped`` or ``discarded``."""


class StepExecutor:
    def __init__(self, streams: Streams, runtimes: Mapping[str, Runtime], clock: Clock) -> None:
        self.streams = streams
        self.runtimes = runtimes
        self.clock = clock
        self.conflicts = 0

    def execute(
        self,
        lease: StepLease,
        worker: str,
        lease_seconds: float,
        before_call: Callable[[], None] | None = None,
    ) -> StepOutcome:
        """Run one leased attempt to its recorded end (or learn it is no longer wanted)."""
        started = self._start(lease, worker, lease_seconds)
        if started is None:
            return StepOutcome(ran=False, state="skipped")
        snap, step = started
        runtime = self.runtimes[snap.spec.runtime_build_id]
        info = StepInfo(
            run_id=snap.run_id,
            step_id=step.step_id,
            name=step.name,
            attempt=step.attempt,
            worker=worker,
        )
        if before_call is not None:
            before_call()
        try:
            output = normalise(runtime.run_step(step.name, snap.json_payload(step.input), info))
        except KeyboardInterrupt:
            raise
        except BaseException as exc:  # any failure of user code (even sys.exit) fails the attempt
            return self._fail(lease, step, type(exc).__name__, str(exc) or repr(exc))
        return self._complete(lease, step, output)

    def _start(
        self, lease: StepLease, worker: str, lease_seconds: float
    ) -> tuple[WorkflowRunSnapshot, StepState] | None:
        for _ in range(MAX_CONFLICT_RETRIES):
            snap = self.streams.load(lease.run_id)
            step = snap.steps.get(lease.step_id)
            if snap.terminal or step is None or step.status.settled:
                return None
            if snap.spec.runtime_build_id not in self.runtimes:
                return None
            now = self.clock.now()
            if lease.lease_until <= now:
                return None  # our lease ran out before we began: another worker may hold it
            if step.status is StepStatus.RUNNING and (
                step.lease_until is not None and step.lease_until > now
            ):
                return None  # another worker started this attempt and its lease is live
            if step.status is StepStatus.BACKOFF and (
                step.next_attempt_at is not None and step.next_attempt_at > now
            ):
                return None
            lease_until = now + timedelta(seconds=lease_seconds)
            event = StepStarted(
                step_id=step.step_id, attempt=step.attempt, worker=worker, lease_until=lease_until
            )
            try:
                (after,) = self.streams.commit([Write(snap, [event])], now)
            except EventConflict:
                self.conflicts += 1
                continue
            return after, after.steps[step.step_id]
        return None

    def _complete(self, lease: StepLease, started: StepState, output: object) -> StepOutcome:
        event = StepCompleted(step_id=started.step_id, attempt=started.attempt, output=output)
        return self._record(lease, started, event, "completed")

    def _fail(
        self, lease: StepLease, started: StepState, error_type: str, message: str
    ) -> StepOutcome:
        policy = started.retry
        now = self.clock.now()
        exhausted = error_type in policy.non_retryable or started.attempt >= policy.max_attempts
        next_at: datetime | None = None
        if not exhausted:
            next_at = now + timedelta(seconds=policy.delay_after(started.attempt))
        event = StepFailed(
            step_id=started.step_id,
            attempt=started.attempt,
            error_type=error_type,
            message=message,
            next_attempt_at=next_at,
            exhausted=exhausted,
        )
        return self._record(lease, started, event, "failed" if exhausted else "retrying")

    def _record(
        self, lease: StepLease, started: StepState, event: Event, state: str
    ) -> StepOutcome:
        for _ in range(MAX_CONFLICT_RETRIES):
            snap = self.streams.load(lease.run_id)
            step = snap.steps.get(started.step_id)
            if (
                snap.terminal
                or step is None
                or step.status is not StepStatus.RUNNING
                or step.attempt != started.attempt
            ):
                # Cancelled, or another worker settled this attempt first: drop our result.
                return StepOutcome(ran=True, state="discarded")
            now = self.clock.now()
            wake = state != "retrying"
            try:
                self.streams.commit([Write(snap, [event], decide_at=now if wake else KEEP)], now)
            except EventConflict:
                self.conflicts += 1
                continue
            return StepOutcome(ran=True, state=state)
        log.warning("gave up recording %s of %s after repeated conflicts", state, lease)
        return StepOutcome(ran=True, state="discarded")
