"""``flow worker --processes N``: N worker processes under one command, started, stopped and
failed together."""

from __future__ import annotations

import os
import re
import signal
import sqlite3
import subprocess
import threading
import time
from pathlib import Path

import pytest
from cli_helpers import FlowProject

from flow_cli.cli.worker_processes import ABORT, PARENT_FD, STOP, child_arguments, watch_parent

RUNS = 12


@pytest.fixture
def project(tmp_path: Path) -> FlowProject:
    return FlowProject(tmp_path)


class Stderr:
    """The lines a process writes to stderr, read on a thread as they come."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.lines: list[str] = []
        assert proc.stderr is not None
        stream = self._stream = proc.stderr
        self._thread = threading.Thread(target=lambda: self.lines.extend(stream), daemon=True)
        self._thread.start()

    def pids(self, count: int, timeout: float = 30) -> list[int]:
        """The pids of the first ``count`` workers whose banner appeared."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = [int(m.group(1)) for m in map(_BANNER.match, list(self.lines)) if m]
            if len(found) >= count:
                return found[:count]
            time.sleep(0.05)
        raise AssertionError(f"no {count} worker banners in {self.lines}")

    def text(self) -> str:
        self._thread.join(timeout=10)
        self._stream.close()
        return "".join(self.lines)


_BANNER = re.compile(r"worker [^:]+:(\d+):\w+: builds ")


def _end(proc: subprocess.Popen[str]) -> None:
    proc.kill()
    proc.wait(timeout=30)
    assert proc.stdout is not None
    proc.stdout.close()


def _statuses(project: FlowProject) -> list[str]:
    with sqlite3.connect(project.db) as conn:
        return [row[0] for row in conn.execute("SELECT status FROM runs")]


def _gone(pid: int, timeout: float = 30) -> bool:
    """Whether ``pid`` exits within ``timeout`` (a zombie nobody reaped yet has exited)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError):
            return True
        if state == "Z":
            return True
        time.sleep(0.05)
    return False


def test_worker_processes_share_the_runs_and_stop_together_on_sigterm(
    project: FlowProject,
) -> None:
    for index in range(RUNS):
        project.setup("start", "two-step", "--id", f"r{index}", "--input", '{"n": 2}')
    worker = project.popen("worker", "--processes", "2", "--lease-seconds", "5")
    stderr = Stderr(worker)
    try:
        pids = stderr.pids(2)
        assert len(set(pids)) == 2 and worker.pid not in pids
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and _statuses(project).count("Completed") < RUNS:
            time.sleep(0.1)
        assert _statuses(project) == ["Completed"] * RUNS
        # Both register themselves as workers of this database; on a loaded machine the second
        # may do so only after the first has finished every run.
        live: set[int] = set()
        while time.monotonic() < deadline and not set(pids) <= live:
            with sqlite3.connect(project.db) as conn:
                live = {row[0] for row in conn.execute("SELECT pid FROM workers")}
            time.sleep(0.05)
        assert set(pids) <= live
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(timeout=30) == 0
    finally:
        _end(worker)
    errors = stderr.text()
    assert "Traceback" not in errors
    assert errors.count("worker stopped: ") == 2
    assert all(_gone(pid) for pid in pids)


def test_a_worker_process_that_dies_stops_the_others_and_fails_the_command(
    project: FlowProject,
) -> None:
    worker = project.popen("worker", "--processes", "2")
    stderr = Stderr(worker)
    try:
        doomed, other = stderr.pids(2)
        os.kill(doomed, signal.SIGKILL)
        assert worker.wait(timeout=30) == 128 + signal.SIGKILL
    finally:
        _end(worker)
    errors = stderr.text()
    assert f"worker process {doomed} was killed by SIGKILL; stopping the others" in errors
    assert errors.count("worker stopped: ") == 1  # the other one, cleanly
    assert _gone(other)
    assert "Traceback" not in errors


def test_the_worker_processes_stop_when_their_command_is_killed(project: FlowProject) -> None:
    worker = project.popen("worker", "--processes", "2")
    stderr = Stderr(worker)
    try:
        pids = stderr.pids(2)
        worker.kill()  # SIGKILL: no chance to tell them; its pipes close as it dies
        worker.wait(timeout=30)
        assert all(_gone(pid) for pid in pids)
    finally:
        _end(worker)
    assert stderr.text().count("worker stopped: ") == 2


def _watching(monkeypatch: pytest.MonkeyPatch) -> tuple[int, list[str], threading.Event]:
    """A pipe watched as a child watches its parent's; returns its write end and the calls."""
    read, write = os.pipe()
    monkeypatch.setenv(PARENT_FD, str(read))
    calls: list[str] = []
    aborted = threading.Event()

    def abort() -> None:
        calls.append("abort")
        aborted.set()

    assert watch_parent(lambda: calls.append("stop"), abort)
    return write, calls, aborted


def test_a_child_stops_when_its_parent_says_so_and_aborts_when_it_says_so_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    write, calls, aborted = _watching(monkeypatch)
    os.write(write, STOP)
    os.write(write, ABORT)  # what the parent writes when asked to stop a second time
    assert aborted.wait(10)
    assert calls == ["stop", "abort"]
    os.close(write)


def test_a_child_stops_when_its_parent_is_gone(monkeypatch: pytest.MonkeyPatch) -> None:
    write, calls, _ = _watching(monkeypatch)
    os.close(write)  # as when the parent dies: the pipe's last writer is gone
    deadline = time.monotonic() + 10
    while not calls and time.monotonic() < deadline:
        time.sleep(0.01)
    assert calls == ["stop"]


def test_a_process_started_otherwise_watches_no_parent(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(PARENT_FD, raising=False)
    assert not watch_parent(lambda: None, lambda: None)


def test_children_get_the_parents_arguments_with_their_own_process_count_and_port() -> None:
    arguments = ["--db", "x.db", "worker", "--processes", "3", "--metrics-port", "9400"]
    assert child_arguments(arguments, 9400, 2) == [
        *arguments,
        "--processes",
        "1",
        "--metrics-port",
        "9402",
    ]
    assert child_arguments(["worker", "--processes=2"], None, 0) == [
        "worker",
        "--processes=2",
        "--processes",
        "1",
    ]
