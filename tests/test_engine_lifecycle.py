"""continue_as_new chains (rule 9) and cancellation (rule 12)."""

from __future__ import annotations

import itertools

import pytest
from engine_workflows import SCN_BUILD, StepLog, data, keys, make_engine, scenario_runtime

from flow_cli.errors import RunFinished
from flow_cli.model.clock import ManualClock
from flow_cli.model.status import RunStatus
from flow_cli.store.protocol import EventStore


def test_continue_as_new_three_times_links_runs_both_ways_and_inherits_the_spec(
    store: EventStore, clock: ManualClock
) -> None:
    starter = make_engine(store, [scenario_runtime(patches=["p1"])], clock)
    starter.start("counter", {"n": 0, "until": 3}, run_id="loop")
    # The run is decided by a runtime of the same build that has since gained a patch marker:
    # the successors inherit the recorded spec, not the runtime's markers.
    engine = make_engine(store, [scenario_runtime(patches=["p1", "p2"])], clock, "w2")
    engine.tick(until_idle=True)

    chain = ["loop", "loop~1", "loop~2", "loop~3"]
    for run_id, successor in itertools.pairwise(chain):
        assert keys(engine, run_id) == ["run_started", "run_continued_as_new"]
        (continued,) = data(engine, run_id, "run_continued_as_new")
        assert continued["successor_run_id"] == successor
        assert continued["runtime_build_id"] == SCN_BUILD
        assert continued["patches"] == ["p1"]
        snapshot = engine.snapshot(run_id)
        assert snapshot.status is RunStatus.CONTINUED_AS_NEW
        assert snapshot.outcome is not None
        assert snapshot.outcome.successor_run_id == successor
        assert engine.snapshot(successor).spec.predecessor_run_id == run_id
        assert engine.snapshot(successor).spec.input == continued["input"]

    assert keys(engine, "loop~3") == ["run_started", "run_completed"]
    assert data(engine, "loop~3", "run_completed") == [{"result": {"n": 3, "patched": True}}]
    for run_id in chain:
        spec = engine.snapshot(run_id).spec
        assert spec.runtime_build_id == SCN_BUILD
        assert spec.patches == ("p1",)
        assert spec.workflow == "counter"
    assert engine.snapshot("loop").spec.predecessor_run_id is None
    assert [engine.snapshot(r).spec.input["n"] for r in chain] == [0, 1, 2, 3]


def test_cancelling_a_run_that_waits_on_a_signal(store: EventStore, clock: ManualClock) -> None:
    engine = make_engine(store, [scenario_runtime()], clock)
    engine.start("cancel-plain", run_id="r")
    engine.tick(until_idle=True)
    assert engine.snapshot("r").status is RunStatus.SUSPENDED

    assert engine.cancel("r", "no longer needed") is True
    assert engine.cancel("r", "asked twice") is False  # already requested: nothing written
    assert keys(engine, "r") == ["run_started", "signal_wait_started", "cancel_requested"]
    assert engine.snapshot("r").status is RunStatus.CANCELLING
    assert data(engine, "r", "cancel_requested") == [{"reason": "no longer needed"}]

    engine.tick(until_idle=True)
    assert keys(engine, "r") == [
        "run_started",
        "signal_wait_started",
        "cancel_requested",
        "run_cancelled",
    ]
    assert data(engine, "r", "run_cancelled") == [{"reason": "no longer needed"}]
    snapshot = engine.snapshot("r")
    assert snapshot.status is RunStatus.CANCELLED
    assert snapshot.outcome is not None
    assert snapshot.outcome.to_json() == {"kind": "Cancelled", "reason": "no longer needed"}

    with pytest.raises(RunFinished):
        engine.cancel("r")
    with pytest.raises(RunFinished):
        engine.signal("r", "never")
    assert len(engine.history("r")) == 4


def test_cancellation_runs_the_cleanup_step_before_run_cancelled(
    store: EventStore, clock: ManualClock
) -> None:
    log = StepLog()
    engine = make_engine(store, [scenario_runtime(log)], clock)
    engine.start("cancel-cleanup", {"order": 7}, run_id="r")
    engine.tick(until_idle=True)
    engine.cancel("r", "customer cancelled")
    engine.tick(until_idle=True)

    assert keys(engine, "r") == [
        "run_started",
        "signal_wait_started",
        "cancel_requested",
        "step_scheduled",
        "step_started",
        "step_completed",
        "run_cancelled",
    ]
    (cleanup,) = data(engine, "r", "step_scheduled")
    assert (cleanup["step_id"], cleanup["input"]) == ("cleanup", {"undo": {"order": 7}})
    assert log.calls == [("r", "cleanup", 1)]
    assert data(engine, "r", "run_cancelled") == [{"reason": "cleaned up"}]
    assert engine.snapshot("r").status is RunStatus.CANCELLED


def test_the_run_stays_cancelling_while_its_cleanup_step_is_open(
    store: EventStore, clock: ManualClock
) -> None:
    log = StepLog()
    engine = make_engine(store, [scenario_runtime(log)], clock)
    engine.start("cancel-cleanup", {"order": 8}, run_id="r")
    engine.tick(until_idle=True)
    engine.cancel("r")
    # Only decide: the cleanup step is scheduled and the run waits on it.
    engine.decide("r")
    assert keys(engine, "r")[-1] == "step_scheduled"
    assert engine.snapshot("r").status is RunStatus.CANCELLING
    engine.decide("r")  # re-issuing the open cleanup step is not "no cleanup"
    assert keys(engine, "r")[-1] == "step_scheduled"
    engine.tick(until_idle=True)
    assert keys(engine, "r")[-1] == "run_cancelled"
    assert log.calls == [("r", "cleanup", 1)]


def test_a_successor_run_id_taken_by_another_run_is_a_decision_failed(
    store: EventStore, clock: ManualClock
) -> None:
    engine = make_engine(store, [scenario_runtime()], clock)
    engine.start("cancel-plain", run_id="loop~1")  # someone took the successor's id
    engine.start("counter", {"n": 0, "until": 1}, run_id="loop")

    report = engine.tick(until_idle=True)

    assert report.conflicts == 0
    assert keys(engine, "loop") == ["run_started", "decision_failed"]
    (failed,) = data(engine, "loop", "decision_failed")
    assert failed["error_type"] == "RunIdTaken"
    assert "loop~1" in failed["message"]
    assert not engine.snapshot("loop").terminal
    assert engine.snapshot("loop~1").spec.workflow == "cancel-plain"
