"""``ContextBase``: what ``ctx`` reads from the snapshot, and the guards every helper goes
through (an identity used twice in one decision, a command compared with history, a suspension
caught by the workflow code).

Every reader answers from the snapshot, so it gives the same answer on every replay. Values that
must look random (hook tokens, jitter) come from the per-run seed recorded in ``run_started``.
"""

from __future__ import annotations

import hashlib
import hmac
import random as _random
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import UTC, datetime
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
from flow_cli.model.builders import CommandBuilders, iso_or_none
from flow_cli.model.clock import Seconds, as_timedelta
from flow_cli.model.command_text import describe, recorded
from flow_cli.model.commands import RuntimeCommand, ScheduleStep, ScheduleSteps, StartChildren
from flow_cli.model.jsonval import JsonValue
from flow_cli.model.snapshot import (
    AppliedUpdate,
    StepState,
    WaitState,
    WorkflowRunSnapshot,
    deadline_wait_id,
    without_traceback,
)
from flow_cli.model.status import RunStatus, StepStatus, WorkflowTerminalOutcome
from flow_cli.model.suspension import Suspend


class ContextBase(CommandBuilders):
    """The state, readers and guards of ``WorkflowContext``; its helpers build on them."""

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
        if step is not None and not step.matches(
            member.name,
            member.input,
            member.retry,
            batch.batch_id,
            member.timeout,
            member.heartbeat_timeout,
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
        timeout: Seconds | None,
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
        return self.now + as_timedelta(timeout)

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
