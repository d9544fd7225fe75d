"""A worker keeps its footing while the disk under its SQLite database fills up.

The database lives on a small tmpfs; once the worker is busy, a filler file takes every free
byte. Commits fail ("database or disk is full") and the worker reports them and backs off; it
does not crash, and nothing committed is lost or changed. When space comes back, every run
completes with gapless histories, each step completed once and each effect applied once.
"""

from __future__ import annotations

import errno
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from flow_cli.engine.engine import Engine
from flow_cli.model.events import StepCompleted

ROOT = Path(__file__).resolve().parent.parent
WORKER = [sys.executable, str(ROOT / "tests" / "worker_process.py")]

pytestmark = pytest.mark.slow


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    mount = tmp_path / "disk"
    mount.mkdir()
    made = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(mount)],
        capture_output=True,
        text=True,
    )
    if made.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {made.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def _fill(directory: Path) -> Path:
    """Write a file until the filesystem has no byte left; returns it."""
    filler = directory / "filler"
    chunk = b"\0" * 65536
    with filler.open("wb", buffering=0) as out:
        while True:
            try:
                out.write(chunk)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC, exc
                break
        for size in (4096, 512, 1):
            while True:
                try:
                    out.write(b"\0" * size)
                except OSError:
                    break
    return filler


def _wait_for(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def test_a_worker_survives_the_disk_filling_up(small_disk: Path, tmp_path: Path) -> None:
    import load_workflows

    db = small_disk / "flow.db"
    engine = Engine.open(f"sqlite:///{db}", [load_workflows.runtime])
    run_ids = [f"full-{i:03d}" for i in range(60)]
    for run_id in run_ids:
        engine.start("five-steps", {"effects": True}, run_id=run_id)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(ROOT / "tests")])
    env["FLOW_EXAMPLE_LEDGER"] = str(tmp_path / "ledger.jsonl")
    log_path = tmp_path / "worker.log"
    with log_path.open("ab") as log:
        worker = subprocess.Popen(
            [*WORKER, f"sqlite:///{db}", "load_workflows:runtime", "--lease-seconds", "3"],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=log,
        )
        try:
            _wait_for(
                lambda: any(r.status.value == "Completed" for r in engine.list_runs()),
                60,
                "the first completed run",
            )
            filler = _fill(small_disk)
            committed = {run_id: engine.history(run_id) for run_id in run_ids}
            time.sleep(4)  # the worker meets the full disk for a while (more than a lease)
            assert worker.poll() is None, "the worker died when the disk filled"
            # Nothing committed before the disk filled was lost or changed.
            for run_id, before in committed.items():
                assert engine.history(run_id)[: len(before)] == before, run_id
            # An operator can still look: read commands work on the full disk.
            listing = subprocess.run(
                [sys.executable, "-m", "flow_cli", "--db", f"sqlite:///{db}", "count"],
                env=env,
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert listing.returncode == 0, listing.stderr
            assert "60" in listing.stdout, listing.stdout
            filler.unlink()
            _wait_for(
                lambda: all(r.status.terminal for r in engine.list_runs()),
                120,
                "every run to complete once the disk has room again",
            )
        finally:
            worker.send_signal(signal.SIGTERM)
            code = worker.wait(30)
    assert code == 0
    reported = log_path.read_text()
    assert "the disk is full" in reported, reported[-2000:]
    assert "Traceback" not in reported, reported[-4000:]
    assert {r.status.value for r in engine.list_runs()} == {"Completed"}
    for run_id in run_ids:
        history = engine.history(run_id)
        assert [e.sequence for e in history] == list(range(1, len(history) + 1)), run_id
        completed = Counter(e.event.step_id for e in history if isinstance(e.event, StepCompleted))
        assert completed == {f"s{i}": 1 for i in range(5)}, run_id
    from workflows_example import services

    os.environ["FLOW_EXAMPLE_LEDGER"] = str(tmp_path / "ledger.jsonl")
    keys = [row["key"] for row in services.read_ledger()]
    assert len(keys) == len(set(keys)) == 300
    engine.close()
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
