"""``flow replay-check --file`` with hostile files (issue 25, item 8): each bad file gets its own
error line, the others are still checked, exit 2; only regular files of at most
``MAX_EXPORT_BYTES`` are read, so a FIFO never hangs it and ``/dev/zero`` never fills memory."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from cli_helpers import FlowProject

from flow_cli.engine import export
from flow_cli.engine.regular_file import read_regular_file
from flow_cli.errors import InputError

BUILD = ("--build-id", "cli-1")


@pytest.fixture
def project(tmp_path: Path) -> FlowProject:
    """One completed run, exported to ``histories/good.json``."""
    project = FlowProject(tmp_path)
    project.setup("start", "two-step", "--id", "good", "--input", '{"n": 3}')
    project.setup("tick", "--until-idle")
    (tmp_path / "histories").mkdir()
    project.setup("export", "good", "-o", str(tmp_path / "histories" / "good.json"))
    return project


def _good(project: FlowProject) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((project.root / "histories" / "good.json").read_text())
    return data


def _write(project: FlowProject, name: str, document: dict[str, Any]) -> Path:
    path = project.root / "histories" / name
    path.write_text(json.dumps(document), encoding="utf-8")
    return path


def test_a_history_not_numbered_from_1_is_one_bad_file_among_others(
    project: FlowProject,
) -> None:
    good = _good(project)
    shifted = {**good, "run_id": "shifted"}
    shifted["events"] = [{**e, "sequence": e["sequence"] + 4} for e in good["events"]]
    headless = {**good, "run_id": "headless"}
    headless["events"] = [{**e, "sequence": n} for n, e in enumerate(good["events"][1:], 1)]
    a = _write(project, "a-shifted.json", shifted)
    b = _write(project, "b-headless.json", headless)
    result = project.run("replay-check", "--file", str(project.root / "histories"), *BUILD)
    assert result.code == 2
    assert result.stdout == (
        "replay-check: 1 of 1 history replays cleanly against build cli-1; "
        "2 files could not be read\n"
    )
    assert result.stderr.splitlines() == [
        f"error: {a}: event 1 of run 'shifted' has sequence 5; a history is numbered "
        "1, 2, 3, ... without gaps",
        f"error: {b}: the history of run 'headless' starts with 'step_scheduled', not "
        "'run_started'",
    ]
    assert "Traceback" not in result.stderr and "unexpected" not in result.stderr


def test_an_unknown_format_version_is_refused(project: FlowProject) -> None:
    future = _write(project, "future.json", {**_good(project), "version": 999})
    unversioned = {k: v for k, v in _good(project).items() if k != "version"}
    bare = _write(project, "bare.json", unversioned)
    for path, shown in ((future, "999"), (bare, "None")):
        result = project.invoke("replay-check", "--file", str(path), *BUILD)
        assert result.code == 2
        assert result.error_line() == (
            f"error: {path} is a `flow export` file of format version {shown}; this Flow reads "
            "version 1 only (a newer Flow wrote it? check it with that Flow)"
        )


def test_a_fifo_is_refused_at_once_alone_and_inside_a_directory(project: FlowProject) -> None:
    fifo = project.root / "histories" / "pipe.json"
    os.mkfifo(fifo)
    alone = project.run("replay-check", "--file", str(fifo), *BUILD, timeout=30)
    assert alone.code == 2
    assert alone.error_line() == (
        f"error: cannot read {fifo}: it is a named pipe (FIFO), not a regular file"
    )
    inside = project.run("replay-check", "--file", str(fifo.parent), *BUILD, timeout=30)
    assert inside.code == 2
    assert inside.stdout.endswith(
        "1 of 1 history replays cleanly against build cli-1; 1 file could not be read\n"
    )
    assert "named pipe (FIFO)" in inside.error_line()


def test_a_link_to_dev_zero_and_a_dangling_link_are_refused(project: FlowProject) -> None:
    zero = project.root / "histories" / "zero.json"
    zero.symlink_to("/dev/zero")
    dangling = project.root / "histories" / "gone.json"
    dangling.symlink_to(project.root / "nowhere.json")
    result = project.run("replay-check", "--file", str(project.root / "histories"), *BUILD)
    assert result.code == 2
    assert result.stderr.splitlines() == [
        f"error: cannot read {dangling}: it is a link to {project.root / 'nowhere.json'}, "
        "which does not exist",
        f"error: cannot read {zero}: it is a character device, not a regular file",
    ]
    globbed = project.run("replay-check", "--file", str(project.root / "histories" / "*"), *BUILD)
    assert globbed.code == 2 and len(globbed.stderr.splitlines()) == 2


def test_a_file_over_the_size_cap_is_refused_unread(
    project: FlowProject, monkeypatch: pytest.MonkeyPatch
) -> None:
    good = project.root / "histories" / "good.json"
    monkeypatch.setattr(export, "MAX_EXPORT_BYTES", 100)
    result = project.invoke("replay-check", "--file", str(good), *BUILD)
    assert result.code == 2
    size = good.stat().st_size
    assert result.error_line() == (
        f"error: cannot read {good}: it holds {size:,} bytes or more, over the limit of 100"
    )
    assert export.MAX_EXPORT_BYTES == 100  # the constant the help text states (64 MiB) ...
    monkeypatch.undo()
    assert export.MAX_EXPORT_BYTES == 64 * 1024 * 1024
    helped = project.invoke("replay-check", "--help")
    assert "at most 64 MiB" in " ".join(helped.stdout.split())


def test_read_regular_file_stops_one_byte_past_the_limit(tmp_path: Path) -> None:
    big = tmp_path / "big.json"
    big.write_bytes(b"x" * 50)
    assert read_regular_file(big, 50) == b"x" * 50
    with pytest.raises(InputError, match="over the limit of 49"):
        read_regular_file(big, 49)
    with pytest.raises(InputError, match="it is a directory, not a regular file"):
        read_regular_file(tmp_path, 10)


def test_a_divergence_still_exits_3_beside_a_bad_file(project: FlowProject) -> None:
    _write(project, "future.json", {**_good(project), "version": 2})
    result = project.run(
        "replay-check", "--file", str(project.root / "histories"), "--build-id", "cli-2"
    )
    assert result.code == 3
    assert result.stdout.splitlines()[-1] == (
        "replay-check: 1 of 1 history diverges from build cli-2 (1 distinct divergence); "
        "1 file could not be read"
    )
    assert "format version 2" in result.error_line()


def test_replay_history_reports_a_history_not_numbered_from_1(project: FlowProject) -> None:
    """The database path has no file check: a bad history there is one broken result."""
    from cli_workflows import runtime

    from flow_cli.engine.replay_check import replay_history
    from flow_cli.model.events import EventEnvelope

    events = [{**e, "sequence": e["sequence"] + 2} for e in _good(project)["events"]]
    history = [EventEnvelope.from_json("good", e) for e in events]
    result = replay_history(runtime, history)
    assert not result.ok
    assert result.error == "run 'good': history must begin with run_started"
