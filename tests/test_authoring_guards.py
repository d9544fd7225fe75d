"""DESIGN §2.1: the sequential helpers compare what they are given with history, and a reused
id, a clock read or a missing ``return`` is a ``decision_failed`` with a hint that fits."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta

import pytest
from engine_workflows import data, keys, make_engine

from flow_cli import NonDeterminismError, Runtime
from flow_cli.errors import HINT_CLOCK, HINT_PATCHED, HINT_REUSED_ID, Mismatch
from flow_cli.model.clock import ManualClock
from flow_cli.model.spec import WorkflowSpec
from flow_cli.model.status import RunStatus
from flow_cli.store.protocol import EventStore


def _reuse_runtime(sent: list[str]) -> Runtime:
    rt = Runtime(build_id="reuse-1")

    @rt.step("send")
    def send(input, info):
        sent.append(input["to"])
        return input

    @rt.workflow("reuse")
    def reuse(ctx):
        a = ctx.step("send", "send", {"to": "alice"})
        b = ctx.step("send", "send", {"to": "bob"})
        return ctx.complete([a, b])

    return rt


def test_a_reused_step_id_is_a_decision_failed_naming_it(
    store: EventStore, clock: ManualClock
) -> None:
    sent: list[str] = []
    engine = make_engine(store, [_reuse_runtime(sent)], clock)
    engine.start("reuse", run_id="reuse")

    engine.tick(until_idle=True)

    assert sent == ["alice"]  # nothing was invoked for bob
    assert keys(engine, "reuse")[-1] == "decision_failed"
    (failed,) = data(engine, "reuse", "decision_failed")
    assert failed["error_type"] == "NonDeterminismError"
    assert failed["mismatches"] == [
        {
            "identity": "step 'send'",
            "field": "id",
            "recorded": {"name": "send", "input": {"to": "alice"}},
            "produced": {"name": "send", "input": {"to": "bob"}},
        }
    ]
    assert "step 'send': used twice in one decision" in failed["message"]
    assert HINT_REUSED_ID in failed["message"]
    assert engine.snapshot("reuse").status is not RunStatus.COMPLETED


_ticks = itertools.count()


def _wall_clock() -> datetime:
    """A clock the guard of flow_cli.model.deciding cannot see (like ``from time import time``
    bound before Flow was imported): it moves on every call."""
    return datetime(2100, 1, 1, tzinfo=UTC) + timedelta(seconds=next(_ticks))


def _clock_runtime() -> Runtime:
    rt = Runtime(build_id="clock-1")

    @rt.step("ok")
    def ok(input, info):
        return input

    @rt.workflow("clock-timer")
    def clock_timer(ctx):
        passed = ctx.timer("deadline", _wall_clock() + timedelta(hours=1))  # the mistake
        ctx.step("work", "ok", 1)
        return ctx.complete(passed)

    @rt.workflow("clock-wait-until")
    def clock_wait_until(ctx):
        if ctx.wait_done("deadline"):
            return ctx.complete("late")
        return ctx.wait_until("deadline", _wall_clock() + timedelta(hours=1))  # the mistake

    return rt


@pytest.mark.parametrize("workflow", ["clock-timer", "clock-wait-until"])
def test_a_clock_read_is_a_decision_failed_with_the_clock_hint(
    store: EventStore, clock: ManualClock, workflow: str
) -> None:
    engine = make_engine(store, [_clock_runtime()], clock)
    engine.start(workflow, run_id="clock")

    engine.tick(until_idle=True)

    assert keys(engine, "clock")[:2] == ["run_started", "wait_started"]
    assert keys(engine, "clock")[-1] == "decision_failed"
    failed = data(engine, "clock", "decision_failed")[0]
    (mismatch,) = failed["mismatches"]
    assert (mismatch["identity"], mismatch["field"]) == ("wait 'deadline'", "deadline")
    assert "did workflow code read the clock? derive deadlines from ctx.now" in failed["message"]
    assert "ctx.patched" not in failed["message"]


def _changing_runtime(version: list[int]) -> Runtime:
    rt = Runtime(build_id="change-1")

    @rt.step("ok")
    def ok(input, info):
        return input

    @rt.workflow("change")
    def change(ctx):
        ctx.step("first", "ok", {"v": version[0]})
        return ctx.complete("done")

    @rt.workflow("change-child")
    def change_child(ctx):
        ctx.child("kid", "leaf", {"v": version[0]})
        return ctx.complete("done")

    @rt.workflow("change-signal")
    def change_signal(ctx):
        return ctx.complete(ctx.receive("w", f"name-{version[0]}"))

    @rt.workflow("leaf")
    def leaf(ctx):
        return ctx.wait_for_signal("forever", "never")

    return rt


@pytest.mark.parametrize(
    ("workflow", "identity", "field"),
    [
        ("change", "step 'first'", "input"),
        ("change-child", "child 'kid'", "input"),
        ("change-signal", "signal wait 'w'", "signal_name"),
    ],
)
def test_a_helper_compares_an_open_identity_with_history(
    store: EventStore, clock: ManualClock, workflow: str, identity: str, field: str
) -> None:
    version = [1]
    engine = make_engine(store, [_changing_runtime(version)], clock)
    engine.start(workflow, run_id="run")
    engine.decide("run")  # records the identity; it stays open (the step is not run)
    version[0] = 2
    engine.signal("run", "poke")  # a fact, so the run is decided again by the changed code

    engine.decide("run")

    assert keys(engine, "run")[-1] == "decision_failed"
    failed = data(engine, "run", "decision_failed")[-1]
    (mismatch,) = failed["mismatches"]
    assert (mismatch["identity"], mismatch["field"]) == (identity, field)
    assert HINT_PATCHED in failed["message"]


def test_a_missing_return_says_return_the_command(store: EventStore, clock: ManualClock) -> None:
    rt = Runtime(build_id="noreturn-1")

    @rt.workflow("forgot")
    def forgot(ctx):
        ctx.complete("done")  # no return

    engine = make_engine(store, [rt], clock)
    engine.start("forgot", run_id="forgot")
    engine.tick(until_idle=True)

    (failed,) = data(engine, "forgot", "decision_failed")
    assert "returned None" in failed["message"]
    assert "return the command" in failed["message"]


def test_hints_are_derived_from_the_mismatch() -> None:
    assert Mismatch("wait 'w'", "deadline", "a", "b").hint == HINT_CLOCK
    assert Mismatch("step 's'", "id", {}, {}).hint == HINT_REUSED_ID
    assert Mismatch("step 's'", "input", 1, 2).hint == HINT_PATCHED
    error = NonDeterminismError("r", 3, [Mismatch("wait 'w'", "deadline", "a", "b")])
    assert HINT_CLOCK in str(error)


def test_a_step_handler_can_be_named_by_its_function(store: EventStore, clock: ManualClock) -> None:
    rt = Runtime(build_id="fn-1")

    @rt.step("double")
    def double(input, info):
        return input * 2

    @rt.workflow("by-function")
    def by_function(ctx):
        first = ctx.step("a", double, 2)
        (second,) = ctx.all_steps([ctx.schedule_step("b", double, first)])
        return ctx.complete(second)

    def not_a_step(input, info):
        return input

    @rt.workflow("not-a-step")
    def not_registered(ctx):
        return ctx.complete(ctx.step("a", not_a_step, 1))

    engine = make_engine(store, [rt], clock)
    engine.start("by-function", run_id="fn")
    engine.start("not-a-step", run_id="bad")
    engine.tick(until_idle=True)

    assert engine.snapshot("fn").outcome.result == 8
    assert [d["name"] for d in data(engine, "fn", "step_scheduled")] == ["double", "double"]
    (failed,) = data(engine, "bad", "decision_failed")
    assert "not a step handler: decorate it with @runtime.step" in failed["message"]


def test_one_function_cannot_be_two_steps() -> None:
    rt = Runtime(build_id="two-names")

    def handler(input, info):
        return input

    rt.step("one")(handler)
    with pytest.raises(Exception, match="already registered as step 'one'"):
        rt.step("two")(handler)


def test_a_spec_writes_chain_fields_only_when_set() -> None:
    spec = WorkflowSpec(workflow="w", input=None, runtime_build_id="b")
    assert "first_run_id" not in spec.to_json()
    assert "chain_started_at" not in spec.to_json()
    started = datetime(2026, 1, 1, tzinfo=UTC)
    successor = spec.successor({"n": 1}, "w-1", started)
    assert successor.to_json()["first_run_id"] == "w-1"
    assert WorkflowSpec.from_json(successor.to_json()) == successor
    again = successor.successor({"n": 2}, "w-1~1", started + timedelta(days=1))
    assert (again.first_run_id, again.chain_started_at) == ("w-1", started)
    assert again.predecessor_run_id == "w-1~1"
