#!/usr/bin/env bash
# Creates .venv (Python 3.11+) and installs Flow with its development tools into it.
# Run by the other scripts; safe to run again. The install is editable, so only a change to
# pyproject.toml (dependencies, entry points) needs pip again: .venv/.flow-installed holds the
# hash of the pyproject.toml last installed, and pip is skipped while it matches.
# FLOW_REINSTALL=1 installs anyway. pip runs with -qq: its errors still show, build chatter not.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
PYTHON="${PYTHON:-python3}"
if ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
    echo "error: Flow needs Python 3.11 or newer ($PYTHON is $("$PYTHON" --version 2>&1))" >&2
    exit 1
fi
if [ ! -x .venv/bin/python ]; then
    "$PYTHON" -m venv .venv
fi
STAMP=.venv/.flow-installed
WANTED="$(.venv/bin/python -c 'import hashlib, sys; print(hashlib.sha256(open("pyproject.toml", "rb").read()).hexdigest())')"
if [ "${FLOW_REINSTALL:-}" != "1" ] && [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$WANTED" ] \
    && [ -x .venv/bin/flow ]; then
    exit 0
fi
rm -f "$STAMP"
.venv/bin/python -m pip install --quiet --quiet --disable-pip-version-check --upgrade pip
.venv/bin/python -m pip install --quiet --quiet --disable-pip-version-check -e '.[dev]'
echo "$WANTED" > "$STAMP"
