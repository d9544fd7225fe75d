"""``ctx.first`` (select), ``ctx.all_settled`` and ``ctx.spawn``; every run replay-checked."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from engine_workflows import keys, make_engine

from flow_cli import RetryPolicy, Runtime, StepInfo, WorkflowContext
from flow_cli.model.clock import ManualClock
from flow_cli.model.commands import RuntimeCommand
from flow_cli.model.status import RunStatus
from flow_cli.store.protocol import EventStore
from flow_cli.testing import WorkflowEnvironment

SURFACE = RetryPolicy(max_attempts=1, on_exhausted="surface")
SLOW_RETRY = RetryPolicy(max_attempts=2, initial_interval=3600)


def build() -> Runtime:
    runtime = Runtime(build_id="select-1")

    @runtime.workflow("approve")
    def approve(ctx: WorkflowContext) -> RuntimeCommand:
        which, value = ctx.first(
            ctx.on_signal("ok", "approval"),
            ctx.on_signal("no", "rejection"),
            ctx.on_timer("late", timeout=timedelta(days=2)),
        )
        # A later "approval" must not be swallowed by the losing wait "ok".
        after = ctx.receive("after", "approval", timeout=timedelta(days=9))
        return ctx.complete({"which": which, "value": value, "after": str(after)})

    @runtime.workflow("race-step")
    def race_step(ctx: WorkflowContext) -> RuntimeCommand:
        which, value = ctx.first(
            ctx.on_step("work", "flaky" if ctx.input["flaky"] else "fine", {}, SLOW_RETRY),
            ctx.on_timer("limit", timeout=60),
        )
        return ctx.complete({"which": which, "value": value})

    @runtime.workflow("race-hook")
    def race_hook(ctx: WorkflowContext) -> RuntimeCommand:
        which, value = ctx.first(
            ctx.on_hook("callback", token=f"tok-{ctx.run_id}"),
            ctx.on_child("kid", "child", {"x": 1}),
        )
        if which == "kid":
            value = value.result
        return ctx.complete({"which": which, "value": value})

    @runtime.workflow("settle")
    def settle(ctx: WorkflowContext) -> RuntimeCommand:
        results = ctx.all_settled(
            [
                ctx.schedule_step("a", "fine", {}),
                ctx.schedule_step("b", "flaky", {}, SURFACE),
            ]
        )
        return ctx.complete([[r.ok, r.value, r.error] for r in results])

    @runtime.workflow("settle-children")
    def settle_children(ctx: WorkflowContext) -> RuntimeCommand:
        results = ctx.all_settled(
            [ctx.start_child("k1", "child", {"x": 1}), ctx.start_child("k2", "child", {"x": -1})]
        )
        return ctx.complete([[r.ok, r.value] for r in results])

    @runtime.workflow("spawner")
    def spawner(ctx: WorkflowContext) -> RuntimeCommand:
        run_id = ctx.spawn("detached", "waiter", None)
        return ctx.complete({"spawned": run_id})

    @runtime.workflow("waiter")
    def waiter(ctx: WorkflowContext) -> RuntimeCommand:
        return ctx.complete(ctx.receive("go", "go"))

    @runtime.workflow("child")
    def child(ctx: WorkflowContext) -> RuntimeCommand:
        if ctx.input["x"] < 0:
            return ctx.fail({"type": "Negative"})
        if ctx.input["x"] == 1 and ctx.run_id.endswith("/kid"):
            ctx.receive("hold", "hold")  # the hook race: the child waits until told
        return ctx.complete(ctx.input["x"] * 10)

    @runtime.step("fine")
    def fine(input: Any, info: StepInfo) -> Any:
        return "done"

    @runtime.step("flaky")
    def flaky(input: Any, info: StepInfo) -> Any:
        raise RuntimeError("down")

    return runtime


def test_the_first_signal_wins_and_a_losing_name_stays_buffered() -> None:
    env = WorkflowEnvironment(build())
    run = env.start("approve")
    env.run_until_idle()
    env.signal(run, "rejection", {"why": "budget"})
    snap = env.snapshot(run)
    assert snap.signal_waits["ok"].closed
    assert not snap.signal_waits["ok"].delivered
    env.signal(run, "approval", "later")
    assert env.result(run) == {"which": "no", "value": {"why": "budget"}, "after": "later"}
    data = [e.to_json()["data"] for e in env.history(run) if e.event_key == "signal_wait_started"]
    assert data[0] == {
        "wait_id": "ok",
        "signal_name": "approval",
        "select": ["signal:ok", "signal:no", "timer:late"],
    }


def test_the_timer_wins_when_nothing_comes() -> None:
    env = WorkflowEnvironment(build())
    run = env.start("approve")
    env.advance(days=2, minutes=1)
    assert env.snapshot(run).signal_waits["ok"].closed
    env.signal(run, "approval", "late one")
    assert env.result(run) == {"which": "late", "value": None, "after": "late one"}


def test_a_signal_that_came_first_wins_at_once() -> None:
    env = WorkflowEnvironment(build())
    run = env.engine.start("approve", signal=("approval", "early")).run_id
    env.run_until_idle()
    snap = env.snapshot(run)
    assert "no" not in snap.signal_waits  # won before the other branches were opened
    assert "late" not in snap.waits
    env.signal(run, "approval", "second")
    assert env.result(run) == {"which": "ok", "value": "early", "after": "second"}


def test_a_step_branch_and_a_timer() -> None:
    env = WorkflowEnvironment(build())
    quick = env.start("race-step", {"flaky": False})
    slow = env.start("race-step", {"flaky": True})
    env.run_until_idle()
    assert env.result(quick) == {"which": "work", "value": "done"}
    env.advance(seconds=61)  # the retry is an hour away: the timer wins
    assert env.result(slow) == {"which": "limit", "value": None}


def test_a_hook_or_a_child() -> None:
    env = WorkflowEnvironment(build())
    run = env.start("race-hook")
    env.run_until_idle()
    env.resolve_hook(f"tok-{run}", {"paid": True})
    assert env.result(run) == {"which": "callback", "value": {"paid": True}}
    other = env.start("race-hook", run_id="other")
    env.run_until_idle()
    env.signal("other/kid", "hold")
    assert env.result(other) == {"which": "kid", "value": 10}


def test_all_settled_never_raises_for_a_member() -> None:
    env = WorkflowEnvironment(build())
    run = env.start("settle")
    env.run_until_idle()
    result = env.result(run)
    assert result[0] == [True, "done", None]
    assert result[1][:2] == [False, None]
    assert result[1][2]["type"] == "RuntimeError"
    kids = env.start("settle-children")
    env.run_until_idle()
    assert env.result(kids) == [[True, 10], [False, None]]


def test_spawn_returns_the_child_run_id_and_does_not_wait() -> None:
    env = WorkflowEnvironment(build())
    run = env.start("spawner", run_id="sp")
    env.run_until_idle()
    assert env.result(run) == {"spawned": "sp/detached"}
    assert env.snapshot("sp").children["detached"].cancellation == "abandon"
    assert env.outcome("sp/detached") is None  # it runs on
    env.signal("sp/detached", "go", 5)
    assert env.result("sp/detached") == 5


def test_select_on_every_store(store: EventStore, clock: ManualClock) -> None:
    engine = make_engine(store, [build()], clock)
    engine.start("approve", run_id="a1")
    engine.tick(until_idle=True)
    engine.signal("a1", "rejection", 1)
    engine.tick(until_idle=True)
    engine.signal("a1", "approval", 2)
    engine.tick(until_idle=True)
    snap = engine.snapshot("a1")
    assert snap.status is RunStatus.COMPLETED
    assert snap.outcome is not None and snap.outcome.result == {
        "which": "no",
        "value": 1,
        "after": "2",
    }
    assert keys(engine, "a1").count("signal_wait_started") == 3
