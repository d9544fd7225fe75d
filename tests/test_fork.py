"""``flow_cli.ops.fork``: forks, whole and from a step; refusals."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from engine_workflows import make_engine

from flow_cli import Runtime, StepInfo, WorkflowContext
from flow_cli.engine.engine import Engine
from flow_cli.errors import ForkDiverges, InputError
from flow_cli.model.clock import ManualClock
from flow_cli.model.commands import RuntimeCommand
from flow_cli.model.events import StepScheduled
from flow_cli.ops.fork import fork_run
from flow_cli.store.protocol import EventStore, RunFilter
from workflows_example import orders

ORDER = {"sku": "sku-8842", "quantity": 1, "amount": 100.0}
CALLS: list[str] = []


def _shipping(build_id: str) -> Runtime:
    runtime = Runtime(build_id=build_id)

    @runtime.workflow("ship")
    def ship(ctx: WorkflowContext) -> RuntimeCommand:
        packed = ctx.step("pack", "pack", {"items": ctx.input["items"]})
        ctx.sleep_until("cool-off", ctx.started_at + timedelta(minutes=5))
        address = ctx.receive("address", "address")
        label = ctx.step("label", "label", {"to": address, "boxes": packed["boxes"]})
        return ctx.complete(label)

    @runtime.step("pack")
    def pack(input: Any, info: StepInfo) -> Any:
        CALLS.append(f"{info.run_id}:pack")
        return {"boxes": input["items"]}

    @runtime.step("label")
    def label(input: Any, info: StepInfo) -> Any:
        CALLS.append(f"{info.run_id}:label")
        return {"label": f"{input['to']}x{input['boxes']}"}

    return runtime


@pytest.fixture
def engine(
    store: EventStore, clock: ManualClock, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Engine:
    monkeypatch.setenv("FLOW_EXAMPLE_LEDGER", str(tmp_path / "ledger.jsonl"))
    return make_engine(store, [orders.runtime, _shipping("ship-1"), _shipping("ship-2")], clock)


def shipped(engine: Engine, clock: ManualClock) -> None:
    engine.start("ship", {"items": 2}, run_id="s1", build_id="ship-1")
    engine.tick(until_idle=True)
    clock.advance(600)
    engine.tick(until_idle=True)  # the timer fires
    engine.signal("s1", "address", "Lyon")
    engine.tick(until_idle=True)


def approved_order(engine: Engine, clock: ManualClock, run_id: str = "o1") -> None:
    engine.start("order", ORDER, run_id=run_id)
    engine.tick(until_idle=True)
    [hook] = engine.store.list_hooks(run_id, open_only=True)
    clock.advance(60)
    engine.resolve_hook(hook.token, {"approved": True})
    engine.tick(until_idle=True)  # charge-payment runs; the order waits for "shipped"


def test_fork_from_a_step_keeps_earlier_outputs_and_reruns_the_rest(
    engine: Engine, clock: ManualClock
) -> None:
    shipped(engine, clock)
    assert engine.snapshot("s1").outcome.result == {"label": "Lyonx2"}  # type: ignore[union-attr]
    original = engine.history("s1")
    cut = next(
        e.sequence
        for e in original
        if isinstance(e.event, StepScheduled) and e.event.step_id == "label"
    )
    clock.advance(3600)
    CALLS.clear()
    forked = fork_run(engine, "s1", new_id="s1-again", from_step="label", build_id="ship-2")
    assert forked.to_json() == {
        "run_id": "s1-again",
        "forked_from": {"run_id": "s1", "sequence": cut - 1},
    }
    copied = engine.history("s1-again")
    spec = copied[0].event.spec  # type: ignore[attr-defined]
    assert spec.forked_from == ("s1", cut - 1) and spec.runtime_build_id == "ship-2"
    assert copied[0].recorded_at == original[0].recorded_at  # ctx.started_at reads the same
    assert [(e.event, e.recorded_at) for e in copied[1:]] == [
        (e.event, e.recorded_at) for e in original[1 : cut - 1]
    ]
    assert engine.history("s1") == original  # untouched
    engine.tick(until_idle=True)
    outcome = engine.snapshot("s1-again").outcome
    assert outcome is not None and outcome.result == {"label": "Lyonx2"}
    assert CALLS == ["s1-again:label"]  # pack was not invoked again


def test_a_fork_from_a_step_is_listed_by_when_it_was_forked(
    engine: Engine, clock: ManualClock
) -> None:
    shipped(engine, clock)
    engine.start("ship", {"items": 1}, run_id="s2", build_id="ship-1")
    clock.advance(3600)
    forked_at = clock.now()
    fork_run(engine, "s1", new_id="s1-again", from_step="label")

    listed = engine.store.find_runs(RunFilter())
    assert [r.run_id for r in listed] == ["s1-again", "s2", "s1"]  # newest first
    assert listed[0].created_at == forked_at
    since = engine.store.find_runs(RunFilter(since=forked_at - timedelta(minutes=1)))
    assert [r.run_id for r in since] == ["s1-again"]
    # Its history keeps the original's times: ctx.started_at, and what derives from it.
    assert engine.history("s1-again")[0].recorded_at == engine.history("s1")[0].recorded_at


def test_fork_whole_run_with_new_input(engine: Engine, clock: ManualClock) -> None:
    shipped(engine, clock)
    forked = fork_run(engine, "s1", new_id="s2", input={"items": 3})
    assert [e.event.event_key() for e in engine.history("s2")] == ["run_started"]
    spec = engine.snapshot("s2").spec
    assert spec.input == {"items": 3}
    assert spec.forked_from == ("s1", len(engine.history("s1")))
    assert forked.copied == 0
    engine.tick(until_idle=True)
    assert engine.snapshot("s2").steps["pack"].output == {"boxes": 3}


def test_a_fork_that_would_diverge_is_refused_and_writes_nothing(
    engine: Engine, clock: ManualClock
) -> None:
    shipped(engine, clock)
    with pytest.raises(ForkDiverges) as refused:
        fork_run(engine, "s1", new_id="s3", from_step="label", input={"items": 5})
    assert refused.value.divergences[0].identity == "step 'pack'"
    assert refused.value.divergences[0].field == "input"
    assert engine.store.get_run("s3") is None
    with pytest.raises(InputError, match="never scheduled"):
        fork_run(engine, "s1", from_step="no-such-step")


def test_an_order_fork_after_its_hook_diverges_on_the_run_id(
    engine: Engine, clock: ManualClock
) -> None:
    approved_order(engine, clock)
    # The order puts ctx.run_id into its hook's metadata: under another run id the code would
    # not create the same hook, so copying that decision is refused.
    with pytest.raises(ForkDiverges) as refused:
        fork_run(engine, "o1", new_id="o1-again", from_step="charge-payment")
    [divergence] = refused.value.divergences
    assert (divergence.identity, divergence.field) == ("hook 'approval'", "metadata")
    assert engine.store.get_run("o1-again") is None
