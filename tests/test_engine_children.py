"""Child runs (acceptance 7): results and failures reach the parent; cancellation policies."""

from __future__ import annotations

from engine_workflows import SCN_BUILD, StepLog, data, keys, make_engine, scenario_runtime

from flow_cli.model.clock import ManualClock
from flow_cli.model.context import WorkflowContext
from flow_cli.model.status import RunStatus
from flow_cli.store.protocol import EventStore


def test_a_completed_child_resumes_the_parent_with_its_result(
    store: EventStore, clock: ManualClock
) -> None:
    engine = make_engine(store, [scenario_runtime()], clock)
    engine.start("parent", {"child": "child-ok", "child_input": {"x": 1}}, run_id="p")
    engine.tick(until_idle=True)

    assert keys(engine, "p") == [
        "run_started",
        "child_scheduled",
        "child_completed",
        "run_completed",
    ]
    assert data(engine, "p", "child_scheduled") == [
        {
            "child_id": "c",
            "child_run_id": "p/c",
            "workflow": "child-ok",
            "input": {"x": 1},
            "cancellation": "cancel",
            "batch_id": None,
        }
    ]
    child_result = {"ok": {"x": 1}, "attempt": 1}
    assert data(engine, "p", "child_completed") == [
        {
            "child_id": "c",
            "child_run_id": "p/c",
            "outcome": {"kind": "Completed", "result": child_result},
        }
    ]
    assert data(engine, "p", "run_completed") == [{"result": {"child_result": child_result}}]

    assert keys(engine, "p/c") == [
        "run_started",
        "step_scheduled",
        "step_started",
        "step_completed",
        "run_completed",
    ]
    child_spec = engine.snapshot("p/c").spec
    assert (child_spec.parent_run_id, child_spec.parent_child_id) == ("p", "c")
    assert child_spec.runtime_build_id == SCN_BUILD
    assert child_spec.workflow == "child-ok"
    assert child_spec.input == {"x": 1}
    assert store.get_run("p/c") is not None
    assert store.get_run("p/c").parent_run_id == "p"
    ctx = WorkflowContext(engine.snapshot("p"))
    assert ctx.child_result("c") == child_result
    assert engine.snapshot("p").children["c"].status == "Completed"


def test_a_failed_child_is_seen_through_child_outcome(
    store: EventStore, clock: ManualClock
) -> None:
    engine = make_engine(store, [scenario_runtime()], clock)
    engine.start("parent", {"child": "child-fail"}, run_id="p")
    engine.tick(until_idle=True)

    assert keys(engine, "p/c") == ["run_started", "run_failed"]
    error = {"type": "ChildError", "message": "child gave up"}
    assert data(engine, "p", "child_completed") == [
        {"child_id": "c", "child_run_id": "p/c", "outcome": {"kind": "Failed", "error": error}}
    ]
    ctx = WorkflowContext(engine.snapshot("p"))
    outcome = ctx.child_outcome("c")
    assert outcome is not None
    assert outcome.kind is RunStatus.FAILED
    assert outcome.error == error
    assert ctx.child_result("c") is None
    # The parent decided what to do with it: here it completes, reporting the failure.
    assert data(engine, "p", "run_completed") == [
        {"result": {"child_outcome": {"kind": "Failed", "error": error}}}
    ]


def test_cancelling_the_parent_cancels_a_child_under_policy_cancel(
    store: EventStore, clock: ManualClock
) -> None:
    engine = make_engine(store, [scenario_runtime()], clock)
    engine.start("parent", {"child": "child-waits", "cancellation": "cancel"}, run_id="p")
    engine.tick(until_idle=True)
    assert keys(engine, "p") == ["run_started", "child_scheduled"]
    assert keys(engine, "p/c") == ["run_started", "signal_wait_started"]

    assert engine.cancel("p", "customer changed their mind")
    engine.tick(until_idle=True)

    assert keys(engine, "p") == [
        "run_started",
        "child_scheduled",
        "cancel_requested",
        "child_cancelled",
        "run_cancelled",
    ]
    assert data(engine, "p", "child_cancelled")[0]["child_run_id"] == "p/c"
    assert data(engine, "p", "run_cancelled") == [{"reason": "customer changed their mind"}]
    assert keys(engine, "p/c") == [
        "run_started",
        "signal_wait_started",
        "cancel_requested",
        "run_cancelled",
    ]
    (child_cancel,) = data(engine, "p/c", "cancel_requested")
    assert "p" in child_cancel["reason"]
    assert engine.snapshot("p/c").status is RunStatus.CANCELLED
    assert engine.snapshot("p").status is RunStatus.CANCELLED
    assert engine.snapshot("p").children["c"].status == "CancelRequested"
    # The cancelled child does not write into its finished parent.
    assert keys(engine, "p")[-1] == "run_cancelled"


def test_cancelling_the_parent_abandons_a_child_under_policy_abandon(
    store: EventStore, clock: ManualClock
) -> None:
    log = StepLog()
    engine = make_engine(store, [scenario_runtime(log)], clock)
    engine.start("parent", {"child": "child-waits", "cancellation": "abandon"}, run_id="p")
    engine.tick(until_idle=True)
    engine.cancel("p")
    engine.tick(until_idle=True)

    assert keys(engine, "p") == [
        "run_started",
        "child_scheduled",
        "cancel_requested",
        "child_abandoned",
        "run_cancelled",
    ]
    assert keys(engine, "p/c") == ["run_started", "signal_wait_started"]
    assert engine.snapshot("p/c").status is RunStatus.SUSPENDED

    engine.signal("p/c", "finish", "carried on")
    engine.tick(until_idle=True)
    assert keys(engine, "p/c") == [
        "run_started",
        "signal_wait_started",
        "signal_received",
        "run_completed",
    ]
    assert data(engine, "p/c", "run_completed") == [{"result": "carried on"}]
    # The parent has ended: nothing is appended to it.
    assert keys(engine, "p")[-1] == "run_cancelled"
    assert engine.snapshot("p").children["c"].status == "Abandoned"


def test_a_child_that_continued_as_new_reports_to_the_parent_from_its_successor(
    store: EventStore, clock: ManualClock
) -> None:
    engine = make_engine(store, [scenario_runtime()], clock)
    engine.start("parent", {"child": "child-continues"}, run_id="p")
    engine.tick(until_idle=True)
    assert keys(engine, "p/c") == ["run_started", "run_continued_as_new"]
    assert keys(engine, "p/c~1") == ["run_started", "signal_wait_started"]
    successor = engine.snapshot("p/c~1").spec
    assert (successor.parent_run_id, successor.parent_child_id) == ("p", "c")
    assert keys(engine, "p") == ["run_started", "child_scheduled"]  # still waiting

    engine.signal("p/c~1", "finish", "at last")
    engine.tick(until_idle=True)
    assert data(engine, "p", "child_completed") == [
        {
            "child_id": "c",
            "child_run_id": "p/c~1",
            "outcome": {"kind": "Completed", "result": {"finished": "at last"}},
        }
    ]
    assert data(engine, "p", "run_completed") == [
        {"result": {"child_result": {"finished": "at last"}}}
    ]


def test_cancelling_the_parent_cancels_the_successor_of_a_continued_child(
    store: EventStore, clock: ManualClock
) -> None:
    """Policy "cancel" reaches the child's live run, not only its finished first generation."""
    engine = make_engine(store, [scenario_runtime()], clock)
    engine.start("parent", {"child": "child-continues", "cancellation": "cancel"}, run_id="p")
    engine.tick(until_idle=True)
    assert keys(engine, "p/c~1") == ["run_started", "signal_wait_started"]

    engine.cancel("p", "stop everything")
    engine.tick(until_idle=True)
    assert keys(engine, "p")[-2:] == ["child_cancelled", "run_cancelled"]
    assert keys(engine, "p/c~1") == [
        "run_started",
        "signal_wait_started",
        "cancel_requested",
        "run_cancelled",
    ]
    assert engine.snapshot("p/c~1").status is RunStatus.CANCELLED


def test_a_child_run_id_taken_by_another_run_is_a_decision_failed(
    store: EventStore, clock: ManualClock
) -> None:
    """The engine derives the child's run id; if a run already has it, the parent's decision
    can never be appended. It must say so once, not retry the append forever."""
    engine = make_engine(store, [scenario_runtime()], clock)
    engine.start("child-waits", run_id="p/c")  # someone took the id "p/c"
    engine.start("parent", {"child": "child-ok"}, run_id="p")

    report = engine.tick(until_idle=True)

    assert report.conflicts == 0
    assert keys(engine, "p") == ["run_started", "decision_failed"]
    (failed,) = data(engine, "p", "decision_failed")
    assert failed["error_type"] == "RunIdTaken"
    assert "p/c" in failed["message"]
    assert keys(engine, "p/c") == ["run_started", "signal_wait_started"]  # untouched
    clock.advance(60)
    assert engine.tick(until_idle=True).conflicts == 0
    assert keys(engine, "p") == ["run_started", "decision_failed"]
