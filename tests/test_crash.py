"""Real processes, real SIGKILL: at-least-once steps and many writers on one SQLite file."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

from flow_cli.engine.engine import Engine
from flow_cli.model.events import EventEnvelope, StepCompleted
from workflows_example import orders, services

ROOT = Path(__file__).resolve().parent.parent
WORKER = [sys.executable, str(ROOT / "tests" / "worker_process.py")]

pytestmark = pytest.mark.slow


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(ROOT / "tests")])
    env["FLOW_EXAMPLE_LEDGER"] = str(tmp_path / "ledger.jsonl")
    env.update(extra)
    return env


def _wait_for(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def _assert_gapless(history: list[EventEnvelope]) -> None:
    assert [e.sequence for e in history] == list(range(1, len(history) + 1))


def test_sigkill_during_step_attempt_reruns_same_attempt_and_effect_applies_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FLOW_EXAMPLE_LEDGER", str(tmp_path / "ledger.jsonl"))
    db = f"sqlite:///{tmp_path / 'flow.db'}"
    engine = Engine.open(db, [orders.runtime])
    order = {"sku": "sku-8842", "quantity": 2, "amount": 107.5, "card": "4242", "parcels": ["p1"]}
    run_id = "order-2026-0001"
    engine.start("order", order, run_id=run_id)

    # Worker A performs the external call, then stalls before step_completed: kill it there.
    slow = subprocess.Popen(
        [*WORKER, db, "workflows_example.orders:runtime", "--lease-seconds", "2"],
        env=_env(tmp_path, FLOW_EXAMPLE_STEP_DELAY="120"),
    )
    try:
        _wait_for(lambda: len(services.read_calls()) == 1, 30, "the first attempt to start")
        _wait_for(lambda: len(services.read_ledger()) == 1, 10, "the side effect")
    finally:
        slow.send_signal(signal.SIGKILL)
        slow.wait(10)
    keys = [e.event_key for e in engine.history(run_id)]
    assert "step_started" in keys and "step_completed" not in keys

    fresh = subprocess.Popen(
        [*WORKER, db, "workflows_example.orders:runtime", "--lease-seconds", "2"],
        env=_env(tmp_path),
    )
    try:
        _wait_for(lambda: "approval" in engine.snapshot(run_id).hooks, 30, "the approval hook")
        token = engine.snapshot(run_id).hooks["approval"].token
        engine.resolve_hook(token, {"approved": True})
        _wait_for(lambda: "shipped" in engine.snapshot(run_id).signal_waits, 30, "the shipped wait")
        engine.signal(run_id, "shipped", {"tracking": "TRK-1"})
        _wait_for(lambda: engine.snapshot(run_id).terminal, 30, "the run to end")
    finally:
        fresh.send_signal(signal.SIGTERM)
        assert fresh.wait(20) == 0

    history = engine.history(run_id)
    _assert_gapless(history)
    assert engine.snapshot(run_id).status.value == "Completed"
    reserve = [e.event for e in history if getattr(e.event, "step_id", None) == "reserve-stock"]
    started = [e for e in reserve if e.event_key() == "step_started"]
    completed = [e for e in reserve if isinstance(e, StepCompleted)]
    # The same attempt ran twice (the re-run after a crash is not a new attempt) ...
    assert [getattr(e, "attempt", None) for e in started] == [1, 1]
    assert len({getattr(e, "worker", None) for e in started}) == 2
    assert len(completed) == 1
    calls = [c for c in services.read_calls() if c["key"].endswith(":reserve-stock:sku-8842")]
    assert [c["attempt"] for c in calls] == [1, 1]
    # ... and the effect keyed by info.idempotency_key(...) was applied once.
    effects = [e for e in services.read_ledger() if e["effect"] == "reserve"]
    assert [e["key"] for e in effects] == ["order-2026-0001:reserve-stock:sku-8842"]
    engine.close()


def test_two_worker_processes_drive_200_runs_of_five_steps(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'flow.db'}"
    import load_workflows

    engine = Engine.open(db, [load_workflows.runtime])
    run_ids = [f"load-{i:03d}" for i in range(200)]
    for run_id in run_ids:
        engine.start("five-steps", {"effects": False}, run_id=run_id)
    workers = [
        subprocess.Popen(
            [*WORKER, db, "load_workflows:runtime", "--lease-seconds", "10", "--concurrency", "2"],
            env=_env(tmp_path),
        )
        for _ in range(2)
    ]
    try:
        _wait_for(
            lambda: all(r.status.terminal for r in engine.list_runs()),
            240,
            "all 200 runs to end",
        )
    finally:
        for worker in workers:
            worker.send_signal(signal.SIGTERM)
        codes = [worker.wait(30) for worker in workers]
    assert codes == [0, 0]

    for run_id in run_ids:
        history = engine.history(run_id)
        _assert_gapless(history)
        keys = Counter(e.event_key for e in history)
        assert keys["run_completed"] == 1, run_id
        assert keys["step_scheduled"] == 5, run_id
        completed = Counter(e.event.step_id for e in history if isinstance(e.event, StepCompleted))
        assert completed == {f"s{i}": 1 for i in range(5)}, run_id
        decisions = [
            (e.event_key, getattr(e.event, "step_id", None))
            for e in history
            if e.event_key in ("step_scheduled", "run_completed")
        ]
        assert len(decisions) == len(set(decisions)), run_id
        assert history[-1].event_key == "run_completed"
        assert engine.snapshot(run_id).outcome is not None
    engine.close()
