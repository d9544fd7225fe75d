"""The sequential style of ``ctx``: ``ctx.step``, ``ctx.sleep``, ``ctx.receive``, ``ctx.hook``,
``ctx.child`` and the others return what history recorded, or end the decision with the command
that records it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any

from flow_cli.errors import InputError
from flow_cli.model.builders import (
    CHILD_BATCH,
    DEFAULT_RETRY,
    STEP_BATCH,
    iso_or_none,
    seconds_or_none,
    step_name,
)
from flow_cli.model.clock import Seconds, as_timedelta
from flow_cli.model.commands import CancellationPolicy, ScheduleStep, StartChild, WaitForSignal
from flow_cli.model.ctx_base import ContextBase
from flow_cli.model.jsonval import JsonValue
from flow_cli.model.retry import RetryPolicy
from flow_cli.model.snapshot import deadline_wait_id, without_traceback
from flow_cli.model.status import StepStatus, WorkflowTerminalOutcome
from flow_cli.model.suspension import TIMED_OUT, StepFailedError


class SequentialHelpers(ContextBase):
    """``ctx`` methods that read like straight-line code; mixed into ``WorkflowContext``."""

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
        # Replayed at every decision, for each step before it: most steps have no bounds.
        limit = None if timeout is None else seconds_or_none(timeout, "timeout")
        silence = (
            None
            if heartbeat_timeout is None
            else seconds_or_none(heartbeat_timeout, "heartbeat_timeout")
        )
        if step is None:
            command = self._schedule_step(step_id, name, input, policy, limit, silence)
            if self._waiter is None:
                self.suspend(command, blocking=True)
            self._before_handoff(command)
            self._waiter(command)  # returns once the step has settled in self._snap
            return self._settled_output(step_id)
        if not step.matches(name, input, policy, None, limit, silence):
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
        batch = self._batch(STEP_BATCH, members, batch_id)
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

    def sleep(self, wait_id: str, duration: Seconds) -> None:
        """Sleep ``duration`` (seconds or a ``timedelta``) counted from ``ctx.now`` at the
        decision that opens the timer; later decisions keep the recorded deadline."""
        wait = self._snap.waits.get(wait_id)
        self.sleep_until(
            wait_id, wait.deadline if wait is not None else self.now + as_timedelta(duration)
        )

    def timer(
        self,
        wait_id: str,
        deadline: datetime | None = None,
        *,
        timeout: Seconds | None = None,
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
        timeout: Seconds | None = None,
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
        timeout: Seconds | None = None,
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
                and (timer.settled_sequence or 0) < (hook.settled_sequence or 0)
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
        if child is not None and not child.matches(workflow, input, cancellation, None):
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
        batch = self._batch(CHILD_BATCH, members, batch_id)
        outcomes: list[WorkflowTerminalOutcome] = []
        pending = False
        for member in batch.children:
            given = {"workflow": member.workflow, "input": member.input}
            self._use("child", member.child_id, f"child {member.child_id!r}", given)
            child = self._snap.children.get(member.child_id)
            if child is not None and not child.matches(
                member.workflow, member.input, member.cancellation, batch.batch_id
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
