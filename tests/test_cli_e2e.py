"""End-to-end tests of the ``flow`` command line, run as real processes.

Each test works in a fresh directory holding a ``flow.toml`` that names the runtimes of
``tests/cli_workflows.py`` and a SQLite database. stdout, stderr and the exit code are asserted
separately.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cli_helpers import ANSI, FlowProject

TWO_STEP_KEYS = [
    "run_started",
    "step_scheduled",
    "step_started",
    "step_completed",
    "step_scheduled",
    "step_started",
    "step_completed",
    "run_completed",
]


@pytest.fixture
def project(tmp_path: Path) -> FlowProject:
    return FlowProject(tmp_path)


def test_start_tick_signal_hook_to_completed(project: FlowProject) -> None:
    started = project.run("start", "two-step", "--id", "order-1", "--input", '{"n": 3}')
    assert (started.code, started.stdout, started.stderr) == (0, "order-1\n", "")
    assert project.ok("start", "approval", "--id", "appr-1").stdout == "appr-1\n"
    token_input = json.dumps({"token": "tok-123"})
    assert project.ok("start", "callback", "--id", "cb-1", "--input", token_input).stdout == (
        "cb-1\n"
    )

    tick = project.run("tick", "--until-idle")
    assert tick.code == 0, tick.stderr
    assert tick.stderr == ""
    assert tick.stdout.startswith("tick: ") and " run" in tick.stdout
    assert len(tick.stdout.splitlines()) == 1

    signalled = project.run("signal", "appr-1", "approve", "--payload", '{"by": "alice"}')
    assert (signalled.code, signalled.stderr) == (0, "")
    assert signalled.stdout == "signal 'approve' delivered to run appr-1 (event 3)\n"
    resolved = project.run("hook", "resolve", "tok-123", "--payload", "[1, 2]", "--run", "cb-1")
    assert (resolved.code, resolved.stderr) == (0, "")
    assert resolved.stdout == "hook 'callback' of run cb-1 resolved\n"
    project.ok("tick", "--until-idle")

    assert project.history_keys("order-1") == TWO_STEP_KEYS
    assert project.history_keys("appr-1") == [
        "run_started",
        "signal_wait_started",
        "signal_received",
        "run_completed",
    ]
    assert project.history_keys("cb-1") == [
        "run_started",
        "hook_created",
        "hook_resolved",
        "run_completed",
    ]
    order = project.ok("show", "order-1", "--json").json()
    assert order["status"] == "Completed"
    assert order["outcome"] == {"kind": "Completed", "result": {"result": 12}}
    assert order["steps"]["first"]["output"] == {"n": 6}
    assert project.ok("show", "appr-1", "--json").json()["outcome"]["result"] == {
        "approved": {"by": "alice"}
    }
    callback = project.ok("show", "cb-1", "--json").json()
    assert callback["hooks"]["callback"]["resolved"] is True
    assert callback["outcome"]["result"] == {"callback": [1, 2]}

    shown = project.run("show", "order-1")
    assert (shown.code, shown.stderr) == (0, "")
    for text in ("run order-1", "Completed", "two-step", "cli-1", "first", "second", "double"):
        assert text in shown.stdout
    history = project.run("history", "order-1")
    assert (history.code, history.stderr) == (0, "")
    for key in TWO_STEP_KEYS:
        assert key in history.stdout
    assert "step 'first' → double({\"n\":3})" in history.stdout
    assert not ANSI.search(shown.stdout + history.stdout)


def test_start_is_idempotent_and_conflicting_start_is_exit_2(project: FlowProject) -> None:
    first = project.run("start", "two-step", "--id", "r", "--input", '{"n": 1}', "--json")
    assert (first.code, first.stderr) == (0, "")
    assert first.json() == {"run_id": "r", "created": True}
    again = project.run("start", "two-step", "--id", "r", "--input", '{"n": 1}', "--json")
    assert (again.code, again.stderr) == (0, "")
    assert again.json() == {"run_id": "r", "created": False}
    before = project.dump()
    clash = project.run("start", "two-step", "--id", "r", "--input", '{"n": 2}')
    assert clash.code == 2
    assert clash.stdout == ""
    assert clash.error_line() == (
        "error: Run 'r' already exists with a different input. "
        "Choose another --id, or start it with the same workflow and input."
    )
    other = project.run("start", "approval", "--id", "r")
    assert other.code == 2
    assert "already exists with a different workflow" in other.error_line()
    assert project.dump() == before


def test_start_reads_input_from_a_file_and_from_stdin(project: FlowProject) -> None:
    (project.root / "input.json").write_text('{"n": 5}', encoding="utf-8")
    project.ok("start", "two-step", "--id", "from-file", "--input", "@input.json")
    project.ok("start", "two-step", "--id", "from-stdin", "--input", "-", stdin='{"n": 7}\n')
    generated = project.ok("start", "two-step").stdout.strip()
    assert generated.startswith("two-step-")
    assert project.setup("show", "from-file", "--json").json()["input"] == {"n": 5}
    assert project.setup("show", "from-stdin", "--json").json()["input"] == {"n": 7}
    assert project.setup("show", generated, "--json").json()["input"] is None


def test_history_follow_prints_later_events_and_exits_at_the_terminal_event(
    project: FlowProject,
) -> None:
    project.setup("start", "approval", "--id", "f")
    project.setup("tick", "--until-idle")
    follower = project.popen("history", "f", "--follow", "--json")
    try:
        assert follower.stdout is not None
        first = json.loads(follower.stdout.readline())
        second = json.loads(follower.stdout.readline())
        assert [first["event_key"], second["event_key"]] == ["run_started", "signal_wait_started"]
        project.setup("signal", "f", "approve", "--payload", '"yes"')
        project.setup("tick", "--until-idle")
        rest, errors = follower.communicate(timeout=30)
    finally:
        follower.kill()
    assert follower.returncode == 0
    assert errors == ""
    lines = [json.loads(line) for line in rest.splitlines()]
    assert [e["event_key"] for e in lines] == ["signal_received", "run_completed"]
    assert [e["sequence"] for e in lines] == [3, 4]
    assert set(lines[0]) == {"run_id", "sequence", "event_key", "recorded_at", "data"}
    assert lines[0]["data"] == {"signal_name": "approve", "payload": "yes"}


def test_history_follow_of_a_finished_run_prints_it_and_exits(project: FlowProject) -> None:
    project.setup("start", "two-step", "--id", "done")
    project.setup("tick", "--until-idle")
    followed = project.run("history", "done", "--follow", timeout=20)
    assert (followed.code, followed.stderr) == (0, "")
    lines = followed.stdout.splitlines()
    assert len(lines) == len(TWO_STEP_KEYS)
    assert "run_completed" in lines[-1]


def test_history_follow_interrupted_exits_130_without_traceback(project: FlowProject) -> None:
    project.setup("start", "approval", "--id", "waiting")
    follower = project.popen("history", "waiting", "--follow", "--json")
    try:
        assert follower.stdout is not None
        assert json.loads(follower.stdout.readline())["event_key"] == "run_started"
        follower.send_signal(signal.SIGINT)
        _, errors = follower.communicate(timeout=20)
    finally:
        follower.kill()
    assert follower.returncode == 130
    assert "Traceback" not in errors
    assert errors == ""


def test_worker_runs_until_sigterm_then_exits_0(project: FlowProject) -> None:
    project.setup("start", "two-step", "--id", "w", "--input", '{"n": 2}')
    worker = project.popen("worker", "--concurrency", "2", "--lease-seconds", "5")
    try:
        deadline = time.monotonic() + 30
        status = None
        while time.monotonic() < deadline:
            with sqlite3.connect(project.db) as conn:
                row = conn.execute("SELECT status FROM runs WHERE run_id = 'w'").fetchone()
            status = row[0] if row else None
            if status == "Completed":
                break
            time.sleep(0.1)
        assert status == "Completed"
        worker.send_signal(signal.SIGTERM)
        out, errors = worker.communicate(timeout=30)
    finally:
        worker.kill()
    assert worker.returncode == 0
    assert out == ""
    assert "Traceback" not in errors
    assert "SIGTERM: stopping" in errors
    assert "worker stopped: " in errors
    assert project.history_keys("w") == TWO_STEP_KEYS


def test_runs_lists_and_filters_with_a_failing_marker(project: FlowProject) -> None:
    project.setup("start", "two-step", "--id", "ok-run")
    project.setup("start", "broken", "--id", "bad-run")
    tick = project.setup("tick", "--until-idle", "--json").json()
    assert tick["decision_failures"] >= 1

    listed = project.run("runs")
    assert (listed.code, listed.stderr) == (0, "")
    rows = {line.split()[0]: line for line in listed.stdout.splitlines() if "-run" in line}
    assert "Completed" in rows["ok-run"] and "⚠" not in rows["ok-run"]
    assert "⚠ ValueError: boom [red]not markup[/red]" in rows["bad-run"]
    assert listed.stdout.rstrip().endswith("2 runs")

    data = project.ok("runs", "--json").json()
    assert [r["run_id"] for r in data] == ["bad-run", "ok-run"]
    fields = {
        "run_id", "workflow", "status", "build_id", "parent_run_id", "created_at",
        "updated_at", "last_sequence", "failing", "waiting_on", "error_type", "reason",
        "attributes",
        "priority",
    }  # fmt: skip
    assert all(set(r) == fields for r in data)
    assert data[0]["failing"] and "boom" in data[0]["failing"]
    assert data[1]["failing"] is None and data[1]["last_sequence"] == 8

    completed = project.setup("runs", "--status", "completed", "--json").json()
    assert [r["run_id"] for r in completed] == ["ok-run"]
    assert [
        r["run_id"] for r in project.setup("runs", "--workflow", "broken", "--json").json()
    ] == ["bad-run"]
    assert len(project.setup("runs", "--limit", "1", "--json").json()) == 1

    shown = project.run("show", "bad-run")
    assert shown.code == 0
    assert "failing   ValueError: boom [red]not markup[/red]" in shown.stdout
    as_json = project.setup("show", "bad-run", "--json").json()
    assert as_json["decision_error"]["error_type"] == "ValueError"
    assert "boom" in as_json["failing"]


def test_show_json_has_the_documented_fields(project: FlowProject) -> None:
    project.setup("start", "callback", "--id", "h", "--input", '{"token": "t-1"}')
    project.setup("tick", "--until-idle")
    data = project.ok("show", "h", "--json").json()
    for field in (
        "run_id", "workflow", "status", "build_id", "patches", "input", "steps", "waits",
        "signals", "hooks", "children", "progress", "last_sequence", "outcome", "failing",
    ):  # fmt: skip
        assert field in data
    assert data["status"] == "Suspended"
    assert data["outcome"] is None
    assert data["hooks"]["callback"]["token"] == "t-1"
    assert data["hooks"]["callback"]["resolved"] is False
    text = project.run("show", "h").stdout
    assert "t-1" in text and "open" in text and "test [not markup]" in text


def test_cancel_requests_cancellation(project: FlowProject) -> None:
    project.setup("start", "approval", "--id", "c")
    project.setup("tick", "--until-idle")
    cancelled = project.run("cancel", "c", "--reason", "customer left")
    assert (cancelled.code, cancelled.stderr) == (0, "")
    assert cancelled.stdout == "cancellation of run c requested\n"
    again = project.run("cancel", "c", "--json")
    assert again.json() == {"run_id": "c", "requested": False}
    project.setup("tick", "--until-idle")
    data = project.setup("show", "c", "--json").json()
    assert data["status"] == "Cancelled"
    assert data["outcome"] == {"kind": "Cancelled", "reason": "customer left"}


def test_plain_output_has_no_escape_sequences_off_a_terminal(project: FlowProject) -> None:
    project.setup("start", "two-step", "--id", "p")
    project.setup("tick", "--until-idle")
    env = {k: v for k, v in project.env.items() if k != "NO_COLOR"}
    for args in (("runs",), ("show", "p"), ("history", "p"), ("tick",)):
        done = subprocess.run(
            [sys.executable, "-m", "flow_cli", *args],
            cwd=project.root, env=env, capture_output=True, text=True, check=False,
        )  # fmt: skip
        assert done.returncode == 0
        assert not ANSI.search(done.stdout + done.stderr)


@pytest.mark.skipif(sys.platform == "win32", reason="needs a pseudo-terminal")
def test_colour_on_a_terminal_but_never_with_no_color(project: FlowProject) -> None:
    import pty

    project.setup("start", "two-step", "--id", "t")
    project.setup("tick", "--until-idle")

    def on_terminal(no_color: bool) -> str:
        env = {k: v for k, v in project.env.items() if k not in ("NO_COLOR", "COLUMNS")}
        env["TERM"] = "xterm-256color"
        if no_color:
            env["NO_COLOR"] = "1"
        leader, follower = pty.openpty()
        process = subprocess.Popen(
            [sys.executable, "-m", "flow_cli", "runs"],
            cwd=project.root, env=env, stdout=follower, stderr=follower,
        )  # fmt: skip
        os.close(follower)
        chunks = []
        while True:
            try:
                chunk = os.read(leader, 4096)
            except OSError:
                break
            if not chunk:
                break
            chunks.append(chunk)
        os.close(leader)
        assert process.wait(timeout=30) == 0
        return b"".join(chunks).decode("utf-8", "replace")

    assert ANSI.search(on_terminal(no_color=False))
    plain = on_terminal(no_color=True)
    assert "Completed" in plain
    assert not ANSI.search(plain)


def test_tick_json_report(project: FlowProject) -> None:
    project.setup("start", "two-step", "--id", "j")
    once = project.run("tick", "--json")
    assert (once.code, once.stderr) == (0, "")
    report = once.json()
    assert set(report) >= {
        "passes", "decisions", "runs_decided", "steps_run", "conflicts", "decision_failures",
        "idle", "next_due",
    }  # fmt: skip
    assert report["passes"] == 1
    project.setup("tick", "--until-idle")
    idle = project.setup("tick", "--json").json()
    assert idle["idle"] is True and idle["runs_decided"] == 0 and idle["steps_run"] == 0


def test_export_writes_the_history_document(project: FlowProject) -> None:
    project.setup("start", "two-step", "--id", "e")
    project.setup("tick", "--until-idle")
    printed = project.run("export", "e")
    assert (printed.code, printed.stderr) == (0, "")
    document = printed.json()
    assert document["run_id"] == "e"
    assert [event["event_key"] for event in document["events"]] == TWO_STEP_KEYS
    assert document["events"] == project.setup("history", "e", "--json").json()

    written = project.run("export", "e", "-o", "e.json")
    assert (written.code, written.stdout) == (0, "")
    assert written.stderr == "wrote 8 events of run e to e.json\n"
    assert json.loads((project.root / "e.json").read_text(encoding="utf-8")) == document


def test_python_m_flow_cli_help_documents_exit_codes(project: FlowProject) -> None:
    shown = project.run("--help")
    assert (shown.code, shown.stderr) == (0, "")
    for line in (
        "Exit codes:",
        "0    success",
        "1    the operation failed",
        "2    usage or input error",
        "3    replay-check found a divergence",
        "130  interrupted",
    ):
        assert line in shown.stdout
    for command in ("init", "start", "tick", "worker", "signal", "hook", "cancel", "runs",
                    "show", "history", "export", "replay-check"):  # fmt: skip
        assert f"  {command} " in shown.stdout


def test_show_lists_children_and_timers(project: FlowProject) -> None:
    project.setup("start", "parent", "--id", "p")
    project.setup("start", "sleepy", "--id", "s")
    project.setup("tick", "--until-idle")
    parent = project.setup("show", "p", "--json").json()
    assert parent["status"] == "Completed"
    assert parent["children"]["kid"]["run_id"] == "p/kid"
    assert parent["outcome"]["result"] == {"child": {"result": 4}}
    text = project.ok("show", "p").stdout
    assert "children" in text and "p/kid" in text and "kid" in text
    history = project.setup("history", "p").stdout
    assert "child_scheduled" in history and "child 'kid' → run p/kid" in history

    sleepy = project.setup("show", "s", "--json").json()
    assert sleepy["status"] == "Suspended"
    assert sleepy["waits"]["nap"]["done"] is False
    text = project.ok("show", "s").stdout
    assert "timers" in text and "nap" in text and "pending" in text
    assert "1 wait open" in text


def test_global_json_option(project: FlowProject) -> None:
    project.setup("start", "two-step", "--id", "g")
    result = project.invoke("--json", "runs")
    assert result.code == 0
    assert [r["run_id"] for r in result.json()] == ["g"]
    assert project.invoke("--json", "show", "g").json()["run_id"] == "g"
