"""The lease keeper renews only attempts still in hand.

A chained attempt (a step started in the commit of the previous step's completion) whose commit
meets a database outage must be dropped from the keeper: otherwise the keeper renews its lease for
as long as the process lives, the lease never expires, and no worker ever retries the attempt.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from flow_cli import Runtime
from flow_cli.engine.decider import StartSteps
from flow_cli.engine.engine import Engine
from flow_cli.errors import StoreError
from flow_cli.model.clock import ManualClock
from flow_cli.store.protocol import EventStore, StepRenewal

chain = Runtime(build_id="keeper-1")


@chain.workflow("chain")
def _chain(ctx):  # type: ignore[no-untyped-def]
    x = 0
    for i in range(4):
        x = ctx.step(f"s{i}", "inc", x)
    return ctx.complete(x)


@chain.step("inc")
def _inc(x, info):  # type: ignore[no-untyped-def]
    return x + 1


class OutageAfter:
    """A store whose commits fail with ``StoreError`` once ``allowed`` of them have succeeded."""

    def __init__(self, inner: EventStore) -> None:
        self._inner = inner
        self.allowed: int | None = None

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        if name not in {"commit", "commit_groups"}:
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            if self.allowed is not None:
                if self.allowed == 0:
                    raise StoreError("simulated: the database went away")
                self.allowed -= 1
            return attr(*args, **kwargs)

        return call


def test_an_outage_mid_chain_leaves_no_lease_renewed_forever(
    store: EventStore, clock: ManualClock
) -> None:
    flaky = OutageAfter(store)
    engine = Engine(flaky, [chain], clock=clock, worker_id="w1", eager_start=False)  # type: ignore[arg-type]
    engine.start("chain", None, run_id="r")
    run_ids = engine.work.lease_runs(30, 10)
    started = engine.decider.decide_many(run_ids, start=StartSteps("w1", 30, 10)).started
    assert [lease.step_id for lease in started] == ["s0"]
    keeper = engine.work.lease_keeper(30)
    keeper.hold(started[0])
    flaky.allowed = 1  # s0's completion (which starts s1) commits; s1's completion does not
    with pytest.raises(StoreError):
        engine.work.execute_step(started[0], 30, keeper)
    assert keeper.held == []

    # The outage ends; s1's lease runs out, and another worker runs it again and finishes.
    flaky.allowed = None
    clock.advance(timedelta(seconds=31))
    other = Engine(flaky, [chain], clock=clock, worker_id="w2")  # type: ignore[arg-type]
    other.tick(until_idle=True)
    outcome = other.snapshot("r").outcome
    assert outcome is not None and outcome.result == 4


def test_a_lease_is_renewed_only_when_it_would_run_low_before_the_next_round(
    store: EventStore, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker holding many leases taken an instant ago (timers that fired together) does not
    spend a transaction on each at every round; a lease is renewed before it has less than half
    its time left, and a renewed lease counts from its renewal."""
    engine = Engine(store, [chain], clock=clock, worker_id="w1", eager_start=False)
    engine.start("chain", None, run_id="r")
    run_ids = engine.work.lease_runs(30, 10)
    started = engine.decider.decide_many(run_ids, start=StartSteps("w1", 30, 10)).started
    keeper = engine.work.lease_keeper(30)  # a round every 10 s
    keeper.hold(started[0])
    renewed: list[str] = []
    renew_step = store.renew_step

    def counting(renewal: StepRenewal) -> bool:
        renewed.append(renewal.step_id)
        return renew_step(renewal)

    monkeypatch.setattr(store, "renew_step", counting)
    keeper.renew_now()  # 30 s left, 20 at the next round: enough
    assert renewed == []
    clock.advance(timedelta(seconds=6))  # 24 s left, 14 at the next round: renew
    keeper.renew_now()
    assert renewed == ["s0"]
    clock.advance(timedelta(seconds=4))  # renewed 4 s ago: 26 s left
    keeper.renew_now()
    assert renewed == ["s0"]
    # Rounds as the keeper's thread makes them keep the lease from ever running out: after
    # 100 s more, another worker still finds the attempt taken.
    for _ in range(10):
        clock.advance(timedelta(seconds=keeper.interval))
        keeper.renew_now()
    assert 5 <= len(renewed) <= 11
    other = Engine(store, [chain], clock=clock, worker_id="w2")
    assert other.work.lease_steps(30, 10) == []
    keeper.drop(started[0])
    clock.advance(timedelta(seconds=31))
    assert [lease.step_id for lease in other.work.lease_steps(30, 10)] == ["s0"]
