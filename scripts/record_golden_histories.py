"""Record the golden histories in workflows_example/histories/ with the previous build.

    .venv/bin/python scripts/record_golden_histories.py [RUN_ID...]

Runs of build ``shop-2026.11.1`` (``orders_v1``), driven on an in-memory store with a fixed
clock, exported in the ``flow export`` format; ``order-v1-upgraded-completed`` is re-pinned to
``shop-2026.12.1`` (``flow upgrade``) while it waits for its approval and ends under that build.
Name run ids to write only those files (the others would change: each run draws a new seed).
Tests replay them against every build, and so can you:
``flow replay-check --file workflows_example/histories/*.json --build-id shop-2026.12.1``.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from flow_cli.engine.engine import Engine  # noqa: E402
from flow_cli.engine.export import export_document  # noqa: E402
from flow_cli.model.clock import ManualClock  # noqa: E402
from flow_cli.ops.upgrade import upgrade_runs  # noqa: E402
from flow_cli.store.memory import MemoryStore  # noqa: E402
from workflows_example import orders, orders_v1  # noqa: E402

OUT = ROOT / "workflows_example" / "histories"
ORDER = {"sku": "sku-8842", "quantity": 2, "amount": 10.99, "card": "4000-flaky", "parcels": ["p1"]}


def main() -> None:
    os.environ["FLOW_EXAMPLE_LEDGER"] = str(Path(tempfile.mkdtemp()) / "ledger.jsonl")
    clock = ManualClock()
    engine = Engine(MemoryStore(), [orders_v1.runtime], clock=clock, worker_id="golden-worker")
    completed = ("order-v1-completed", "order-v1-upgraded-completed")

    engine.start("order", ORDER, run_id="order-v1-completed")
    engine.start("order", {**ORDER, "card": "4242"}, run_id="order-v1-awaiting-approval")
    engine.start("order", ORDER, run_id="order-v1-upgraded-completed")
    engine.tick(until_idle=True)
    # The operator deploys shop-2026.12.1 and moves the third run to it (`flow upgrade`).
    engine = Engine(
        engine.store, [orders.runtime], clock=clock, worker_id="golden-worker-2026.12.1"
    )
    upgrade_runs(
        engine, "shop-2026.11.1", "shop-2026.12.1", run_ids=["order-v1-upgraded-completed"]
    )
    for run_id in completed:
        token = engine.snapshot(run_id).hooks["approval"].token
        engine.resolve_hook(token, {"approved": True, "by": "ops@example.com"})
    both = Engine(
        engine.store,
        [orders_v1.runtime, orders.runtime],
        clock=clock,
        worker_id="golden-worker",
    )
    for _ in range(6):
        both.tick(until_idle=True)
        clock.advance(30)
    for run_id in completed:
        both.signal(run_id, "shipped", {"tracking": "TRK-1"})
    both.tick(until_idle=True)

    wanted = set(sys.argv[1:])
    OUT.mkdir(parents=True, exist_ok=True)
    for run_id in ("order-v1-completed", "order-v1-awaiting-approval", *completed[1:]):
        if wanted and run_id not in wanted:
            continue
        # Test fixtures: complete, so replay compares tokens and ctx.random() values too.
        document = export_document(run_id, engine.history(run_id), include_secrets=True)
        (OUT / f"{run_id}.json").write_text(json.dumps(document, indent=2) + "\n")
        print(f"wrote {OUT / run_id}.json ({len(document['events'])} events)")


if __name__ == "__main__":
    main()
