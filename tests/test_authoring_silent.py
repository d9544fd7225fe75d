"""DESIGN §2.6: the mistakes that used to end a run silently are each a ``decision_failed`` that
names the cause and the fix, in the testing kit and on an engine over every store.

A command built and not returned, a caught suspension, the clock / randomness / a fresh id read
in workflow code, and an undeclared patch marker.
"""

from __future__ import annotations

import logging
import random
import threading
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime

import pytest
from engine_workflows import data, keys, make_engine

from flow_cli import Runtime
from flow_cli.engine.sticky import STICKY_FROM
from flow_cli.errors import Mismatch, NonDeterminismError, WorkflowError
from flow_cli.model import deciding
from flow_cli.model.clock import ManualClock
from flow_cli.model.commands import Complete
from flow_cli.model.events import EventEnvelope, RunStarted
from flow_cli.model.snapshot import WorkflowRunSnapshot
from flow_cli.model.spec import WorkflowSpec
from flow_cli.model.status import RunStatus
from flow_cli.store.protocol import EventStore
from flow_cli.testing import WorkflowEnvironment

Workflow = Callable[..., object]


def _runtime(build: str, workflow: Workflow, patches: tuple[str, ...] = ()) -> Runtime:
    rt = Runtime(build_id=build, patches=patches)

    @rt.step("echo")
    def echo(input, info):
        return input

    rt.workflow("w")(workflow)
    return rt


def _on_engine(store: EventStore, clock: ManualClock, rt: Runtime) -> dict[str, object]:
    """Run ``w`` on an engine until idle; the ``decision_failed`` it must have recorded."""
    engine = make_engine(store, [rt], clock)
    engine.start("w", run_id="r")
    engine.tick(until_idle=True)
    assert engine.snapshot("r").status is not RunStatus.COMPLETED
    assert "decision_failed" in keys(engine, "r")
    return data(engine, "r", "decision_failed")[0]


def _in_kit(rt: Runtime) -> str:
    """Run ``w`` in the testing kit; the message of the error that fails the test."""
    env = WorkflowEnvironment(rt)
    env.start("w")
    with pytest.raises(WorkflowError) as raised:
        env.run_until_idle()
    return str(raised.value)


# -- a command built and not returned -----------------------------------------------------------


def _forgets_audit(ctx):
    ctx.schedule_step("audit", "echo", {"who": "alice"})  # the mistake: not returned
    return ctx.complete("done")


def _forgets_timer(ctx):
    ctx.wait_until("cool-off", ctx.started_at)
    return ctx.complete("done")


def _forgets_child(ctx):
    out = ctx.step("a", "echo", 1)
    ctx.start_child("kid", "w", None)
    return ctx.complete(out)


@pytest.mark.parametrize(
    ("workflow", "built"),
    [
        (_forgets_audit, "ctx.schedule_step('audit', 'echo', ...)"),
        (_forgets_timer, "ctx.wait_until('cool-off', ...)"),
        (_forgets_child, "ctx.start_child('kid', 'w', ...)"),
    ],
)
def test_a_command_built_and_not_returned_is_a_decision_failed(
    store: EventStore, clock: ManualClock, workflow: Workflow, built: str
) -> None:
    rt = _runtime("unreturned-1", workflow)
    failed = _on_engine(store, clock, rt)
    assert failed["error_type"] == "CommandNotReturned"
    assert built in str(failed["message"])
    assert "return it, or gather it with ctx.all_steps" in str(failed["message"])
    assert "CommandNotReturned" in _in_kit(rt)


def test_commands_returned_batched_or_already_recorded_are_fine() -> None:
    def batched(ctx):
        a = ctx.schedule_step("a", "echo", 1)
        b = ctx.schedule_step("b", "echo", 2)
        if ctx.step_output("b") is None:
            return ctx.schedule_steps([a, b])
        # Re-built on later decisions and not returned: already recorded, so harmless.
        outs = ctx.all_steps([ctx.schedule_step("c", "echo", 3), ctx.schedule_step("d", "echo", 4)])
        return ctx.complete([ctx.step_output("a"), ctx.step_output("b"), *outs])

    env = WorkflowEnvironment(_runtime("returned-1", batched))
    run = env.start("w")
    env.run_until_idle()
    assert env.result(run) == [1, 2, 3, 4]


# -- a caught suspension ------------------------------------------------------------------------


def _bare_except(ctx):
    try:
        out = ctx.step("a", "echo", 1)
    except:  # noqa: E722 - the mistake under test
        out = None
    return ctx.complete(out)


def _base_exception(ctx):
    try:
        out = ctx.step("a", "echo", 1)
    except BaseException:  # the mistake: it swallows Flow's suspension too
        out = None
    ctx.step("b", "echo", 2)
    return ctx.complete(out)


@pytest.mark.parametrize("workflow", [_bare_except, _base_exception])
def test_a_caught_suspension_is_a_decision_failed(
    store: EventStore, clock: ManualClock, workflow: Workflow
) -> None:
    rt = _runtime("caught-1", workflow)
    failed = _on_engine(store, clock, rt)
    assert failed["error_type"] == "SuspensionCaught"
    assert "workflow code caught Flow's suspension of ctx.schedule_step('a'" in str(
        failed["message"]
    )
    assert "SuspensionCaught" in _in_kit(rt)


def test_except_exception_around_a_step_is_fine() -> None:
    def careful(ctx):
        try:
            out = ctx.step("a", "echo", 1)
        except Exception:
            out = None
        return ctx.complete(out)

    env = WorkflowEnvironment(_runtime("careful-1", careful))
    run = env.start("w")
    env.run_until_idle()
    assert env.result(run) == 1


# -- the clock, randomness and fresh ids --------------------------------------------------------


def _random_branch(ctx):
    if random.random() < 0.5:  # the mistake
        return ctx.complete("heads")
    return ctx.complete(ctx.step("a", "echo", "tails"))


def _time_in_input(ctx):
    return ctx.complete(ctx.step("a", "echo", {"at": time.time()}))


def _uuid_in_input(ctx):
    return ctx.complete(ctx.step("a", "echo", {"id": str(uuid.uuid4())}))


def _datetime_now(ctx):
    return ctx.complete(ctx.step("a", "echo", {"at": datetime.now(UTC).isoformat()}))


def _utcnow_swallowed(ctx):
    try:
        stamp = datetime.utcnow().isoformat()
    except Exception:  # catching the refusal does not escape it
        stamp = "never"
    return ctx.complete(stamp)


@pytest.mark.parametrize(
    ("workflow", "call", "replacement"),
    [
        (_random_branch, "random.random()", "ctx.random()"),
        (_time_in_input, "time.time()", "ctx.now"),
        (_uuid_in_input, "uuid.uuid4()", "ctx.new_token(name)"),
        (_datetime_now, "datetime.now()", "ctx.now"),
        (_utcnow_swallowed, "datetime.utcnow()", "ctx.now"),
    ],
)
def test_the_clock_randomness_and_ids_are_refused_while_deciding(
    store: EventStore, clock: ManualClock, workflow: Workflow, call: str, replacement: str
) -> None:
    rt = _runtime("clock-1", workflow)
    failed = _on_engine(store, clock, rt)
    assert failed["error_type"] == "NonDeterministicCall"
    assert f"workflow code called {call}" in str(failed["message"])
    assert f"Hint: use {replacement} instead" in str(failed["message"])
    assert call in _in_kit(rt)


def test_random_in_workflow_code_is_caught_in_40_runs_of_40(
    store: EventStore, clock: ManualClock
) -> None:
    rt = _runtime("random-40", _random_branch)
    engine = make_engine(store, [rt], clock)
    for i in range(40):
        engine.start("w", run_id=f"r{i}")
    engine.tick(until_idle=True)
    failed = [data(engine, f"r{i}", "decision_failed")[0]["error_type"] for i in range(40)]
    assert failed == ["NonDeterministicCall"] * 40
    kit = 0
    for _ in range(40):
        kit += "random.random()" in _in_kit(rt)
    assert kit == 40


def test_steps_and_other_threads_may_read_the_clock_while_a_decision_runs() -> None:
    seen: list[object] = []
    inside = threading.Event()
    release = threading.Event()

    def other_thread() -> None:
        inside.wait(5)
        seen.extend([time.time() > 0, random.random() < 1, uuid.uuid4().version])
        seen.append(datetime.now(UTC).year > 2000)
        release.set()

    def waits_for_the_other_thread(ctx):
        inside.set()
        release.wait(5)  # the other thread reads the clock while this decision runs
        return ctx.complete(ctx.step("a", "stamp", None))

    rt = _runtime("threads-1", waits_for_the_other_thread)

    @rt.step("stamp")
    def stamp(input, info):
        return {"t": time.time() > 0, "r": random.random() < 1, "u": len(str(uuid.uuid4()))}

    thread = threading.Thread(target=other_thread)
    thread.start()
    env = WorkflowEnvironment(rt)
    run = env.start("w")
    env.run_until_idle()
    thread.join(5)
    assert seen == [True, True, 4, True]
    assert env.result(run) == {"t": True, "r": True, "u": 36}
    assert deciding.deciding() is None


def test_logging_in_workflow_code_may_read_the_clock(caplog: pytest.LogCaptureFixture) -> None:
    import logging

    def logs(ctx):
        logging.getLogger("my.workflow").warning("deciding %s", ctx.run_id)
        return ctx.complete(ctx.step("a", "echo", 1))

    env = WorkflowEnvironment(_runtime("logs-1", logs))
    run = env.start("w")
    env.run_until_idle()
    assert env.result(run) == 1
    assert "deciding" in caplog.text


# -- an undeclared patch marker -----------------------------------------------------------------


def _typo(ctx):
    if ctx.patched("tax-rounding-fxi"):  # the mistake
        return ctx.complete("new")
    return ctx.complete("old")


def test_an_undeclared_patch_marker_is_a_decision_failed_listing_the_declared(
    store: EventStore, clock: ManualClock
) -> None:
    rt = _runtime("patch-1", _typo, patches=("tax-rounding-fix", "b-fix"))
    failed = _on_engine(store, clock, rt)
    assert failed["error_type"] == "UnknownPatch"
    assert "ctx.patched('tax-rounding-fxi')" in str(failed["message"])
    assert "declared: 'b-fix', 'tax-rounding-fix'" in str(failed["message"])
    assert "UnknownPatch" in _in_kit(rt)


def test_a_declared_marker_is_false_for_runs_started_before_it() -> None:
    def guarded(ctx):
        return ctx.complete(ctx.patched("later-fix"))

    new = Runtime(build_id="same", patches=("later-fix",))
    new.workflow("w")(guarded)
    spec = WorkflowSpec(workflow="w", input=None, runtime_build_id="same", patches=())
    started = EventEnvelope(
        run_id="old",
        sequence=1,
        recorded_at=datetime(2026, 1, 1, tzinfo=UTC),
        event=RunStarted(spec=spec, seed="00" * 16),
    )
    assert new.decide(WorkflowRunSnapshot.start(started)) == Complete(result=False)


# -- in a kept workflow call (flow_cli.engine.sticky) -------------------------------------------


def _long_chain(after: Callable[[object], object]) -> Runtime:
    def chain(ctx):
        x = 0
        for i in range(STICKY_FROM + 4):
            x = ctx.step(f"s{i}", "echo", x + 1)
        return after(ctx)

    return _runtime("sticky-guard-1", chain)


@pytest.mark.parametrize(
    ("after", "error_type"),
    [
        (lambda ctx: ctx.complete(random.random()), "NonDeterministicCall"),
        (lambda ctx: ctx.complete(ctx.patched("nope")), "UnknownPatch"),
        (
            lambda ctx: (ctx.schedule_step("audit", "echo", 1), ctx.complete(None))[1],
            "CommandNotReturned",
        ),
    ],
)
def test_the_guards_hold_in_a_kept_workflow_call(
    store: EventStore, clock: ManualClock, after: Callable[[object], object], error_type: str
) -> None:
    engine = make_engine(store, [_long_chain(after)], clock)
    engine.start("w", run_id="r")
    engine.tick(until_idle=True)
    assert engine.decider.sticky.resumed > 0  # the call was kept, not replayed
    assert data(engine, "r", "decision_failed")[0]["error_type"] == error_type
    assert engine.snapshot("r").status is not RunStatus.COMPLETED


def test_a_suspension_caught_in_a_kept_call_is_a_decision_failed(
    store: EventStore, clock: ManualClock
) -> None:
    def chain(ctx):
        x = 0
        for i in range(STICKY_FROM + 4):
            x = ctx.step(f"s{i}", "echo", x + 1)
        try:
            got = ctx.receive("go", "go")
        except:  # noqa: E722 - the mistake under test
            got = None
        x = got or x
        return ctx.complete(ctx.step("last", "echo", x))

    engine = make_engine(store, [_runtime("sticky-caught-1", chain)], clock)
    engine.start("w", run_id="r")
    engine.tick(until_idle=True)
    assert engine.decider.sticky.resumed > 0
    assert data(engine, "r", "decision_failed")[0]["error_type"] == "SuspensionCaught"
    assert "last" not in engine.snapshot("r").steps


def test_a_long_value_shows_where_recorded_and_produced_differ() -> None:
    recorded = {"order": "x" * 300, "stamp": "2026-12-04T10:00:00.000001"}
    produced = {"order": "x" * 300, "stamp": "2026-12-04T10:00:07.123456"}
    error = NonDeterminismError(
        "r", 4, [Mismatch(identity="step 'a'", field="input", recorded=recorded, produced=produced)]
    )
    message = str(error)
    assert '"stamp": "2026-12-04T10:00:00.000001"' in message
    assert '"stamp": "2026-12-04T10:00:07.123456"' in message
    assert "was recorded as …" in message  # the common start is left out, on both sides


# -- a blocking call in workflow code -----------------------------------------------------------


def test_a_decision_that_blocks_is_a_warning_naming_the_run(
    store: EventStore,
    clock: ManualClock,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    from flow_cli.engine import decider
    from flow_cli.engine.observe import EVENTS_LOGGER, LogObserver

    monkeypatch.setattr(decider, "SLOW_DECISION_SECONDS", 0.05)

    def blocks(ctx):
        time.sleep(0.1)  # the mistake: it stalls every run this worker decides
        return ctx.complete(None)

    engine = make_engine(store, [_runtime("blocks-1", blocks)], clock)
    engine.observe(LogObserver())
    engine.start("w", run_id="sleepy")
    with caplog.at_level(logging.WARNING, logger=EVENTS_LOGGER):
        engine.tick(until_idle=True)
    (record,) = [r for r in caplog.records if getattr(r, "flow_event", None) == "decision_slow"]
    assert record.levelno == logging.WARNING
    assert "slow decision: run sleepy (w, build blocks-1) spent 0.1 s" in record.getMessage()
    assert "move blocking calls (time.sleep, I/O) into a step" in record.getMessage()
    assert record.flow_fields["run_id"] == "sleepy"  # type: ignore[attr-defined]
