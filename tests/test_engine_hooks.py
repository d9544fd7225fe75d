"""Hooks (acceptance 7): one callback per token, tokens stable across replays, unique per run."""

from __future__ import annotations

import pytest
from engine_workflows import data, keys, make_engine, scenario_runtime

from flow_cli.engine.engine import Engine
from flow_cli.engine.replay_check import replay_history
from flow_cli.errors import HookAlreadyResolved, HookNotFound, HookOfAnotherRun
from flow_cli.model.clock import ManualClock
from flow_cli.model.context import WorkflowContext
from flow_cli.model.snapshot import project
from flow_cli.store.protocol import EventStore


def _open_hook(engine: Engine, run_id: str) -> str:
    engine.start("hook", run_id=run_id)
    engine.tick(until_idle=True)
    assert keys(engine, run_id) == ["run_started", "hook_created"]
    (created,) = data(engine, run_id, "hook_created")
    assert created["hook_id"] == "h"
    assert created["metadata"] == {"kind": "approval"}
    return str(created["token"])


def test_resolving_a_hook_once_completes_the_run(store: EventStore, clock: ManualClock) -> None:
    engine = make_engine(store, [scenario_runtime()], clock)
    token = _open_hook(engine, "h1")
    record = store.find_hook(token)
    assert record is not None
    assert (record.run_id, record.hook_id, record.resolved) == ("h1", "h", False)

    assert engine.resolve_hook(token, {"approved": True}) == ("h1", "h")
    engine.tick(until_idle=True)
    assert keys(engine, "h1") == ["run_started", "hook_created", "hook_resolved", "run_completed"]
    assert data(engine, "h1", "hook_resolved") == [
        {"hook_id": "h", "token": token, "payload": {"approved": True}}
    ]
    assert data(engine, "h1", "run_completed") == [{"result": {"approved": True}}]
    record = store.find_hook(token)
    assert record is not None and record.resolved


def test_resolving_twice_raises_hook_already_resolved(
    store: EventStore, clock: ManualClock
) -> None:
    engine = make_engine(store, [scenario_runtime()], clock)
    token = _open_hook(engine, "h2")
    engine.resolve_hook(token, "first")
    with pytest.raises(HookAlreadyResolved) as caught:
        engine.resolve_hook(token, "second")
    assert (caught.value.run_id, caught.value.hook_id, caught.value.token) == ("h2", "h", token)
    assert keys(engine, "h2").count("hook_resolved") == 1
    engine.tick(until_idle=True)
    # After the run ended as well.
    with pytest.raises(HookAlreadyResolved):
        engine.resolve_hook(token, "third")
    assert data(engine, "h2", "run_completed") == [{"result": "first"}]
    assert keys(engine, "h2").count("hook_resolved") == 1


def test_an_unknown_token_raises_hook_not_found(store: EventStore, clock: ManualClock) -> None:
    engine = make_engine(store, [scenario_runtime()], clock)
    _open_hook(engine, "h3")
    with pytest.raises(HookNotFound) as caught:
        engine.resolve_hook("no-such-token", "x")
    assert caught.value.token == "no-such-token"
    assert keys(engine, "h3") == ["run_started", "hook_created"]


def test_a_token_of_another_run_raises_hook_not_found(
    store: EventStore, clock: ManualClock
) -> None:
    engine = make_engine(store, [scenario_runtime()], clock)
    token_a = _open_hook(engine, "run-a")
    token_b = _open_hook(engine, "run-b")
    with pytest.raises(HookOfAnotherRun) as caught:
        engine.resolve_hook(token_a, "x", run_id="run-b")
    assert isinstance(caught.value, HookNotFound)  # the same exit code and handling
    assert "belongs to run 'run-a', not to run 'run-b'" in str(caught.value)
    assert keys(engine, "run-a") == ["run_started", "hook_created"]
    assert keys(engine, "run-b") == ["run_started", "hook_created"]
    # With the right run it is accepted.
    assert engine.resolve_hook(token_b, "ok", run_id="run-b") == ("run-b", "h")


def test_hook_tokens_are_stable_across_replays_and_differ_between_runs(
    store: EventStore, clock: ManualClock
) -> None:
    runtime = scenario_runtime()
    engine = make_engine(store, [runtime], clock)
    token_a = _open_hook(engine, "tok-a")
    token_b = _open_hook(engine, "tok-b")
    assert token_a != token_b
    assert len(token_a) == 32

    # Recomputed from the recorded seed: the same token.
    history = engine.history("tok-a")
    assert WorkflowContext(project(history)).new_token("approval") == token_a
    assert WorkflowContext(project(history)).new_token("other") != token_a
    # Re-deciding (woken by an unrelated signal) re-issues the same hook: no error, no event.
    engine.signal("tok-a", "poke")
    engine.tick(until_idle=True)
    assert keys(engine, "tok-a") == ["run_started", "hook_created", "signal_received"]
    assert engine.snapshot("tok-a").decision_error is None
    # A fresh engine (another worker) decides the same way.
    other = make_engine(store, [scenario_runtime()], clock, "w2")
    other.signal("tok-a", "poke")
    other.tick(until_idle=True)
    assert engine.snapshot("tok-a").decision_error is None
    engine.resolve_hook(token_a, "done")
    engine.tick(until_idle=True)
    result = replay_history(runtime, engine.history("tok-a"))
    assert result.ok, result.divergences


def test_a_hook_token_taken_by_another_run_is_a_decision_failed_not_a_crash(
    store: EventStore, clock: ManualClock
) -> None:
    engine = make_engine(store, [scenario_runtime()], clock)
    engine.start("fixed-token-hook", {"token": "same-token"}, run_id="first")
    engine.tick(until_idle=True)
    engine.start("fixed-token-hook", {"token": "same-token"}, run_id="second")

    report = engine.tick(until_idle=True)  # must not raise out of the worker's loop

    assert report.decision_failures == 1
    assert keys(engine, "first") == ["run_started", "hook_created"]
    assert keys(engine, "second") == ["run_started", "decision_failed"]
    (failed,) = data(engine, "second", "decision_failed")
    assert failed["error_type"] == "HookTokenInUse"
    assert "same-token" in failed["message"]
    assert not engine.snapshot("second").terminal
    record = store.find_hook("same-token")
    assert record is not None and record.run_id == "first"
    for _ in range(3):
        clock.advance(10)
        engine.tick(until_idle=True)
    assert keys(engine, "second") == ["run_started", "decision_failed"]
    # The first run still owns its hook and completes normally.
    assert engine.resolve_hook("same-token", "ok") == ("first", "h")
    engine.tick(until_idle=True)
    assert keys(engine, "first")[-1] == "run_completed"
