"""Golden histories recorded by the previous build, replayed against every build we ship."""

from __future__ import annotations

from pathlib import Path

import pytest

from flow_cli import Runtime, WorkflowContext
from flow_cli.engine.export import load_export
from flow_cli.engine.replay_check import replay_history
from flow_cli.model.commands import RuntimeCommand
from flow_cli.model.events import BuildUpgraded, RunStarted
from flow_cli.model.snapshot import project
from workflows_example import orders, orders_broken, orders_v1
from workflows_example.orders import run_order
from workflows_example.shared import register_shared

HISTORIES = sorted(
    (Path(__file__).resolve().parent.parent / "workflows_example" / "histories").glob("*.json")
)


def test_there_are_golden_histories() -> None:
    assert len(HISTORIES) >= 2


@pytest.mark.parametrize("path", HISTORIES, ids=lambda p: p.stem)
@pytest.mark.parametrize("runtime", [orders_v1.runtime, orders.runtime], ids=lambda r: r.build_id)
def test_compatible_builds_replay_every_golden_history(path: Path, runtime: Runtime) -> None:
    _, history = load_export(path)
    result = replay_history(runtime, history)
    assert result.ok, result.divergences
    assert result.decision_points >= 2


def test_the_unguarded_change_diverges_on_charge_payment() -> None:
    _, history = load_export(next(p for p in HISTORIES if "completed" in p.stem))
    result = replay_history(orders_broken.runtime, history)
    assert not result.ok
    assert ("step 'charge-payment'", "input") in {(d.identity, d.field) for d in result.divergences}


def test_the_patch_marker_is_what_keeps_old_runs_replayable() -> None:
    # The same change as orders.py's tax-rounding fix, but applied to every run, unguarded.
    unguarded = Runtime(build_id="shop-unguarded", patches=["tax-rounding-fix"])
    register_shared(unguarded)

    @unguarded.workflow("order")
    def order(ctx: WorkflowContext) -> RuntimeCommand:
        return run_order(ctx, round(ctx.input["amount"] * 1.2, 2))

    _, history = load_export(next(p for p in HISTORIES if "completed" in p.stem))
    result = replay_history(unguarded, history)
    changed = {(d.identity, d.field): d for d in result.divergences}
    assert changed[("step 'charge-payment'", "input")].recorded["amount"] == 13.18
    assert changed[("step 'charge-payment'", "input")].produced["amount"] == 13.19


UPGRADED = next(p for p in HISTORIES if p.stem == "order-v1-upgraded-completed")


def test_the_upgraded_golden_history_moved_to_the_new_build_mid_flight() -> None:
    _, history = load_export(UPGRADED)
    started = history[0].event
    assert isinstance(started, RunStarted) and started.spec.runtime_build_id == "shop-2026.11.1"
    [moved] = [e for e in history if isinstance(e.event, BuildUpgraded)]
    assert moved.event.to_data() == {"from": "shop-2026.11.1", "to": "shop-2026.12.1"}
    assert history[-1].event.event_key() == "run_completed"
    assert project(history).spec.runtime_build_id == "shop-2026.12.1"
    # Decisions before and after the move replay on the build it is pinned to now (and, the
    # change being guarded, on the old one: the parametrised test above); the unguarded build
    # diverges before the move already.
    assert replay_history(orders.runtime, history).ok
    broken = replay_history(orders_broken.runtime, history)
    assert min(d.sequence for d in broken.divergences) < moved.sequence


def test_replay_check_reads_the_upgraded_history_from_its_file(tmp_path: Path) -> None:
    from cli_helpers import FlowProject
    from fleet_helpers import SHOP_CONFIG

    project = FlowProject(tmp_path, SHOP_CONFIG)
    result = project.invoke("replay-check", "--file", str(UPGRADED), "--build-id", "shop-2026.12.1")
    assert (result.code, result.stdout) == (
        0,
        "replay-check: 1 of 1 history replays cleanly against build shop-2026.12.1\n",
    )
