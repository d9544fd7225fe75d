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
from flow_cli.store.protocol import EventStore

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
    run_ids = engine.lease_runs(30, 10)
    started = engine.decider.decide_many(run_ids, start=StartSteps("w1", 30, 10)).started
    assert [lease.step_id for lease in started] == ["s0"]
    keeper = engine.lease_keeper(30)
    keeper.hold(started[0])
    flaky.allowed = 1  # s0's completion (which starts s1) commits; s1's completion does not
    with pytest.raises(StoreError):
        engine.execute_step(started[0], 30, keeper)
    assert keeper.held == []

    # The outage ends; s1's lease runs out, and another worker runs it again and finishes.
    flaky.allowed = None
    clock.advance(timedelta(seconds=31))
    other = Engine(flaky, [chain], clock=clock, worker_id="w2")  # type: ignore[arg-type]
    other.tick(until_idle=True)
    outcome = other.snapshot("r").outcome
    assert outcome is not None and outcome.result == 4
