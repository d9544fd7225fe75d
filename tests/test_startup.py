"""Start-up cost of the command line: what a command imports before it needs it.

Each check runs in a fresh interpreter (``sys.modules`` of this one has everything loaded).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

HEAVY = ["pydantic", "psycopg", "rich.table", "flow_cli.engine.decider", "flow_cli.model.context"]


def _loaded_after(code: str, tmp_path: Path, modules: list[str] = HEAVY) -> dict[str, bool]:
    """Run ``code`` in a new interpreter; which of ``modules`` it left in ``sys.modules``."""
    report = f"print(json.dumps({{m: m in sys.modules for m in {modules!r}}}))"
    script = f"import sys, json\n{code}\n{report}\n"
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        check=True,
        env={"PATH": "/usr/bin:/bin", "NO_COLOR": "1", "HOME": str(tmp_path)},
    )
    result: dict[str, bool] = json.loads(done.stdout.splitlines()[-1])
    return result


def test_importing_the_app_loads_no_engine_store_rich_or_pydantic(tmp_path: Path) -> None:
    modules = [*HEAVY, "flow_cli.engine.engine", "flow_cli.store.protocol", "sqlite_utils"]
    loaded = _loaded_after("import flow_cli.cli.app", tmp_path, modules)
    assert not any(loaded.values()), loaded


def test_version_and_help_load_nothing_heavy(tmp_path: Path) -> None:
    for argv in (["--version"], ["--help"], ["show", "--help"]):
        code = f"from flow_cli.cli.app import main\nmain({argv!r})"
        loaded = _loaded_after(code, tmp_path)
        assert not any(loaded.values()), (argv, loaded)


def test_read_only_commands_leave_out_pydantic_and_the_decider(tmp_path: Path) -> None:
    """``flow show`` needs the store and Rich, not Typer's pydantic coercion nor the decider."""
    from flow_cli.engine.engine import Engine
    from flow_cli.store import open_store

    db = tmp_path / "flow.db"
    Engine(open_store(f"sqlite:///{db}"), []).close()
    url = f"sqlite:///{db}"
    for argv in (
        ["--db", url, "runs"],
        ["--db", url, "runs", "--status", "Running", "--workflow", "w"],
        ["--db", url, "runs", "--status", "Failed", "--limit", "50"],
        ["--db", url, "show", "nope"],
    ):
        code = f"from flow_cli.cli.app import main\nmain({argv!r})"
        loaded = _loaded_after(code, tmp_path)
        assert not loaded["pydantic"], argv
        assert not loaded["flow_cli.engine.decider"], argv
        assert not loaded["psycopg"], argv


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["runs", "--limit", "abc"], "Invalid value for '--limit': Input should be a valid"),
        (["runs", "--limit", "-1"], "Input should be greater than or equal to 0"),
        (["runs", "--limit", "1000000001"], "Input should be less than or equal to 1000000000"),
    ],
)
def test_values_that_need_coercion_still_get_typers(
    tmp_path: Path, argv: list[str], message: str
) -> None:
    code = f"from flow_cli.cli.app import main\nraise SystemExit(main({argv!r}))"
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin", "NO_COLOR": "1", "HOME": str(tmp_path)},
    )
    assert done.returncode == 2, done.stderr
    assert message in done.stderr


@pytest.mark.parametrize(
    ("args", "lean"),
    [
        (["show", "r"], "show"),
        (["--db", "memory://", "--json", "runs"], "runs"),
        (["--db=memory://", "show", "r"], "show"),
        (["--config", "flow.toml", "hook", "list"], "hook"),  # a group: that group alone
        (["--help"], None),
        (["-h", "show"], None),
        (["--version", "--help"], None),
        (["shwo"], None),  # a typo: the whole app suggests "show"
        (["--db"], None),
        ([], None),
    ],
)
def test_a_command_line_naming_a_command_builds_that_command_alone(
    args: list[str], lean: str | None
) -> None:
    from flow_cli.cli.app import app, app_for

    chosen = app_for(args)
    if lean is None:
        assert chosen is app
    else:
        names = [info.name for info in chosen.registered_commands + chosen.registered_groups]
        assert names == [lean]
        assert len(app.registered_commands) > 1


def test_a_command_line_imports_only_the_module_of_its_command(tmp_path: Path) -> None:
    code = "from flow_cli.cli.app import main\nmain(['--db', 'memory://', 'count'])"
    others = ["flow_cli.cli.cmd_schedule", "flow_cli.cli.cmd_bulk", "flow_cli.cli.cmd_fleet"]
    loaded = _loaded_after(code, tmp_path, ["flow_cli.cli.cmd_triage", *others])
    assert loaded == {"flow_cli.cli.cmd_triage": True} | {name: False for name in others}


def test_version_alone_builds_no_command() -> None:
    from flow_cli.cli.app import app, app_for, main

    assert app_for(["--version"]).registered_commands == []
    assert app.registered_commands
    assert main(["--version"]) == 0


def test_a_typer_whose_private_coercion_changed_keeps_its_own(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The deferral leans on Typer's private module; if it no longer fits, commands still run.
    from flow_cli.cli import app as app_module
    from flow_cli.cli import coercion

    def broken(command: object, names: object) -> None:
        raise TypeError("RuntimeParam() takes no argument 'descriptor'")

    monkeypatch.setattr(coercion, "_defer", broken)
    assert app_module.main(["--db", "memory://", "count", "--json"]) == 0


def test_a_path_or_a_number_is_coerced_as_typer_would_without_pydantic(
    tmp_path: Path,
) -> None:
    """``--config``/``FLOW_CONFIG`` and ``--limit N``: the deferred coercion gives Typer's
    own value or message, and a command given them never imports pydantic."""
    import typer.main
    from typer import _click
    from typer._coercion import build_runtime_param

    from flow_cli.cli import app as app_module
    from flow_cli.cli.coercion import defer_adapters

    config = tmp_path / "flow.toml"
    config.write_text("[flow]\n", encoding="utf-8")
    command = typer.main.get_command(app_module.app)
    defer_adapters(command)
    ctx = _click.Context(command)
    param = next(p for p in command.params if p.name == "config")

    def outcome(runtime: Any, value: str) -> object:
        try:
            return runtime.coerce(value, param, ctx)
        except Exception as exc:  # Typer's BadParameter: compare its message
            return str(exc)

    for value in (str(tmp_path), str(tmp_path / "missing.toml"), str(config), "-"):
        typer_own = build_runtime_param(param.type_descriptor)
        assert outcome(param._runtime_param, value) == outcome(typer_own, value), value
    assert "is a directory" in str(outcome(param._runtime_param, str(tmp_path)))

    db = f"sqlite:///{tmp_path / 'flow.db'}"
    argv = ["--config", str(config), "--db", db, "runs", "--limit", "5"]
    loaded = _loaded_after(f"from flow_cli.cli.app import main\nmain({argv!r})", tmp_path)
    assert not loaded["pydantic"]
