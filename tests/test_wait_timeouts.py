"""DESIGN §2.6: ``timeout=`` on ``ctx.receive``, ``ctx.hook`` and ``ctx.timer`` counts from the
decision that opened the wait, as ``ctx.sleep`` does; a deadline that moves with ``ctx.now`` gets a
hint that says so."""

from __future__ import annotations

from datetime import timedelta

import pytest
from engine_workflows import data, make_engine

from flow_cli import TIMED_OUT, Runtime
from flow_cli.errors import HINT_CLOCK, HINT_MOVING_DEADLINE, NonDeterminismError
from flow_cli.model.clock import ManualClock
from flow_cli.model.status import RunStatus
from flow_cli.store.protocol import EventStore
from flow_cli.testing import WorkflowEnvironment


def _runtime() -> Runtime:
    rt = Runtime(build_id="timeouts-1")

    @rt.step("echo")
    def echo(input, info):
        return input

    @rt.workflow("receive")
    def receive(ctx):
        ctx.step("first", "echo", 1)
        got = ctx.receive("approve", "approve", timeout=timedelta(days=2))
        return ctx.complete("timed out" if got is TIMED_OUT else got)

    @rt.workflow("hook")
    def hook(ctx):
        got = ctx.hook("callback", timeout=3600, token="tok-1")
        return ctx.complete("timed out" if got is TIMED_OUT else got)

    @rt.workflow("timer")
    def timer(ctx):
        if ctx.timer("t", timeout=timedelta(hours=1)):
            return ctx.complete("fired")
        return ctx.complete(ctx.receive("poke", "poke"))

    @rt.workflow("moving")
    def moving(ctx):
        ctx.step("first", "echo", 1)
        got = ctx.receive("approve", "approve", deadline=ctx.now + timedelta(days=2))  # mistake
        return ctx.complete(got)

    return rt


def test_a_receive_timeout_counts_from_the_decision_that_opened_the_wait(
    store: EventStore, clock: ManualClock
) -> None:
    engine = make_engine(store, [_runtime()], clock)
    engine.start("receive", run_id="r")
    engine.tick(until_idle=True)
    opened = engine.snapshot("r").last_event_at
    assert opened is not None
    clock.advance(timedelta(days=1))
    engine.signal("r", "approve", {"ok": True})
    engine.tick(until_idle=True)
    snapshot = engine.snapshot("r")
    assert snapshot.outcome is not None and snapshot.outcome.result == {"ok": True}
    assert snapshot.waits["approve:deadline"].deadline == opened + timedelta(days=2)


def test_a_receive_timeout_passes_without_a_signal() -> None:
    env = WorkflowEnvironment(_runtime())
    run = env.start("receive")
    env.run_until_idle()
    env.advance(days=1)
    assert env.outcome(run) is None
    env.advance(days=1, seconds=1)
    assert env.result(run) == "timed out"


def test_a_hook_timeout_and_a_timer_timeout() -> None:
    env = WorkflowEnvironment(_runtime())
    hooked = env.start("hook")
    timed = env.start("timer")
    env.run_until_idle()
    env.advance(minutes=30)
    env.resolve_hook("tok-1", {"paid": True})
    assert env.result(hooked) == {"paid": True}
    assert env.outcome(timed) is None
    env.advance(minutes=31)
    assert env.result(timed) == "fired"


def test_deadline_and_timeout_together_are_refused() -> None:
    rt = Runtime(build_id="both-1")

    @rt.workflow("both")
    def both(ctx):
        return ctx.complete(ctx.receive("w", "s", deadline=ctx.started_at, timeout=5))

    env = WorkflowEnvironment(rt, fail_on_decision_error=False)
    run = env.start("both")
    env.run_until_idle()
    error = env.snapshot(run).decision_error
    assert error is not None
    assert "give deadline= or timeout=, not both" in error.message


def test_a_deadline_that_moves_with_ctx_now_gets_a_hint_that_says_so(
    store: EventStore, clock: ManualClock
) -> None:
    engine = make_engine(store, [_runtime()], clock)
    engine.start("moving", run_id="m")
    engine.tick(until_idle=True)
    clock.advance(timedelta(hours=5))
    engine.signal("m", "approve", {"ok": True})
    engine.tick(until_idle=True)
    assert engine.snapshot("m").status is not RunStatus.COMPLETED
    (failed,) = data(engine, "m", "decision_failed")
    assert failed["mismatches"][0]["cause"] == "moves-with-now"
    assert HINT_MOVING_DEADLINE in str(failed["message"])
    assert "derive it from ctx.started_at, or use timeout=" in str(failed["message"])
    assert HINT_CLOCK not in str(failed["message"])


def test_the_moving_deadline_hint_in_the_testing_kit() -> None:
    env = WorkflowEnvironment(_runtime())
    run = env.start("moving")
    env.run_until_idle()
    env.advance(hours=5)
    with pytest.raises(NonDeterminismError) as raised:
        env.signal(run, "approve", {"ok": True})
    assert "use timeout=" in str(raised.value)


def test_a_timer_deadline_that_moves_with_ctx_now_gets_the_hint_too() -> None:
    rt = Runtime(build_id="moving-timer-1")

    @rt.workflow("nap")
    def nap(ctx):
        ctx.sleep_until("nap", ctx.now + timedelta(hours=1))  # the mistake: use ctx.sleep
        return ctx.complete("rested")

    env = WorkflowEnvironment(rt)
    env.start("nap")
    env.run_until_idle()
    with pytest.raises(NonDeterminismError) as raised:
        env.advance(hours=2)
    assert "wait 'nap': deadline" in str(raised.value)
    assert HINT_MOVING_DEADLINE in str(raised.value)
