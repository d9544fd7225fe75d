"""Signals (acceptance 7): kept when early, matched in order, refused once the run ended."""

from __future__ import annotations

import pytest
from engine_workflows import data, keys, make_engine, scenario_runtime

from flow_cli.errors import RunFinished, RunNotFound
from flow_cli.model.clock import ManualClock
from flow_cli.model.status import RunStatus
from flow_cli.store.protocol import EventStore


def test_a_signal_that_arrives_before_its_wait_is_kept_and_matched(
    store: EventStore, clock: ManualClock
) -> None:
    # The signal must come before the first decision opens the wait.
    engine = make_engine(store, [scenario_runtime()], clock, eager_start=False)
    engine.start("one-signal", run_id="early")
    sequence = engine.signal("early", "approve", {"by": "alice"})
    assert sequence == 2
    snapshot = engine.snapshot("early")
    assert [(s.signal_name, s.wait_id) for s in snapshot.signals] == [("approve", None)]

    engine.tick(until_idle=True)
    assert keys(engine, "early") == [
        "run_started",
        "signal_received",
        "signal_wait_started",
        "run_completed",
    ]
    assert data(engine, "early", "signal_received") == [
        {"signal_name": "approve", "payload": {"by": "alice"}}
    ]
    assert data(engine, "early", "signal_wait_started") == [
        {"wait_id": "sw", "signal_name": "approve"}
    ]
    assert data(engine, "early", "run_completed") == [{"result": {"by": "alice"}}]
    snapshot = engine.snapshot("early")
    assert [(s.signal_name, s.wait_id, s.sequence) for s in snapshot.signals] == [
        ("approve", "sw", 2)
    ]
    assert snapshot.signal_waits["sw"].delivered
    assert snapshot.signal_waits["sw"].signal_sequence == 2


def test_a_signal_after_the_wait_wakes_the_run(store: EventStore, clock: ManualClock) -> None:
    engine = make_engine(store, [scenario_runtime()], clock)
    engine.start("one-signal", run_id="late")
    engine.tick(until_idle=True)
    assert keys(engine, "late") == ["run_started", "signal_wait_started"]
    assert engine.snapshot("late").status is RunStatus.SUSPENDED
    assert engine.get_run("late").decide_at is None  # nothing to do until a fact arrives
    assert engine.tick(until_idle=True).idle

    assert engine.signal("late", "approve", "yes") == 3
    engine.tick(until_idle=True)
    assert keys(engine, "late") == [
        "run_started",
        "signal_wait_started",
        "signal_received",
        "run_completed",
    ]
    assert data(engine, "late", "run_completed") == [{"result": "yes"}]


def test_a_signal_with_another_name_does_not_match(store: EventStore, clock: ManualClock) -> None:
    engine = make_engine(store, [scenario_runtime()], clock)
    engine.start("one-signal", run_id="r")
    engine.tick(until_idle=True)
    engine.signal("r", "reject", "no")
    engine.tick(until_idle=True)
    assert keys(engine, "r") == ["run_started", "signal_wait_started", "signal_received"]
    snapshot = engine.snapshot("r")
    assert not snapshot.signal_waits["sw"].delivered
    assert [(s.signal_name, s.wait_id) for s in snapshot.signals] == [("reject", None)]


@pytest.mark.parametrize("when", ["before", "between", "after"])
def test_two_signals_of_one_name_match_two_waits_in_order(
    store: EventStore, clock: ManualClock, when: str
) -> None:
    engine = make_engine(store, [scenario_runtime()], clock)
    engine.start("two-signals", run_id="two")
    if when == "before":
        engine.signal("two", "item", "p1")
        engine.signal("two", "item", "p2")
        engine.tick(until_idle=True)
    elif when == "between":
        engine.signal("two", "item", "p1")
        engine.tick(until_idle=True)
        engine.signal("two", "item", "p2")
        engine.tick(until_idle=True)
    else:
        engine.tick(until_idle=True)
        engine.signal("two", "item", "p1")
        engine.tick(until_idle=True)
        engine.signal("two", "item", "p2")
        engine.tick(until_idle=True)
    assert data(engine, "two", "run_completed") == [{"result": ["p1", "p2"]}]
    snapshot = engine.snapshot("two")
    assert snapshot.signal_waits["first"].payload == "p1"
    assert snapshot.signal_waits["second"].payload == "p2"
    assert [(s.payload, s.wait_id) for s in snapshot.signals] == [
        ("p1", "first"),
        ("p2", "second"),
    ]
    history = keys(engine, "two")
    assert history.count("signal_received") == 2
    assert history.count("signal_wait_started") == 2


def test_a_signal_to_a_finished_run_raises_and_writes_nothing(
    store: EventStore, clock: ManualClock
) -> None:
    engine = make_engine(store, [scenario_runtime()], clock)
    engine.start("one-signal", run_id="done")
    engine.signal("done", "approve", 1)
    engine.tick(until_idle=True)
    before = engine.history("done")
    assert before[-1].event.event_key() == "run_completed"

    with pytest.raises(RunFinished) as caught:
        engine.signal("done", "approve", 2)
    assert caught.value.run_id == "done"
    assert caught.value.status == "Completed"
    assert engine.history("done") == before


def test_a_signal_to_an_unknown_run_raises_run_not_found(
    store: EventStore, clock: ManualClock
) -> None:
    engine = make_engine(store, [scenario_runtime()], clock)
    with pytest.raises(RunNotFound):
        engine.signal("nope", "approve")
    assert store.get_run("nope") is None
