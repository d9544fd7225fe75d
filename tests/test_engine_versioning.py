"""Versioning (rule 10): runs are pinned to their build; patch markers come from history."""

from __future__ import annotations

from engine_workflows import data, keys, make_engine, scenario_runtime

from flow_cli.engine.replay_check import replay_history
from flow_cli.model.clock import ManualClock
from flow_cli.model.status import RunStatus
from flow_cli.store.protocol import EventStore


def test_a_run_waits_for_a_worker_that_hosts_its_build(
    store: EventStore, clock: ManualClock
) -> None:
    build_a = scenario_runtime(build_id="shop-A")
    build_b = scenario_runtime(build_id="shop-B")
    # A client that hosts build A but leaves the decisions to the workers.
    starter = make_engine(store, [build_a], clock, "starter", eager_start=False)
    starter.start("which-build", run_id="pinned")

    only_b = make_engine(store, [build_b], clock, "worker-b")
    for _ in range(3):
        assert only_b.tick(until_idle=True).runs_decided == 0
        clock.advance(60)
    # Even asked directly, a worker does not decide a run of a build it does not host.
    report = only_b.decide("pinned")
    assert (report.decisions, report.decision_failures) == (0, 0)
    assert keys(only_b, "pinned") == ["run_started"]
    snapshot = only_b.snapshot("pinned")
    assert snapshot.status is RunStatus.PENDING
    assert snapshot.decision_error is None
    record = only_b.get_run("pinned")
    assert record.status is RunStatus.PENDING
    assert record.failing is None
    assert record.build_id == "shop-A"

    both = make_engine(store, [build_b, build_a], clock, "worker-ab")
    both.tick(until_idle=True)
    assert keys(both, "pinned") == ["run_started", "run_completed"]
    assert data(both, "pinned", "run_completed") == [{"result": {"build": "shop-A", "fix": False}}]


def test_new_runs_record_the_build_they_start_under(store: EventStore, clock: ManualClock) -> None:
    build_a = scenario_runtime(build_id="shop-A")
    build_b = scenario_runtime(build_id="shop-B")
    engine = make_engine(store, [build_a, build_b], clock)
    engine.start("which-build", run_id="on-a", build_id="shop-A")
    engine.start("which-build", run_id="on-b", build_id="shop-B")
    engine.tick(until_idle=True)
    assert data(engine, "on-a", "run_completed") == [{"result": {"build": "shop-A", "fix": False}}]
    assert data(engine, "on-b", "run_completed") == [{"result": {"build": "shop-B", "fix": False}}]


def test_ctx_patched_follows_the_recorded_markers_not_the_runtime(
    store: EventStore, clock: ManualClock
) -> None:
    unpatched = scenario_runtime(build_id="shop-A")
    patched = scenario_runtime(build_id="shop-A", patches=["fix"])
    make_engine(store, [unpatched], clock, "old").start("which-build", run_id="old-run")
    # The patched runtime of the same build decides the old run: the marker was not recorded.
    engine = make_engine(store, [patched], clock, "new")
    engine.start("which-build", run_id="new-run")
    engine.tick(until_idle=True)

    assert engine.snapshot("old-run").spec.patches == ()
    assert engine.snapshot("new-run").spec.patches == ("fix",)
    assert data(engine, "old-run", "run_completed") == [
        {"result": {"build": "shop-A", "fix": False}}
    ]
    assert data(engine, "new-run", "run_completed") == [
        {"result": {"build": "shop-A", "fix": True}}
    ]
    # Both histories replay cleanly against the patched code.
    assert replay_history(patched, engine.history("old-run")).ok
    assert replay_history(patched, engine.history("new-run")).ok
    # The unpatched code cannot replay a run that recorded the marker.
    result = replay_history(unpatched, engine.history("new-run"))
    first = result.divergences[0]
    assert (first.identity, first.field, first.recorded, first.produced) == (
        "run",
        "patches",
        ["fix"],
        [],
    )
