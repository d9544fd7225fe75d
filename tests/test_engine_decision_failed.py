"""Rule 11: workflow code that raises is a ``decision_failed``, not a crash and not terminal."""

from __future__ import annotations

from pathlib import Path

from engine_workflows import data, determinism_runtime, keys, make_engine, runtime

from flow_cli import Runtime
from flow_cli.model.clock import ManualClock
from flow_cli.model.status import RunStatus
from flow_cli.store.protocol import EventStore


def _flip_flop_runtime(errors: list[str | None]) -> Runtime:
    """``det-raise`` raising ``ValueError(errors[0])`` while ``errors[0]`` is not None."""
    rt = Runtime(build_id="flip-1")

    @rt.workflow("flip")
    def flip(ctx):
        if errors[0] is not None:
            raise ValueError(errors[0])
        return ctx.complete("fixed")

    return rt


def test_raising_workflow_records_one_decision_failed_per_distinct_error(
    store: EventStore, clock: ManualClock
) -> None:
    errors: list[str | None] = ["boom one"]
    engine = make_engine(store, [_flip_flop_runtime(errors), runtime], clock)
    engine.start("flip", run_id="flip")
    engine.start("exchange-rate", run_id="healthy")

    report = engine.tick(until_idle=True)  # does not raise: the worker survives its workflows

    assert report.decision_failures >= 1
    # The healthy run in the same pass was not disturbed.
    assert keys(engine, "healthy")[-1] == "run_completed"
    assert keys(engine, "flip") == ["run_started", "decision_failed"]
    (failed,) = data(engine, "flip", "decision_failed")
    assert failed["error_type"] == "ValueError"
    assert failed["message"] == "boom one"
    assert failed["mismatches"] is None
    snapshot = engine.snapshot("flip")
    assert snapshot.status is RunStatus.PENDING
    assert not snapshot.terminal
    assert snapshot.decision_error is not None
    assert snapshot.decision_error.to_data() == failed
    assert engine.get_run("flip").failing == "ValueError: boom one"

    # The same error on every retry: still one event.
    for _ in range(3):
        clock.advance(300)
        engine.tick(until_idle=True)
    assert keys(engine, "flip") == ["run_started", "decision_failed"]

    # A different error is a new event, once.
    errors[0] = "boom two"
    for _ in range(3):
        clock.advance(300)
        engine.tick(until_idle=True)
    assert keys(engine, "flip") == ["run_started", "decision_failed", "decision_failed"]
    assert [d["message"] for d in data(engine, "flip", "decision_failed")] == [
        "boom one",
        "boom two",
    ]

    # Fixed code: the run resumes and completes.
    errors[0] = None
    clock.advance(300)
    engine.tick(until_idle=True)
    assert keys(engine, "flip") == [
        "run_started",
        "decision_failed",
        "decision_failed",
        "run_completed",
    ]
    assert engine.snapshot("flip").decision_error is None
    assert engine.get_run("flip").failing is None


def test_a_failing_decision_is_retried_only_when_due(store: EventStore, clock: ManualClock) -> None:
    errors: list[str | None] = ["boom"]
    engine = make_engine(store, [_flip_flop_runtime(errors)], clock)
    engine.start("flip", run_id="flip")
    engine.tick(until_idle=True)
    errors[0] = None
    # Before the decision retry is due, nothing decides the run ...
    assert engine.tick(until_idle=True).runs_decided == 0
    assert keys(engine, "flip") == ["run_started", "decision_failed"]
    # ... after it, fixed code completes it.
    clock.advance(5)
    engine.tick(until_idle=True)
    assert keys(engine, "flip")[-1] == "run_completed"


def test_new_engine_with_fixed_code_resumes_a_raising_run(
    store: EventStore, clock: ManualClock
) -> None:
    broken = make_engine(store, [determinism_runtime(raise_error="kaput")], clock, "w-broken")
    broken.start("det-raise", run_id="r")
    broken.tick(until_idle=True)
    assert keys(broken, "r") == ["run_started", "decision_failed"]
    assert data(broken, "r", "decision_failed")[0]["error_type"] == "ValueError"

    fixed = make_engine(store, [determinism_runtime()], clock, "w-fixed")
    clock.advance(60)
    fixed.tick(until_idle=True)
    assert keys(fixed, "r") == ["run_started", "decision_failed", "run_completed"]
    assert fixed.snapshot("r").outcome is not None
    assert fixed.snapshot("r").outcome.result == "fixed"


def test_fixed_code_that_only_keeps_waiting_records_decision_recovered(tmp_path: Path) -> None:
    from flow_cli import Runtime
    from flow_cli.engine.engine import Engine
    from flow_cli.model.clock import ManualClock
    from flow_cli.store.sqlite import SQLiteStore

    def build(buggy: bool) -> Runtime:
        runtime = Runtime(build_id="recover-1")

        @runtime.workflow("w")
        def w(ctx):  # type: ignore[no-untyped-def]
            if buggy and ctx.signal("s") is None and len(ctx.input["items"]) > 0:
                raise KeyError("discount")
            if ctx.signal("s") is not None:
                return ctx.complete(ctx.signal("s"))
            return ctx.wait_for_signal("s", "go")

        return runtime

    store = SQLiteStore(tmp_path / "flow.db")
    clock = ManualClock()
    first = Engine(store, [build(False)], clock=clock)
    first.start("w", {"items": [1]}, run_id="r")
    first.tick(until_idle=True)
    # A buggy deploy: the next wake-up (a cancel-free, unrelated signal) makes the code raise.
    buggy = Engine(store, [build(True)], clock=clock)
    buggy.signal("r", "unrelated", {})
    buggy.tick(until_idle=True)
    assert buggy.snapshot("r").decision_error is not None
    assert buggy.get_run("r").failing is not None

    fixed = Engine(store, [build(False)], clock=clock)
    clock.advance(10)
    fixed.tick(until_idle=True)
    snap = fixed.snapshot("r")
    keys = [e.event_key for e in fixed.history("r")]
    assert keys[-2:] == ["decision_failed", "decision_recovered"]
    assert snap.decision_error is None
    assert fixed.get_run("r").failing is None
    assert snap.status.value == "Suspended"
    fixed.signal("r", "go", {"ok": True})
    fixed.tick(until_idle=True)
    assert fixed.snapshot("r").outcome is not None
