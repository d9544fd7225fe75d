"""Worker logs and metrics, from real ``flow worker`` processes.

A worker is quiet while healthy and writes one line per notable event (a decision failed or
recovered, a step attempt failed with its next attempt, a step exhausted, a run failed), as text
or JSON; with ``--metrics-port`` it serves Prometheus metrics that a scrape can read.
"""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from cli_helpers import FlowProject

from flow_cli.engine.engine import Engine
from flow_cli.engine.worker import DEFAULT_CONCURRENCY
from flow_cli.model.status import RunStatus

CONFIG = """\
[flow]
database = "sqlite:///flow.db"
build_id = "obs-1"
runtimes = ["obs_workflows:runtime"]
"""


class Project(FlowProject):
    def __init__(self, root: Path) -> None:
        super().__init__(root, CONFIG)
        self.fixed = root / "fixed"
        self.env["FLOW_TEST_FIXED"] = str(self.fixed)
        self.log = root / "worker.log"

    def start(self, workflow: str, run_id: str, payload: str | None = None) -> None:
        extra = ["--input", payload] if payload is not None else []
        self.setup("start", workflow, "--id", run_id, *extra)

    def worker(self, *args: str) -> subprocess.Popen[str]:
        # stderr goes to a file the test reads while the worker runs (a pipe could fill up).
        with self.log.open("w", encoding="utf-8") as log:
            return subprocess.Popen(
                [sys.executable, "-m", "flow_cli", "worker", "--lease-seconds", "5", *args],
                cwd=self.root,
                env=self.env,
                stdout=subprocess.DEVNULL,
                stderr=log,
                text=True,
            )

    def status(self, run_id: str) -> RunStatus:
        with Engine.open(f"sqlite:///{self.db}", create=False) as engine:
            return engine.get_run(run_id).status

    def lines(self) -> list[str]:
        return self.log.read_text(encoding="utf-8").splitlines()


@pytest.fixture
def project(tmp_path: Path) -> Iterator[Project]:
    yield Project(tmp_path)


def wait_for(condition: Callable[[], Any], what: str, timeout: float = 60) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def stop(worker: subprocess.Popen[str]) -> int:
    if worker.poll() is None:
        worker.send_signal(signal.SIGTERM)
    return worker.wait(timeout=30)


def ended(project: Project, *run_ids: str) -> Callable[[], bool]:
    return lambda: all(project.status(r).terminal for r in run_ids)


def drive_notable_events(project: Project, worker: subprocess.Popen[str]) -> None:
    """A step that fails once, a step that fails for good, a decision that fails and then (the
    code fixed, a signal waking the run) recovers."""
    try:
        project.start("flaky", "flaky-1")
        project.start("doomed", "doomed-1")
        project.start("fragile", "fragile-1")
        wait_for(ended(project, "flaky-1", "doomed-1"), "the step runs to end")
        wait_for(lambda: "decision" in project.log.read_text(), "the failed decision's line")
        project.fixed.write_text("yes")
        project.setup("signal", "fragile-1", "poke")
        wait_for(ended(project, "fragile-1"), "the fixed run to end")
        wait_for(lambda: "recovered" in project.log.read_text(), "the recovery's line")
    finally:
        assert stop(worker) == 0


def test_worker_logs_notable_events_as_text(project: Project) -> None:
    drive_notable_events(project, project.worker())
    lines = project.lines()
    assert lines[0].startswith("worker ") and lines[-1].startswith("worker stopped: ")
    # Between the start line and SIGTERM + stop lines; indented lines are tracebacks.
    events = sorted(line for line in lines[1:-2] if not line.startswith("    "))
    assert len(events) == 6, lines
    failed = next(i for i, line in enumerate(lines) if line.startswith("error: decision failed"))
    assert lines[failed + 1] == "    Traceback (most recent call last):"
    assert lines[failed + 2].startswith('      File "') and "obs_workflows.py" in lines[failed + 2]
    at = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z"
    expected = [
        r"error: decision failed: run fragile-1 \(fragile, build obs-1\): ValueError: bad "
        rf"deploy; retrying at {at}",
        r"error: run failed: doomed-1 \(doomed, build obs-1\): StepExhausted: step 'charge' "
        r"failed after 2 attempt\(s\)",
        r"error: step exhausted: 'charge' of run doomed-1 \(doomed, build obs-1\) failed for "
        r"good on attempt 2: ValueError: card declined",
        r"info: decision recovered: run fragile-1 \(fragile, build obs-1\) decides again after "
        r"ValueError",
        r"warning: step failed: 'charge' of run doomed-1 \(doomed, build obs-1\), attempt 1: "
        rf"ValueError: card declined; next attempt at {at}",
        r"warning: step failed: 'charge' of run flaky-1 \(flaky, build obs-1\), attempt 1: "
        rf"ConnectionError: gateway timeout; next attempt at {at}",
    ]
    for line, pattern in zip(events, expected, strict=True):
        assert re_full(pattern, line), (pattern, line)


def re_full(pattern: str, line: str) -> bool:
    import re

    return re.fullmatch(pattern, line) is not None


def test_worker_logs_notable_events_as_json(project: Project) -> None:
    drive_notable_events(project, project.worker("--log-format", "json"))
    records = [json.loads(line) for line in project.lines()]  # every line is JSON
    kinds = [r["event"] for r in records]
    assert kinds[0] == "worker_started" and kinds[-2:] == ["worker_stopping", "worker_stopped"]
    # `flow worker` without --concurrency runs as many step threads as the Worker API's default.
    assert records[0]["concurrency"] == DEFAULT_CONCURRENCY
    by_event = {(r["event"], r.get("run_id")): r for r in records}
    assert sorted(kinds[1:-2]) == [
        "decision_failed",
        "decision_recovered",
        "run_failed",
        "step_exhausted",
        "step_failed",
        "step_failed",
    ]
    flaky = by_event[("step_failed", "flaky-1")]
    assert flaky["level"] == "warning"
    assert {k: flaky[k] for k in ("workflow", "build_id", "step_id", "step", "attempt")} == {
        "workflow": "flaky",
        "build_id": "obs-1",
        "step_id": "charge",
        "step": "charge",
        "attempt": 1,
    }
    assert (flaky["error_type"], flaky["error"]) == ("ConnectionError", "gateway timeout")
    assert flaky["next_attempt_at"] > flaky["time"]  # both ISO 8601, UTC, milliseconds
    exhausted = by_event[("step_exhausted", "doomed-1")]
    assert (exhausted["level"], exhausted["attempt"], exhausted["error"]) == (
        "error",
        2,
        "card declined",
    )
    failed = by_event[("run_failed", "doomed-1")]
    assert (failed["level"], failed["error_type"], failed["step_id"]) == (
        "error",
        "StepExhausted",
        "charge",
    )
    decision = by_event[("decision_failed", "fragile-1")]
    assert (decision["workflow"], decision["error_type"], decision["error"]) == (
        "fragile",
        "ValueError",
        "bad deploy",
    )
    assert decision["retry_at"] > decision["time"]
    recovered = by_event[("decision_recovered", "fragile-1")]
    assert (recovered["level"], recovered["error_type"]) == ("info", "ValueError")


def test_a_healthy_worker_prints_only_its_start_and_stop_lines(project: Project) -> None:
    for i in range(5):
        project.start("chain", f"chain-{i}", '{"n": 20}')
    project.start("napper", "nap-1")
    worker = project.worker("--log-level", "info")
    try:
        wait_for(ended(project, *(f"chain-{i}" for i in range(5)), "nap-1"), "the runs to end")
    finally:
        assert stop(worker) == 0
    lines = project.lines()
    assert [line.split(":")[0].split(" ")[0] for line in lines] == ["worker", "SIGTERM", "worker"]
    assert re_full(r"worker stopped: \d+ runs decided, 100 steps run, 0 database errors", lines[-1])


def test_log_level_error_hides_warnings(project: Project) -> None:
    project.start("flaky", "flaky-1")
    worker = project.worker("--log-level", "error")
    try:
        wait_for(ended(project, "flaky-1"), "the run to end")
    finally:
        assert stop(worker) == 0
    assert len(project.lines()) == 3  # start, SIGTERM, stop: the retried attempt is a warning


def test_tick_logs_in_json_too(project: Project) -> None:
    project.start("doomed", "doomed-1")
    first = project.run("tick", "--log-format", "json")
    assert first.code == 0
    (line,) = first.stderr.splitlines()
    record = json.loads(line)
    assert (record["event"], record["run_id"], record["attempt"]) == ("step_failed", "doomed-1", 1)
    time.sleep(0.3)  # the retry is due 0.2 s later
    second = project.run("tick", "--until-idle")
    assert second.code == 0
    levels = [line.split(":")[0] for line in second.stderr.splitlines() if line[:1] != " "]
    assert levels == ["error", "error"]  # and the exhausted step's traceback, indented


# -- metrics ----------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def scrape(port: int) -> dict[str, float]:
    """The samples of ``/metrics``: ``{'name{labels}': value}``."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode("utf-8")
    samples = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            samples[name] = float(value)
    return samples


def test_metrics_of_a_real_worker(project: Project) -> None:
    port = free_port()
    project.start("chain", "chain-1", '{"n": 5}')
    project.start("flaky", "flaky-1")
    project.start("doomed", "doomed-1")
    project.start("napper", "nap-1")
    project.start("fragile", "fragile-1")  # its decision keeps failing: it stays open
    worker = project.worker("--metrics-port", str(port))
    try:
        wait_for(ended(project, "chain-1", "flaky-1", "doomed-1", "nap-1"), "the runs to end")
        m = wait_for(lambda: _try_scrape(port), "the metrics endpoint")
    finally:
        assert stop(worker) == 0
    # chain: 5 steps; flaky: 1 retried + 1 completed; doomed: 1 retried + 1 exhausted.
    assert m['flow_steps_total{outcome="completed"}'] == 6
    assert m['flow_steps_total{outcome="retrying"}'] == 2
    assert m['flow_steps_total{outcome="failed"}'] == 1
    assert m['flow_steps_total{outcome="discarded"}'] == 0
    assert m["flow_step_duration_seconds_count"] == 9
    assert m["flow_decision_failures_total"] >= 1  # fragile-1, again every 5 s or more
    # Each run decides at least once per step it schedules and once to end.
    assert m["flow_decisions_total"] >= 6 + 2 + 2 + 2
    assert m["flow_timer_lateness_seconds_count"] == 1
    assert 0 <= m["flow_timer_lateness_seconds_sum"] < 5
    assert m["flow_event_conflicts_total"] == 0
    assert m['flow_open_runs{status="Pending"}'] == 1  # fragile-1: no decision recorded yet
    assert m['flow_open_runs{status="Running"}'] == 0
    assert m['flow_open_runs{status="Suspended"}'] == 0


def _try_scrape(port: int) -> dict[str, float] | None:
    try:
        samples = scrape(port)
    except OSError:
        return None
    return samples if samples.get("flow_decision_failures_total") else None


def test_metrics_port_in_use_is_one_error_line(project: Project) -> None:
    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = project.run("worker", "--metrics-port", str(port), timeout=30)
    assert result.code == 1
    assert result.error_line().startswith(f"error: --metrics-port {port}: cannot listen on port")


def test_metrics_port_without_the_extra_says_what_to_install(
    project: Project, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "prometheus_client", None)  # as if not installed
    result = project.invoke("worker", "--metrics-port", "9464")
    assert result.code == 2
    assert result.error_line() == (
        "error: --metrics-port needs prometheus-client: pip install 'flow-cli[metrics]'"
    )


def test_a_database_outage_and_its_end_are_one_line_each(project: Project) -> None:
    import sqlite3

    project.start("chain", "chain-1")  # creates the database
    project.start("napper", "nap-1", "3")  # its timer comes due while the database is locked
    url = f"sqlite:///{project.db}?busy_timeout_ms=200"
    with project.log.open("w", encoding="utf-8") as log:
        worker = subprocess.Popen(
            [sys.executable, "-m", "flow_cli", "--db", url, "worker", "--log-format", "json"],
            cwd=project.root,
            env=project.env,
            stdout=subprocess.DEVNULL,
            stderr=log,
            text=True,
        )
    try:
        wait_for(lambda: project.status("nap-1") is RunStatus.SUSPENDED, "the nap to start")
        holder = sqlite3.connect(project.db, isolation_level=None)
        try:
            holder.execute("BEGIN EXCLUSIVE")
            wait_for(lambda: "store_error" in project.log.read_text(), "the outage's line")
            holder.execute("COMMIT")
        finally:
            holder.close()
        wait_for(lambda: "store_reconnected" in project.log.read_text(), "the reconnection")
    finally:
        assert stop(worker) == 0
    records = [json.loads(line) for line in project.lines()]
    events = [r["event"] for r in records]
    assert events.count("store_reconnected") == 1
    outage = next(r for r in records if r["event"] == "store_error")
    assert outage["level"] == "warning" and "locked" in outage["error"]
    back = next(r for r in records if r["event"] == "store_reconnected")
    assert back["level"] == "info" and back["outage_seconds"] > 0


def test_prometheus_client_is_imported_only_for_metrics() -> None:
    code = (
        "import sys\n"
        "from flow_cli.cli import app, cmd_drive\n"
        "from flow_cli.engine import observe, worker\n"
        "assert 'prometheus_client' not in sys.modules\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert (done.returncode, done.stderr) == (0, "")
