"""Helpers for the command-line tests: a project directory and ways to run ``flow`` in it.

``FlowProject.run`` starts a real ``python -m flow_cli`` process (what users run);
``FlowProject.invoke`` runs the app in-process with Typer's ``CliRunner`` (faster, same code
path through ``FlowGroup.main``). Both return stdout, stderr and the exit code separately.
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
TESTS = Path(__file__).resolve().parent
ANSI = re.compile(r"\x1b\[")

CONFIG = """\
[flow]
database = "sqlite:///flow.db"
build_id = "cli-1"
runtimes = ["cli_workflows:runtime", "cli_workflows:compatible", "cli_workflows:incompatible"]
"""


@dataclass(frozen=True, slots=True)
class Result:
    code: int
    stdout: str
    stderr: str

    def json(self) -> Any:
        return json.loads(self.stdout)

    def error_line(self) -> str:
        """The one error line (fails when stderr is anything else)."""
        lines = self.stderr.splitlines()
        if len(lines) != 1 or not lines[0].startswith("error: "):
            raise AssertionError(f"expected one 'error: ...' line on stderr, got {self.stderr!r}")
        if "Traceback" in self.stderr:
            raise AssertionError(f"traceback on stderr: {self.stderr!r}")
        return lines[0]


class FlowProject:
    """A directory with a ``flow.toml`` naming ``tests/cli_workflows.py`` and a SQLite file."""

    def __init__(self, root: Path, config: str = CONFIG) -> None:
        self.root = root
        self.db = root / "flow.db"
        self.config = root / "flow.toml"
        self.config.write_text(config, encoding="utf-8")
        env = {k: v for k, v in os.environ.items() if not k.startswith(("FLOW_", "_FLOW_"))}
        env.update(
            PYTHONPATH=os.pathsep.join([str(REPO), str(TESTS)]),
            XDG_DATA_HOME=str(root / "xdg-data"),  # never the real user data directory
            COLUMNS="200",
            NO_COLOR="1",
            PYTHONDONTWRITEBYTECODE="1",
        )
        env.pop("FORCE_COLOR", None)
        self.env = env

    def run(
        self,
        *args: str,
        stdin: str | None = None,
        env: dict[str, str] | None = None,
        timeout: float = 60,
    ) -> Result:
        """Run ``flow ARGS`` as a real process with the project as working directory."""
        done = subprocess.run(
            [sys.executable, "-m", "flow_cli", *args],
            cwd=self.root,
            env={**self.env, **(env or {})},
            input=stdin,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        return Result(done.returncode, done.stdout, done.stderr)

    def popen(self, *args: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [sys.executable, "-m", "flow_cli", *args],
            cwd=self.root,
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def invoke(self, *args: str, stdin: str | None = None) -> Result:
        """Run the app in-process (CliRunner) against this project's config and database."""
        from typer.testing import CliRunner

        from flow_cli.cli.app import app

        runner = CliRunner()
        result = runner.invoke(
            app,
            ["--config", str(self.config), "--db", f"sqlite:///{self.db}", *args],
            input=stdin,
            env={"NO_COLOR": "1", "COLUMNS": "200"},
            prog_name="flow",
        )
        if result.exception is not None and not isinstance(result.exception, SystemExit):
            raise result.exception
        return Result(result.exit_code, result.stdout, result.stderr)

    # -- assertions helpers --------------------------------------------------------------------

    def ok(self, *args: str, stdin: str | None = None) -> Result:
        result = self.run(*args, stdin=stdin)
        if result.code != 0:
            raise AssertionError(f"flow {' '.join(args)} exited {result.code}: {result.stderr}")
        return result

    def setup(self, *args: str, stdin: str | None = None) -> Result:
        """Run a command in-process that must succeed (arranging a test, not testing it)."""
        result = self.invoke(*args, stdin=stdin)
        if result.code != 0:
            raise AssertionError(f"flow {' '.join(args)} exited {result.code}: {result.stderr}")
        return result

    def history_keys(self, run_id: str) -> list[str]:
        return [e["event_key"] for e in self.setup("history", run_id, "--json").json()]

    def dump(self) -> list[tuple[Any, ...]]:
        """Every event row in the database, read directly (to prove nothing was written)."""
        with sqlite3.connect(self.db) as conn:
            return conn.execute(
                "SELECT run_id, sequence, event_key, data FROM events ORDER BY run_id, sequence"
            ).fetchall()

    def snapshot_files(self) -> dict[str, bytes]:
        """The database file and its WAL, byte for byte."""
        return {
            p.name: p.read_bytes()
            for p in sorted(self.root.glob("flow.db*"))
            if p.name.endswith((".db", "-wal"))
        }
