#!/usr/bin/env bash
# The whole test suite: lint, types, then pytest. Installs what it needs into .venv first.
# PostgreSQL tests run when FLOW_TEST_POSTGRES names a server (and fail if it is unreachable).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/bootstrap.sh
echo "== ruff"
.venv/bin/ruff check .
.venv/bin/ruff format --check .
echo "== mypy --strict flow_cli"
.venv/bin/mypy flow_cli
echo "== pytest"
.venv/bin/pytest "$@"
