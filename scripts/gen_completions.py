#!/usr/bin/env python3
"""Regenerate completions/flow.{bash,zsh,fish} from the flow app.

Usage: python scripts/gen_completions.py [--check]

With --check nothing is written; the exit code is 1 when a file is missing or stale.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from typer.main import get_command  # noqa: E402

from flow_cli.cli.app import app  # noqa: E402
from flow_cli.cli.completion import SHELLS, completion_script  # noqa: E402

DIRECTORY = ROOT / "completions"


def main(argv: list[str]) -> int:
    check = "--check" in argv
    stale = []
    for shell in SHELLS:
        path = DIRECTORY / f"flow.{shell}"
        text = completion_script(shell, get_command(app))
        current = path.read_text(encoding="utf-8") if path.exists() else None
        if current == text:
            continue
        stale.append(path)
        if not check:
            DIRECTORY.mkdir(exist_ok=True)
            path.write_text(text, encoding="utf-8")
            print(f"wrote {path.relative_to(ROOT)}")
    if check and stale:
        names = ", ".join(str(p.relative_to(ROOT)) for p in stale)
        print(f"stale: {names}; run python scripts/gen_completions.py", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
