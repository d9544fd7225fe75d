"""``flow prune --archive`` killed (SIGKILL) at a handful of points and run again: after each
kill every run is still in the database or archived (its file on disk, whole, with its
manifest line), never neither; the last run finishes the job and the archive verifies clean.
One test per backend (SQLite, PostgreSQL), real processes."""

from __future__ import annotations

import hashlib
import json
import os
import random
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from cli_helpers import FlowProject
from retention_workflows import runtime

from flow_cli.engine.archive import verify
from flow_cli.engine.engine import Engine
from flow_cli.store import open_store
from flow_cli.store.protocol import RunFilter

RUNS = 200
KILLS = 5


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'flow.db'}"
        return
    base = os.environ.get("FLOW_TEST_POSTGRES")
    if not base:
        pytest.skip("set FLOW_TEST_POSTGRES=postgresql://... to run the PostgreSQL store tests")
    sep = "&" if "?" in base else "?"
    full = f"{base}{sep}schema=prune_crash_{uuid.uuid4().hex[:8]}"
    yield full
    store = open_store(full)
    getattr(store, "drop_schema")()  # noqa: B009
    store.close()


def _lines(archive: Path) -> int:
    try:
        return (archive / "MANIFEST.jsonl").read_bytes().count(b"\n")
    except FileNotFoundError:
        return 0


def _archived(archive: Path) -> dict[str, str]:
    """Run id → path of each manifest line whose file is on disk with that sha256."""
    manifest = archive / "MANIFEST.jsonl"
    found: dict[str, str] = {}
    if not manifest.exists():
        return found
    for line in manifest.read_text().splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue  # a torn last line: the next prune cuts it off
        target = archive / entry["path"]
        if target.exists() and hashlib.sha256(target.read_bytes()).hexdigest() == entry["sha256"]:
            found[entry["run_id"]] = entry["path"]
    return found


def test_a_killed_prune_leaves_every_run_present_or_archived(url: str, tmp_path: Path) -> None:
    project = FlowProject(
        tmp_path, f'[flow]\ndatabase = "{url}"\nruntimes = ["retention_workflows:runtime"]\n'
    )
    project.env["FLOW_PRUNE_BATCH"] = "10"
    with Engine.open(url, [runtime]) as engine:
        for n in range(RUNS):
            engine.start("done" if n % 10 else "waiter", {"n": n}, run_id=f"run-{n:03d}")
        every = {r.run_id for r in engine.find_runs(RunFilter())}
        ended = {r.run_id for r in engine.find_runs(RunFilter()) if r.status.terminal}
    assert len(every) == RUNS and len(ended) == RUNS - RUNS // 10
    archive = tmp_path / "archive"
    archive.mkdir()
    prune = ("prune", "--ended-before", "0s", "--archive", str(archive), "--yes")
    chance = random.Random(7)
    kills = interrupted = 0
    for _ in range(KILLS):
        process = project.popen(*prune)
        # Kill once this prune has archived something, a little later: while it writes files,
        # between its archive and its delete, in a delete, in the space given back.
        seen = _lines(archive)
        deadline = time.monotonic() + 30
        while _lines(archive) <= seen and process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.002)
        time.sleep(chance.uniform(0, 0.01))
        if process.poll() is None:
            process.kill()
            kills += 1
        process.communicate(timeout=60)
        with Engine.open(url, [runtime]) as engine:
            present = {r.run_id for r in engine.find_runs(RunFilter())}
        archived = _archived(archive)
        lost = every - present - set(archived)
        assert not lost, f"runs neither in the database nor archived: {sorted(lost)[:5]}"
        assert every - ended <= present  # open runs are never pruned
        interrupted += bool(present & ended)
    assert kills and interrupted, "no prune was killed in the middle of its work"
    final = project.run(*prune)
    assert final.code == 0, final.stderr
    with Engine.open(url, [runtime]) as engine:
        present = {r.run_id for r in engine.find_runs(RunFilter())}
    assert present == every - ended
    assert set(_archived(archive)) == ended
    checked = verify(archive)
    assert (checked.files, checked.problems) == (len(ended), ())
