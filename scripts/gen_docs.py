#!/usr/bin/env python3
"""Regenerate docs/cli.md (the command-line reference) from the flow app.

Usage: python scripts/gen_docs.py [--check]

With --check nothing is written; the exit code is 1 when the file is missing or stale.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from flow_cli.cli.reference import cli_reference  # noqa: E402

PATH = ROOT / "docs" / "cli.md"


def main(argv: list[str]) -> int:
    text = cli_reference()
    current = PATH.read_text(encoding="utf-8") if PATH.exists() else None
    if current == text:
        return 0
    if "--check" in argv:
        print(f"stale: {PATH.relative_to(ROOT)}; run python scripts/gen_docs.py", file=sys.stderr)
        return 1
    PATH.parent.mkdir(exist_ok=True)
    PATH.write_text(text, encoding="utf-8")
    print(f"wrote {PATH.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
