"""Queries: the run's own handler answers on its current history, and nothing is written."""

from __future__ import annotations

import pytest
from engine_workflows import make_engine
from talk_workflows import ORDER, build

from flow_cli.errors import (
    CommandInHandler,
    HandlerFailed,
    InputError,
    RunBuildNotLoaded,
    RunNotFound,
    UndeclaredName,
)
from flow_cli.model.clock import ManualClock
from flow_cli.store.protocol import EventStore
from flow_cli.testing import WorkflowEnvironment


def test_a_query_answers_from_history_and_writes_nothing(
    store: EventStore, clock: ManualClock
) -> None:
    engine = make_engine(store, [build()], clock)
    engine.start("order", ORDER, run_id="o1")
    engine.tick(until_idle=True)
    before = engine.snapshot("o1").last_sequence
    answer = engine.query("o1", "status", {"who": "support"})
    assert answer.to_json() == {
        "run_id": "o1",
        "query": "status",
        "result": {
            "charged": True,
            "shipped": False,
            "address": "1 Old Road",
            "echo": {"who": "support"},
        },
    }
    assert engine.snapshot("o1").last_sequence == before
    assert store.get_run("o1").last_sequence == before  # type: ignore[union-attr]


def test_an_ended_run_can_be_queried(store: EventStore, clock: ManualClock) -> None:
    engine = make_engine(store, [build()], clock)
    engine.start("order", ORDER, run_id="o1")
    engine.tick(until_idle=True)
    engine.signal("o1", "approval", True)
    engine.tick(until_idle=True)
    assert engine.snapshot("o1").terminal
    assert engine.query("o1", "status").result == {
        "charged": True,
        "shipped": True,
        "address": "1 Old Road",
        "echo": None,
    }


def test_a_continued_run_is_followed_to_its_live_successor(
    store: EventStore, clock: ManualClock
) -> None:
    engine = make_engine(store, [build()], clock)
    engine.start("looper", {"n": 0}, run_id="l1")
    engine.tick(until_idle=True)
    engine.signal("l1", "go")
    engine.tick(until_idle=True)
    answer = engine.query("l1", "n")
    assert answer.result == 1
    assert answer.run_id != "l1"
    assert engine.snapshot(answer.run_id).spec.predecessor_run_id == "l1"


def test_an_undeclared_query_lists_the_declared_ones(store: EventStore, clock: ManualClock) -> None:
    engine = make_engine(store, [build()], clock)
    engine.start("order", ORDER, run_id="o1")
    with pytest.raises(UndeclaredName) as caught:
        engine.query("o1", "stats")
    assert isinstance(caught.value, InputError)  # exit 2
    assert "boom, sneaky, status, waits" in str(caught.value)
    with pytest.raises(UndeclaredName, match="Declared queries: boom"):
        engine.query("o1", "change-address")  # an update is not a query


def test_an_unknown_run_is_run_not_found(store: EventStore, clock: ManualClock) -> None:
    engine = make_engine(store, [build()], clock)
    with pytest.raises(RunNotFound):
        engine.query("nope", "status")


def test_a_query_that_calls_a_command_is_refused(store: EventStore, clock: ManualClock) -> None:
    engine = make_engine(store, [build()], clock)
    engine.start("order", ORDER, run_id="o1")
    before = engine.snapshot("o1").last_sequence
    with pytest.raises(CommandInHandler, match=r"ctx\.complete"):
        engine.query("o1", "sneaky")
    engine.tick(until_idle=True)
    # A sequential helper answers once its step is settled; before, it would suspend: refused.
    assert engine.query("o1", "waits").result == {"charged": 30}
    assert engine.snapshot("o1").last_sequence > before
    assert not engine.snapshot("o1").terminal


def test_a_sequential_helper_on_an_unsettled_step_is_refused(clock: ManualClock) -> None:
    from flow_cli.store.memory import MemoryStore

    engine = make_engine(MemoryStore(), [build()], clock, eager_start=False)
    engine.start("order", ORDER, run_id="o1")
    with pytest.raises(CommandInHandler, match=r"ctx\.suspend"):
        engine.query("o1", "waits")


def test_a_query_handler_that_raises_is_named(store: EventStore, clock: ManualClock) -> None:
    engine = make_engine(store, [build()], clock)
    engine.start("order", ORDER, run_id="o1")
    with pytest.raises(HandlerFailed, match=r"talk_workflows\.build\.<locals>\.boom") as caught:
        engine.query("o1", "boom")
    assert "ValueError: no status today" in str(caught.value)
    assert not isinstance(caught.value, InputError)  # exit 1


def test_a_run_whose_build_is_not_loaded_cannot_be_queried(
    store: EventStore, clock: ManualClock
) -> None:
    make_engine(store, [build()], clock).start("order", ORDER, run_id="o1")
    other = make_engine(store, [build("talk-9")], clock)
    with pytest.raises(RunBuildNotLoaded, match="talk-1"):
        other.query("o1", "status")


def test_args_that_are_not_json_are_refused(store: EventStore, clock: ManualClock) -> None:
    engine = make_engine(store, [build()], clock)
    engine.start("order", ORDER, run_id="o1")
    with pytest.raises(InputError, match="args"):
        engine.query("o1", "status", {1, 2})  # type: ignore[arg-type]


def test_the_testing_kit_queries() -> None:
    env = WorkflowEnvironment(build())
    run = env.start("order", ORDER)
    env.run_until_idle()
    assert env.query(run, "status")["charged"] is True
    assert env.query(run, "status", [1])["echo"] == [1]
