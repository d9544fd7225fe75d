"""Sticky decisions (issue 7): a workflow call waiting in ``ctx.step`` is resumed, not replayed,
when nothing but its own step happened; the histories are the ones replay would have made."""

from __future__ import annotations

from flow_cli import Runtime
from flow_cli.engine.engine import Engine
from flow_cli.engine.replay_check import replay_history
from flow_cli.engine.sticky import STICKY_FROM
from flow_cli.model.clock import ManualClock
from flow_cli.store.memory import MemoryStore
from flow_cli.store.protocol import EventStore


def _chain(calls: list[int] | None = None, canceller: list[Engine] | None = None) -> Runtime:
    rt = Runtime(build_id="sticky-1")

    @rt.workflow("chain")
    def chain(ctx):  # type: ignore[no-untyped-def]
        x = 0
        for i in range(ctx.input["steps"]):
            if ctx.cancel_requested:
                return ctx.cancelled("stopped between steps")
            x = ctx.step(f"s{i}", "inc", {"x": x, "i": i})
        return ctx.complete(x)

    @rt.step("inc")
    def inc(input, info):  # type: ignore[no-untyped-def]
        if calls is not None:
            calls.append(input["i"])
        if canceller and input["i"] == STICKY_FROM + 4:
            canceller[0].cancel(info.run_id, "mid-chain")
        return input["x"] + 1

    return rt


def _comparable(engine: Engine, run_id: str) -> list[tuple[str, dict[str, object]]]:
    return [(e.event_key, e.event.to_data()) for e in engine.history(run_id)]


def test_a_chain_resumes_its_call_and_records_what_replay_records(
    store: EventStore, clock: ManualClock
) -> None:
    sticky = Engine(store, [_chain()], clock=clock, worker_id="w")
    sticky.start("chain", {"steps": 60}, run_id="r")
    sticky.tick(until_idle=True)
    assert sticky.snapshot("r").outcome.result == 60  # type: ignore[union-attr]
    # Short runs are replayed (cheaper than a thread); from STICKY_FROM completed steps on, the
    # call went on, step after step.
    assert sticky.decider.sticky.resumed >= 60 - STICKY_FROM - 3

    # The same run decided by replaying every time (each step run by a separate tick) ...
    plain_clock = ManualClock(clock.now())
    plain = Engine(MemoryStore(), [_chain()], clock=plain_clock, worker_id="w")
    plain.start("chain", {"steps": 60}, run_id="r")
    while plain.snapshot("r").outcome is None:
        for lease in plain.work.lease_steps(30, 1):
            plain.executor.execute(lease, "w", 30)  # one step: no chain, no kept call
            plain.decider.sticky.close()
        plain.tick(until_idle=True)
    # ... records the same events; and the sticky history replays cleanly from the top.
    assert [k for k, _ in _comparable(sticky, "r")] == [k for k, _ in _comparable(plain, "r")]
    assert replay_history(_chain(), sticky.history("r")).ok


def test_anything_else_happening_to_the_run_means_a_replay_from_the_top(
    store: EventStore, clock: ManualClock
) -> None:
    calls: list[int] = []
    canceller: list[Engine] = []
    engine = Engine(store, [_chain(calls, canceller)], clock=clock, worker_id="w")
    canceller.append(Engine(store, [_chain()], clock=clock, worker_id="operator"))
    engine.start("chain", {"steps": STICKY_FROM + 12}, run_id="r")
    engine.tick(until_idle=True)
    # The cancellation came in while a step ran with a call kept: that call would not have
    # looked at ctx.cancel_requested again; the replay does, and the run stops after the step.
    assert engine.decider.sticky.resumed > 0
    assert calls == list(range(STICKY_FROM + 5))
    outcome = engine.snapshot("r").outcome
    assert outcome is not None and outcome.reason == "stopped between steps"
    assert replay_history(_chain(), engine.history("r")).ok
