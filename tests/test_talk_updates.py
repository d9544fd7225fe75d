"""Updates: validated by the run's handler, answered, recorded once as ``update_applied``."""

from __future__ import annotations

import re
import threading
from collections.abc import Callable

import pytest
from engine_workflows import keys, make_engine
from talk_workflows import ORDER, build

from flow_cli import UpdateRejected
from flow_cli.engine.engine import Engine
from flow_cli.engine.replay_check import replay_history
from flow_cli.errors import (
    CommandInHandler,
    HandlerFailed,
    InputError,
    RunFinished,
    UndeclaredName,
    UpdateIdReused,
)
from flow_cli.model.clock import ManualClock
from flow_cli.model.events import UpdateApplied
from flow_cli.store.protocol import EventStore
from flow_cli.testing import WorkflowEnvironment


def started(store: EventStore, clock: ManualClock, run_id: str = "o1") -> Engine:
    engine = make_engine(store, [build()], clock)
    engine.start("order", ORDER, run_id=run_id)
    engine.tick(until_idle=True)  # charged; waiting for approval
    return engine


def test_an_update_is_recorded_and_the_workflow_reads_it(
    store: EventStore, clock: ManualClock
) -> None:
    engine = started(store, clock)
    before = engine.snapshot("o1").last_sequence
    answer = engine.update("o1", "change-address", {"address": "2 New St"}, update_id="u1")
    assert answer.to_json() == {
        "run_id": "o1",
        "update_id": "u1",
        "result": {"address": "2 New St"},
        "sequence": before + 1,
        "duplicate": False,
    }
    envelope = engine.history("o1")[-1]
    assert envelope.event == UpdateApplied(
        update_id="u1",
        name="change-address",
        args={"address": "2 New St"},
        result={"address": "2 New St"},
    )
    assert envelope.to_json()["data"] == {
        "update_id": "u1",
        "name": "change-address",
        "args": {"address": "2 New St"},
        "result": {"address": "2 New St"},
    }
    assert engine.query("o1", "status").result["address"] == "2 New St"  # type: ignore[index]
    engine.signal("o1", "approval", True)
    engine.tick(until_idle=True)
    outcome = engine.snapshot("o1").outcome
    assert outcome is not None and outcome.result == {"address": "2 New St", "updates": 0}
    assert engine.snapshot("o1").steps["ship"].input == {"address": "2 New St", "approved": True}


def test_an_update_wakes_the_run(store: EventStore, clock: ManualClock) -> None:
    engine = started(store, clock)
    assert engine.work.lease_runs(30, 10) == []
    engine.update("o1", "counter")
    assert engine.work.lease_runs(30, 10) == ["o1"]


def test_the_same_id_returns_the_recorded_answer_and_writes_nothing(
    store: EventStore, clock: ManualClock
) -> None:
    engine = started(store, clock)
    first = engine.update("o1", "counter", None, update_id="same")
    engine.update("o1", "counter")
    history = keys(engine, "o1")
    again = engine.update("o1", "counter", None, update_id="same")
    assert again.duplicate and not first.duplicate
    assert (again.result, again.sequence) == (first.result, first.sequence)
    assert keys(engine, "o1") == history


def test_the_same_id_with_another_name_or_args_is_refused(
    store: EventStore, clock: ManualClock
) -> None:
    engine = started(store, clock)
    engine.update("o1", "change-address", {"address": "A"}, update_id="u1")
    history = keys(engine, "o1")
    with pytest.raises(UpdateIdReused, match="other args"):
        engine.update("o1", "change-address", {"address": "B"}, update_id="u1")
    with pytest.raises(UpdateIdReused, match="update name 'change-address'"):
        engine.update("o1", "counter", {"address": "A"}, update_id="u1")
    assert keys(engine, "o1") == history


def test_a_rejected_update_writes_nothing(store: EventStore, clock: ManualClock) -> None:
    engine = started(store, clock)
    history = keys(engine, "o1")
    with pytest.raises(UpdateRejected, match=re.escape('rejected: give {"address": TEXT}')):
        engine.update("o1", "change-address", {"street": 1})
    engine.signal("o1", "approval", True)
    engine.tick(until_idle=True)
    with pytest.raises(RunFinished):
        engine.update("o1", "change-address", {"address": "late"})
    assert keys(engine, "o1").count("update_applied") == 0
    assert len(history) < len(keys(engine, "o1"))


def test_rejected_by_state(clock: ManualClock) -> None:
    from flow_cli.store.memory import MemoryStore

    engine = started(MemoryStore(), clock)
    engine.signal("o1", "approval", True)
    engine.decide("o1")  # ship scheduled, not run
    with pytest.raises(UpdateRejected, match="the parcel has left the warehouse"):
        engine.update("o1", "change-address", {"address": "late"})


def test_handlers_that_raise_or_answer_no_json_write_nothing(
    store: EventStore, clock: ManualClock
) -> None:
    engine = started(store, clock)
    history = keys(engine, "o1")
    raised = r"update handler .*broken \('broken'\) raised KeyError"
    with pytest.raises(HandlerFailed, match=raised):
        engine.update("o1", "broken")
    with pytest.raises(HandlerFailed, match="not storable JSON"):
        engine.update("o1", "not-json")
    with pytest.raises(UndeclaredName, match="Declared updates: broken, change-address"):
        engine.update("o1", "status")
    with pytest.raises(InputError, match="args"):
        engine.update("o1", "counter", float("nan"))
    assert keys(engine, "o1") == history


def test_an_update_handler_cannot_issue_commands(clock: ManualClock) -> None:
    from flow_cli.store.memory import MemoryStore

    runtime = build()

    @runtime.update("order", "sneaky")
    def sneaky(ctx, args):  # type: ignore[no-untyped-def]
        return ctx.schedule_step("x", "charge", {"amount": 1})

    engine = make_engine(MemoryStore(), [runtime], clock)
    engine.start("order", ORDER, run_id="o1")
    with pytest.raises(CommandInHandler, match=r"ctx\.schedule_step"):
        engine.update("o1", "sneaky")
    assert "update_applied" not in keys(engine, "o1")


def test_an_ended_run_refuses_updates(store: EventStore, clock: ManualClock) -> None:
    engine = started(store, clock)
    engine.signal("o1", "approval", True)
    engine.tick(until_idle=True)
    with pytest.raises(RunFinished, match="Completed"):
        engine.update("o1", "counter")


def test_update_ids_hold_across_a_continue_as_new_chain(
    store: EventStore, clock: ManualClock
) -> None:
    engine = make_engine(store, [build()], clock)
    engine.start("looper", {"n": 0}, run_id="l1")
    engine.tick(until_idle=True)
    first = engine.update("l1", "note", "hello", update_id="n1")
    assert first.result == {"n": 0, "note": "hello"}
    engine.signal("l1", "go")
    engine.tick(until_idle=True)
    again = engine.update("l1", "note", "hello", update_id="n1")
    assert again.duplicate and (again.run_id, again.result) == ("l1", first.result)
    # Asked through the successor's own id too: the chain's earlier runs are looked at.
    successor = engine.query("l1", "n").run_id
    through = engine.update(successor, "note", "hello", update_id="n1")
    assert through.duplicate and through.sequence == first.sequence
    fresh = engine.update("l1", "note", "hi", update_id="n2")
    assert (fresh.run_id, fresh.result) == (successor, {"n": 1, "note": "hi"})
    with pytest.raises(UpdateIdReused):
        engine.update(successor, "note", "other", update_id="n1")


def test_a_changed_handler_still_replays_the_recorded_answer(
    store: EventStore, clock: ManualClock
) -> None:
    engine = started(store, clock)
    engine.update("o1", "change-address", {"address": "2 New St"})
    engine.signal("o1", "approval", True)
    engine.tick(until_idle=True)
    history = engine.history("o1")
    changed = build("talk-2", changed=True)
    assert replay_history(changed, history).ok
    # What a changed handler would answer now is not what is recorded, and does not matter.
    env = WorkflowEnvironment(changed)
    run = env.start("order", ORDER)
    env.run_until_idle()
    assert env.update(run, "change-address", {"address": "x"}) == {"address": "X"}


def _race(callers: list[Callable[[], object]]) -> list[object]:
    results: list[object] = [None] * len(callers)
    gate = threading.Barrier(len(callers))

    def run(index: int) -> None:
        gate.wait()
        try:
            results[index] = callers[index]()
        except Exception as exc:  # reported below
            results[index] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(callers))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results


# Alone: on PostgreSQL its 100 threads each hold a connection, and beside another test's
# worker processes they would pass the server's max_connections (100 by default).
@pytest.mark.exclusive
def test_a_hundred_concurrent_updates_are_each_applied_once(
    store: EventStore, clock: ManualClock
) -> None:
    engine = started(store, clock)
    count = 100
    results = _race(
        [
            (lambda i=i: engine.update("o1", "counter", {"caller": i}, update_id=f"c{i}"))
            for i in range(count)
        ]
    )
    errors = [r for r in results if isinstance(r, Exception)]
    assert errors == []
    applied = [e.event for e in engine.history("o1") if isinstance(e.event, UpdateApplied)]
    assert sorted(u.update_id for u in applied) == sorted(f"c{i}" for i in range(count))
    # Each answer was computed on the history its event follows: the n-th applied says n.
    assert [u.result for u in applied] == [{"n": n} for n in range(1, count + 1)]
    for i, result in enumerate(results):
        recorded = next(u for u in applied if u.update_id == f"c{i}")
        assert result.result == recorded.result  # type: ignore[attr-defined]


def test_the_same_id_sent_at_once_is_recorded_once(store: EventStore, clock: ManualClock) -> None:
    engine = started(store, clock)
    results = _race([lambda: engine.update("o1", "counter", None, update_id="once")] * 8)
    assert not [r for r in results if isinstance(r, Exception)]
    assert keys(engine, "o1").count("update_applied") == 1
    assert sum(not r.duplicate for r in results) == 1  # type: ignore[attr-defined]
    assert {r.sequence for r in results} == {results[0].sequence}  # type: ignore[attr-defined]


def test_the_testing_kit_updates() -> None:
    env = WorkflowEnvironment(build())
    run = env.start("order", ORDER)
    env.run_until_idle()
    assert env.update(run, "change-address", {"address": "2 New St"}) == {"address": "2 New St"}
    env.signal(run, "approval", True)
    assert env.result(run) == {"address": "2 New St", "updates": 0}
    with pytest.raises(RunFinished):
        env.update(run, "counter")
