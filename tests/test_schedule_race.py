"""Two real ``flow worker`` processes and a ``flow tick`` loop race over 100 every-second
schedules for 30 seconds: every fire time from the first to the last one handled starts
exactly one run (ids ``ID@<fire time>``), none is lost, none is counted skipped or missed.
One test per backend (SQLite, PostgreSQL), marked ``slow``; FLOW_SCHEDULE_RACE_SECONDS
shortens or lengthens the race."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from cli_helpers import FlowProject
from schedule_workflows import runtime

from flow_cli.engine.engine import Engine
from flow_cli.model.schedule import Overlap, ScheduleSpec
from flow_cli.store import open_store

SCHEDULES = 100
SECONDS = float(os.environ.get("FLOW_SCHEDULE_RACE_SECONDS", "30"))


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'flow.db'}"
        return
    base = os.environ.get("FLOW_TEST_POSTGRES")
    if not base:
        pytest.skip("set FLOW_TEST_POSTGRES=postgresql://... to run the PostgreSQL store tests")
    sep = "&" if "?" in base else "?"
    full = f"{base}{sep}schema=sched_race_{uuid.uuid4().hex[:8]}"
    yield full
    store = open_store(full)
    getattr(store, "drop_schema")()  # noqa: B009
    store.close()


@pytest.mark.slow
def test_two_workers_and_a_tick_loop_start_each_fire_time_once(url: str, tmp_path: Path) -> None:
    project = FlowProject(
        tmp_path,
        f'[flow]\ndatabase = "{url}"\nruntimes = ["schedule_workflows:runtime"]\n',
    )
    with Engine.open(url, [runtime]) as engine:
        for n in range(SCHEDULES):
            engine.schedules.create(
                ScheduleSpec(
                    schedule_id=f"race-{n:03d}",
                    workflow="report",
                    every=timedelta(seconds=1),
                    overlap=Overlap.ALLOW_ALL,  # every fire time starts its run
                )
            )
    created = datetime.now(UTC)
    workers = [project.popen("worker") for _ in range(2)]
    stop = threading.Event()
    ticks: list[subprocess.CompletedProcess[str]] = []

    def tick_loop() -> None:
        while not stop.is_set():
            done = project.run("tick")
            ticks.append(subprocess.CompletedProcess([], done.code, done.stdout, done.stderr))

    ticker = threading.Thread(target=tick_loop)
    ticker.start()
    try:
        time.sleep(SECONDS)
    finally:
        stop.set()
        for worker in workers:
            worker.send_signal(signal.SIGTERM)
        outputs = [worker.communicate(timeout=60) for worker in workers]
        ticker.join(120)
    assert [w.returncode for w in workers] == [0, 0], outputs
    assert ticks and all(t.returncode == 0 for t in ticks), [t.stderr for t in ticks]
    for _, stderr in outputs:
        assert "Traceback" not in stderr and "schedule race-" not in stderr, stderr

    with Engine.open(url, [runtime]) as engine:
        fired: dict[str, list[datetime]] = defaultdict(list)
        for record in engine.list_runs():
            schedule_id, _, at = record.run_id.partition("@")
            fired[schedule_id].append(datetime.fromisoformat(at.replace("Z", "+00:00")))
            spec = engine.snapshot(record.run_id).spec
            assert spec.schedule is not None and spec.schedule.schedule_id == schedule_id
        schedules = engine.schedules.all()
    assert len(schedules) == SCHEDULES
    total = 0
    for schedule in schedules:
        times = sorted(fired[schedule.schedule_id])
        state = schedule.state
        assert (state.skipped, state.missed) == (0, 0), schedule.schedule_id
        assert times, schedule.schedule_id
        # Every second from the first fire time to the last one handled, each exactly once.
        first = times[0]
        assert first <= created.replace(microsecond=0) + timedelta(seconds=2)
        assert state.last_fired_at == times[-1], schedule.schedule_id
        span = int((times[-1] - first).total_seconds()) + 1
        assert times == [first + timedelta(seconds=i) for i in range(span)], schedule.schedule_id
        total += len(times)
    # The fleet kept up: most of the race's fire times were handled while it ran.
    assert total >= SCHEDULES * (SECONDS - 10)
