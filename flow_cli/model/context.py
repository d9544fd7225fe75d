"""``WorkflowContext`` (``ctx``): what workflow code reads and the commands it returns.

Every reader answers from the snapshot, so it gives the same answer on every replay. Values that
must look random (hook tokens, jitter) come from the per-run seed recorded in ``run_started``.
"""

from __future__ import annotations

import hashlib
import hmac
import random as _random
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any, NoReturn

from flow_cli.errors import (
    MOVES_WITH_NOW,
    REUSED_ID_FIELD,
    CommandNotReturned,
    InputError,
    Mismatch,
    NonDeterminismError,
    SuspensionCaught,
    UnknownPatch,
)
from flow_cli.model import deciding
from flow_cli.model.builders import DEFAULT_RETRY, CommandBuilders, Seconds, iso_or_none
from flow_cli.model.builders import STEP_NAME_ATTRIBUTE as STEP_NAME_ATTRIBUTE
from flow_cli.model.builders import seconds_or_none as seconds_or_none
from flow_cli.model.builders import step_name as step_name
from flow_cli.model.command_text import describe, recorded
from flow_cli.model.commands import (
    CancellationPolicy,
    RuntimeCommand,
    ScheduleStep,
    ScheduleSteps,
    StartChild,
    StartChildren,
    WaitForSignal,
)
from flow_cli.model.jsonval import JsonValue
from flow_cli.model.retry import RetryPolicy
from flow_cli.model.select import SelectHelpers
from flow_cli.model.snapshot import (
    AppliedUpdate,
    StepState,
    WaitState,
    WorkflowRunSnapshot,
    deadline_wait_id,
    without_traceback,
)
from flow_cli.model.status import RunStatus, StepStatus, WorkflowTerminalOutcome
from flow_cli.model.suspension import TIMED_OUT, StepFailedError, Suspend


class WorkflowContext(SelectHelpers, CommandBuilders):
    """The ``ctx`` passed to a workflow function (``ctx.first``, ``ctx.all_settled`` and
    ``ctx.spawn`` come from ``SelectHelpers``)."""

    def __init__(self, snapshot: WorkflowRunSnapshot, patches: Sequence[str] | None = None) -> None:
        self._snap = snapshot
        self._patches = patches
        """The patch markers the build declares (``None``: not checked, a read-only ctx)."""
        self._built: list[RuntimeCommand] = []
        self._attribute_calls: list[dict[str, Any]] = []
        """Commands the workflow code built with ``ctx`` methods in this call: each must be
        returned, or be part of what is returned (``CommandNotReturned``)."""
        self._suspended: RuntimeCommand | None = None
        """The command of the first suspension a sequential helper raised in this call (not
        the exception: its traceback holds the frames that hold this ctx, a reference cycle
        that would keep every decision's snapshot alive until the garbage collector runs)."""
        self._rng: _random.Random | None = None
        # Identities the sequential helpers used in this decision, with what they were given.
        self._used_steps: dict[str, tuple[str, JsonValue]] = {}
        self._used: dict[tuple[str, str], JsonValue] = {}
        self._waiter: Callable[[ScheduleStep], None] | None = None
        """Set when the engine keeps this call alive (``flow_cli.engine.sticky``): ``ctx.step``
        then waits for its new step to settle instead of ending the call."""

    # -- readers -------------------------------------------------------------------------------

    @property
    def input(self) -> JsonValue:
        """The run's input."""
        return self._snap.json_payload(self._snap.spec.input)

    @property
    def run_id(self) -> str:
        return self._snap.run_id

    @property
    def workflow(self) -> str:
        return self._snap.spec.workflow

    @property
    def started_at(self) -> datetime:
        """The recorded UTC start of the run: the deterministic base for deadlines."""
        return self._snap.started_at

    @property
    def now(self) -> datetime:
        """The recorded time of the latest event in history: "now" for this decision, the same
        on every replay (never read the wall clock in workflow code)."""
        return self._snap.last_event_at or self._snap.started_at

    @property
    def scheduled_at(self) -> datetime | None:
        """The fire time of the schedule that started this run; ``None`` for other runs."""
        schedule = self._snap.spec.schedule
        return None if schedule is None else schedule.scheduled_at

    @property
    def first_run_id(self) -> str:
        """The first run of this ``continue_as_new`` chain (this run if it is the first)."""
        return self._snap.spec.first_run_id or self._snap.run_id

    @property
    def chain_started_at(self) -> datetime:
        """When the first run of this ``continue_as_new`` chain started: carry deadlines
        across continuations from here."""
        return self._snap.spec.chain_started_at or self._snap.started_at

    @property
    def cancel_requested(self) -> bool:
        return self._snap.cancel_requested

    @property
    def cancel_reason(self) -> str | None:
        return self._snap.cancel_reason

    def patched(self, name: str) -> bool:
        """Whether patch marker ``name`` was active when this run started.

        Raises ``UnknownPatch`` for a marker the build does not declare (a typo would
        otherwise be ``False`` for ever).
        """
        active = name in self._snap.spec.patches
        if not active and self._patches is not None and name not in self._patches:
            raise UnknownPatch(self._snap.run_id, name, self._patches)
        return active

    def step_state(self, step_id: str) -> StepStatus | None:
        """The step's state, or ``None`` if it was never scheduled."""
        step = self._snap.steps.get(step_id)
        return step.status if step else None

    def step_output(self, step_id: str) -> JsonValue:
        """The step's output once ``step_completed`` is recorded, else ``None``."""
        step = self._snap.steps.get(step_id)
        if step is None or step.status is not StepStatus.COMPLETED:
            return None
        return self._snap.json_payload(step.output)

    def step_error(self, step_id: str) -> JsonValue:
        """``{"type", "message", "attempt"}`` once the step failed for good, else ``None``."""
        step = self._snap.steps.get(step_id)
        if step is None or step.status is not StepStatus.FAILED:
            return None
        return self._snap.json_payload(without_traceback(step.error))

    def wait_done(self, wait_id: str) -> bool:
        """True once the timer fired or the signal wait received its signal."""
        wait = self._snap.waits.get(wait_id)
        if wait is not None:
            return wait.done
        signal_wait = self._snap.signal_waits.get(wait_id)
        return signal_wait is not None and signal_wait.delivered

    def signal(self, wait_id: str) -> JsonValue:
        """The payload of the signal delivered to this wait, else ``None``."""
        wait = self._snap.signal_waits.get(wait_id)
        if wait is None or not wait.delivered:
            return None
        return self._snap.json_payload(wait.payload)

    def hook_resolved(self, hook_id: str) -> bool:
        hook = self._snap.hooks.get(hook_id)
        return hook is not None and hook.resolved

    def child_outcome(self, child_id: str) -> WorkflowTerminalOutcome | None:
        """The child's terminal outcome, whatever it was, once it ended."""
        child = self._snap.children.get(child_id)
        if child is None or not isinstance(child.outcome, dict):
            return None
        return WorkflowTerminalOutcome.from_json(self._snap.json_payload(child.outcome))

    def child_result(self, child_id: str) -> JsonValue:
        """The result of a child that completed, else ``None``."""
        outcome = self.child_outcome(child_id)
        if outcome is None or outcome.kind is not RunStatus.COMPLETED:
            return None
        return self._snap.json_payload(outcome.result)

    def updates(self, name: str) -> list[AppliedUpdate]:
        """The updates named ``name`` applied to this run so far, oldest first, each with
        ``.update_id``, ``.args`` and ``.result`` (the handler's recorded answer)."""
        snap = self._snap
        return [
            replace(u, args=snap.json_payload(u.args), result=snap.json_payload(u.result))
            for u in snap.updates.values()
            if u.name == name
        ]

    def random(self) -> float:
        """A float in [0, 1) from the run's recorded seed: the same sequence on every replay."""
        if self._rng is None:
            self._rng = _random.Random(int(self._snap.seed, 16))
        return self._rng.random()

    def new_token(self, name: str) -> str:
        """An unguessable token, stable for this run and ``name`` (use it for hook tokens)."""
        digest = hmac.new(bytes.fromhex(self._snap.seed), name.encode(), hashlib.sha256)
        return digest.hexdigest()[:32]

    # -- sequential style ----------------------------------------------------------------------
    #
    # Each helper compares what it is given with what history recorded for that identity,
    # settled or not, exactly as a returned command is compared (``plan`` in
    # model/determinism.py), and refuses an identity used twice in one decision. The fast path
    # compares with ``==``; only when that differs is the command built and compared whole.

    def step(
        self,
        step_id: str,
        name: str | Callable[..., Any],
        input: JsonValue = None,
        retry: RetryPolicy | None = None,
        *,
        timeout: Seconds | None = None,
        heartbeat_timeout: Seconds | None = None,
    ) -> JsonValue:
        """The step's output if recorded; otherwise end this decision by scheduling it.

        ``timeout`` / ``heartbeat_timeout`` bound each attempt (see ``schedule_step``).

        ``name`` is the step's registered name or the ``@runtime.step`` function itself.
        Raises ``StepFailedError`` when the step failed for good under ``on_exhausted="surface"``,
        and ``NonDeterminismError`` when history recorded ``step_id`` with other parameters or
        the id was already used in this decision.
        """
        if not isinstance(name, str):
            name = step_name(name)
        policy = DEFAULT_RETRY if retry is None else retry
        used = self._used_steps
        if step_id in used:
            first_name, first_input = used[step_id]
            self._reused(
                f"step {step_id!r}",
                {"name": first_name, "input": first_input},
                {"name": name, "input": input},
            )
        used[step_id] = (name, input)
        step = self._snap.steps.get(step_id)
        limit = seconds_or_none(timeout, "timeout")
        silence = seconds_or_none(heartbeat_timeout, "heartbeat_timeout")
        if step is None:
            command = self._schedule_step(step_id, name, input, policy, limit, silence)
            if self._waiter is None:
                self.suspend(command, blocking=True)
            self._before_handoff(command)
            self._waiter(command)  # returns once the step has settled in self._snap
            return self._settled_output(step_id)
        if not (
            step.name == name
            and step.input == input
            and (step.retry is policy or step.retry == policy)
            and step.batch_id is None
            and step.timeout == limit
            and step.heartbeat_timeout == silence
        ):
            self._check(self._schedule_step(step_id, name, input, policy, limit, silence))
        if step.status is StepStatus.COMPLETED:
            return self._snap.json_payload(step.output)
        if step.status is StepStatus.FAILED:
            raise StepFailedError(step_id, self._snap.json_payload(without_traceback(step.error)))
        self.suspend(
            self._schedule_step(step_id, name, input, policy, limit, silence), blocking=True
        )

    def _settled_output(self, step_id: str) -> JsonValue:
        step = self._snap.steps[step_id]
        if step.status is StepStatus.FAILED:
            raise StepFailedError(step_id, self._snap.json_payload(without_traceback(step.error)))
        return self._snap.json_payload(step.output)

    def all_steps(
        self, steps: Iterable[ScheduleStep], batch_id: str | None = None
    ) -> list[JsonValue]:
        """Run ``ctx.schedule_step(...)`` commands as one batch; their outputs, in order, once
        every one has completed.

        Raises ``StepFailedError`` for the first member (in order) that failed for good under
        ``on_exhausted="surface"``. An empty list gives an empty list at once.
        """
        members = list(steps)
        if not members:
            return []
        batch = self._schedule_steps(members, batch_id)
        recorded = []
        for member in batch.steps:
            recorded.append(self._batch_member(member, batch))
        outputs: list[JsonValue] = []
        for step in recorded:
            if step is not None and step.status is StepStatus.FAILED:
                raise StepFailedError(
                    step.step_id, self._snap.json_payload(without_traceback(step.error))
                )
        for step in recorded:
            if step is None or step.status is not StepStatus.COMPLETED:
                self.suspend(batch, blocking=True)
            outputs.append(self._snap.json_payload(step.output))
        return outputs

    def sleep_until(self, wait_id: str, deadline: datetime) -> None:
        """Return once the timer fired; otherwise end this decision waiting for it."""
        if not self.timer(wait_id, deadline):
            self.suspend(self._wait_until(wait_id, deadline), blocking=True)

    def sleep(self, wait_id: str, duration: float | timedelta) -> None:
        """Sleep ``duration`` (seconds or a ``timedelta``) counted from ``ctx.now`` at the
        decision that opens the timer; later decisions keep the recorded deadline."""
        delta = duration if isinstance(duration, timedelta) else timedelta(seconds=duration)
        wait = self._snap.waits.get(wait_id)
        self.sleep_until(wait_id, wait.deadline if wait is not None else self.now + delta)

    def timer(
        self,
        wait_id: str,
        deadline: datetime | None = None,
        *,
        timeout: float | timedelta | None = None,
    ) -> bool:
        """Open a timer without waiting on it; True once it has fired.

        Give ``deadline`` (a UTC datetime) or ``timeout`` (seconds or a ``timedelta``, counted
        from ``ctx.now`` at the decision that opens the timer, as ``ctx.sleep`` does). The
        first call ends this decision to record the timer; later calls return at once, and the
        run wakes when the timer fires whatever it is waiting on then (a deadline).
        """
        deadline = self._timeout(f"timer {wait_id!r}", wait_id, deadline, timeout)
        if deadline is None:
            raise InputError(f"timer {wait_id!r}: give deadline= or timeout=")
        self._use("wait", wait_id, f"timer {wait_id!r}", {"deadline": iso_or_none(deadline)})
        wait = self._snap.waits.get(wait_id)
        if wait is None:
            self.suspend(self._wait_until(wait_id, deadline))  # not blocking: the code goes on
        if wait.deadline != deadline:
            self._check_deadline(wait_id, wait, deadline)
        return wait.done

    def receive(
        self,
        wait_id: str,
        signal_name: str,
        deadline: datetime | None = None,
        *,
        timeout: float | timedelta | None = None,
    ) -> JsonValue:
        """The payload of signal ``signal_name`` once delivered; otherwise wait for it.

        With ``deadline`` (a UTC datetime) or ``timeout`` (seconds or a ``timedelta``, counted
        from ``ctx.now`` at the decision that opens the wait's timer, as ``ctx.sleep`` does),
        returns ``TIMED_OUT`` if that time passes first; a signal that arrives later is kept for
        the next wait on that name. Waiting on both
        takes two decisions: the first opens the signal wait (a signal that came early is
        delivered at once), the second opens the timer ``f"{wait_id}:deadline"``; then the run
        parks until one of them happens.
        """
        snap = self._snap
        deadline = self._timeout(
            f"signal wait {wait_id!r}", deadline_wait_id(wait_id), deadline, timeout
        )
        given = {"signal_name": signal_name, "deadline": iso_or_none(deadline)}
        self._use("wait", wait_id, f"signal wait {wait_id!r}", given)
        wait = snap.signal_waits.get(wait_id)
        if (wait is None and wait_id in snap.waits) or (
            wait is not None and wait.signal_name != signal_name
        ):
            self._check(WaitForSignal(wait_id=wait_id, signal_name=signal_name))
        timed_out = self._deadline(f"signal wait {wait_id!r}", wait_id, deadline)
        if wait is not None and wait.delivered:
            return self._snap.json_payload(wait.payload)
        if timed_out:
            return TIMED_OUT
        if wait is None or deadline is None or deadline_wait_id(wait_id) in snap.waits:
            # With a deadline still to open, the next decision must open its timer.
            opened = deadline is None or deadline_wait_id(wait_id) in snap.waits
            self.suspend(WaitForSignal(wait_id=wait_id, signal_name=signal_name), blocking=opened)
        self.suspend(self._wait_until(deadline_wait_id(wait_id), deadline), blocking=True)

    def hook(
        self,
        hook_id: str,
        deadline: datetime | None = None,
        *,
        timeout: float | timedelta | None = None,
        token: str | None = None,
        metadata: JsonValue = None,
    ) -> JsonValue:
        """The hook's callback payload once resolved, else ``None`` (a reader).

        Given ``deadline``, ``timeout`` or ``token`` it waits instead: it creates the hook
        (token ``ctx.new_token(hook_id)`` unless given) and ends this decision until the
        callback arrives, or returns ``TIMED_OUT`` once the deadline passed first (``timeout``
        counts from ``ctx.now`` at the decision that opens the hook's timer). As with
        ``ctx.receive``, the hook and its timer ``f"{hook_id}:deadline"`` are opened by two
        decisions.
        """
        snap = self._snap
        deadline = self._timeout(f"hook {hook_id!r}", deadline_wait_id(hook_id), deadline, timeout)
        hook = snap.hooks.get(hook_id)
        if deadline is None and token is None:
            if hook is None or not hook.resolved:
                return None
            return snap.json_payload(hook.payload)
        given = {"token": token, "deadline": iso_or_none(deadline)}
        self._use("hook", hook_id, f"hook {hook_id!r}", given)
        if hook is not None and (
            (token is not None and hook.token != token)
            or (metadata is not None and hook.metadata != metadata)
        ):
            self._check(
                self._create_hook(
                    hook_id, token or hook.token, hook.metadata if metadata is None else metadata
                )
            )
        timed_out = self._deadline(f"hook {hook_id!r}", hook_id, deadline)
        timer = snap.waits.get(deadline_wait_id(hook_id))
        if hook is not None and hook.resolved:
            fired_first = (
                timed_out
                and timer is not None
                and (timer.fired_sequence or 0) < (hook.resolved_sequence or 0)
            )
            if not fired_first:
                return snap.json_payload(hook.payload)
        if timed_out:
            return TIMED_OUT
        if hook is None:
            # With a deadline, the next decision must open its timer: not a blocking wait yet.
            new = self._create_hook(hook_id, token or self.new_token(hook_id), metadata)
            self.suspend(new, blocking=deadline is None)
        if deadline is not None and timer is None:
            self.suspend(self._wait_until(deadline_wait_id(hook_id), deadline), blocking=True)
        self.suspend(self._create_hook(hook_id, hook.token, hook.metadata), blocking=True)

    def child(
        self,
        child_id: str,
        workflow: str,
        input: JsonValue = None,
        cancellation: CancellationPolicy = "cancel",
    ) -> WorkflowTerminalOutcome:
        """The child's outcome once it ended; otherwise start it (or keep waiting)."""
        given = {"workflow": workflow, "input": input, "cancellation": cancellation}
        self._use("child", child_id, f"child {child_id!r}", given)
        child = self._snap.children.get(child_id)
        if child is not None and not (
            child.workflow == workflow
            and child.input == input
            and child.cancellation == cancellation
            and child.batch_id is None
        ):
            self._check(self._start_child(child_id, workflow, input, cancellation))
        outcome = self.child_outcome(child_id)
        if outcome is None:
            self.suspend(self._start_child(child_id, workflow, input, cancellation), blocking=True)
        return outcome

    def all_children(
        self, children: Iterable[StartChild], batch_id: str | None = None
    ) -> list[WorkflowTerminalOutcome]:
        """Start ``ctx.start_child(...)`` commands as one batch; their outcomes, in order, once
        every child has ended (whatever the outcome: check ``outcome.kind``). An empty list
        gives an empty list at once."""
        members = list(children)
        if not members:
            return []
        batch = self._start_children(members, batch_id)
        outcomes: list[WorkflowTerminalOutcome] = []
        pending = False
        for member in batch.children:
            given = {"workflow": member.workflow, "input": member.input}
            self._use("child", member.child_id, f"child {member.child_id!r}", given)
            child = self._snap.children.get(member.child_id)
            if child is not None and not (
                child.workflow == member.workflow
                and child.input == member.input
                and child.cancellation == member.cancellation
                and child.batch_id == batch.batch_id
            ):
                self._check(batch)
            outcome = self.child_outcome(member.child_id)
            if outcome is None:
                pending = True
            else:
                outcomes.append(outcome)
        if pending:
            self.suspend(batch, blocking=True)
        return outcomes

    def suspend(self, command: RuntimeCommand, *, blocking: bool = False) -> NoReturn:
        """End this decision now with ``command``.

        ``blocking=True`` promises that, called again before the command's identity settles, the
        code would stop at the same place: the engine then parks the run without asking again.
        """
        if self._suspended is None:
            self._suspended = command
        raise Suspend(command, blocking=blocking)

    # -- guards --------------------------------------------------------------------------------

    def _ended(self, command: RuntimeCommand, suspension: Suspend | None = None) -> None:
        """Check how the call ended: with ``command`` returned, or raised in ``suspension``.

        Raises ``SuspensionCaught`` when a helper's suspension was caught and the code went on
        to end otherwise, and ``CommandNotReturned`` when the call returned while a command it
        built for a new identity is neither ``command`` nor one of its members.
        """
        first = self._suspended
        if first is not None and (suspension is None or first is not suspension.command):
            raise SuspensionCaught(self._snap.run_id, describe(first), describe(command))
        if self._built and suspension is None:
            self._all_returned(command)

    def _before_handoff(self, command: ScheduleStep) -> None:
        """What ``_ended`` checks, for a kept call handing a new step to the engine."""
        if self._suspended is not None:
            raise SuspensionCaught(self._snap.run_id, describe(self._suspended), describe(command))
        refused = deciding.refused()
        if refused is not None:
            raise refused

    def _all_returned(self, command: RuntimeCommand) -> None:
        returned: list[RuntimeCommand] = [command]
        if isinstance(command, ScheduleSteps):
            returned.extend(command.steps)
        elif isinstance(command, StartChildren):
            returned.extend(command.children)
        for built in self._built:
            if built not in returned and not recorded(self._snap, built):
                raise CommandNotReturned(self._snap.run_id, describe(built), describe(command))

    def _check(self, command: RuntimeCommand) -> None:
        """Compare ``command`` with history as a returned command is; raise on a mismatch."""
        from flow_cli.model.determinism import plan

        plan(self._snap, command)

    def _batch_member(self, member: ScheduleStep, batch: ScheduleSteps) -> StepState | None:
        """The step of ``batch`` as recorded (``None`` before it is), checked against the
        batch the code builds now: another name, input, retry or batch is a divergence."""
        self._use_step(member)
        step = self._snap.steps.get(member.step_id)
        if step is not None and not (
            step.name == member.name
            and step.input == member.input
            and step.retry == member.retry
            and step.batch_id == batch.batch_id
            and step.timeout == member.timeout
            and step.heartbeat_timeout == member.heartbeat_timeout
        ):
            self._check(batch)
        return step

    def _use_step(self, member: ScheduleStep) -> None:
        used = self._used_steps
        if member.step_id in used:
            first_name, first_input = used[member.step_id]
            self._reused(
                f"step {member.step_id!r}",
                {"name": first_name, "input": first_input},
                {"name": member.name, "input": member.input},
            )
        used[member.step_id] = (member.name, member.input)

    def _use(self, kind: str, ident: str, label: str, given: JsonValue) -> None:
        key = (kind, ident)
        if key in self._used:
            self._reused(label, self._used[key], given)
        self._used[key] = given

    def _reused(self, identity: str, first: JsonValue, second: JsonValue) -> NoReturn:
        mismatch = Mismatch(
            identity=identity, field=REUSED_ID_FIELD, recorded=first, produced=second
        )
        raise NonDeterminismError(self._snap.run_id, self._snap.last_sequence, [mismatch])

    def _deadline(self, identity: str, wait_id: str, deadline: datetime | None) -> bool:
        """Check the deadline timer of a wait or hook against history; True once it fired."""
        timer = self._snap.waits.get(deadline_wait_id(wait_id))
        if timer is None:
            return False
        if deadline is None:
            mismatch = Mismatch(
                identity=identity,
                field="deadline",
                recorded=iso_or_none(timer.deadline),
                produced=None,
            )
            raise NonDeterminismError(self._snap.run_id, self._snap.last_sequence, [mismatch])
        if timer.deadline != deadline:
            self._check_deadline(deadline_wait_id(wait_id), timer, deadline)
        return timer.done

    def _timeout(
        self,
        label: str,
        timer_id: str,
        deadline: datetime | None,
        timeout: float | timedelta | None,
    ) -> datetime | None:
        """The deadline a ``timeout`` gives: ``ctx.now`` at the decision that opens timer
        ``timer_id`` plus ``timeout``; once the timer is recorded, its recorded deadline."""
        if timeout is None:
            return deadline
        if deadline is not None:
            raise InputError(f"{label}: give deadline= or timeout=, not both")
        timer = self._snap.waits.get(timer_id)
        if timer is not None:
            return timer.deadline
        delta = timeout if isinstance(timeout, timedelta) else timedelta(seconds=timeout)
        return self.now + delta

    def _check_deadline(self, timer_id: str, timer: WaitState, deadline: datetime) -> None:
        """A recorded timer asked for with another deadline: a ``NonDeterminismError``, whose
        hint says so when the deadline is ``ctx.now`` plus the same duration as when the timer
        opened (it moves with every decision)."""
        if timer.opened_at is not None and deadline - self.now == timer.deadline - timer.opened_at:
            mismatch = Mismatch(
                identity=f"wait {timer_id!r}",
                field="deadline",
                recorded=timer.deadline.astimezone(UTC).isoformat(),
                produced=deadline.astimezone(UTC).isoformat(),
                cause=MOVES_WITH_NOW,
            )
            raise NonDeterminismError(self._snap.run_id, self._snap.last_sequence, [mismatch])
        self._check(self._wait_until(timer_id, deadline))
