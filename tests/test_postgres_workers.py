"""Many worker processes on one PostgreSQL database, with workers killed and the server restarted.

These tests need the server named by ``FLOW_TEST_POSTGRES``; they are skipped without it and
fail (not skip) when it is set but the server does not answer.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO

import pytest

from flow_cli.engine.engine import Engine
from flow_cli.errors import StoreError
from flow_cli.model.events import StepCompleted

PG = os.environ.get("FLOW_TEST_POSTGRES")
ROOT = Path(__file__).resolve().parent.parent
WORKER = [sys.executable, str(ROOT / "tests" / "worker_process.py")]

pytestmark = [
    pytest.mark.postgres,
    pytest.mark.slow,
    pytest.mark.skipif(not PG, reason="FLOW_TEST_POSTGRES is not set"),
]


@pytest.fixture
def pg_engine() -> Iterator[tuple[Engine, str]]:
    import load_workflows

    from flow_cli.store.postgres import PostgresStore

    assert PG is not None
    schema = f"workers_{uuid.uuid4().hex[:10]}"
    store = PostgresStore(PG, schema=schema)  # StoreError here fails the test loudly
    engine = Engine(store, [load_workflows.runtime])
    yield engine, schema
    store.drop_schema()
    store.close()


def _env(tmp_path: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(ROOT / "tests")])
    env["FLOW_EXAMPLE_LEDGER"] = str(tmp_path / "ledger.jsonl")
    return env


def _spawn(
    schema: str, tmp_path: Path, log: IO[bytes], ready: Path | None = None
) -> subprocess.Popen[bytes]:
    """A worker process; with ``ready``, it writes that file once its store is open."""
    assert PG is not None
    return subprocess.Popen(
        [
            *WORKER,
            PG,
            "load_workflows:runtime",
            "--schema",
            schema,
            "--lease-seconds",
            "3",
            "--concurrency",
            "2",
            *(["--ready-file", str(ready)] if ready is not None else []),
        ],
        env=_env(tmp_path),
        stdout=subprocess.DEVNULL,
        stderr=log,
    )


def _wait_for(
    condition: Callable[[], bool],
    timeout: float,
    what: str,
    between: Callable[[], None] | None = None,
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        if between is not None:
            between()
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def _all_done(engine: Engine) -> bool:
    return all(r.status.terminal for r in engine.list_runs())


def _check_histories(engine: Engine, run_ids: list[str]) -> None:
    for run_id in run_ids:
        history = engine.history(run_id)
        assert [e.sequence for e in history] == list(range(1, len(history) + 1)), run_id
        assert history[-1].event_key == "run_completed", run_id
        completed = Counter(e.event.step_id for e in history if isinstance(e.event, StepCompleted))
        assert completed == {f"s{i}": 1 for i in range(5)}, run_id
        scheduled = [e.event.step_id for e in history if e.event_key == "step_scheduled"]
        assert sorted(scheduled) == [f"s{i}" for i in range(5)], run_id


def test_four_workers_finish_1000_runs_while_workers_are_killed(
    pg_engine: tuple[Engine, str], tmp_path: Path
) -> None:
    engine, schema = pg_engine
    run_ids = [f"chaos-{i:04d}" for i in range(1000)]
    for run_id in run_ids:
        engine.start("five-steps", {"effects": True}, run_id=run_id)
    log_path = tmp_path / "workers.log"
    log = log_path.open("ab")
    workers = [_spawn(schema, tmp_path, log) for _ in range(4)]
    kills = 0
    last_kill = time.monotonic()
    rng = random.Random(7)

    def chaos() -> None:
        # The killer: every ~2 s one random worker dies by SIGKILL and a new one starts.
        nonlocal kills, last_kill
        if time.monotonic() - last_kill < 2.0:
            return
        victim = rng.randrange(len(workers))
        workers[victim].send_signal(signal.SIGKILL)
        workers[victim].wait(10)
        workers[victim] = _spawn(schema, tmp_path, log)
        kills += 1
        last_kill = time.monotonic()

    try:
        _wait_for(lambda: _all_done(engine), 400, "1,000 runs to complete", between=chaos)
    finally:
        for worker in workers:
            worker.send_signal(signal.SIGTERM)
        for worker in workers:
            worker.wait(30)
        log.close()
    assert kills >= 2, "the test must actually kill workers while they run"
    assert {r.status.value for r in engine.list_runs()} == {"Completed"}
    _check_histories(engine, run_ids)
    # Every step's effect was applied once, whatever the retries after kills.
    from workflows_example import services

    os.environ["FLOW_EXAMPLE_LEDGER"] = str(tmp_path / "ledger.jsonl")
    keys = [row["key"] for row in services.read_ledger()]
    assert len(keys) == len(set(keys)) == 5000


@pytest.mark.exclusive
@pytest.mark.skipif(shutil.which("pg_ctlcluster") is None, reason="needs pg_ctlcluster")
def test_workers_survive_a_postgresql_restart_combined_with_sigkills(
    pg_engine: tuple[Engine, str], tmp_path: Path
) -> None:
    # One worker is killed just before the restart, one while the server is down (its leases and
    # any commit it had in flight are lost with it), one rides the restart out; two fresh workers
    # join after it. Every run must complete with clean histories and each effect applied once.
    engine, schema = pg_engine
    run_ids = [f"restart-{i:03d}" for i in range(150)]
    for run_id in run_ids:
        engine.start("five-steps", {"effects": True}, run_id=run_id)
    log_path = tmp_path / "workers.log"
    log = log_path.open("ab")
    ready = [tmp_path / f"ready-{i}" for i in range(3)]
    workers = [_spawn(schema, tmp_path, log, ready=path) for path in ready]
    try:
        # Every worker is up before the outage: one still opening its store when the server
        # stops fails to start, which is not what this test is about (runs now complete soon
        # enough for the first to end before a slow worker has connected).
        _wait_for(lambda: all(path.exists() for path in ready), 60, "the workers to start")
        _wait_for(
            lambda: any(r.status.value == "Completed" for r in engine.list_runs()),
            60,
            "the first completed run",
        )
        workers[0].send_signal(signal.SIGKILL)
        workers[0].wait(10)
        version = sorted(os.listdir("/etc/postgresql"))[0]
        cluster = ["pg_ctlcluster", "--skip-systemctl-redirect", version, "main"]
        subprocess.run([*cluster, "stop", "-m", "fast"], check=True)
        time.sleep(1.0)  # the survivors meet the outage and start reconnecting
        workers[1].send_signal(signal.SIGKILL)
        workers[1].wait(10)
        subprocess.run([*cluster, "start"], check=True)
        fresh = [tmp_path / f"fresh-{i}" for i in range(2)]
        workers[:2] = [_spawn(schema, tmp_path, log, ready=path) for path in fresh]
        # Up before the end: one still starting when the runs are done would meet the SIGTERM
        # below before its handler is set, and die of it (seen once, code -15).
        _wait_for(lambda: all(path.exists() for path in fresh), 60, "the fresh workers to start")

        def done() -> bool:
            try:
                return _all_done(engine)
            except StoreError:
                return False  # our own connection meets the outage too; retry

        _wait_for(done, 180, "all runs to complete after the restart")
    finally:
        for worker in workers:
            if worker.poll() is None:
                worker.send_signal(signal.SIGTERM)
        codes = [worker.wait(30) for worker in workers]
        log.close()
    assert codes == [0, 0, 0]
    assert {r.status.value for r in engine.list_runs()} == {"Completed"}
    _check_histories(engine, run_ids)
    from workflows_example import services

    os.environ["FLOW_EXAMPLE_LEDGER"] = str(tmp_path / "ledger.jsonl")
    keys = [row["key"] for row in services.read_ledger()]
    assert len(keys) == len(set(keys)) == 750
    reported = log_path.read_text()
    assert "unreachable" in reported or "PostgreSQL" in reported, reported[-2000:]
    assert "Traceback" not in reported
