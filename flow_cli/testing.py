"""``WorkflowEnvironment``: test workflows in memory, on a manual clock, replaying every decision.

    from flow_cli.testing import WorkflowEnvironment

    env = WorkflowEnvironment(runtime)
    run = env.start("approval", {"amount": 10})
    env.run_until_idle()                  # decide and run steps in-process until nothing is due
    env.skip_to_next_timer()              # jump to the next deadline, run until idle
    env.signal(run, "decision", {"ok": True})
    env.update(run, "change-address", {"address": "..."})   # the handler's answer
    env.query(run, "status")                              # nothing written
    assert env.result(run) == {...}

Steps in tests: ``with env.fake_step("charge", lambda input, info: {"charge": "ch_test"}):``
runs the fake instead of the handler (in every build that defines it) until the block ends.
``vanish(heartbeat=...)`` is a fake whose worker disappears mid-attempt (after one heartbeat
with those details, if given): nothing is recorded and the attempt's lease lapses on the
manual clock (``env.advance(seconds=31)``: the in-process lease is 30 s), where the next pass
finds it as a worker would: it runs it again, fails it as ``StepTimedOut`` once its timeout has
passed, or records ``step_outcome_unknown`` for an ``on_lost="unknown"`` step. ``hang()`` is an
attempt that never ends: it vanishes on every try, so only its timeout ends it.

No database, no worker, no sleeping: the store is in memory and time moves only when the test
says so. "Always replay": after every step forward, each run whose history grew is replayed from
an empty snapshot against its build's code (``replay_history``), so workflow code that reads the
clock, draws a random number or otherwise decides differently the second time fails the test at
once with a ``NonDeterminismError``; a ``decision_failed`` fails it too (pass
``fail_on_decision_error=False`` to look at it instead).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any, Unpack

from flow_cli.engine.engine import Engine
from flow_cli.engine.options import StartOptions
from flow_cli.engine.replay_check import replay_history
from flow_cli.errors import FlowError, Mismatch, NonDeterminismError, WorkflowError
from flow_cli.model.clock import ManualClock
from flow_cli.model.events import DecisionFailed, EventEnvelope
from flow_cli.model.jsonval import JsonValue
from flow_cli.model.snapshot import WorkflowRunSnapshot
from flow_cli.model.status import RunStatus, WorkflowTerminalOutcome
from flow_cli.ops.chain import live_run
from flow_cli.runtime import AttemptVanished, Runtime, StepFn, StepInfo
from flow_cli.store.memory import MemoryStore

DEFAULT_START = datetime(2026, 1, 1, 9, 0, tzinfo=UTC)
"""Where the manual clock starts unless told otherwise."""
MAX_STEPS = 100_000
"""Clock moves ``advance`` makes before giving up (a guard against a run that is always due)."""


class WorkflowEnvironment:
    """An engine over an in-memory store and a manual clock, for unit tests of workflows.

    Runs follow their ``continue_as_new`` chain wherever a run id is given (``signal``,
    ``cancel``, ``result``, ``outcome``); ``snapshot`` and ``history`` read exactly the run
    named.
    """

    def __init__(
        self,
        *runtimes: Runtime,
        start: datetime = DEFAULT_START,
        fail_on_decision_error: bool = True,
    ) -> None:
        if start.tzinfo is None:
            raise FlowError("WorkflowEnvironment(start=...) must be timezone-aware (UTC)")
        self.clock = ManualClock(start.astimezone(UTC))
        self.engine = Engine(MemoryStore(), runtimes, clock=self.clock, worker_id="test-env")
        self.fail_on_decision_error = fail_on_decision_error
        self._checked: dict[str, int] = {}

    # -- time ----------------------------------------------------------------------------------

    @property
    def now(self) -> datetime:
        """The environment's current UTC time."""
        return self.clock.now()

    def run_until_idle(self) -> None:
        """Decide runs and run steps in-process until nothing is due now; then replay-check."""
        self.engine.tick(until_idle=True)
        self._verify()

    def skip_to_next_timer(self) -> datetime | None:
        """Move the clock to the next due time (timer, retry), run until idle; return it.

        Returns ``None`` (and moves nothing) when nothing is scheduled.
        """
        self.run_until_idle()
        due = self.engine.next_due()
        if due is None:
            return None
        if due > self.now:
            self.clock.set(due)
        self.run_until_idle()
        return due

    def advance(self, **delta: float) -> None:
        """Move the clock forward by ``timedelta(**delta)`` (``hours=8``, ``days=30`` ...).

        Everything due on the way happens at its own time, in order: timers fire at their
        deadlines and the runs decide there, as they would with a worker running throughout.
        """
        target = self.now + timedelta(**delta)
        self.run_until_idle()
        for _ in range(MAX_STEPS):
            due = self.engine.next_due()
            if due is None or due > target:
                break
            if due > self.now:
                self.clock.set(due)
            self.run_until_idle()
        else:
            raise FlowError(f"advance: runs were still due after {MAX_STEPS} clock moves")
        if target > self.now:
            self.clock.set(target)
        self.run_until_idle()

    # -- steps ---------------------------------------------------------------------------------

    @contextmanager
    def fake_step(self, name: str, fake: StepFn) -> Iterator[None]:
        """Run ``fake(input, info)`` instead of step handler ``name`` in every build of this
        environment that defines it, until the ``with`` block ends (the handler's
        ``@runtime.step`` options stay). Raises ``FlowError`` when no build defines ``name``."""
        runtimes = [r for r in self.engine.runtimes.values() if name in r.steps]
        if not runtimes:
            raise FlowError(f"no build of this environment defines step {name!r}")
        real = [r.steps[name] for r in runtimes]
        for runtime in runtimes:
            runtime.steps[name] = fake
        try:
            yield
        finally:
            for runtime, handler in zip(runtimes, real, strict=True):
                runtime.steps[name] = handler

    # -- driving runs --------------------------------------------------------------------------

    def start(
        self,
        workflow: str,
        input: JsonValue = None,
        **options: Unpack[StartOptions],
    ) -> str:
        """Create a run and return its id (it runs at the next ``run_until_idle``).
        ``options`` as for ``Engine.start``: ``run_id``, ``build_id``, ``attributes`` (search
        attributes it starts with, as ``flow start --attr``), ``priority`` (1 first, 9 last,
        default 5)."""
        return self.engine.start(workflow, input, **options).run_id

    def attributes(self, run_id: str) -> dict[str, Any]:
        """The run's search attributes as the runs index holds them (what ``flow runs
        --attr`` filters on): the start's, then each ``ctx.set_attributes`` over them."""
        record = self.engine.get_run(run_id)
        return dict(record.attributes)

    def find(self, **attributes: str | int | float | bool) -> list[str]:
        """Ids of the runs whose search attributes include all of ``attributes``, newest
        first (``flow runs --attr k=v ...``)."""
        from flow_cli.model.attributes import attribute_text, check_attributes
        from flow_cli.store.protocol import RunFilter

        wanted = check_attributes(attributes, "find")
        where = RunFilter(attributes=tuple((k, attribute_text(v)) for k, v in wanted.items()))
        return [record.run_id for record in self.engine.find_runs(where)]

    def signal(self, run_id: str, name: str, payload: JsonValue = None) -> None:
        """Send signal ``name`` to the run (or its live successor), then run until idle."""
        self.engine.signal(live_run(self.engine, run_id), name, payload)
        self.run_until_idle()

    def query(self, run_id: str, name: str, args: JsonValue = None) -> JsonValue:
        """The answer of query ``name`` on the run (or its live successor); writes nothing."""
        return self.engine.query(run_id, name, args).result

    def update(
        self, run_id: str, name: str, args: JsonValue = None, *, update_id: str | None = None
    ) -> JsonValue:
        """Apply update ``name`` to the run (or its live successor), run until idle, and
        return the handler's answer (raises ``UpdateRejected`` when it refused)."""
        result = self.engine.update(run_id, name, args, update_id=update_id).result
        self.run_until_idle()
        return result

    def resolve_hook(self, token: str, payload: JsonValue = None) -> tuple[str, str]:
        """Deliver a hook's callback, then run until idle. Returns ``(run_id, hook_id)``."""
        found = self.engine.resolve_hook(token, payload)
        self.run_until_idle()
        return found

    def cancel(self, run_id: str, reason: str = "cancelled by test") -> None:
        """Request cancellation of the run (or its live successor), then run until idle."""
        self.engine.cancel(live_run(self.engine, run_id), reason)
        self.run_until_idle()

    # -- reading -------------------------------------------------------------------------------

    def outcome(self, run_id: str) -> WorkflowTerminalOutcome | None:
        """How the run's chain ended (following ``continue_as_new``), or ``None`` if live."""
        return self.engine.snapshot(live_run(self.engine, run_id)).outcome

    def result(self, run_id: str) -> JsonValue:
        """The result of the run's chain; raises ``FlowError`` unless it completed."""
        live = live_run(self.engine, run_id)
        snapshot = self.engine.snapshot(live)
        outcome = snapshot.outcome
        if outcome is None or outcome.kind is not RunStatus.COMPLETED:
            detail = outcome.to_json() if outcome is not None else snapshot.status.value
            raise FlowError(f"run {live!r} did not complete: {detail}")
        return outcome.result

    def snapshot(self, run_id: str) -> WorkflowRunSnapshot:
        """The run's snapshot (exactly this run, not its successor)."""
        return self.engine.snapshot(run_id)

    def history(self, run_id: str) -> list[EventEnvelope]:
        """The run's events (exactly this run)."""
        return self.engine.history(run_id)

    def steps_run(self, run_id: str) -> dict[str, Any]:
        """Step id → output of the run's completed steps (a convenience for assertions)."""
        snapshot = self.engine.snapshot(run_id)
        return {s.step_id: s.output for s in snapshot.steps.values() if s.output is not None}

    # -- always replay -------------------------------------------------------------------------

    def _verify(self) -> None:
        for record in self.engine.list_runs():
            if self._checked.get(record.run_id) == record.last_sequence:
                continue
            history = self.engine.history(record.run_id)
            self._check_decision_failures(record.run_id, history)
            runtime = self.engine.runtimes.get(record.build_id)
            # A run stuck on a failed decision (allowed by fail_on_decision_error=False) would
            # fail its replay on that same error: the test is looking at it on purpose.
            stuck = not self.fail_on_decision_error and record.failing is not None
            if runtime is not None and not stuck:
                self._replay(runtime, history)
            self._checked[record.run_id] = history[-1].sequence if history else 0

    def _check_decision_failures(self, run_id: str, history: list[EventEnvelope]) -> None:
        if not self.fail_on_decision_error:
            return
        after = self._checked.get(run_id, 0)
        for envelope in history:
            event = envelope.event
            if envelope.sequence <= after or not isinstance(event, DecisionFailed):
                continue
            if event.mismatches:
                mismatches = [
                    Mismatch(
                        identity=str(m.get("identity")),
                        field=str(m.get("field")),
                        recorded=m.get("recorded"),
                        produced=m.get("produced"),
                        cause=m.get("cause") if isinstance(m.get("cause"), str) else None,
                    )
                    for m in event.mismatches
                    if isinstance(m, dict)
                ]
                raise NonDeterminismError(run_id, envelope.sequence, mismatches)
            raise WorkflowError(run_id, event.error_type, event.message)

    def _replay(self, runtime: Runtime, history: list[EventEnvelope]) -> None:
        result = replay_history(runtime, history)
        if result.ok:
            return
        run_id = result.run_id
        if result.error is not None:
            raise WorkflowError(run_id, "ReplayFailed", result.error)
        first = result.divergences[0]
        mismatches = [
            Mismatch(identity=d.identity, field=d.field, recorded=d.recorded, produced=d.produced)
            for d in result.divergences
        ]
        raise NonDeterminismError(run_id, first.sequence, mismatches)


__all__ = ["DEFAULT_START", "WorkflowEnvironment"]


def vanish(heartbeat: JsonValue = None) -> Callable[[JsonValue, StepInfo], Any]:
    """A fake step handler (``env.fake_step``) whose worker vanishes mid-attempt, after one
    heartbeat with ``heartbeat`` as details when given."""

    def fake(input: JsonValue, info: StepInfo) -> Any:
        if heartbeat is not None:
            info.heartbeat(heartbeat)
        raise AttemptVanished

    return fake


def hang() -> Callable[[JsonValue, StepInfo], Any]:
    """A fake step handler whose attempt never ends (on every try): only its timeout, counted
    on the manual clock from the attempt's first start, ends it."""
    return vanish()
