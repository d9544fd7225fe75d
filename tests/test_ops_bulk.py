"""``flow_cli.ops.bulk``: many runs' facts per transaction, a lost race redone run by run."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

import pytest
from engine_workflows import make_engine

from flow_cli import Runtime, WorkflowContext
from flow_cli.engine.engine import Engine
from flow_cli.engine.streams import Write
from flow_cli.errors import EventConflict
from flow_cli.model.clock import ManualClock
from flow_cli.model.commands import RuntimeCommand
from flow_cli.ops.bulk import Outcome, StartLine, cancel_runs, signal_runs, start_runs
from flow_cli.store.protocol import EventStore

runtime = Runtime(build_id="bulk-1")


@runtime.workflow("waits")
def waits(ctx: WorkflowContext) -> RuntimeCommand:
    return ctx.complete(ctx.receive("go", "go"))


@pytest.fixture
def engine(store: EventStore, clock: ManualClock) -> Engine:
    engine = make_engine(store, [runtime], clock)
    for n in range(5):
        engine.start("waits", None, run_id=f"w{n}")
    engine.tick(until_idle=True)
    return engine


def count_commits(engine: Engine, monkeypatch: pytest.MonkeyPatch, fail_first: bool) -> list[int]:
    sizes: list[int] = []
    real = engine.streams.commit

    def commit(writes: Sequence[Write], now: datetime, creates: Sequence[Any] = ()) -> Any:
        sizes.append(len(writes) + len(creates))
        if fail_first and len(sizes) == 1:
            raise EventConflict(writes[0].before.run_id, 0, 1)
        return real(writes, now, creates)

    monkeypatch.setattr(engine.streams, "commit", commit)
    return sizes


def test_cancel_commits_a_batch_per_transaction(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    sizes = count_commits(engine, monkeypatch, fail_first=False)
    results = list(cancel_runs(engine, ["w0", "w1", "w2", "w3", "w4", "nope"], "r", batch_size=4))
    assert sizes == [4, 1]
    assert [r.outcome for r in results] == [Outcome.DONE] * 5 + [Outcome.FAILED]
    again = list(cancel_runs(engine, ["w0"], "r"))
    assert again[0].outcome is Outcome.SKIPPED and sizes == [4, 1]  # nothing to commit


def test_a_batch_that_loses_a_race_is_redone_run_by_run(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    sizes = count_commits(engine, monkeypatch, fail_first=True)
    results = list(signal_runs(engine, ["w0", "w1", "w2"], "go", 1))
    assert sizes[0] == 3 and sizes[1:] == [1, 1, 1]
    assert all(r.outcome is Outcome.DONE for r in results)
    assert all(engine.snapshot(f"w{n}").signals for n in range(3))


def test_start_creates_a_batch_and_skips_existing_runs(engine: Engine) -> None:
    lines = [StartLine(f"s{n}", "waits", None) for n in range(3)]
    assert [r.outcome for r in start_runs(engine, lines)] == [Outcome.DONE] * 3
    again = [*lines, StartLine("s9", "waits", {"x": 1}), StartLine("bad", "nope", None)]
    assert [r.outcome for r in start_runs(engine, again)] == [
        Outcome.SKIPPED, Outcome.SKIPPED, Outcome.SKIPPED, Outcome.DONE, Outcome.FAILED,
    ]  # fmt: skip


def test_a_run_that_ends_during_the_one_by_one_redo_is_skipped_as_in_a_batch(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 25, item 9: the batch path says ``skipped`` of an ended run; so must the redo."""
    count_commits(engine, monkeypatch, fail_first=True)  # the batch loses a race
    real_cancel = engine.cancel

    def cancel_after_it_ended(run_id: str, reason: str = "r") -> bool:
        engine.terminate(run_id, "another operator was quicker")
        return real_cancel(run_id, reason)

    monkeypatch.setattr(engine, "cancel", cancel_after_it_ended)
    results = list(cancel_runs(engine, ["w0", "w1"], "r"))
    assert [(r.run_id, r.outcome, r.detail) for r in results] == [
        ("w0", Outcome.SKIPPED, "already Cancelled"),
        ("w1", Outcome.SKIPPED, "already Cancelled"),
    ]
