"""Adversarial review of the engine: each test pins a rule of the execution model that an
earlier build got wrong (races, determinism checks, replay checking)."""

from __future__ import annotations

from datetime import timedelta, timezone

from engine_workflows import data, determinism_runtime, hang_step, keys, make_engine

from flow_cli import Runtime
from flow_cli.engine.replay_check import replay_history
from flow_cli.errors import NonDeterminismError
from flow_cli.model.clock import ManualClock
from flow_cli.model.determinism import plan
from flow_cli.model.snapshot import project
from flow_cli.model.status import RunStatus
from flow_cli.store.protocol import EventStore

BERLIN_WINTER = timezone(timedelta(hours=1))


def _tz_wait_runtime() -> Runtime:
    rt = Runtime(build_id="review-1")

    @rt.workflow("tz-wait")
    def tz_wait(ctx):
        # A perfectly valid aware deadline, written in local time rather than UTC.
        deadline = ctx.started_at.astimezone(BERLIN_WINTER) + timedelta(seconds=60)
        if not ctx.wait_done("w"):
            return ctx.wait_until("w", deadline)
        return ctx.complete("woke")

    return rt


def test_a_deadline_given_in_another_zone_is_the_same_instant_on_every_worker(
    store: EventStore, clock: ManualClock
) -> None:
    """Rule 2 compares the UTC deadline: the same instant written with another offset is not a
    non-determinism, whether the worker replays from its cache or from the store."""
    rt = _tz_wait_runtime()
    first = make_engine(store, [rt], clock, "w1")
    first.start("tz-wait", run_id="r")
    first.tick(until_idle=True)
    # A second worker (another process: no snapshot cache) decides the run next.
    second = make_engine(store, [rt], clock, "w2")
    second.signal("r", "poke")  # wakes the run: the code re-issues the open timer
    second.tick(until_idle=True)
    assert second.snapshot("r").decision_error is None
    clock.advance(61)
    second.tick(until_idle=True)
    assert keys(second, "r") == [
        "run_started",
        "wait_started",
        "signal_received",
        "wait_completed",
        "run_completed",
    ]
    assert second.snapshot("r").status is RunStatus.COMPLETED
    recorded = second.history("r")[1].event.to_data()["deadline"]
    assert recorded.endswith("+00:00"), recorded  # history holds the UTC deadline
    assert replay_history(rt, second.history("r")).ok


def _cancel_runtime(on_cancel: str) -> Runtime:
    rt = Runtime(build_id="review-cancel")

    @rt.workflow("ignores-cancel")
    def ignores_cancel(ctx):
        if ctx.cancel_requested and on_cancel == "complete":
            return ctx.complete("finished anyway")
        if ctx.cancel_requested and on_cancel == "cleanup-step":
            return ctx.schedule_step("cleanup", "cleanUp", None)
        if ctx.cancel_requested and on_cancel == "new-wait" and not ctx.wait_done("later"):
            return ctx.wait_for_signal("later", "later")
        payload = ctx.receive("go", "go")
        return ctx.complete(payload)

    return rt


def test_replay_check_reports_new_code_that_would_not_let_the_engine_cancel(
    store: EventStore, clock: ManualClock
) -> None:
    """Rule 12 + replay-check: a ``run_cancelled`` the engine wrote because the code only
    re-issued what was open is matched only by code that again starts nothing new. Code that
    would complete (or fail, or continue) at that point diverges, and replay-check must say so."""
    recorded_build = _cancel_runtime("ignore")
    engine = make_engine(store, [recorded_build], clock)
    engine.start("ignores-cancel", run_id="r")
    engine.tick(until_idle=True)
    engine.cancel("r", "stop")
    engine.tick(until_idle=True)
    history = engine.history("r")
    assert keys(engine, "r")[-1] == "run_cancelled"
    assert replay_history(recorded_build, history).ok

    completes = replay_history(_cancel_runtime("complete"), history)
    assert not completes.ok
    assert [(d.identity, d.field) for d in completes.divergences] == [("run outcome", "command")]
    # Code that schedules a cleanup step at that point (the engine would run it) diverges too.
    cleans_up = replay_history(_cancel_runtime("cleanup-step"), history)
    assert not cleans_up.ok
    # A new wait is not cleanup: the engine would have cancelled all the same.
    assert replay_history(_cancel_runtime("new-wait"), history).ok


def _one_step_runtime(calls: list[str]) -> Runtime:
    rt = Runtime(build_id="review-step")

    @rt.workflow("one-step")
    def one_step(ctx):
        return ctx.complete(ctx.step("s", "work"))

    @rt.step("work")
    def work(input, info):
        calls.append(info.worker)
        return "done"

    return rt


def test_a_worker_with_a_stale_lease_does_not_run_an_attempt_another_worker_holds(
    store: EventStore, clock: ManualClock
) -> None:
    """Rule 6: an attempt runs again only after its lease expired. Worker A leased the step and
    stalled past its lease; worker B leased it again. Whichever starts first holds the attempt:
    the other must not run it concurrently while that lease is live."""
    calls: list[str] = []
    rt = _one_step_runtime(calls)
    a = make_engine(store, [rt], clock, "A")
    b = make_engine(store, [rt], clock, "B")
    a.start("one-step", run_id="r")
    a.decide("r")  # the first decision schedules the step
    (lease_a,) = a.work.lease_steps(30, 10)
    clock.advance(31)  # A stalls (GC pause, slow network) past its lease
    (lease_b,) = b.work.lease_steps(30, 10)
    seen = []
    # A starts its attempt; while its handler would run, B tries its own lease of the same attempt.
    a.executor.execute(
        lease_a, "A", 30, before_call=lambda: seen.append(b.work.execute_step(lease_b, 30))
    )
    if not seen:
        seen.append(b.work.execute_step(lease_b, 30))
    assert len(calls) == 1, calls
    a.tick(until_idle=True)
    assert len(calls) == 1, calls
    assert keys(a, "r")[-2:] == ["step_completed", "run_completed"]


def _mutating_parent_runtime() -> Runtime:
    rt = Runtime(build_id="review-child")

    @rt.workflow("child")
    def child(ctx):
        return ctx.complete({"items": [1]})

    @rt.workflow("mutating-parent")
    def mutating_parent(ctx):
        outcome = ctx.child("c", "child")
        # Careless but legal code: it edits the value it was handed.
        outcome.result["items"].append(len(outcome.result["items"]) + 1)
        if ctx.step_output("s") is None:
            return ctx.schedule_step("s", "echo", outcome.result)
        return ctx.complete(outcome.result)

    @rt.step("echo")
    def echo(input, info):
        return input

    return rt


def test_workflow_code_cannot_change_a_child_outcome_in_the_snapshot(
    store: EventStore, clock: ManualClock
) -> None:
    """The snapshot is a projection of history: mutating what ``ctx.child_outcome`` returns must
    not change the (cached) snapshot, or the next decision sees another input than history."""
    engine = make_engine(store, [_mutating_parent_runtime()], clock)
    engine.start("mutating-parent", run_id="p")
    engine.tick(until_idle=True)
    snapshot = engine.snapshot("p")
    assert snapshot.decision_error is None
    assert snapshot.outcome is not None and snapshot.outcome.result == {"items": [1, 2]}
    assert snapshot.to_json() == project(engine.history("p")).to_json()
    assert snapshot.children["c"].outcome == {"kind": "Completed", "result": {"items": [1]}}


def test_a_recorded_batch_re_issued_with_another_member_is_a_non_determinism(
    store: EventStore, clock: ManualClock
) -> None:
    """Rules 2 and 3: a batch is one identity. Changed code that re-issues batch ``pay`` with an
    extra member must not have that member silently appended to the recorded batch."""
    engine_a = make_engine(store, [determinism_runtime()], clock, "worker-a")
    engine_a.start("det-batch", run_id="r")
    engine_a.decide("r")
    hang_step(engine_a, "r", "b")  # "a" completes (decided by code A: wait for "b"), "b" hangs
    before = keys(engine_a, "r")
    changed = make_engine(store, [determinism_runtime(batch_extra=True)], clock, "worker-b")
    changed.decide("r")  # the changed code decides the run the next time it is due
    assert keys(changed, "r") == [*before, "decision_failed"]
    (failed,) = data(changed, "r", "decision_failed")
    assert failed["mismatches"] == [
        {
            "identity": "batch 'pay'",
            "field": "steps",
            "recorded": ["a", "b"],
            "produced": ["a", "b", "c"],
        }
    ]
    assert set(changed.snapshot("r").steps) == {"a", "b"}


def test_a_recorded_child_batch_re_issued_with_fewer_members_is_a_non_determinism() -> None:
    rt = Runtime(build_id="review-kids")
    snapshot_runtime = Runtime(build_id="review-kids")

    @rt.workflow("kids")
    def kids(ctx):
        return ctx.start_children(
            [ctx.start_child("x", "leaf"), ctx.start_child("y", "leaf")], batch_id="kids"
        )

    @snapshot_runtime.workflow("kids")
    def fewer_kids(ctx):
        return ctx.start_children([ctx.start_child("x", "leaf")], batch_id="kids")

    @rt.workflow("leaf")
    def leaf(ctx):
        return ctx.wait_for_signal("never", "never")

    from flow_cli.store.memory import MemoryStore

    engine = make_engine(MemoryStore(), [rt], ManualClock())
    engine.start("kids", run_id="k")
    engine.tick(until_idle=True)
    snapshot = engine.snapshot("k")
    assert set(snapshot.children) == {"x", "y"}
    try:
        plan(snapshot, snapshot_runtime.decide(snapshot))
    except NonDeterminismError as exc:
        assert [(m.identity, m.field) for m in exc.mismatches] == [("batch 'kids'", "children")]
    else:
        raise AssertionError("a batch that lost a member was accepted")


def test_continue_as_new_under_cancellation_carries_the_request_to_the_successor() -> None:
    from flow_cli import Runtime
    from flow_cli.engine.engine import Engine
    from flow_cli.model.clock import ManualClock
    from flow_cli.store.memory import MemoryStore

    runtime = Runtime(build_id="carry-1")

    @runtime.workflow("loop")
    def loop(ctx):  # type: ignore[no-untyped-def]
        if ctx.wait_done("tick"):
            return ctx.continue_as_new({"n": (ctx.input or {}).get("n", 0) + 1})
        return ctx.wait_for_signal("tick", "tick")

    engine = Engine(MemoryStore(), [runtime], clock=ManualClock())
    engine.start("loop", {"n": 0}, run_id="loop")
    engine.tick(until_idle=True)
    engine.signal("loop", "tick")
    engine.cancel("loop", "shutting down")
    engine.tick(until_idle=True)
    # The code ignored the request and continued; the successor must not run on regardless.
    assert engine.snapshot("loop").status.value == "ContinuedAsNew"
    successor = engine.snapshot("loop~1")
    assert successor.cancel_requested and successor.cancel_reason == "shutting down"
    assert successor.status.value == "Cancelled"


def test_workflow_code_calling_sys_exit_is_a_decision_failure_not_a_dead_worker() -> None:
    import sys

    from flow_cli import Runtime
    from flow_cli.engine.engine import Engine
    from flow_cli.model.clock import ManualClock
    from flow_cli.store.memory import MemoryStore

    runtime = Runtime(build_id="exit-1")

    @runtime.workflow("bye")
    def bye(ctx):  # type: ignore[no-untyped-def]
        sys.exit(3)

    @runtime.step("quit")
    def quit_step(input, info):  # type: ignore[no-untyped-def]
        sys.exit(4)

    @runtime.workflow("step-bye")
    def step_bye(ctx):  # type: ignore[no-untyped-def]
        return ctx.schedule_step("s", "quit", None)

    engine = Engine(MemoryStore(), [runtime], clock=ManualClock())
    engine.start("bye", None, run_id="a")
    engine.start("step-bye", None, run_id="b")
    engine.tick(until_idle=True)
    assert engine.history("a")[-1].event_key == "decision_failed"
    failed = [e.event for e in engine.history("b") if e.event_key == "step_failed"]
    assert failed and failed[0].to_data()["error_type"] == "SystemExit"


def test_same_run_id_under_another_build_is_not_the_same_spec() -> None:
    import pytest

    from flow_cli import Runtime
    from flow_cli.engine.engine import Engine
    from flow_cli.errors import RunAlreadyExists
    from flow_cli.store.memory import MemoryStore

    def build(build_id: str) -> Runtime:
        runtime = Runtime(build_id=build_id)

        @runtime.workflow("w")
        def w(ctx):  # type: ignore[no-untyped-def]
            return ctx.complete(None)

        return runtime

    engine = Engine(MemoryStore(), [build("old"), build("new")], default_build="old")
    assert engine.start("w", {"a": 1}, run_id="r").created
    assert not engine.start("w", {"a": 1}, run_id="r", build_id="old").created
    with pytest.raises(RunAlreadyExists, match="build id"):
        engine.start("w", {"a": 1}, run_id="r", build_id="new")
