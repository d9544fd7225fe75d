"""Record the golden histories in workflows_example/histories/ with the previous build.

    .venv/bin/python scripts/record_golden_histories.py

Runs of build ``shop-2026.11.1`` (``orders_v1``), driven on an in-memory store with a fixed
clock, exported in the ``flow export`` format. Tests replay them against every build, and so can
you: ``flow replay-check --file workflows_example/histories/*.json --build-id shop-2026.12.1``.
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
from flow_cli.store.memory import MemoryStore  # noqa: E402
from workflows_example import orders_v1  # noqa: E402

OUT = ROOT / "workflows_example" / "histories"
ORDER = {"sku": "sku-8842", "quantity": 2, "amount": 10.99, "card": "4000-flaky", "parcels": ["p1"]}


def main() -> None:
    os.environ["FLOW_EXAMPLE_LEDGER"] = str(Path(tempfile.mkdtemp()) / "ledger.jsonl")
    clock = ManualClock()
    engine = Engine(MemoryStore(), [orders_v1.runtime], clock=clock, worker_id="golden-worker")

    engine.start("order", ORDER, run_id="order-v1-completed")
    engine.start("order", {**ORDER, "card": "4242"}, run_id="order-v1-awaiting-approval")
    engine.tick(until_idle=True)
    token = engine.snapshot("order-v1-completed").hooks["approval"].token
    engine.resolve_hook(token, {"approved": True, "by": "ops@example.com"})
    for _ in range(6):
        engine.tick(until_idle=True)
        clock.advance(30)
    engine.signal("order-v1-completed", "shipped", {"tracking": "TRK-1"})
    engine.tick(until_idle=True)

    OUT.mkdir(parents=True, exist_ok=True)
    for run_id in ("order-v1-completed", "order-v1-awaiting-approval"):
        # Test fixtures: complete, so replay compares tokens and ctx.random() values too.
        document = export_document(run_id, engine.history(run_id), include_secrets=True)
        (OUT / f"{run_id}.json").write_text(json.dumps(document, indent=2) + "\n")
        print(f"wrote {OUT / run_id}.json ({len(document['events'])} events)")


if __name__ == "__main__":
    main()
