"""Priorities and pauses in the engine (``flow start --priority``, ``flow pause``): children
inherit their parent's priority; a paused run records facts but is not decided and its steps
do not start (an attempt in flight finishes), until resumed."""

from __future__ import annotations

import pytest
from engine_workflows import keys, make_engine, scenario_runtime

from flow_cli.engine.engine import Engine
from flow_cli.errors import InputError, RunFinished, RunNotFound
from flow_cli.model.clock import ManualClock
from flow_cli.model.status import RunStatus
from flow_cli.runtime import Runtime
from flow_cli.store.pauses import PauseKind, PauseTarget
from flow_cli.store.protocol import EventStore


def _gated_runtime(build_id: str = "prio-1") -> Runtime:
    rt = Runtime(build_id=build_id)

    @rt.step("work")
    def work(input, info):  # type: ignore[no-untyped-def]
        return input

    @rt.workflow("gated")
    def gated(ctx):  # type: ignore[no-untyped-def]
        first = ctx.step("a", "work", 1)
        go = ctx.receive("go", "go")
        second = ctx.step("b", "work", 2)
        return ctx.complete([first, go, second])

    return rt


def _workflow(name: str) -> list[PauseTarget]:
    return [PauseTarget(kind=PauseKind.WORKFLOW, name=name)]


def test_a_child_inherits_its_parents_priority(store: EventStore, clock: ManualClock) -> None:
    engine = make_engine(store, [scenario_runtime()], clock)
    engine.start("parent", {"child": "child-ok", "child_input": 1}, run_id="p", priority=2)
    engine.tick(until_idle=True)
    assert engine.snapshot("p/c").spec.priority == 2
    child = store.get_run("p/c")
    assert child is not None and child.priority == 2
    assert engine.snapshot("p").spec.to_json()["priority"] == 2  # recorded in run_started


@pytest.mark.parametrize("priority", [0, 10, -1, True])
def test_a_priority_outside_1_to_9_is_refused_and_nothing_written(
    store: EventStore, clock: ManualClock, priority: int
) -> None:
    engine = make_engine(store, [scenario_runtime()], clock)
    with pytest.raises(InputError, match=r"priority must be a whole number from 1"):
        engine.start("one-signal", run_id="r", priority=priority)
    assert store.get_run("r") is None


def test_a_paused_workflow_records_facts_and_goes_on_once_resumed(
    store: EventStore, clock: ManualClock
) -> None:
    engine = make_engine(store, [_gated_runtime()], clock)
    engine.start("gated", run_id="r1")
    engine.tick(until_idle=True)
    assert engine.snapshot("r1").status is RunStatus.SUSPENDED  # waits for "go"
    (change,) = engine.pause(_workflow("gated"), reason="deploy")
    assert (change.changed, change.open_runs) == (True, 1)
    engine.signal("r1", "go", "yes")
    engine.start("gated", run_id="r2")  # started while paused: created, not decided
    engine.tick(until_idle=True)
    assert keys(engine, "r1")[-1] == "signal_received"  # the fact is recorded...
    assert keys(engine, "r2") == ["run_started"]  # ...and nothing is decided
    assert engine.next_due() is None  # held work is not due: an idle worker sleeps

    (change,) = engine.resume(_workflow("gated"))
    assert change.changed
    engine.tick(until_idle=True)
    assert engine.snapshot("r1").status is RunStatus.COMPLETED
    assert engine.snapshot("r2").status is RunStatus.SUSPENDED  # now waits for its "go"
    assert engine.list_pauses() == []


def test_resume_reports_the_runs_it_released_though_a_worker_ends_them_at_once(
    store: EventStore, clock: ManualClock
) -> None:
    engine = make_engine(store, [_gated_runtime()], clock)
    engine.start("gated", run_id="r1")
    engine.tick(until_idle=True)
    engine.pause(_workflow("gated"), reason="deploy")
    engine.signal("r1", "go", "yes")
    lift = engine.store.remove_pauses

    def lift_and_decide(targets):  # type: ignore[no-untyped-def]
        lift(targets)
        engine.tick(until_idle=True)  # a live worker, woken by the resume, ends r1 at once

    engine.store.remove_pauses = lift_and_decide  # type: ignore[method-assign]
    (change,) = engine.resume(_workflow("gated"))
    assert engine.snapshot("r1").status is RunStatus.COMPLETED
    assert (change.changed, change.open_runs) == (True, 1)  # the run the pause held


def test_an_attempt_in_flight_finishes_but_its_run_is_not_decided(
    store: EventStore, clock: ManualClock
) -> None:
    engine = make_engine(store, [_gated_runtime()], clock)
    engine.start("gated", run_id="r1")
    (lease,) = engine.work.lease_steps(30.0, 10)  # step "a" starts...
    engine.pause([PauseTarget(kind=PauseKind.RUN, name="r1")])
    engine.work.execute_step(lease)  # ...and ends while the run is paused
    engine.tick(until_idle=True)
    assert keys(engine, "r1")[-2:] == ["step_started", "step_completed"]  # no decision after
    engine.resume([PauseTarget(kind=PauseKind.RUN, name="r1")])
    engine.tick(until_idle=True)
    assert keys(engine, "r1")[-1] == "signal_wait_started"


def test_a_pause_by_build_holds_that_builds_runs_only(
    store: EventStore, clock: ManualClock
) -> None:
    engine: Engine = make_engine(store, [_gated_runtime("old"), _gated_runtime("new")], clock)
    engine.start("gated", run_id="on-old", build_id="old")
    engine.start("gated", run_id="on-new", build_id="new")
    engine.pause([PauseTarget(kind=PauseKind.BUILD, name="old")])
    engine.tick(until_idle=True)
    # Both first steps were scheduled by their starts; only the new build's ran.
    assert keys(engine, "on-old")[-1] == "step_scheduled"
    assert keys(engine, "on-new")[-1] == "signal_wait_started"
    engine.resume([PauseTarget(kind=PauseKind.BUILD, name="old")])
    engine.tick(until_idle=True)
    assert keys(engine, "on-old")[-1] == "signal_wait_started"


def test_bad_pause_targets_are_refused_and_nothing_written(
    store: EventStore, clock: ManualClock
) -> None:
    engine = make_engine(store, [_gated_runtime()], clock)
    engine.start("gated", run_id="r1")
    engine.terminate("r1", "done with it")
    run = PauseTarget(kind=PauseKind.RUN, name="nope")
    with pytest.raises(RunNotFound):
        engine.pause([run])
    with pytest.raises(RunFinished, match=r"has already ended \(Cancelled\); cannot pause it"):
        engine.pause([PauseTarget(kind=PauseKind.RUN, name="r1")])
    with pytest.raises(InputError, match="Nothing to pause"):
        engine.pause([])
    with pytest.raises(InputError, match="one kind of target"):
        engine.pause([*_workflow("gated"), PauseTarget(kind=PauseKind.BUILD, name="prio-1")])
    assert engine.list_pauses() == []
