"""The example shop's authoring workflows (``workflows_example/shared.py``): the fan-in of 50
steps and 5 children, and the approval with reminders across ``continue_as_new``."""

from __future__ import annotations

import inspect
from datetime import timedelta
from pathlib import Path

import pytest

from flow_cli.testing import DEFAULT_START, WorkflowEnvironment
from workflows_example import orders


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> WorkflowEnvironment:
    monkeypatch.setenv("FLOW_EXAMPLE_LEDGER", str(tmp_path / "ledger.jsonl"))
    return WorkflowEnvironment(orders.runtime)


def test_fan_in_of_50_steps_and_5_children_is_at_most_8_lines(env: WorkflowEnvironment) -> None:
    source = inspect.getsource(orders.runtime.workflows["fan-in"])
    assert len(source.strip().splitlines()) <= 8  # decorator, def, comment and five lines

    run = env.start("fan-in")
    env.run_until_idle()

    assert env.result(run) == {"rates": 50, "labels": [f"LBL-B{p}" for p in range(5)]}


def test_approval_answered_in_the_third_round(env: WorkflowEnvironment) -> None:
    run = env.start("approval", None, run_id="po-1")
    env.advance(days=15)  # two reminders, then a fresh history in po-1~1
    env.signal(run, "decision", {"ok": True})
    assert env.result(run) == {"approved": True, "round": 2}
    assert env.snapshot("po-1").steps.keys() == {"remind-0", "remind-1"}


def test_approval_expires_after_30_days(env: WorkflowEnvironment) -> None:
    run = env.start("approval")
    env.advance(days=40)
    assert env.result(run) == {"approved": False, "expired": True}
    last = env.history(f"{run}~2")[-1]
    assert last.recorded_at == DEFAULT_START + timedelta(days=30)
