"""``flow fork`` is one transaction: a fork SIGKILLed at any point leaves no run or a whole one.

The child process forks a run of many steps (one commit group per step in the copy) and
kills itself with SIGKILL from inside SQLite once a chosen number of virtual-machine steps
has run (``set_progress_handler``), so the kill lands at points spread over the whole fork:
before, inside and after its transaction.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from flow_cli import Engine, Runtime
from flow_cli.errors import RunNotFound
from flow_cli.model.context import WorkflowContext

STEPS = 12
HERE = Path(__file__).resolve().parent

runtime = Runtime(build_id="fork-crash-1")


@runtime.step("inc")
def inc(input: Any, info: Any) -> Any:
    return input + 1


@runtime.workflow("chain")
def chain(ctx: WorkflowContext) -> Any:
    value = 0
    for n in range(STEPS):
        value = ctx.step(f"s{n}", inc, value)
    return ctx.complete(value)


CHILD = """
import os, signal, sys
sys.path[:0] = [{tests!r}, {root!r}]
from flow_cli.store import sqlite as backend

limit = int(sys.argv[2])
counted = [0]
opened = backend.SQLiteStore._open

def _open(self, target, *, uri=False):
    conn = opened(self, target, uri=uri)
    def tick():
        counted[0] += 1
        if limit and counted[0] >= limit:
            os.kill(os.getpid(), signal.SIGKILL)
        return 0
    conn.set_progress_handler(tick, 50)
    return conn

backend.SQLiteStore._open = _open
from flow_cli import Engine
from flow_cli.ops.fork import fork_run
from test_fork_crash import runtime

with Engine.open("sqlite:///" + sys.argv[1], [runtime]) as engine:
    fork_run(engine, "original", new_id="copy", from_step="s{last}")
print(counted[0])
"""


def _fork(db: Path, limit: int) -> subprocess.CompletedProcess[str]:
    code = CHILD.format(tests=str(HERE), root=str(HERE.parent), last=STEPS - 1)
    return subprocess.run(
        [sys.executable, "-c", code, str(db), str(limit)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def _copy(engine: Engine) -> list[tuple[str, str]] | None:
    try:
        history = engine.history("copy")
    except RunNotFound:
        return None
    return [(e.event.event_key(), json.dumps(e.event.to_data(), sort_keys=True)) for e in history]


@pytest.mark.slow
def test_a_fork_killed_at_any_point_leaves_no_run_or_a_whole_one(tmp_path: Path) -> None:
    base = tmp_path / "base.db"
    with Engine.open(f"sqlite:///{base}", [runtime]) as engine:
        engine.start("chain", 0, run_id="original")
        engine.tick(until_idle=True)
        assert engine.snapshot("original").outcome is not None
    reference = tmp_path / "reference.db"
    shutil.copy(base, reference)
    done = _fork(reference, 0)
    assert done.returncode == 0, done.stderr
    total = int(done.stdout)
    with Engine.open(f"sqlite:///{reference}", [runtime]) as engine:
        whole = _copy(engine)
    assert whole is not None and len(whole) > STEPS * 2
    outcomes = {"none": 0, "whole": 0}
    for n, limit in enumerate(sorted({max(1, total * k // 16) for k in range(1, 16)})):
        db = tmp_path / f"kill-{n}.db"
        shutil.copy(base, db)
        killed = _fork(db, limit)
        assert killed.returncode in (-signal.SIGKILL, 0), killed.stderr
        with Engine.open(f"sqlite:///{db}", [runtime]) as engine:
            found = _copy(engine)
            assert engine.check_integrity() == []
        assert found is None or found == whole, f"kill after {limit} of {total}: {found}"
        outcomes["none" if found is None else "whole"] += 1
    assert outcomes["none"] > 0  # the kills did land before the end
