#!/usr/bin/env bash
# The whole test suite: lint, types, then pytest. Installs what it needs into .venv first.
# PostgreSQL tests run when FLOW_TEST_POSTGRES names a server (and fail if it is unreachable).
# FLOW_TEST_PROCESSES sets how many pytest processes share the work (default 2).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/bootstrap.sh
echo "== ruff"
.venv/bin/ruff check .
.venv/bin/ruff format --check .
echo "== mypy --strict flow_cli"
.venv/bin/mypy flow_cli
echo "== pytest"
# Two processes: much of the suite waits on real workers, timers and leases, not on the CPU.
# A test marked exclusive needs the shared PostgreSQL server to itself (it stops the server,
# or opens 100 connections), so those run alone afterwards
# (exit code 5 there means none was selected, as when the arguments name other tests).
.venv/bin/pytest -n "${FLOW_TEST_PROCESSES:-2}" -m "not exclusive" "$@"
status=0
.venv/bin/pytest -m exclusive "$@" || status=$?
if [ "$status" -ne 0 ] && [ "$status" -ne 5 ]; then
    exit "$status"
fi
