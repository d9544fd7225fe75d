"""Declared signals, keyed duplicates, and signal-with-start."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_helpers import FlowProject
from engine_workflows import keys, make_engine
from talk_workflows import ORDER, build

from flow_cli.engine.engine import Engine
from flow_cli.errors import (
    InputError,
    RunAlreadyExists,
    SignalKeyReused,
    UndeclaredName,
)
from flow_cli.model.clock import ManualClock
from flow_cli.store.protocol import EventStore
from flow_cli.store.sqlite import SQLiteStore


def test_declared_signals_are_recorded_in_the_spec(store: EventStore, clock: ManualClock) -> None:
    engine = make_engine(store, [build()], clock)
    engine.start("order", ORDER, run_id="o1")
    engine.start("looper", {"n": 0}, run_id="l1")
    data = engine.history("o1")[0].to_json()["data"]["spec"]
    assert data["signals"] == ["approval", "delivered"]
    assert "signals" not in engine.history("l1")[0].to_json()["data"]["spec"]


def test_an_undeclared_signal_is_refused_and_nothing_is_written(
    store: EventStore, clock: ManualClock
) -> None:
    engine = make_engine(store, [build()], clock)
    engine.start("order", ORDER, run_id="o1")
    before = keys(engine, "o1")
    with pytest.raises(UndeclaredName, match="Declared signals: approval, delivered") as caught:
        engine.signal("o1", "aproval", True)
    assert isinstance(caught.value, InputError)
    assert keys(engine, "o1") == before
    engine.start("looper", {"n": 0}, run_id="l1")
    engine.signal("l1", "anything")  # a workflow that declares nothing accepts any name


def test_a_keyed_signal_sent_again_is_a_duplicate_and_another_payload_is_refused(
    store: EventStore, clock: ManualClock
) -> None:
    engine = make_engine(store, [build()], clock)
    engine.start("order", ORDER, run_id="o1")
    first = engine.deliver_signal("o1", "delivered", {"at": 1}, key="k1")
    again = engine.deliver_signal("o1", "delivered", {"at": 1}, key="k1")
    assert (first.duplicate, again.duplicate) == (False, True)
    assert again.sequence == first.sequence
    history = keys(engine, "o1")
    with pytest.raises(SignalKeyReused, match="another payload"):
        engine.signal("o1", "delivered", {"at": 2}, key="k1")
    assert keys(engine, "o1") == history


def test_signal_with_start_creates_the_run_and_delivers_in_one_commit(
    store: EventStore, clock: ManualClock
) -> None:
    engine = make_engine(store, [build()], clock)
    started = engine.start("order", ORDER, run_id="o1", signal=("approval", True))
    assert started.created and started.signal is not None
    assert (started.signal.sequence, started.signal.duplicate) == (2, False)
    assert keys(engine, "o1") == ["run_started", "signal_received"]
    engine.tick(until_idle=True)
    outcome = engine.snapshot("o1").outcome
    assert outcome is not None and outcome.result == {"address": "1 Old Road", "updates": 0}


def test_signal_with_start_on_an_existing_run_signals_it(
    store: EventStore, clock: ManualClock
) -> None:
    engine = make_engine(store, [build()], clock)
    engine.start("order", ORDER, run_id="o1")
    again = engine.start("order", ORDER, run_id="o1", signal=("delivered", 1), signal_key="d")
    assert not again.created and again.signal is not None and not again.signal.duplicate
    twice = engine.start("order", ORDER, run_id="o1", signal=("delivered", 1), signal_key="d")
    assert twice.signal is not None and twice.signal.duplicate
    assert twice.signal.sequence == again.signal.sequence
    assert keys(engine, "o1").count("signal_received") == 1
    with pytest.raises(RunAlreadyExists):
        engine.start("order", {"amount": 1}, run_id="o1", signal=("delivered", 1))
    assert keys(engine, "o1").count("signal_received") == 1


def test_signal_with_start_of_an_undeclared_signal_creates_nothing(
    store: EventStore, clock: ManualClock
) -> None:
    engine = make_engine(store, [build()], clock)
    with pytest.raises(UndeclaredName):
        engine.start("order", ORDER, run_id="o1", signal=("nope", None))
    assert engine.find_run("o1") is None


CONFIG = """\
[flow]
database = "sqlite:///flow.db"
runtimes = ["talk_workflows:runtime"]
"""


def test_cli_declared_signals_and_duplicates(tmp_path: Path) -> None:
    import talk_workflows

    project = FlowProject(tmp_path, CONFIG)
    engine = Engine(SQLiteStore(project.db), [talk_workflows.runtime], eager_start=False)
    engine.start("order", ORDER, run_id="o1")
    engine.close()
    refused = project.invoke("signal", "o1", "aproval")
    assert refused.code == 2 and refused.stdout == ""
    assert refused.error_line() == (
        "error: Run 'o1': its workflow declares no signal 'aproval'. Declared signals: "
        "approval, delivered."
    )
    sent = project.invoke("signal", "o1", "delivered", "--payload", "1", "--key", "k")
    assert sent.code == 0
    assert sent.stdout == "signal 'delivered' delivered to run o1 (event 2)\n"
    again = project.invoke("signal", "o1", "delivered", "--payload", "1", "--key", "k", "--json")
    assert again.code == 0
    assert again.json() == {"run_id": "o1", "signal": "delivered", "sequence": 2, "duplicate": True}
    plain = project.invoke("signal", "o1", "delivered", "--payload", "1", "--key", "k")
    assert "duplicate" in plain.stdout
    other = project.invoke("signal", "o1", "delivered", "--payload", "2", "--key", "k")
    assert other.code == 1
    assert "already delivered (event 2) with another payload" in other.error_line()
    history = project.invoke("history", "o1", "--json").json()
    assert [e["event_key"] for e in history] == ["run_started", "signal_received"]


def test_cli_signal_with_start(tmp_path: Path) -> None:
    project = FlowProject(tmp_path, CONFIG)
    command = [
        "start",
        "order",
        "--id",
        "o1",
        "--input",
        json.dumps(ORDER),
        "--signal",
        "approval",
        "--signal-payload",
        "true",
        "--signal-key",
        "s1",
        "--json",
    ]
    first = project.run(*command)
    assert first.code == 0, first.stderr
    assert first.json() == {
        "run_id": "o1",
        "created": True,
        "signal": {"sequence": 2, "duplicate": False},
    }
    again = project.run(*command)
    assert again.json() == {
        "run_id": "o1",
        "created": False,
        "signal": {"sequence": 2, "duplicate": True},
    }
    bad = project.invoke("start", "order", "--id", "o2", "--input", "{}", "--signal", "nope")
    assert bad.code == 2 and "Declared signals" in bad.error_line()
    lonely = project.invoke("start", "order", "--signal-key", "k")
    assert lonely.code == 2 and "go with --signal NAME" in lonely.error_line()
    project.ok("tick", "--until-idle")
    result = project.invoke("result", "o1", "--json")
    assert result.code == 0, result.stderr


def test_unconsumed_signals_are_carried_to_the_successor_in_order(
    store: EventStore, clock: ManualClock
) -> None:
    engine = make_engine(store, [build()], clock)
    engine.start("looper", {"n": 0}, run_id="l1")
    engine.tick(until_idle=True)
    # Three signals arrive before the run decides: "go" is taken, the others were buffered.
    engine.signal("l1", "go", 1)
    engine.signal("l1", "note", {"k": 1}, key="nk")
    engine.signal("l1", "go", 2)
    engine.tick(until_idle=True)
    successor = engine.snapshot("l1").outcome.successor_run_id  # type: ignore[union-attr]
    assert successor is not None
    history = engine.history(successor)
    assert [e.to_json()["data"] for e in history[1:3]] == [
        {"signal_name": "note", "payload": {"k": 1}, "key": "nk", "carried_from": "l1"},
        {"signal_name": "go", "payload": 2, "carried_from": "l1"},
    ]
    # The carried "go" was taken by the successor's wait: it continued again at once.
    final = engine.snapshot(successor).outcome
    assert final is not None and final.successor_run_id is not None
    last = engine.history(final.successor_run_id)
    carried = [e.to_json()["data"] for e in last if e.event_key == "signal_received"]
    assert carried == [
        {"signal_name": "note", "payload": {"k": 1}, "key": "nk", "carried_from": successor}
    ]
    assert engine.snapshot(final.successor_run_id).outcome is not None  # n=2 completes


def test_a_run_with_nothing_buffered_carries_nothing(store: EventStore, clock: ManualClock) -> None:
    engine = make_engine(store, [build()], clock)
    engine.start("looper", {"n": 0}, run_id="l1")
    engine.tick(until_idle=True)
    engine.signal("l1", "go")
    engine.tick(until_idle=True)
    successor = engine.snapshot("l1").outcome.successor_run_id  # type: ignore[union-attr]
    assert keys(engine, successor)[:2] == ["run_started", "signal_wait_started"]


def test_a_child_records_its_workflows_declared_signals(
    store: EventStore, clock: ManualClock
) -> None:
    engine = make_engine(store, [build()], clock)
    engine.start("parent", ORDER, run_id="p")
    engine.tick(until_idle=True)
    assert engine.snapshot("p/kid").spec.signals == ("approval", "delivered")
    with pytest.raises(UndeclaredName):
        engine.signal("p/kid", "aproval")


def test_a_bulk_signal_refuses_an_undeclared_name_per_run(tmp_path: Path) -> None:
    import talk_workflows

    project = FlowProject(tmp_path, CONFIG)
    engine = Engine(SQLiteStore(project.db), [talk_workflows.runtime], eager_start=False)
    engine.start("order", ORDER, run_id="o1")
    engine.start("looper", {"n": 0}, run_id="l1")
    engine.close()
    result = project.invoke("signal", "-", "aproval", stdin="o1\nl1\n")
    assert result.code == 1
    assert "declares no signal 'aproval'" in result.stdout + result.stderr
    history = project.invoke("history", "o1", "--json").json()
    assert [e["event_key"] for e in history] == ["run_started"]
    assert "signal_received" in [
        e["event_key"] for e in project.invoke("history", "l1", "--json").json()
    ]
