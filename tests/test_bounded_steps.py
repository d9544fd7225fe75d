"""Bounded steps (DESIGN §2.5): timeouts and heartbeat timeouts, enforced by the worker that
runs the attempt, in the model and with real worker processes on SQLite and PostgreSQL."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from flow_cli import RetryPolicy, Runtime
from flow_cli.engine.engine import Engine
from flow_cli.errors import InputError, NonDeterminismError
from flow_cli.model.events import StepCompleted, StepFailed, StepScheduled, event_from_data

ROOT = Path(__file__).resolve().parent.parent
WORKER = [sys.executable, str(ROOT / "tests" / "worker_process.py")]


def _wait_for(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def _result(engine: Engine, run_id: str) -> Any:
    outcome = engine.snapshot(run_id).outcome
    assert outcome is not None and outcome.kind.value == "Completed", outcome
    return outcome.result


# --- the model -------------------------------------------------------------------------------


def test_step_scheduled_keeps_its_bounds_and_old_histories_read_without_them() -> None:
    event = StepScheduled(
        step_id="a", name="n", input=None, retry=RetryPolicy(), timeout=2.0, heartbeat_timeout=0.5
    )
    data = event.to_data()
    assert data["timeout"] == 2.0 and data["heartbeat_timeout"] == 0.5
    assert event_from_data("step_scheduled", data) == event
    plain = StepScheduled(step_id="a", name="n", input=None, retry=RetryPolicy())
    assert "timeout" not in plain.to_data() and "heartbeat_timeout" not in plain.to_data()
    assert event_from_data("step_scheduled", plain.to_data()).timeout is None


def _engine(runtime: Runtime, tmp_path: Path) -> Engine:
    return Engine.open(f"sqlite:///{tmp_path / 'flow.db'}", [runtime])


def test_a_changed_timeout_is_a_determinism_mismatch(tmp_path: Path) -> None:
    limit = {"value": timedelta(seconds=5)}
    rt = Runtime(build_id="b1")

    @rt.step("s")
    def s(input: Any, info: Any) -> Any:
        return 1

    @rt.workflow("w")
    def w(ctx: Any) -> Any:
        return ctx.complete(ctx.step("a", s, None, timeout=limit["value"]))

    engine = _engine(rt, tmp_path)
    engine.start("w", None, run_id="r1")
    engine.tick()  # decides: schedules "a" with its timeout
    history = engine.history("r1")
    scheduled = [e.event for e in history if isinstance(e.event, StepScheduled)]
    assert scheduled[0].timeout == 5.0
    limit["value"] = timedelta(seconds=6)
    with pytest.raises(NonDeterminismError, match="timeout"):
        rt.decide(engine.snapshot("r1"))
    engine.close()


def test_a_timeout_that_is_not_positive_is_refused() -> None:
    rt = Runtime(build_id="b1")

    @rt.workflow("w")
    def w(ctx: Any) -> Any:
        return ctx.schedule_step("a", "s", None, timeout=0)

    with pytest.raises(InputError, match="timeout must be a positive duration"):
        rt.step("x", timeout=-1)


# --- the worker enforces them -----------------------------------------------------------------


def test_a_step_past_its_timeout_fails_as_step_timed_out_and_is_retried(tmp_path: Path) -> None:
    rt = Runtime(build_id="b1")
    calls: list[int] = []

    @rt.step("slow", timeout=0.3)
    def slow(input: Any, info: Any) -> Any:
        calls.append(info.attempt)
        if info.attempt == 1:
            time.sleep(2)
            return "late"
        return "on time"

    @rt.workflow("w")
    def w(ctx: Any) -> Any:
        return ctx.complete(ctx.step("a", slow, None, retry=RetryPolicy(initial_interval=0.01)))

    engine = _engine(rt, tmp_path)
    engine.start("w", None, run_id="r1")
    for _ in range(200):
        engine.tick()
        if engine.snapshot("r1").terminal:
            break
        time.sleep(0.02)
    assert _result(engine, "r1") == "on time"
    events = [e.event for e in engine.history("r1")]
    failed = [e for e in events if isinstance(e, StepFailed)]
    assert [(f.attempt, f.error_type) for f in failed] == [(1, "StepTimedOut")]
    assert [e.output for e in events if isinstance(e, StepCompleted)] == ["on time"]
    engine.close()


def test_a_silent_step_fails_as_heartbeat_timed_out_and_its_heartbeat_then_raises(
    tmp_path: Path,
) -> None:
    rt = Runtime(build_id="b1")
    seen: list[str] = []

    @rt.step("quiet", heartbeat_timeout=0.3)
    def quiet(input: Any, info: Any) -> Any:
        if info.attempt == 1:
            info.heartbeat({"done": 1})
            time.sleep(0.8)
            seen.append(f"cancelled={info.cancelled}")
            try:
                info.heartbeat({"done": 2})
            except Exception as exc:
                seen.append(type(exc).__name__)
            return "late"
        return info.last_heartbeat

    @rt.workflow("w")
    def w(ctx: Any) -> Any:
        return ctx.complete(ctx.step("a", quiet, None, retry=RetryPolicy(initial_interval=0.01)))

    engine = _engine(rt, tmp_path)
    engine.start("w", None, run_id="r1")
    for _ in range(200):
        engine.tick()
        if engine.snapshot("r1").terminal:
            break
        time.sleep(0.02)
    failed = [e.event for e in engine.history("r1") if isinstance(e.event, StepFailed)]
    assert [(f.attempt, f.error_type) for f in failed] == [(1, "HeartbeatTimedOut")]
    _wait_for(lambda: len(seen) == 2, 5, "the abandoned attempt to wake")
    assert seen == ["cancelled=True", "StepCancelled"]
    engine.close()


# --- real worker processes, SQLite and PostgreSQL ---------------------------------------------


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Engine, list[str]]]:
    yield from _backend(request, tmp_path)


CLI_URL: dict[int, str] = {}
"""The ``--db`` URL of each backend's engine (by ``id``), for the ``flow`` commands."""


def _backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Engine, list[str]]]:
    """An engine on the bounded workflows, and the worker process arguments for its database."""
    import bounded_workflows

    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'flow.db'}"
        engine = Engine.open(url, [bounded_workflows.runtime])
        CLI_URL[id(engine)] = url
        yield engine, [url]
        engine.close()
        return
    url = os.environ.get("FLOW_TEST_POSTGRES")
    if not url:
        pytest.skip("set FLOW_TEST_POSTGRES=postgresql://... to run the PostgreSQL store tests")
    from flow_cli.store.postgres import PostgresStore

    schema = f"flow_bounded_{uuid.uuid4().hex[:12]}"
    engine = Engine(PostgresStore(url, schema=schema), [bounded_workflows.runtime])
    sep = "&" if "?" in url else "?"
    CLI_URL[id(engine)] = f"{url}{sep}schema={schema}"
    try:
        yield engine, [url, "--schema", schema]
    finally:
        store = engine.store
        engine.close()
        assert isinstance(store, PostgresStore)
        store.drop_schema()


def _spawn(args: list[str], tmp_path: Path) -> subprocess.Popen[bytes]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(ROOT / "tests")])
    env["FLOW_BOUNDED_DIR"] = str(tmp_path)
    db, *rest = args
    return subprocess.Popen(
        [*WORKER, db, "bounded_workflows:runtime", *rest, "--lease-seconds", "2"], env=env
    )


@pytest.mark.slow
def test_worker_process_fails_a_step_past_its_timeout_and_the_retry_completes_the_run(
    backend: tuple[Engine, list[str]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine, args = backend
    monkeypatch.setenv("FLOW_BOUNDED_DIR", str(tmp_path))
    engine.start("timed", None, run_id="timed-1")
    worker = _spawn(args, tmp_path)
    try:
        _wait_for(lambda: engine.snapshot("timed-1").terminal, 30, "the run to end")
    finally:
        worker.terminate()
        worker.wait(20)
    history = engine.history("timed-1")
    started = {
        e.event.attempt: e.recorded_at
        for e in history
        if e.event_key == "step_started" and getattr(e.event, "attempt", 0) == 1
    }
    failed = [e for e in history if isinstance(e.event, StepFailed)]
    assert [(f.event.attempt, f.event.error_type) for f in failed] == [(1, "StepTimedOut")]
    overdue = (failed[0].recorded_at - started[1]).total_seconds() - 2.0
    assert 0 <= overdue < 1.0  # failed within 1 s of the deadline, not after the 6 s sleep
    completed = [e.event for e in history if isinstance(e.event, StepCompleted)]
    assert [c.output for c in completed] == [{"attempt": 2}]  # the late result never recorded
    assert _result(engine, "timed-1") == {"attempt": 2}


@pytest.mark.slow
def test_a_heartbeat_survives_its_worker_and_the_next_run_of_the_attempt_resumes_from_it(
    backend: tuple[Engine, list[str]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import bounded_workflows

    engine, args = backend
    monkeypatch.setenv("FLOW_BOUNDED_DIR", str(tmp_path))
    engine.start("resumable", None, run_id="res-1")
    first = _spawn(args, tmp_path)
    try:
        _wait_for(lambda: bool(engine.step_heartbeats("res-1")), 30, "the heartbeat stored")
        if len(args) == 1:  # `flow show` of the running step, on the SQLite file
            _show_has_heartbeat(args[0], tmp_path)
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait(10)
    (beat,) = engine.step_heartbeats("res-1")
    assert (beat.step_id, beat.attempt, beat.details) == ("p", 1, {"done": 40})
    assert "step_completed" not in [e.event_key for e in engine.history("res-1")]
    # No history event per heartbeat: the run holds its start, schedule and one step_started.
    assert [e.event_key for e in engine.history("res-1")] == [
        "run_started",
        "step_scheduled",
        "step_started",
    ]
    second = _spawn(args, tmp_path)
    try:
        _wait_for(lambda: engine.snapshot("res-1").terminal, 30, "the run to end")
    finally:
        second.terminate()
        second.wait(20)
    assert _result(engine, "res-1") == {"resumed_from": {"done": 40}}
    assert bounded_workflows.calls() == ["progress 1", "progress 1"]


# --- the schema: step_heartbeats added by a migration ------------------------------------------


def test_sqlite_migration_adds_step_heartbeats_to_a_database_written_before(
    tmp_path: Path,
) -> None:
    import sqlite3

    from flow_cli.store.sqlite import MIGRATIONS, SQLiteStore

    path = tmp_path / "flow.db"
    SQLiteStore(path).close()
    conn = sqlite3.connect(path)
    conn.execute("DROP TABLE step_heartbeats")
    conn.execute("UPDATE flow_meta SET value = '6' WHERE key = 'schema_version'")
    conn.commit()
    conn.close()
    store = SQLiteStore(path)
    try:
        assert store.step_heartbeats("r1") == []
    finally:
        store.close()
    conn = sqlite3.connect(path)
    version = conn.execute("SELECT value FROM flow_meta WHERE key = 'schema_version'").fetchone()
    conn.close()
    assert version == (str(MIGRATIONS[-1][0]),)  # the step_heartbeats migration and after


def test_postgres_migration_adds_step_heartbeats() -> None:
    url = os.environ.get("FLOW_TEST_POSTGRES")
    if not url:
        pytest.skip("set FLOW_TEST_POSTGRES=postgresql://... to run the PostgreSQL store tests")
    import psycopg

    from flow_cli.store.postgres import PostgresStore
    from flow_cli.store.postgres import schema as postgres_schema

    schema = f"flow_test_{uuid.uuid4().hex[:16]}"
    store = PostgresStore(url, schema=schema)
    try:
        conn: Any = psycopg.connect(url, autocommit=True)
        conn.execute(f'SET search_path TO "{schema}"')
        conn.execute("DROP TABLE step_heartbeats")
        conn.execute("UPDATE flow_meta SET value = '7' WHERE key = 'schema_version'")
        conn.close()
        reopened = PostgresStore(url, schema=schema)
        try:
            assert reopened.step_heartbeats("r1") == []
        finally:
            reopened.close()
        assert postgres_schema.SCHEMA_VERSION >= 8  # step_heartbeats is version 8
    finally:
        store.drop_schema()
        store.close()


def test_a_renewal_stores_the_heartbeat_only_while_the_lease_is_held(tmp_path: Path) -> None:
    """Store conformance on SQLite and memory: a lost lease records no heartbeat."""
    from datetime import UTC, datetime, timedelta

    from flow_cli.store.memory import MemoryStore
    from flow_cli.store.protocol import StepHeartbeat, StepRenewal
    from flow_cli.store.sqlite import SQLiteStore

    for store in (MemoryStore(), SQLiteStore(tmp_path / "c.db")):
        rt = Runtime(build_id="b1")

        @rt.workflow("w")
        def w(ctx: Any) -> Any:
            return ctx.schedule_step("a", "s", None)

        engine = Engine(store, [rt], worker_id="w1")
        engine.start("w", None, run_id="r1")
        engine.tick()  # decides; the handler is missing, so the attempt is leased and fails
        now = datetime.now(UTC)
        beat = StepHeartbeat(step_id="a", attempt=1, worker="w2", details={"d": 1}, at=now)
        assert not store.renew_step(StepRenewal("r1", "a", "w2", now + timedelta(seconds=5), beat))
        assert store.step_heartbeats("r1") == []
        engine.close()


def _show_has_heartbeat(url: str, tmp_path: Path) -> None:
    import json

    env = {**os.environ, "PYTHONPATH": str(ROOT), "NO_COLOR": "1", "COLUMNS": "200"}
    base = [sys.executable, "-m", "flow_cli", "--db", url, "show", "res-1"]
    shown = subprocess.run([*base, "--json"], env=env, capture_output=True, text=True, check=True)
    step = json.loads(shown.stdout)["steps"]["p"]
    assert step["state"] == "running" and step["attempt"] == 1
    assert step["heartbeat"]["details"] == {"done": 40}
    assert step["heartbeat"]["worker"] == step["worker"]
    text = subprocess.run(base, env=env, capture_output=True, text=True, check=True).stdout
    assert f"step 'p' attempt 1 on {step['worker']}: last heartbeat" in text
    assert '{"done":40}' in text


def _flow(engine: Engine, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "NO_COLOR": "1", "COLUMNS": "200"}
    return subprocess.run(
        [sys.executable, "-m", "flow_cli", "--db", CLI_URL[id(engine)], *args],
        env=env,
        capture_output=True,
        text=True,
    )


@pytest.mark.slow
def test_an_unknown_outcome_waits_for_the_operator_whose_resolution_lets_the_run_go_on(
    backend: tuple[Engine, list[str]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import json

    import bounded_workflows

    engine, args = backend
    monkeypatch.setenv("FLOW_BOUNDED_DIR", str(tmp_path))
    engine.start("charge", {"amount": 10}, run_id="pay-1")
    first = _spawn(args, tmp_path)
    try:
        _wait_for(lambda: "charge 1" in bounded_workflows.calls(), 30, "the charge attempt")
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait(10)
    second = _spawn(args, tmp_path)
    try:
        _wait_for(
            lambda: engine.snapshot("pay-1").steps["charge"].status.value == "unknown",
            30,
            "the outcome recorded unknown",
        )
        keys = [e.event_key for e in engine.history("pay-1")]
        assert keys[-1] == "step_outcome_unknown" and "step_completed" not in keys
        doctor = _flow(engine, "doctor", "--json")
        assert doctor.returncode == 1, doctor.stderr
        (found,) = [r for r in json.loads(doctor.stdout)["runs"] if r["run_id"] == "pay-1"]
        assert found["cause"] == "step-unknown" and "flow step resolve" in found["detail"]
        # A step that is not unknown is refused, and nothing is written.
        before = len(engine.history("pay-1"))
        refused = _flow(engine, "step", "resolve", "pay-1", "nope", "--retry")
        assert refused.returncode == 1 and "not unknown" in refused.stderr
        assert len(engine.history("pay-1")) == before
        resolved = _flow(
            engine, "step", "resolve", "pay-1", "charge", "--output", '{"charge": "ch_1"}'
        )
        assert resolved.returncode == 0, resolved.stderr
        _wait_for(lambda: engine.snapshot("pay-1").terminal, 30, "the run to end")
    finally:
        second.terminate()
        second.wait(20)
    assert _result(engine, "pay-1") == {"receipt": {"charge": "ch_1"}}
    # The charge handler ran exactly once: the worker that took the lapsed lease did not run it.
    assert [c for c in bounded_workflows.calls() if c.startswith("charge")] == ["charge 1"]
    completed = [e.event for e in engine.history("pay-1") if isinstance(e.event, StepCompleted)]
    assert completed[0].resolved == {"by": "operator", "reason": "resolved by operator"}
    again = _flow(engine, "step", "resolve", "pay-1", "charge", "--retry")
    assert again.returncode == 1  # resolved already: exactly one resolution is recorded


# --- flow retry ---------------------------------------------------------------------------------


def _at(engine: Engine, run_id: str, key: str) -> Any:
    return next(e.recorded_at for e in engine.history(run_id) if e.event_key == key)


@pytest.mark.slow
def test_flow_retry_decides_a_fixed_run_and_starts_a_step_in_back_off_now(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import json

    import bounded_workflows

    monkeypatch.setenv("FLOW_BOUNDED_DIR", str(tmp_path))
    url = f"sqlite:///{tmp_path / 'flow.db'}"
    engine = Engine.open(url, [bounded_workflows.runtime])
    CLI_URL[id(engine)] = url
    (tmp_path / "broken").write_text("")
    engine.start("fragile", None, run_id="fragile-1")
    engine.start("long-backoff", None, run_id="backoff-1")
    engine.start("fragile", None, run_id="fine-1")
    worker = _spawn([url], tmp_path)
    try:
        _wait_for(lambda: engine.snapshot("fragile-1").decision_error is not None, 30, "failing")
        _wait_for(lambda: "flaky 1" in bounded_workflows.calls(), 30, "the first attempt")
        _wait_for(
            lambda: engine.snapshot("backoff-1").steps["flaky"].status.value == "backoff",
            30,
            "the back-off",
        )
        (tmp_path / "broken").unlink()  # the hotfix
        dry = _flow(engine, "retry", "fragile-1", "backoff-1", "--dry-run", "--json")
        assert dry.returncode == 0, dry.stderr
        assert "retry_requested" not in [e.event_key for e in engine.history("fragile-1")]
        done = _flow(engine, "retry", "fragile-1", "backoff-1", "--json")
        assert done.returncode == 0, done.stderr
        outcomes = {r["run_id"]: r for r in json.loads(done.stdout)}
        assert set(outcomes) == {"fragile-1", "backoff-1"}
        _wait_for(lambda: engine.snapshot("fragile-1").terminal, 30, "the fixed run to end")
        _wait_for(lambda: engine.snapshot("backoff-1").terminal, 30, "the step's retry")
    finally:
        worker.terminate()
        worker.wait(20)
    asked = _at(engine, "fragile-1", "retry_requested")
    assert (_at(engine, "fragile-1", "run_completed") - asked).total_seconds() < 1.0
    asked = _at(engine, "backoff-1", "retry_requested")
    second = next(
        e.recorded_at
        for e in engine.history("backoff-1")
        if e.event_key == "step_started" and getattr(e.event, "attempt", 0) == 2
    )
    assert (second - asked).total_seconds() < 1.0  # not the 300 s back-off
    assert _result(engine, "backoff-1") == {"attempt": 2}
    # A run with nothing waiting for a back-off is skipped, nothing written.
    skipped = _flow(engine, "retry", "backoff-1", "--json")
    assert skipped.returncode == 0 and "skipped" in skipped.stdout
    engine.close()


# --- WorkflowEnvironment: bounded steps on the manual clock -------------------------------------


def _env_runtime() -> Runtime:
    rt = Runtime(build_id="env-1")

    @rt.step("export", timeout=120)
    def export(input: Any, info: Any) -> Any:
        return {"resumed_from": info.last_heartbeat}

    @rt.step("charge", on_lost="unknown")
    def charge(input: Any, info: Any) -> Any:
        return {"charge": "ch_real"}

    @rt.workflow("export")
    def export_flow(ctx: Any) -> Any:
        return ctx.complete(ctx.step("e", export, None, retry=RetryPolicy(initial_interval=1)))

    @rt.workflow("charge")
    def charge_flow(ctx: Any) -> Any:
        return ctx.complete(ctx.step("c", charge, None))

    return rt


def test_env_fake_step_replaces_the_handler_inside_the_block_only() -> None:
    from flow_cli.testing import WorkflowEnvironment

    rt = _env_runtime()
    env = WorkflowEnvironment(rt)
    with env.fake_step("charge", lambda input, info: {"charge": "ch_fake"}):
        env.start("charge", None, run_id="a")
        env.run_until_idle()
    assert env.result("a") == {"charge": "ch_fake"}
    env.start("charge", None, run_id="b")
    env.run_until_idle()
    assert env.result("b") == {"charge": "ch_real"}


def test_env_a_vanished_worker_leaves_its_heartbeat_to_the_next_run_of_the_attempt() -> None:
    from flow_cli.testing import WorkflowEnvironment, vanish

    env = WorkflowEnvironment(_env_runtime())
    with env.fake_step("export", vanish(heartbeat={"done": 40})):
        env.start("export", None, run_id="r")
        env.run_until_idle()
    assert env.snapshot("r").steps["e"].status.value == "running"
    env.advance(seconds=31)  # the lease lapses; the attempt runs again, with the real handler
    assert env.result("r") == {"resumed_from": {"done": 40}}


def test_env_a_hung_step_fails_as_step_timed_out_on_the_manual_clock() -> None:
    from flow_cli.testing import WorkflowEnvironment, hang

    env = WorkflowEnvironment(_env_runtime())
    with env.fake_step("export", hang()):
        env.start("export", None, run_id="r")
        env.advance(seconds=119)
        assert env.snapshot("r").steps["e"].status.value == "running"
        env.advance(seconds=60)
    failed = [e.event for e in env.history("r") if isinstance(e.event, StepFailed)]
    assert [(f.attempt, f.error_type) for f in failed] == [(1, "StepTimedOut")]
    env.advance(seconds=5)  # the retry, with the real handler
    assert env.result("r") == {"resumed_from": None}


def test_env_a_vanished_unknown_step_waits_for_its_resolution() -> None:
    from flow_cli.engine.resolve import Resolution
    from flow_cli.testing import WorkflowEnvironment, vanish

    env = WorkflowEnvironment(_env_runtime())
    with env.fake_step("charge", vanish()):
        env.start("charge", None, run_id="r")
        env.run_until_idle()
    env.advance(seconds=31)
    assert env.snapshot("r").steps["c"].status.value == "unknown"
    assert env.outcome("r") is None
    env.engine.resolve_step("r", "c", Resolution.OUTPUT, {"charge": "ch_1"}, "checked")
    env.run_until_idle()
    assert env.result("r") == {"charge": "ch_1"}


def test_env_a_vanished_silent_step_fails_as_heartbeat_timed_out_when_found() -> None:
    from flow_cli.testing import WorkflowEnvironment, vanish

    rt = Runtime(build_id="env-2")

    @rt.step("poll", heartbeat_timeout=10)
    def poll(input: Any, info: Any) -> Any:
        return "polled"

    @rt.workflow("w")
    def w(ctx: Any) -> Any:
        return ctx.complete(ctx.step("p", poll, None, retry=RetryPolicy(initial_interval=1)))

    env = WorkflowEnvironment(rt)
    with env.fake_step("poll", vanish(heartbeat={"page": 3})):
        env.start("w", None, run_id="r")
        env.run_until_idle()
    env.advance(seconds=31)  # found silent for 31 s > 10 s: failed, then retried
    failed = [e.event for e in env.history("r") if isinstance(e.event, StepFailed)]
    assert [(f.attempt, f.error_type) for f in failed] == [(1, "HeartbeatTimedOut")]
    assert env.result("r") == "polled"


def test_flow_step_resolve_refuses_a_bad_command_line_with_exit_2(tmp_path: Path) -> None:
    import bounded_workflows

    url = f"sqlite:///{tmp_path / 'flow.db'}"
    engine = Engine.open(url, [bounded_workflows.runtime])
    CLI_URL[id(engine)] = url
    engine.start("fragile", None, run_id="r1")
    before = len(engine.history("r1"))
    for args in (
        [],
        ["--output", "1", "--retry"],
        ["--retry", "--error", '{"type": "X"}'],
        ["--output", "{not json"],
    ):
        done = _flow(engine, "step", "resolve", "r1", "s", *args)
        assert done.returncode == 2, (args, done.stderr)
        assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr
    assert len(engine.history("r1")) == before
    engine.close()


def test_a_late_worker_result_racing_the_resolution_is_discarded() -> None:
    """The lost worker was only paused: while its handler runs, its lease lapses, another
    worker records the outcome unknown and the operator resolves it. The late result then
    meets the attempt's fence and is dropped: exactly one outcome is recorded."""
    from flow_cli.engine.resolve import Resolution
    from flow_cli.model.clock import ManualClock
    from flow_cli.store.memory import MemoryStore

    clock = ManualClock(datetime(2026, 12, 4, 9, 0, tzinfo=UTC))
    store = MemoryStore()
    rt = Runtime(build_id="race-1")
    others: list[Engine] = []
    calls: list[int] = []

    @rt.step("charge", on_lost="unknown")
    def charge(input: Any, info: Any) -> Any:
        calls.append(info.attempt)
        clock.advance(timedelta(seconds=60))  # paused past its 30 s lease
        other = others[0]
        other.tick()  # takes the lapsed attempt over: records it unknown
        assert other.snapshot("r").steps["c"].status.value == "unknown"
        other.resolve_step("r", "c", Resolution.OUTPUT, {"charge": "ch_1"}, "checked")
        return {"charge": "ch_late"}

    @rt.workflow("w")
    def w(ctx: Any) -> Any:
        return ctx.complete(ctx.step("c", charge, None))

    paused = Engine(store, [rt], clock=clock, worker_id="paused")
    others.append(Engine(store, [rt], clock=clock, worker_id="other"))
    paused.start("w", None, run_id="r")
    paused.tick(until_idle=True)
    others[0].tick(until_idle=True)
    history = paused.history("r")
    completed = [e.event for e in history if isinstance(e.event, StepCompleted)]
    assert [c.output for c in completed if c.step_id == "c"] == [{"charge": "ch_1"}]
    assert calls == [1]
    assert [e.event_key for e in history].count("step_outcome_unknown") == 1
    outcome = paused.snapshot("r").outcome
    assert outcome is not None and outcome.result == {"charge": "ch_1"}
