"""`flow prune --archive`: N ended runs pruned and archived by one real process.

    .venv/bin/python bench/prune.py [--runs 10000] [--backends sqlite,postgres]

Each backend gets a fresh database with N runs that ended at once (started through the
engine's API, not timed). The figure is the wall time of one `flow prune --ended-before 0s
--archive DIR --yes` process, start-up included, until every run is deleted and its history
is on disk; and the longest single delete transaction it made (what a worker could have waited
for). Target on SQLite: at least 2,000 runs/s.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from common import DEFAULT_PG, ROOT, fresh_database

from flow_cli import Runtime, WorkflowContext
from flow_cli.model.commands import RuntimeCommand

runtime = Runtime(build_id="bench-prune")


@runtime.workflow("order")
def order(ctx: WorkflowContext) -> RuntimeCommand:
    return ctx.complete({"total": ctx.input["n"] * 3, "lines": ctx.input["lines"]})


def measure(backend: str, runs: int, pg_url: str) -> tuple[float, dict[str, float], int]:
    from flow_cli.engine.engine import Engine
    from flow_cli.store import open_store

    with fresh_database(backend, pg_url) as (url, scratch):
        building = f"{url}?synchronous=NORMAL" if backend == "sqlite" else url
        with Engine(open_store(building), [runtime]) as engine:
            lines = [{"sku": f"sku-{i}", "qty": i} for i in range(5)]
            for index in range(runs):
                engine.start("order", {"n": index, "lines": lines}, run_id=f"order-{index:06d}")
        archive = Path(scratch) / "archive"
        archive.mkdir()
        env = dict(os.environ, PYTHONPATH=str(ROOT), FLOW_DB=url, NO_COLOR="1")
        env.pop("FLOW_CONFIG", None)
        command = [sys.executable, "-m", "flow_cli", "--json", "prune", "--ended-before", "0s"]
        command += ["--archive", str(archive), "--yes"]
        started = time.perf_counter()
        done = subprocess.run(
            command, env=env, cwd=scratch, capture_output=True, text=True, check=False
        )
        elapsed = time.perf_counter() - started
        if done.returncode != 0:
            raise SystemExit(f"flow prune failed: {done.stderr}")
        report = json.loads(done.stdout)
        files = sum(1 for _ in archive.rglob("*.json"))
        return elapsed, report, files


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10_000)
    parser.add_argument("--backends", default="sqlite")
    parser.add_argument("--pg-url", default=DEFAULT_PG)
    args = parser.parse_args()
    for backend in args.backends.split(","):
        elapsed, report, files = measure(backend, args.runs, args.pg_url)
        print(
            f"{backend:8} {report['pruned']} runs pruned and archived ({files} files) in "
            f"{elapsed:.2f} s: {report['pruned'] / elapsed:.0f} runs/s (one process, start-up "
            f"included); {report['batches']} batches, longest delete transaction "
            f"{report['longest_batch_ms']:.1f} ms"
        )


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    main()
