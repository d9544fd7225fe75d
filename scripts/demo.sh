#!/usr/bin/env bash
# Runs the example order flow end to end on the embedded SQLite default, from a fresh clone.
# Installs what it needs into .venv, keeps its database in .flow-demo/ (deleted on each run).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/bootstrap.sh
rm -rf .flow-demo && mkdir -p .flow-demo
export PATH="$PWD/.venv/bin:$PATH"
export FLOW_CONFIG=workflows_example/flow.toml
export FLOW_EXAMPLE_LEDGER=.flow-demo/ledger.jsonl
RUN=order-2026-0001

say() { printf '\n\033[1m$ %s\033[0m\n' "$*"; }
json_field() { python3 -c "import json,sys; d=json.load(sys.stdin); print(eval(sys.argv[1], {}, {'d': d}))" "$1"; }

say flow start order --id $RUN --input @workflows_example/order-2026-0001.json
flow start order --id $RUN --input @workflows_example/order-2026-0001.json

say flow tick --until-idle
flow tick --until-idle

say flow query $RUN status   # the order's own answer; nothing is written
flow query $RUN status

TOKEN=$(flow show $RUN --json | json_field 'd["hooks"]["approval"]["token"]')
say flow hook resolve "$TOKEN" --payload '{"approved": true, "by": "ops@example.com"}'
flow hook resolve "$TOKEN" --payload '{"approved": true, "by": "ops@example.com"}'

# The example card times out twice: retries are durable timers (2 s, then 4 s). Tick until the
# run waits for the warehouse's "shipped" signal.
say "flow tick --until-idle   # repeated while payment retries back off"
for _ in $(seq 1 30); do
    flow tick --until-idle >/dev/null
    open=$(flow show $RUN --json | json_field '"shipped" in d["signals"]["waits"]')
    [ "$open" = "True" ] && break
    sleep 1
done
flow show $RUN

say flow update $RUN change-address --args '{"address": "Rua do Ouro 40, Lisboa"}' --id addr-1
flow update $RUN change-address --args '{"address": "Rua do Ouro 40, Lisboa"}' --id addr-1
say "flow update $RUN change-address --args '{\"address\": \"Rua do Ouro 40, Lisboa\"}' --id addr-1 --json   # same id: recorded answer, nothing written"
flow update $RUN change-address --args '{"address": "Rua do Ouro 40, Lisboa"}' --id addr-1 --json
say flow query $RUN status
flow query $RUN status

say "flow signal $RUN shiped   # a misspelled name: refused (exit 2), nothing written"
flow signal $RUN shiped || echo "(exit code $?)"
say flow signal $RUN shipped --payload '{"tracking": "TRK-1"}'
flow signal $RUN shipped --payload '{"tracking": "TRK-1"}'
say flow tick --until-idle
flow tick --until-idle

say flow show $RUN
flow show $RUN
say flow history $RUN
flow history $RUN

say flow replay-check --all --build-id shop-2026.12.1
flow replay-check --all --build-id shop-2026.12.1
say "flow replay-check --all --build-id shop-2026.12.1-broken   # exits 3: it would break running orders"
flow replay-check --all --build-id shop-2026.12.1-broken || echo "(exit code $?)"

say "flow update $RUN change-address --args '{\"address\": \"too late\"}'   # exits 1: it ended"
flow update $RUN change-address --args '{"address": "too late"}' || echo "(exit code $?)"

status=$(flow show $RUN --json | json_field 'd["status"]')
echo
echo "order $RUN: $status"
[ "$status" = "Completed" ]
