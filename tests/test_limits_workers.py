"""Flow-control limits with real worker processes (``tests/worker_process.py``): a step's
concurrency and rate hold across every worker, as the histories show (each attempt from its
``step_started`` to its ``step_completed``), on SQLite and on PostgreSQL; and a slot held by a
worker killed with SIGKILL comes back once its lease lapses.

Kept short: a few seconds each.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from limit_workflows import runtime

from flow_cli.engine.engine import Engine
from flow_cli.model.events import StepCompleted, StepStarted
from flow_cli.model.status import RunStatus
from flow_cli.store.protocol import EventStore, LimitedStarts

ROOT = Path(__file__).resolve().parent.parent

Spawn = Callable[..., subprocess.Popen[bytes]]


def _until(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def fleet(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Engine, Spawn, int]]:
    """An engine hosting ``limit_workflows`` on a fresh database, a way to start real worker
    processes on it, and how many to start (2 on SQLite, 4 on PostgreSQL)."""
    args: list[str]
    store: EventStore
    if request.param == "sqlite":
        from flow_cli.store.sqlite import SQLiteStore

        db = tmp_path / "flow.db"
        store = SQLiteStore(db)
        args, count = [f"sqlite:///{db}"], 2
    else:
        url = os.environ.get("FLOW_TEST_POSTGRES")
        if not url:
            pytest.skip("set FLOW_TEST_POSTGRES=postgresql://... to run the PostgreSQL tests")
        from flow_cli.store.postgres import PostgresStore

        schema = f"flow_limits_{uuid.uuid4().hex[:12]}"
        store = PostgresStore(url, schema=schema)
        args, count = [url, "--schema", schema], 4
    engine = Engine(store, [runtime])
    workers: list[subprocess.Popen[bytes]] = []

    def spawn(
        lease_seconds: float = 5.0, pause: float = 0.2, concurrency: int = 4
    ) -> subprocess.Popen[bytes]:
        env = dict(
            os.environ,
            PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "tests")]),
            FLOW_TEST_LIMIT_PAUSE=str(pause),
        )
        command = [sys.executable, str(ROOT / "tests" / "worker_process.py"), args[0]]
        command += ["limit_workflows:runtime", *args[1:], "--lease-seconds", str(lease_seconds)]
        command += ["--concurrency", str(concurrency)]
        workers.append(subprocess.Popen(command, env=env, stderr=subprocess.DEVNULL))
        return workers[-1]

    try:
        yield engine, spawn, count
    finally:
        for worker in workers:
            if worker.poll() is None:
                worker.send_signal(signal.SIGTERM)
                worker.wait(30)
        drop = getattr(store, "drop_schema", None)
        if drop is not None:
            drop()
        engine.close()


def _ended(engine: Engine, run_ids: list[str]) -> bool:
    return all(engine.get_run(run_id).status is RunStatus.COMPLETED for run_id in run_ids)


def _attempts(engine: Engine, run_ids: list[str]) -> list[tuple[datetime, datetime]]:
    """Each attempt's time in flight: from its ``step_started`` to its ``step_completed``."""
    spans = []
    for run_id in run_ids:
        history = engine.history(run_id)
        started = [e.recorded_at for e in history if isinstance(e.event, StepStarted)]
        ended = [e.recorded_at for e in history if isinstance(e.event, StepCompleted)]
        assert len(started) == len(ended) == 1, history
        spans.append((started[0], ended[0]))
    return spans


SKEW = timedelta(milliseconds=100)
"""A lease's recorded time is its worker's clock just before the lease's transaction (which
counts the attempts in flight once it has the limit's lock: on a loaded machine, tens of
milliseconds later), and an attempt's end is recorded when its worker decided what follows, a
moment before the commit that frees the slot: an attempt that took a slot just freed can show
as started before the end of the one that freed it. Ends are read this much earlier. Attempts
take 0.5 s (``pay``) or 0.2 s (``solos``), so attempts a broken limit lets overlap still do for
most of their time (without the limit, 8 or 16 ``pay`` attempts start together)."""


def _most_at_once(spans: list[tuple[datetime, datetime]]) -> int:
    # An end at the same instant as a start frees its slot first.
    points = sorted([(start, 1) for start, _ in spans] + [(end - SKEW, -1) for _, end in spans])
    most = now = 0
    for _, change in points:
        now += change
        most = max(most, now)
    return most


def test_a_step_concurrency_of_3_holds_across_worker_processes(
    fleet: tuple[Engine, Spawn, int],
) -> None:
    engine, spawn, count = fleet
    run_ids = [engine.start("pay", i, run_id=f"pay-{i}").run_id for i in range(12)]
    for _ in range(count):
        spawn(pause=0.5)  # 4 threads each: without the limit, up to 4 x count attempts at once
    _until(lambda: _ended(engine, run_ids), 60, "the runs to complete")
    spans = _attempts(engine, run_ids)
    assert _most_at_once(spans) == 3


def test_a_step_rate_of_20_per_second_holds_across_worker_processes(
    fleet: tuple[Engine, Spawn, int],
) -> None:
    engine, spawn, count = fleet
    run_ids = [engine.start("poll", i, run_id=f"poll-{i}").run_id for i in range(45)]
    for _ in range(count):
        spawn(concurrency=16)
    _until(lambda: _ended(engine, run_ids), 60, "the runs to complete")
    starts = sorted(start for start, _ in _attempts(engine, run_ids))
    second = timedelta(seconds=1)
    busiest = max(sum(1 for t in starts if s <= t < s + second) for s in starts)
    assert busiest == 20  # the first second takes all it may, and no window more
    assert starts[-1] - starts[0] >= 2 * second - timedelta(milliseconds=50)


def test_a_step_concurrency_of_1_holds_when_attempts_start_in_commits(
    fleet: tuple[Engine, Spawn, int],
) -> None:
    engine, spawn, _ = fleet
    spawn(pause=0.8)  # solo takes a quarter of it
    spawn(pause=0.8)
    # Alone, a run's attempts find the limit with room and no attempt waiting: each next one
    # starts in the commit that ends the one before. Then six at once contend for the slot.
    run_ids = [engine.start("solos", 0, run_id="solos-alone").run_id]
    _until(lambda: _ended(engine, run_ids), 60, "the first run to complete")
    run_ids += [engine.start("solos", i, run_id=f"solos-{i}").run_id for i in range(6)]
    _until(lambda: _ended(engine, run_ids), 60, "the runs to complete")
    spans = []
    in_commit = 0
    for run_id in run_ids:
        history = engine.history(run_id)
        started = {e.event.step_id: e for e in history if isinstance(e.event, StepStarted)}
        ended = {e.event.step_id: e for e in history if isinstance(e.event, StepCompleted)}
        assert sorted(started) == sorted(ended) == ["solo0", "solo1", "solo2"], history
        spans += [(started[s].recorded_at, ended[s].recorded_at) for s in started]
        # Started in the commit that ended the step before (PostgreSQL, while the limit has
        # room): recorded at the same time.
        in_commit += sum(
            1
            for s in ("solo1", "solo2")
            if started[s].sequence > ended[f"solo{int(s[-1]) - 1}"].sequence
            and started[s].recorded_at == ended[f"solo{int(s[-1]) - 1}"].recorded_at
        )
    assert _most_at_once(spans) == 1
    if isinstance(engine.store, LimitedStarts):
        assert in_commit > 0  # the fast path was taken, and the limit still held


def test_the_slots_of_a_killed_worker_come_back_when_its_leases_lapse(
    fleet: tuple[Engine, Spawn, int],
) -> None:
    engine, spawn, _ = fleet
    for i in range(4):
        engine.start("pay", i, run_id=f"pay-{i}")
    doomed = spawn(lease_seconds=2.0, pause=600)  # its attempts never end by themselves

    def held() -> int:  # 0 until the worker declared the code's limits
        return sum(s.in_use for s in engine.limits.list() if s.target == "step:charge")

    _until(lambda: held() == 3, 30, "the killed worker's three attempts")
    doomed.send_signal(signal.SIGKILL)
    doomed.wait(30)
    killed_at = engine.clock.now()
    (state,) = [s for s in engine.store.limit_states(killed_at) if s.target == "step:charge"]
    assert (state.in_use, state.waiting) == (3, 1)  # held by a dead worker until its leases lapse
    leased: list[object] = []
    _until(lambda: bool(leased.extend(engine.work.lease_steps(30, 10)) or leased), 20, "slots")
    assert len(leased) == 3  # every slot came back (the fourth attempt waits behind them)
