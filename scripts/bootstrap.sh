#!/usr/bin/env bash
# Creates .venv (Python 3.11+) and installs Flow with its development tools into it.
# Sourced by the other scripts; safe to run again (pip skips what is already installed).
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
.venv/bin/python -m pip install --quiet --disable-pip-version-check --upgrade pip
.venv/bin/python -m pip install --quiet --disable-pip-version-check -e '.[dev]'
