"""Eager start: ``Engine.start`` commits a new run's first decisions with its creation.

The process that starts a run of a build it hosts decides it at once, so the run's first step is
ready for a worker without a lease, a read and a decision first (issue 7, W3: start to completed).
The decision is the one a worker would make: the same pure decision function on the same
snapshot. What cannot be decided cleanly (the code raises) is left to the workers, who report it.
"""

from __future__ import annotations

from typing import Any

import pytest
from engine_workflows import StepLog, keys, make_engine, scenario_runtime

from flow_cli import Runtime
from flow_cli.engine.engine import Engine
from flow_cli.errors import RunAlreadyExists
from flow_cli.model.clock import ManualClock
from flow_cli.model.status import RunStatus
from flow_cli.store.memory import MemoryStore
from flow_cli.store.protocol import EventStore, RunFilter

chain = Runtime(build_id="eager-1")


@chain.workflow("chain")
def _chain(ctx):  # type: ignore[no-untyped-def]
    x = ctx.input["x"]
    for i in range(ctx.input["steps"]):
        x = ctx.step(f"s{i}", "inc", x)
    return ctx.complete(x)


@chain.workflow("broken")
def _broken(ctx):  # type: ignore[no-untyped-def]
    raise ValueError("the first decision cannot be made")


@chain.step("inc")
def _inc(x, info):  # type: ignore[no-untyped-def]
    return x + 1


def test_start_commits_the_first_decision_with_the_run(
    store: EventStore, clock: ManualClock
) -> None:
    engine = Engine(store, [chain], clock=clock, worker_id="w")
    before = store.stats.durable_commits
    assert engine.start("chain", {"steps": 2, "x": 0}, run_id="e1").created
    assert store.stats.durable_commits - before == 1
    assert [e.event.event_key() for e in store.read_history("e1")] == [
        "run_started",
        "step_scheduled",
    ]
    assert store.get_run("e1").status is RunStatus.RUNNING  # type: ignore[union-attr]
    # Nothing to decide: the step is ready and a worker leases it straight away.
    assert engine.work.lease_runs(30, 10) == []
    assert [(lease.run_id, lease.step_id) for lease in engine.work.lease_steps(30, 10)] == [
        ("e1", "s0")
    ]


def test_without_eager_start_the_workers_make_the_first_decision(
    store: EventStore, clock: ManualClock
) -> None:
    engine = Engine(store, [chain], clock=clock, worker_id="w", eager_start=False)
    engine.start("chain", {"steps": 2, "x": 0}, run_id="e1")
    assert [e.event.event_key() for e in store.read_history("e1")] == ["run_started"]
    assert engine.work.lease_runs(30, 10) == ["e1"]


def test_starting_again_changes_nothing(store: EventStore, clock: ManualClock) -> None:
    engine = Engine(store, [chain], clock=clock, worker_id="w")
    engine.start("chain", {"steps": 2, "x": 0}, run_id="e1")
    history = store.read_history("e1")
    assert not engine.start("chain", {"steps": 2, "x": 0}, run_id="e1").created
    with pytest.raises(RunAlreadyExists, match="input"):
        engine.start("chain", {"steps": 3, "x": 0}, run_id="e1")
    assert store.read_history("e1") == history


def test_code_that_fails_its_first_decision_is_left_to_the_workers(
    store: EventStore, clock: ManualClock
) -> None:
    engine = Engine(store, [chain], clock=clock, worker_id="w")
    engine.start("broken", None, run_id="b1")
    # The starter neither raises nor records the failure: a worker meets and reports it.
    assert [e.event.event_key() for e in store.read_history("b1")] == ["run_started"]
    engine.tick(until_idle=True)
    assert "decision_failed" in [e.event.event_key() for e in store.read_history("b1")]


def _finish(engine: Engine, clock: ManualClock) -> None:
    for _ in range(20):
        engine.tick(until_idle=True)
        clock.advance(3600)


@pytest.mark.parametrize(
    ("workflow", "value"),
    [
        ("parent", {"child": "child-ok", "child_input": {"x": 1}}),
        ("complete-early", None),
        ("timer", {"seconds": 5}),
        ("counter", {"n": 0, "until": 2}),
        ("child-fail", None),
        ("hook", None),
    ],
)
def test_an_eager_start_records_what_the_workers_would(workflow: str, value: Any) -> None:
    """Same events, same data, eager or not: the first decision is the workers' decision."""
    histories = []
    for eager in (True, False):
        clock = ManualClock()
        store = MemoryStore()
        engine = make_engine(store, [scenario_runtime(StepLog())], clock)
        engine.eager_start = eager
        engine.start(workflow, value, run_id="r")
        _finish(engine, clock)
        runs = sorted(r.run_id for r in store.find_runs(RunFilter()))
        histories.append(
            {
                run_id: [
                    (e.event.event_key(), _stable(e.event.to_data()))
                    for e in engine.history(run_id)
                ]
                for run_id in runs
            }
        )
        assert keys(engine, "r")
    assert histories[0] == histories[1]


def _stable(data: Any) -> Any:
    """Event data without what differs between two runs by design (seeds, tokens, leases)."""
    if isinstance(data, dict):
        return {k: _stable(v) for k, v in data.items() if k not in {"seed", "token", "worker"}}
    if isinstance(data, list):
        return [_stable(v) for v in data]
    return data


def test_a_worker_pass_runs_an_eagerly_started_step_and_then_rests(
    store: EventStore, clock: ManualClock
) -> None:
    """The latency path of a one-step run: one pass leases the ready step (nothing to decide)
    and, having found fewer steps than it has threads, does not pass again at once to compete
    with the attempt it just handed out; the attempt's end wakes it."""
    from concurrent.futures import Future, ThreadPoolExecutor

    from flow_cli.engine.worker import Worker

    engine = Engine(store, [chain], clock=clock, worker_id="w")
    engine.start("chain", {"steps": 1, "x": 0}, run_id="w3")
    worker = Worker(engine, concurrency=4)
    in_flight: set[Future[None]] = set()
    with ThreadPoolExecutor(4) as pool:
        assert worker._pass(pool, in_flight) is False
        assert len(in_flight) == 1
        for future in in_flight:
            future.result(timeout=30)
    assert engine.snapshot("w3").status is RunStatus.COMPLETED


def test_a_worker_leases_the_ready_first_steps_of_many_runs_together(
    store: EventStore, clock: ManualClock
) -> None:
    """Runs started eagerly elsewhere reach the worker with their first step ready: one pass
    leases them all in one transaction (as it would start them in its own decisions' commit),
    not one lease per free thread."""
    from concurrent.futures import Future, ThreadPoolExecutor

    from flow_cli.engine.worker import Worker

    engine = Engine(store, [chain], clock=clock, worker_id="w")
    for i in range(10):
        engine.start("chain", {"steps": 1, "x": i}, run_id=f"many-{i}")
    worker = Worker(engine, concurrency=2)
    in_flight: set[Future[None]] = set()
    with ThreadPoolExecutor(2) as pool:
        worker._pass(pool, in_flight)  # one lease_steps call: all ten in its transaction
        assert len(in_flight) == 10
        for future in in_flight:
            future.result(timeout=30)
    assert all(engine.snapshot(f"many-{i}").status is RunStatus.COMPLETED for i in range(10))


def test_a_leased_attempt_runs_on_the_history_its_lease_read(
    store: EventStore, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A step leased by a worker's pass comes with its run, read in the lease's transaction
    (on PostgreSQL, in the round trip that commits it): the attempt's thread reads nothing
    before running it and recording its end."""
    import threading
    from concurrent.futures import Future, ThreadPoolExecutor

    from flow_cli.engine.worker import Worker

    engine = Engine(store, [chain], clock=clock, worker_id="w")
    for i in range(5):
        engine.start("chain", {"steps": 1, "x": i}, run_id=f"read-{i}")
    reads_on_step_threads: list[str] = []
    for name in ("read_history", "read_histories"):
        original = getattr(store, name)

        def spy(*args: Any, _original: Any = original, _name: str = name, **kwargs: Any) -> Any:
            if threading.current_thread() is not threading.main_thread():
                reads_on_step_threads.append(_name)
            return _original(*args, **kwargs)

        monkeypatch.setattr(store, name, spy)
    worker = Worker(engine, concurrency=2)
    in_flight: set[Future[None]] = set()
    with ThreadPoolExecutor(2) as pool:
        worker._pass(pool, in_flight)
        assert len(in_flight) == 5
        for future in in_flight:
            future.result(timeout=30)
    assert all(engine.snapshot(f"read-{i}").outcome is not None for i in range(5))
    assert [engine.snapshot(f"read-{i}").outcome.result for i in range(5)] == [1, 2, 3, 4, 5]  # type: ignore[union-attr]
    assert reads_on_step_threads == []
