"""Signals with an idempotency key: sending (or re-running a bulk send) twice delivers once."""

from __future__ import annotations

from pathlib import Path

from cli_helpers import FlowProject
from engine_workflows import keys, make_engine, scenario_runtime

from flow_cli.engine.engine import Engine
from flow_cli.model.clock import ManualClock
from flow_cli.store.protocol import EventStore
from flow_cli.store.sqlite import SQLiteStore


def test_a_keyed_signal_is_delivered_once(store: EventStore, clock: ManualClock) -> None:
    engine = make_engine(store, [scenario_runtime()], clock)
    engine.start("two-signals", run_id="r")
    first = engine.signal("r", "item", {"n": 1}, key="k1")
    again = engine.signal("r", "item", {"n": 1}, key="k1")
    other = engine.signal("r", "item", {"n": 2}, key="k2")
    unkeyed = engine.signal("r", "item", {"n": 3})
    assert again == first  # the earlier delivery's event
    assert other > first and unkeyed > other
    assert keys(engine, "r").count("signal_received") == 3
    data = [e.event.to_data() for e in engine.history("r") if e.event_key == "signal_received"]
    assert [d.get("key") for d in data] == ["k1", "k2", None]
    assert "key" not in data[2]  # an unkeyed signal keeps the old shape


def test_re_running_a_bulk_signal_with_a_key_delivers_nothing_twice(tmp_path: Path) -> None:
    project = FlowProject(tmp_path)
    import cli_workflows

    engine = Engine(SQLiteStore(project.db), [cli_workflows.runtime])
    for i in range(3):
        engine.start("approval", run_id=f"a{i}")
    engine.close()
    command = ["signal", "-", "approve", "--payload", "true", "--key", "batch-7"]
    first = project.run(*command, stdin="a0\na1\na2\n")
    assert first.code == 0, first.stderr
    second = project.run(*command, stdin="a0\na1\na2\n")
    assert second.code == 0, second.stderr
    assert "already delivered" in second.stdout
    engine = Engine(SQLiteStore(project.db), [cli_workflows.runtime])
    for i in range(3):
        history = [e.event_key for e in engine.history(f"a{i}")]
        assert history.count("signal_received") == 1
    engine.close()
