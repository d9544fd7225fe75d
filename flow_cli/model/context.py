"""``WorkflowContext`` (``ctx``): what workflow code reads and the commands it returns.

Every reader answers from the snapshot, so it gives the same answer on every replay. Values that
must look random (hook tokens, jitter) come from the per-run seed recorded in ``run_started``.
"""

from __future__ import annotations

import hashlib
import hmac
import random as _random
from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta
from typing import NoReturn

from flow_cli.errors import InputError
from flow_cli.model.commands import (
    CancellationPolicy,
    Cancelled,
    Complete,
    ContinueAsNew,
    CreateHook,
    Fail,
    RuntimeCommand,
    ScheduleStep,
    ScheduleSteps,
    StartChild,
    StartChildren,
    WaitForSignal,
    WaitUntil,
)
from flow_cli.model.jsonval import JsonValue, normalise
from flow_cli.model.retry import RetryPolicy
from flow_cli.model.snapshot import WorkflowRunSnapshot
from flow_cli.model.status import RunStatus, StepStatus, WorkflowTerminalOutcome

DEFAULT_RETRY = RetryPolicy()


class Suspend(BaseException):
    """Raised by the sequential helpers (``ctx.step`` ...) to end this decision with a command.

    A BaseException so that a workflow's ``except Exception`` cannot swallow it.
    """

    def __init__(self, command: RuntimeCommand, *, blocking: bool = False) -> None:
        super().__init__(command)
        self.command = command
        self.blocking = blocking
        """The code cannot go on until this command's identity settles (``ctx.step``)."""


class StepFailedError(Exception):
    """Raised by ``ctx.step`` when the step failed for good under ``on_exhausted="surface"``."""

    def __init__(self, step_id: str, error: JsonValue) -> None:
        message = error.get("message") if isinstance(error, dict) else error
        super().__init__(f"step {step_id!r} failed: {message}")
        self.step_id = step_id
        self.error = error


class WorkflowContext:
    """The ``ctx`` passed to a workflow function."""

    def __init__(self, snapshot: WorkflowRunSnapshot) -> None:
        self._snap = snapshot
        self._rng: _random.Random | None = None

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
    def cancel_requested(self) -> bool:
        return self._snap.cancel_requested

    @property
    def cancel_reason(self) -> str | None:
        return self._snap.cancel_reason

    def patched(self, name: str) -> bool:
        """Whether patch marker ``name`` was active when this run started."""
        return name in self._snap.spec.patches

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
        return self._snap.json_payload(step.error)

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

    def hook(self, hook_id: str) -> JsonValue:
        """The hook's callback payload once resolved, else ``None``."""
        hook = self._snap.hooks.get(hook_id)
        if hook is None or not hook.resolved:
            return None
        return self._snap.json_payload(hook.payload)

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

    def random(self) -> float:
        """A float in [0, 1) from the run's recorded seed: the same sequence on every replay."""
        if self._rng is None:
            self._rng = _random.Random(int(self._snap.seed, 16))
        return self._rng.random()

    def new_token(self, name: str) -> str:
        """An unguessable token, stable for this run and ``name`` (use it for hook tokens)."""
        digest = hmac.new(bytes.fromhex(self._snap.seed), name.encode(), hashlib.sha256)
        return digest.hexdigest()[:32]

    # -- commands ------------------------------------------------------------------------------

    def schedule_step(
        self,
        step_id: str,
        name: str,
        input: JsonValue = None,
        retry: RetryPolicy | None = None,
    ) -> ScheduleStep:
        """Run step handler ``name`` under identity ``step_id`` (at least once)."""
        return ScheduleStep(
            step_id=step_id,
            name=name,
            input=_json(input, "step input"),
            retry=retry or DEFAULT_RETRY,
        )

    def schedule_steps(
        self, steps: Iterable[ScheduleStep], batch_id: str | None = None
    ) -> ScheduleSteps:
        """One atomic batch of ``ctx.schedule_step(...)`` commands."""
        members = tuple(steps)
        if not members:
            raise InputError("schedule_steps needs at least one step")
        return ScheduleSteps(
            steps=members, batch_id=batch_id or "+".join(s.step_id for s in members)
        )

    def wait_until(self, wait_id: str, deadline: datetime) -> WaitUntil:
        """Wait until a UTC deadline (derive it from ``ctx.started_at`` or step outputs)."""
        if deadline.tzinfo is None:
            raise InputError(f"wait {wait_id!r}: the deadline must be timezone-aware UTC")
        return WaitUntil(wait_id=wait_id, deadline=deadline)

    def wait_for_signal(self, wait_id: str, signal_name: str) -> WaitForSignal:
        """Wait for the next signal named ``signal_name`` (one that came early is matched)."""
        return WaitForSignal(wait_id=wait_id, signal_name=signal_name)

    def create_hook(self, hook_id: str, token: str, metadata: JsonValue = None) -> CreateHook:
        """Open a hook that ``flow hook resolve TOKEN`` completes."""
        return CreateHook(hook_id=hook_id, token=token, metadata=_json(metadata, "hook metadata"))

    def start_child(
        self,
        child_id: str,
        workflow: str,
        input: JsonValue = None,
        cancellation: CancellationPolicy = "cancel",
    ) -> StartChild:
        """Start a child run ``{run_id}/{child_id}``; the parent resumes when it ends."""
        if cancellation not in ("cancel", "abandon"):
            raise InputError("child cancellation must be 'cancel' or 'abandon'")
        return StartChild(
            child_id=child_id,
            workflow=workflow,
            input=_json(input, "child input"),
            cancellation=cancellation,
        )

    def start_children(
        self, children: Iterable[StartChild], batch_id: str | None = None
    ) -> StartChildren:
        """One atomic batch of ``ctx.start_child(...)`` commands."""
        members = tuple(children)
        if not members:
            raise InputError("start_children needs at least one child")
        return StartChildren(
            children=members, batch_id=batch_id or "+".join(c.child_id for c in members)
        )

    def complete(self, result: JsonValue = None) -> Complete:
        return Complete(result=_json(result, "result"))

    def fail(self, error: JsonValue) -> Fail:
        return Fail(error=_json(error, "error"))

    def continue_as_new(
        self,
        input: JsonValue = None,
        *,
        runtime_build_id: str | None = None,
        patches: Sequence[str] | None = None,
    ) -> ContinueAsNew:
        """End this run and start its successor with ``input`` (same build, same patches)."""
        return ContinueAsNew(
            input=_json(input, "continuation input"),
            runtime_build_id=runtime_build_id,
            patches=tuple(patches) if patches is not None else None,
        )

    def cancelled(self, reason: str | None = None) -> Cancelled:
        """End a run whose cancellation was requested, after any cleanup."""
        return Cancelled(reason=reason or self._snap.cancel_reason or "cancelled")

    # -- sequential style ----------------------------------------------------------------------

    def step(
        self,
        step_id: str,
        name: str,
        input: JsonValue = None,
        retry: RetryPolicy | None = None,
    ) -> JsonValue:
        """The step's output if recorded; otherwise end this decision by scheduling it.

        Raises ``StepFailedError`` when the step failed for good under ``on_exhausted="surface"``.
        """
        step = self._snap.steps.get(step_id)
        if step is not None and step.status is StepStatus.COMPLETED:
            return self._snap.json_payload(step.output)
        if step is not None and step.status is StepStatus.FAILED:
            raise StepFailedError(step_id, self._snap.json_payload(step.error))
        self.suspend(self.schedule_step(step_id, name, input, retry), blocking=True)

    def sleep_until(self, wait_id: str, deadline: datetime) -> None:
        """Return once the timer fired; otherwise end this decision waiting for it."""
        if not self.wait_done(wait_id):
            self.suspend(self.wait_until(wait_id, deadline), blocking=True)

    def sleep(self, wait_id: str, seconds: float | timedelta) -> None:
        """Sleep relative to the run's recorded start (deterministic)."""
        delta = seconds if isinstance(seconds, timedelta) else timedelta(seconds=seconds)
        self.sleep_until(wait_id, self.started_at + delta)

    def timer(self, wait_id: str, deadline: datetime) -> bool:
        """Open a timer without waiting on it; True once it has fired.

        The first call ends this decision to record the timer; later calls return at once, and
        the run wakes when the timer fires whatever it is waiting on then (a deadline).
        """
        if wait_id not in self._snap.waits:
            self.suspend(self.wait_until(wait_id, deadline))
        return self.wait_done(wait_id)

    def receive(self, wait_id: str, signal_name: str) -> JsonValue:
        """The payload of signal ``signal_name`` once delivered; otherwise wait for it."""
        if not self.wait_done(wait_id):
            self.suspend(self.wait_for_signal(wait_id, signal_name), blocking=True)
        return self.signal(wait_id)

    def child(
        self,
        child_id: str,
        workflow: str,
        input: JsonValue = None,
        cancellation: CancellationPolicy = "cancel",
    ) -> WorkflowTerminalOutcome:
        """The child's outcome once it ended; otherwise start it (or keep waiting)."""
        outcome = self.child_outcome(child_id)
        if outcome is None:
            self.suspend(self.start_child(child_id, workflow, input, cancellation), blocking=True)
        return outcome

    def suspend(self, command: RuntimeCommand, *, blocking: bool = False) -> NoReturn:
        """End this decision now with ``command``.

        ``blocking=True`` promises that, called again before the command's identity settles, the
        code would stop at the same place: the engine then parks the run without asking again.
        """
        raise Suspend(command, blocking=blocking)


def _json(value: JsonValue, what: str) -> JsonValue:
    try:
        return normalise(value)
    except (TypeError, ValueError) as exc:
        raise InputError(f"{what} is not a JSON value: {exc}") from None
