"""What one step costs in commits: the figure the decision loop was rebuilt for (issue 7).

A step used to take six write transactions (lease the run, schedule, park, lease the step,
start, complete). Now scheduling and parking are one decision commit, a step's ``step_started``
is recorded in the transaction that leases it, and a step's completion is committed together
with the run's next decision and the next step's start. These tests count the store's durable
commits on every backend, so the figure cannot regress unnoticed.
"""

from __future__ import annotations

from flow_cli import Runtime
from flow_cli.engine.engine import Engine
from flow_cli.model.clock import ManualClock
from flow_cli.store.protocol import EventStore

chain = Runtime(build_id="chain-1")


@chain.workflow("chain")
def _chain(ctx):  # type: ignore[no-untyped-def]
    x = ctx.input["x"]
    for i in range(ctx.input["steps"]):
        x = ctx.step(f"s{i}", "inc", x)
    return ctx.complete(x)


@chain.step("inc")
def _inc(x, info):  # type: ignore[no-untyped-def]
    return x + 1


def test_one_run_of_many_steps_costs_one_commit_per_step(
    store: EventStore, clock: ManualClock
) -> None:
    engine = Engine(store, [chain], clock=clock, worker_id="w")
    steps = 40
    before = store.stats.durable_commits
    engine.start("chain", {"steps": steps, "x": 0}, run_id="w2")
    engine.tick(until_idle=True)
    commits = store.stats.durable_commits - before
    assert engine.snapshot("w2").outcome is not None
    assert engine.snapshot("w2").outcome.result == steps  # type: ignore[union-attr]
    # start, first decision, first lease, then one commit per step (the last one ends the run),
    # and on SQLite the lease of the run (every SQLite write waits for the disk).
    assert commits <= steps + 4, commits


def test_many_runs_of_ten_steps_cost_at_most_one_and_a_half_commits_per_step(
    store: EventStore, clock: ManualClock
) -> None:
    engine = Engine(store, [chain], clock=clock, worker_id="w")
    runs, steps = 20, 10
    before = store.stats.durable_commits
    for i in range(runs):
        engine.start("chain", {"steps": steps, "x": i}, run_id=f"w1-{i}")
    engine.tick(until_idle=True)
    commits = store.stats.durable_commits - before
    for i in range(runs):
        outcome = engine.snapshot(f"w1-{i}").outcome
        assert outcome is not None and outcome.result == i + steps
    assert commits / (runs * steps) <= 1.5, commits
