"""Rule 2 (acceptance 4): changed code that re-issues a recorded identity with other parameters.

Two paths, for every kind of identity the seed lists:

* live: a history recorded by code A is decided by changed code deployed under the same build id.
  One ``decision_failed`` (with ``mismatches``) is appended, the run stays non-terminal, and it
  resumes and completes once a fixed runtime is deployed (a new ``Engine`` on the same store);
* ``replay_history``: the divergences name sequence, identity, field, recorded and produced.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest
from engine_workflows import (
    DET_BUILD,
    data,
    determinism_runtime,
    events,
    hang_step,
    keys,
    make_engine,
)

from flow_cli import RetryPolicy
from flow_cli.engine.engine import Engine
from flow_cli.engine.replay_check import Divergence, replay_history
from flow_cli.model.clock import ManualClock
from flow_cli.model.context import WorkflowContext
from flow_cli.model.snapshot import WorkflowRunSnapshot
from flow_cli.model.status import RunStatus
from flow_cli.store.protocol import EventStore

RUN = "det-run"
A_RETRY = RetryPolicy(max_attempts=3)
B_RETRY = RetryPolicy(max_attempts=5, initial_interval=2.0)


def _token(snapshot: WorkflowRunSnapshot, name: str) -> str:
    return WorkflowContext(snapshot).new_token(name)


@dataclass(frozen=True)
class Kind:
    """One kind of identity: how to record it with code A, what code B changes, what it expects."""

    workflow: str
    changes: dict[str, Any]
    mismatches: Callable[[Engine], list[tuple[str, str, Any, Any]]]
    """``(identity, field, recorded, produced)`` in the order the engine reports them."""
    release: Callable[[Engine, ManualClock], None]
    """Settle the open identity so that the run can complete (with code A)."""
    recorded_at: int = 2
    """Sequence of the recorded decision event that code B contradicts."""


def _deadline(engine: Engine, seconds: float) -> str:
    return (engine.snapshot(RUN).started_at + timedelta(seconds=seconds)).isoformat()


KINDS: dict[str, Kind] = {
    "step": Kind(
        workflow="det-step",
        changes={"step_name": "charge-v2", "step_input": {"amount": 11}, "retry": B_RETRY},
        mismatches=lambda e: [
            ("step 's'", "name", "charge", "charge-v2"),
            ("step 's'", "input", {"amount": 10}, {"amount": 11}),
            ("step 's'", "retry", A_RETRY.to_json(), B_RETRY.to_json()),
        ],
        # The attempt hangs on a dead worker for an hour; after that it is run again.
        release=lambda e, clock: clock.advance(7200),
    ),
    "wait": Kind(
        workflow="det-wait",
        changes={"wait_seconds": 7200.0},
        mismatches=lambda e: [
            ("wait 'w'", "deadline", _deadline(e, 3600), _deadline(e, 7200)),
        ],
        release=lambda e, clock: clock.advance(3600),
    ),
    "hook": Kind(
        workflow="det-hook",
        changes={"token_name": "approval-v2", "hook_metadata": {"who": "finance"}},
        mismatches=lambda e: [
            (
                "hook 'h'",
                "token",
                _token(e.snapshot(RUN), "approval"),
                _token(e.snapshot(RUN), "approval-v2"),
            ),
            ("hook 'h'", "metadata", {"who": "ops"}, {"who": "finance"}),
        ],
        release=lambda e, clock: e.resolve_hook(_token(e.snapshot(RUN), "approval"), "yes"),
    ),
    "signal": Kind(
        workflow="det-signal",
        changes={"signal_name": "approval"},
        mismatches=lambda e: [("signal wait 'sw'", "signal_name", "approve", "approval")],
        release=lambda e, clock: e.signal(RUN, "approve", "yes") and None,
    ),
    "child": Kind(
        workflow="det-child",
        changes={
            "child_workflow": "det-child-target-v2",
            "child_input": {"n": 2},
            "cancellation": "abandon",
        },
        mismatches=lambda e: [
            ("child 'c'", "workflow", "det-child-target", "det-child-target-v2"),
            ("child 'c'", "input", {"n": 1}, {"n": 2}),
            ("child 'c'", "cancellation", "cancel", "abandon"),
        ],
        release=lambda e, clock: e.signal(f"{RUN}/c", "finish", "done") and None,
    ),
}


def _record_with_code_a(store: EventStore, clock: ManualClock, kind: Kind) -> Engine:
    """Code A starts the run and drives it to a durable wait on the identity under test."""
    engine_a = make_engine(store, [determinism_runtime()], clock, "worker-a")
    engine_a.start(kind.workflow, run_id=RUN)
    if kind.workflow == "det-step":
        engine_a.decide(RUN)
        hang_step(engine_a, RUN, "s")
    else:
        engine_a.tick(until_idle=True)
    snapshot = engine_a.snapshot(RUN)
    assert snapshot.status is RunStatus.SUSPENDED or snapshot.status is RunStatus.RUNNING
    assert snapshot.has_open_work()
    return engine_a


def _check_error_message(message: str, expected: list[tuple[str, str, Any, Any]]) -> None:
    for identity, field, recorded, produced in expected:
        assert identity in message
        assert f"{field} was recorded as" in message
        for value in (recorded, produced):
            assert json.dumps(value, sort_keys=True)[:60] in message


@pytest.mark.parametrize("kind_name", list(KINDS))
def test_live_non_determinism_is_one_decision_failed_and_resumes_with_fixed_code(
    store: EventStore, clock: ManualClock, kind_name: str
) -> None:
    kind = KINDS[kind_name]
    engine_a = _record_with_code_a(store, clock, kind)
    recorded = keys(engine_a, RUN)
    expected = kind.mismatches(engine_a)

    # Changed code under the same build id; the next fact (a signal nobody waits for) wakes it.
    changed = make_engine(store, [determinism_runtime(**kind.changes)], clock, "worker-b")
    changed.signal(RUN, "poke")
    changed.tick(until_idle=True)

    assert keys(changed, RUN) == [*recorded, "signal_received", "decision_failed"]
    (failed,) = data(changed, RUN, "decision_failed")
    assert failed["error_type"] == "NonDeterminismError"
    assert [
        (m["identity"], m["field"], m["recorded"], m["produced"]) for m in failed["mismatches"]
    ] == expected
    _check_error_message(failed["message"], expected)
    snapshot = changed.snapshot(RUN)
    assert not snapshot.terminal
    assert snapshot.decision_error is not None
    assert snapshot.decision_error.to_data() == failed
    assert changed.get_run(RUN).failing is not None
    assert "NonDeterminismError" in changed.get_run(RUN).failing

    # Later ticks retry the decision and meet the same error: it is not recorded again.
    for _ in range(4):
        clock.advance(10)
        changed.tick(until_idle=True)
    assert keys(changed, RUN) == [*recorded, "signal_received", "decision_failed"]
    assert not changed.snapshot(RUN).terminal

    # Fixed code deployed: a new engine on the same store picks the run up and finishes it.
    fixed = make_engine(store, [determinism_runtime()], clock, "worker-c")
    clock.advance(10)
    fixed.tick(until_idle=True)
    assert len(events(fixed, RUN, "decision_failed")) == 1
    kind.release(fixed, clock)
    fixed.tick(until_idle=True)
    history = keys(fixed, RUN)
    assert history[-1] == "run_completed"
    assert history.count("decision_failed") == 1
    assert fixed.snapshot(RUN).status is RunStatus.COMPLETED
    assert fixed.get_run(RUN).failing is None
    # The history, decision_failed included, replays cleanly against the fixed code ...
    assert replay_history(determinism_runtime(), fixed.history(RUN)).ok
    # ... and shows the divergence against the changed code.
    assert not replay_history(determinism_runtime(**kind.changes), fixed.history(RUN)).ok


@pytest.mark.parametrize("kind_name", list(KINDS))
def test_identical_reissues_are_not_errors(
    store: EventStore, clock: ManualClock, kind_name: str
) -> None:
    kind = KINDS[kind_name]
    engine_a = _record_with_code_a(store, clock, kind)
    recorded = keys(engine_a, RUN)
    same = make_engine(store, [determinism_runtime()], clock, "worker-b")
    for _ in range(3):
        same.signal(RUN, "poke")
        same.tick(until_idle=True)
    assert keys(same, RUN) == [*recorded, *["signal_received"] * 3]
    assert same.snapshot(RUN).decision_error is None
    assert same.get_run(RUN).failing is None


def _completed_history(store: EventStore, clock: ManualClock, kind: Kind) -> Engine:
    engine_a = _record_with_code_a(store, clock, kind)
    kind.release(engine_a, clock)
    engine_a.tick(until_idle=True)
    assert keys(engine_a, RUN)[-1] == "run_completed"
    return engine_a


@pytest.mark.parametrize("kind_name", list(KINDS))
def test_replay_history_names_every_divergent_field(
    store: EventStore, clock: ManualClock, kind_name: str
) -> None:
    kind = KINDS[kind_name]
    engine_a = _completed_history(store, clock, kind)
    expected = kind.mismatches(engine_a)
    history = engine_a.history(RUN)

    result = replay_history(determinism_runtime(**kind.changes), history)
    assert not result.ok
    assert result.error is None
    assert list(result.divergences) == [
        Divergence(
            run_id=RUN,
            sequence=kind.recorded_at,
            identity=identity,
            field=field,
            recorded=recorded,
            produced=produced,
        )
        for identity, field, recorded, produced in expected
    ]
    assert result.divergences[0].to_json()["sequence"] == kind.recorded_at
    # The code that recorded it replays cleanly.
    clean = replay_history(determinism_runtime(), history)
    assert clean.ok and clean.divergences == ()
    assert clean.decision_points >= 2


def test_replay_history_reports_a_renamed_step_id_as_another_command(
    store: EventStore, clock: ManualClock
) -> None:
    engine_a = _completed_history(store, clock, KINDS["step"])
    result = replay_history(determinism_runtime(step_id="s2"), engine_a.history(RUN))
    assert not result.ok
    first = result.divergences[0]
    assert (first.sequence, first.identity, first.field) == (2, "step 's'", "command")
    assert first.recorded["step_scheduled"]["step_id"] == "s"
    assert first.produced["step_scheduled"]["step_id"] == "s2"


# -- continuation: input, build id and patch markers --------------------------------------------


def test_live_continuation_cannot_switch_build_or_patches(
    store: EventStore, clock: ManualClock
) -> None:
    changed = make_engine(
        store,
        [determinism_runtime(cont_build="det-2", cont_patches=("p9",))],
        clock,
        "worker-b",
    )
    changed.start("det-continue", run_id=RUN)
    changed.tick(until_idle=True)
    for _ in range(3):
        clock.advance(10)
        changed.tick(until_idle=True)

    assert keys(changed, RUN) == ["run_started", "decision_failed"]
    (failed,) = data(changed, RUN, "decision_failed")
    expected = [
        ("continuation", "runtime_build_id", DET_BUILD, "det-2"),
        ("continuation", "patches", [], ["p9"]),
    ]
    assert [
        (m["identity"], m["field"], m["recorded"], m["produced"]) for m in failed["mismatches"]
    ] == expected
    _check_error_message(failed["message"], expected)
    # Nothing of the continuation was written: no successor run exists.
    assert store.get_run(f"{RUN}~1") is None
    assert not changed.snapshot(RUN).terminal

    fixed = make_engine(store, [determinism_runtime()], clock, "worker-c")
    clock.advance(10)
    fixed.tick(until_idle=True)
    assert keys(fixed, RUN) == ["run_started", "decision_failed", "run_continued_as_new"]
    assert keys(fixed, f"{RUN}~1") == ["run_started", "run_completed"]


@pytest.mark.parametrize(
    ("changes", "field", "recorded", "produced"),
    [
        ({"cont_input": {"gen": 2}}, "input", {"gen": 1}, {"gen": 2}),
        ({"cont_build": "det-2"}, "runtime_build_id", DET_BUILD, "det-2"),
        ({"cont_patches": ("p9",)}, "patches", [], ["p9"]),
    ],
)
def test_replay_history_continuation_divergences(
    store: EventStore,
    clock: ManualClock,
    changes: dict[str, Any],
    field: str,
    recorded: Any,
    produced: Any,
) -> None:
    engine_a = make_engine(store, [determinism_runtime()], clock)
    engine_a.start("det-continue", run_id=RUN)
    engine_a.tick(until_idle=True)
    history = engine_a.history(RUN)
    assert [e.event.event_key() for e in history] == ["run_started", "run_continued_as_new"]

    result = replay_history(determinism_runtime(**changes), history)
    assert list(result.divergences) == [
        Divergence(
            run_id=RUN,
            sequence=2,
            identity="continuation",
            field=field,
            recorded=recorded,
            produced=produced,
        )
    ]
    assert replay_history(determinism_runtime(), history).ok


def test_replay_history_with_a_runtime_missing_a_recorded_patch(
    store: EventStore, clock: ManualClock
) -> None:
    engine_a = make_engine(store, [determinism_runtime(patches=["fix-1"])], clock)
    engine_a.start("det-signal", run_id=RUN)
    engine_a.tick(until_idle=True)
    history = engine_a.history(RUN)

    result = replay_history(determinism_runtime(), history)
    assert list(result.divergences) == [
        Divergence(
            run_id=RUN,
            sequence=1,
            identity="run",
            field="patches",
            recorded=["fix-1"],
            produced=[],
        )
    ]
    # A runtime that knows the patch (and more) replays it.
    assert replay_history(determinism_runtime(patches=["fix-1", "fix-2"]), history).ok


def test_replay_history_allows_a_different_build_id_only(
    store: EventStore, clock: ManualClock
) -> None:
    engine_a = _completed_history(store, clock, KINDS["signal"])
    history = engine_a.history(RUN)
    # The build id is the one thing allowed to differ: same code under "det-2" replays cleanly.
    assert replay_history(determinism_runtime(build_id="det-2"), history).ok
    # ... but the code under the other build id is still checked field by field.
    other = replay_history(determinism_runtime(build_id="det-2", signal_name="nope"), history)
    assert [(d.identity, d.field) for d in other.divergences] == [
        ("signal wait 'sw'", "signal_name")
    ]


# -- batches (rule 3) ----------------------------------------------------------------------------


def test_a_batch_with_one_differing_member_appends_nothing_of_the_batch(
    store: EventStore, clock: ManualClock
) -> None:
    engine_a = make_engine(store, [determinism_runtime()], clock, "worker-a")
    engine_a.start("det-batch", run_id=RUN)
    engine_a.decide(RUN)
    hang_step(engine_a, RUN, "b")  # "a" completes, "b" hangs on a dead worker
    before = keys(engine_a, RUN)
    assert before == [
        "run_started",
        "step_scheduled",  # a
        "step_scheduled",  # b
        "step_started",  # b (hung)
        "step_started",  # a
        "step_completed",  # a
    ]
    assert [d["batch_id"] for d in data(engine_a, RUN, "step_scheduled")] == ["pay", "pay"]

    # Changed code: same batch id, member "b" with another input, and a new member "c".
    changed = make_engine(
        store,
        [determinism_runtime(batch_b_input={"n": 20}, batch_extra=True)],
        clock,
        "worker-b",
    )
    # a's completion was decided by the worker that ran it (code A: keep waiting for b); the
    # changed code decides the run the next time it is due.
    changed.decide(RUN)
    assert keys(changed, RUN) == [*before, "decision_failed"]
    (failed,) = data(changed, RUN, "decision_failed")
    assert failed["mismatches"] == [
        {"identity": "step 'b'", "field": "input", "recorded": {"n": 2}, "produced": {"n": 20}},
        {
            "identity": "batch 'pay'",
            "field": "steps",
            "recorded": ["a", "b"],
            "produced": ["a", "b", "c"],
        },
    ]
    # The new member "c" was not appended: the batch is validated whole.
    assert set(changed.snapshot(RUN).steps) == {"a", "b"}
    assert all(d["step_id"] != "c" for d in data(changed, RUN, "step_scheduled"))

    fixed = make_engine(store, [determinism_runtime()], clock, "worker-c")
    clock.advance(7200)
    fixed.tick(until_idle=True)
    assert keys(fixed, RUN)[-1] == "run_completed"
    assert keys(fixed, RUN).count("decision_failed") == 1


def test_replay_history_of_a_batch_reports_the_member_and_the_extra_step(
    store: EventStore, clock: ManualClock
) -> None:
    engine_a = make_engine(store, [determinism_runtime()], clock)
    engine_a.start("det-batch", run_id=RUN)
    engine_a.tick(until_idle=True)
    history = engine_a.history(RUN)
    assert [e.event.event_key() for e in history][-1] == "run_completed"
    seq_b = next(
        e.sequence
        for e in history
        if e.event.event_key() == "step_scheduled" and e.event.to_data()["step_id"] == "b"
    )
    result = replay_history(determinism_runtime(batch_b_input={"n": 20}, batch_extra=True), history)
    assert [(d.sequence, d.identity, d.field, d.recorded, d.produced) for d in result.divergences][
        :2
    ] == [
        (seq_b, "step 'b'", "input", {"n": 2}, {"n": 20}),
        (seq_b - 1, "step 'c'", "command", None, result.divergences[1].produced),
    ]
    assert result.divergences[1].produced["step_scheduled"]["step_id"] == "c"


def test_replay_check_does_not_blame_a_build_for_an_error_the_run_already_has() -> None:
    from flow_cli.engine.engine import Engine
    from flow_cli.engine.replay_check import replay_history
    from flow_cli.model.clock import ManualClock
    from flow_cli.runtime import Runtime
    from flow_cli.store.memory import MemoryStore

    def build(raises: str | None) -> Runtime:
        runtime = Runtime(build_id="err-1")

        @runtime.workflow("w")
        def w(ctx):  # type: ignore[no-untyped-def]
            if raises == "key":
                return ctx.complete(ctx.input["missing"])
            if raises == "zero":
                return ctx.complete(1 / 0)
            return ctx.wait_for_signal("s", "go")

        return runtime

    engine = Engine(MemoryStore(), [build("key")], clock=ManualClock())
    engine.start("w", {}, run_id="stuck")
    engine.tick(until_idle=True)
    history = engine.history("stuck")
    assert history[-1].event_key == "decision_failed"
    assert replay_history(build("key"), history).ok
    result = replay_history(build("zero"), history)
    assert not result.ok and result.divergences[0].field == "error"

    healthy = Engine(MemoryStore(), [build(None)], clock=ManualClock())
    healthy.start("w", {}, run_id="waiting")
    healthy.tick(until_idle=True)
    regressed = replay_history(build("key"), healthy.history("waiting"))
    assert not regressed.ok
    assert regressed.divergences[-1].produced.startswith("KeyError")


def test_replay_reports_a_repeated_mismatch_once() -> None:
    from flow_cli.engine.engine import Engine
    from flow_cli.engine.replay_check import replay_history
    from flow_cli.model.clock import ManualClock
    from flow_cli.runtime import Runtime
    from flow_cli.store.memory import MemoryStore

    def build(token: str) -> Runtime:
        runtime = Runtime(build_id="dup-1")

        @runtime.workflow("w")
        def w(ctx):  # type: ignore[no-untyped-def]
            # Under cancellation it re-issues the open hook: the engine cancels for it.
            return ctx.create_hook("h", token, {})

        return runtime

    engine = Engine(MemoryStore(), [build("t-1")], clock=ManualClock())
    engine.start("w", {}, run_id="r")
    engine.tick(until_idle=True)
    engine.cancel("r", "stop")
    engine.tick(until_idle=True)
    assert engine.snapshot("r").status.value == "Cancelled"
    result = replay_history(build("t-2"), engine.history("r"))
    # Checked at the hook's creation and again at the cancellation: reported once.
    assert [(d.identity, d.field) for d in result.divergences] == [("hook 'h'", "token")]
