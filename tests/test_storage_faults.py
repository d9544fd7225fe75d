"""Storage-facing defects of issue 25, each pinned by a test that failed before its fix.

- A NUL (U+0000) anywhere in a JSON value is refused at the door, on every backend (it stalled
  PostgreSQL workers, whose batched insert could not store it, and took good runs with it).
- A step output Flow cannot store fails the attempt once, without retry (``StepOutputNotJSON``,
  ``PayloadTooLarge``); workflow code that builds such a value fails its decision.
- A group commit with one member the database refuses commits the others; the refused run
  records a failed decision that ``flow doctor`` shows.
- A new SQLite database is created 0600; an empty file is refused, not made a database.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import select
import signal
import socket
import sqlite3
import subprocess
import threading
import time
import urllib.parse
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from cli_helpers import CONFIG, FlowProject
from engine_workflows import make_engine

from flow_cli import Runtime, StepInfo, WorkflowContext
from flow_cli.engine.engine import Engine
from flow_cli.engine.group_commit import GroupCommitter
from flow_cli.engine.worker import Worker
from flow_cli.errors import FlowError, InputError, StoreRefused, StoreUnavailable
from flow_cli.model import jsonval
from flow_cli.model.clock import ManualClock
from flow_cli.model.commands import RuntimeCommand
from flow_cli.model.jsonval import (
    MAX_PAYLOAD_BYTES,
    JsonLimitError,
    normalise,
    set_payload_limit,
)
from flow_cli.model.spec import WorkflowSpec
from flow_cli.model.status import RunStatus
from flow_cli.ops.doctor import diagnose
from flow_cli.store.memory import MemoryStore
from flow_cli.store.protocol import CommitGroup, EventStore, NewRun, RunFilter
from flow_cli.store.sqlite import SQLiteStore

NUL_VALUES: list[Any] = ["a\x00b", {"k": ["x\x00"]}, {"k\x00": 1}, [{"deep": {"\x00": None}}]]


class Calls:
    """What the test's step handler is given to return, and how often it ran."""

    def __init__(self) -> None:
        self.returns: Any = None
        self.count = 0


def _runtime(calls: Calls) -> Runtime:
    runtime = Runtime(build_id="faults-1")

    @runtime.workflow("one-step")
    def one_step(ctx: WorkflowContext) -> RuntimeCommand:
        return ctx.complete(ctx.step("s", "give", None))

    @runtime.workflow("echo")
    def echo(ctx: WorkflowContext) -> RuntimeCommand:
        return ctx.complete(ctx.input)

    @runtime.workflow("complete-with-nul")
    def complete_with_nul(ctx: WorkflowContext) -> RuntimeCommand:
        return ctx.complete({"x": "a\x00b"})

    @runtime.workflow("complete-unencodable")
    def complete_unencodable(ctx: WorkflowContext) -> RuntimeCommand:
        # A lone surrogate: JSON, but no database can store it as text. It stands for any
        # value that gets past Flow's checks and is refused by the store itself.
        return ctx.complete({"x": "\ud800"})

    @runtime.step("give")
    def give(input: Any, info: StepInfo) -> Any:
        calls.count += 1
        return calls.returns

    return runtime


# -- NUL at the door -----------------------------------------------------------------------------


@pytest.mark.parametrize("value", NUL_VALUES)
def test_normalise_refuses_nul_as_a_json_limit(value: Any) -> None:
    with pytest.raises(JsonLimitError, match=r"NUL character \(\\u0000\)"):
        normalise(value)


def test_the_engine_refuses_nul_in_inputs_and_payloads(
    store: EventStore, clock: ManualClock
) -> None:
    engine = make_engine(store, [_runtime(Calls())], clock)
    for value in NUL_VALUES:
        with pytest.raises(InputError, match="the run input is refused: it holds a NUL"):
            engine.start("echo", value)
    engine.start("echo", "fine", run_id="r")
    before = [e.sequence for e in engine.history("r")]
    for value in NUL_VALUES:
        with pytest.raises(InputError, match="the payload is refused: it holds a NUL"):
            engine.signal("r", "go", value)
    with pytest.raises(InputError, match="the payload is refused: it holds a NUL"):
        engine.resolve_hook("tok", "a\x00b")
    assert [r.run_id for r in engine.list_runs()] == ["r"]
    assert [e.sequence for e in engine.history("r")] == before


@pytest.fixture
def project(tmp_path: Path) -> FlowProject:
    return FlowProject(tmp_path)


def test_a_lone_surrogate_is_refused_at_the_door_on_every_store(
    store: EventStore, clock: ManualClock
) -> None:
    """UTF-8 cannot encode a lone surrogate: SQLite and PostgreSQL refused such a commit while
    the memory store kept it. Refused before anything is written, the rule is one everywhere."""
    engine = make_engine(store, [_runtime(Calls())], clock)
    for value in ("a\ud800b", {"k\udfff": 1}, ["\udc00"]):
        with pytest.raises(InputError, match="the run input is refused: it holds a lone surrogate"):
            engine.start("echo", value)
    engine.start("echo", "fine \U0001f600", run_id="r")  # a pair is a character like any other
    before = [e.sequence for e in engine.history("r")]
    with pytest.raises(InputError, match="the payload is refused: it holds a lone surrogate"):
        engine.signal("r", "go", "\ud83d")
    assert [r.run_id for r in engine.list_runs()] == ["r"]
    assert [e.sequence for e in engine.history("r")] == before


def test_nul_on_the_command_line_is_exit_2_and_writes_nothing(project: FlowProject) -> None:
    result = project.invoke("start", "two-step", "--input", '{"n": 1, "s": "a\\u0000b"}')
    assert (result.code, result.stdout) == (2, "")
    assert result.error_line() == (
        "error: --input is refused: it holds a NUL character (\\u0000), which Flow cannot "
        "store; remove it, or encode binary data (e.g. as base64)."
    )
    assert not project.db.exists()
    project.setup("start", "two-step", "--id", "r")
    before = project.dump()
    for args in (("signal", "r", "go"), ("hook", "resolve", "tok")):
        result = project.invoke(*args, "--payload", '"x\\u0000y"')
        assert (result.code, result.stdout) == (2, ""), args
        assert result.error_line().startswith("error: --payload is refused: it holds a NUL")
    assert project.dump() == before
    project.setup("tick", "--until-idle")
    forked = project.invoke("fork", "r", "--input", '"a\\u0000b"')
    assert (forked.code, forked.stdout) == (2, "")
    assert forked.error_line().startswith("error: --input is refused: it holds a NUL")
    before = project.dump()
    lines = '{"workflow": "two-step", "run_id": "j", "input": {"k\\u0000": 1}}\n'
    bulk = project.invoke("start", "--from-jsonl", "-", stdin=lines)
    assert bulk.code != 0 and "NUL" in bulk.stdout + bulk.stderr
    assert project.dump() == before


def test_a_payload_over_the_size_limit_is_refused(store: EventStore, clock: ManualClock) -> None:
    engine = make_engine(store, [_runtime(Calls())], clock)
    big = "x" * (MAX_PAYLOAD_BYTES + 1)
    with pytest.raises(InputError, match="the run input is refused: its JSON text is"):
        engine.start("echo", {"big": big})
    assert engine.list_runs() == []
    normalise("x" * (MAX_PAYLOAD_BYTES - 2))  # its JSON text, quotes included, fits exactly


def test_the_payload_limit_comes_from_the_config_file(tmp_path: Path) -> None:
    project = FlowProject(tmp_path, CONFIG + "max_payload_bytes = 2048\n")
    try:
        small = project.invoke("start", "two-step", "--input", json.dumps({"s": "x" * 2000}))
        assert small.code == 0, small.stderr
        big = project.invoke("start", "two-step", "--input", json.dumps({"s": "x" * 2100}))
        assert (big.code, big.stdout) == (2, "")
        assert big.error_line().startswith(
            "error: the run input is refused: its JSON text is 2,108 bytes, more than Flow's "
            "limit of 2,048 bytes ([flow] max_payload_bytes)"
        )
    finally:
        set_payload_limit(MAX_PAYLOAD_BYTES)
    (tmp_path / "bad").mkdir()
    bad = FlowProject(tmp_path / "bad", CONFIG + "max_payload_bytes = 'lots'\n")
    refused = bad.invoke("start", "two-step")
    assert refused.code == 2
    assert "[flow] max_payload_bytes must be a whole number of bytes" in refused.error_line()


# -- step outputs --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("returned", "error_type", "says"),
    [
        ("a\x00b", "StepOutputNotJSON", "NUL character"),
        ({"k\x00": 1}, "StepOutputNotJSON", "NUL character"),
        ("a\ud800b", "StepOutputNotJSON", "lone surrogate"),
        ({1, 2}, "StepOutputNotJSON", "set is not JSON serializable"),
        (b"bytes", "StepOutputNotJSON", "bytes is not JSON serializable"),
        (datetime(2026, 1, 1, tzinfo=UTC), "StepOutputNotJSON", "datetime is not JSON"),
        (float("nan"), "StepOutputNotJSON", "Out of range float"),
        ({"ok": {1: "x"}}, "StepOutputNotJSON", "a key of type int (1)"),
        ("x" * (MAX_PAYLOAD_BYTES + 1), "PayloadTooLarge", "more than Flow's limit"),
    ],
)
def test_a_step_returning_an_unstorable_value_fails_once_without_retry(
    store: EventStore, clock: ManualClock, returned: Any, error_type: str, says: str
) -> None:
    """Before: the completion could not be recorded (NUL on PostgreSQL) and the step ran again
    every lease; other values were retried like any error, repeating the side effects."""
    calls = Calls()
    calls.returns = returned
    engine = make_engine(store, [_runtime(calls)], clock)
    engine.start("one-step", run_id="r")
    for _ in range(5):
        engine.tick(until_idle=True)
        clock.advance(3600)
    assert calls.count == 1
    failures = [e.event.to_data() for e in engine.history("r") if e.event_key == "step_failed"]
    assert len(failures) == 1
    assert failures[0]["error_type"] == error_type
    assert failures[0]["exhausted"] is True
    assert "'give'" in failures[0]["message"] and says in failures[0]["message"]
    assert engine.get_run("r").status is RunStatus.FAILED


def test_workflow_code_building_a_nul_fails_its_decision(
    store: EventStore, clock: ManualClock
) -> None:
    engine = make_engine(store, [_runtime(Calls())], clock)
    engine.start("complete-with-nul", run_id="r")
    engine.tick(until_idle=True)
    failed = [e.event.to_data() for e in engine.history("r") if e.event_key == "decision_failed"]
    assert len(failed) == 1 and "result is refused: it holds a NUL" in failed[0]["message"]
    assert not engine.get_run("r").status.terminal


# -- a member the database refuses ---------------------------------------------------------------


def _new_run(run_id: str, build_id: str, now: datetime) -> NewRun:
    spec = WorkflowSpec(workflow="echo", input=None, runtime_build_id=build_id)
    return NewRun(run_id=run_id, spec=spec, seed="00", decide_at=now)


def test_a_group_commit_with_one_refused_member_commits_the_others(
    store: EventStore, clock: ManualClock
) -> None:
    """Below the door: a value the database itself cannot take (a lone surrogate; on PostgreSQL
    a NUL in a text column too). Before: the whole batch failed, 20 good runs with it."""
    if isinstance(store, MemoryStore):
        pytest.skip("the memory store holds any Python value")
    now = clock.now()
    bad = ["b\ud800"]
    if not isinstance(store, SQLiteStore):
        bad.append("b\x00")
    for poison in bad:
        groups = [
            CommitGroup(writes=[], creates=[_new_run(f"{poison!r}{i}", "b", now)], now=now)
            for i in range(5)
        ]
        groups[2] = CommitGroup(writes=[], creates=[_new_run("bad", poison, now)], now=now)
        results = store.commit_groups(groups)
        assert [type(r).__name__ if r else None for r in results] == [
            None,
            None,
            "StoreRefused",
            None,
            None,
        ]
        assert "refused a value of this commit" in str(results[2])
        alone = store.commit_groups([groups[2]])
        assert isinstance(alone[0], StoreRefused)
    assert len(store.find_runs(RunFilter())) == 4 * len(bad)
    assert store.get_run("bad") is None


@pytest.fixture
def door_open_to_surrogates(monkeypatch: pytest.MonkeyPatch) -> None:
    """Lets lone surrogates past Flow's own check (which refuses them since it exists): they
    stand for any value that passes Flow's checks and that the database itself refuses, the
    defence the tests below prove."""
    monkeypatch.setattr(jsonval, "_SURROGATE", re.compile("(?!)"))


@pytest.mark.usefixtures("door_open_to_surrogates")
def test_a_run_the_database_refuses_shows_in_doctor(store: EventStore, clock: ManualClock) -> None:
    """Before: the refused commit was reported as "database unavailable", again and again, and
    `flow doctor` said nothing was stuck."""
    if isinstance(store, MemoryStore):
        pytest.skip("the memory store holds any Python value")
    engine = make_engine(store, [_runtime(Calls())], clock)
    engine.start("echo", "fine", run_id="good")
    engine.start("complete-unencodable", run_id="poison")
    report = engine.tick(until_idle=True)
    assert report.decision_failures >= 1
    assert engine.get_run("good").status is RunStatus.COMPLETED
    failed = [
        e.event.to_data() for e in engine.history("poison") if e.event_key == "decision_failed"
    ]
    assert [f["error_type"] for f in failed] == ["StoreRefused"]
    found = diagnose(store, RunFilter(), clock.now())
    assert [(d.run_id, d.cause) for d in found.runs] == [("poison", "decision-failing")]
    clock.advance(600)  # retried later: refused again, not recorded twice
    engine.tick(until_idle=True)
    again = [e for e in engine.history("poison") if e.event_key == "decision_failed"]
    assert len(again) == 1


def _refused_end(engine: Engine, calls: Calls) -> None:
    assert calls.count == 1
    failures = [e.event.to_data() for e in engine.history("r") if e.event_key == "step_failed"]
    assert [(f["error_type"], f["exhausted"]) for f in failures] == [("StoreRefused", True)]
    assert "refused a value of this commit" in failures[0]["message"]
    assert engine.get_run("r").status is RunStatus.FAILED


@pytest.mark.usefixtures("door_open_to_surrogates")
def test_a_step_end_the_database_refuses_fails_once_without_retry(
    store: EventStore, clock: ManualClock
) -> None:
    """A step output that passes Flow's checks and that the database still refuses (a lone
    surrogate). Before: the attempt's end was never recorded; the step ran again every lease."""
    if isinstance(store, MemoryStore):
        pytest.skip("the memory store holds any Python value")
    calls = Calls()
    calls.returns = {"x": "\ud800"}
    engine = make_engine(store, [_runtime(calls)], clock)
    engine.start("one-step", run_id="r")
    for _ in range(3):
        engine.tick(until_idle=True)
        clock.advance(3600)
    _refused_end(engine, calls)


@pytest.mark.usefixtures("door_open_to_surrogates")
def test_a_worker_hands_a_refused_step_end_over_and_records_the_failure(tmp_path: Path) -> None:
    """The same through a worker's group committer (its step threads hand their ends over)."""
    calls = Calls()
    calls.returns = {"x": "\ud800"}
    engine = Engine.open(f"sqlite:///{tmp_path / 'flow.db'}", [_runtime(calls)])
    engine.start("one-step", run_id="r")
    worker = Worker(engine, concurrency=2, max_idle_sleep=0.05)
    thread = threading.Thread(target=worker.run)
    thread.start()
    try:
        deadline = time.monotonic() + 20
        while not engine.get_run("r").status.terminal:
            assert time.monotonic() < deadline, "the run did not end"
            time.sleep(0.02)
    finally:
        worker.stop()
        thread.join(timeout=30)
    _refused_end(engine, calls)
    engine.close()


# -- the SQLite file -----------------------------------------------------------------------------


def test_a_new_sqlite_database_is_private_whatever_the_umask(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        store = SQLiteStore(tmp_path / "flow.db")
        store.create_run(_new_run("r", "b", datetime.now(UTC)), datetime.now(UTC))
        modes = {p.name: p.stat().st_mode & 0o777 for p in tmp_path.iterdir()}
        store.close()
    finally:
        os.umask(old)
    assert modes["flow.db"] == 0o600
    assert modes["flow.db-wal"] == 0o600
    assert modes["flow.db-shm"] == 0o600


@pytest.mark.parametrize("command", [("start", "two-step"), ("tick",), ("worker",)])
def test_an_empty_sqlite_file_is_refused_by_commands_that_write(
    project: FlowProject, command: tuple[str, ...]
) -> None:
    project.db.touch()
    url = f"sqlite:///{project.db}?busy_timeout_ms=100"
    result = project.run("--db", url, *command, timeout=30)
    assert (result.code, result.stdout) == (1, "")
    assert result.error_line() == (
        f"error: {project.db} is an empty file (0 bytes), not a Flow database. If it should "
        "hold your runs, restore it from a backup; to start a new database there, delete the "
        "empty file and run the command again."
    )
    assert project.db.stat().st_size == 0


# -- an outage when a worker starts --------------------------------------------------------------


def _stop(worker: subprocess.Popen[str], seen: str = "") -> tuple[int, str]:
    worker.send_signal(signal.SIGTERM)
    _, stderr = worker.communicate(timeout=30)
    return worker.returncode, seen + stderr


def _await_line(process: subprocess.Popen[str], text: str, timeout: float = 30) -> str:
    """stderr of ``process`` up to the first line holding ``text`` (which must come)."""
    assert process.stderr is not None
    seen = ""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([process.stderr], [], [], 0.1)
        if ready:
            line = process.stderr.readline()
            if not line:
                break  # exited
            seen += line
            if text in line:
                return seen
    raise AssertionError(f"no line with {text!r} on stderr: {seen!r}")


def test_a_worker_started_while_sqlite_is_locked_waits_then_works(project: FlowProject) -> None:
    """Before: exit 1 after the busy timeout (under a supervisor, a restart loop)."""
    project.setup("start", "two-step", "--id", "r", "--input", '{"n": 2}')
    holder = sqlite3.connect(project.db, isolation_level=None)
    holder.execute("PRAGMA locking_mode = EXCLUSIVE")
    holder.execute("BEGIN EXCLUSIVE")
    url = f"sqlite:///{project.db}?busy_timeout_ms=200"
    worker = project.popen("--db", url, "worker", "--concurrency", "1")
    seen = ""
    try:
        seen = _await_line(worker, "database unavailable")
        time.sleep(0.5)  # a retry or two meet the lock as well
        assert worker.poll() is None, worker.communicate()
        holder.execute("COMMIT")
        holder.close()
        waited = project.run("--db", url, "result", "r", "--wait", "--timeout", "30s")
        assert (waited.code, waited.json()) == (0, {"result": 8}), waited.stderr
    finally:
        holder.close()
        code, stderr = _stop(worker, seen)
    assert code == 0, stderr
    lines = stderr.splitlines()
    assert sum("database unavailable" in line for line in lines) == 1, stderr
    assert any("database reachable again" in line for line in lines), stderr


def test_a_worker_started_while_postgres_is_unreachable_waits(project: FlowProject) -> None:
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    url = f"postgresql://postgres@127.0.0.1:{port}/test?connect_timeout=2"
    worker = project.popen("--db", url, "worker")
    seen = ""
    try:
        seen = _await_line(worker, "database unavailable")
        time.sleep(0.5)
        alive = worker.poll() is None
    finally:
        code, stderr = _stop(worker, seen)
    assert alive, stderr
    assert code == 0, stderr
    assert "database unavailable" in stderr and "is unreachable" in stderr, stderr
    assert "stopping (worker was waiting for the database)" in stderr, stderr


def test_a_tick_started_while_sqlite_is_locked_waits_then_works(project: FlowProject) -> None:
    project.setup("start", "two-step", "--id", "r", "--input", '{"n": 2}')
    holder = sqlite3.connect(project.db, isolation_level=None)
    holder.execute("PRAGMA locking_mode = EXCLUSIVE")
    holder.execute("BEGIN EXCLUSIVE")
    url = f"sqlite:///{project.db}?busy_timeout_ms=200"
    tick = project.popen("--db", url, "tick", "--until-idle")
    try:
        seen = _await_line(tick, "database unavailable")
        assert tick.poll() is None, tick.communicate()
    finally:
        holder.execute("COMMIT")
        holder.close()
    _, stderr = tick.communicate(timeout=60)
    stderr = seen + stderr
    assert tick.returncode == 0, stderr
    assert "database unavailable" in stderr, stderr
    assert project.run("--db", url, "result", "r").json() == {"result": 8}


def test_a_tick_stopped_while_waiting_for_the_database_did_nothing(project: FlowProject) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    tick = project.popen("--db", f"postgresql://postgres@127.0.0.1:{port}/test", "tick")
    seen = _await_line(tick, "database unavailable")
    assert tick.poll() is None
    code, stderr = _stop(tick, seen)
    assert code == 1, stderr
    assert stderr.splitlines()[-1] == (
        "error: tick stopped while waiting for the database; nothing was done."
    )


class _Forwarder:
    """A TCP port that forwards to PostgreSQL once ``open()`` is called (before: nothing listens
    there, as with a server that is down)."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        self._server: socket.socket | None = None
        self._sockets: list[socket.socket] = []
        self._threads: list[threading.Thread] = []

    def open(self) -> None:
        server = socket.create_server(("127.0.0.1", self.port))
        self._server = server
        self._start(self._accept, server)

    def _start(self, target: Any, *args: Any) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True)
        self._threads.append(thread)
        thread.start()

    def _accept(self, server: socket.socket) -> None:
        while True:
            try:
                client, _ = server.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.target)
            self._sockets += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                self._start(self._pipe, a, b)

    @staticmethod
    def _pipe(source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for end in (source, sink):
                with contextlib.suppress(OSError):
                    end.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        if self._server is not None:
            with contextlib.suppress(OSError):
                self._server.shutdown(socket.SHUT_RDWR)  # wakes the accepting thread
            self._server.close()
        for end in self._sockets:
            with contextlib.suppress(OSError):
                end.shutdown(socket.SHUT_RDWR)
        for thread in self._threads:
            thread.join(timeout=10)
        for end in self._sockets:
            end.close()


@pytest.mark.postgres
def test_a_worker_started_while_postgres_is_down_works_once_it_is_back(
    project: FlowProject,
) -> None:
    url = os.environ.get("FLOW_TEST_POSTGRES")
    if not url:
        pytest.skip("set FLOW_TEST_POSTGRES=postgresql://... to run the PostgreSQL tests")
    from flow_cli.store.postgres import PostgresStore

    parts = urllib.parse.urlsplit(url)
    schema = f"flow_test_{uuid.uuid4().hex[:16]}"
    direct = f"{url}?schema={schema}"
    project.setup("--db", direct, "start", "two-step", "--id", "r", "--input", '{"n": 2}')
    forwarder = _Forwarder((parts.hostname or "127.0.0.1", parts.port or 5432))
    netloc = f"{parts.username}@127.0.0.1:{forwarder.port}"
    via = urllib.parse.urlunsplit(parts._replace(netloc=netloc)) + f"?schema={schema}"
    worker = project.popen("--db", via, "worker", "--concurrency", "1")
    seen = ""
    try:
        seen = _await_line(worker, "database unavailable")
        assert worker.poll() is None, worker.communicate()
        forwarder.open()
        waited = project.run("--db", direct, "result", "r", "--wait", "--timeout", "30s")
        assert (waited.code, waited.json()) == (0, {"result": 8}), waited.stderr
    finally:
        code, stderr = _stop(worker, seen)
        forwarder.close()
        cleanup = PostgresStore(url, schema=schema)
        cleanup.drop_schema()
        cleanup.close()
    assert code == 0, stderr
    assert sum("database unavailable" in line for line in stderr.splitlines()) == 1, stderr
    assert "database reachable again" in stderr, stderr


def test_a_store_refusal_in_a_worker_pass_is_no_outage(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    engine = Engine.open(f"sqlite:///{tmp_path / 'flow.db'}", [_runtime(Calls())])
    outages: list[Exception] = []
    worker = Worker(engine, max_idle_sleep=0.05, on_store_error=outages.append)
    real = worker._pass
    raised = [
        StoreRefused("the database refused a value of this commit"),
        StoreUnavailable("the database is unreachable"),
    ]

    def failing(*args: Any) -> bool:
        if raised:
            raise raised.pop(0)
        worker.stop()
        return real(*args)

    worker._pass = failing  # type: ignore[method-assign]
    with caplog.at_level(logging.INFO, logger="flow"):
        worker.run()
    assert [str(e) for e in outages] == ["the database is unreachable"]
    refused = [r for r in caplog.records if "refused a value" in r.getMessage()]
    assert [r.levelname for r in refused] == ["ERROR"]
    engine.close()


def test_a_step_output_reads_back_as_written(store: EventStore, clock: ManualClock) -> None:
    """PostgreSQL stored the writer's JSON text through a ``jsonb`` cast, which reorders keys
    and turns the float 1e20 into an integer: the event read back was not the one recorded."""
    calls = Calls()
    calls.returns = {"z": 1e20, "a": [0.5, "x"], "m": {"b": 1, "a": 2}}
    engine = make_engine(store, [_runtime(calls)], clock)
    engine.start("one-step", run_id="r")
    engine.tick(until_idle=True)
    (done,) = [e.event.to_data() for e in engine.history("r") if e.event_key == "step_completed"]
    assert list(done["output"]) == ["z", "a", "m"]
    assert list(done["output"]["m"]) == ["b", "a"]
    assert type(done["output"]["z"]) is float


def test_the_group_committer_commits_each_alone_when_a_whole_batch_is_refused(
    clock: ManualClock,
) -> None:
    """The fallback for a store that refuses a whole transaction for one member's value."""
    store = MemoryStore()
    real = store.commit_groups

    def refusing(groups: Sequence[CommitGroup]) -> list[FlowError | None]:
        if any(run.run_id == "bad" for g in groups for run in g.creates):
            raise StoreRefused("the database refused a value of this commit")
        return real(groups)

    store.commit_groups = refusing  # type: ignore[method-assign]
    now = clock.now()
    groups = [
        CommitGroup(writes=[], creates=[_new_run(run_id, "b", now)], now=now)
        for run_id in ("a", "bad", "c")
    ]
    results = GroupCommitter(store).commit_many(groups)
    assert [type(r).__name__ if r else None for r in results] == [None, "StoreRefused", None]
    assert sorted(r.run_id for r in store.find_runs(RunFilter())) == ["a", "c"]


@pytest.mark.postgres
def test_nul_on_the_command_line_is_exit_2_on_postgres(project: FlowProject) -> None:
    """The probe's own commands: accepted before (exit 0), then PostgreSQL's next batch failed."""
    url = os.environ.get("FLOW_TEST_POSTGRES")
    if not url:
        pytest.skip("set FLOW_TEST_POSTGRES=postgresql://... to run the PostgreSQL tests")
    from flow_cli.store.postgres import PostgresStore

    schema = f"flow_test_{uuid.uuid4().hex[:16]}"
    db = f"{url}?schema={schema}"
    try:
        refused = project.invoke("--db", db, "start", "two-step", "--input", '"a\\u0000b"')
        assert (refused.code, refused.stdout) == (2, "")
        assert refused.error_line().startswith("error: --input is refused: it holds a NUL")
        project.setup("--db", db, "start", "two-step", "--id", "r")
        signal_refused = project.invoke("--db", db, "signal", "r", "go", "--payload", '"x\\u0000y"')
        assert signal_refused.code == 2
        assert [r["run_id"] for r in project.ok("--db", db, "runs", "--json").json()] == ["r"]
        history = project.ok("--db", db, "history", "r", "--json").json()
        assert [e["event_key"] for e in history] == ["run_started"]
    finally:
        cleanup = PostgresStore(url, schema=schema)
        cleanup.drop_schema()
        cleanup.close()
