"""DESIGN §6.5 search attributes, the authoring side: ``@runtime.workflow(attributes=)``,
``engine.start(attributes=)``, ``ctx.set_attributes`` (an ``attributes_set`` event in the same
append as the decision's command, replay-checked) and the values allowed."""

from __future__ import annotations

from typing import Any

import pytest

from flow_cli import Runtime, WorkflowContext
from flow_cli.engine.replay_check import replay_history
from flow_cli.errors import InputError, NonDeterminismError
from flow_cli.model.attributes import parse_attribute
from flow_cli.model.commands import RuntimeCommand
from flow_cli.model.events import AttributesSet, EventEnvelope, RunStarted, StepScheduled
from flow_cli.testing import WorkflowEnvironment

shop = Runtime(build_id="shop-1")


@shop.step("charge")
def charge(input: Any, info: object) -> str:
    return "charged"


@shop.workflow("order", attributes=lambda input: {"customer": input["customer"], "stage": "new"})
def order(ctx: WorkflowContext) -> RuntimeCommand:
    ctx.set_attributes({"stage": "charging", "amount": ctx.input["amount"]})
    ctx.step("charge", charge, ctx.input)
    ctx.set_attributes({"stage": "charged", "paid": True})
    return ctx.complete("done")


@shop.workflow("plain")
def plain(ctx: WorkflowContext) -> RuntimeCommand:
    return ctx.complete(None)


@shop.workflow("bad-value")
def bad_value(ctx: WorkflowContext) -> RuntimeCommand:
    ctx.set_attributes({"tags": ["a", "b"]})
    return ctx.complete(None)


def test_decorator_start_and_set_attributes_land_in_the_index() -> None:
    env = WorkflowEnvironment(shop)
    run = env.start("order", {"customer": "acme", "amount": 5}, attributes={"priority": 2})
    started = env.history(run)[0].event
    assert isinstance(started, RunStarted)
    assert started.spec.attributes == {"customer": "acme", "stage": "new", "priority": 2}
    env.run_until_idle()
    assert env.result(run) == "done"
    assert env.attributes(run) == {
        "customer": "acme",
        "stage": "charged",
        "priority": 2,
        "amount": 5,
        "paid": True,
    }
    assert env.snapshot(run).attributes == env.attributes(run)
    assert env.find(customer="acme", paid=True) == [run]
    assert env.find(customer="acme", paid=False) == []
    assert env.find(amount="5") == []  # typed: the text "5" is not the number 5


def test_attributes_set_is_appended_with_the_decisions_command() -> None:
    env = WorkflowEnvironment(shop)
    run = env.start("order", {"customer": "acme", "amount": 5})
    env.run_until_idle()
    history = env.history(run)
    keys = [e.event_key for e in history]
    first = keys.index("attributes_set")
    # Same sequence stamp as the step it goes with: one append.
    assert keys[first + 1] == "step_scheduled"
    assert history[first].recorded_at == history[first + 1].recorded_at
    sets = [e.event.attributes for e in history if isinstance(e.event, AttributesSet)]
    assert sets == [{"stage": "charging", "amount": 5}, {"stage": "charged", "paid": True}]
    # The second one is recorded with the terminal event.
    assert keys[-2:] == ["attributes_set", "run_completed"]


def test_explicit_start_attributes_win_over_the_decorator() -> None:
    env = WorkflowEnvironment(shop)
    run = env.start("order", {"customer": "acme", "amount": 1}, attributes={"customer": "other"})
    assert env.attributes(run)["customer"] == "other"


def test_a_changed_set_attributes_call_on_replay_is_non_determinism() -> None:
    env = WorkflowEnvironment(shop)
    run = env.start("order", {"customer": "acme", "amount": 5})
    env.run_until_idle()
    history = env.history(run)
    assert replay_history(shop, history).ok

    changed = Runtime(build_id="shop-1")
    changed.step("charge")(lambda input, info: "charged")

    @changed.workflow("order")
    def order_v2(ctx: WorkflowContext) -> RuntimeCommand:
        ctx.set_attributes({"stage": "charging", "amount": 6})  # was the input's 5
        ctx.step("charge", "charge", ctx.input)
        ctx.set_attributes({"stage": "charged", "paid": True})
        return ctx.complete("done")

    result = replay_history(changed, history)
    assert not result.ok
    [divergence] = result.divergences
    assert (divergence.identity, divergence.field) == ("set_attributes call #1", "attributes")
    assert divergence.produced == {"stage": "charging", "amount": 6}


def test_live_decision_with_a_changed_call_fails_with_non_determinism() -> None:
    """The engine's own decision (not replay-check): the n-th call is compared with the n-th
    recorded ``attributes_set``; a difference is a ``NonDeterminismError``."""
    from flow_cli.model.decision import Failed, decide
    from flow_cli.model.snapshot import project

    env = WorkflowEnvironment(shop)
    run = env.start("order", {"customer": "acme", "amount": 5})
    env.run_until_idle()
    # The history up to the step's completion: the next decision re-runs the first call.
    history = env.history(run)
    cut = [e.event_key for e in history].index("step_completed") + 1
    snap = project(history[:cut])

    changed = Runtime(build_id="shop-1")
    changed.step("charge")(lambda input, info: "charged")

    @changed.workflow("order")
    def order_v2(ctx: WorkflowContext) -> RuntimeCommand:
        ctx.set_attributes({"stage": "paying", "amount": 5})
        ctx.step("charge", "charge", ctx.input)
        return ctx.complete("done")

    decision = decide(snap, changed, env.now)
    assert isinstance(decision, Failed)
    assert isinstance(decision.error, NonDeterminismError)
    [mismatch] = decision.error.mismatches
    assert (mismatch.identity, mismatch.field) == ("set_attributes call #1", "attributes")
    assert mismatch.recorded == {"stage": "charging", "amount": 5}


def test_added_set_attributes_call_is_caught_by_replay_check() -> None:
    env = WorkflowEnvironment(shop)
    run = env.start("plain")
    env.run_until_idle()

    changed = Runtime(build_id="shop-1")

    @changed.workflow("plain")
    def plain_v2(ctx: WorkflowContext) -> RuntimeCommand:
        ctx.set_attributes({"x": 1})
        return ctx.complete(None)

    assert replay_history(shop, env.history(run)).ok
    assert not replay_history(changed, env.history(run)).ok


def test_a_value_of_a_wrong_type_from_code_fails_the_decision_clearly() -> None:
    env = WorkflowEnvironment(shop, fail_on_decision_error=False)
    run = env.start("bad-value")
    env.run_until_idle()
    record = env.engine.get_run(run)
    assert record.failing is not None
    assert "tags" in record.failing and "a string, a number or a boolean" in record.failing
    assert env.attributes(run) == {}
    assert not any(e.event_key == "attributes_set" for e in env.history(run))


@pytest.mark.parametrize(
    ("given", "why"),
    [
        ({"n": None}, "NoneType"),
        ({"n": {"a": 1}}, "dict"),
        ({"n": float("nan")}, "finite"),
        ({"": 1}, "empty"),
        ({1: 1}, "text"),
    ],
)
def test_engine_start_refuses_bad_attributes_and_writes_nothing(
    given: dict[Any, Any], why: str
) -> None:
    env = WorkflowEnvironment(shop)
    with pytest.raises(InputError, match=why):
        env.start("plain", run_id="r", attributes=given)
    assert env.engine.find_run("r") is None


def test_a_decorator_function_that_raises_is_an_input_error() -> None:
    env = WorkflowEnvironment(shop)
    with pytest.raises(InputError, match="attributes= raised KeyError"):
        env.start("order", {"amount": 1}, run_id="r")
    assert env.engine.find_run("r") is None


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("n=5", 5),
        ("n=5.0", 5),
        ("n=2.5", 2.5),
        ("ok=true", True),
        ("c=acme", "acme"),
        ('c="5"', "5"),
        ("c=null", "null"),
        ("c=[1]", "[1]"),
        ("c=a=b", "a=b"),
        ("c=", ""),
    ],
)
def test_the_command_line_value_rule(text: str, value: Any) -> None:
    _key, parsed = parse_attribute(text)
    assert parsed == value and type(parsed) is type(value)


@pytest.mark.parametrize("text", ["novalue", "=v", " k=v"])
def test_bad_command_line_attributes(text: str) -> None:
    with pytest.raises(InputError):
        parse_attribute(text)


def test_continuation_keeps_the_attributes() -> None:
    rt = Runtime(build_id="loop-1")

    @rt.step("tick")
    def tick(input: Any, info: object) -> int:
        return 1

    @rt.workflow("loop", attributes=lambda input: {"tenant": "t1"})
    def loop(ctx: WorkflowContext) -> RuntimeCommand:
        if ctx.input == 0:
            ctx.step("first", tick)  # the continuing decision is not the run's first
            ctx.set_attributes({"round": 0})
            return ctx.continue_as_new(1)
        return ctx.complete(ctx.input)

    env = WorkflowEnvironment(rt)
    run = env.start("loop", 0, run_id="loop")
    env.run_until_idle()
    assert env.attributes("loop~1") == {"tenant": "t1", "round": 0}
    assert env.find(tenant="t1") == ["loop~1", run]


def test_history_json_round_trip() -> None:
    event = AttributesSet(attributes={"a": 1, "b": "x", "c": False})
    envelope = EventEnvelope.from_json(
        "r",
        {
            "sequence": 2,
            "event_key": "attributes_set",
            "recorded_at": "2026-01-01T00:00:00+00:00",
            "data": event.to_data(),
        },
    )
    assert envelope.event == event
    assert not isinstance(envelope.event, StepScheduled)


def test_many_steps_with_attributes_each_stay_deterministic() -> None:
    """A long sequential run (past the sticky-call threshold) setting an attribute before each
    step: every call is recorded once, in order, and the index holds the last value."""
    rt = Runtime(build_id="long-1")

    @rt.step("inc")
    def inc(input: Any, info: object) -> int:
        return int(input) + 1

    @rt.workflow("long")
    def long(ctx: WorkflowContext) -> RuntimeCommand:
        n = 0
        for i in range(24):
            ctx.set_attributes({"progress": i})
            n = ctx.step(f"s{i}", inc, n)
        return ctx.complete(n)

    env = WorkflowEnvironment(rt)
    run = env.start("long")
    env.run_until_idle()
    assert env.result(run) == 24
    sets = [e.event.attributes for e in env.history(run) if isinstance(e.event, AttributesSet)]
    assert sets == [{"progress": i} for i in range(24)]
    assert env.attributes(run) == {"progress": 23}
    assert replay_history(rt, env.history(run)).ok
    # Past STICKY_FROM steps the call waiting in ctx.step was resumed, not replayed: the
    # attributes_set recorded with each step does not count as "something else happened".
    assert env.engine.decider.sticky.resumed > 0


def test_a_child_starts_with_its_workflows_attributes() -> None:
    rt = Runtime(build_id="family-1")

    @rt.workflow("kid", attributes=lambda input: {"sku": input["sku"]})
    def kid(ctx: WorkflowContext) -> RuntimeCommand:
        return ctx.complete(ctx.input["sku"])

    @rt.workflow("broken-kid", attributes=lambda input: {"sku": input["missing"]})
    def broken_kid(ctx: WorkflowContext) -> RuntimeCommand:
        return ctx.complete(None)

    @rt.workflow("parent")
    def parent(ctx: WorkflowContext) -> RuntimeCommand:
        ctx.child("k", "kid", {"sku": "A-1"})
        ctx.child("b", "broken-kid", {"sku": "B-1"})
        return ctx.complete("ok")

    env = WorkflowEnvironment(rt)
    run = env.start("parent", run_id="p")
    env.run_until_idle()
    assert env.result(run) == "ok"
    assert env.attributes("p/k") == {"sku": "A-1"}
    assert env.find(sku="A-1") == ["p/k"]
    # A function that raises for a child leaves it without attributes (and logged).
    assert env.attributes("p/b") == {}


def test_a_query_handler_cannot_set_attributes() -> None:
    from flow_cli.errors import CommandInHandler

    rt = Runtime(build_id="q-1")

    @rt.workflow("w")
    def w(ctx: WorkflowContext) -> RuntimeCommand:
        return ctx.wait_for_signal("go", "go")

    @rt.query("w", "sneaky")
    def sneaky(ctx: WorkflowContext, args: Any) -> Any:
        ctx.set_attributes({"x": 1})
        return None

    env = WorkflowEnvironment(rt)
    run = env.start("w")
    env.run_until_idle()
    with pytest.raises(CommandInHandler, match="set_attributes"):
        env.query(run, "sneaky")
    assert env.attributes(run) == {}
