"""Command-line problems found in review: each test pins one fix.

stdout, stderr and the exit code are asserted separately; an error is one ``error: ...`` line,
exit 2 for input the caller can fix, and nothing is written to the database.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from cli_helpers import FlowProject, Result


@pytest.fixture
def project(tmp_path: Path) -> FlowProject:
    return FlowProject(tmp_path)


def run_raw(
    project: FlowProject,
    *args: str,
    stdin: bytes | None = None,
    env: dict[str, str | None] | None = None,
) -> Result:
    """``flow ARGS`` as a real process; ``stdin`` as bytes, arguments through ``os.fsencode``.

    ``env`` overrides the project's environment; ``None`` as a value removes the variable.
    """
    environment = dict(project.env)
    for key, value in (env or {}).items():
        if value is None:
            environment.pop(key, None)
        else:
            environment[key] = value
    done = subprocess.run(
        [sys.executable, "-m", "flow_cli", *args],
        cwd=project.root,
        env=environment,
        input=stdin or b"",
        capture_output=True,
        timeout=60,
        check=False,
    )
    return Result(done.returncode, done.stdout.decode(), done.stderr.decode())


def test_text_that_is_not_valid_unicode_is_an_input_error(project: FlowProject) -> None:
    project.setup("start", "approval", "--id", "a")
    before = project.dump()
    # A JSON escape of a lone UTF-16 surrogate, and bytes that are not UTF-8 (in an argument,
    # on stdin): none of them can be stored as text.
    cases = [
        (("start", "two-step", "--input", '"\\ud800"'), None),
        (("signal", "a", "approve", "--payload", '{"x": "\\udc00"}'), None),
        (("start", "two-step", "--input", "-"), b'"\xff"'),
        (("start", "two-step", "--id", "caf\udce9"), None),
        (("signal", "a", "appr\udcffove"), None),
        (("show", "\udcff"), None),
    ]
    for args, stdin in cases:
        result = run_raw(project, *args, stdin=stdin)
        assert (result.code, result.stdout) == (2, ""), (args, result.stderr)
        line = result.error_line()
        assert "unexpected" not in line and "not valid Unicode" in line, line
    assert project.dump() == before


def test_an_empty_run_id_is_refused_not_replaced_by_a_random_one(project: FlowProject) -> None:
    # `flow start two-step --id "$ORDER_ID"` with the variable unset must not start a fresh run
    # under a random id on every retry of the script.
    result = project.run("start", "two-step", "--id", "")
    assert (result.code, result.stdout) == (2, "")
    assert result.error_line() == (
        "error: --id is empty; give the run id, or leave --id out for a generated one."
    )
    assert not project.db.exists()


def test_runs_table_fits_80_columns_and_never_wraps_when_piped(project: FlowProject) -> None:
    project.setup("start", "parent", "--id", "order-2026-12-0001")
    project.setup("start", "broken", "--id", "broken-order-2026-12-0002")
    project.setup("tick", "--until-idle")

    # An 80-column terminal (Rich reads COLUMNS): every status and time shows in full, no
    # column is squeezed to an ellipsis, and the failing message is readable.
    narrow = run_raw(project, "runs", env={"COLUMNS": "80"})
    assert (narrow.code, narrow.stderr) == (0, "")
    lines = narrow.stdout.splitlines()
    assert max(len(line) for line in lines) <= 80
    assert "…" not in narrow.stdout
    assert sum("Completed" in line for line in lines) == 2
    assert sum("2026-" in line and " cli-1 " in line for line in lines) == 3
    assert "ValueError" in narrow.stdout

    # Piped with no COLUMNS (a script, grep, a file): one line per run, nothing cut.
    piped = run_raw(project, "runs", env={"COLUMNS": None})
    assert (piped.code, piped.stderr) == (0, "")
    rows = {line.split()[0]: line for line in piped.stdout.splitlines() if "-2026-" in line}
    assert set(rows) == {
        "order-2026-12-0001",
        "order-2026-12-0001/kid",
        "broken-order-2026-12-0002",
    }
    assert rows["order-2026-12-0001/kid"].split()[1:3] == ["two-step", "Completed"]
    assert "⚠ ValueError: boom [red]not markup[/red]" in rows["broken-order-2026-12-0002"]
    history = run_raw(project, "history", "order-2026-12-0001/kid", env={"COLUMNS": None})
    first = next(line for line in history.stdout.splitlines() if "run_started" in line)
    assert first.rstrip().endswith('input {"n":1}')

    # Nothing failing: no empty "failing" column taking room.
    healthy = run_raw(project, "runs", "--status", "completed", env={"COLUMNS": "80"})
    assert "failing" not in healthy.stdout


def test_a_runtime_module_that_exits_while_imported_is_a_config_error(tmp_path: Path) -> None:
    # A module that calls sys.exit() at import (a script-like guard) used to end flow with its
    # code (3 reads as "replay-check found a divergence") and no message at all.
    config = '[flow]\nruntimes = ["exiting:runtime"]\n'
    project = FlowProject(tmp_path, config)
    (tmp_path / "exiting.py").write_text("import sys\n\nsys.exit(3)\n", encoding="utf-8")
    result = project.run("start", "two-step")
    assert (result.code, result.stdout) == (2, "")
    assert result.error_line() == (
        f"error: {project.config.name}: importing 'exiting' for runtime 'exiting:runtime' "
        "failed: SystemExit: 3."
    )
    assert not project.db.exists()


def test_worker_stop_summary_is_plural_aware() -> None:
    from flow_cli.cli.cmd_drive import stopped_summary
    from flow_cli.engine.worker import WorkerStats

    assert stopped_summary(WorkerStats(runs_decided=1, steps_run=1, store_errors=1)) == (
        "worker stopped: 1 run decided, 1 step run, 1 database error"
    )
    assert stopped_summary(WorkerStats(runs_decided=2, steps_run=0, store_errors=3)) == (
        "worker stopped: 2 runs decided, 0 steps run, 3 database errors"
    )


def test_input_file_and_stdin_with_a_utf8_byte_order_mark_are_read(project: FlowProject) -> None:
    # Windows editors and PowerShell's `Out-File -Encoding utf8` start UTF-8 files with a BOM.
    (project.root / "bom.json").write_bytes('\ufeff{"n": 2, "note": "été"}'.encode())
    started = project.run("start", "two-step", "--id", "bom", "--input", "@bom.json")
    assert (started.code, started.stdout, started.stderr) == (0, "bom\n", "")
    piped = run_raw(
        project, "start", "two-step", "--id", "bom-stdin", "--input", "-",
        stdin='\ufeff{"n": 3}'.encode(),
    )  # fmt: skip
    assert (piped.code, piped.stdout, piped.stderr) == (0, "bom-stdin\n", "")
    assert project.setup("show", "bom", "--json").json()["input"] == {"n": 2, "note": "été"}
    assert project.setup("show", "bom-stdin", "--json").json()["input"] == {"n": 3}


def test_usage_lines_name_arguments_as_the_help_text_does(project: FlowProject) -> None:
    expected = {
        ("start",): ("Usage: flow start [OPTIONS] [WORKFLOW]", "Create a run of WORKFLOW"),
        ("signal",): ("Usage: flow signal [OPTIONS] {RUN} [NAME]", "Deliver signal NAME to RUN"),
        ("hook", "resolve"): ("Usage: flow hook resolve [OPTIONS] {TOKEN}", "hook with TOKEN"),
        ("replay-check",): ("Usage: flow replay-check [OPTIONS] [RUN]...", "build B"),
    }
    for command, (usage, words) in expected.items():
        result = project.invoke(*command, "--help")
        assert (result.code, result.stderr) == (0, "")
        assert result.stdout.splitlines()[0] == usage, result.stdout
        assert words in result.stdout


def test_export_to_dash_writes_stdout_like_input_dash_reads_stdin(project: FlowProject) -> None:
    project.setup("start", "two-step", "--id", "e")
    project.setup("tick", "--until-idle")
    result = project.run("export", "e", "-o", "-")
    assert (result.code, result.stderr) == (0, "")
    assert result.json()["run_id"] == "e"
    assert not (project.root / "-").exists()
