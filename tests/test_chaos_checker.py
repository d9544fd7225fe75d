"""bench/chaos.py's invariant checker, on a tiny in-process scenario (the chaos run itself takes
minutes and real processes: it is a bench script, not a CI test)."""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))

import chaos_workflows
from chaos import Acknowledged, check_histories, read_ledger

from flow_cli.engine.engine import Engine
from flow_cli.model.clock import ManualClock
from flow_cli.model.events import EventEnvelope
from flow_cli.store.protocol import RunFilter
from flow_cli.store.sqlite import SQLiteStore


@dataclasses.dataclass
class Scenario:
    engine: Engine
    clock: ManualClock
    ledger: Path
    acked: Acknowledged

    def histories(self) -> dict[str, list[EventEnvelope]]:
        store = self.engine.store
        return {r.run_id: store.read_history(r.run_id) for r in store.find_runs(RunFilter())}

    def problems(self) -> list[str]:
        return check_histories(
            self.histories(), read_ledger(self.ledger), self.acked, self.clock.now()
        )


@pytest.fixture
def scenario(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Scenario]:
    """One run of each chaos shape, driven to its end in this process (plus one left waiting)."""
    ledger = tmp_path / "ledger.tsv"
    monkeypatch.setenv("FLOW_CHAOS_LEDGER", str(ledger))
    monkeypatch.setenv("FLOW_CHAOS_STEP_PAUSE", "0")
    clock = ManualClock()
    engine = Engine(SQLiteStore(tmp_path / "flow.db"), [chaos_workflows.runtime], clock=clock)
    acked = Acknowledged()
    runs = {
        "chain-1": ("chain", {"steps": 3}),
        "retry-1": ("retry", {"fails": 2}),
        "timer-1": ("timer", {"secs": 5}),
        "signal-1": ("signal", {}),
        "signal-2": ("signal", {}),
        "hook-1": ("hook", {}),
        "parent-1": ("parent", {"steps": 2}),
        "doomed-1": ("doomed", {}),
    }
    for run_id, (workflow, value) in runs.items():
        engine.start(workflow, value, run_id=run_id)
        acked.starts.add(run_id)
    engine.tick(until_idle=True)
    engine.signal("signal-1", "go", {"tag": "t1"})
    acked.signals["signal-1"] = {"t1"}
    engine.resolve_hook(engine.snapshot("hook-1").hooks["h"].token, {"ok": 1})
    engine.cancel("doomed-1", "chaos-0")
    acked.cancels["doomed-1"] = {"chaos-0"}
    for _ in range(10):
        clock.advance(timedelta(seconds=3))
        engine.tick(until_idle=True)
    yield Scenario(engine, clock, ledger, acked)
    engine.close()


def test_a_clean_scenario_has_no_violation(scenario: Scenario) -> None:
    histories = scenario.histories()
    open_runs = [r for r, h in histories.items() if h[-1].event.event_key() != "run_completed"]
    assert sorted(open_runs) == ["doomed-1", "signal-2"]  # cancelled; waiting on its signal
    assert read_ledger(scenario.ledger) >= {("retry-1", "flaky", 3), ("parent-1/kid", "s1", 1)}
    assert scenario.problems() == []


def test_a_completion_missing_from_the_ledger_is_a_violation(scenario: Scenario) -> None:
    lines = scenario.ledger.read_text().splitlines(keepends=True)
    scenario.ledger.write_text("".join(x for x in lines if not x.startswith("chain-1\ts1\t")))
    assert scenario.problems() == [
        "run chain-1: step 's1' attempt 1 completed but its invocation is missing from the ledger"
    ]


def test_acknowledged_facts_missing_from_history_are_violations(scenario: Scenario) -> None:
    scenario.acked.starts.add("chain-99")
    scenario.acked.signals["signal-2"] = {"t2"}
    scenario.acked.cancels["chain-1"] = {"chaos-1"}
    assert scenario.problems() == [
        "run chain-99: its start was acknowledged but the run does not exist",
        "run signal-2: signal 't2' was acknowledged but is not in its history",
        "run chain-1: cancel 'chaos-1' was acknowledged but is not in its history",
    ]


def test_broken_histories_are_violations(scenario: Scenario) -> None:
    histories = scenario.histories()
    chain = histories["chain-1"]
    done = next(e for e in chain if e.event.event_key() == "step_completed")
    twice = dataclasses.replace(done, sequence=len(chain))
    histories["chain-1"] = [
        *chain[:-1],
        twice,
        dataclasses.replace(chain[-1], sequence=len(chain) + 1),
    ]
    retry = histories["retry-1"]
    histories["retry-1"] = [*retry[:2], *retry[3:]]
    found = check_histories(
        histories, read_ledger(scenario.ledger), Acknowledged(), scenario.clock.now()
    )
    assert found[0] == "run chain-1: step 's0' completed 2 times"
    assert found[1].startswith("run retry-1: sequences are not 1..")
    assert len(found) == 2


def test_a_run_that_should_have_moved_on_is_a_violation(scenario: Scenario) -> None:
    engine = scenario.engine
    engine.start("timer", {"secs": 5}, run_id="timer-2")
    engine.start("chain", {"steps": 1}, run_id="chain-2")
    engine.tick(until_idle=True)
    engine.start("chain", {"steps": 1}, run_id="chain-3")  # its step is never run
    later = scenario.clock.now() + timedelta(seconds=60)
    found = check_histories(
        scenario.histories(), read_ledger(scenario.ledger), Acknowledged(), later
    )
    assert found == [
        "run chain-3: open (Running) with 1 unsettled step(s)",
        "run timer-2: open (Suspended) with a timer already due",
    ]
