"""Rule 5: optimistic concurrency. Two engines deciding one run converge on one history.

The race is made deterministic: one engine's runtime is wrapped so that, after the workflow
code returned its command and before the engine appends it, the other engine decides the same
run and appends first. The first engine's append then meets ``EventConflict``, re-reads and
decides again.
"""

from __future__ import annotations

from typing import Any

import pytest
from engine_workflows import (
    StepLog,
    check_history_invariants,
    keys,
    make_engine,
    program_runtime,
    scenario_runtime,
)

from flow_cli.engine.engine import Engine
from flow_cli.model.clock import ManualClock
from flow_cli.model.snapshot import WorkflowRunSnapshot, project
from flow_cli.runtime import Runtime
from flow_cli.store.memory import MemoryStore
from flow_cli.store.protocol import EventStore

PROGRAM = {
    "ops": [
        ["step", "ok"],
        ["wait", 5],
        ["batch", ["ok", "flaky"]],
        ["step", "flaky"],
    ],
    "cleanup": False,
}


def _drive(engines: list[Engine], clock: ManualClock) -> None:
    """Tick every engine in turn, moving the clock, until the runs have ended."""
    for _ in range(6):
        for engine in engines:
            engine.tick(until_idle=True)
        clock.advance(10)


def _comparable(engine: Engine, run_id: str) -> list[tuple[str, dict[str, Any]]]:
    """The history without what legitimately differs: the seed and which worker ran a step."""
    out = []
    for envelope in engine.history(run_id):
        data = envelope.event.to_data()
        for field in ("seed", "worker", "lease_until"):
            data.pop(field, None)
        out.append((envelope.event.event_key(), data))
    return out


def _race(
    runtime: Runtime, monkeypatch: pytest.MonkeyPatch, other: Engine, run_id: str, times: int
) -> list[int]:
    """Make ``runtime``'s decisions of ``run_id`` at its next ``times`` distinct sequences race
    against ``other`` (which loses them whenever ``other`` has something to append)."""
    original = runtime.propose
    raced: list[int] = []

    def decide_and_lose_the_race(snapshot: WorkflowRunSnapshot) -> Any:
        command = original(snapshot)
        if snapshot.run_id == run_id and len(raced) < times and snapshot.last_sequence not in raced:
            raced.append(snapshot.last_sequence)
            other.decide(run_id)  # decides on the same history and appends first
        return command

    monkeypatch.setattr(runtime, "propose", decide_and_lose_the_race)
    return raced


def test_two_engines_deciding_one_run_converge_on_the_single_writer_history(
    store: EventStore, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The single-writer reference: one engine, its own store, the same clock schedule.
    solo_clock = ManualClock(clock.now())
    solo = make_engine(MemoryStore(), [program_runtime()], solo_clock, "solo", eager_start=False)
    solo.start("program", PROGRAM, run_id="solo")
    solo.decide("solo")
    _drive([solo], solo_clock)

    runtime_1 = program_runtime()
    engine_1 = make_engine(store, [runtime_1], clock, "w1", eager_start=False)
    engine_2 = make_engine(store, [program_runtime()], clock, "w2")
    engine_1.start("program", PROGRAM, run_id="race")
    raced = _race(runtime_1, monkeypatch, engine_2, "race", times=4)

    conflicts_before = store.stats.conflicts
    report = engine_1.decide("race")
    assert raced[0] == 1
    assert report.conflicts == 1
    assert report.decisions >= 2  # it decided again after the conflict
    assert engine_1.decider.conflicts == 1
    assert engine_1.conflicts >= 1
    assert store.stats.conflicts > conflicts_before
    # engine_2 won: its decision is the one recorded, once.
    assert keys(engine_1, "race") == ["run_started", "step_scheduled"]

    _drive([engine_1, engine_2], clock)

    assert len(raced) == 4
    # Later races often find engine_2 with nothing new to record (a decision parks the run in
    # its own commit now), so only the first one is sure to conflict; all of them converge.
    assert engine_1.conflicts >= 1
    assert keys(solo, "solo")[-1] == "run_completed"
    assert keys(engine_1, "race") == keys(solo, "solo")
    assert _comparable(engine_1, "race") == _comparable(solo, "solo")
    check_history_invariants(engine_1.history("race"))


def test_a_signal_that_lands_mid_decision_is_not_lost(
    store: EventStore, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    runtime = scenario_runtime()
    engine = make_engine(store, [runtime], clock, "w1", eager_start=False)
    sender = make_engine(store, [scenario_runtime()], clock, "sender")
    engine.start("one-signal", run_id="sig")
    original = runtime.propose
    sent: list[int] = []

    def decide_while_a_signal_arrives(snapshot: WorkflowRunSnapshot) -> Any:
        command = original(snapshot)
        if not sent:
            sent.append(sender.signal("sig", "approve", "raced in"))
        return command

    monkeypatch.setattr(runtime, "propose", decide_while_a_signal_arrives)
    report = engine.decide("sig")
    assert sent == [2]
    assert report.conflicts == 1
    # The same decide() call re-read the history, replayed, and saw the signal.
    assert keys(engine, "sig") == [
        "run_started",
        "signal_received",
        "signal_wait_started",
        "run_completed",
    ]
    assert engine.history("sig")[-1].event.to_data() == {"result": "raced in"}


def test_two_engines_ticking_one_store_run_each_step_once(
    store: EventStore, clock: ManualClock
) -> None:
    log = StepLog()
    engine_1 = make_engine(store, [scenario_runtime(log)], clock, "w1")
    engine_2 = make_engine(store, [scenario_runtime(log)], clock, "w2")
    for i in range(5):
        engine_1.start("parent", {"child": "child-ok", "child_input": {"i": i}}, run_id=f"p{i}")
    _drive([engine_1, engine_2], clock)
    for i in range(5):
        assert keys(engine_1, f"p{i}")[-1] == "run_completed"
        check_history_invariants(engine_1.history(f"p{i}"))
        check_history_invariants(engine_1.history(f"p{i}/c"))
    # One attempt per step: a leased step is not run by the other engine too.
    assert sorted(log.calls) == sorted({(f"p{i}/c", "work", 1) for i in range(5)})


def test_after_a_lost_race_the_engine_snapshot_is_still_the_projection(
    store: EventStore, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The losing engine had already folded its own decision (which consumed a buffered
    signal) into a snapshot; after the conflict none of that may leak into what it reads."""
    runtime_1 = scenario_runtime()
    engine_1 = make_engine(store, [runtime_1], clock, "w1", eager_start=False)
    engine_2 = make_engine(store, [scenario_runtime()], clock, "w2")
    engine_1.start("two-signals", run_id="buf")
    engine_1.signal("buf", "item", "p1")
    engine_1.signal("buf", "item", "p2")
    engine_1.snapshot("buf")  # warm engine_1's snapshot cache
    raced = _race(runtime_1, monkeypatch, engine_2, "buf", times=1)

    report = engine_1.decide("buf")
    assert raced == [3]
    assert report.conflicts >= 1
    history = engine_1.history("buf")
    assert engine_1.snapshot("buf") == project(history)
    assert engine_2.snapshot("buf") == project(history)
    _drive([engine_1, engine_2], clock)
    assert engine_1.history("buf")[-1].event.to_data() == {"result": ["p1", "p2"]}
    assert engine_1.snapshot("buf") == project(engine_1.history("buf"))
    check_history_invariants(engine_1.history("buf"))
