"""The example shop's ``status`` query and ``change-address`` update (shown by demo.sh)."""

from __future__ import annotations

from pathlib import Path

import pytest

from flow_cli import UpdateRejected
from flow_cli.testing import WorkflowEnvironment
from workflows_example import orders

ORDER = {
    "sku": "sku-1",
    "quantity": 1,
    "amount": 10.0,
    "card": "4242",
    "parcels": ["p1"],
    "address": "1 Old Road",
}


def test_status_and_change_address(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FLOW_EXAMPLE_LEDGER", str(tmp_path / "ledger.jsonl"))
    env = WorkflowEnvironment(orders.runtime)
    run = env.start("order", ORDER, run_id="order-1")
    env.run_until_idle()
    assert env.query(run, "status") == {
        "stage": "awaiting approval",
        "charged": False,
        "ship_to": "1 Old Road",
    }
    with pytest.raises(UpdateRejected, match="give the new address"):
        env.update(run, "change-address", {"street": "x"})
    answer = env.update(run, "change-address", {"address": " 2 New St "}, update_id="a1")
    assert answer == {"address": "2 New St", "was": "1 Old Road"}
    token = env.snapshot(run).hooks["approval"].token
    env.resolve_hook(token, {"approved": True})
    assert env.query(run, "status")["stage"] == "packing"
    env.signal(run, "shipped", {"tracking": "T-1"})
    assert env.result(run)["ship_to"] == "2 New St"
    assert env.query(run, "status")["stage"] == "shipped"


def test_an_unchanged_order_completes_as_before(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FLOW_EXAMPLE_LEDGER", str(tmp_path / "ledger.jsonl"))
    env = WorkflowEnvironment(orders.runtime)
    run = env.start("order", ORDER, run_id="order-2")
    env.run_until_idle()
    env.resolve_hook(env.snapshot(run).hooks["approval"].token, {"approved": True})
    env.signal(run, "shipped", {"tracking": "T-2"})
    assert "ship_to" not in env.result(run)
    with pytest.raises(Exception, match="already ended"):
        env.update(run, "change-address", {"address": "late"})
