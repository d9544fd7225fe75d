"""Read commands work on a read-only database (issue 8, defect 5).

`flow runs`, `show`, `history`, `result` (issue 25), `export`, `replay-check --all`, `doctor`,
`builds`, `workers` and `upgrade --dry-run` open SQLite with ``mode=ro``; where even that cannot
open the file (a WAL database in a read-only directory or mount, whose ``-shm`` cannot be
created) they fall back to ``immutable=1`` unless a ``-wal`` file holds commits that are not in
the main file yet.

Tests run as root in CI, and root ignores file permissions: the directory is made read-only with
a read-only bind mount when the test may mount, and with chmod when it does not run as root.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from cli_helpers import FlowProject

from flow_cli.errors import StoreError
from flow_cli.model.clock import ManualClock
from flow_cli.model.spec import WorkflowSpec
from flow_cli.store import open_store
from flow_cli.store.protocol import NewRun, RunFilter
from flow_cli.store.sqlite import SQLiteStore

READS = (
    ("runs",),
    ("show", "r"),
    ("history", "r"),
    ("result", "r"),
    ("result", "r", "--wait", "--timeout", "5s"),
    ("export", "r"),
    ("replay-check", "--all", "--build-id", "cli-1"),
    ("doctor",),
    ("builds",),
    ("workers",),
    ("upgrade", "--from", "cli-1", "--to", "cli-1-compatible", "--dry-run"),
)


def _new_run(run_id: str) -> NewRun:
    spec = WorkflowSpec(workflow="two-step", input=None, runtime_build_id="cli-1")
    return NewRun(run_id=run_id, spec=spec, seed="00", decide_at=None)


def test_a_read_only_store_refuses_every_write(tmp_path: Path) -> None:
    SQLiteStore(tmp_path / "flow.db").close()
    before = (tmp_path / "flow.db").read_bytes()
    store = open_store(f"sqlite:///{tmp_path / 'flow.db'}", create=False, read_only=True)
    assert isinstance(store, SQLiteStore) and store.read_only
    with pytest.raises(StoreError, match="was opened read-only; this command cannot write"):
        store.create_run(_new_run("r"), ManualClock().now())
    assert store.find_runs(RunFilter()) == []
    store.close()
    assert (tmp_path / "flow.db").read_bytes() == before


def test_read_only_never_creates_a_database(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="No Flow database"):
        open_store(f"sqlite:///{tmp_path / 'missing.db'}", create=True, read_only=True)
    assert not (tmp_path / "missing.db").exists()


@pytest.fixture
def project(tmp_path: Path) -> FlowProject:
    project = FlowProject(tmp_path / "project")
    return project


def _read_only_view(source: Path, target: Path) -> Iterator[Path]:
    """``source`` seen read-only at ``target``: a bind mount (root) or chmod (other users)."""
    target.mkdir()
    if os.geteuid() != 0:
        shutil.copytree(source, target, dirs_exist_ok=True)
        for path in target.iterdir():
            path.chmod(0o444)
        target.chmod(0o555)
        try:
            yield target
        finally:
            target.chmod(0o755)
        return
    if shutil.which("mount") is None:
        pytest.skip("running as root without mount: cannot make a directory read-only")
    bind = subprocess.run(["mount", "--bind", str(source), str(target)], capture_output=True)
    if bind.returncode != 0:
        pytest.skip(f"running as root and cannot mount: {bind.stderr.decode().strip()}")
    try:
        remount = subprocess.run(
            ["mount", "-o", "remount,bind,ro", str(target)], capture_output=True
        )
        if remount.returncode != 0:
            pytest.skip(f"cannot remount read-only: {remount.stderr.decode().strip()}")
        yield target
    finally:
        subprocess.run(["umount", str(target)], check=True)


@pytest.fixture
def read_only_dir(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    """(a writable directory, the same directory read-only)."""
    source = tmp_path / "data"
    source.mkdir()
    yield from ((source, view) for view in _read_only_view(source, tmp_path / "ro"))


def test_read_commands_work_on_a_read_only_directory(
    tmp_path: Path, read_only_dir: tuple[Path, Path]
) -> None:
    source, view = read_only_dir
    project = FlowProject(tmp_path)
    db = source / "flow.db"
    url = f"sqlite:///{db}"
    project.setup("--db", url, "start", "two-step", "--id", "r")
    project.setup("--db", url, "tick", "--until-idle")
    if os.geteuid() != 0:  # chmod: the view is a copy made now
        shutil.copy(db, view / "flow.db")
    ro_url = f"sqlite:///{view / 'flow.db'}"
    with pytest.raises(OSError):
        (view / "probe").write_text("x")
    for args in READS:
        result = project.run("--db", ro_url, *args)
        assert result.code == 0, (args, result.stderr)
    assert project.run("--db", ro_url, "show", "r", "--json").json()["status"] == "Completed"
    refused = project.run("--db", ro_url, "signal", "r", "go")
    assert refused.code == 1 and refused.error_line().startswith("error: ")


def test_uncheckpointed_wal_in_a_read_only_directory_is_explained(
    tmp_path: Path, read_only_dir: tuple[Path, Path]
) -> None:
    source, view = read_only_dir
    live = tmp_path / "live"
    live.mkdir()
    store = SQLiteStore(live / "flow.db")
    store._conn().execute("PRAGMA wal_autocheckpoint = 0")
    store.create_run(_new_run("r"), ManualClock().now())
    # Copy the main file and its -wal while the writer still has them open (as a backup
    # tool or a crashed machine would leave them): the run is only in the -wal file.
    shutil.copy(live / "flow.db", source / "flow.db")
    shutil.copy(live / "flow.db-wal", source / "flow.db-wal")
    store.close()
    if os.geteuid() != 0:
        pytest.skip("the chmod view is a copy taken before the files existed")
    url = f"sqlite:///{view / 'flow.db'}"
    try:
        reader = open_store(url, create=False, read_only=True)
    except StoreError as exc:
        assert "holds commits not yet in the main file" in str(exc), str(exc)
    else:  # this SQLite reads the -wal without a -shm file: then it must see the run
        assert [r.run_id for r in reader.find_runs(RunFilter())] == ["r"]
        reader.close()
