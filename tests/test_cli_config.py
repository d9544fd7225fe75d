"""Configuration of the command line: ``flow init``, ``--db``/``FLOW_DB``, ``--config``/
``FLOW_CONFIG``, the default database location, and start-up cost."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from cli_helpers import REPO, FlowProject

from flow_cli.cli.config import FlowConfig, database_url, read_config


@pytest.fixture
def project(tmp_path: Path) -> FlowProject:
    return FlowProject(tmp_path)


def test_init_writes_a_commented_flow_toml_and_refuses_to_overwrite(tmp_path: Path) -> None:
    project = FlowProject(tmp_path)
    project.config.unlink()
    written = project.run(
        "init", "--runtime", "cli_workflows:runtime", "--runtime", "cli_workflows:compatible",
        "--build-id", "cli-1",
    )  # fmt: skip
    assert (written.code, written.stderr) == (0, "")
    assert written.stdout == "wrote flow.toml\n"
    text = project.config.read_text(encoding="utf-8")
    assert text.startswith("# Flow configuration.")
    assert "# runtimes " in text and "# build_id " in text
    assert tomllib.loads(text) == {
        "flow": {
            "database": "sqlite:///flow.db",
            "build_id": "cli-1",
            "runtimes": ["cli_workflows:runtime", "cli_workflows:compatible"],
        }
    }
    # The written file works as is: the relative database lands next to it.
    assert project.run("start", "two-step", "--id", "i").stdout == "i\n"
    assert project.db.exists()

    refused = project.run("init")
    assert (refused.code, refused.stdout) == (2, "")
    assert refused.error_line() == "error: flow.toml already exists; pass --force to overwrite it."
    assert project.config.read_text(encoding="utf-8") == text
    forced = project.run("init", "--force", "--database", "sqlite:///other.db")
    assert forced.code == 0
    assert tomllib.loads(project.config.read_text(encoding="utf-8")) == {
        "flow": {"database": "sqlite:///other.db", "runtimes": []}
    }


def test_init_honours_config_path(project: FlowProject) -> None:
    target = project.root / "conf" / "custom.toml"
    target.parent.mkdir()
    result = project.invoke("--config", str(target), "init")
    assert result.code == 0
    assert read_config(target, explicit=True).database == "sqlite:///flow.db"


def test_flow_db_and_flow_config_environment_variables(project: FlowProject) -> None:
    other = project.root / "other"
    other.mkdir()
    (other / "settings.toml").write_text(
        '[flow]\ndatabase = "sqlite:///runs.db"\nruntimes = ["cli_workflows:runtime"]\n',
        encoding="utf-8",
    )
    env = {"FLOW_CONFIG": str(other / "settings.toml")}
    started = project.run("start", "two-step", "--id", "env", env=env)
    assert started.code == 0, started.stderr
    assert (other / "runs.db").exists()  # relative to the config file, not the working dir
    assert not project.db.exists()

    via_env = project.run("runs", "--json", env={"FLOW_DB": f"sqlite:///{other / 'runs.db'}"})
    assert [r["run_id"] for r in via_env.json()] == ["env"]
    # --db wins over FLOW_DB.
    flag = project.run(
        "--db", f"sqlite:///{project.root / 'none.db'}", "runs",
        env={"FLOW_DB": f"sqlite:///{other / 'runs.db'}"},
    )  # fmt: skip
    assert flag.code == 1 and "No Flow database at" in flag.error_line()


def test_default_database_is_in_the_user_data_directory(project: FlowProject) -> None:
    project.config.write_text('[flow]\nruntimes = ["cli_workflows:runtime"]\n', encoding="utf-8")
    expected = project.root / "xdg-data" / "flow" / "flow.db"
    missing = project.run("runs")
    assert missing.code == 1
    assert missing.error_line().startswith(f"error: No Flow database at {expected};")
    assert not expected.parent.exists()
    assert project.run("start", "two-step", "--id", "d").code == 0
    assert expected.exists()
    assert [r["run_id"] for r in project.run("runs", "--json").json()] == ["d"]


def test_database_url_precedence_and_relative_paths(tmp_path: Path) -> None:
    config = FlowConfig(
        path=tmp_path / "flow.toml", database="sqlite:///data/f.db?synchronous=NORMAL"
    )
    assert database_url(None, config) == (
        f"sqlite:///{tmp_path / 'data' / 'f.db'}?synchronous=NORMAL",
        None,
    )
    assert database_url("memory://", config) == ("memory://", None)
    absolute = FlowConfig(path=tmp_path / "flow.toml", database="sqlite:////abs/f.db")
    assert database_url(None, absolute)[0] == "sqlite:////abs/f.db"
    postgres = FlowConfig(path=tmp_path / "flow.toml", database="postgresql://h/db")
    assert database_url(None, postgres)[0] == "postgresql://h/db"


def test_a_missing_default_config_file_is_fine(project: FlowProject) -> None:
    project.invoke("start", "two-step", "--id", "x")
    project.config.unlink()
    result = project.run("--db", f"sqlite:///{project.db}", "show", "x", "--json")
    assert (result.code, result.stderr) == (0, "")
    assert result.json()["run_id"] == "x"


def test_version(project: FlowProject) -> None:
    result = project.invoke("--version")
    assert result.code == 0
    assert result.stdout.startswith("flow ")


def test_the_app_imports_no_engine_store_or_rich_at_start_up() -> None:
    """``flow --help`` must stay fast: heavy modules load inside the commands that use them."""
    code = (
        "import sys, flow_cli.cli.app\n"
        "heavy = ['rich', 'sqlite_utils', 'psycopg', 'flow_cli.engine.engine', "
        "'flow_cli.store.sqlite', 'pydantic', 'tomli_w', 'platformdirs']\n"
        "print(','.join(m for m in heavy if m in sys.modules))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == ""
