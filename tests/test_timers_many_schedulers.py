"""Several schedulers at once on one database: each due timer fires exactly once."""

from __future__ import annotations

import os
import threading
import uuid
from collections import Counter
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from flow_cli import Runtime, WorkflowContext
from flow_cli.engine.engine import Engine
from flow_cli.model.clock import ManualClock
from flow_cli.model.commands import RuntimeCommand
from flow_cli.store import open_store

runtime = Runtime(build_id="timers-1")


@runtime.workflow("nap")
def nap(ctx: WorkflowContext) -> RuntimeCommand:
    ctx.sleep("nap", timedelta(minutes=10))
    return ctx.complete("rested")


@pytest.fixture(params=["sqlite", "postgres"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'flow.db'}"
        return
    base = os.environ.get("FLOW_TEST_POSTGRES")
    if not base:
        pytest.skip("set FLOW_TEST_POSTGRES=postgresql://... to run the PostgreSQL store tests")
    sep = "&" if "?" in base else "?"
    full = f"{base}{sep}schema=timers_{uuid.uuid4().hex[:8]}"
    yield full
    store = open_store(full)
    getattr(store, "drop_schema")()  # noqa: B009
    store.close()


def test_each_due_timer_fires_once_with_four_schedulers(url: str) -> None:
    clock = ManualClock()
    engines = [Engine(open_store(url), [runtime], clock=clock) for _ in range(4)]
    run_ids = [f"nap-{i:03d}" for i in range(60)]
    for run_id in run_ids:
        engines[0].start("nap", None, run_id=run_id)
    engines[0].tick(until_idle=True)
    assert {engines[0].snapshot(r).status.value for r in run_ids} == {"Suspended"}

    clock.advance(timedelta(minutes=11))
    barrier = threading.Barrier(len(engines))

    def scheduler(engine: Engine) -> None:
        barrier.wait()
        engine.tick(until_idle=True, lease_seconds=0.0)  # zero lease: all four race every run

    threads = [threading.Thread(target=scheduler, args=(e,)) for e in engines]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    for run_id in run_ids:
        history = engines[0].history(run_id)
        keys = Counter(e.event_key for e in history)
        assert keys["wait_completed"] == 1, run_id
        assert keys["run_completed"] == 1, run_id
        assert [e.sequence for e in history] == list(range(1, len(history) + 1))
    for engine in engines:
        engine.close()
