"""Every error of the command line: one ``error: ...`` line, the right exit code, no traceback,
and nothing written to the database.

Most cases run in-process through ``CliRunner`` (same ``FlowGroup.main`` path, much faster);
the ones where the real process matters (tracebacks, locks, files) run ``python -m flow_cli``.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
from cli_helpers import FlowProject

NO_RUN = "error: Run 'nope' does not exist. List runs with `flow runs`."


@pytest.fixture
def project(tmp_path: Path) -> FlowProject:
    return FlowProject(tmp_path)


@pytest.fixture
def finished(project: FlowProject) -> Iterator[FlowProject]:
    """A database with a completed two-step run ``done`` and a resolved hook ``tok-done``."""
    project.invoke("start", "two-step", "--id", "done")
    project.invoke("start", "callback", "--id", "cb", "--input", '{"token": "tok-done"}')
    project.invoke("tick", "--until-idle")
    project.invoke("hook", "resolve", "tok-done")
    project.invoke("tick", "--until-idle")
    yield project


# -- bad input -------------------------------------------------------------------------------


def test_bad_json_input_is_exit_2_and_creates_nothing(project: FlowProject) -> None:
    result = project.run("start", "two-step", "--input", "{bad")
    assert (result.code, result.stdout) == (2, "")
    assert result.error_line() == (
        "error: --input is not valid JSON: Expecting property name enclosed in double quotes "
        "(line 1, column 2). Quote strings as JSON, e.g. '\"text\"', or pass @file.json."
    )
    assert not project.db.exists()


def test_bad_json_payloads_and_missing_input_files(finished: FlowProject) -> None:
    before = finished.dump()
    cases = [
        (("start", "two-step", "--input", "@missing.json"), "--input @missing.json: file"),
        (("start", "two-step", "--input", "-"), "--input - (stdin) is not valid JSON"),
        (("signal", "done", "go", "--payload", "yes"), "--payload is not valid JSON"),
        (("hook", "resolve", "tok-done", "--payload", "{"), "--payload is not valid JSON"),
    ]
    for args, start in cases:
        result = finished.invoke(*args, stdin="not json")
        assert (result.code, result.stdout) == (2, ""), args
        assert result.error_line().startswith(f"error: {start}"), result.stderr
    assert finished.dump() == before


def test_unknown_workflow_is_exit_2_before_the_database_is_touched(project: FlowProject) -> None:
    result = project.invoke("start", "nope")
    assert (result.code, result.stdout) == (2, "")
    assert result.error_line() == (
        "error: No runtime defines workflow 'nope'. "
        "Known workflows: approval, broken, callback, parent, sleepy, two-step."
    )
    unknown_build = project.invoke("start", "two-step", "--build-id", "cli-9")
    assert unknown_build.code == 2
    assert unknown_build.error_line() == (
        "error: No runtime with build id 'cli-9' is loaded. "
        "Hosted builds: cli-1, cli-1-compatible, cli-2."
    )
    assert not project.db.exists()


def test_unknown_run_is_exit_2(finished: FlowProject) -> None:
    real = finished.run("show", "nope")
    assert (real.code, real.stdout) == (2, "")
    assert real.error_line() == NO_RUN
    before = finished.dump()
    for args in (
        ("history", "nope"),
        ("history", "nope", "--follow"),
        ("export", "nope"),
        ("signal", "nope", "go"),
        ("cancel", "nope"),
        ("show", "nope", "--json"),
        ("replay-check", "nope", "--build-id", "cli-1"),
    ):
        result = finished.invoke(*args)
        assert (result.code, result.stdout) == (2, ""), args
        assert result.error_line() == NO_RUN, args
    assert finished.dump() == before


def test_usage_errors_are_one_line_exit_2(project: FlowProject) -> None:
    cases = [
        (("show",), "error: Missing argument 'RUN'. (see 'flow show --help')"),
        (("runs", "--bogus"), "error: No such option: --bogus (see 'flow runs --help')"),
        (("shw",), "error: No such command 'shw'. Did you mean 'show'? (see 'flow --help')"),
        (("replay-check",), "error: No histories selected"),
    ]
    for args, expected in cases:
        result = project.run(*args) if args == ("show",) else project.invoke(*args)
        assert (result.code, result.stdout) == (2, ""), args
        assert result.error_line().startswith(expected), result.stderr
    status = project.invoke("runs", "--status", "bogus")
    assert status.code == 2
    assert "'bogus' is not one of" in status.error_line()


# -- the operation fails ---------------------------------------------------------------------


def test_signal_of_a_finished_run_is_exit_1_and_cancel_is_skipped(finished: FlowProject) -> None:
    before = finished.dump()
    real = finished.run("signal", "done", "approve")
    assert (real.code, real.stdout) == (1, "")
    assert real.error_line() == (
        "error: Run 'done' has already ended (Completed); cannot signal 'approve'."
    )
    # A signal to an ended run is lost, a failure; the end a cancel asks for is already there.
    cancelled = finished.invoke("cancel", "done")
    assert (cancelled.code, cancelled.stderr) == (0, "")
    assert cancelled.stdout == "cancellation of run done skipped: already Completed\n"
    assert finished.dump() == before


def test_hook_resolve_unknown_and_already_resolved_tokens(finished: FlowProject) -> None:
    before = finished.dump()
    unknown = finished.run("hook", "resolve", "no-such-token")
    assert (unknown.code, unknown.stdout) == (2, "")
    assert unknown.error_line() == (
        "error: No hook has token 'no-such-token'. Check the token in `flow show RUN` (hooks)."
    )
    wrong_run = finished.invoke("hook", "resolve", "tok-done", "--run", "done")
    assert wrong_run.code == 2
    assert "token 'tok-done' belongs to run 'cb', not to run 'done'" in wrong_run.error_line()
    again = finished.invoke("hook", "resolve", "tok-done")
    assert (again.code, again.stdout) == (1, "")
    assert again.error_line() == (
        "error: Hook 'callback' of run 'cb' (token 'tok-done') was already resolved; "
        "a hook takes exactly one callback."
    )
    assert finished.dump() == before


def test_locked_database_is_exit_1_and_writes_nothing(project: FlowProject) -> None:
    project.invoke("start", "approval", "--id", "a")
    project.invoke("tick", "--until-idle")
    before = project.dump()
    holder = sqlite3.connect(project.db, isolation_level=None)
    try:
        holder.execute("BEGIN EXCLUSIVE")
        url = f"sqlite:///{project.db}?busy_timeout_ms=200"
        locked = project.run("--db", url, "signal", "a", "approve")
        reading = project.run("--db", url, "show", "a", "--json")  # WAL: readers still read
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert (locked.code, locked.stdout) == (1, "")
    assert locked.error_line() == (
        f"error: Flow database {project.db} is locked by another connection; gave up after "
        "200 ms (retry, or raise the busy timeout)."
    )
    assert reading.code == 0 and reading.json()["status"] == "Suspended"
    assert project.dump() == before


def test_missing_database_is_exit_1_and_is_not_created(project: FlowProject) -> None:
    missing = project.root / "missing.db"
    url = f"sqlite:///{missing}"
    expected = (
        f"error: No Flow database at {missing}; run `flow start` to create one, "
        "or pass --db to point at an existing database."
    )
    real = project.run("--db", url, "runs")
    assert (real.code, real.stdout) == (1, "")
    assert real.error_line() == expected
    for args in (
        ("show", "x"),
        ("history", "x"),
        ("history", "x", "--follow"),
        ("export", "x"),
        ("replay-check", "--all", "--build-id", "cli-1"),
        ("signal", "x", "go"),
        ("hook", "resolve", "tok"),
        ("cancel", "x"),
    ):
        result = project.invoke("--db", url, *args)  # the later --db wins
        assert (result.code, result.stdout) == (1, ""), args
        assert result.error_line() == expected, args
    assert not missing.exists()


# -- configuration ---------------------------------------------------------------------------


def _config(project: FlowProject, text: str) -> None:
    project.config.write_text(text, encoding="utf-8")


def test_config_naming_a_module_that_does_not_import(project: FlowProject) -> None:
    project.invoke("start", "approval", "--id", "kept")
    before = project.dump()
    _config(project, '[flow]\ndatabase = "sqlite:///flow.db"\nruntimes = ["no_such_mod:runtime"]\n')
    real = project.run("tick")
    assert (real.code, real.stdout) == (2, "")
    assert real.error_line() == (
        "error: flow.toml: cannot import module 'no_such_mod' for runtime 'no_such_mod:runtime' "
        "(run flow from your project directory or add it to PYTHONPATH)."
    )
    for ref, message in (
        ("cli_workflows:nothing", "module 'cli_workflows' has no attribute 'nothing'"),
        ("cli_workflows:not_a_runtime", "is a dict, not a flow_cli.Runtime"),
        ("cli_workflows", 'must look like "package.module:attribute"'),
    ):
        _config(project, f'[flow]\ndatabase = "sqlite:///flow.db"\nruntimes = ["{ref}"]\n')
        result = project.invoke("start", "approval")
        assert result.code == 2
        assert message in result.error_line(), result.stderr
    # Read-only commands never import the runtimes: they keep working.
    listed = project.invoke("runs", "--json")
    assert listed.code == 0 and [r["run_id"] for r in listed.json()] == ["kept"]
    assert project.dump() == before


def test_module_raising_on_import_is_one_line(project: FlowProject) -> None:
    (project.root / "explodes.py").write_text("raise RuntimeError('kaboom\\nsecond line')\n")
    _config(project, '[flow]\nruntimes = ["explodes:runtime"]\n')
    result = project.run("tick")
    assert result.code == 2
    assert result.error_line() == (
        "error: flow.toml: importing 'explodes' for runtime 'explodes:runtime' failed: "
        "RuntimeError: kaboom."
    )


def test_bad_config_files(project: FlowProject) -> None:
    missing = project.invoke("--config", str(project.root / "nope.toml"), "runs")
    assert missing.code == 2
    assert missing.error_line() == (
        f"error: Config file {project.root / 'nope.toml'} does not exist "
        "(from --config/FLOW_CONFIG)."
    )
    _config(project, "[flow\n")
    broken = project.invoke("runs")
    assert broken.code == 2
    assert "is not valid TOML: Expected ']'" in broken.error_line()
    _config(project, '[flow]\nbuild_id = "cli-9"\nruntimes = ["cli_workflows:runtime"]\n')
    unhosted = project.invoke("start", "two-step")
    assert unhosted.code == 2
    assert unhosted.error_line() == (
        "error: No runtime with build id 'cli-9' is loaded. Hosted builds: cli-1."
    )
    _config(project, "[flow]\n")
    nothing = project.invoke("start", "two-step")
    assert nothing.code == 2
    assert nothing.error_line().startswith("error: No runtimes are configured: add runtimes")
    assert not project.db.exists()


def test_unknown_config_keys_are_a_warning(project: FlowProject) -> None:
    project.invoke("start", "two-step", "--id", "x")
    _config(project, '[flow]\ndatabse = "sqlite:///x.db"\n')
    result = project.invoke("runs", "--json")
    assert result.code == 0
    assert [r["run_id"] for r in result.json()] == ["x"]
    assert result.stderr == f"warning: {project.config}: unknown [flow] keys ignored: databse\n"
