"""The completion scripts in ``completions/`` are generated from the app and must be current."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.main import get_command

from flow_cli.cli.app import app
from flow_cli.cli.completion import SHELLS, completion_script

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("shell", SHELLS)
def test_completion_file_is_current(shell: str) -> None:
    path = ROOT / "completions" / f"flow.{shell}"
    assert path.exists(), f"{path} is missing; run python scripts/gen_completions.py"
    assert path.read_text(encoding="utf-8") == completion_script(shell, get_command(app)), (
        f"{path} is stale; run python scripts/gen_completions.py"
    )


def test_the_generator_check_mode_agrees() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gen_completions.py"), "--check"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert (done.returncode, done.stderr) == (0, "")


def test_completion_answers_with_commands_and_options(tmp_path: Path) -> None:
    """The scripts call back into flow; check that it answers the way they expect."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FLOW_", "_FLOW_"))}
    env.update(
        PYTHONPATH=str(ROOT),
        _FLOW_COMPLETE="complete_bash",
        COMP_WORDS="flow s",
        COMP_CWORD="1",
        XDG_DATA_HOME=str(tmp_path),
    )
    done = subprocess.run(
        [sys.executable, "-m", "flow_cli"],
        cwd=tmp_path, env=env, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["start", "signal", "show", "step", "schedule"]
    env.update(COMP_WORDS="flow runs --status C", COMP_CWORD="3")
    done = subprocess.run(
        [sys.executable, "-m", "flow_cli"],
        cwd=tmp_path, env=env, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.stdout.split() == ["Cancelling", "Completed", "Cancelled", "ContinuedAsNew"]
