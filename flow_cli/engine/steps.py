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
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from enum import Enum

from flow_cli.engine.decider import Decider, DecideReport, Effects, start_scheduled
from flow_cli.engine.group_commit import GroupCommitter
from flow_cli.engine.leases import LeaseKeeper
from flow_cli.engine.observe import RunRef, StepRef
from flow_cli.engine.pauses import PauseGate
from flow_cli.engine.streams import Pending, Streams
from flow_cli.errors import (
    EventConflict,
    HeartbeatTimedOut,
    HookTokenInUse,
    StepOutputNotJSON,
    StepTimedOut,
    StoreRefused,
)
from flow_cli.model.clock import Clock
from flow_cli.model.events import Event, StepCompleted, StepFailed, StepOutcomeUnknown
from flow_cli.model.jsonval import JsonValue, PayloadTooLarge, normalise, storable_text
from flow_cli.model.retry import RetryPolicy
from flow_cli.model.snapshot import StepState, WorkflowRunSnapshot
from flow_cli.model.status import StepStatus
from flow_cli.model.trace import step_trace_context
from flow_cli.model.tracebacks import code_traceback
from flow_cli.runtime import AttemptControl, AttemptVanished, Runtime, StepInfo
from flow_cli.store.protocol import CommitGroup, StepHeartbeat, StepLease, StepRenewal

log = logging.getLogger("flow.steps")

MAX_CONFLICT_RETRIES = 100
MAX_CHAIN = 10_000
HANDOVER_FRESH = timedelta(seconds=1)
"""How old a run's snapshot handed over with its attempt may be and still be run on without
reading the run again (the attempt waited that long, at most, in the worker's queue)."""
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
    deferred: bool = False
    """The last attempt's end was handed to the group committer (``Streams.group``), which
    records it and then drops the attempt's lease."""


class Refusal(Enum):
    """How far the database's refusals of an attempt's end have gone (``_after_refusal``)."""

    NONE = "none"
    """Not refused: the end goes with the run's next decision."""
    ALONE = "alone"
    """The end with its decision was refused: the end goes alone, and a worker decides the
    run afterwards (recording a refusal of that decision as the run's failed decision)."""
    ALONE_FAILED = "alone-failed"
    """The end itself was refused (its output): it becomes a failure without retry."""


def _after_refusal(refused: Refusal, event: Event, error: StoreRefused) -> tuple[Refusal, Event]:
    """The next try after the database refused an attempt's end: first the end without the
    decision that came with it (the decision may hold what was refused), then, if the end
    itself is refused, the attempt failed without retry (its handler must not run again: its
    side effects happened). Raises ``error`` once even that was refused."""
    if refused is Refusal.NONE:
        return Refusal.ALONE, event
    if refused is Refusal.ALONE and isinstance(event, StepCompleted | StepFailed):
        failure = StepFailed(
            step_id=event.step_id,
            attempt=event.attempt,
            error_type=StoreRefused.__name__,
            message=storable_text(str(error)),
            next_attempt_at=None,
            exhausted=True,
        )
        return Refusal.ALONE_FAILED, failure
    raise error


class StepExecutor:
    def __init__(
        self,
        streams: Streams,
        runtimes: Mapping[str, Runtime],
        clock: Clock,
        decider: Decider,
        pauses: PauseGate | None = None,
    ) -> None:
        self.streams = streams
        self.runtimes = runtimes
        self.clock = clock
        self.decider = decider
        self.pauses = pauses
        """Asked before a step's end is committed with the run's next decision: a run a pause
        holds gets its step's end alone (``flow pause``: attempts in flight finish)."""
        self.conflicts = 0

    def execute(
        self,
        lease: StepLease,
        worker: str,
        lease_seconds: float,
        before_call: Callable[[], None] | None = None,
        keeper: LeaseKeeper | None = None,
        snapshot: WorkflowRunSnapshot | None = None,
    ) -> StepOutcome:
        """Run a leased attempt (its ``step_started`` is recorded) to its recorded end, then the
        steps of the same run that can start at once, each leased to this worker.

        With a group committer (``Streams.group``: a worker's step threads), an end after which
        the run waits is handed to the committer and this returns before it is committed
        (``StepOutcome.deferred``); the committer then drops its lease from ``keeper``.

        ``snapshot`` (owned by this call from now on) is the run as the commit that started
        the attempt left it: recorded less than ``HANDOVER_FRESH`` ago, the attempt runs on
        it without reading the run again. Whatever was recorded since (a cancellation, say)
        is met when the attempt's end is committed: its expected sequence is then stale, the
        run is read again and decided again, as after any conflict.
        """
        report = DecideReport()
        current: StepLease | None = lease
        owned: WorkflowRunSnapshot | None = None
        if snapshot is not None:
            recorded = snapshot.last_event_at
            if recorded is not None and self.clock.now() - recorded <= HANDOVER_FRESH:
                owned = snapshot
            else:
                self.streams.put(snapshot)  # true, but old: read what came after it
        ran = 0
        state = "skipped"
        deferred = False
        try:
            for index in range(MAX_CHAIN):
                if current is None:
                    break
                state, invoked, following, owned, deferred = self._one(
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
                    if not deferred:  # else the committer drops it once the end is recorded
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
            deferred=deferred,
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
    ) -> tuple[str, int, StepLease | None, WorkflowRunSnapshot | None, bool]:
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
            return "skipped", 0, None, None, False
        info = StepInfo(
            run_id=snap.run_id,
            step_id=step.step_id,
            name=step.name,
            attempt=step.attempt,
            worker=worker,
            trace_context=step_trace_context(
                snap.spec.traceparent, snap.run_id, step.step_id, step.attempt
            ),
            control=AttemptControl(self._last_heartbeat(lease, worker)),
        )
        if keeper is not None:
            keeper.watch(lease, info.control)
        payload = snap.json_payload(step.input)
        observer = self.streams.observer
        # Taken now, and only for a listener: once recorded, the snapshot is the cache's.
        ref = (
            StepRef(RunRef.of(snap), step.step_id, step.name, step.attempt)
            if observer.listening
            else None
        )
        event: Event
        options = runtime.step_options.get(step.name)
        limit = step.timeout
        silence = step.heartbeat_timeout
        unknown = False
        if options is not None:  # the handler's defaults, where the workflow gave none
            limit = options.timeout if limit is None else limit
            silence = options.heartbeat_timeout if silence is None else silence
            unknown = options.on_lost == "unknown"
        found = self._lost_attempt(lease, step, unknown, limit, silence)
        invoked = 0 if found is not None else 1
        if before_call is not None and found is None:
            before_call()
        began = time.monotonic()
        if found is not None:
            event = found
        else:
            try:
                if limit or silence:
                    returned = bounded_call(runtime, step.name, payload, info, limit, silence)
                else:
                    returned = runtime.run_step(step.name, payload, info)
            except KeyboardInterrupt:
                self.streams.put(snap)
                raise
            except AttemptVanished:
                self._vanished(lease, info)
                self.streams.put(snap)
                return "vanished", 1, None, None, False
            except (StepTimedOut, HeartbeatTimedOut) as exc:
                event = (
                    StepOutcomeUnknown(step_id=step.step_id, attempt=step.attempt, reason=str(exc))
                    if unknown
                    else self._failure(step.step_id, step.attempt, step.retry, exc)
                )
            except BaseException as exc:  # any failure of user code (even sys.exit) fails it
                event = self._failure(step.step_id, step.attempt, step.retry, exc)
            else:
                event = self._output(step.name, step.step_id, step.attempt, returned)
        state = (
            "completed"
            if isinstance(event, StepCompleted)
            else "unknown"
            if isinstance(event, StepOutcomeUnknown)
            else "retrying"
            if isinstance(event, StepFailed) and not event.exhausted
            else "failed"
        )
        seconds = time.monotonic() - began

        def settled(recorded: bool | None) -> str:
            if recorded is None:
                # Another worker took the attempt: our lease ran out while the handler ran.
                if keeper is not None:
                    keeper.lost(lease)
                else:
                    observer.lease_lost(lease)
            final = state if recorded else "discarded"
            if ref is not None:
                observer.step_finished(ref, final, seconds)
            return final

        def later(recorded: bool | None, error: BaseException | None) -> None:
            try:
                if error is not None:
                    # As a step thread does with a store error: the lease expires, and this
                    # attempt runs again (at least once).
                    log.warning("%s", error)
                else:
                    settled(recorded)
            finally:
                if keeper is not None:
                    keeper.drop(lease)

        recorded, following, after, deferred = self._record(
            snap, lease, event, worker, lease_seconds if may_chain else None, report, later
        )
        if deferred:
            return state, invoked, None, None, True
        return settled(recorded), invoked, following, after, False

    def _lost_attempt(
        self,
        lease: StepLease,
        step: StepState,
        unknown: bool,
        limit: float | None,
        silence: float | None,
    ) -> Event | None:
        """The end of an attempt this worker took over from one that vanished (its lease ran
        out), when it must not simply run again: unknown (``on_lost="unknown"``), past its
        timeout counted from its first start, or silent past its heartbeat timeout (since its
        last stored heartbeat, or its first start when it sent none)."""
        if step.runs <= 1:
            return None
        if unknown:
            return StepOutcomeUnknown(
                step_id=step.step_id,
                attempt=step.attempt,
                reason="the worker running the attempt was lost before it recorded an outcome",
            )
        started = step.attempt_started_at
        if started is None:
            return None
        now = self.clock.now()
        error: Exception | None = None
        if limit is not None and (now - started).total_seconds() >= limit:
            error = StepTimedOut(step.name, limit)
        elif silence is not None:
            heard = started
            for beat in self.streams.store.step_heartbeats(lease.run_id):
                if beat.step_id == step.step_id and beat.attempt == step.attempt:
                    heard = max(heard, beat.at)
            if (now - heard).total_seconds() >= silence:
                error = HeartbeatTimedOut(step.name, silence)
        if error is None:
            return None
        return self._failure(step.step_id, step.attempt, step.retry, error)

    def _vanished(self, lease: StepLease, info: StepInfo) -> None:
        """A test's fake made this worker vanish mid-attempt: store its heartbeat as its last
        renewal would have, and leave the lease to lapse."""
        beats, details = info.control.latest()
        if beats:
            beat = StepHeartbeat(
                step_id=lease.step_id,
                attempt=lease.attempt,
                worker=info.worker,
                details=details,
                at=self.clock.now(),
            )
            self.streams.store.renew_step(
                StepRenewal(lease.run_id, lease.step_id, info.worker, lease.lease_until, beat)
            )

    def _last_heartbeat(self, lease: StepLease, worker: str) -> Callable[[], JsonValue]:
        """Reads the details of the step's last stored heartbeat sent by an earlier attempt,
        or by an earlier run of this one (whose worker vanished): not one this run stored."""
        store = self.streams.store
        began = self.clock.now()

        def load() -> JsonValue:
            for beat in store.step_heartbeats(lease.run_id):
                if beat.step_id == lease.step_id and not (
                    beat.attempt == lease.attempt and beat.worker == worker and beat.at >= began
                ):
                    return beat.details
            return None

        return load

    def _output(
        self, name: str, step_id: str, attempt: int, returned: object
    ) -> StepCompleted | StepFailed:
        """The attempt's end for what its handler returned: completed with the value as it will
        read back, or failed without retry when the value cannot be stored (not JSON, a NUL,
        too large). Retrying would run the handler's side effects again for the same end."""
        try:
            output = normalise(returned, string_keys=True)
        except PayloadTooLarge as exc:
            error_type = type(exc).__name__
            message = f"Step {name!r} returned a value Flow cannot store: {exc}."
        except RecursionError:
            error_type = StepOutputNotJSON.__name__
            message = str(StepOutputNotJSON(name, "it is nested too deeply"))
        except (TypeError, ValueError) as exc:
            error_type = StepOutputNotJSON.__name__
            message = str(StepOutputNotJSON(name, str(exc)))
        else:
            return StepCompleted(step_id=step_id, attempt=attempt, output=output)
        return StepFailed(
            step_id=step_id,
            attempt=attempt,
            error_type=error_type,
            message=storable_text(message),
            next_attempt_at=None,
            exhausted=True,
        )

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
            message=storable_text(str(exc) or repr(exc)),
            next_attempt_at=next_at,
            exhausted=exhausted,
            traceback=code_traceback(exc),
        )

    def _record(
        self,
        snap: WorkflowRunSnapshot,
        lease: StepLease,
        event: Event,
        worker: str,
        lease_seconds: float | None,
        report: DecideReport,
        later: Later | None = None,
    ) -> tuple[bool | None, StepLease | None, WorkflowRunSnapshot | None, bool]:
        """Commit the attempt's end with the run's next decision. Returns whether it was
        recorded (``None``: not, because another worker took the attempt), the next attempt
        this worker leased with its owned snapshot, and whether the commit was handed to the
        group committer instead (``later`` is then told the outcome, see ``_submit``)."""
        current: WorkflowRunSnapshot | None = snap
        refused: Refusal = Refusal.NONE
        for _ in range(MAX_CONFLICT_RETRIES):
            if current is None:
                current = self.streams.take(lease.run_id)
            if refused is not Refusal.NONE:
                lease_seconds = None  # the end alone: nothing is decided or started with it
            prepared = self._prepare(
                current, lease, event, worker, lease_seconds, report, refused is Refusal.NONE
            )
            if not isinstance(prepared, tuple):
                return prepared, None, None, False
            pending, effects, following = prepared
            group = self.streams.group
            if later is not None and following is None and group is not None:
                # Nothing here needs the commit's result: the run waits (or ended). This thread
                # may run its next attempt while the end joins other threads' ends in one commit.
                self._submit(group, pending, effects, lease, event, later, 1, refused)
                return None, None, None, True
            try:
                self.decider.commit(pending, effects, keep=following is not None)
            except (EventConflict, HookTokenInUse):
                self.conflicts += 1
                self.streams.observer.conflict()
                current = None  # dropped; read again
                continue
            except StoreRefused as error:
                refused, event = _after_refusal(refused, event, error)
                current = None  # dropped; read again
                continue
            return True, following, (pending.snapshot if following is not None else None), False
        log.warning("gave up recording the end of %s after repeated conflicts", lease)
        return False, None, None, False

    def _prepare(
        self,
        current: WorkflowRunSnapshot,
        lease: StepLease,
        event: Event,
        worker: str,
        lease_seconds: float | None,
        report: DecideReport,
        decide: bool = True,
    ) -> tuple[Pending, Effects, StepLease | None] | bool | None:
        """The attempt's end folded into ``current`` (now owned by the returned ``Pending``)
        with the run's next decision (without ``decide``: the end alone, the run due for a
        decision now); or, when the attempt is no longer ours to end, whether it was settled
        for good (``False``) or taken by another worker (``None``)."""
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
            return False if ended else None
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
        elif isinstance(event, StepOutcomeUnknown):
            pass  # the run waits for an operator (flow step resolve)
        elif deciding is None or not decide or self._held(current):
            pending.decide_at = now  # a worker of the run's build decides it (once resumed)
        else:
            effects = self.decider.advance(pending, deciding, report, sticky=True)
            if not effects.more and lease_seconds is not None:
                following = start_scheduled(pending, worker, lease_seconds, self.decider.gate)
        return pending, effects, following

    def _held(self, run: WorkflowRunSnapshot) -> bool:
        spec = run.spec
        gate = self.pauses
        return gate is not None and gate.holds(run.run_id, spec.workflow, spec.runtime_build_id)

    def _submit(
        self,
        group: GroupCommitter,
        pending: Pending,
        effects: Effects,
        lease: StepLease,
        event: Event,
        later: Later,
        tries: int,
        refused: Refusal = Refusal.NONE,
    ) -> None:
        """Hand the end to the group committer; ``later`` learns the outcome. A conflict is
        met as ``_record`` meets it, on the committing thread: read again, decide again,
        submit again (never waiting for a commit there: that thread is the one committing).
        So is a refusal of the database (``_after_refusal``)."""
        pendings = [pending, *effects.others]

        def done(error: BaseException | None) -> None:
            if error is None:
                self.streams.committed(pendings)
                later(True, None)
                return
            again_refused, again_event = refused, event
            if isinstance(error, StoreRefused) and refused is not Refusal.ALONE_FAILED:
                again_refused, again_event = _after_refusal(refused, event, error)
            elif not isinstance(error, EventConflict | HookTokenInUse):
                later(None, error)  # the transaction failed; the snapshots are dropped
                return
            else:
                self.conflicts += 1
                self.streams.observer.conflict()
            if tries >= MAX_CONFLICT_RETRIES:
                log.warning("gave up recording the end of %s after repeated conflicts", lease)
                later(False, None)
                return
            try:
                current = self.streams.take(lease.run_id)
                prepared = self._prepare(
                    current,
                    lease,
                    again_event,
                    "",
                    None,
                    DecideReport(),
                    again_refused is Refusal.NONE,
                )
            except Exception as exc:
                later(None, exc)
                return
            if not isinstance(prepared, tuple):
                later(prepared, None)
                return
            again, again_effects, _ = prepared
            self._submit(
                group, again, again_effects, lease, again_event, later, tries + 1, again_refused
            )

        group.submit(
            CommitGroup(
                writes=[p.stream_write() for p in pendings],
                creates=effects.creates,
                now=pending.now,
            ),
            done,
        )


Later = Callable[[bool | None, BaseException | None], None]
"""Told how a handed-over end went: recorded (``True``), settled by others (``False``), taken
by another worker (``None``); or the error that kept it from being committed."""


def bounded_call(
    runtime: Runtime,
    name: str,
    payload: JsonValue,
    info: StepInfo,
    limit: float | None,
    silence: float | None,
) -> object:
    """Run the handler on its own thread and wait for it at most ``limit`` seconds, and at
    most ``silence`` seconds after its last heartbeat. Past either, the attempt is cancelled
    (``info.cancelled``) and ``StepTimedOut`` / ``HeartbeatTimedOut`` raised here: the caller
    records the failure at once, and whatever the abandoned thread returns is never looked at
    (Python cannot stop a thread; a handler that heartbeats is told to stop)."""
    box: dict[str, object] = {}
    done = threading.Event()

    def target() -> None:
        try:
            box["value"] = runtime.run_step(name, payload, info)
        except BaseException as exc:  # handed to the caller, which fails the attempt with it
            box["error"] = exc
        finally:
            done.set()

    control = info.control
    began = time.monotonic()
    thread = threading.Thread(target=target, name=f"flow-step {info.run_id}/{name}", daemon=True)
    thread.start()
    while True:
        now = time.monotonic()
        timed_out: Exception | None = None
        # Woken at the nearest deadline only: a heartbeat moves the silence deadline later,
        # which the next look finds (a beating step costs one wake-up per heartbeat_timeout).
        wait = float("inf")
        if limit is not None:
            left = began + limit - now
            if left <= 0:
                timed_out = StepTimedOut(name, limit)
            wait = min(wait, left)
        if silence is not None and timed_out is None:
            left = control.last_beat + silence - now
            if left <= 0:
                timed_out = HeartbeatTimedOut(name, silence)
            wait = min(wait, left)
        if timed_out is not None and not done.is_set():
            control.cancel(type(timed_out).__name__)
            raise timed_out
        if done.wait(max(wait, 0.0)):
            break
    error = box.get("error")
    if isinstance(error, BaseException):
        raise error
    return box.get("value")
