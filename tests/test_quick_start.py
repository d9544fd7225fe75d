"""The README's first quick-start command, run as a user would: the demo reaches Completed."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.slow


def test_demo_script_runs_the_order_flow_to_completed() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLOW_")}
    done = subprocess.run(
        ["bash", str(ROOT / "scripts" / "demo.sh")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=280,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "order order-2026-0001: Completed" in done.stdout
    assert "replay cleanly against build shop-2026.12.1" in done.stdout
    assert "(exit code 3)" in done.stdout  # the broken build is caught
    assert "Traceback" not in done.stdout + done.stderr
